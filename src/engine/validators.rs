//! Write validators (SPEC §6.7): per IR table, a host SQL function
//! `f(write jsonb) returns jsonb` that accepts or rejects each write after
//! decode and scope authorization and right before the row's write — for
//! pushes, `syncular.commit` and captured plain SQL writes alike.
//!
//! Input (one object per operation):
//! `{"op": "upsert"|"delete", "table", "rowId", "row", "stored",
//!   "actorId", "partition"}` — `row` the row that will persist (after the
//! §3.4 scope-column strip), `null` for a delete; `stored` the stored row,
//! `null` for an insert; rows are objects keyed by column name, values as
//! `syncular.commit` renders them (`bytes` base64, `json` as JSON).
//! For a captured plain SQL write, `actorId` is the captured commit's actor
//! (`syncular.actor_id`, else the current role).
//!
//! Output: SQL NULL (or JSON `null`) accepts. A rejection is
//! `{"code": "…", "message"?: "…", "details"?: {…}}`: the commit is
//! `rejected` with one `error` record carrying `code` and `message`
//! (`retryable` false) and, with `details` (the §6.3.1 bounded object), a
//! `PUSH_RESULT_DETAILS` entry. Anything else, a code that is empty, over
//! 256 bytes or starts with a reserved prefix (`sync.`, `blob.`,
//! `operation.`, `presence.`, `client.`), or details outside §6.3.1 fail the
//! request with `syncular.validator_malformed` (39000): a host bug, loud.
//! An ERROR the validator raises rejects the commit with
//! `sync.constraint_violation`, except the transient classes (40, 53, 54,
//! 57, 58, XX), which fail the request as they do for the resolver.

use serde_json::{json, Value};
use syncular_protocol::frame_fields::Op;
use syncular_protocol::rejection_details::validate_details_json;
use syncular_protocol::row_codec::{render_row, Row};
use syncular_protocol::schema_ir::TableSchema;

use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::auth::resolver::ResolverName;
use crate::store::validator_store;

/// Longest host code a validator may return, in bytes.
pub const MAX_CODE_BYTES: usize = 256;

/// Prefixes reserved for the protocol's own codes (§6.7, §10.2, §10.3).
pub const RESERVED_PREFIXES: [&str; 5] = ["sync.", "blob.", "operation.", "presence.", "client."];

/// A deliberate rejection returned by a validator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The host code (never a reserved prefix).
    pub code: String,
    /// The host message.
    pub message: String,
    /// The §6.3.1 details object as JSON text, already validated.
    pub details: Option<String>,
}

/// One write to validate.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// The partition written.
    pub partition: &'a str,
    /// The acting actor.
    pub actor_id: &'a str,
    /// The IR table.
    pub table: &'a TableSchema,
    /// Upsert or delete.
    pub op: Op,
    /// The row's `rowId`.
    pub row_id: &'a str,
    /// The row that will persist (`None` for a delete).
    pub row: Option<&'a Row>,
    /// The stored row (`None` for an insert).
    pub stored: Option<&'a Row>,
}

pub(crate) fn invalid(message: String) -> EngineError {
    EngineError::host(HostCode::InvalidValidator, message)
}

pub fn malformed(validator: &ResolverName, kind: &str, message: impl std::fmt::Display) -> EngineError {
    EngineError::host(
        HostCode::ValidatorMalformed,
        format!("{kind} {}.{} {message}", validator.schema, validator.name),
    )
}

/// Refuses a validator (`what`) whose owner is not a superuser (it runs with
/// the extension owner's privileges). Errors: `syncular.invalid_validator`.
pub fn check_owner(signature: &str, what: &str, owner: &str, owner_is_superuser: bool) -> EngineResult<()> {
    if owner_is_superuser {
        return Ok(());
    }
    Err(invalid(format!(
        "{signature} cannot be {what}: it is owned by role {owner:?}, which is not a superuser \
         (validators run with the extension owner's privileges, so only a superuser may own one)"
    )))
}

/// The JSON a validator receives for `write` (module docs).
pub fn input(write: &Write<'_>) -> Value {
    let layout = write.table.layout();
    json!({
        "op": if write.op == Op::Delete { "delete" } else { "upsert" },
        "table": write.table.name,
        "rowId": write.row_id,
        "row": write.row.map_or(Value::Null, |r| render_row(layout, r)),
        "stored": write.stored.map_or(Value::Null, |r| render_row(layout, r)),
        "actorId": write.actor_id,
        "partition": write.partition,
    })
}

/// Longest rejection message kept, in bytes (a longer one is cut at a
/// character boundary and ends with `…`): it is stored and replayed with
/// every answer of the commit.
pub const MAX_MESSAGE_BYTES: usize = 1024;

