//! DDL and catalog reads for the app tables (one per IR table).
//!
//! Physical shape of an app table `"<app_schema>"."<table>"`:
//! ```sql
//! _sync_partition text NOT NULL, _sync_row_id text NOT NULL,
//! <projection columns in IR order, quoted, all nullable>,
//! _sync_version bigint NOT NULL, _sync_scopes jsonb NOT NULL,
//! _sync_payload bytea NOT NULL, _sync_column_versions bytea,
//! PRIMARY KEY (_sync_partition, _sync_row_id)
//! ```
//! `_sync_column_versions` holds the version at which each column last
//! changed ([`syncular_protocol::column_versions`]: LEB128 `(ordinal,
//! version)` pairs above 1; NULL = every column at `_sync_version`), the
//! seed's column-versions column; tables created before 0.3.0 gain it
//! (`ALTER TABLE … ADD COLUMN`, last like in a new table; NULL: every column
//! at its row version).
//! Declared IR indexes become `sync_ix_<name>` on
//! `(_sync_partition, <columns…>)`, UNIQUE when declared, so a unique value
//! is unique per partition only. Every identifier is quoted.

use pgrx::prelude::*;
use pgrx::spi::quote_identifier;
use syncular_protocol::row_codec::ColumnType;
use syncular_protocol::schema_ir::{ColumnSchema, IndexIr, TableSchema};

use crate::store::error::{StoreError, StoreResult};

/// Storage columns every app table has, in physical order around the
/// projection columns.
pub const PARTITION_COLUMN: &str = "_sync_partition";
/// Row id column (the §2.2 `rowId`).
pub const ROW_ID_COLUMN: &str = "_sync_row_id";
/// Server row version column.
pub const VERSION_COLUMN: &str = "_sync_version";
/// Stored scopes column, jsonb `{"<variable>": "<value>"}`.
pub const SCOPES_COLUMN: &str = "_sync_scopes";
/// The verbatim row-codec payload.
pub const PAYLOAD_COLUMN: &str = "_sync_payload";
/// Per-column versions (wire version 3, column-level conflicts): `bytea`,
/// NULL when every column sits at the row's version.
pub const COLUMN_VERSIONS_COLUMN: &str = "_sync_column_versions";
/// Prefix marking an index as created (and rebuilt) by register_schema.
pub const OWNED_INDEX_PREFIX: &str = "sync_ix_";

/// The Postgres type of a projection column (docs/src/guide/app-tables.md):
/// string→text, integer→bigint, float→double precision, boolean→boolean,
/// json→jsonb, bytes→bytea (also every encrypted column), blob_ref→text,
/// crdt→bytea.
pub fn projection_type(column: &ColumnSchema) -> &'static str {
    match column.ty {
        ColumnType::String | ColumnType::BlobRef => "text",
        ColumnType::Integer => "bigint",
        ColumnType::Float => "double precision",
        ColumnType::Boolean => "boolean",
        ColumnType::Json => "jsonb",
        ColumnType::Bytes | ColumnType::Crdt => "bytea",
    }
}

/// `"schema"."table"`, both quoted.
pub fn qualified_name(app_schema: &str, table: &str) -> String {
    format!("{}.{}", quote_identifier(app_schema), quote_identifier(table))
}

