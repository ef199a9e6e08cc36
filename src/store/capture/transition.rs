//! The transition tables of a captured statement (docs/src/guide/plain-sql.md "Writing with
//! plain SQL"): the names the capture triggers declare them under, their
//! registration with SPI, and the read that checks every row is in the
//! statement's partition. The log rows written from them:
//! [`crate::store::log::statement`]; their blob references:
//! [`crate::store::blobs::refs`].
//!
//! Each table has the app table's columns, so `_sync_row_id`,
//! `_sync_version`, `_sync_scopes` and `_sync_payload` are the values the
//! row trigger computed.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::{Spi, SpiClient};

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Transition table of inserted / updated rows (`REFERENCING NEW TABLE AS`).
pub const NEW_TABLE: &str = "syncular_new_rows";
/// Transition table of deleted rows (`REFERENCING OLD TABLE AS`).
pub const OLD_TABLE: &str = "syncular_old_rows";

/// What a captured statement did to its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapturedOp {
    /// Rows inserted (new row ids: scope entries added, tombstones cleared).
    Insert,
    /// Rows updated (scopes are immutable, so no index change).
    Update,
    /// Rows deleted (scope entries removed, tombstones written).
    Delete,
}

/// Runs `f` with an SPI connection on which the firing trigger's transition
/// tables are visible by name. Errors: SPI failures.
///
/// # Safety
/// `trigger_data` must be the `TriggerData` of the trigger call in progress.
pub unsafe fn with_transition_tables<T>(
    trigger_data: *mut pg_sys::TriggerData,
    f: impl FnOnce(&mut SpiClient<'_>) -> StoreResult<T>,
) -> StoreResult<T> {
    Spi::connect_mut(|client| {
        // SAFETY: called inside SPI_connect (Spi::connect_mut), with the live trigger data.
        let rc = unsafe { pg_sys::SPI_register_trigger_data(trigger_data) };
        if rc < 0 {
            return Err(StoreError::new("register_trigger_data", format!("SPI_register_trigger_data returned {rc}")));
        }
        f(client)
    })
}

/// How many rows of the statement's transition table (`op`'s) are not in
/// `partition` — 0 unless the partition setting changed mid-statement (a
/// nested statement). Errors: SPI failures.
pub fn rows_outside_partition(client: &mut SpiClient<'_>, plan_key: &str, partition: &str, op: CapturedOp) -> StoreResult<i64> {
    let source = if op == CapturedOp::Delete { OLD_TABLE } else { NEW_TABLE };
    plan_cache::execute(
        client,
        &format!("/* {plan_key} */ SELECT count(*) FROM {source} t WHERE t._sync_partition IS DISTINCT FROM $1"),
        Some(1),
        &[DatumWithOid::from(partition)],
    )
    .and_then(|t| t.first().get_one::<i64>())
    .map(Option::unwrap_or_default)
    .map_err(StoreError::spi("capture_rows_outside_partition"))
}

