//! App-table row statements of the push (SPEC §2.2, §6.2): read the stored
//! row, insert an absent row or update the read one (typed projection
//! columns + verbatim row-codec payload + `server_version` + stored scopes),
//! delete a row.
//!
//! App table layout (created by `register_schema`):
//! `_sync_partition text, _sync_row_id text, <projection columns…>,
//! _sync_version bigint, _sync_scopes jsonb, _sync_payload bytea,
//! _sync_column_versions bytea, PRIMARY KEY (_sync_partition, _sync_row_id)`. Identifiers come quoted from
//! the registered schema; every value is a bound parameter.

use pgrx::datum::DatumWithOid;
use pgrx::spi::quote_identifier;
use pgrx::pg_sys;
use pgrx::spi::Spi;
use syncular_protocol::row_codec::{ColumnType, RowValue};
use syncular_protocol::schema_ir::TableSchema;

use crate::store::app_table_ddl;

use crate::store::spi::{pinned_plan, plan_cache};
use crate::store::{StoreError, StoreResult};

/// How the store addresses one app table: its quoted qualified name and its
/// projection columns in layout (IR) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppTableSql {
    /// The IR table name (unquoted; the relation's name).
    pub table: String,
    /// The app schema (unquoted).
    pub app_schema: String,
    /// `"schema"."table"`, already quoted.
    pub qualified_name: String,
    /// Projection columns in layout order.
    pub columns: Vec<ProjectionColumn>,
}

impl AppTableSql {
    /// The app table `qualified_name` (already quoted; `app_schema` unquoted) of `table`: its
    /// projection columns quoted and typed exactly as `register_schema`
    /// created them ([`app_table_ddl::projection_type`]).
    pub fn for_table(app_schema: &str, qualified_name: &str, table: &TableSchema) -> AppTableSql {
        AppTableSql {
            table: table.name.clone(),
            app_schema: app_schema.to_owned(),
            qualified_name: qualified_name.to_owned(),
            columns: table
                .columns
                .iter()
                .map(|c| ProjectionColumn {
                    quoted: quote_identifier(&c.name),
                    sql_type: app_table_ddl::projection_type(c).to_owned(),
                    ty: c.ty,
                })
                .collect(),
        }
    }
}

/// One projection column: quoted identifier and Postgres type (as created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionColumn {
    /// Quoted identifier, e.g. `"title"`.
    pub quoted: String,
    /// Postgres type name the column was created with, e.g. `bigint`.
    pub sql_type: String,
    /// The column's wire type: decides the bound parameter's type (text,
    /// int8, float8, bool or bytea), also for NULL.
    pub ty: ColumnType,
}

/// The stored state of one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRow {
    /// `server_version` (≥ 1).
    pub version: i64,
    /// Stored scopes as JSON text `{"variable":"value",…}`.
    pub scopes_json: String,
    /// The verbatim row-codec payload.
    pub payload: Vec<u8>,
    /// `_sync_column_versions` (NULL: every column at `version`).
    pub column_versions: Option<Vec<u8>>,
}

/// Reads one row of `partition` by `row_id`, or `None` when absent, and
/// locks it (`FOR NO KEY UPDATE`) for the write that follows: a captured
/// plain SQL write holding the row (it takes no push lock) is waited for,
/// and the row is read as that write committed it — the version check and
/// a crdt merge never work from a stale copy, so neither write is lost.
/// Errors: SPI failures (40001 under REPEATABLE READ when the row changed).
pub fn select_app_row(
    t: &AppTableSql,
    partition: &str,
    row_id: &str,
) -> StoreResult<Option<StoredRow>> {
    // A row an index probe does not find is not read (what the read would answer; the
    // probe costs a fraction of a statement): a pushed insert of a new row reads nothing.
    if crate::store::direct::app_probe::row_absent(&t.app_schema, &t.table, partition, row_id) {
        return Ok(None);
    }
    let sql = format!(
        "SELECT _sync_version, _sync_scopes::text, _sync_payload, _sync_column_versions FROM {} \
         WHERE _sync_partition = $1 AND _sync_row_id = $2 FOR NO KEY UPDATE",
        t.qualified_name
    );
    // Pinned (an index walk on the key, never a sequential scan planned while
    // the table was tiny and kept as it grew): a push costs the same before
    // and after autovacuum analyzed the app table.
    Spi::connect_mut(|client| {
        let table = pinned_plan::execute(
            client,
            &sql,
            Some(1),
            &[DatumWithOid::from(partition), DatumWithOid::from(row_id)],
        )?;
        if table.is_empty() {
            return Ok(None);
        }
        let row = table.first();
        let version = row.get::<i64>(1)?.unwrap_or(0);
        let scopes_json = row.get::<String>(2)?.unwrap_or_else(|| "{}".to_owned());
        let payload = row.get::<Vec<u8>>(3)?.unwrap_or_default();
        let column_versions = row.get::<Vec<u8>>(4)?;
        Ok(Some(StoredRow {
            version,
            scopes_json,
            payload,
            column_versions,
        }))
    })
    .map_err(StoreError::spi("select_app_row"))
}

