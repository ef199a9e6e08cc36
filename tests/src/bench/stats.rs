//! What a measured run cost the server: statements (from
//! `pg_stat_statements`, with `track = all` so the statements the extension
//! runs through SPI count), WAL bytes (`pg_current_wal_insert_lsn()` delta),
//! WAL records and full-page images (`pg_walinspect` over the same LSN
//! range; `pg_stat_wal` deltas where that is missing); and, per statement,
//! calls and mean execution time ([`Probe::statement_breakdown`]), from which
//! [`outside_sql`] derives the time a push spends outside SQL.
//!
//! Every query the harness itself sends while measuring carries the marker
//! [`META`] and is left out of the statement count.

use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;

use super::backends::WORKER_APP;
use super::pg_err;

/// Marker comment carried by every measuring query (excluded from the counts).
pub const META: &str = "/* bench:meta */";

/// Which counters this server offers (probed once by [`Probe::install`]).
#[derive(Clone, Debug)]
pub struct Probe {
    /// `pg_stat_statements` is preloaded and installed in the bench database.
    pub statements: bool,
    /// `pg_walinspect` (Postgres 15+) is installed: exact records and FPI bytes per LSN range.
    pub walinspect: bool,
    /// `pg_stat_wal` exists (Postgres 14+): records and FPI count.
    pub stat_wal: bool,
    /// Why a counter is missing, for the report.
    pub notes: Vec<String>,
}

/// Counter readings taken right before a measured run.
pub struct Mark {
    lsn: String,
    wal: Option<(i64, i64)>,
}

/// What one measured run cost the server (totals over the run, not per commit).
#[derive(Clone, Debug, Default)]
pub struct Cost {
    /// Statements executed, top-level and nested (`None`: no `pg_stat_statements`).
    pub statements: Option<i64>,
    /// WAL bytes written (insert-LSN delta, page headers and FPIs included).
    pub wal_bytes: i64,
    /// WAL records.
    pub wal_records: Option<i64>,
    /// Full-page images (`pg_stat_wal.wal_fpi` delta).
    pub wal_fpi: Option<i64>,
    /// Bytes of full-page images among `wal_bytes` (`pg_walinspect`).
    pub fpi_bytes: Option<i64>,
}

impl Probe {
    /// Installs `pg_stat_statements` and `pg_walinspect` in the bench
    /// database when the server has them; a missing one is noted, never fatal.
    pub fn install(admin: &mut Client) -> Probe {
        let mut notes = Vec::new();
        let statements = admin
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .and_then(|_| {
                admin.query_one(
                    &format!("SELECT {META} count(*) FROM pg_stat_statements"),
                    &[],
                )
            })
            .map_err(|e| notes.push(format!("statements per commit: n/a ({})", first_line(&e))))
            .is_ok();
        let walinspect = admin
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            .map_err(|e| {
                notes.push(format!(
                    "WAL records/FPI bytes via pg_walinspect: n/a ({})",
                    first_line(&e)
                ))
            })
            .is_ok();
        let stat_wal = admin
            .query_one(&format!("SELECT {META} wal_fpi FROM pg_stat_wal"), &[])
            .map_err(|e| {
                notes.push(format!(
                    "FPI count via pg_stat_wal: n/a ({})",
                    first_line(&e)
                ))
            })
            .is_ok();
        Probe {
            statements,
            walinspect,
            stat_wal,
            notes,
        }
    }

    /// Prepares a measured run: `CHECKPOINT` (every run starts with the same
    /// full-page-image debt), resets `pg_stat_statements`, reads the insert
    /// LSN and the `pg_stat_wal` counters.
    ///
    /// Errors: a Postgres error.
    pub fn begin(&self, admin: &mut Client) -> Result<Mark, String> {
        admin.batch_execute("CHECKPOINT").map_err(pg_err)?;
        self.reset_statements(admin)?;
        let wal = self.stat_wal_counters(admin)?;
        let lsn = admin
            .query_one(
                &format!("SELECT {META} pg_current_wal_insert_lsn()::text"),
                &[],
            )
            .map_err(pg_err)?
            .get(0);
        Ok(Mark { lsn, wal })
    }

