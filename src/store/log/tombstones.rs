//! `sync_tombstones` reads of the push (wire version 3's tombstone rule: an
//! upsert without `baseVersion` does not recreate a row deleted within the
//! retention horizon; `crates/protocol/WIRE_V3.md`) under
//! `syncular.router_statements` — otherwise the insert probes it itself
//! ([`crate::store::app_rows::insert_app_row`]). The push log writes and
//! clears tombstones ([`crate::store::log::request`]); pruning deletes them with
//! the log.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Whether row `row_id` of IR table `tbl` in `partition` has a tombstone.
/// Errors: SPI failures.
pub fn exists(partition: &str, tbl: &str, row_id: &str) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT 1 FROM syncular.sync_tombstones WHERE partition = $1 AND tbl = $2 AND row_id = $3",
            Some(1),
            &[DatumWithOid::from(partition), DatumWithOid::from(tbl), DatumWithOid::from(row_id)],
        )?;
        Ok(!t.is_empty())
    })
    .map_err(StoreError::spi("tombstone_exists"))
}
