//! The sync round's own statements (engine side: [`crate::engine::round`]):
//! the one context read before anything else ([`context`]) and the wire-3
//! `ROUND_FAILURE` reports ([`failures`]); the commit mode of a pull-only
//! gateway round ([`commit_asynchronously_when_alone`]).

use pgrx::pg_sys;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

pub mod context;
pub mod failures;

/// `SET LOCAL synchronous_commit TO off` for the current transaction — only
/// when the calling statement runs in its own implicit transaction (not
/// inside `BEGIN … COMMIT`, nor in a multi-statement simple query, where the
/// caller may have written rows of its own). Returns whether it did. Used by
/// `syncular.gateway_round` for a request without `PUSH_COMMIT` frames, whose
/// writes are bookkeeping only. Errors: SPI failures.
pub fn commit_asynchronously_when_alone() -> StoreResult<bool> {
    // SAFETY: reads the backend's transaction block state; no arguments.
    if unsafe { pg_sys::IsTransactionBlock() } {
        return Ok(false);
    }
    Spi::connect_mut(|client| {
        plan_cache::execute(client, "SELECT pg_catalog.set_config('synchronous_commit', 'off', true)", Some(1), &[])?;
        Ok(true)
    })
    .map_err(StoreError::spi("commit_asynchronously_when_alone"))
}
