//! Statements over the schema marker: `syncular.sync_schema_versions` (one
//! row per registered version, the current one is the highest) and
//! `syncular.sync_schema_tables` (one row per table of the current version,
//! with its stored codec layout).

use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;

use crate::store::error::{StoreError, StoreResult};

/// The current version row.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVersion {
    /// `version`.
    pub version: i64,
    /// The row's `xmin`, as text: changes whenever the row is rewritten,
    /// so (version, xmin) keys the backend cache.
    pub row_xmin: String,
    /// The registered IR.
    pub ir: Value,
    /// Postgres schema of the app tables.
    pub app_schema: String,
}

/// One row of `sync_schema_tables`.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTable {
    /// IR table name.
    pub tbl: String,
    /// Version that last wrote this row.
    pub version: i64,
    /// Postgres schema of the app table.
    pub app_schema: String,
    /// Postgres name of the app table.
    pub app_table: String,
    /// `[{"name","type","nullable"}, …]` in IR order.
    pub layout: Value,
}

/// Serializes registrations: `LOCK TABLE syncular.sync_schema_versions IN
/// EXCLUSIVE MODE` until the end of the transaction. Readers (the sync
/// round's marker lookups) are not blocked; a concurrent registration waits
/// and then sees this one's committed marker.
pub fn lock_schema_marker() -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update("LOCK TABLE syncular.sync_schema_versions IN EXCLUSIVE MODE", None, &[])
            .map(|_| ())
            .map_err(StoreError::spi("lock_schema_marker"))
    })
}

/// The schema fence's first key ("SYNS"; the second is 0): a
/// transaction-scoped advisory lock that orders sync requests against a
/// schema change. A request takes it **shared** (by a direct call of the
/// lock function, no statement) *before* it reads the schema marker ([`crate::store::round::context::read`]; for
/// `syncular.commit`, the realtime calls, `partition_stats` and
/// `drop_partition_batch`, `engine::schema::require_fenced_schema`); a
/// registration takes it **exclusively** before anything else (before
/// [`lock_schema_marker`]). So a request either finishes before the change
/// starts, or reads the new marker in a snapshot taken after the change
/// committed — it never encodes or decodes app-table payloads with a layout
/// the table no longer has (a push that read the old marker and then waited
/// on the bump's `ALTER TABLE` used to read rewritten payloads with the old
/// layout, or write old-layout payloads into the widened table). Plain SQL
/// writes do not take it: their statement locks the app table before its
/// capture trigger reads the marker, which orders them against the bump's
/// `ALTER TABLE` already. A REPEATABLE READ or SERIALIZABLE caller's snapshot
/// may predate the fence: those callers also run
/// [`confirm_marker_in_snapshot`] (40001 after a concurrent change).
pub const SCHEMA_FENCE_CLASS: i32 = 0x5359_4E53;


/// Takes the schema fence shared until the end of the transaction (a
/// request about to read the marker; see [`SCHEMA_FENCE_CLASS`]), by a
/// direct call of the lock function (no statement): the caller's next
/// statement takes its snapshot after it. Waits for a schema change in
/// progress. Errors: none of its own (a cancel or deadlock while waiting
/// unwinds as a Postgres ERROR); `StoreResult` for its callers' `?`.
pub fn share_schema_fence() -> StoreResult<()> {
    crate::store::push::locks::take_shared_pair(SCHEMA_FENCE_CLASS, 0);
    Ok(())
}

/// Takes the schema fence exclusively until the end of the transaction (a
/// registration; see [`SCHEMA_FENCE_CLASS`]):
/// waits until every request that read the marker has ended, and requests
/// arriving meanwhile wait for this transaction. Errors: SPI failures (a
/// `lock_timeout` the caller set, a deadlock with a transaction that holds
/// it shared and waits on this one).
pub fn take_schema_fence() -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update("SELECT pg_catalog.pg_advisory_xact_lock($1, 0)", None, &[DatumWithOid::from(SCHEMA_FENCE_CLASS)])
            .map(|_| ())
            .map_err(StoreError::spi("take_schema_fence"))
    })
}

