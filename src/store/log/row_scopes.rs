//! `sync_row_scopes` statements (SPEC §3.1, §4.7): the scope index over the
//! current rows that bootstrap pages read through. A push removes a deleted
//! row's entries here, through the `sync_row_scopes_by_row (partition, tbl,
//! row_id)` index; the entries of the rows it inserts are written with its
//! log ([`crate::store::log::request`]), and an update keeps them (scope columns
//! are immutable on update, §3.4). An adopted app table's entries are rebuilt
//! from its rows ([`rebuild_row_scopes`]).

use pgrx::datum::DatumWithOid;
use pgrx::spi::{quote_identifier, Spi};

use crate::store::app_table_ddl::{qualified_name, PARTITION_COLUMN, ROW_ID_COLUMN, SCOPES_COLUMN};
use crate::store::spi::plan_cache;
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
    crate::store::pull::window::explain_json(DELETE_ROW_SCOPES_SQL, &args, false)
        .map_err(StoreError::spi("explain_delete_row_scopes"))
}

/// Rebuilds the `sync_row_scopes` entries of an adopted app table from each
/// row's `_sync_scopes` (`{"<variable>": "<value>"}`, the same entries a
/// push writes), keeping only `variables` the table declares. Run after
/// `schema_store::delete_row_scopes_of_table`; duplicates are ignored.
pub fn rebuild_row_scopes(app_schema: &str, table: &str, variables: &[String]) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        let sql = format!(
            "INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id) \
             SELECT t.{p}, $1, s.key, s.value, t.{r} \
               FROM {t} AS t CROSS JOIN LATERAL pg_catalog.jsonb_each_text(t.{sc}) AS s(key, value) \
              WHERE s.key = ANY($2::text[]) AND s.value IS NOT NULL \
             ON CONFLICT DO NOTHING",
            p = quote_identifier(PARTITION_COLUMN),
            r = quote_identifier(ROW_ID_COLUMN),
            sc = quote_identifier(SCOPES_COLUMN),
            t = qualified_name(app_schema, table),
        );
        client
            .update(sql.as_str(), None, &[table.into(), variables.to_vec().into()])
            .map(|_| ())
            .map_err(StoreError::spi("rebuild_row_scopes"))
    })
}
