//! The registered application schema (SPEC §1.6, §2.4, §3.1): the typed,
//! cached view the engine serves from, and its registration.
//!
//! - this module: [`RegisteredSchema`] / [`RegisteredTable`], the
//!   per-backend cache and its loaders, the stored layout's JSON form;
//! - [`register`]: `syncular.register_schema` (first, same, higher version);
//! - [`app_tables`]: the app tables' DDL checks, capture triggers and a
//!   widened table's payload rewrite;
//! - [`hooks`]: registering the host functions the schema carries (write
//!   validators, the commit validator, the reaction planner).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::{json, Value};
use syncular_protocol::row_codec::{ColumnLayout, ColumnType, TableLayout};
use syncular_protocol::schema_ir::{Schema, TableSchema};

use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::app_rows::AppTableSql;
use crate::store::app_table_ddl as ddl;
use crate::store::schema_store;
use crate::store::validator_store::{self, SingleFunction};

pub mod app_tables;
pub mod hooks;
pub mod register;

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
                    sql: AppTableSql::for_table(&app_schema, &qualified_name, t),
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

/// The columns of `table` holding blob references (§5.9), in layout order.
pub fn blob_columns(table: &TableSchema) -> Vec<String> {
    table.layout().columns.iter().filter(|c| c.ty == ColumnType::BlobRef).map(|c| c.name.clone()).collect()
}
