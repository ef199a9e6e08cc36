//! Log-epoch rotation (SPEC §2.1 backup-restore rule; docs/src/sql/lifecycle.md
//! `syncular.rotate_log_epoch`).
//!
//! Per partition: a new unpredictable `logEpoch`, `epoch_required = true`
//! (wire-version-1 requests are refused from now on,
//! `sync.client_wire_unsupported`), and its client records deleted (their
//! cursors describe the old timeline). Version-2 clients get the reset
//! response on their next request, discard their synced state, re-bootstrap
//! and replay their outbox — each replay answered from its kept outcome
//! (`cached`) or applied in the new continuity. Each rotated partition also
//! gets a `syncular_scopes` notification for every actor, delivered at
//! COMMIT: gateways reload their sessions, see the new epoch and send
//! `reset-required` (SPEC §8) — the realtime fence.

use crate::engine::clock;
use crate::engine::error::EngineResult;
use crate::engine::notify;
use crate::store::lifecycle::rotate::{self as store, Rotated};

/// Rotates `partition` (created rotated when unknown), or every registered
/// partition when `None`. Errors: clock, store failures.
pub fn rotate(partition: Option<&str>) -> EngineResult<Vec<Rotated>> {
    let now = clock::now_ms()?;
    let rotated = store::rotate(partition, now)?;
    for r in &rotated {
        notify::notify_scopes(&r.partition, None)?;
    }
    Ok(rotated)
}
