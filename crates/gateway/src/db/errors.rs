//! §10.1 errors: the JSON object every failure becomes, and how a Postgres error maps to it.
//!
//! Contract §0: every ERROR the extension raises carries its §10.1 object as JSON in DETAIL;
//! the HTTP status follows its `category` ([`category_status`]), and such an error is never
//! retried whatever its SQLSTATE (the extension classified it). Errors without a parsable
//! DETAIL are classified here: a message starting with a §10.2 code (`sync.forbidden: …`) is
//! rebuilt from the catalog; SQLSTATE classes 40/53/57/08 and lost connections are
//! *transient* (retried, then `syncular.unavailable`, 503); anything else is
//! `syncular.internal` (500). Messages never carry tokens (the gateway never puts one in SQL).
//! Clients are answered transient host codes as catalog codes they retry
//! ([`ApiError::to_json`]).

use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use syncular_protocol::{Category, ErrorCode};

/// A §10.1 error: the JSON body (`code`, `message`, `category`, `retryable`,
/// `recommendedAction`, optional `details`) and its HTTP status.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status of the category (or 503 for an exhausted transient failure).
    pub status: StatusCode,
    /// The §10.1 object.
    pub body: Map<String, Value>,
    /// The failure may succeed on retry without change (transient database trouble):
    /// callers retry before answering.
    pub transient: bool,
}

/// HTTP status of a §10.1 category (contract §0, `Category::http_status` of the protocol
/// crate): invalid-request 400, auth-required 401, forbidden 403, scope-revoked 403, not-found
/// 404, conflict 409, schema-mismatch 400, reset-required 400, rate-limited 429, internal 500;
/// an unknown category is 500.
pub fn category_status(category: &str) -> StatusCode {
    Category::parse(category)
        .and_then(|c| StatusCode::from_u16(c.http_status()).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl ApiError {
    /// A catalog error (§10.2 fixes category, retryable, action) with `message`.
    pub fn code(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut body = Map::new();
        body.insert("code".into(), code.as_str().into());
        body.insert("message".into(), message.into().into());
        body.insert("category".into(), code.category().as_str().into());
        body.insert("retryable".into(), code.retryable().into());
        body.insert("recommendedAction".into(), code.recommended_action().as_str().into());
        ApiError { status: category_status(code.category().as_str()), body, transient: false }
    }

    /// A host error (`syncular.*`) with explicit metadata and status.
    pub fn host(status: StatusCode, code: &str, message: impl Into<String>, retryable: bool, action: &str) -> Self {
        let mut body = Map::new();
        body.insert("code".into(), code.into());
        body.insert("message".into(), message.into().into());
        body.insert("category".into(), "internal".into());
        body.insert("retryable".into(), retryable.into());
        body.insert("recommendedAction".into(), action.into());
        ApiError { status, body, transient: false }
    }

    /// `syncular.unavailable` (503, retryable): the database is unreachable or kept failing
    /// transiently.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError::host(StatusCode::SERVICE_UNAVAILABLE, "syncular.unavailable", message, true, "retryLater")
    }

    /// `syncular.internal` (500).
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::host(StatusCode::INTERNAL_SERVER_ERROR, "syncular.internal", message, false, "inspectServer")
    }

    /// `sync.invalid_request` (400).
    pub fn invalid_request(message: impl Into<String>) -> Self {
        ApiError::code(ErrorCode::InvalidRequest, message)
    }

    /// `sync.auth_required` (401).
    pub fn auth_required(message: impl Into<String>) -> Self {
        ApiError::code(ErrorCode::AuthRequired, message)
    }

    /// The §10.1 `code`.
    pub fn code_str(&self) -> &str {
        self.body.get("code").and_then(Value::as_str).unwrap_or("syncular.internal")
    }

    /// The §10.1 object as JSON, as clients are answered it: a transient host code (the
    /// database kept failing, or no schema is registered yet) is answered as the catalog code
    /// the `syncular-client` 0.49 generation retries on its own — `sync.internal_error`,
    /// `sync.schema_not_ready` — with the host code in `details.hostCode` (0.49 clients read the
    /// code of a JSON error and retry only the codes they know; `crates/protocol/WIRE_V3.md`
    /// §2.8). Every other code is answered as is. Metrics and logs keep the host code
    /// ([`ApiError::code_str`]).
    pub fn to_json(&self) -> Value {
        let mut body = self.body.clone();
        let retried = match self.code_str() {
            "syncular.unavailable" => Some(ErrorCode::InternalError),
            "syncular.no_schema" => Some(ErrorCode::SchemaNotReady),
            _ => None,
        };
        if let Some(code) = retried {
            let host = body.insert("code".into(), code.as_str().into());
            body.insert("category".into(), code.category().as_str().into());
            body.insert("retryable".into(), code.retryable().into());
            body.insert("recommendedAction".into(), code.recommended_action().as_str().into());
            let details = body.entry("details").or_insert_with(|| Value::Object(Map::new()));
            if let (Value::Object(d), Some(host)) = (details, host) {
                d.insert("hostCode".into(), host);
            }
        }
        Value::Object(body)
    }

    /// Replaces the status (e.g. 413/415 for a transport-level rule).
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// Maps a Postgres error (see the module docs).
    pub fn from_pg(error: &tokio_postgres::Error) -> Self {
        let Some(db) = error.as_db_error() else {
            // Connection loss, I/O, protocol trouble: transient.
            let mut e = ApiError::unavailable(format!("database connection failed: {error}"));
            e.transient = true;
            return e;
        };
        from_db_error(db.code().code(), db.message(), db.detail())
    }
}