thread_local! {
    /// Set while a validator runs ([`Running`]).
    static RUNNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks a validator call in progress until dropped (also when the call
/// raises and unwinds): the capture refuses plain SQL writes of synced
/// tables meanwhile ([`running`]).
pub struct Running(bool);

impl Running {
    /// Marks the call.
    pub fn begin() -> Running {
        Running(RUNNING.with(|r| r.replace(true)))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(self.0));
    }
}

/// Calls the validator-shaped function `function` on `input`, marked
/// [`Running`]: its answer (`None` = SQL NULL). An answer this extension
/// cannot read (a number beyond a 64-bit float, nesting deeper than 127
/// levels) is `malformed(problem)`; an ERROR the function raises unwinds.
pub fn call(
    function: &ResolverName,
    input: &Value,
    malformed: impl FnOnce(&str) -> EngineError,
) -> EngineResult<Option<Value>> {
    let _running = Running::begin();
    validator_store::call_validator(function, input).map_err(|e| match e.unreadable_json() {
        Some(problem) => malformed(problem),
        None => e.into(),
    })
}

/// `true` while a validator runs: a write it makes to a synced table would
/// be logged as its own commit ahead of the commit being validated (§6.7,
/// §6.8: a validator must not mutate storage), so the capture refuses it.
pub fn running() -> bool {
    RUNNING.with(std::cell::Cell::get)
}

/// Refuses `what` (a sync request, `syncular.commit`, a schema
/// registration…) while a validator or the reaction planner runs: such a
/// call would write the log or the schema from inside the commit being
/// checked (§6.7–§6.9: hooks must not mutate storage). Errors:
/// `syncular.write_refused` (0A000) — inside a hook it counts as the hook
/// raising.
pub fn refuse_reentry(what: &str) -> EngineResult<()> {
    if running() {
        return Err(EngineError::host(
            HostCode::WriteRefused,
            format!("{what} cannot be called from a write validator, the commit validator or the reaction planner"),
        ));
    }
    Ok(())
}

/// The registered function `oid` as the catalog describes it now, checked
/// again at every call: it must still exist (a dropped validator fails
/// closed), have the validator shape, and be owned by a superuser (an
/// owner changed since registration is refused). `what` names it in
/// errors. Errors: `syncular.invalid_validator` (22023).
pub fn resolve(oid: pgrx::pg_sys::Oid, what: &str) -> EngineResult<ResolverName> {
    let Some(now) = validator_store::function_now(oid)? else {
        return Err(invalid(format!(
            "{what} (function OID {}) no longer exists: register it again or remove the registration",
            u32::from(oid)
        )));
    };
    let signature = format!("{}.{}", now.name.schema, now.name.name);
    if !now.shape_ok {
        return Err(invalid(format!("{signature} is {what} but is no longer a plain (jsonb) returns jsonb function")));
    }
    check_owner(&signature, what, &now.name.owner, now.name.owner_is_superuser)?;
    Ok(now.name)
}

/// Runs the write validator `oid` on `write`. `Ok(None)` accepts,
/// `Ok(Some(_))` is a deliberate rejection. Errors:
/// `syncular.validator_malformed` (module docs), `syncular.invalid_validator`
/// ([`resolve`]); an ERROR the validator raises unwinds to the caller.
pub fn validate(oid: pgrx::pg_sys::Oid, write: &Write<'_>) -> EngineResult<Option<Rejection>> {
    let validator = resolve(oid, &format!("the write validator of table {:?}", write.table.name))?;
    let out = call(&validator, &input(write), |problem| malformed(&validator, "write validator", problem))?;
    parse_output(&validator, out)
}

fn parse_output(validator: &ResolverName, out: Option<Value>) -> EngineResult<Option<Rejection>> {
    Ok(parse_answer(validator, "write validator", out, &[])?.map(|(rejection, _)| rejection))
}

/// A validator's answer (module docs) from a validator of `kind` ("write
/// validator", "commit validator"): `None` accepts (SQL NULL or JSON
/// `null`); else the checked rejection and the object's other members,
/// which may only be `extra` ones. Errors: `syncular.validator_malformed`.
pub fn parse_answer(
    validator: &ResolverName,
    kind: &str,
    out: Option<Value>,
    extra: &[&str],
) -> EngineResult<Option<(Rejection, serde_json::Map<String, Value>)>> {
    let mut map = match out {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) => map,
        Some(other) => {
            let optional: Vec<&str> = ["message", "details"].iter().chain(extra).copied().collect();
            return Err(malformed(
                validator,
                kind,
                format_args!("returned {other}: expected NULL or an object with \"code\" and optional {optional:?}"),
            ));
        }
    };
    if let Some(key) = map.keys().find(|k| !matches!(k.as_str(), "code" | "message" | "details") && !extra.contains(&k.as_str())) {
        return Err(malformed(validator, kind, format_args!("returned a rejection with unknown member {key:?}")));
    }
    let code = match map.remove("code") {
        Some(Value::String(code)) => code,
        _ => return Err(malformed(validator, kind, "returned a rejection without a string \"code\"")),
    };
    let rejection = rejection(validator, kind, code, map.remove("message").as_ref(), map.remove("details").as_ref())?;
    Ok(Some((rejection, map)))
}

