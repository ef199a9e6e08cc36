//! `pg_stat_statements` as the log of every statement the extension runs (issue 14,
//! `tests/tests/router_statements.rs`): with `pg_stat_statements.track = 'all'` the statements
//! issued through SPI (nested) are recorded with their text. `scripts/test` preloads the module
//! when the server's major ships it and then exports [`REQUIRED_ENV`].

use postgres::Client;

use crate::router_check::report::HARNESS_TAG;
use crate::router_check::Layout;

/// Set by `scripts/test` when the server was started with `pg_stat_statements` preloaded:
/// its absence is then a failure, not a skip.
pub const REQUIRED_ENV: &str = "SYNCULAR_STATEMENT_LOG_REQUIRED";

/// Whether [`REQUIRED_ENV`] is set (to anything but empty or `0`).
pub fn required() -> bool {
    std::env::var(REQUIRED_ENV).map(|v| !v.is_empty() && v != "0").unwrap_or(false)
}

/// A connection with `syncular.router_statements = on` (and bounded statements): the mode
/// whose statements the router check covers.
pub fn router_connection() -> Client {
    let mut conn = crate::connect();
    router_mode(&mut conn);
    conn
}

/// Turns `syncular.router_statements` on for `conn` (a custom GUC placeholder until the
/// extension defines it) and bounds its statements.
pub fn router_mode(conn: &mut Client) {
    conn.batch_execute(&format!(
        "SET {HARNESS_TAG} syncular.router_statements = on; SET {HARNESS_TAG} statement_timeout = '{}'",
        crate::fixtures::STATEMENT_TIMEOUT
    ))
    .expect("SET syncular.router_statements = on");
}

/// Makes `pg_stat_statements` readable on `conn`'s database; `Err(why)` when the server does
/// not preload it or does not track nested statements.
pub fn ensure(conn: &mut Client) -> Result<(), String> {
    let row = conn
        .query_one(
            &format!(
                "SELECT {HARNESS_TAG} current_setting('shared_preload_libraries'), \
                        current_setting('pg_stat_statements.track', true), \
                        EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements')"
            ),
            &[],
        )
        .map_err(|e| e.to_string())?;
    let (preload, track, available): (String, Option<String>, bool) = (row.get(0), row.get(1), row.get(2));
    if !available || !preload.split(',').any(|l| l.trim() == "pg_stat_statements") {
        return Err(format!("pg_stat_statements is not preloaded (shared_preload_libraries = '{preload}', available: {available})"));
    }
    if track.as_deref() != Some("all") {
        return Err(format!("pg_stat_statements.track is {track:?}, not 'all' (nested SPI statements would be missed)"));
    }
    conn.batch_execute(&format!("CREATE {HARNESS_TAG} EXTENSION IF NOT EXISTS pg_stat_statements"))
        .map_err(|e| format!("CREATE EXTENSION pg_stat_statements: {e}"))
}

/// Forgets every recorded statement.
pub fn reset(conn: &mut Client) {
    conn.execute(&format!("SELECT {HARNESS_TAG} pg_stat_statements_reset()"), &[])
        .expect("pg_stat_statements_reset()");
}

/// The texts recorded in this database, nested statements only where the server tells
/// (`toplevel`, Postgres 14+: the extension's SQL always runs nested, inside its functions,
/// procedures and triggers; top-level entries are the harness's and its driver's).
pub fn recorded(conn: &mut Client) -> Vec<String> {
    let has_toplevel: bool = conn
        .query_one(
            &format!(
                "SELECT {HARNESS_TAG} EXISTS (SELECT 1 FROM pg_catalog.pg_attribute \
                  WHERE attrelid = 'pg_stat_statements'::regclass AND attname = 'toplevel')"
            ),
            &[],
        )
        .expect("pg_stat_statements columns")
        .get(0);
    let nested = if has_toplevel { "AND NOT toplevel" } else { "" };
    conn.query(
        &format!(
            "SELECT {HARNESS_TAG} query FROM pg_stat_statements \
              WHERE dbid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()) {nested} \
              ORDER BY query"
        ),
        &[],
    )
    .expect("read pg_stat_statements")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The layout with the registered app tables (`syncular.sync_schema_tables`).
pub fn layout(conn: &mut Client) -> Layout {
    let rows = conn
        .query(&format!("SELECT DISTINCT {HARNESS_TAG} app_schema, app_table FROM syncular.sync_schema_tables"), &[])
        .expect("registered app tables");
    Layout::new(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
