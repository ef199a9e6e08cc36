//! The registered application schema: registration (`register_schema`) and
//! the typed, cached view the engine serves from (§1.6, §2.4, §3.1).
//!
//! Registration rules (each refusal is `syncular.schema_refused`, 55000, and
//! changes nothing; an invalid IR is `syncular.invalid_schema`, 42P15):
//! - the IR is validated by `syncular_protocol::schema_ir::Schema` (§2.4,
//!   §3.1, §5.10.1, §5.11), and every `crdtType` names a merger this server
//!   has ([`crate::engine::crdt::known_types`], §5.10.1: only `yjs-doc`);
//!   the app schema name is a valid identifier and not
//!   `syncular`/`pg_*`/`information_schema`;
//! - first registration: creates each app table; a table that already exists
//!   (kept from before a `DROP EXTENSION`) is adopted only when it is a plain
//!   table owned by the registering role, without user triggers, rules or
//!   row-level security, with the storage columns' exact types and NOT NULL,
//!   the projection columns' types and the primary key (`_sync_partition`,
//!   `_sync_row_id`); its `sync_row_scopes` entries are rebuilt from each
//!   row's `_sync_scopes`;
//! - a version lower than the stored one is refused;
//! - the same version must describe the same schema (layouts, primary keys,
//!   scopes, indexes, app schema) — then it is a no-op after checking that
//!   every app table still has every physical column;
//! - a higher version: same app schema; every stored table keeps its primary
//!   key and scope variables→columns, its layout is a prefix of the new one
//!   (no removed/renamed/retyped/reordered column) and appended columns are
//!   nullable; a stored table missing from the new IR is refused unless
//!   `allow_drop`, then retired like the reference server (its
//!   `sync_row_scopes` entries deleted, its app table dropped; the commit log
//!   is left to retention). Every kept app table is re-checked (owner, no
//!   triggers, rules or row-level security); a new table named like a
//!   retired one must have the retired layout. Appended columns are added
//!   (nullable), declared indexes rebuilt, and every stored payload of a
//!   widened table re-encoded in batches with NULLs for the new columns;
//! - a declared index whose physical name (`sync_ix_<name>`) is already taken
//!   in the app schema is refused.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::{json, Value};
use syncular_protocol::row_codec::{append_null_columns, ColumnLayout, ColumnType, TableLayout};
use syncular_protocol::schema_ir::{Schema, TableSchema};

use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::app_rows::AppTableSql;
use crate::store::app_table_ddl as ddl;
use crate::store::schema_store::{self, StoredTable};
use crate::store::validator_store::{self, SingleFunction};

/// Rows re-encoded per page during a version bump's payload rewrite.
pub const REWRITE_BATCH_ROWS: i64 = 1000;

/// The schema the server serves: the current registered version.
#[derive(Debug, Clone)]
pub struct RegisteredSchema {
    /// The IR `version` (§1.6: the only `schemaVersion` served).
    pub version: i32,
    /// Postgres schema holding the app tables (unquoted).
    pub app_schema: String,
    /// The validated IR (protocol crate).
    pub schema: Schema,
    /// Tables in IR (bootstrap) order, parallel to `schema.tables`.
    pub tables: Vec<RegisteredTable>,
    /// The whole-commit validator (§6.8, `syncular.set_commit_validator`).
    pub commit_validator: Option<pgrx::pg_sys::Oid>,
    /// The reaction planner (§6.9, `syncular.set_reaction_planner`).
    pub reaction_planner: Option<pgrx::pg_sys::Oid>,
}

/// One synced table with its Postgres placement.
#[derive(Debug, Clone)]
pub struct RegisteredTable {
    /// The validated IR table: columns, primary key, scopes (with the
    /// scope column per variable and its layout index), indexes, layout.
    pub table: TableSchema,
    /// `"<app_schema>"."<table>"`, quoted, for the store.
    pub qualified_name: String,
    /// The store's view of the app table (quoted qualified name, quoted and
    /// typed projection columns in layout order), built once with the
    /// schema rather than per pushed operation.
    pub sql: AppTableSql,
    /// The table's write validator (§6.7, `syncular.set_write_validator`).
    pub validator: Option<pgrx::pg_sys::Oid>,
}

impl RegisteredTable {
    /// The IR table name (`tbl` in the sync_* tables).
    pub fn name(&self) -> &str {
        &self.table.name
    }

    /// The codec layout (IR order) of stored payloads.
    pub fn layout(&self) -> &TableLayout {
        self.table.layout()
    }
}

