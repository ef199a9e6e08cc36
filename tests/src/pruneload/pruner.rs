//! Running `CALL syncular.prune` and watching its batches.
//!
//! The §4.6 active window keeps the horizon at the smallest cursor of the
//! clients seen in the last 14 days (minimum setting), so readers that pull
//! during a test would hold it wherever their cursor happens to be. The
//! pruning session therefore moves its own clock forward
//! ([`PRUNE_CLOCK_SHIFT_MS`], through the superuser-only `syncular.now_ms`):
//! every client record is then older than the active window, no commit is
//! old enough for the age limit, no record old enough for the client and
//! outcome retentions — the horizon goes exactly to `maxCommitSeq − 1000`
//! (the newest 1000 commits always stay). Every other session keeps the real
//! clock.
//!
//! [`Monitor`] samples the pruning backend in `pg_stat_activity`: the
//! procedure COMMITs after every batch, and each transaction inside a
//! procedure gets its own `xact_start`, so the longest transaction observed
//! is (within one sampling period) the longest batch — what a push that
//! waits for the pruning fence can wait at most.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use postgres::Client;

use super::{pg_text, unix_ms};

/// How far the pruning session's clock runs ahead: 15 days, past the 14-day
/// active window, short of the 30-day age limit and client retention.
pub const PRUNE_CLOCK_SHIFT_MS: i64 = 15 * 86_400_000;

/// Extra SQL run in every pruning session (`SYNCULAR_PRUNE_SESSION_SQL`, a
/// diagnostic: e.g. `SET jit = off; SET enable_hashjoin = off` to see what
/// the batches cost under other plans), `None` when unset.
pub fn session_sql() -> Option<String> {
    std::env::var("SYNCULAR_PRUNE_SESSION_SQL").ok().filter(|s| !s.trim().is_empty())
}

/// Opens the pruning session: its clock runs [`PRUNE_CLOCK_SHIFT_MS`] ahead
/// (`syncular.now_ms`, superuser only), statements are not bounded, and
/// [`session_sql`] runs.
///
/// Errors: the Postgres error.
pub fn prune_session(dsn: &str) -> Result<(Client, i32), String> {
    let mut conn = crate::connect_to(dsn);
    conn.execute(
        "SELECT pg_catalog.set_config('syncular.now_ms', $1, false)",
        &[&(unix_ms() + PRUNE_CLOCK_SHIFT_MS).to_string()],
    )
    .map_err(|e| pg_text(&e))?;
    conn.batch_execute("SET statement_timeout = 0; SET application_name = 'syncular-prune'")
        .map_err(|e| pg_text(&e))?;
    if let Some(sql) = session_sql() {
        conn.batch_execute(&sql).map_err(|e| format!("SYNCULAR_PRUNE_SESSION_SQL: {}", pg_text(&e)))?;
    }
    let pid: i32 = conn
        .query_one("SELECT pg_backend_pid()", &[])
        .map_err(|e| pg_text(&e))?
        .get(0);
    Ok((conn, pid))
}

/// What one `CALL syncular.prune` returned, and how long it took.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PruneCall {
    pub partitions: i32,
    pub commits: i64,
    pub push_results: i64,
    pub clients: i64,
    pub elapsed: Duration,
}

/// How a prune is driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// `CALL syncular.prune(partition, batch_rows)` (the procedure).
    Call,
    /// What the procedure does, from the client (docs/src/sql/lifecycle.md: "call the batch
    /// functions yourself, each in its own transaction"):
    /// `syncular.advance_horizon`, then `syncular.prune_batch` until `done`,
    /// each an autocommit statement, giving up after 50 `fence_busy`
    /// batches in a row as the procedure does.
    Batches,
}

impl Driver {
    /// `SYNCULAR_PRUNE_DRIVER`: `call` (default) or `batches`.
    ///
    /// Panics on any other value.
    pub fn from_env() -> Driver {
        match std::env::var("SYNCULAR_PRUNE_DRIVER").as_deref() {
            Err(_) | Ok("") | Ok("call") => Driver::Call,
            Ok("batches") => Driver::Batches,
            Ok(other) => panic!("SYNCULAR_PRUNE_DRIVER must be `call` or `batches`, not {other:?}"),
        }
    }

    /// What it runs, for reports.
    pub fn label(self, batch_rows: Option<i32>) -> String {
        let rows = batch_rows.map_or("default".to_owned(), |b| b.to_string());
        match self {
            Driver::Call => format!("CALL syncular.prune(partition, batch_rows {rows})"),
            Driver::Batches => format!(
                "syncular.advance_horizon + syncular.prune_batch(partition, max_rows {rows}) until done, one \
                 autocommit statement each (SYNCULAR_PRUNE_DRIVER=batches: what CALL syncular.prune runs)"
            ),
        }
    }
}