    /// Reads what the run since `mark` cost. Waits first (≤ 10 s) until every
    /// measured connection is gone, so their `pg_stat_wal` counts are flushed.
    ///
    /// Errors: a Postgres error.
    pub fn end(&self, admin: &mut Client, mark: &Mark) -> Result<Cost, String> {
        let row = admin
            .query_one(
                &format!(
                    "SELECT {META} pg_current_wal_insert_lsn()::text,
                            pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::bigint"
                ),
                &[&mark.lsn],
            )
            .map_err(pg_err)?;
        let (end_lsn, wal_bytes): (String, i64) = (row.get(0), row.get(1));
        wait_for_workers_gone(admin)?;
        let mut cost = Cost {
            wal_bytes,
            ..Cost::default()
        };
        cost.statements = self.statements_since_reset(admin)?;
        if let (Some((records0, fpi0)), Some((records1, fpi1))) =
            (mark.wal, self.stat_wal_counters(admin)?)
        {
            cost.wal_records = Some(records1 - records0);
            cost.wal_fpi = Some(fpi1 - fpi0);
        }
        if self.walinspect {
            // Only the flushed part can be read (every commit of the run is
            // flushed; the range end is clamped to the flush LSN).
            let row = admin
                .query_one(
                    &format!(
                        "SELECT {META} sum(count)::bigint, sum(fpi_size)::bigint
                           FROM pg_get_wal_stats($1::text::pg_lsn,
                                least(pg_current_wal_flush_lsn(), $2::text::pg_lsn))"
                    ),
                    &[&mark.lsn, &end_lsn],
                )
                .map_err(pg_err)?;
            cost.wal_records = row.get::<_, Option<i64>>(0).or(cost.wal_records);
            cost.fpi_bytes = row.get(1);
        }
        Ok(cost)
    }

    /// Resets `pg_stat_statements` (no-op without it).
    ///
    /// Errors: a Postgres error.
    pub fn reset_statements(&self, admin: &mut Client) -> Result<(), String> {
        if self.statements {
            admin
                .query_one(&format!("SELECT {META} pg_stat_statements_reset()"), &[])
                .map_err(pg_err)?;
        }
        Ok(())
    }

    /// Statements executed in the bench database since the last reset
    /// (top-level and nested, the harness's own left out; `None` without
    /// `pg_stat_statements`).
    ///
    /// Errors: a Postgres error.
    pub fn statements_since_reset(&self, admin: &mut Client) -> Result<Option<i64>, String> {
        if !self.statements {
            return Ok(None);
        }
        let row = admin
            .query_one(
                &format!(
                    "SELECT {META} coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
                      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                        AND query NOT LIKE '%bench:meta%'"
                ),
                &[],
            )
            .map_err(pg_err)?;
        Ok(Some(row.get(0)))
    }

    /// `(wal_records, wal_fpi)` of `pg_stat_wal`, when the server has it.
    fn stat_wal_counters(&self, admin: &mut Client) -> Result<Option<(i64, i64)>, String> {
        if !self.stat_wal {
            return Ok(None);
        }
        let row = admin
            .query_one(
                &format!("SELECT {META} wal_records::bigint, wal_fpi::bigint FROM pg_stat_wal"),
                &[],
            )
            .map_err(pg_err)?;
        Ok(Some((row.get(0), row.get(1))))
    }

    /// The statements recorded since the last reset, most called first (at
    /// most `limit`; `None`: all), with their calls, nesting and mean
    /// execution time. Empty without `pg_stat_statements`.
    ///
    /// Errors: a Postgres error.
    pub fn statement_breakdown(
        &self,
        admin: &mut Client,
        limit: Option<i64>,
    ) -> Result<Vec<StatementStat>, String> {
        if !self.statements {
            return Ok(Vec::new());
        }
        // `toplevel` since Postgres 14; `mean_exec_time` since 13 (`mean_time` before).
        let columns = admin
            .query_one(
                &format!(
                    "SELECT {META} EXISTS (SELECT 1 FROM pg_attribute
                              WHERE attrelid = 'pg_stat_statements'::regclass AND attname = 'toplevel'),
                            (SELECT attname::text FROM pg_attribute
                              WHERE attrelid = 'pg_stat_statements'::regclass
                                AND attname IN ('mean_exec_time', 'mean_time')
                              ORDER BY attname LIMIT 1)"
                ),
                &[],
            )
            .map_err(pg_err)?;
        let nested = if columns.get::<_, bool>(0) {
            "NOT toplevel"
        } else {
            "NULL::boolean"
        };
        let mean = match columns.get::<_, Option<String>>(1) {
            Some(column) => format!("{column}::float8"),
            None => "NULL::float8".to_owned(),
        };
        let rows = admin
            .query(
                &format!(
                    "SELECT {META} calls, {nested}, {mean}, regexp_replace(query, '\\s+', ' ', 'g')
                       FROM pg_stat_statements
                      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                        AND query NOT LIKE '%bench:meta%'
                      ORDER BY calls DESC, query LIMIT $1"
                ),
                &[&limit],
            )
            .map_err(pg_err)?;
        Ok(rows
            .iter()
            .map(|r| StatementStat {
                calls: r.get(0),
                nested: r.get(1),
                mean_ms: r.get(2),
                query: r.get(3),
            })
            .collect())
    }
}