impl RegisteredSchema {
    /// The table named `name` (IR name), if declared.
    pub fn table(&self, name: &str) -> Option<&RegisteredTable> {
        self.tables.iter().find(|t| t.table.name == name)
    }

    /// Every scope variable declared by any table, with the tables declaring
    /// it (§3.2: an allowed/requested key no table declares is refused).
    pub fn variables(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for t in &self.tables {
            for v in t.table.variables() {
                out.entry(v).or_default().push(t.table.name.as_str());
            }
        }
        out
    }

    fn build(version: i32, app_schema: String, schema: Schema) -> RegisteredSchema {
        let tables = schema
            .tables
            .iter()
            .map(|t| {
                let qualified_name = ddl::qualified_name(&app_schema, &t.name);
                RegisteredTable {
                    sql: AppTableSql::for_table(&qualified_name, t),
                    table: t.clone(),
                    qualified_name,
                    validator: None,
                }
            })
            .collect();
        RegisteredSchema { version, app_schema, schema, tables, commit_validator: None, reaction_planner: None }
    }
}

/// Cache key: the marker row's (version, xmin).
type CacheKey = (i64, String);

thread_local! {
    /// Backend cache: (version, xmin of its marker row) → loaded schema.
    static CACHE: RefCell<Option<(CacheKey, Rc<RegisteredSchema>)>> = const { RefCell::new(None) };
}

/// Drops the backend cache (after a registration in this backend).
pub fn invalidate_cache() {
    CACHE.with(|c| *c.borrow_mut() = None);
}

/// The current registered schema; `None` before the first registration.
///
/// One indexed lookup of the marker's (version, xmin) per call; the parsed
/// schema is cached per backend under that key, so a registration in any
/// backend (new row, new xmin) or a rolled-back one is seen at once.
/// Errors: `syncular.internal` when the stored IR no longer parses.
pub fn load_registered_schema() -> EngineResult<Option<Rc<RegisteredSchema>>> {
    load_registered_schema_at(schema_store::current_version_key()?)
}

/// [`load_registered_schema`] for a `(version, xmin)` key the caller read
/// itself (the request context statement). Errors: as [`load_registered_schema`].
pub fn load_registered_schema_at(key: Option<(i64, String)>) -> EngineResult<Option<Rc<RegisteredSchema>>> {
    let Some(key) = key else {
        return Ok(None);
    };
    if let Some(hit) = CACHE.with(|c| {
        c.borrow().as_ref().filter(|(k, _)| *k == key).map(|(_, s)| Rc::clone(s))
    }) {
        return Ok(Some(hit));
    }
    let Some(stored) = schema_store::load_current_version()? else {
        return Ok(None);
    };
    let schema = Schema::from_value(&stored.ir).map_err(|e| {
        EngineError::internal(format!("stored schema IR version {} no longer parses: {}", stored.version, e.message))
    })?;
    let mut built = RegisteredSchema::build(schema.version, stored.app_schema, schema);
    for (tbl, validator) in validator_store::load_write_validators()? {
        if let Some(t) = built.tables.iter_mut().find(|t| t.table.name == tbl) {
            t.validator = Some(validator);
        }
    }
    built.commit_validator = validator_store::load_single(SingleFunction::CommitValidator)?;
    built.reaction_planner = validator_store::load_single(SingleFunction::ReactionPlanner)?;
    let loaded = Rc::new(built);
    CACHE.with(|c| *c.borrow_mut() = Some(((stored.version, stored.row_xmin), Rc::clone(&loaded))));
    Ok(Some(loaded))
}

/// The current registered schema, or `syncular.no_schema` (55000).
pub fn require_registered_schema() -> EngineResult<Rc<RegisteredSchema>> {
    load_registered_schema()?.ok_or_else(no_schema)
}

/// [`require_registered_schema`] for a caller that goes on to read or write
/// app rows or log payloads under it: takes the schema fence shared first
/// ([`schema_store::SCHEMA_FENCE_CLASS`]) and, under REPEATABLE READ or
/// SERIALIZABLE, confirms the marker is current
/// ([`schema_store::confirm_marker_in_snapshot`], 40001 otherwise).
pub fn require_fenced_schema() -> EngineResult<Rc<RegisteredSchema>> {
    load_fenced_schema()?.ok_or_else(no_schema)
}

/// [`load_registered_schema`] behind the fence (see [`require_fenced_schema`]).
pub fn load_fenced_schema() -> EngineResult<Option<Rc<RegisteredSchema>>> {
    schema_store::share_schema_fence()?;
    let schema = load_registered_schema()?;
    if let Some(s) = &schema {
        schema_store::confirm_marker_in_snapshot(i64::from(s.version))?;
    }
    Ok(schema)
}