/// The row written by [`insert_app_row`] or [`update_app_row`].
#[derive(Debug, Clone, Copy)]
pub struct AppRowWrite<'a> {
    /// `_sync_partition`.
    pub partition: &'a str,
    /// `_sync_row_id` (the rendered primary key).
    pub row_id: &'a str,
    /// Decoded values, one per projection column (`None` = NULL).
    pub values: &'a [Option<RowValue>],
    /// New `server_version`.
    pub version: i64,
    /// Stored scopes JSON text.
    pub scopes_json: &'a str,
    /// The row-codec payload stored verbatim (served by pulls as is).
    pub payload: &'a [u8],
    /// `_sync_column_versions` to store (an update; an insert stores NULL).
    pub column_versions: Option<&'a [u8]>,
    /// For an update from a sparse payload: which projection columns it
    /// carries — the others keep their stored datum (a TOASTed value is not
    /// rewritten). `None`: every column is written.
    pub present: Option<&'a [bool]>,
}

/// Whether a `json` value's text can be cast to `jsonb`: Postgres refuses
/// `\u0000` and lone surrogate escapes, which the row codec accepts.
fn jsonb_storable(text: &str) -> bool {
    fn clean(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::String(s) => !s.contains('\0'),
            serde_json::Value::Array(a) => a.iter().all(clean),
            serde_json::Value::Object(m) => m.iter().all(|(k, v)| !k.contains('\0') && clean(v)),
            _ => true,
        }
    }
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| clean(&v))
}

/// Whether `v` is a value Postgres cannot hold in its column's type (a
/// `json` text `jsonb` refuses, a string with a NUL character): its typed
/// column holds NULL and only the payload carries it.
pub fn projects_as_null(v: &RowValue) -> bool {
    match v {
        RowValue::Json(s) => !jsonb_storable(s) || s.contains('\0'),
        RowValue::String(s) | RowValue::BlobRef(s) => s.contains('\0'),
        _ => false,
    }
}

/// A typed SQL NULL for a column of wire type `ty`.
fn typed_null(ty: ColumnType) -> DatumWithOid<'static> {
    match ty {
        ColumnType::String | ColumnType::Json | ColumnType::BlobRef => {
            DatumWithOid::from(Option::<String>::None)
        }
        ColumnType::Integer => DatumWithOid::from(Option::<i64>::None),
        ColumnType::Float => DatumWithOid::from(Option::<f64>::None),
        ColumnType::Boolean => DatumWithOid::from(Option::<bool>::None),
        ColumnType::Bytes | ColumnType::Crdt => DatumWithOid::from(Option::<Vec<u8>>::None),
    }
}

/// The bound value of one projection column of wire type `ty` (the
/// parameter's type depends only on `ty`, so kept plans stay valid). A
/// value Postgres cannot hold in the column's type — a `json` text `jsonb`
/// refuses, a string with a NUL character — projects as NULL; the verbatim
/// payload still carries it.
fn value_datum(ty: ColumnType, v: &Option<RowValue>) -> DatumWithOid<'static> {
    match v {
        None => typed_null(ty),
        Some(v) if projects_as_null(v) => typed_null(ty),
        Some(RowValue::String(s)) | Some(RowValue::Json(s)) | Some(RowValue::BlobRef(s)) => {
            DatumWithOid::from(s.clone())
        }
        Some(RowValue::Integer(n)) => DatumWithOid::from(*n),
        Some(RowValue::Float(f)) => DatumWithOid::from(*f),
        Some(RowValue::Boolean(b)) => DatumWithOid::from(*b),
        Some(RowValue::Bytes(b)) | Some(RowValue::Crdt(b)) => DatumWithOid::from(b.clone()),
    }
}

