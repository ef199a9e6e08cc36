//! `syncular.register_schema` (SPEC §1.6, §2.4, §3.1): first registration,
//! the same version again, or a higher version.
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

use serde_json::Value;
use syncular_protocol::row_codec::TableLayout;
use syncular_protocol::schema_ir::{Schema, TableSchema};

use super::app_tables::*;
use super::{invalidate_cache, layout_json, load_registered_schema, parse_layout_json, RegisterOutcome};
use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult};
use crate::store::app_table_ddl as ddl;
use crate::store::schema_store::{self, StoredTable};


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
                crate::store::blobs::refs::rebuild_blob_refs(app_schema, &t.name, &super::blob_columns(t))?;
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

/// A higher version (module docs): checks every stored table before
/// changing anything ([`check_higher`]), then retires the dropped tables and
/// creates, widens and re-indexes the kept ones ([`apply_higher`]).
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
    let (retired, widened) = check_higher(schema, stored_schema, app_schema, stored_tables, allow_drop)?;
    // 2. Apply: retire, create, widen, rebuild indexes, rewrite payloads. First the
    // old marker row is rewritten: a REPEATABLE READ transaction whose snapshot
    // shows it fails instead of using its layout (schema_store::confirm_marker_in_snapshot).
    schema_store::touch_current_version()?;
    retire_tables(app_schema, &retired)?;
    let rewritten_rows = apply_higher(schema, app_schema, stored_tables, &widened)?;
    install_capture(app_schema, schema)?;
    write_marker(schema, ir, app_schema)?;
    Ok(RegisterOutcome::Migrated { rewritten_rows, retired })
}

/// A kept table whose layout grows, with its stored (old) layout.
type Widened<'a> = Vec<(&'a TableSchema, TableLayout)>;

/// Step 1 of [`register_higher`]: the stored tables missing from `schema`
/// (retired, or refused without `allow_drop`) and the widened ones, after
/// checking every kept table ([`check_kept_table`]) and every re-added one.
fn check_higher<'a>(
    schema: &'a Schema,
    stored_schema: &Schema,
    app_schema: &str,
    stored_tables: &[StoredTable],
    allow_drop: bool,
) -> EngineResult<(Vec<String>, Widened<'a>)> {
    let v = schema.version;
    let mut retired = Vec::new();
    let mut widened: Widened<'a> = Vec::new();
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
        if let Some(old_layout) = check_kept_table(stored_schema, app_schema, stored, new)? {
            widened.push((new, old_layout));
        }
    }
    for t in schema.tables.iter().filter(|t| stored_tables.iter().all(|s| s.tbl != t.name)) {
        check_readded_table(t)?;
    }
    Ok((retired, widened))
}

/// One stored table kept by a higher version: its guard, an append-only
/// layout, the same primary key and scope columns, every physical column
/// still there. `Some(old layout)` when the table widens.
fn check_kept_table(
    stored_schema: &Schema,
    app_schema: &str,
    stored: &StoredTable,
    new: &TableSchema,
) -> EngineResult<Option<TableLayout>> {
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
    Ok((old_layout.len() < new.layout().len()).then_some(old_layout))
}

/// Drops the retired tables: their row scopes, blob references, write
/// validator and app table.
fn retire_tables(app_schema: &str, retired: &[String]) -> EngineResult<()> {
    for tbl in retired {
        schema_store::delete_row_scopes_of_table(tbl)?;
        // Its rows are gone: so are their blob references (§5.9.4; the blobs become orphans).
        crate::store::blobs::refs::delete_blob_refs_of_table(tbl)?;
        // A retired table's write validator goes with it (a re-added table starts without one).
        crate::store::validator_store::delete_write_validator(tbl)?;
        ddl::drop_app_table(app_schema, tbl)?;
    }
    Ok(())
}

/// Step 2 of [`register_higher`] for the tables of `schema`: creates the new
/// ones; for the kept ones, rebuilds the indexes and, when widened, adds the
/// columns and rewrites the payloads. Returns the rows rewritten.
fn apply_higher(
    schema: &Schema,
    app_schema: &str,
    stored_tables: &[StoredTable],
    widened: &Widened<'_>,
) -> EngineResult<u64> {
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
    Ok(rewritten_rows)
}