/// Physical name of a declared index: `sync_ix_<name>`, or `sync_ix_<hash>`
/// (FNV-1a 64, hex) when that would exceed Postgres' 63-byte identifiers.
pub fn physical_index_name(declared: &str) -> String {
    let name = format!("{OWNED_INDEX_PREFIX}{declared}");
    if name.len() <= 63 {
        return name;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in declared.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{OWNED_INDEX_PREFIX}{hash:016x}")
}

fn run(statement: &'static str, sql: &str) -> StoreResult<()> {
    Spi::connect_mut(|client| client.update(sql, None, &[]).map(|_| ()).map_err(StoreError::spi(statement)))
}

/// `CREATE SCHEMA IF NOT EXISTS "<app_schema>"`.
pub fn create_app_schema(app_schema: &str) -> StoreResult<()> {
    run("create_app_schema", &format!("CREATE SCHEMA IF NOT EXISTS {}", quote_identifier(app_schema)))
}

/// `CREATE TABLE` for one app table (shape in the module docs).
pub fn create_app_table(app_schema: &str, table: &TableSchema) -> StoreResult<()> {
    let mut defs = vec![
        format!("{} text NOT NULL", quote_identifier(PARTITION_COLUMN)),
        format!("{} text NOT NULL", quote_identifier(ROW_ID_COLUMN)),
    ];
    for column in &table.columns {
        defs.push(format!("{} {}", quote_identifier(&column.name), projection_type(column)));
    }
    defs.push(format!("{} bigint NOT NULL", quote_identifier(VERSION_COLUMN)));
    defs.push(format!("{} jsonb NOT NULL", quote_identifier(SCOPES_COLUMN)));
    defs.push(format!("{} bytea NOT NULL", quote_identifier(PAYLOAD_COLUMN)));
    // Last, where a table created before 0.3.0 gained it too: `SELECT *` keeps the earlier
    // columns' positions, and a positional INSERT of them still fits (the column is NULL). The
    // price: a value that changes at the tuple's end widens the span Postgres logs for a
    // same-page update (the bytes between the unchanged prefix and suffix) to the payload's
    // tail — docs/src/reference/client-generations.md, bench-wire.
    defs.push(format!("{} bytea", quote_identifier(COLUMN_VERSIONS_COLUMN)));
    defs.push(format!(
        "PRIMARY KEY ({}, {})",
        quote_identifier(PARTITION_COLUMN),
        quote_identifier(ROW_ID_COLUMN)
    ));
    run(
        "create_app_table",
        &format!("CREATE TABLE {} ({})", qualified_name(app_schema, &table.name), defs.join(", ")),
    )
}

/// `ALTER TABLE … ADD COLUMN` for one appended (nullable) projection column.
pub fn add_projection_column(app_schema: &str, table: &str, column: &ColumnSchema) -> StoreResult<()> {
    run(
        "add_projection_column",
        &format!(
            "ALTER TABLE {} ADD COLUMN {} {}",
            qualified_name(app_schema, table),
            quote_identifier(&column.name),
            projection_type(column)
        ),
    )
}

/// `ALTER TABLE … ADD COLUMN _sync_column_versions bytea` (callers check it
/// is missing): an app table created before 0.3.0 (or adopted from one)
/// gains the column, NULL in every row (every column at its row version; no
/// table rewrite). Errors: SPI failures.
pub fn add_column_versions_column(app_schema: &str, table: &str) -> StoreResult<()> {
    run(
        "add_column_versions_column",
        &format!(
            "ALTER TABLE {} ADD COLUMN {} bytea",
            qualified_name(app_schema, table),
            quote_identifier(COLUMN_VERSIONS_COLUMN)
        ),
    )
}

/// `DROP TABLE IF EXISTS` for a retired app table.
pub fn drop_app_table(app_schema: &str, table: &str) -> StoreResult<()> {
    run("drop_app_table", &format!("DROP TABLE IF EXISTS {}", qualified_name(app_schema, table)))
}

/// `CREATE [UNIQUE] INDEX sync_ix_<name> ON … (_sync_partition, cols…)`.
pub fn create_declared_index(app_schema: &str, table: &str, index: &IndexIr) -> StoreResult<()> {
    let mut columns = vec![quote_identifier(PARTITION_COLUMN)];
    columns.extend(index.columns.iter().map(quote_identifier));
    run(
        "create_declared_index",
        &format!(
            "CREATE {}INDEX {} ON {} ({})",
            if index.unique { "UNIQUE " } else { "" },
            quote_identifier(physical_index_name(&index.name)),
            qualified_name(app_schema, table),
            columns.join(", ")
        ),
    )
}

/// `DROP INDEX IF EXISTS "<app_schema>"."<index>"`.
pub fn drop_index(app_schema: &str, index: &str) -> StoreResult<()> {
    run("drop_index", &format!("DROP INDEX IF EXISTS {}", qualified_name(app_schema, index)))
}

/// Names of the `sync_ix_*` indexes on an app table (those register_schema
/// owns and rebuilds; operator-added indexes are left alone).
pub fn list_owned_indexes(app_schema: &str, table: &str) -> StoreResult<Vec<String>> {
    const STATEMENT: &str = "list_owned_indexes";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT ic.relname::text \
                   FROM pg_catalog.pg_index i \
                   JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid \
                   JOIN pg_catalog.pg_class tc ON tc.oid = i.indrelid \
                   JOIN pg_catalog.pg_namespace n ON n.oid = tc.relnamespace \
                  WHERE n.nspname = $1 AND tc.relname = $2 \
                    AND ic.relname LIKE 'sync\\_ix\\_%' \
                  ORDER BY 1",
                None,
                &[app_schema.into(), table.into()],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let mut out = Vec::new();
        for row in rows {
            if let Some(name) = row.get::<String>(1).map_err(StoreError::spi(STATEMENT))? {
                out.push(name);
            }
        }
        Ok(out)
    })
}

