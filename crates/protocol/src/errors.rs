//! The SSP2 error catalog (§10) and the protocol crate's error type.
//!
//! Every code the project produces is an [`ErrorCode`]; its `category`,
//! `retryable` flag and `recommendedAction` are fixed by the §10.2 table and
//! live here only. [`ProtocolError`] is the one error type of this crate: a
//! catalog code plus a human-readable message (§10.1 `message`, never parsed).

use std::fmt;

/// §10.1 `category`: the coarse class a client handles generically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// `not-found`: the resource does not exist (or no longer).
    NotFound,
    /// `forbidden`: the actor may not do this.
    Forbidden,
    /// `invalid-request`: the request itself is malformed or refused.
    InvalidRequest,
    /// `internal`: a server-side fault.
    Internal,
    /// `auth-required`: authentication is missing or expired.
    AuthRequired,
    /// `schema-mismatch`: client artifacts and server schema disagree.
    SchemaMismatch,
    /// `conflict`: a `baseVersion` conflict (§6.2).
    Conflict,
    /// `reset-required`: the client must rebootstrap.
    ResetRequired,
    /// `scope-revoked`: a subscription lost its grant (§3.3).
    ScopeRevoked,
    /// `rate-limited`: a request or connection cap was hit.
    RateLimited,
}

impl Category {
    /// The wire spelling, e.g. `"invalid-request"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::NotFound => "not-found",
            Category::Forbidden => "forbidden",
            Category::InvalidRequest => "invalid-request",
            Category::Internal => "internal",
            Category::AuthRequired => "auth-required",
            Category::SchemaMismatch => "schema-mismatch",
            Category::Conflict => "conflict",
            Category::ResetRequired => "reset-required",
            Category::ScopeRevoked => "scope-revoked",
            Category::RateLimited => "rate-limited",
        }
    }

    /// Every category, in the order above.
    pub const ALL: &'static [Category] = &[
        Category::NotFound,
        Category::Forbidden,
        Category::InvalidRequest,
        Category::Internal,
        Category::AuthRequired,
        Category::SchemaMismatch,
        Category::Conflict,
        Category::ResetRequired,
        Category::ScopeRevoked,
        Category::RateLimited,
    ];

    /// Parses a wire spelling; `None` outside the closed §10.1 set.
    pub fn parse(s: &str) -> Option<Category> {
        Category::ALL.iter().copied().find(|c| c.as_str() == s)
    }

    /// The HTTP status of an HTTP-level error body (§1.1) of this category,
    /// as the reference server answers it: invalid-request, schema-mismatch
    /// and reset-required 400, auth-required 401, forbidden and scope-revoked
    /// 403, not-found 404, conflict 409, rate-limited 429, internal 500.
    pub fn http_status(self) -> u16 {
        match self {
            Category::InvalidRequest | Category::SchemaMismatch | Category::ResetRequired => 400,
            Category::AuthRequired => 401,
            Category::Forbidden | Category::ScopeRevoked => 403,
            Category::NotFound => 404,
            Category::Conflict => 409,
            Category::RateLimited => 429,
            Category::Internal => 500,
        }
    }
}

/// §10.1 `recommendedAction`: the client-runtime action verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecommendedAction {
    /// Client action `refreshAuth`.
    RefreshAuth,
    /// Client action `checkPermissions`.
    CheckPermissions,
    /// Client action `fixRequest`.
    FixRequest,
    /// Client action `resetClientId`.
    ResetClientId,
    /// Client action `regenerateClient`.
    RegenerateClient,
    /// Client action `upgradeClient`.
    UpgradeClient,
    /// Client action `resolveConflict`.
    ResolveConflict,
    /// Client action `rebootstrap`.
    Rebootstrap,
    /// Client action `forceResync`.
    ForceResync,
    /// Client action `retryLater`.
    RetryLater,
    /// Client action `splitBatch`.
    SplitBatch,
    /// Client action `inspectServer`.
    InspectServer,
}

impl RecommendedAction {
    /// The wire spelling, e.g. `"fixRequest"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecommendedAction::RefreshAuth => "refreshAuth",
            RecommendedAction::CheckPermissions => "checkPermissions",
            RecommendedAction::FixRequest => "fixRequest",
            RecommendedAction::ResetClientId => "resetClientId",
            RecommendedAction::RegenerateClient => "regenerateClient",
            RecommendedAction::UpgradeClient => "upgradeClient",
            RecommendedAction::ResolveConflict => "resolveConflict",
            RecommendedAction::Rebootstrap => "rebootstrap",
            RecommendedAction::ForceResync => "forceResync",
            RecommendedAction::RetryLater => "retryLater",
            RecommendedAction::SplitBatch => "splitBatch",
            RecommendedAction::InspectServer => "inspectServer",
        }
    }

    /// Parses a wire spelling; `None` outside the closed §10.1 set.
    pub fn parse(s: &str) -> Option<RecommendedAction> {
        [
            RecommendedAction::RefreshAuth,
            RecommendedAction::CheckPermissions,
            RecommendedAction::FixRequest,
            RecommendedAction::ResetClientId,
            RecommendedAction::RegenerateClient,
            RecommendedAction::UpgradeClient,
            RecommendedAction::ResolveConflict,
            RecommendedAction::Rebootstrap,
            RecommendedAction::ForceResync,
            RecommendedAction::RetryLater,
            RecommendedAction::SplitBatch,
            RecommendedAction::InspectServer,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
    }
}

