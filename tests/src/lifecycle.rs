//! Helpers of the log-lifecycle tests (`tests/tests/lifecycle_*.rs`: epoch rotation,
//! `drop_partition`, `prune`): an operator connection, readers of a partition's registry and
//! bookkeeping rows, `syncular.rotate_log_epoch`, the server's rows in the shape a client holds
//! them, a transport that loses one response, a wire-version-1 request, and a per-partition
//! backup/restore of the stored state.
//!
//! Every helper takes the partition explicitly: the tests run in parallel, each on its own
//! partitions.

use std::time::{SystemTime, UNIX_EPOCH};

use postgres::Client;
use serde_json::Value;
use ssp2::model::{Frame, SubStatus};
use syncular_client::{SegmentRequest, SyncClient, SyncReport, Transport, TransportError};

use crate::clients::{task_values, HeldRow};
use crate::connect;
use crate::fixtures::{register_schema, server_tasks};
use crate::transport::PgTransport;
use crate::wire::decode_response;

/// A new operator connection with the sample schema registered.
pub fn admin() -> Client {
    let mut conn = connect();
    register_schema(&mut conn).expect("register the sample schema");
    conn
}

/// The partition's `max_commit_seq` (0 when it has no `sync_partitions` row).
pub fn max_commit_seq(conn: &mut Client, partition: &str) -> i64 {
    conn.query_opt(
        "SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1",
        &[&partition],
    )
    .expect("read max_commit_seq")
    .map_or(0, |r| r.get(0))
}

/// The partition's pruning horizon (`sync_partitions.horizon_seq`; the row must exist).
pub fn horizon_seq(conn: &mut Client, partition: &str) -> i64 {
    conn.query_one(
        "SELECT horizon_seq FROM syncular.sync_partitions WHERE partition = $1",
        &[&partition],
    )
    .expect("read horizon_seq")
    .get(0)
}

/// `(log_epoch, epoch_required)` of the partition's registry row.
pub fn registry(conn: &mut Client, partition: &str) -> Option<(String, bool)> {
    conn.query_opt(
        "SELECT log_epoch, epoch_required FROM syncular.sync_partition_registry WHERE partition = $1",
        &[&partition],
    )
    .expect("read the registry")
    .map(|r| (r.get(0), r.get(1)))
}

/// The number of rows of `partition` in `syncular.<table>`.
pub fn count(conn: &mut Client, table: &str, partition: &str) -> i64 {
    conn.query_one(
        format!("SELECT count(*) FROM syncular.{table} WHERE partition = $1").as_str(),
        &[&partition],
    )
    .unwrap_or_else(|e| panic!("count {table}: {e}"))
    .get(0)
}

/// One row of `SELECT * FROM syncular.rotate_log_epoch($1)`.
pub struct Rotation {
    /// The rotated partition.
    pub partition: String,
    /// Its new `logEpoch`.
    pub log_epoch: String,
    /// How many client records of the partition were deleted.
    pub clients_deleted: i64,
}

/// Rotates the partition's `logEpoch` (`syncular.rotate_log_epoch`); asserts one row came back.
pub fn rotate(conn: &mut Client, partition: &str) -> Rotation {
    let rows = conn
        .query("SELECT * FROM syncular.rotate_log_epoch($1)", &[&partition])
        .expect("rotate_log_epoch");
    assert_eq!(rows.len(), 1, "one row for the one rotated partition");
    Rotation {
        partition: rows[0].get("partition"),
        log_epoch: rows[0].get("log_epoch"),
        clients_deleted: rows[0].get("clients_deleted"),
    }
}

/// The server's `tasks` rows of `partition` in the shape a client holds them (id, version, values).
pub fn server_held(conn: &mut Client, partition: &str) -> Vec<HeldRow> {
    server_tasks(conn, partition)
        .expect("server rows")
        .into_iter()
        .map(|(id, project, title, done, priority, version)| {
            let values = task_values(&id, &project, &title, done, priority);
            (id, version, values)
        })
        .collect()
}

/// The row ids of held rows, in order.
pub fn ids(rows: &[HeldRow]) -> Vec<&str> {
    rows.iter().map(|r| r.0.as_str()).collect()
}

/// `(SQLSTATE, message, DETAIL parsed as JSON)` of a server error; panics on any other error.
pub fn db_error(e: &postgres::Error) -> (String, String, Option<Value>) {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("expected a server error, got {e}"));
    (
        db.code().code().to_owned(),
        db.message().to_owned(),
        db.detail().and_then(|d| serde_json::from_str(d).ok()),
    )
}

/// Wall-clock milliseconds since the Unix epoch (for `SET syncular.now_ms`).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One day in milliseconds.
pub const DAY_MS: i64 = 86_400_000;

/// A transport that can lose the response of one round after the server committed it: the
/// "ack" of the commits that round pushed never reaches the client (§2.3, §7.2), so they stay
/// in its outbox and are delivered again later.
pub struct LossyTransport {
    /// The SQL transport doing the work (its `responses` keep every response, lost ones too).
    pub inner: PgTransport,
    /// Lose the next round's response (reset after that round).
    pub lose_next_response: bool,
}