/// The physical column names of `"<app_schema>"."<table>"` (not dropped),
/// or `None` when no such table exists.
pub fn app_table_columns(app_schema: &str, table: &str) -> StoreResult<Option<Vec<String>>> {
    const STATEMENT: &str = "app_table_columns";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT a.attname::text \
                   FROM pg_catalog.pg_class c \
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                   LEFT JOIN pg_catalog.pg_attribute a \
                     ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                  WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p') \
                  ORDER BY a.attnum",
                None,
                &[app_schema.into(), table.into()],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::new();
        for row in rows {
            if let Some(name) = row.get::<String>(1).map_err(StoreError::spi(STATEMENT))? {
                out.push(name);
            }
        }
        Ok(Some(out))
    })
}

/// One page of `(partition, row_id, payload)` after the keyset position
/// `(after_partition, after_row_id)`, in primary-key order, at most `limit`
/// rows (the payload rewrite of a version bump).
pub fn select_payload_page(
    app_schema: &str,
    table: &str,
    after_partition: &str,
    after_row_id: &str,
    limit: i64,
) -> StoreResult<Vec<(String, String, Vec<u8>)>> {
    const STATEMENT: &str = "select_payload_page";
    let sql = format!(
        "SELECT {p}, {r}, {pl} FROM {t} WHERE ({p}, {r}) > ($1, $2) ORDER BY {p}, {r} LIMIT $3",
        p = quote_identifier(PARTITION_COLUMN),
        r = quote_identifier(ROW_ID_COLUMN),
        pl = quote_identifier(PAYLOAD_COLUMN),
        t = qualified_name(app_schema, table),
    );
    Spi::connect_mut(|client| {
        let rows = client
            .update(sql.as_str(), None, &[after_partition.into(), after_row_id.into(), limit.into()])
            .map_err(StoreError::spi(STATEMENT))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let partition: Option<String> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
            let row_id: Option<String> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
            let payload: Option<Vec<u8>> = row.get(3).map_err(StoreError::spi(STATEMENT))?;
            match (partition, row_id, payload) {
                (Some(p), Some(r), Some(b)) => out.push((p, r, b)),
                _ => return Err(StoreError::new(STATEMENT, "NULL in a NOT NULL storage column")),
            }
        }
        Ok(out)
    })
}

/// Replaces one row's payload (payload rewrite of a version bump).
pub fn update_payload(
    app_schema: &str,
    table: &str,
    partition: &str,
    row_id: &str,
    payload: &[u8],
) -> StoreResult<()> {
    let sql = format!(
        "UPDATE {t} SET {pl} = $3 WHERE {p} = $1 AND {r} = $2",
        p = quote_identifier(PARTITION_COLUMN),
        r = quote_identifier(ROW_ID_COLUMN),
        pl = quote_identifier(PAYLOAD_COLUMN),
        t = qualified_name(app_schema, table),
    );
    Spi::connect_mut(|client| {
        client
            .update(sql.as_str(), None, &[partition.into(), row_id.into(), payload.into()])
            .map(|_| ())
            .map_err(StoreError::spi("update_payload"))
    })
}

/// Safety facts about an existing app table (adoption and version bumps):
/// who owns it and whether anything user-defined runs on writes to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppTableGuard {
    /// `relkind` (`r` plain table, `p` partitioned, …).
    pub relkind: String,
    /// Owner role name.
    pub owner: String,
    /// Whether the owner is `current_user` (the registering admin).
    pub owned_by_current_user: bool,
    /// Triggers that are not internal (FK triggers are internal) and do not
    /// call syncular's own capture functions.
    pub user_triggers: i64,
    /// Rewrite rules on the table.
    pub rules: i64,
    /// Whether row-level security is enabled.
    pub row_security: bool,
    /// Row-level security policies.
    pub policies: i64,
}

