//! `sync_row_scopes` statements (SPEC §3.1, §4.7): the scope index over the
//! current rows that bootstrap pages read through. A push removes a deleted
//! row's entries here, through the `sync_row_scopes_by_row (partition, tbl,
//! row_id)` index; the entries of the rows it inserts are written with its
//! log ([`crate::store::push_log`]), and an update keeps them (scope columns
//! are immutable on update, §3.4).

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::plan_cache;
use crate::store::{StoreError, StoreResult};

/// The statement [`delete_row_scopes`] runs (public for the EXPLAIN test).
pub const DELETE_ROW_SCOPES_SQL: &str = "DELETE FROM syncular.sync_row_scopes \
     WHERE partition = $1 AND tbl = $2 AND row_id = $3";

/// Removes every scope entry of one row. Errors: SPI failures.
pub fn delete_row_scopes(partition: &str, table: &str, row_id: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            DELETE_ROW_SCOPES_SQL,
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(table),
                DatumWithOid::from(row_id),
            ],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("delete_row_scopes"))
}

/// `EXPLAIN (FORMAT JSON)` of [`DELETE_ROW_SCOPES_SQL`] for the given keys
/// (plan only, nothing deleted). Errors: SPI failures.
pub fn explain_delete_row_scopes(
    partition: &str,
    table: &str,
    row_id: &str,
) -> StoreResult<String> {
    let args = [
        DatumWithOid::from(partition),
        DatumWithOid::from(table),
        DatumWithOid::from(row_id),
    ];
    crate::store::pull_window::explain_json(DELETE_ROW_SCOPES_SQL, &args, false)
        .map_err(StoreError::spi("explain_delete_row_scopes"))
}