/// Maps the parts of a Postgres ERROR (SQLSTATE, message, DETAIL). A DETAIL that parses as a
/// §10.1 object was classified by the extension: it is answered as is and never retried,
/// whatever its SQLSTATE (a `rate-limited` error raised with 53000 stays a 429, not a
/// retried 503). SQLSTATE classes decide only for errors without such a DETAIL.
fn from_db_error(sqlstate: &str, message: &str, detail: Option<&str>) -> ApiError {
    if let Some(e) = detail.and_then(from_detail) {
        return e;
    }
    if is_transient_state(sqlstate) {
        let mut e = ApiError::unavailable(format!("database busy ({sqlstate}): {message}"));
        e.transient = true;
        return e;
    }
    from_message(message).unwrap_or_else(|| ApiError::internal(format!("database error {sqlstate}: {message}")))
}

/// SQLSTATE classes retried by the gateway: 40 (serialization failure, deadlock), 53
/// (insufficient resources), 57 (operator intervention: cancel, shutdown), 08 (connection).
pub fn is_transient_state(sqlstate: &str) -> bool {
    matches!(sqlstate.get(..2), Some("40" | "53" | "57" | "08"))
}

/// Parses a DETAIL that is a §10.1 object (needs string `code` and `category`).
fn from_detail(detail: &str) -> Option<ApiError> {
    let Value::Object(body) = serde_json::from_str::<Value>(detail).ok()? else { return None };
    let category = body.get("category")?.as_str()?.to_owned();
    let code = body.get("code")?.as_str()?;
    // The object store's waits are unavailability, not server faults: 503, retried by clients.
    let status = match code {
        "syncular.object_store_unavailable" | "syncular.blob_pending" => StatusCode::SERVICE_UNAVAILABLE,
        _ => category_status(&category),
    };
    Some(ApiError { status, body, transient: false })
}

/// Rebuilds the §10.1 object from a message `<code>: <message>` (extension builds without
/// DETAIL JSON): catalog codes from §10.2, host codes from contract §0.
fn from_message(message: &str) -> Option<ApiError> {
    let (code, rest) = message.split_once(": ")?;
    if let Some(c) = ErrorCode::parse(code) {
        return Some(ApiError::code(c, rest));
    }
    let (status, retryable, action) = match code {
        "syncular.invalid_argument" | "syncular.invalid_schema" | "syncular.schema_refused" => {
            let mut e = ApiError::host(StatusCode::BAD_REQUEST, code, rest, false, "fixRequest");
            e.body.insert("category".into(), "invalid-request".into());
            return Some(e);
        }
        "syncular.no_schema" => (StatusCode::INTERNAL_SERVER_ERROR, true, "retryLater"),
        "syncular.invalid_resolver" | "syncular.resolver_malformed" | "syncular.internal" => {
            (StatusCode::INTERNAL_SERVER_ERROR, false, "inspectServer")
        }
        _ => return None,
    };
    Some(ApiError::host(status, code, rest, retryable, action))
}