/// Under REPEATABLE READ or SERIALIZABLE, confirms that the marker row of
/// `version` the transaction's snapshot shows is still the current one:
/// `SELECT … FOR SHARE` of it raises 40001 (could not serialize access due
/// to concurrent update) when a schema change committed after the snapshot
/// was taken — every change rewrites that row ([`touch_current_version`]).
/// The fence alone cannot order such a caller: its snapshot predates the
/// fence. A no-op under READ COMMITTED (every statement reads the latest
/// marker after the fence). Errors: SPI failures, 40001.
pub fn confirm_marker_in_snapshot(version: i64) -> StoreResult<()> {
    // SAFETY: a backend global, read on the backend's own thread.
    let isolation = unsafe { pg_sys::XactIsoLevel };
    if isolation < pg_sys::XACT_REPEATABLE_READ as i32 {
        return Ok(());
    }
    Spi::connect_mut(|client| {
        crate::store::spi::plan_cache::execute(
            client,
            "SELECT 1 FROM syncular.sync_schema_versions WHERE version = $1 FOR SHARE",
            None,
            &[DatumWithOid::from(version)],
        )
        .map(|_| ())
        .map_err(StoreError::spi("confirm_marker_in_snapshot"))
    })
}

/// Rewrites the current version row unchanged, giving it a new `xmin`: every
/// backend's schema cache (keyed by `(version, xmin)`) reloads at its next
/// request, and a REPEATABLE READ transaction whose snapshot shows the old
/// row fails [`confirm_marker_in_snapshot`]. Every schema change runs it: a
/// version bump (before inserting the new version's row), a write
/// validator's (un)registration. No-op before the first registration.
pub fn touch_current_version() -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "UPDATE syncular.sync_schema_versions SET version = version \
                  WHERE version = (SELECT max(version) FROM syncular.sync_schema_versions)",
                None,
                &[],
            )
            .map(|_| ())
            .map_err(StoreError::spi("touch_current_version"))
    })
}

/// `(version, xmin)` of the current version row; `None` before the first
/// registration. Cheap (primary-key index, one row): the per-request cache
/// check.
pub fn current_version_key() -> StoreResult<Option<(i64, String)>> {
    const STATEMENT: &str = "current_version_key";
    Spi::connect_mut(|client| {
        // Runs once per sync request: through the backend's kept plan.
        let rows = crate::store::spi::plan_cache::execute(
            client,
            "SELECT version, xmin::text FROM syncular.sync_schema_versions ORDER BY version DESC LIMIT 1",
            Some(1),
            &[],
        )
        .map_err(StoreError::spi(STATEMENT))?;
        let Some(row) = rows.into_iter().next() else { return Ok(None) };
        let version: Option<i64> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
        let xmin: Option<String> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
        Ok(version.zip(xmin))
    })
}

/// The current version row (highest version), if any.
pub fn load_current_version() -> StoreResult<Option<StoredVersion>> {
    const STATEMENT: &str = "load_current_version";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT version, xmin::text, ir, app_schema FROM syncular.sync_schema_versions \
                  ORDER BY version DESC LIMIT 1",
                Some(1),
                &[],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let Some(row) = rows.into_iter().next() else { return Ok(None) };
        let version: Option<i64> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
        let row_xmin: Option<String> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
        let ir: Option<JsonB> = row.get(3).map_err(StoreError::spi(STATEMENT))?;
        let app_schema: Option<String> = row.get(4).map_err(StoreError::spi(STATEMENT))?;
        match (version, row_xmin, ir, app_schema) {
            (Some(version), Some(row_xmin), Some(ir), Some(app_schema)) => {
                Ok(Some(StoredVersion { version, row_xmin, ir: ir.0, app_schema }))
            }
            _ => Err(StoreError::new(STATEMENT, "NULL in sync_schema_versions")),
        }
    })
}

