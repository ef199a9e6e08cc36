//! A database of its own for schema-bump races (`tests/tests/schema_bump_*.rs`):
//! one synced table `cards(id, ws, title, c2 … cN)` scoped by `ws:{ws}`,
//! where version N appends the nullable string column `cN`, and helpers to
//! bump it, commit rows and check that every stored row still decodes.

use std::sync::mpsc;
use std::thread;

use postgres::{Client, GenericClient};
use serde_json::{json, Value};

use crate::{connect_to, dsn, dsn_for_db};

/// The partition every helper writes.
pub const PARTITION: &str = "bump";

/// Version `v` of the test schema.
pub fn ir(v: u32) -> Value {
    let mut columns = vec![
        json!({"name": "id", "type": "string", "nullable": false}),
        json!({"name": "ws", "type": "string", "nullable": false}),
        json!({"name": "title", "type": "string", "nullable": true}),
    ];
    columns.extend((2..=v).map(|i| json!({"name": format!("c{i}"), "type": "string", "nullable": true})));
    json!({"version": v, "tables": [{"name": "cards", "primaryKey": "id", "columns": columns, "scopes": ["ws:{ws}"]}]})
}

/// A database of its own with the extension and schema version 1, dropped
/// (`WITH (FORCE)`) when the value goes.
pub struct Scratch {
    name: String,
    dsn: String,
}

impl Scratch {
    /// Creates `syncular_bump_<label>_<pid>` (dropping a leftover first).
    ///
    /// Panics when the server refuses (no database, no extension).
    pub fn new(label: &str) -> Scratch {
        let name = format!("syncular_bump_{label}_{}", std::process::id());
        let mut admin = connect_to(&dsn());
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let scratch = Scratch { dsn: dsn_for_db(&dsn(), &name), name };
        let mut c = scratch.connect();
        c.batch_execute("CREATE EXTENSION syncular").unwrap();
        register(&mut c, 1).unwrap();
        scratch
    }

    /// A new connection (statement_timeout 60 s: a hang fails, not stalls, the test).
    pub fn connect(&self) -> Client {
        let mut c = connect_to(&self.dsn);
        c.batch_execute("SET statement_timeout = '60s'").unwrap();
        c
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&dsn(), postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// `syncular.register_schema(ir(v))`.
///
/// Errors: the Postgres error.
pub fn register(c: &mut impl GenericClient, v: u32) -> Result<(), postgres::Error> {
    c.execute("SELECT syncular.register_schema($1::text::jsonb)", &[&ir(v).to_string()]).map(|_| ())
}

/// `syncular.commit` in [`PARTITION`] of one upsert of `id` (ws `w1`), with
/// one more column when `extra` is given; returns the result JSON.
///
/// Errors: the Postgres error.
pub fn upsert(c: &mut impl GenericClient, id: &str, title: &str, extra: Option<(&str, &str)>) -> Result<Value, postgres::Error> {
    let mut row = json!({"id": id, "ws": "w1", "title": title});
    if let Some((column, value)) = extra {
        row[column] = json!(value);
    }
    let ops = json!([{"table": "cards", "op": "upsert", "row": row}]);
    Ok(c.query_one(
        "SELECT syncular.commit($1, 'alice', $2::text::jsonb, allowed_scopes => '{\"ws\": [\"*\"]}')",
        &[&PARTITION, &ops.to_string()],
    )?
    .get(0))
}

/// Every stored row decodes under the current layout: an upsert of each one
/// setting `column` (an update decodes the stored payload) is applied.
///
/// Panics naming the rows that are not.
pub fn assert_every_row_updates(c: &mut Client, column: &str) {
    let ids: Vec<String> = c.query("SELECT id FROM public.cards ORDER BY id", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(!ids.is_empty(), "no rows to check");
    let mut bad = Vec::new();
    for id in ids {
        match upsert(c, &id, "final", Some((column, "set"))) {
            Ok(r) if r["status"] == "applied" => {}
            Ok(r) => bad.push(format!("{id}: {r}")),
            Err(e) => bad.push(format!("{id}: {}", err_text(&e))),
        }
    }
    assert!(bad.is_empty(), "rows that no longer decode under the current layout: {bad:?}");
}

/// `SQLSTATE message` of a Postgres error (its text for other errors).
pub fn err_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

/// The SQLSTATE of `e` (empty for a non-database error).
pub fn sqlstate(e: &postgres::Error) -> String {
    e.code().map(|c| c.code().to_owned()).unwrap_or_default()
}

/// Runs `f` on a thread; the receiver gets its result when it finishes.
pub fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}