macro_rules! catalog {
    ($( $variant:ident = $code:literal, $cat:ident, $retry:literal, $action:ident; )*) => {
        /// Every code of the §10.2 catalog (wire versions 1–3).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode { $( #[doc = concat!("`", $code, "`")] $variant, )* }

        impl ErrorCode {
            /// All catalog codes, in §10.2 table order.
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$variant, )* ];

            /// The stable wire identifier, e.g. `"sync.invalid_request"`.
            pub fn as_str(self) -> &'static str {
                match self { $( ErrorCode::$variant => $code, )* }
            }

            /// §10.2 category of this code.
            pub fn category(self) -> Category {
                match self { $( ErrorCode::$variant => Category::$cat, )* }
            }

            /// §10.2: may the same request succeed later unchanged?
            pub fn retryable(self) -> bool {
                match self { $( ErrorCode::$variant => $retry, )* }
            }

            /// §10.2 recommended client action.
            pub fn recommended_action(self) -> RecommendedAction {
                match self { $( ErrorCode::$variant => RecommendedAction::$action, )* }
            }

            /// Looks a wire identifier up in the catalog; `None` for host codes
            /// and anything else outside §10.2.
            pub fn parse(code: &str) -> Option<ErrorCode> {
                match code { $( $code => Some(ErrorCode::$variant), )* _ => None }
            }
        }
    };
}

catalog! {
    OperationUnknown = "operation.unknown", NotFound, false, RegenerateClient;
    OperationForbidden = "operation.forbidden", Forbidden, false, CheckPermissions;
    OperationInvalidRequest = "operation.invalid_request", InvalidRequest, false, FixRequest;
    OperationResultTooLarge = "operation.result_too_large", InvalidRequest, false, FixRequest;
    OperationStorageUnsupported = "operation.storage_unsupported", Internal, false, InspectServer;
    OperationQueryFailed = "operation.query_failed", Internal, false, InspectServer;
    OperationExecutionFailed = "operation.execution_failed", Internal, false, InspectServer;
    AuthRequired = "sync.auth_required", AuthRequired, true, RefreshAuth;
    AuthLeaseRequired = "sync.auth_lease_required", AuthRequired, true, RefreshAuth;
    AuthLeaseRevoked = "sync.auth_lease_revoked", AuthRequired, true, RefreshAuth;
    Forbidden = "sync.forbidden", Forbidden, false, CheckPermissions;
    InvalidRequest = "sync.invalid_request", InvalidRequest, false, FixRequest;
    InvalidClientId = "sync.invalid_client_id", InvalidRequest, false, ResetClientId;
    InvalidSubscription = "sync.invalid_subscription", InvalidRequest, false, FixRequest;
    EmptyCommit = "sync.empty_commit", InvalidRequest, false, FixRequest;
    UnknownTable = "sync.unknown_table", SchemaMismatch, false, RegenerateClient;
    RowMissing = "sync.row_missing", NotFound, false, ForceResync;
    VersionConflict = "sync.version_conflict", Conflict, false, ResolveConflict;
    ConstraintViolation = "sync.constraint_violation", InvalidRequest, false, FixRequest;
    MissingScopes = "sync.missing_scopes", Internal, false, InspectServer;
    CrdtMergeFailed = "sync.crdt_merge_failed", Internal, false, InspectServer;
    IdempotencyCacheMiss = "sync.idempotency_cache_miss", Internal, true, RetryLater;
    TooManyOperations = "sync.too_many_operations", InvalidRequest, false, SplitBatch;
    NotFound = "sync.not_found", NotFound, false, ForceResync;
    SegmentExpired = "sync.segment_expired", NotFound, true, RetryLater;
    CursorExpired = "sync.cursor_expired", ResetRequired, false, Rebootstrap;
    ScopeRevoked = "sync.scope_revoked", ScopeRevoked, false, CheckPermissions;
    RateLimited = "sync.rate_limited", RateLimited, true, RetryLater;
    SchemaMismatch = "sync.schema_mismatch", SchemaMismatch, false, RegenerateClient;
    ClientSchemaUnsupported = "sync.client_schema_unsupported", SchemaMismatch, false, UpgradeClient;
    ClientWireUnsupported = "sync.client_wire_unsupported", SchemaMismatch, false, UpgradeClient;
    WebsocketConnectionLimit = "sync.websocket_connection_limit", RateLimited, true, RetryLater;
    BlobNotFound = "blob.not_found", NotFound, false, FixRequest;
    BlobForbidden = "blob.forbidden", Forbidden, false, CheckPermissions;
    BlobHashMismatch = "blob.hash_mismatch", InvalidRequest, false, FixRequest;
    BlobTooLarge = "blob.too_large", InvalidRequest, false, FixRequest;
    // Wire version 3 (the 0.49 generation) — see the catalog notes below.
    InternalError = "sync.internal_error", Internal, true, RetryLater;
    SchemaNotReady = "sync.schema_not_ready", SchemaMismatch, true, RetryLater;
    RowDeleted = "sync.row_deleted", NotFound, false, ForceResync;
    ReferenceViolation = "sync.reference_violation", InvalidRequest, false, FixRequest;
    PresenceTooLarge = "presence.too_large", InvalidRequest, false, FixRequest;
    PresenceForbidden = "presence.forbidden", Forbidden, false, CheckPermissions;
}