/// Inserts a row the push found absent. Under READ COMMITTED a plain
/// `INSERT` (no speculative insertion, only the table's INSERT triggers): a
/// row with the same key inserted meanwhile by a writer that takes no push
/// lock (plain SQL) is a unique violation, as is one of a declared index
/// (SQLSTATE 23505); a value the projection type rejects is class 22 —
/// Postgres ERRORs that the push, running this inside the commit's
/// subtransaction, turns into a rejected result. Under REPEATABLE READ or
/// SERIALIZABLE the row may have been committed after the transaction's
/// snapshot (by another push: the caller waited for its bucket lock after
/// the snapshot was taken), so the insert is `ON CONFLICT DO NOTHING`, which
/// raises 40001 for a conflicting row the snapshot cannot see — the request
/// fails retryably instead of storing a rejection. Errors: SPI failures; a
/// value count that differs from the column count. `None`: no row inserted
/// (after reading the row absent only a BEFORE INSERT trigger returning NULL
/// or a forced row-level security policy does that: the caller refuses it).
///
/// With `probe_tombstone`, the statement also answers whether the row has a
/// tombstone in `sync_tombstones` (the unversioned sparse upsert's rule, wire
/// version 3: `sync.row_deleted`) — one index probe in `RETURNING` instead
/// of a statement more; the caller rejects the commit (rolling the insert
/// back) when it has. Returns that answer (`false` without the probe).
pub fn insert_app_row(t: &AppTableSql, w: &AppRowWrite<'_>, probe_tombstone: bool) -> StoreResult<Option<bool>> {
    let n = checked_width(t, w, "insert_app_row")?;
    let names: Vec<&str> = t.columns.iter().map(|c| c.quoted.as_str()).collect();
    let placeholders: Vec<String> = t
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("${}::{}", i + 3, c.sql_type))
        .collect();
    let sep = if n == 0 { "" } else { ", " };
    // SAFETY: reads the backend's isolation level (a plain global).
    let xact_snapshot = unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32;
    let conflict = if xact_snapshot { " ON CONFLICT (_sync_partition, _sync_row_id) DO NOTHING" } else { "" };
    let probe = if probe_tombstone {
        format!(
            ", EXISTS (SELECT 1 FROM syncular.sync_tombstones d WHERE d.partition = $1 AND d.tbl = ${} AND d.row_id = $2)",
            n + 6
        )
    } else {
        String::new()
    };
    let tail = format!("{conflict} RETURNING 1{probe}");
    let sql = format!(
        "INSERT INTO {table} (_sync_partition, _sync_row_id{sep}{cols}, _sync_version, _sync_scopes, _sync_payload) \
         VALUES ($1, $2{sep}{vals}, ${v}, ${s}::jsonb, ${p}){tail}",
        table = t.qualified_name,
        cols = names.join(", "),
        vals = placeholders.join(", "),
        v = n + 3,
        s = n + 4,
        p = n + 5,
    );
    let mut args = write_args(t, w);
    if probe_tombstone {
        args.push(DatumWithOid::from(t.table.as_str()));
    }
    engine_write_flag(&sql, &args, "insert_app_row")
}

