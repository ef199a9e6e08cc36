//! `sync_row_scopes` statements (SPEC §3.1, §4.7): the scope index over the
//! current rows that bootstrap pages read through. A row's entries are
//! replaced on every upsert and removed with the row, always through the
//! `sync_row_scopes_by_row (partition, tbl, row_id)` index.

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

/// The router form of [`insert_row_scopes`] (`syncular.router_statements`):
/// `INSERT … VALUES`, which Citus sends to one shard.
const ROW_SCOPES_VALUES: crate::store::values_insert::ValuesInsert = crate::store::values_insert::ValuesInsert {
    head: "INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id)",
    row: "($1, $2, {}, {}, $3)",
    tail: " ON CONFLICT DO NOTHING",
};

/// Inserts the scope entries `(variable, value)` of one row (duplicates
/// ignored). A no-op for an empty list. Errors: SPI failures.
pub fn insert_row_scopes(
    partition: &str,
    table: &str,
    row_id: &str,
    scopes: &[(String, String)],
) -> StoreResult<()> {
    if scopes.is_empty() {
        return Ok(());
    }
    if crate::settings::router_statements() {
        let rows = scopes
            .iter()
            .map(|(var, value)| vec![DatumWithOid::from(var.as_str()), DatumWithOid::from(value.as_str())])
            .collect();
        return Spi::connect_mut(|client| {
            ROW_SCOPES_VALUES.execute(
                client,
                &[DatumWithOid::from(partition), DatumWithOid::from(table), DatumWithOid::from(row_id)],
                rows,
            )
        })
        .map(|_| ())
        .map_err(StoreError::spi("insert_row_scopes"));
    }
    let var: Vec<String> = scopes.iter().map(|s| s.0.clone()).collect();
    let value: Vec<String> = scopes.iter().map(|s| s.1.clone()).collect();
    Spi::connect_mut(|client| {
        plan_cache::execute(client,
            "INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id) \
             SELECT $1, $2, u.var, u.value, $3 FROM unnest($4::text[], $5::text[]) AS u(var, value) \
             ON CONFLICT DO NOTHING",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(table),
                DatumWithOid::from(row_id),
                DatumWithOid::from(var),
                DatumWithOid::from(value),
            ],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("insert_row_scopes"))
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
