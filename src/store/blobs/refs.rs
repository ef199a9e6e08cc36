//! `sync_blob_refs` statements: the blob reference index (§5.9.4) —
//! `(partition, tbl, row_id, blob_id)` for every `blob_ref` value of a
//! current row, maintained in the transaction of the row's write (pushes,
//! `syncular.commit`, captured plain SQL writes) and read by download
//! authorization (§5.9.5) and the orphan sweep (§5.9.2).

use pgrx::datum::DatumWithOid;
use pgrx::spi::{quote_identifier, Spi, SpiClient};

use super::blob_id_expr;
use crate::store::app_table_ddl::{qualified_name, PARTITION_COLUMN, ROW_ID_COLUMN};
use crate::store::spi::plan_cache;
use crate::store::values_insert::ValuesInsert;
use crate::store::{StoreError, StoreResult};

/// Removes every reference of one row. Errors: SPI failures.
pub fn delete_row_blob_refs(partition: &str, table: &str, row_id: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "DELETE FROM syncular.sync_blob_refs WHERE partition = $1 AND tbl = $2 AND row_id = $3",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(table), DatumWithOid::from(row_id)],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("delete_row_blob_refs"))
}

/// The router form of [`insert_row_blob_refs`] (`syncular.router_statements`).
const REFS_VALUES: ValuesInsert = ValuesInsert {
    head: "INSERT INTO syncular.sync_blob_refs (partition, tbl, row_id, blob_id)",
    row: "($1, $2, $3, {})",
    tail: " ON CONFLICT DO NOTHING",
};

/// Adds references of one row to `blob_ids` (existing ones kept). A no-op
/// for an empty list. Errors: SPI failures.
pub fn insert_row_blob_refs(partition: &str, table: &str, row_id: &str, blob_ids: &[String]) -> StoreResult<()> {
    if blob_ids.is_empty() {
        return Ok(());
    }
    let shared = [DatumWithOid::from(partition), DatumWithOid::from(table), DatumWithOid::from(row_id)];
    if crate::settings::router_statements() {
        let rows = blob_ids.iter().map(|id| vec![DatumWithOid::from(id.as_str())]).collect();
        return Spi::connect_mut(|client| REFS_VALUES.execute(client, &shared, rows))
            .map(|_| ())
            .map_err(StoreError::spi("insert_row_blob_refs"));
    }
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            "INSERT INTO syncular.sync_blob_refs (partition, tbl, row_id, blob_id) \
             SELECT $1, $2, $3, u.id FROM unnest($4::text[]) AS u(id) ON CONFLICT DO NOTHING",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(table),
                DatumWithOid::from(row_id),
                DatumWithOid::from(blob_ids.to_vec()),
            ],
        )?;
        Ok(())
    })
    .map_err(StoreError::spi("insert_row_blob_refs"))
}

/// The distinct tables whose rows of `partition` reference the blob.
/// Errors: SPI failures.
pub fn referencing_tables(partition: &str, blob_id: &str) -> StoreResult<Vec<String>> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT DISTINCT tbl FROM syncular.sync_blob_refs WHERE partition = $1 AND blob_id = $2 ORDER BY tbl",
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(blob_id)],
        )?;
        let mut out = Vec::new();
        for row in t {
            if let Some(tbl) = row.get::<String>(1)? {
                out.push(tbl);
            }
        }
        Ok(out)
    })
    .map_err(StoreError::spi("blob_referencing_tables"))
}

/// One page of the rows of app table `qualified` (IR table `table`) that
/// reference the blob, after row id `after` (keyset, ascending), at most
/// `limit`: `(row_id, stored scopes JSON text)`. Errors: SPI failures.
pub fn referencing_rows(
    qualified: &str,
    partition: &str,
    table: &str,
    blob_id: &str,
    after: &str,
    limit: i64,
) -> StoreResult<Vec<(String, String)>> {
    let sql = format!(
        "SELECT r.row_id, a._sync_scopes::text FROM syncular.sync_blob_refs r \
           JOIN {qualified} a ON a._sync_partition = r.partition AND a._sync_row_id = r.row_id \
         WHERE r.partition = $1 AND a._sync_partition = $1 AND r.tbl = $2 AND r.blob_id = $3 AND r.row_id > $4 \
         ORDER BY r.row_id LIMIT $5"
    );
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            &sql,
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(table),
                DatumWithOid::from(blob_id),
                DatumWithOid::from(after),
                DatumWithOid::from(limit),
            ],
        )?;
        let mut out = Vec::with_capacity(t.len());
        for row in t {
            if let (Some(id), Some(scopes)) = (row.get::<String>(1)?, row.get::<String>(2)?) {
                out.push((id, scopes));
            }
        }
        Ok(out)
    })
    .map_err(StoreError::spi("blob_referencing_rows"))
}

