//! The whole-commit validator (SPEC §6.8): one host SQL function
//! `f(commit jsonb) returns jsonb`, called once per new commit of a push or
//! `syncular.commit` after every operation was staged (and passed its §6.7
//! write validator) and before the commit is logged — inside the commit's
//! subtransaction, so the function reads the candidate state: the
//! commit's own writes are visible to its queries, sibling operations
//! included, whatever their order. Never on a replay (the stored outcome
//! answers), nor for a commit an operation already terminated. Captured
//! plain SQL writes do not run it (a statement is not a proposed commit).
//!
//! Input: `{"clientId", "clientCommitId", "actorId", "partition",
//! "operations": [{"opIndex", "op", "table", "rowId", "row", "stored",
//! "storedServerVersion", "nextServerVersion"}, …]}` — rows as for the
//! write validator (`null` when absent; the delete of an absent row is
//! evidence too, with no rows and no versions).
//!
//! Output: SQL NULL (or JSON `null`) accepts; `{"opIndex"?, "code",
//! "message"?, "details"?}` rejects, attributed to `opIndex` (default 0),
//! with the rules of [`crate::engine::validators`] for code, message and
//! details. An `opIndex` that names no operation, or an ERROR the function
//! raises (transient classes aside, which fail the request), rejects the
//! commit with `sync.constraint_violation` at operation 0.

use serde_json::{json, Value};

use crate::engine::error::EngineResult;
use crate::engine::validators::{parse_answer, Rejection};
use crate::store::auth::resolver::ResolverName;
use crate::store::validator_store;

/// What the commit validator decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Accepted: the commit goes on to the log.
    Accept,
    /// A deliberate rejection attributed to operation `op_index`.
    Reject {
        /// The operation the rejection names.
        op_index: i32,
        /// Code, message, details.
        rejection: Rejection,
    },
    /// A rejection naming no operation of the commit (a host bug: the
    /// generic `sync.constraint_violation`).
    BadIndex(String),
}

/// `syncular.set_commit_validator(fn)`: registers `function` as the
/// whole-commit validator, or removes it (`None`). Same checks and fence as
/// [`crate::engine::schema::hooks::set_write_validator`], with the signature
/// `(commit jsonb) returns jsonb`. Errors: `syncular.no_schema`,
/// `syncular.invalid_validator` (22023).
pub fn set_commit_validator(function: Option<pgrx::pg_sys::Oid>) -> EngineResult<()> {
    crate::engine::schema::hooks::set_single(validator_store::SingleFunction::CommitValidator, function, "a commit validator")
}

/// One operation's evidence (module docs).
#[allow(clippy::too_many_arguments)]
pub fn evidence(
    op_index: i32,
    op: &str,
    table: &str,
    row_id: &str,
    row: Option<Value>,
    stored: Option<Value>,
    stored_version: Option<i64>,
    next_version: Option<i64>,
) -> Value {
    json!({
        "opIndex": op_index, "op": op, "table": table, "rowId": row_id,
        "row": row, "stored": stored,
        "storedServerVersion": stored_version, "nextServerVersion": next_version,
    })
}

/// The function's input (module docs).
pub fn input(client_id: &str, client_commit_id: &str, actor_id: &str, partition: &str, operations: Vec<Value>) -> Value {
    json!({
        "clientId": client_id, "clientCommitId": client_commit_id,
        "actorId": actor_id, "partition": partition, "operations": operations,
    })
}

/// Runs the commit validator `oid` on `input` (a commit of `operations`
/// operations). Errors: `syncular.validator_malformed` (39000),
/// `syncular.invalid_validator` (dropped, reshaped, or its owner no longer a
/// superuser: `validators::resolve`); an ERROR it raises unwinds.
pub fn validate(oid: pgrx::pg_sys::Oid, input: &Value, operations: usize) -> EngineResult<Verdict> {
    let validator = crate::engine::validators::resolve(oid, "the commit validator")?;
    let out = crate::engine::validators::call(&validator, input, |problem| {
        crate::engine::validators::malformed(&validator, "commit validator", problem)
    })?;
    parse_output(&validator, out, operations)
}

fn parse_output(validator: &ResolverName, out: Option<Value>, operations: usize) -> EngineResult<Verdict> {
    let Some((rejection, rest)) = parse_answer(validator, "commit validator", out, &["opIndex"])? else {
        return Ok(Verdict::Accept);
    };
    let op_index = match rest.get("opIndex") {
        None | Some(Value::Null) => 0,
        // A whole number, also when jsonb arithmetic made it `1.0`.
        Some(v) => match v.as_i64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e9).map(|f| f as i64)).and_then(|i| i32::try_from(i).ok()) {
            Some(i) if i >= 0 && usize::try_from(i).is_ok_and(|i| i < operations) => i,
            _ => return Ok(Verdict::BadIndex(format!("the commit validator named operation {v}, which the commit does not have"))),
        },
    };
    Ok(Verdict::Reject { op_index, rejection })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v() -> ResolverName {
        ResolverName { schema: "public".into(), name: "whole".into(), owner: "postgres".into(), owner_is_superuser: true }
    }

    #[test]
    fn null_accepts_and_a_rejection_names_its_operation() {
        assert_eq!(parse_output(&v(), None, 2).unwrap(), Verdict::Accept);
        let Verdict::Reject { op_index, rejection } =
            parse_output(&v(), Some(json!({"opIndex": 1, "code": "order.total", "message": "too much"})), 2).unwrap()
        else {
            panic!("a rejection")
        };
        assert_eq!((op_index, rejection.code.as_str(), rejection.message.as_str()), (1, "order.total", "too much"));
        let Verdict::Reject { op_index, .. } = parse_output(&v(), Some(json!({"code": "x"})), 2).unwrap() else { panic!() };
        assert_eq!(op_index, 0, "a rejection without opIndex names the first operation");
    }

    #[test]
    fn an_index_outside_the_commit_is_a_bad_index_and_a_reserved_code_is_malformed() {
        let Verdict::Reject { op_index, .. } = parse_output(&v(), Some(json!({"opIndex": 1.0, "code": "x"})), 2).unwrap() else {
            panic!("1.0 names operation 1")
        };
        assert_eq!(op_index, 1);
        for bad in [json!(2), json!(-1), json!("0"), json!(1.5)] {
            assert!(matches!(parse_output(&v(), Some(json!({"opIndex": bad, "code": "x"})), 2).unwrap(), Verdict::BadIndex(_)), "{bad}");
        }
        let err = parse_output(&v(), Some(json!({"code": "sync.x"})), 1).unwrap_err();
        assert!(err.to_string().starts_with("syncular.validator_malformed: commit validator public.whole"), "{err}");
    }
}
