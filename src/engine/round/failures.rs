//! `ROUND_FAILURE` reports (wire version 3; `crates/protocol/WIRE_V3.md`):
//! a client names, on its next request, the code of its last round that
//! failed where the server could not see it. The report is kept per client
//! and code (`sync_round_failures`) for operators and never changes the
//! round's outcome: it is recorded once the request's client is bound, in
//! the request's transaction (a round that fails afterwards loses it with
//! everything else it wrote; the client reports its next failure again).

use syncular_protocol::request::Request;

use super::Halves;
use crate::engine::auth::caller::Caller;
use crate::engine::error::EngineResult;
use crate::store::round::context::ClientRow;
use crate::store::round::failures::{self, RoundFailureRow};

/// Records one report of `code` by `client_id` in `partition` at `now_ms`.
/// Errors: store failures.
pub fn record(partition: &str, client_id: &str, code: &str, now_ms: i64) -> EngineResult<()> {
    Ok(failures::record(partition, client_id, code, now_ms)?)
}

/// Every report kept for `partition`, newest first. Errors: store failures.
pub fn list(partition: &str) -> EngineResult<Vec<RoundFailureRow>> {
    Ok(failures::list(partition)?)
}

/// Records the request's `ROUND_FAILURE` report (wire version 3,
/// [`record`]) once per request: not by the pull
/// half of a request whose push half (a separate `syncular.push` call)
/// already did, and only for a client record bound to the caller's actor —
/// `bound` when the binding was written or checked, else `existing` decides
/// (a round that ends at the schema floor or an epoch reset, before the
/// binding). Never fails the round for the report's sake beyond a store
/// failure.
pub(super) fn record_round_failure(
    caller: &Caller<'_>,
    req: &Request,
    halves: Halves,
    bound: bool,
    existing: Option<&ClientRow>,
    now_ms: i64,
) -> EngineResult<()> {
    let Some(code) = req.round_failure.as_deref() else { return Ok(()) };
    if halves == Halves::PullOnly && !req.commits.is_empty() {
        return Ok(());
    }
    let client_id = req.header.client_id.as_str();
    let known = bound || existing.is_some_and(|row| row.actor_id == caller.actor_id);
    if !known || client_id.contains('\0') {
        return Ok(());
    }
    record(caller.partition, client_id, code, now_ms)
}