/// [`require_registered_schema`] for a key the caller read (see [`load_registered_schema_at`]).
pub fn require_registered_schema_at(key: Option<(i64, String)>) -> EngineResult<Rc<RegisteredSchema>> {
    load_registered_schema_at(key)?.ok_or_else(no_schema)
}

fn no_schema() -> EngineError {
    EngineError::host(HostCode::NoSchema, "no schema is registered: call syncular.register_schema(ir) first")
}

/// What a registration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// First registration: tables created (or adopted).
    Created,
    /// Same version, same schema: nothing changed.
    Unchanged,
    /// Higher version applied; `rewritten_rows` payloads re-encoded,
    /// `retired` tables dropped.
    Migrated { rewritten_rows: u64, retired: Vec<String> },
}

/// The stored layout JSON of a table: `[{"name","type","nullable"}, …]`.
pub fn layout_json(layout: &TableLayout) -> Value {
    Value::Array(
        layout
            .columns
            .iter()
            .map(|c| json!({"name": c.name, "type": c.ty.name(), "nullable": c.nullable}))
            .collect(),
    )
}

/// Parses a stored layout JSON back (see [`layout_json`]).
pub fn parse_layout_json(tbl: &str, value: &Value) -> EngineResult<TableLayout> {
    let bad = || EngineError::internal(format!("stored layout of table {tbl:?} is malformed: {value}"));
    let items = value.as_array().ok_or_else(bad)?;
    let mut columns = Vec::with_capacity(items.len());
    for item in items {
        let name = item.get("name").and_then(Value::as_str).ok_or_else(bad)?;
        let ty = item.get("type").and_then(Value::as_str).and_then(ColumnType::from_name).ok_or_else(bad)?;
        let nullable = item.get("nullable").and_then(Value::as_bool).ok_or_else(bad)?;
        columns.push(ColumnLayout::new(name, ty, nullable));
    }
    Ok(TableLayout::new(columns))
}

fn check_app_schema_name(app_schema: &str) -> EngineResult<()> {
    let lower = app_schema.to_ascii_lowercase();
    if app_schema.is_empty() || app_schema.len() > 63 || app_schema.contains('\0') {
        return Err(EngineError::invalid_schema(format!(
            "app schema name {app_schema:?} must be 1-63 bytes without NUL"
        )));
    }
    if lower == "syncular" || lower.starts_with("pg_") || lower == "information_schema" {
        return Err(EngineError::invalid_schema(format!(
            "app schema {app_schema:?} is reserved: app tables must not live in the extension's or a system schema"
        )));
    }
    Ok(())
}

/// The physical columns an app table must have for `table`.
fn required_columns(table: &TableSchema) -> Vec<&str> {
    let mut out = vec![ddl::PARTITION_COLUMN, ddl::ROW_ID_COLUMN];
    out.extend(table.columns.iter().map(|c| c.name.as_str()));
    out.extend([ddl::VERSION_COLUMN, ddl::SCOPES_COLUMN, ddl::PAYLOAD_COLUMN]);
    out
}

fn assert_physical_columns(app_schema: &str, table_name: &str, required: &[&str]) -> EngineResult<()> {
    let Some(existing) = ddl::app_table_columns(app_schema, table_name)? else {
        return Err(EngineError::schema_refused(format!(
            "table {table_name:?} is missing from schema {app_schema:?} — refusing to serve a database whose rows cannot be read"
        )));
    };
    if let Some(missing) = required.iter().find(|c| !existing.iter().any(|e| e == *c)) {
        return Err(EngineError::schema_refused(format!(
            "table {app_schema}.{table_name} is missing column {missing:?} — refusing to serve a database whose rows cannot be read"
        )));
    }
    Ok(())
}

/// Adds `_sync_column_versions` to app table `table_name` when it lacks it
/// (a table created before 0.3.0 whose upgrade did not reach it, or one
/// adopted from such an install): NULL in every row, i.e. every column at
/// its row version. Errors: SPI failures; `syncular.schema_refused` when the
/// column exists with another type.
fn ensure_column_versions(app_schema: &str, table_name: &str) -> EngineResult<()> {
    let columns = ddl::app_table_column_types(app_schema, table_name)?;
    match columns.iter().find(|(n, _, _)| n == ddl::COLUMN_VERSIONS_COLUMN) {
        None => Ok(ddl::add_column_versions_column(app_schema, table_name)?),
        Some((_, ty, _)) if ty == "bytea" => Ok(()),
        Some((_, ty, _)) => Err(EngineError::schema_refused(format!(
            "table {app_schema}.{table_name}: storage column {:?} is {ty} — expected bytea; refusing to serve it",
            ddl::COLUMN_VERSIONS_COLUMN
        ))),
    }
}