/// The JSON body of an HTTP error response.
pub fn error_json(e: &ApiError) -> Value {
    json!(e.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_json_wins_and_category_sets_status() {
        let e = from_detail(r#"{"code":"sync.forbidden","message":"no","category":"forbidden","retryable":false,"recommendedAction":"checkPermissions"}"#).unwrap();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert_eq!(e.code_str(), "sync.forbidden");
        assert!(from_detail("not json").is_none());
        assert!(from_detail(r#"{"code":"x"}"#).is_none());
    }

    #[test]
    fn a_parsed_detail_is_never_transient_whatever_its_sqlstate() {
        // rate-limited is raised with SQLSTATE 53000 (a "transient" class): the extension
        // classified it, so it is answered as its 429, never retried into a 503.
        let detail = r#"{"code":"sync.rate_limited","message":"slow down","category":"rate-limited","retryable":true,"recommendedAction":"retryLater"}"#;
        for sqlstate in ["53000", "40001", "57014", "08006", "P0001"] {
            let e = from_db_error(sqlstate, "sync.rate_limited: slow down", Some(detail));
            assert!(!e.transient, "{sqlstate}");
            assert_eq!((e.status.as_u16(), e.code_str()), (429, "sync.rate_limited"), "{sqlstate}");
        }
        // Without a §10.1 DETAIL the SQLSTATE class decides: retried, then 503.
        for detail in [None, Some("Process 12 waits for ShareLock"), Some(r#"{"code":"x"}"#)] {
            let e = from_db_error("40P01", "deadlock detected", detail);
            assert!(e.transient && e.status.as_u16() == 503 && e.code_str() == "syncular.unavailable", "{detail:?}");
        }
        let e = from_db_error("22023", "sync.forbidden: no", None);
        assert_eq!((e.transient, e.code_str()), (false, "sync.forbidden"));
        let e = from_db_error("XX000", "boom", None);
        assert_eq!((e.transient, e.status.as_u16()), (false, 500));
    }

    #[test]
    fn message_prefix_falls_back_to_the_catalog() {
        let e = from_message("sync.invalid_client_id: bound to another actor").unwrap();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.body["recommendedAction"], "resetClientId");
        assert_eq!(e.body["message"], "bound to another actor");
        let e = from_message("syncular.invalid_argument: partition is NULL").unwrap();
        assert_eq!((e.status, e.body["category"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid-request")));
        let e = from_message("syncular.resolver_malformed: bad").unwrap();
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(from_message("division by zero").is_none());
    }

    #[test]
    fn transient_host_codes_are_answered_as_codes_clients_retry() {
        let e = ApiError::unavailable("database busy");
        assert_eq!((e.code_str(), e.status.as_u16()), ("syncular.unavailable", 503), "metrics keep the host code");
        let j = e.to_json();
        assert_eq!((j["code"].as_str(), j["retryable"].as_bool()), (Some("sync.internal_error"), Some(true)), "{j}");
        assert_eq!(j["details"]["hostCode"], "syncular.unavailable");
        assert_eq!(j["message"], "database busy");
        let e = from_message("syncular.no_schema: no schema registered").unwrap();
        let j = e.to_json();
        assert_eq!((j["code"].as_str(), j["category"].as_str()), (Some("sync.schema_not_ready"), Some("schema-mismatch")), "{j}");
        assert_eq!(j["details"]["hostCode"], "syncular.no_schema");
        // A parsed extension DETAIL with details keeps them and gains the host code.
        let e = from_detail(r#"{"code":"syncular.no_schema","message":"m","category":"internal","retryable":true,"recommendedAction":"retryLater","details":{"x":1}}"#).unwrap();
        assert_eq!(e.to_json()["details"], serde_json::json!({"x": 1, "hostCode": "syncular.no_schema"}));
        // Everything else as is.
        for e in [ApiError::internal("bug"), ApiError::invalid_request("bad"), ApiError::code(ErrorCode::Forbidden, "no")] {
            assert_eq!(e.to_json(), Value::Object(e.body.clone()));
        }
    }

    #[test]
    fn statuses_per_category() {
        for (cat, status) in [
            ("invalid-request", 400),
            ("auth-required", 401),
            ("forbidden", 403),
            ("scope-revoked", 403),
            ("not-found", 404),
            ("conflict", 409),
            ("schema-mismatch", 400),
            ("reset-required", 400),
            ("rate-limited", 429),
            ("internal", 500),
        ] {
            assert_eq!(category_status(cat).as_u16(), status, "{cat}");
        }
        assert!(is_transient_state("40001") && is_transient_state("40P01") && is_transient_state("57014"));
        assert!(!is_transient_state("22023") && !is_transient_state("XX000"));
    }
}