/// One `pg_stat_statements` entry (since the last reset).
#[derive(Clone, Debug)]
pub struct StatementStat {
    /// Executions.
    pub calls: i64,
    /// Run inside another statement (e.g. through SPI); `None` before
    /// Postgres 14, whose `pg_stat_statements` does not say.
    pub nested: Option<bool>,
    /// Mean execution time in ms (`mean_exec_time`; `mean_time` before
    /// Postgres 13). A statement's time includes the statements nested in it.
    pub mean_ms: Option<f64>,
    /// The normalized query text, whitespace collapsed.
    pub query: String,
}

/// The time one push spends outside SQL: the top-level
/// `SELECT syncular.sync(…)`'s mean minus, over the nested statements, calls
/// per push × mean (assumes one level of nesting: a statement nested in a
/// nested one would be counted twice, inside its parent and on its own).
#[derive(Clone, Copy, Debug)]
pub struct OutsideSql {
    /// Calls of the top-level `SELECT syncular.sync(…)` (pushes).
    pub pushes: i64,
    /// Its `mean_exec_time`, ms.
    pub push_ms: f64,
    /// Σ over the nested statements of (calls ÷ pushes) × mean, ms.
    pub nested_ms: f64,
    /// `push_ms − nested_ms`.
    pub outside_ms: f64,
}

/// [`OutsideSql`] from a run's statements ([`Probe::statement_breakdown`], all of them).
///
/// Errors: why it cannot be computed (no `toplevel` or mean column, no top-level push).
pub fn outside_sql(stats: &[StatementStat]) -> Result<OutsideSql, String> {
    if stats.is_empty() {
        return Err("no statement breakdown (pg_stat_statements missing?)".to_owned());
    }
    if stats.iter().any(|s| s.nested.is_none()) {
        return Err("pg_stat_statements has no toplevel column (Postgres 14+)".to_owned());
    }
    let push = stats
        .iter()
        .find(|s| s.nested == Some(false) && s.query.contains("syncular.sync("))
        .ok_or("no top-level SELECT syncular.sync(…) among the statements")?;
    let push_ms = push.mean_ms.ok_or("pg_stat_statements has no mean_exec_time column")?;
    if push.calls <= 0 {
        return Err("the top-level SELECT syncular.sync(…) has no calls".to_owned());
    }
    let mut nested_ms = 0.0;
    for s in stats.iter().filter(|s| s.nested == Some(true)) {
        let mean = s.mean_ms.ok_or("pg_stat_statements has no mean_exec_time column")?;
        nested_ms += s.calls as f64 / push.calls as f64 * mean;
    }
    Ok(OutsideSql {
        pushes: push.calls,
        push_ms,
        nested_ms,
        outside_ms: push_ms - nested_ms,
    })
}

/// Waits until no connection named [`WORKER_APP`] is left (a closing backend
/// flushes its statistics before it leaves `pg_stat_activity`).
fn wait_for_workers_gone(admin: &mut Client) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: i64 = admin
            .query_one(
                &format!(
                    "SELECT {META} count(*) FROM pg_stat_activity WHERE application_name = $1"
                ),
                &[&WORKER_APP],
            )
            .map_err(pg_err)?
            .get(0);
        if left == 0 || Instant::now() > deadline {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn first_line(e: &postgres::Error) -> String {
    let text = match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => e.to_string(),
    };
    text.lines().next().unwrap_or_default().to_owned()
}