/// Scope identity of a table: variable → column, as a sorted list.
fn scope_columns(table: &TableSchema) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> =
        table.scopes.iter().map(|s| (s.variable.clone(), s.column.clone())).collect();
    out.sort();
    out.dedup();
    out
}

/// Whether two compiled tables describe the same served schema.
fn same_table(a: &TableSchema, b: &TableSchema) -> bool {
    a.layout() == b.layout()
        && a.columns == b.columns
        && a.primary_key == b.primary_key
        && a.scopes == b.scopes
        && a.indexes == b.indexes
}

/// Creates the declared indexes of `table`; refuses (`syncular.schema_refused`)
/// when a physical index name is already taken in the app schema (by an
/// operator's relation or another table's index) instead of a raw 42P07.
fn create_indexes(app_schema: &str, table: &TableSchema) -> EngineResult<()> {
    for index in &table.indexes {
        let physical = ddl::physical_index_name(&index.name);
        if let Some((relkind, owner_table)) = ddl::relation_holding_name(app_schema, &physical)? {
            let holder = if owner_table.is_empty() {
                format!("a relation (relkind {relkind:?})")
            } else {
                format!("an index on table {owner_table:?}")
            };
            return Err(EngineError::schema_refused(format!(
                "declared index {:?} of table {:?} is created as {app_schema}.{physical}, but {holder} already has that name — rename the index in the IR or drop that relation",
                index.name, table.name
            )));
        }
        ddl::create_declared_index(app_schema, &table.name, index)?;
    }
    Ok(())
}

/// Refuses an existing app table that is not safe to serve: not a plain
/// table, not owned by the registering role (someone with CREATE on the app
/// schema could have planted it), or carrying user triggers, rules or
/// row-level security (they would run inside syncular's SECURITY DEFINER
/// sync functions with the extension owner's rights).
fn check_table_guard(app_schema: &str, name: &str) -> EngineResult<()> {
    let Some(guard) = ddl::app_table_guard(app_schema, name)? else {
        return Err(EngineError::schema_refused(format!(
            "table {name:?} is missing from schema {app_schema:?} — refusing to serve a database whose rows cannot be read"
        )));
    };
    let refuse = |why: String| {
        Err(EngineError::schema_refused(format!(
            "app table {app_schema}.{name} {why} — refusing to serve it (syncular's sync functions run as the extension owner)"
        )))
    };
    if guard.relkind != "r" {
        return refuse(format!("is not a plain table (relkind {:?})", guard.relkind));
    }
    if !guard.owned_by_current_user {
        return refuse(format!(
            "is owned by role {:?}, not by the registering role: only tables owned by the role calling register_schema are adopted",
            guard.owner
        ));
    }
    if guard.user_triggers > 0 {
        return refuse(format!("has {} user trigger(s)", guard.user_triggers));
    }
    if guard.rules > 0 {
        return refuse(format!("has {} rule(s)", guard.rules));
    }
    if guard.row_security || guard.policies > 0 {
        return refuse("has row-level security enabled or policies".to_string());
    }
    Ok(())
}

/// Refuses adopting an existing table whose physical shape differs from the
/// one `register_schema` creates: storage columns with their exact types and
/// NOT NULL, projection columns with their types, primary key exactly
/// (`_sync_partition`, `_sync_row_id`).
fn check_adoptable_shape(app_schema: &str, table: &TableSchema) -> EngineResult<()> {
    let columns = ddl::app_table_column_types(app_schema, &table.name)?;
    let name = &table.name;
    let find = |c: &str| columns.iter().find(|(n, _, _)| n == c);
    let storage = [
        (ddl::PARTITION_COLUMN, "text"),
        (ddl::ROW_ID_COLUMN, "text"),
        (ddl::VERSION_COLUMN, "bigint"),
        (ddl::SCOPES_COLUMN, "jsonb"),
        (ddl::PAYLOAD_COLUMN, "bytea"),
    ];
    for (column, ty) in storage {
        match find(column) {
            Some((_, actual, true)) if actual == ty => {}
            Some((_, actual, not_null)) => {
                return Err(EngineError::schema_refused(format!(
                    "existing table {app_schema}.{name}: storage column {column:?} is {actual}{} — expected {ty} NOT NULL; refusing to adopt it",
                    if *not_null { " NOT NULL" } else { "" }
                )))
            }
            None => {
                return Err(EngineError::schema_refused(format!(
                    "table {app_schema}.{name} is missing column {column:?} — refusing to adopt it"
                )))
            }
        }
    }
    for column in &table.columns {
        let ty = ddl::projection_type(column);
        match find(&column.name) {
            Some((_, actual, _)) if actual == ty => {}
            Some((_, actual, _)) => {
                return Err(EngineError::schema_refused(format!(
                    "existing table {app_schema}.{name}: column {:?} is {actual}, expected {ty} — refusing to adopt it",
                    column.name
                )))
            }
            None => {
                return Err(EngineError::schema_refused(format!(
                    "table {app_schema}.{name} is missing column {:?} — refusing to adopt it",
                    column.name
                )))
            }
        }
    }
    let pk = ddl::app_table_primary_key(app_schema, name)?;
    if pk != [ddl::PARTITION_COLUMN, ddl::ROW_ID_COLUMN] {
        return Err(EngineError::schema_refused(format!(
            "existing table {app_schema}.{name}: primary key is {pk:?}, expected (_sync_partition, _sync_row_id) — refusing to adopt it"
        )));
    }
    Ok(())
}