/// Replaces the columns of a row the push read and locked
/// ([`select_app_row`]: `FOR NO KEY UPDATE`), by key (only the table's UPDATE
/// triggers): every projection column, or with `w.present` only those (one
/// statement shape for every presence pattern: `col = CASE WHEN $m[i] THEN
/// $k ELSE col END`, the pattern bound as a `bool[]`, so kept plans stay one
/// per table), then version, scopes, payload and column versions. Errors as
/// [`insert_app_row`]. Returns whether a row was updated (under the lock it
/// is not only when a BEFORE UPDATE trigger returns NULL or a forced
/// row-level security policy hides the row: the caller refuses the write).
pub fn update_app_row(t: &AppTableSql, w: &AppRowWrite<'_>) -> StoreResult<bool> {
    let n = checked_width(t, w, "update_app_row")?;
    if w.present.is_some_and(|p| p.len() != n) {
        return Err(StoreError::new("update_app_row", format!("a presence mask for {} column(s)", t.columns.len())));
    }
    let mask = n + 7;
    let mut set: Vec<String> = t
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| match w.present {
            None => format!("{} = ${}::{}", c.quoted, i + 3, c.sql_type),
            Some(_) => format!("{q} = CASE WHEN ${mask}[{k}] THEN ${p}::{ty} ELSE {q} END", q = c.quoted, k = i + 1, p = i + 3, ty = c.sql_type),
        })
        .collect();
    set.push(format!("_sync_version = ${}", n + 3));
    set.push(format!("_sync_scopes = ${}::jsonb", n + 4));
    set.push(format!("_sync_payload = ${}", n + 5));
    set.push(format!("_sync_column_versions = ${}", n + 6));
    let sql = format!(
        "UPDATE {table} SET {set} WHERE _sync_partition = $1 AND _sync_row_id = $2 RETURNING 1",
        table = t.qualified_name,
        set = set.join(", "),
    );
    let mut args = write_args(t, w);
    args.push(DatumWithOid::from(w.column_versions));
    if let Some(present) = w.present {
        args.push(DatumWithOid::from(present.to_vec()));
    }
    engine_write(&sql, &args, "update_app_row")
}

/// The column count of `t`, checked against the values of `w`.
fn checked_width(t: &AppTableSql, w: &AppRowWrite<'_>, statement: &'static str) -> StoreResult<usize> {
    if w.values.len() != t.columns.len() {
        return Err(StoreError::new(
            statement,
            format!("{} value(s) for {} column(s)", w.values.len(), t.columns.len()),
        ));
    }
    Ok(t.columns.len())
}

/// `$1` partition, `$2` row id, `$3…` the column values, then version,
/// scopes JSON and payload: the parameters of both write statements.
fn write_args<'a>(t: &AppTableSql, w: &AppRowWrite<'a>) -> Vec<DatumWithOid<'a>> {
    let mut args: Vec<DatumWithOid<'a>> = Vec::with_capacity(t.columns.len() + 5);
    args.push(DatumWithOid::from(w.partition));
    args.push(DatumWithOid::from(w.row_id));
    args.extend(t.columns.iter().zip(w.values).map(|(c, v)| value_datum(c.ty, v)));
    args.push(DatumWithOid::from(w.version));
    args.push(DatumWithOid::from(w.scopes_json));
    args.push(DatumWithOid::from(w.payload));
    args
}

/// Deletes one row. Returns whether a row was deleted. Errors: SPI failures.
pub fn delete_app_row(t: &AppTableSql, partition: &str, row_id: &str) -> StoreResult<bool> {
    let sql = format!(
        "DELETE FROM {} WHERE _sync_partition = $1 AND _sync_row_id = $2 RETURNING 1",
        t.qualified_name
    );
    engine_write(&sql, &[DatumWithOid::from(partition), DatumWithOid::from(row_id)], "delete_app_row")
}

/// Runs the app-row write `sql` (ending in `RETURNING 1`) of `partition`
/// with `args` (the caller holds the engine-write guard,
/// `crate::engine::commit::guard`) through the kept plan; returns whether it returned a
/// row. Errors: SPI failures, reported as `statement`.
fn engine_write(
    sql: &str,
    args: &[DatumWithOid<'_>],
    statement: &'static str,
) -> StoreResult<bool> {
    engine_write_flag(sql, args, statement).map(|row| row.is_some())
}

/// [`engine_write`] for a statement returning `1[, flag]`: `None` when it
/// returned no row, else its boolean second column (`false` when it has
/// none).
fn engine_write_flag(
    sql: &str,
    args: &[DatumWithOid<'_>],
    statement: &'static str,
) -> StoreResult<Option<bool>> {
    Spi::connect_mut(|client| {
        let table = plan_cache::execute(client, sql, None, args)?;
        if table.is_empty() {
            return Ok(None);
        }
        let row = table.first();
        Ok(Some(if row.columns()? >= 2 { row.get::<bool>(2)?.unwrap_or(false) } else { false }))
    })
    .map_err(StoreError::spi(statement))
}