impl Transport for LossyTransport {
    fn sync(&mut self, request: &[u8]) -> Result<Vec<u8>, TransportError> {
        let response = self.inner.sync(request)?;
        if std::mem::take(&mut self.lose_next_response) {
            return Err(TransportError::new(
                "transport.failed",
                "connection reset after the request was sent (the response was lost)",
            ));
        }
        Ok(response)
    }

    fn realtime_sync(&mut self, request: &[u8]) -> Result<Vec<u8>, TransportError> {
        self.sync(request)
    }

    fn download_segment(&mut self, request: &SegmentRequest) -> Result<Vec<u8>, TransportError> {
        self.inner.download_segment(request)
    }

    fn realtime_connect(&mut self) -> Result<(), TransportError> {
        self.inner.realtime_connect()
    }

    fn realtime_send(&mut self, text: &str) -> Result<(), TransportError> {
        self.inner.realtime_send(text)
    }

    fn realtime_close(&mut self) -> Result<(), TransportError> {
        self.inner.realtime_close()
    }
}

/// `sync_until_idle` over a [`LossyTransport`] (at most `max_rounds` rounds).
///
/// Errors: `code: message` of a failed round.
pub fn sync_lossy(
    client: &mut SyncClient,
    t: &mut LossyTransport,
    max_rounds: u32,
) -> Result<SyncReport, String> {
    match client.sync_until_idle(t, Some(max_rounds)) {
        syncular_client::SyncOutcome::Ok(r) => Ok(r),
        syncular_client::SyncOutcome::Failed {
            error_code,
            message,
        } => Err(format!("{error_code}: {message}")),
    }
}

/// Every `SUB_START` of the responses: `(subscription id, status, reasonCode)`.
pub fn sub_starts(responses: &[Vec<u8>]) -> Vec<(String, SubStatus, String)> {
    responses
        .iter()
        .flat_map(|r| decode_response(r).expect("response decodes").frames)
        .filter_map(|f| match f {
            Frame::SubStart {
                id,
                status,
                reason_code,
                ..
            } => Some((id, status, reason_code)),
            _ => None,
        })
        .collect()
}

/// Runs `call` (a `CALL` of a lifecycle procedure with `params`) inside an explicit
/// transaction and asserts Postgres refuses it: a procedure that COMMITs between batches
/// cannot run in a transaction block (2D000). The transaction is rolled back.
pub fn assert_call_refused_in_transaction(conn: &mut Client, call: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) {
    let mut tx = conn.transaction().unwrap();
    let err = tx.query(call, params).expect_err("refused inside BEGIN");
    let (sqlstate, message, _) = db_error(&err);
    assert_eq!(
        (sqlstate.as_str(), message.as_str()),
        ("2D000", "invalid transaction termination"),
        "{err}"
    );
    tx.rollback().unwrap();
}

/// Every table holding rows of a partition: `(qualified name, partition column)` — the
/// `syncular.sync_*` tables (`partition`) and the app tables (`_sync_partition`).
pub fn partition_tables(conn: &mut Client) -> Vec<(String, String)> {
    conn.query(
        "SELECT format('%I.%I', c.table_schema, c.table_name), c.column_name::text
           FROM information_schema.columns c
           JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
          WHERE t.table_type = 'BASE TABLE'
            AND ((c.table_schema = 'syncular' AND c.column_name = 'partition')
              OR (c.table_schema NOT IN ('syncular', 'pg_catalog', 'information_schema') AND c.column_name = '_sync_partition'))
          ORDER BY 1",
        &[],
    )
    .expect("list the partition's tables")
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// `s` as a SQL string literal.
pub fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A backup of one partition's authoritative storage (every row of it, in session temp tables).
pub fn backup_partition(conn: &mut Client, partition: &str) {
    for (i, (table, column)) in partition_tables(conn).into_iter().enumerate() {
        conn.batch_execute(&format!(
            "DROP TABLE IF EXISTS pg_temp.backup_{i}; \
             CREATE TEMP TABLE backup_{i} AS SELECT * FROM {table} WHERE {column} = {}",
            literal(partition)
        ))
        .expect("backup");
    }
}

/// Restores the partition's storage to the backup (a point-in-time restore of one tenant): the
/// current rows are replaced by the backed-up ones, as raw stored state (capture triggers off).
/// Nothing is notified: a running gateway does not learn about it.
pub fn restore_partition(conn: &mut Client, partition: &str) {
    let tables = partition_tables(conn);
    let mut tx = conn.transaction().expect("tx");
    tx.batch_execute("SET LOCAL session_replication_role = replica")
        .unwrap();
    for (i, (table, column)) in tables.iter().enumerate() {
        tx.batch_execute(&format!(
            "DELETE FROM {table} WHERE {column} = {p}; INSERT INTO {table} SELECT * FROM pg_temp.backup_{i}",
            p = literal(partition)
        ))
        .expect("restore");
    }
    tx.commit().expect("restore committed");
}