/// Refuses re-adding a retired table under another layout: the commit log
/// still holds its old payloads, which incremental pulls would serve under
/// the new layout.
fn check_readded_table(table: &TableSchema) -> EngineResult<()> {
    let Some((version, ir)) = schema_store::latest_version_declaring(&table.name)? else {
        return Ok(());
    };
    let old = Schema::from_value(&ir).map_err(|e| {
        EngineError::internal(format!("stored schema IR version {version} no longer parses: {}", e.message))
    })?;
    let same = old.tables.iter().find(|t| t.name == table.name).is_some_and(|t| t.layout() == table.layout());
    if !same {
        return Err(EngineError::schema_refused(format!(
            "table {:?} was retired after version {version} with a different layout; its commit log still holds payloads in that layout — pick a new table name (or re-add it with the identical layout)",
            table.name
        )));
    }
    Ok(())
}

fn write_marker(schema: &Schema, ir: &Value, app_schema: &str) -> EngineResult<()> {
    let now = clock::now_ms()?;
    schema_store::insert_schema_version(i64::from(schema.version), ir, app_schema, now)?;
    schema_store::delete_schema_tables()?;
    for t in &schema.tables {
        schema_store::insert_schema_table(&StoredTable {
            tbl: t.name.clone(),
            version: i64::from(schema.version),
            app_schema: app_schema.to_string(),
            app_table: t.name.clone(),
            layout: layout_json(t.layout()),
        })?;
    }
    Ok(())
}

/// Registers `ir` (rules in the module docs). Runs in the caller's
/// transaction: a refusal raises and nothing is changed. Concurrent
/// registrations are serialized on the marker table (the later one then
/// sees the earlier one's result, e.g. `Unchanged`).
pub fn register(ir: &Value, app_schema: &str, allow_drop: bool) -> EngineResult<RegisterOutcome> {
    crate::engine::validators::refuse_reentry("syncular.register_schema")?;
    crate::engine::distribution::refuse_worker()?;
    let schema = Schema::from_value(ir).map_err(|e| EngineError::invalid_schema(e.message))?;
    // §5.10.1: a crdt column whose crdtType has no merger is refused before serving.
    schema.check_crdt_types(&crate::engine::crdt::known_types()).map_err(|e| EngineError::invalid_schema(e.message))?;
    check_app_schema_name(app_schema)?;
    // First the schema fence, exclusively: every request that read the
    // marker has ended, and new ones wait for this transaction
    // (schema_store::SCHEMA_FENCE_CLASS). Taken before the marker lock, so
    // a transaction that made a request before registering cannot deadlock
    // with a registration holding the marker lock.
    schema_store::take_schema_fence()?;
    schema_store::lock_schema_marker()?;
    invalidate_cache();
    let outcome = match schema_store::load_current_version()? {
        None => register_first(&schema, ir, app_schema)?,
        Some(stored) => {
            let stored_version = stored.version;
            let new_version = i64::from(schema.version);
            let stored_schema = Schema::from_value(&stored.ir).map_err(|e| {
                EngineError::internal(format!("stored schema IR version {stored_version} no longer parses: {}", e.message))
            })?;
            let stored_tables = schema_store::load_schema_tables()?;
            if new_version < stored_version {
                return Err(EngineError::schema_refused(format!(
                    "schema version {new_version} is lower than the registered version {stored_version}"
                )));
            }
            if new_version == stored_version {
                register_same(&schema, &stored_schema, &stored.app_schema, app_schema, &stored_tables)?
            } else {
                register_higher(&schema, ir, &stored_schema, &stored.app_schema, app_schema, &stored_tables, allow_drop)?
            }
        }
    };
    invalidate_cache();
    distribute_new_tables()?;
    Ok(outcome)
}