/// A rejection's code, message and details checked (module docs) for a
/// validator of `kind`. Errors: `syncular.validator_malformed`.
fn rejection(
    validator: &ResolverName,
    kind: &str,
    code: String,
    message: Option<&Value>,
    details: Option<&Value>,
) -> EngineResult<Rejection> {
    if code.is_empty() || code.len() > MAX_CODE_BYTES || code.contains('\0') {
        return Err(malformed(validator, kind, format_args!("returned code {code:?}: a code is 1–{MAX_CODE_BYTES} bytes")));
    }
    if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| code.starts_with(*p)) {
        return Err(malformed(
            validator,
            kind,
            format_args!("returned code {code:?}: the prefix {prefix:?} is reserved for protocol codes (§6.7)"),
        ));
    }
    let message = match message {
        None | Some(Value::Null) => format!("rejected by the {kind}"),
        Some(Value::String(m)) => capped(m),
        Some(_) => return Err(malformed(validator, kind, "returned a non-string \"message\"")),
    };
    let details = match details {
        None | Some(Value::Null) => None,
        Some(d) => {
            let text = d.to_string();
            validate_details_json(&text)
                .map_err(|e| malformed(validator, kind, format_args!("returned details outside §6.3.1: {}", e.message)))?;
            Some(text)
        }
    };
    Ok(Rejection { code, message, details })
}

/// `message` without NULs, at most [`MAX_MESSAGE_BYTES`] bytes.
fn capped(message: &str) -> String {
    let clean = message.replace('\0', "\u{FFFD}");
    if clean.len() <= MAX_MESSAGE_BYTES {
        return clean;
    }
    let mut end = MAX_MESSAGE_BYTES - '…'.len_utf8();
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &clean[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v() -> ResolverName {
        ResolverName { schema: "public".into(), name: "check".into(), owner: "postgres".into(), owner_is_superuser: true }
    }

    #[test]
    fn null_accepts_and_an_object_rejects() {
        assert_eq!(parse_output(&v(), None).unwrap(), None);
        assert_eq!(parse_output(&v(), Some(Value::Null)).unwrap(), None);
        let r = parse_output(&v(), Some(json!({"code": "invoice.closed", "message": "closed"}))).unwrap().unwrap();
        assert_eq!((r.code.as_str(), r.message.as_str(), r.details), ("invoice.closed", "closed", None));
        let r = parse_output(&v(), Some(json!({"code": "x"}))).unwrap().unwrap();
        assert_eq!(r.message, "rejected by the write validator");
    }

    #[test]
    fn reserved_prefixes_unknown_members_and_bad_details_are_malformed() {
        for out in [
            json!({"code": "sync.forbidden"}),
            json!({"code": "blob.x"}),
            json!({"code": "client.x"}),
            json!({"code": ""}),
            json!({"code": "x".repeat(MAX_CODE_BYTES + 1)}),
            json!({"code": 7}),
            json!({"message": "no code"}),
            json!({"code": "x", "extra": 1}),
            json!({"code": "x", "message": 5}),
            json!({"code": "x", "details": {"bogus": 1}}),
            json!(true),
            json!(["code"]),
        ] {
            let err = parse_output(&v(), Some(out.clone())).unwrap_err();
            assert!(err.to_string().starts_with("syncular.validator_malformed: write validator public.check"), "{out}: {err}");
        }
    }

    #[test]
    fn a_long_message_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let r = parse_output(&v(), Some(json!({"code": "x", "message": long}))).unwrap().unwrap();
        assert!(r.message.len() <= MAX_MESSAGE_BYTES && r.message.ends_with('…'), "{}", r.message.len());
        let short = parse_output(&v(), Some(json!({"code": "x", "message": "fine"}))).unwrap().unwrap();
        assert_eq!(short.message, "fine");
    }

    #[test]
    fn details_inside_the_bounds_are_kept_as_text() {
        let r = parse_output(&v(), Some(json!({"code": "x", "details": {"reason": "too_long", "fieldPaths": ["title"]}})))
            .unwrap()
            .unwrap();
        let kept: Value = serde_json::from_str(r.details.as_deref().unwrap()).unwrap();
        assert_eq!(kept, json!({"reason": "too_long", "fieldPaths": ["title"]}));
    }
}