/// Every row of `sync_schema_tables`, ordered by name.
pub fn load_schema_tables() -> StoreResult<Vec<StoredTable>> {
    const STATEMENT: &str = "load_schema_tables";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT tbl, version, app_schema, app_table, layout \
                   FROM syncular.sync_schema_tables ORDER BY tbl",
                None,
                &[],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let tbl: Option<String> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
            let version: Option<i64> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
            let app_schema: Option<String> = row.get(3).map_err(StoreError::spi(STATEMENT))?;
            let app_table: Option<String> = row.get(4).map_err(StoreError::spi(STATEMENT))?;
            let layout: Option<JsonB> = row.get(5).map_err(StoreError::spi(STATEMENT))?;
            match (tbl, version, app_schema, app_table, layout) {
                (Some(tbl), Some(version), Some(app_schema), Some(app_table), Some(layout)) => {
                    out.push(StoredTable { tbl, version, app_schema, app_table, layout: layout.0 })
                }
                _ => return Err(StoreError::new(STATEMENT, "NULL in sync_schema_tables")),
            }
        }
        Ok(out)
    })
}

/// Inserts the row of a newly registered version.
pub fn insert_schema_version(
    version: i64,
    ir: &Value,
    app_schema: &str,
    registered_at_ms: i64,
) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO syncular.sync_schema_versions(version, ir, app_schema, registered_at_ms) \
                 VALUES ($1, $2, $3, $4)",
                None,
                &[version.into(), JsonB(ir.clone()).into(), app_schema.into(), registered_at_ms.into()],
            )
            .map(|_| ())
            .map_err(StoreError::spi("insert_schema_version"))
    })
}

/// Deletes every `sync_schema_tables` row (before writing the new version's).
pub fn delete_schema_tables() -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update("DELETE FROM syncular.sync_schema_tables", None, &[])
            .map(|_| ())
            .map_err(StoreError::spi("delete_schema_tables"))
    })
}

/// Inserts one `sync_schema_tables` row.
pub fn insert_schema_table(table: &StoredTable) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update(
                "INSERT INTO syncular.sync_schema_tables(tbl, version, app_schema, app_table, layout) \
                 VALUES ($1, $2, $3, $4, $5)",
                None,
                &[
                    table.tbl.as_str().into(),
                    table.version.into(),
                    table.app_schema.as_str().into(),
                    table.app_table.as_str().into(),
                    JsonB(table.layout.clone()).into(),
                ],
            )
            .map(|_| ())
            .map_err(StoreError::spi("insert_schema_table"))
    })
}

/// Deletes the `sync_row_scopes` entries of a retired table (every
/// partition: an administrative statement, not part of the sync round).
pub fn delete_row_scopes_of_table(tbl: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| {
        client
            .update("DELETE FROM syncular.sync_row_scopes WHERE tbl = $1", None, &[tbl.into()])
            .map(|_| ())
            .map_err(StoreError::spi("delete_row_scopes_of_table"))
    })
}

/// The IR of the newest registered version that declared a table named
/// `tbl` (`(version, ir)`), if any: the layout a retired table's commit log
/// was written under.
pub fn latest_version_declaring(tbl: &str) -> StoreResult<Option<(i64, Value)>> {
    const STATEMENT: &str = "latest_version_declaring";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT version, ir FROM syncular.sync_schema_versions \
                  WHERE ir->'tables' @> pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('name', $1::text)) \
                  ORDER BY version DESC LIMIT 1",
                Some(1),
                &[tbl.into()],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let Some(row) = rows.into_iter().next() else { return Ok(None) };
        let version: Option<i64> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
        let ir: Option<JsonB> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
        match (version, ir) {
            (Some(version), Some(ir)) => Ok(Some((version, ir.0))),
            _ => Err(StoreError::new(STATEMENT, "NULL in sync_schema_versions")),
        }
    })
}