/// Once the log is distributed (`syncular.distribute()`), the app tables a
/// registration created join it (docs/src/operate/citus.md).
fn distribute_new_tables() -> EngineResult<()> {
    if !crate::engine::distribution::is_distributed()? {
        return Ok(());
    }
    if let Some(registered) = load_registered_schema()? {
        for t in &registered.tables {
            crate::engine::distribution::distribute_app_table(&registered.app_schema, &t.table.name, &t.qualified_name)?;
        }
    }
    Ok(())
}

fn register_first(schema: &Schema, ir: &Value, app_schema: &str) -> EngineResult<RegisterOutcome> {
    ddl::create_app_schema(app_schema)?;
    for t in &schema.tables {
        match ddl::app_table_columns(app_schema, &t.name)? {
            None => {
                ddl::create_app_table(app_schema, t)?;
                create_indexes(app_schema, t)?;
            }
            Some(existing) => {
                // Kept from an earlier install (DROP EXTENSION leaves app
                // tables): adopt it when it can be read, rebuild indexes.
                let is_app_table = [ddl::PARTITION_COLUMN, ddl::ROW_ID_COLUMN, ddl::PAYLOAD_COLUMN]
                    .iter()
                    .all(|c| existing.iter().any(|e| e == c));
                if !is_app_table {
                    return Err(EngineError::schema_refused(format!(
                        "table {app_schema}.{} already exists and is not a syncular app table — drop or rename it, or register into another app_schema",
                        t.name
                    )));
                }
                check_table_guard(app_schema, &t.name)?;
                check_adoptable_shape(app_schema, t)?;
                ensure_column_versions(app_schema, &t.name)?;
                for name in ddl::list_owned_indexes(app_schema, &t.name)? {
                    ddl::drop_index(app_schema, &name)?;
                }
                create_indexes(app_schema, t)?;
                // The scope index is not kept across DROP EXTENSION: rebuild
                // it from each row's stored scopes so bootstrap serves them.
                let variables: Vec<String> = t.variables().into_iter().map(str::to_owned).collect();
                schema_store::delete_row_scopes_of_table(&t.name)?;
                crate::store::log::row_scopes::rebuild_row_scopes(app_schema, &t.name, &variables)?;
                // Likewise the blob reference index (§5.9.4), from the blob_ref columns.
                crate::store::blobs::refs::delete_blob_refs_of_table(&t.name)?;
                crate::store::blobs::refs::rebuild_blob_refs(app_schema, &t.name, &crate::engine::blobs::refs::blob_columns(t))?;
            }
        }
    }
    install_capture(app_schema, schema)?;
    write_marker(schema, ir, app_schema)?;
    Ok(RegisterOutcome::Created)
}

fn register_same(
    schema: &Schema,
    stored_schema: &Schema,
    stored_app_schema: &str,
    app_schema: &str,
    stored_tables: &[StoredTable],
) -> EngineResult<RegisterOutcome> {
    let v = schema.version;
    if app_schema != stored_app_schema {
        return Err(EngineError::schema_refused(format!(
            "schema version {v} is registered in app schema {stored_app_schema:?}, not {app_schema:?}"
        )));
    }
    // Stored layouts first (the seed's 0.22 rule: version equality is not
    // layout equality), then every other served property.
    for t in &schema.tables {
        let stored = stored_tables.iter().find(|s| s.tbl == t.name);
        let Some(stored) = stored else {
            return Err(EngineError::schema_refused(format!(
                "schema version {v} is already registered without table {:?}: bump the version to change the schema",
                t.name
            )));
        };
        if parse_layout_json(&stored.tbl, &stored.layout)? != *t.layout() {
            return Err(EngineError::schema_refused(format!(
                "schema version {v} is already registered with a different layout for table {:?}: bump the version to change the schema",
                t.name
            )));
        }
    }
    if let Some(extra) = stored_tables.iter().find(|s| schema.tables.iter().all(|t| t.name != s.tbl)) {
        return Err(EngineError::schema_refused(format!(
            "schema version {v} is already registered with table {:?} that this IR lacks: bump the version to change the schema",
            extra.tbl
        )));
    }
    for t in &schema.tables {
        let differs = stored_schema.tables.iter().find(|s| s.name == t.name).is_none_or(|s| !same_table(s, t));
        if differs {
            return Err(EngineError::schema_refused(format!(
                "schema version {v} is already registered with a different definition of table {:?} (columns, primary key, scopes or indexes): bump the version to change the schema",
                t.name
            )));
        }
    }
    for t in &schema.tables {
        assert_physical_columns(app_schema, &t.name, &required_columns(t))?;
        ensure_column_versions(app_schema, &t.name)?;
    }
    // Idempotent: repairs a dropped capture trigger, equips tables registered
    // before capture existed.
    install_capture(app_schema, schema)?;
    Ok(RegisterOutcome::Unchanged)
}