// Catalog notes for the wire-version-3 additions (the codes the
// `syncular-ssp2` / `syncular-client` / `syncular-authority` 0.49 sources
// use that a server can produce), metadata as the 0.49 client treats them:
// - `sync.internal_error`: a server-side fault; the client's
//   `retryable_failure_code` retries it ("a §10.2 code the catalog marks
//   retryable"), so retryable + retryLater.
// - `sync.schema_not_ready`: the server's schema is not (yet) the one the
//   request needs (the authority: "migrated by a newer schema"); retried by
//   the client like `sync.internal_error`, so schema-mismatch, retryable.
// - `sync.row_deleted`: a push result — an unversioned upsert hit a row
//   deleted within the retention horizon (§6.2); the client pairs it with
//   `sync.row_missing` ("answers it with sync.row_deleted or
//   sync.row_missing"), so the same metadata as `sync.row_missing`.
// - `sync.reference_violation`: a push result — a write breaks a declared
//   reference (retryable: false in the authority); like
//   `sync.constraint_violation`.
// - `presence.too_large` / `presence.forbidden`: the two publisher-directed
//   realtime presence errors (§8.6.2, [`crate::realtime::PresenceError`]).
// Not added: client-local codes the client documents as "never a wire code
// (§10.3)" or produces only on its own side (`sync.offline`,
// `sync.transport_failed`, `sync.local_corrupt`, `sync.outbox_incompatible`,
// `sync.realtime_unavailable`, `sync.idle_timeout`, `sync.timeout`,
// `sync.validation_failed`, `transport.*`, `client.*`), and the local
// authority's own (`sync.attach_rejected`, `sync.authority_unavailable`).

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The protocol crate's error: a §10.2 code and a human-readable message.
///
/// `Display` renders `"<code>: <message>"`, the form the extension puts at
/// the start of a Postgres error message (`sync.invalid_request: …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError {
    /// The §10.2 code; fixes category, retryable and recommended action.
    pub code: ErrorCode,
    /// Human-readable detail (§10.1 `message`); never parsed.
    pub message: String,
}

impl ProtocolError {
    /// An error with `code` and a human-readable `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ProtocolError { code, message: message.into() }
    }

    /// Shorthand for the most common decode error, `sync.invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ProtocolError::new(ErrorCode::InvalidRequest, message)
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ProtocolError {}

/// Result alias used across the protocol crate.
pub type Result<T, E = ProtocolError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_parse() {
        for &code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
        }
        assert_eq!(ErrorCode::parse("app.custom"), None);
    }

    #[test]
    fn catalog_metadata_matches_spec_rows() {
        let c = ErrorCode::TooManyOperations;
        assert_eq!(c.category().as_str(), "invalid-request");
        assert!(!c.retryable());
        assert_eq!(c.recommended_action().as_str(), "splitBatch");
        let c = ErrorCode::SegmentExpired;
        assert_eq!(c.category().as_str(), "not-found");
        assert!(c.retryable());
        assert_eq!(ErrorCode::ALL.len(), 42);
        let c = ErrorCode::SchemaNotReady;
        assert_eq!((c.category().as_str(), c.retryable()), ("schema-mismatch", true));
        assert_eq!(ErrorCode::parse("sync.row_deleted"), Some(ErrorCode::RowDeleted));
        assert_eq!(ErrorCode::InternalError.recommended_action().as_str(), "retryLater");
    }

    #[test]
    fn closed_sets_parse_their_spellings_and_map_to_http() {
        for &code in ErrorCode::ALL {
            assert_eq!(Category::parse(code.category().as_str()), Some(code.category()));
            let action = code.recommended_action();
            assert_eq!(RecommendedAction::parse(action.as_str()), Some(action));
        }
        assert_eq!(Category::parse("Internal"), None);
        assert_eq!(RecommendedAction::parse("retry"), None);
        assert_eq!(ErrorCode::AuthRequired.category().http_status(), 401);
        assert_eq!(ErrorCode::VersionConflict.category().http_status(), 409);
        assert_eq!(ErrorCode::RateLimited.category().http_status(), 429);
        assert_eq!(ErrorCode::UnknownTable.category().http_status(), 400);
        assert_eq!(ErrorCode::NotFound.category().http_status(), 404);
        assert_eq!(ErrorCode::ScopeRevoked.category().http_status(), 403);
        assert_eq!(ErrorCode::MissingScopes.category().http_status(), 500);
    }

    #[test]
    fn display_starts_with_code() {
        let e = ProtocolError::invalid("bad magic");
        assert_eq!(e.to_string(), "sync.invalid_request: bad magic");
    }
}
