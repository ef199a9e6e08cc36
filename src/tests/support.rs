//! Helpers shared by the `#[pg_test]`s: run SQL inside a subtransaction so
//! an ERROR comes back as data, register IRs, read catalogs.

use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::{json, Value};

use crate::store::spi::subtransaction::{self, SubtransactionError};

/// Runs `sql` (no result) in a subtransaction.
pub fn try_run(sql: &str) -> Result<(), SubtransactionError> {
    subtransaction::run(|| Spi::run(sql).unwrap_or_else(|e| panic!("SPI: {e}")))
}

/// Runs `sql`, panicking (failing the test) on any error.
pub fn run(sql: &str) {
    Spi::run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `SELECT <one text value>`.
pub fn text(sql: &str) -> Option<String> {
    Spi::get_one::<String>(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// `SELECT <one bytea value>` (must not be NULL).
pub fn bytea(sql: &str) -> Vec<u8> {
    Spi::get_one::<Vec<u8>>(sql).unwrap_or_else(|e| panic!("{sql}: {e}")).unwrap_or_else(|| panic!("{sql}: NULL"))
}

/// `SELECT <one bigint value>`.
pub fn int8(sql: &str) -> Option<i64> {
    Spi::get_one::<i64>(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Registers `ir` through the engine exactly as `syncular.register_schema`
/// does (errors raised through `api::errors`, so SQLSTATE and message are the
/// SQL surface's), in a subtransaction: the outcome text
/// (`created` / `unchanged` / `migrated (…)`) or the error it raised.
pub fn register_with(ir: &Value, app_schema: &str, allow_drop: bool) -> Result<String, SubtransactionError> {
    use crate::api::errors::OrRaise;
    let ir = ir.clone();
    let app_schema = app_schema.to_string();
    subtransaction::run(move || {
        let outcome = crate::engine::schema::register::register(&ir, &app_schema, allow_drop).or_raise();
        crate::api::schema::describe_outcome(&outcome)
    })
}

/// `SELECT syncular.register_schema($1, $2, $3)` through SQL, in a
/// subtransaction.
pub fn register_sql(ir: &Value, app_schema: &str, allow_drop: bool) -> Result<(), SubtransactionError> {
    let ir = ir.clone();
    let app_schema = app_schema.to_string();
    subtransaction::run(move || {
        Spi::run_with_args(
            "SELECT syncular.register_schema($1, $2, $3)",
            &[JsonB(ir).into(), app_schema.as_str().into(), allow_drop.into()],
        )
        .unwrap_or_else(|e| panic!("SPI: {e}"))
    })
}

/// `syncular.register_schema(ir)` with the defaults.
pub fn register(ir: &Value) -> Result<String, SubtransactionError> {
    register_with(ir, "public", false)
}

/// Asserts `result` is an error with `sqlstate` whose message starts with
/// `"<code>: "` and contains `fragment`.
pub fn expect_error<T: std::fmt::Debug>(
    result: Result<T, SubtransactionError>,
    sqlstate: &str,
    code: &str,
    fragment: &str,
) {
    let err = match result {
        Ok(v) => panic!("expected {code} ({fragment}), got Ok({v:?})"),
        Err(e) => e,
    };
    assert_eq!(err.sqlstate, sqlstate, "SQLSTATE of {:?}", err.message);
    assert!(err.message.starts_with(&format!("{code}: ")), "message {:?} should start with {code}", err.message);
    assert!(err.message.contains(fragment), "message {:?} should contain {fragment:?}", err.message);
}

/// A one-table IR (`tasks`, scope `project:{project_id}`) with every
/// column type, a unique index on `code`, at `version`.
pub fn tasks_ir(version: i32) -> Value {
    json!({
        "version": version,
        "tables": [{
            "name": "tasks",
            "primaryKey": "id",
            "columns": [
                {"name": "id", "type": "string", "nullable": false},
                {"name": "project_id", "type": "string", "nullable": false},
                {"name": "title", "type": "string", "nullable": true},
                {"name": "n", "type": "integer", "nullable": true},
                {"name": "f", "type": "float", "nullable": true},
                {"name": "done", "type": "boolean", "nullable": false},
                {"name": "meta", "type": "json", "nullable": true},
                {"name": "bin", "type": "bytes", "nullable": true},
                {"name": "att", "type": "blob_ref", "nullable": true},
                {"name": "doc", "type": "crdt", "nullable": true, "crdtType": "yjs-doc"},
                {"name": "secret", "type": "bytes", "nullable": true, "encrypted": true, "declaredType": "string"},
                {"name": "code", "type": "string", "nullable": true}
            ],
            "scopes": [{"pattern": "project:{project_id}"}],
            "indexes": [{"name": "tasks_code", "columns": ["code"], "unique": true}],
            "ftsIndexes": [{"name": "tasks_fts", "columns": ["title"], "tokenize": "unicode61"}]
        }]
    })
}

/// A minimal valid table JSON named `name` (columns id, ws, label).
pub fn small_table(name: &str) -> Value {
    json!({
        "name": name,
        "primaryKey": "id",
        "columns": [
            {"name": "id", "type": "string", "nullable": false},
            {"name": "ws", "type": "string", "nullable": false},
            {"name": "label", "type": "string", "nullable": true}
        ],
        "scopes": ["ws:{ws}"]
    })
}

/// `{"version": v, "tables": [tables…]}`.
pub fn ir_of(version: i32, tables: Vec<Value>) -> Value {
    json!({"version": version, "tables": tables})
}

/// Physical columns of `schema.table` as `name type notnull` lines in
/// attnum order.
pub fn columns_of(schema: &str, table: &str) -> Vec<String> {
    let sql = format!(
        "SELECT string_agg(a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) \
                || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END, '|' ORDER BY a.attnum) \
           FROM pg_catalog.pg_attribute a \
          WHERE a.attrelid = to_regclass({}) AND a.attnum > 0 AND NOT a.attisdropped",
        pgrx::spi::quote_literal(format!("{}.{}", pgrx::spi::quote_identifier(schema), pgrx::spi::quote_identifier(table)))
    );
    text(&sql).map(|s| s.split('|').map(str::to_string).collect()).unwrap_or_default()
}

/// Whether `schema.table` exists.
pub fn table_exists(schema: &str, table: &str) -> bool {
    !columns_of(schema, table).is_empty()
}