fn register_higher(
    schema: &Schema,
    ir: &Value,
    stored_schema: &Schema,
    stored_app_schema: &str,
    app_schema: &str,
    stored_tables: &[StoredTable],
    allow_drop: bool,
) -> EngineResult<RegisterOutcome> {
    let v = schema.version;
    if app_schema != stored_app_schema {
        return Err(EngineError::schema_refused(format!(
            "app tables live in schema {stored_app_schema:?}; version {v} names {app_schema:?} — moving app tables between schemas is not supported"
        )));
    }
    // 1. Check everything before changing anything.
    let mut retired = Vec::new();
    let mut widened: Vec<(&TableSchema, TableLayout)> = Vec::new();
    for stored in stored_tables {
        let Some(new) = schema.tables.iter().find(|t| t.name == stored.tbl) else {
            if !allow_drop {
                return Err(EngineError::schema_refused(format!(
                    "table {:?} is missing from version {v}: pass allow_drop => true to retire it (its app table and row scopes are dropped)",
                    stored.tbl
                )));
            }
            retired.push(stored.tbl.clone());
            continue;
        };
        // The app table may have been dropped and recreated (or armed with
        // a trigger) by someone with CREATE on the app schema since.
        check_table_guard(app_schema, &stored.tbl)?;
        let old_layout = parse_layout_json(&stored.tbl, &stored.layout)?;
        let old = stored_schema.tables.iter().find(|t| t.name == stored.tbl);
        check_append_only(&stored.tbl, &old_layout, new)?;
        if let Some(old) = old {
            if old.primary_key != new.primary_key {
                return Err(EngineError::schema_refused(format!(
                    "table {:?}: primary key changed from {:?} to {:?} — row ids of stored rows would change",
                    new.name, old.primary_key, new.primary_key
                )));
            }
            if scope_columns(old) != scope_columns(new) {
                return Err(EngineError::schema_refused(format!(
                    "table {:?}: scope variables/columns changed — stored scopes of existing rows would be wrong",
                    new.name
                )));
            }
        }
        let old_required: Vec<&str> = {
            let mut r = vec![ddl::PARTITION_COLUMN, ddl::ROW_ID_COLUMN];
            r.extend(old_layout.columns.iter().map(|c| c.name.as_str()));
            r.extend([ddl::VERSION_COLUMN, ddl::SCOPES_COLUMN, ddl::PAYLOAD_COLUMN]);
            r
        };
        assert_physical_columns(app_schema, &stored.tbl, &old_required)?;
        if old_layout.len() < new.layout().len() {
            widened.push((new, old_layout));
        }
    }
    for t in schema.tables.iter().filter(|t| stored_tables.iter().all(|s| s.tbl != t.name)) {
        check_readded_table(t)?;
    }
    // 2. Apply: retire, create, widen, rebuild indexes, rewrite payloads. First the
    // old marker row is rewritten: a REPEATABLE READ transaction whose snapshot
    // shows it fails instead of using its layout (schema_store::confirm_marker_in_snapshot).
    schema_store::touch_current_version()?;
    for tbl in &retired {
        schema_store::delete_row_scopes_of_table(tbl)?;
        // Its rows are gone: so are their blob references (§5.9.4; the blobs become orphans).
        crate::store::blobs::refs::delete_blob_refs_of_table(tbl)?;
        // A retired table's write validator goes with it (a re-added table starts without one).
        crate::store::validator_store::delete_write_validator(tbl)?;
        ddl::drop_app_table(app_schema, tbl)?;
    }
    let mut rewritten_rows = 0u64;
    for t in &schema.tables {
        if stored_tables.iter().all(|s| s.tbl != t.name) {
            if ddl::app_table_columns(app_schema, &t.name)?.is_some() {
                return Err(EngineError::schema_refused(format!(
                    "new table {:?} already exists in schema {app_schema:?} but is not registered — drop or rename it first",
                    t.name
                )));
            }
            ddl::create_app_table(app_schema, t)?;
            create_indexes(app_schema, t)?;
            continue;
        }
        ensure_column_versions(app_schema, &t.name)?;
        for name in ddl::list_owned_indexes(app_schema, &t.name)? {
            ddl::drop_index(app_schema, &name)?;
        }
        if let Some((_, old_layout)) = widened.iter().find(|(w, _)| w.name == t.name) {
            for column in &t.columns[old_layout.len()..] {
                ddl::add_projection_column(app_schema, &t.name, column)?;
            }
            rewritten_rows += rewrite_payloads(app_schema, t, old_layout)?;
        }
        create_indexes(app_schema, t)?;
    }
    install_capture(app_schema, schema)?;
    write_marker(schema, ir, app_schema)?;
    Ok(RegisterOutcome::Migrated { rewritten_rows, retired })
}

