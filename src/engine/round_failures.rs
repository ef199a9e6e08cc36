//! `ROUND_FAILURE` reports (wire version 3; `crates/protocol/WIRE_V3.md`):
//! a client names, on its next request, the code of its last round that
//! failed where the server could not see it. The report is kept per client
//! and code (`sync_round_failures`) for operators and never changes the
//! round's outcome: it is recorded once the request's client is bound, in
//! the request's transaction (a round that fails afterwards loses it with
//! everything else it wrote; the client reports its next failure again).

use crate::engine::error::EngineResult;
use crate::store::round_failures::{self, RoundFailureRow};

/// Records one report of `code` by `client_id` in `partition` at `now_ms`.
/// Errors: store failures.
pub fn record(partition: &str, client_id: &str, code: &str, now_ms: i64) -> EngineResult<()> {
    Ok(round_failures::record(partition, client_id, code, now_ms)?)
}

/// Every report kept for `partition`, newest first. Errors: store failures.
pub fn list(partition: &str) -> EngineResult<Vec<RoundFailureRow>> {
    Ok(round_failures::list(partition)?)
}