/// Prunes `partition` once with `driver`, `batch_rows` per batch (`None`:
/// the functions' default, 10,000).
///
/// Errors: the Postgres error (e.g. a failed batch).
pub fn prune(conn: &mut Client, partition: &str, batch_rows: Option<i32>, driver: Driver) -> Result<PruneCall, String> {
    let began = Instant::now();
    let mut out = match driver {
        Driver::Call => {
            let row = match batch_rows {
                Some(b) => conn.query_one("CALL syncular.prune($1::text, $2::integer)", &[&partition, &b]),
                None => conn.query_one("CALL syncular.prune($1::text)", &[&partition]),
            }
            .map_err(|e| format!("CALL syncular.prune: {}", pg_text(&e)))?;
            PruneCall {
                partitions: row.get("partitions"),
                commits: row.get("commits"),
                push_results: row.get("push_results"),
                clients: row.get("clients"),
                elapsed: Duration::ZERO,
            }
        }
        Driver::Batches => {
            let advanced: Option<i64> = conn
                .query_one("SELECT syncular.advance_horizon($1)", &[&partition])
                .map_err(|e| format!("syncular.advance_horizon: {}", pg_text(&e)))?
                .get(0);
            let mut out = PruneCall { partitions: i32::from(advanced.is_some()), ..PruneCall::default() };
            let rows = batch_rows.unwrap_or(10_000);
            let mut busy = 0;
            while advanced.is_some() {
                let b = conn
                    .query_one(
                        "SELECT commits, push_results, clients, fence_busy, done FROM syncular.prune_batch($1, $2)",
                        &[&partition, &rows],
                    )
                    .map_err(|e| format!("syncular.prune_batch: {}", pg_text(&e)))?;
                out.commits += b.get::<_, i64>(0);
                out.push_results += b.get::<_, i64>(1);
                out.clients += b.get::<_, i64>(2);
                if b.get::<_, bool>(4) {
                    break;
                }
                if b.get::<_, bool>(3) {
                    busy += 1;
                    if busy >= 50 {
                        return Err(format!("prune_batch: the fence of {partition} stayed busy for 50 batches"));
                    }
                } else {
                    busy = 0;
                }
            }
            out
        }
    };
    out.elapsed = began.elapsed();
    Ok(out)
}

/// `CALL syncular.prune(partition, batch_rows)` on `conn`.
///
/// Errors: the Postgres error (e.g. a failed batch).
pub fn call_prune(conn: &mut Client, partition: &str, batch_rows: i32) -> Result<PruneCall, String> {
    prune(conn, partition, Some(batch_rows), Driver::Call)
}

/// One transaction of the pruning backend, as sampled.
#[derive(Clone, Copy, Debug)]
pub struct Xact {
    /// Its `xact_start`, Unix µs.
    pub start_us: i64,
    /// The longest age observed (≤ its duration, by less than a sampling period).
    pub observed: Duration,
    /// Samples that found it waiting for a lock (the pruning fence).
    pub lock_waits: usize,
}

/// What the monitor saw.
#[derive(Clone, Debug, Default)]
pub struct MonitorReport {
    /// The pruning backend's transactions, in order.
    pub xacts: Vec<Xact>,
    /// Samples taken.
    pub samples: usize,
}

impl MonitorReport {
    /// The longest transaction observed.
    pub fn longest(&self) -> Duration {
        self.xacts.iter().map(|x| x.observed).max().unwrap_or_default()
    }
}

/// Samples a backend's transactions every `period` until stopped.
pub struct Monitor {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<MonitorReport, String>>,
}

impl Monitor {
    /// Starts sampling backend `pid` on its own connection.
    pub fn start(dsn: &str, pid: i32, period: Duration) -> Monitor {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let dsn = dsn.to_owned();
        let handle = thread::spawn(move || watch(&dsn, pid, period, &flag));
        Monitor { stop, handle }
    }

    /// Stops sampling and returns what it saw.
    ///
    /// Errors: a failed sample.
    pub fn stop(self) -> Result<MonitorReport, String> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().map_err(|_| "the monitor panicked".to_owned())?
    }
}

fn watch(dsn: &str, pid: i32, period: Duration, stop: &AtomicBool) -> Result<MonitorReport, String> {
    let mut conn = crate::connect_to(dsn);
    let stmt = conn
        .prepare(
            "SELECT (extract(epoch FROM xact_start) * 1000000)::int8,
                    extract(epoch FROM clock_timestamp() - xact_start)::float8,
                    wait_event_type = 'Lock'
               FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND xact_start IS NOT NULL",
        )
        .map_err(|e| pg_text(&e))?;
    let mut report = MonitorReport::default();
    while !stop.load(Ordering::SeqCst) {
        let rows = conn.query(&stmt, &[&pid]).map_err(|e| pg_text(&e))?;
        report.samples += 1;
        if let Some(r) = rows.first() {
            let start_us: i64 = r.get(0);
            let age = Duration::from_secs_f64(r.get::<_, f64>(1).max(0.0));
            let waiting: Option<bool> = r.get(2);
            match report.xacts.last_mut() {
                Some(x) if x.start_us == start_us => {
                    x.observed = x.observed.max(age);
                    x.lock_waits += usize::from(waiting == Some(true));
                }
                _ => report.xacts.push(Xact {
                    start_us,
                    observed: age,
                    lock_waits: usize::from(waiting == Some(true)),
                }),
            }
        }
        thread::sleep(period);
    }
    Ok(report)
}
