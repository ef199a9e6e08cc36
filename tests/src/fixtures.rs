//! Shared fixtures of the out-of-process tests, the demo and the benchmark:
//! the sample schema IR (one `tasks` table scoped by `project:{project_id}`),
//! its registration, per-test partition names, the allowed-scope maps, and a
//! partition-wide content fingerprint used to prove "nothing else changed".

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use postgres::Client;
use serde_json::{json, Value};

/// Upper bound of any single statement issued by the harness, so a lock
/// wait that never ends fails the test instead of hanging the run.
pub const STATEMENT_TIMEOUT: &str = "120s";

/// Sets [`STATEMENT_TIMEOUT`] on `conn`.
///
/// Errors: the Postgres error of `SET`.
pub fn bound_statements(conn: &mut Client) -> Result<(), postgres::Error> {
    conn.batch_execute(&format!("SET statement_timeout = '{STATEMENT_TIMEOUT}'"))
}

/// Name of the sample app table.
pub const TASKS: &str = "tasks";

/// The sample schema IR (§2.4), version 1: `tasks(id string pk, project_id
/// string, title string, done boolean, priority integer NULL)`, scoped by
/// `project:{project_id}`. The same JSON feeds `syncular.register_schema`
/// and the `syncular-client` constructor.
pub fn schema_ir() -> Value {
    json!({
        "version": 1,
        "tables": [{
            "name": TASKS,
            "primaryKey": "id",
            "columns": [
                { "name": "id", "type": "string", "nullable": false },
                { "name": "project_id", "type": "string", "nullable": false },
                { "name": "title", "type": "string", "nullable": false },
                { "name": "done", "type": "boolean", "nullable": false },
                { "name": "priority", "type": "integer", "nullable": true }
            ],
            "scopes": [{ "pattern": "project:{project_id}" }]
        }]
    })
}

/// Registers [`schema_ir`] (idempotent: same version, same layout). Takes a
/// transaction-scoped advisory lock so parallel callers never run the DDL at
/// the same time.
///
/// Errors: the Postgres error of `syncular.register_schema`.
pub fn register_schema(conn: &mut Client) -> Result<(), postgres::Error> {
    let mut tx = conn.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock(7315001)", &[])?;
    tx.execute(
        "SELECT syncular.register_schema($1::jsonb)",
        &[&schema_ir()],
    )?;
    tx.commit()
}

/// A partition name unique to this process and call, prefixed by `label`
/// (so tests sharing one server never see each other's data).
pub fn partition_name(label: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("it-{label}-{}-{nanos}-{n}", std::process::id())
}

/// The §3.2 allowed map granting the listed projects: `{"project_id": [...]}`.
pub fn allow_projects(projects: &[&str]) -> Value {
    json!({ "project_id": projects })
}

/// The §3.2 allowed map granting every project (`"*"`).
pub fn allow_all_projects() -> Value {
    json!({ "project_id": ["*"] })
}

/// Which tables a [`fingerprint`] covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Every table holding partition-keyed rows: the `syncular.sync_*`
    /// tables and the app tables. For requests that must change nothing.
    Everything,
    /// The log and the data only (`sync_partitions`, `sync_commits`,
    /// `sync_changes`, `sync_change_scopes`, `sync_row_scopes`,
    /// `sync_tombstones`, app tables) — excludes the bookkeeping a served
    /// request legitimately touches (registry last-seen time, client record,
    /// stored push results, round-failure reports, the client's auth lease) and the stored-segment
    /// cache a bootstrap fills (`sync_segments`, `sync_segment_chunks`,
    /// `sync_segment_publications`).
    LogAndData,
}

const BOOKKEEPING: &[&str] = &[
    "sync_partition_registry",
    "sync_clients",
    "sync_push_results",
    "sync_round_failures",
    "sync_reactions",
    "sync_auth_leases",
    "sync_segments",
    "sync_segment_chunks",
    "sync_segment_publications",
];

/// A deterministic fingerprint of every row of `partition` in the covered
/// tables: `[(qualified table, row count, md5 of the sorted row texts)]`.
/// Tables are discovered from the catalog: any table of schema `syncular`
/// with a `partition` column, and every registered app table (column
/// `_sync_partition`, else `partition`).
///
/// Errors: any Postgres error while reading.
pub fn fingerprint(
    conn: &mut Client,
    partition: &str,
    coverage: Coverage,
) -> Result<Vec<(String, i64, String)>, postgres::Error> {
    let rows = conn.query(
        "SELECT c.table_schema::text, c.table_name::text, c.column_name::text
           FROM information_schema.columns c
           JOIN information_schema.tables t
             ON t.table_schema = c.table_schema AND t.table_name = c.table_name
          WHERE t.table_type = 'BASE TABLE'
            AND ((c.table_schema = 'syncular' AND c.column_name = 'partition')
              OR (c.table_schema NOT IN ('syncular', 'pg_catalog', 'information_schema')
                  AND c.column_name IN ('_sync_partition')))
          ORDER BY 1, 2",
        &[],
    )?;
    let mut out = Vec::new();
    for row in rows {
        let schema: String = row.get(0);
        let table: String = row.get(1);
        let column: String = row.get(2);
        if coverage == Coverage::LogAndData && BOOKKEEPING.contains(&table.as_str()) {
            continue;
        }
        let qualified = format!("{}.{}", quote_ident(&schema), quote_ident(&table));
        let sql = format!(
            "SELECT count(*)::bigint, coalesce(md5(string_agg(t::text, E'\\n' ORDER BY t::text)), '')
               FROM {qualified} t WHERE t.{} = $1",
            quote_ident(&column)
        );
        let r = conn.query_one(sql.as_str(), &[&partition])?;
        out.push((qualified, r.get(0), r.get(1)));
    }
    Ok(out)
}

/// `quote_ident` semantics for catalog names used in the fingerprint query.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// One app-table row: `(id, project_id, title, done, priority, server version)`.
pub type ServerTask = (String, String, String, bool, Option<i64>, i64);

/// Rows of the app table `tasks` for `partition`, ordered by id — read with
/// plain SQL through the projection columns.
///
/// Errors: any Postgres error.
pub fn server_tasks(
    conn: &mut Client,
    partition: &str,
) -> Result<Vec<ServerTask>, postgres::Error> {
    let rows = conn.query(
        "SELECT id, project_id, title, done, priority, _sync_version
           FROM public.tasks WHERE _sync_partition = $1 ORDER BY id",
        &[&partition],
    )?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect())
}