/// `CROSS JOIN LATERAL (VALUES (<id of t.c1>), …) AS x(id)` over the
/// `blob_ref` columns `columns` of a row alias `t`.
fn ids_lateral(columns: &[String]) -> String {
    let values = columns
        .iter()
        .map(|c| format!("({})", blob_id_expr(&format!("t.{}", quote_identifier(c)))))
        .collect::<Vec<_>>()
        .join(", ");
    format!("CROSS JOIN LATERAL (VALUES {values}) AS x(id)")
}

/// The distinct blob ids the rows of relation `source` (a transition table
/// of a captured statement, registered with SPI by the caller) reference
/// through `columns`. `plan_key` prefixes the SQL (see the capture log).
/// Errors: SPI failures.
pub fn captured_blob_ids(client: &mut SpiClient<'_>, plan_key: &str, source: &str, columns: &[String]) -> StoreResult<Vec<String>> {
    let sql = format!(
        "/* {plan_key} */ SELECT DISTINCT x.id FROM {source} t {} WHERE x.id IS NOT NULL ORDER BY x.id",
        ids_lateral(columns)
    );
    let t = plan_cache::execute(client, &sql, None, &[]).map_err(StoreError::spi("captured_blob_ids"))?;
    let mut out = Vec::with_capacity(t.len());
    for row in t {
        if let Some(id) = row.get::<String>(1).map_err(StoreError::spi("captured_blob_ids"))? {
            out.push(id);
        }
    }
    Ok(out)
}

/// Removes the references of every row of `source` (a transition table) of
/// IR table `table`. Errors: SPI failures.
pub fn captured_delete_refs(client: &mut SpiClient<'_>, plan_key: &str, source: &str, partition: &str, table: &str) -> StoreResult<()> {
    let sql = format!(
        "/* {plan_key} */ DELETE FROM syncular.sync_blob_refs r USING {source} t \
         WHERE r.partition = $1 AND r.tbl = $2 AND r.row_id = t.{ROW_ID_COLUMN}"
    );
    plan_cache::execute(client, &sql, None, &[DatumWithOid::from(partition), DatumWithOid::from(table)])
        .map(|_| ())
        .map_err(StoreError::spi("captured_delete_blob_refs"))
}

/// Adds the references of every row of `source` (a transition table) of IR
/// table `table` through `columns`. Errors: SPI failures.
pub fn captured_insert_refs(
    client: &mut SpiClient<'_>,
    plan_key: &str,
    source: &str,
    partition: &str,
    table: &str,
    columns: &[String],
) -> StoreResult<()> {
    let sql = format!(
        "/* {plan_key} */ INSERT INTO syncular.sync_blob_refs (partition, tbl, row_id, blob_id) \
         SELECT DISTINCT $1::text, $2::text, t.{ROW_ID_COLUMN}, x.id FROM {source} t {} WHERE x.id IS NOT NULL \
         ON CONFLICT DO NOTHING",
        ids_lateral(columns)
    );
    plan_cache::execute(client, &sql, None, &[DatumWithOid::from(partition), DatumWithOid::from(table)])
        .map(|_| ())
        .map_err(StoreError::spi("captured_insert_blob_refs"))
}

/// Deletes every reference of IR table `table` (every partition): a retired
/// or re-adopted table. Errors: SPI failures.
pub fn delete_blob_refs_of_table(table: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client.update("DELETE FROM syncular.sync_blob_refs WHERE tbl = $1", None, &[DatumWithOid::from(table)])?;
        Ok(())
    })
    .map_err(StoreError::spi("delete_blob_refs_of_table"))
}

/// Rebuilds the references of an adopted app table from its `blob_ref`
/// projection columns `columns` (every partition; run after
/// [`delete_blob_refs_of_table`]). A no-op without such columns.
/// Errors: SPI failures.
pub fn rebuild_blob_refs(app_schema: &str, table: &str, columns: &[String]) -> StoreResult<()> {
    if columns.is_empty() {
        return Ok(());
    }
    let sql = format!(
        "INSERT INTO syncular.sync_blob_refs (partition, tbl, row_id, blob_id) \
         SELECT DISTINCT t.{p}, $1::text, t.{r}, x.id FROM {rel} AS t {lateral} WHERE x.id IS NOT NULL \
         ON CONFLICT DO NOTHING",
        p = quote_identifier(PARTITION_COLUMN),
        r = quote_identifier(ROW_ID_COLUMN),
        rel = qualified_name(app_schema, table),
        lateral = ids_lateral(columns),
    );
    Spi::connect_mut(|client| {
        client.update(sql.as_str(), None, &[DatumWithOid::from(table)])?;
        Ok(())
    })
    .map_err(StoreError::spi("rebuild_blob_refs"))
}