/// The [`AppTableGuard`] of `"<app_schema>"."<table>"`, `None` when no
/// relation of that name exists. One catalog query.
pub fn app_table_guard(app_schema: &str, table: &str) -> StoreResult<Option<AppTableGuard>> {
    const STATEMENT: &str = "app_table_guard";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT c.relkind::text, pg_catalog.pg_get_userbyid(c.relowner)::text, \
                        c.relowner = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), \
                        (SELECT count(*) FROM pg_catalog.pg_trigger g WHERE g.tgrelid = c.oid AND NOT g.tgisinternal \
                            AND g.tgfoid NOT IN (SELECT p.oid FROM pg_catalog.pg_proc p \
                                                  WHERE p.pronamespace = 'syncular'::pg_catalog.regnamespace \
                                                    AND p.proname IN ('capture_statement_start', 'capture_row', 'capture_statement', 'capture_truncate'))), \
                        (SELECT count(*) FROM pg_catalog.pg_rewrite w WHERE w.ev_class = c.oid), \
                        c.relrowsecurity, \
                        (SELECT count(*) FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid) \
                   FROM pg_catalog.pg_class c \
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                  WHERE n.nspname = $1 AND c.relname = $2",
                Some(1),
                &[app_schema.into(), table.into()],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let Some(row) = rows.into_iter().next() else { return Ok(None) };
        let relkind: Option<String> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
        let owner: Option<String> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
        let owned: Option<bool> = row.get(3).map_err(StoreError::spi(STATEMENT))?;
        let user_triggers: Option<i64> = row.get(4).map_err(StoreError::spi(STATEMENT))?;
        let rules: Option<i64> = row.get(5).map_err(StoreError::spi(STATEMENT))?;
        let row_security: Option<bool> = row.get(6).map_err(StoreError::spi(STATEMENT))?;
        let policies: Option<i64> = row.get(7).map_err(StoreError::spi(STATEMENT))?;
        Ok(Some(AppTableGuard {
            relkind: relkind.unwrap_or_default(),
            owner: owner.unwrap_or_default(),
            owned_by_current_user: owned.unwrap_or(false),
            user_triggers: user_triggers.unwrap_or(0),
            rules: rules.unwrap_or(0),
            row_security: row_security.unwrap_or(false),
            policies: policies.unwrap_or(0),
        }))
    })
}

/// `(name, format_type, NOT NULL)` of every live column of
/// `"<app_schema>"."<table>"`, in physical order (empty when absent).
pub fn app_table_column_types(app_schema: &str, table: &str) -> StoreResult<Vec<(String, String, bool)>> {
    const STATEMENT: &str = "app_table_column_types";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull \
                   FROM pg_catalog.pg_class c \
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                   JOIN pg_catalog.pg_attribute a \
                     ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                  WHERE n.nspname = $1 AND c.relname = $2 \
                  ORDER BY a.attnum",
                None,
                &[app_schema.into(), table.into()],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let name: Option<String> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
            let ty: Option<String> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
            let not_null: Option<bool> = row.get(3).map_err(StoreError::spi(STATEMENT))?;
            out.push((name.unwrap_or_default(), ty.unwrap_or_default(), not_null.unwrap_or(false)));
        }
        Ok(out)
    })
}

/// The primary-key column names of `"<app_schema>"."<table>"` in key
/// order (empty when it has none).
pub fn app_table_primary_key(app_schema: &str, table: &str) -> StoreResult<Vec<String>> {
    const STATEMENT: &str = "app_table_primary_key";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT a.attname::text \
                   FROM pg_catalog.pg_class c \
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                   JOIN pg_catalog.pg_index i ON i.indrelid = c.oid AND i.indisprimary \
                   CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
                   JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum \
                  WHERE n.nspname = $1 AND c.relname = $2 \
                  ORDER BY k.ord",
                None,
                &[app_schema.into(), table.into()],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            if let Some(name) = row.get::<String>(1).map_err(StoreError::spi(STATEMENT))? {
                out.push(name);
            }
        }
        Ok(out)
    })
}

/// What holds the name `name` in `app_schema`, if anything: `(relkind,
/// table the index belongs to or "")`. Used before creating a declared index.
pub fn relation_holding_name(app_schema: &str, name: &str) -> StoreResult<Option<(String, String)>> {
    const STATEMENT: &str = "relation_holding_name";
    Spi::connect_mut(|client| {
        let rows = client
            .update(
                "SELECT c.relkind::text, coalesce(t.relname::text, '') \
                   FROM pg_catalog.pg_class c \
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                   LEFT JOIN pg_catalog.pg_index i ON i.indexrelid = c.oid \
                   LEFT JOIN pg_catalog.pg_class t ON t.oid = i.indrelid \
                  WHERE n.nspname = $1 AND c.relname = $2",
                Some(1),
                &[app_schema.into(), name.into()],
            )
            .map_err(StoreError::spi(STATEMENT))?;
        let Some(row) = rows.into_iter().next() else { return Ok(None) };
        let relkind: Option<String> = row.get(1).map_err(StoreError::spi(STATEMENT))?;
        let table: Option<String> = row.get(2).map_err(StoreError::spi(STATEMENT))?;
        Ok(Some((relkind.unwrap_or_default(), table.unwrap_or_default())))
    })
}