/// (Re)creates the capture triggers of every app table (plain SQL writes
/// become commits: [`crate::engine::capture`]).
/// Under a library newer than the catalog (before `ALTER EXTENSION syncular
/// UPDATE`) the trigger functions do not exist yet: a WARNING says so and the
/// update installs the triggers.
fn install_capture(app_schema: &str, schema: &Schema) -> EngineResult<()> {
    if crate::engine::distribution::is_distributed()? {
        // Distributed app tables carry no capture triggers (engine::distribution).
        return Ok(());
    }
    if !crate::store::capture::triggers::functions_installed()? {
        pgrx::warning!(
            "syncular: plain SQL writes to the app tables are not captured until ALTER EXTENSION syncular UPDATE installs the capture triggers"
        );
        return Ok(());
    }
    for t in &schema.tables {
        // An app table kept from an earlier install that Citus distributed (DROP EXTENSION
        // keeps app tables): no triggers either; `distribute()` brings the log along.
        if crate::engine::distribution::is_citus_app_table(app_schema, &t.name)? {
            continue;
        }
        crate::store::capture::triggers::install(app_schema, &t.name)?;
    }
    Ok(())
}

/// The append-only rule: the stored layout is a prefix (same name, type,
/// nullability) of the new one; appended columns are nullable.
fn check_append_only(tbl: &str, old: &TableLayout, new: &TableSchema) -> EngineResult<()> {
    let new_layout = new.layout();
    if old.len() > new_layout.len() {
        let removed: Vec<&str> = old.columns[new_layout.len()..].iter().map(|c| c.name.as_str()).collect();
        return Err(EngineError::schema_refused(format!(
            "table {tbl:?}: columns {removed:?} were removed — only appending nullable columns is supported"
        )));
    }
    for (i, (before, after)) in old.columns.iter().zip(&new_layout.columns).enumerate() {
        if before != after {
            return Err(EngineError::schema_refused(format!(
                "table {tbl:?}: column {i} changed from {} {}{} to {} {}{} (removed, renamed, retyped or reordered) — only appending nullable columns is supported",
                before.name,
                before.ty.name(),
                if before.nullable { "" } else { " NOT NULL" },
                after.name,
                after.ty.name(),
                if after.nullable { "" } else { " NOT NULL" },
            )));
        }
    }
    if let Some(added) = new_layout.columns[old.len()..].iter().find(|c| !c.nullable) {
        return Err(EngineError::schema_refused(format!(
            "table {tbl:?}: appended column {:?} must be nullable — stored rows have no value for it",
            added.name
        )));
    }
    Ok(())
}

/// Re-encodes every stored payload of `table` from `old` to its new layout
/// (NULLs appended), in keyset pages of [`REWRITE_BATCH_ROWS`]. Returns the
/// number of rows rewritten. A payload that does not decode under the stored
/// layout is `syncular.internal` (the bump is refused and rolled back).
fn rewrite_payloads(app_schema: &str, table: &TableSchema, old: &TableLayout) -> EngineResult<u64> {
    // The engine's own rewrite: not a plain SQL write to capture.
    let _engine_write = crate::engine::commit::guard::EngineWrite::table(&table.name, None);
    let mut after = (String::new(), String::new());
    let mut count = 0u64;
    loop {
        let page = ddl::select_payload_page(app_schema, &table.name, &after.0, &after.1, REWRITE_BATCH_ROWS)?;
        for (partition, row_id, payload) in &page {
            let migrated = append_null_columns(old, table.layout(), payload).map_err(|e| {
                EngineError::internal(format!(
                    "table {:?} row {row_id:?} (partition {partition:?}): stored payload does not decode under the stored layout: {}",
                    table.name, e.message
                ))
            })?;
            ddl::update_payload(app_schema, &table.name, partition, row_id, &migrated)?;
            count += 1;
        }
        match page.last() {
            Some((p, r, _)) if page.len() as i64 == REWRITE_BATCH_ROWS => after = (p.clone(), r.clone()),
            _ => break,
        }
    }
    Ok(count)
}
