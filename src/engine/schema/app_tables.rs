//! The app tables of a registration (SPEC §3.1; rules in [`super::register`]):
//! name and shape checks of an app table that exists or is adopted, its
//! indexes, its capture triggers, and a widened table's payload rewrite.

use syncular_protocol::row_codec::{append_null_columns, TableLayout};
use syncular_protocol::schema_ir::{Schema, TableSchema};

use super::REWRITE_BATCH_ROWS;
use crate::engine::error::{EngineError, EngineResult};
use crate::store::app_table_ddl as ddl;
use crate::store::schema_store;

pub(super) fn check_app_schema_name(app_schema: &str) -> EngineResult<()> {
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
pub(super) fn required_columns(table: &TableSchema) -> Vec<&str> {
    let mut out = vec![ddl::PARTITION_COLUMN, ddl::ROW_ID_COLUMN];
    out.extend(table.columns.iter().map(|c| c.name.as_str()));
    out.extend([ddl::VERSION_COLUMN, ddl::SCOPES_COLUMN, ddl::PAYLOAD_COLUMN]);
    out
}

pub(super) fn assert_physical_columns(app_schema: &str, table_name: &str, required: &[&str]) -> EngineResult<()> {
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
pub(super) fn ensure_column_versions(app_schema: &str, table_name: &str) -> EngineResult<()> {
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
pub(super) fn scope_columns(table: &TableSchema) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> =
        table.scopes.iter().map(|s| (s.variable.clone(), s.column.clone())).collect();
    out.sort();
    out.dedup();
    out
}

/// Whether two compiled tables describe the same served schema.
pub(super) fn same_table(a: &TableSchema, b: &TableSchema) -> bool {
    a.layout() == b.layout()
        && a.columns == b.columns
        && a.primary_key == b.primary_key
        && a.scopes == b.scopes
        && a.indexes == b.indexes
}

/// Creates the declared indexes of `table`; refuses (`syncular.schema_refused`)
/// when a physical index name is already taken in the app schema (by an
/// operator's relation or another table's index) instead of a raw 42P07.
pub(super) fn create_indexes(app_schema: &str, table: &TableSchema) -> EngineResult<()> {
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
pub(super) fn check_table_guard(app_schema: &str, name: &str) -> EngineResult<()> {
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
pub(super) fn check_adoptable_shape(app_schema: &str, table: &TableSchema) -> EngineResult<()> {
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
pub(super) fn check_readded_table(table: &TableSchema) -> EngineResult<()> {
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

/// (Re)creates the capture triggers of every app table (plain SQL writes
/// become commits: [`crate::engine::capture`]).
/// Under a library newer than the catalog (before `ALTER EXTENSION syncular
/// UPDATE`) the trigger functions do not exist yet: a WARNING says so and the
/// update installs the triggers.
pub(super) fn install_capture(app_schema: &str, schema: &Schema) -> EngineResult<()> {
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
pub(super) fn check_append_only(tbl: &str, old: &TableLayout, new: &TableSchema) -> EngineResult<()> {
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
pub(super) fn rewrite_payloads(app_schema: &str, table: &TableSchema, old: &TableLayout) -> EngineResult<u64> {
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
