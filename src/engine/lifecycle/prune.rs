//! One bounded pruning batch (SPEC §4.6; docs/src/sql/lifecycle.md `syncular.prune_batch`).
//!
//! A call does one kind of work, the first that remains, and at most
//! `max_rows` of it:
//! 1. **the log**: the oldest ≤ `max_rows` commits at or below the horizon,
//!    with their changes, change-scope entries and the tombstones their
//!    deletes wrote, under the pruning fence
//!    ([`crate::store::lifecycle::fence`]) taken exclusively — a log reader
//!    of the partition waits at most this one batch;
//! 2. **stored push outcomes** recorded longer ago than
//!    `syncular.push_result_retention`;
//! 3. **client records** not updated for `syncular.client_retention`.
//!
//! Policies (docs/src/sql/lifecycle.md): outcomes outlive the log by far (a replay must keep
//! answering `cached`, §2.3); tombstones at or below the horizon serve no
//! pull (a cursor below the horizon is reset and re-bootstraps from the
//! current rows; one at or above it reads deletes from the log);
//! reactions (§6.9) are never touched here.

use crate::engine::clock;
use crate::engine::error::EngineResult;
use crate::settings::retention;
use crate::store::lifecycle::{fence, prune as store};

/// How long a batch waits in the fence's queue before it gives up for now.
pub const FENCE_WAIT_MS: i32 = 200;

/// What one batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneBatch {
    /// Log rows deleted.
    pub log: store::LogBatch,
    /// `sync_push_results` rows deleted.
    pub push_results: i64,
    /// `sync_clients` rows deleted.
    pub clients: i64,
    /// The fence could not be taken within [`FENCE_WAIT_MS`] (a long
    /// transaction reads the log): nothing was deleted; call again later.
    pub fence_busy: bool,
}

impl PruneBatch {
    /// Nothing was left to do.
    pub fn done(&self) -> bool {
        !self.fence_busy && *self == PruneBatch::default()
    }
}

/// Runs one batch of `partition` (module docs). Errors: clock, store failures.
pub fn batch(partition: &str, max_rows: i32) -> EngineResult<PruneBatch> {
    let now = clock::now_ms()?;
    let retention = retention();
    let mut out = PruneBatch::default();
    if store::log_below_horizon(partition)? {
        crate::engine::distribution::check_fence_placement()?;
        if !fence::exclusive(partition, FENCE_WAIT_MS)? {
            out.fence_busy = true;
            return Ok(out);
        }
        out.log = store::delete_log_batch(partition, max_rows)?;
        if out.log.commits > 0 {
            return Ok(out);
        }
    }
    out.push_results = store::delete_expired_push_results(
        partition,
        now.saturating_sub(retention.push_result_retention_ms),
        max_rows,
    )?;
    if out.push_results > 0 {
        return Ok(out);
    }
    out.clients = store::delete_expired_clients(partition, now.saturating_sub(retention.client_retention_ms), max_rows)?;
    // A pruned client's ROUND_FAILURE reports go with it (not counted: `clients` counts records).
    crate::store::round::failures::delete_orphans(partition, max_rows)?;
    Ok(out)
}
