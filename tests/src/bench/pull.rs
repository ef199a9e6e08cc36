//! Pull timings: an incremental pull (a client that bootstrapped the empty
//! partition at cursor 0 before the writes) of 1,000 one-row commits and of
//! 10 commits × 100 rows, each next to plain `SELECT`s of the same rows —
//! from the app table `public.tasks` and from the log table
//! `syncular.sync_changes` — on the same connection. Times are client-side
//! round trips (statement sent → every row or the whole response received).

use std::time::{Duration, Instant};

use postgres::{Client, Statement};
use ssp2::model::Frame;

use super::backends::ACTOR;
use super::median;
use super::pg_err;
use super::stats::Probe;
use crate::connect_to;
use crate::fixtures::{allow_all_projects, partition_name, TASKS};
use crate::wire::{commit, delivered, pull_header, subscription, upsert, RawSession, Task};

/// The log tables whose planner statistics the pull depends on (`ANALYZE`d
/// between the two pull measurements; a name this extension version does not
/// have is skipped). The never-analyzed push lane prints their state too.
pub const LOG_TABLES: [&str; 4] = [
    "sync_commits",
    "sync_changes",
    "sync_change_scopes",
    "sync_row_scopes",
];

/// `syncular.max_operations` default: operations per push request.
const OPS_PER_REQUEST: usize = 500;

/// One shape of pulled window.
#[derive(Clone, Copy, Debug)]
pub struct PullCase {
    /// Commits in the window.
    pub commits: usize,
    /// Rows (upserts) per commit.
    pub rows_per_commit: usize,
}

impl PullCase {
    /// The report label, e.g. `1000 commits × 1 row`.
    pub fn label(&self) -> String {
        format!(
            "{} commits × {} row{}",
            self.commits,
            self.rows_per_commit,
            if self.rows_per_commit == 1 { "" } else { "s" }
        )
    }

    fn rows(&self) -> usize {
        self.commits * self.rows_per_commit
    }
}

/// The windows the issue asks for.
pub const CASES: [PullCase; 2] = [
    PullCase {
        commits: 1000,
        rows_per_commit: 1,
    },
    PullCase {
        commits: 10,
        rows_per_commit: 100,
    },
];

/// A partition holding one [`PullCase`] window and a reader positioned before it.
pub struct PullFixture {
    pub case: PullCase,
    reader: RawSession,
    /// The encoded incremental pull from the reader's cursor.
    pull: Vec<u8>,
    select_app: Statement,
    select_log: Statement,
    cursor: i64,
}

/// Median round trips of one [`PullFixture`], in wall time.
#[derive(Clone, Copy, Debug)]
pub struct PullTimes {
    /// `syncular.sync` incremental pull of the whole window (one request).
    pub pull: Duration,
    /// `SELECT … FROM public.tasks WHERE _sync_partition = $1`.
    pub select_app: Duration,
    /// `SELECT … FROM syncular.sync_changes WHERE partition = $1 AND commit_seq > $2 ORDER BY commit_seq, idx`.
    pub select_log: Duration,
    /// Response size of the pull, in bytes.
    pub response_bytes: usize,
    /// Statements one pull executes (top-level and nested; `None` without
    /// `pg_stat_statements`).
    pub statements: Option<i64>,
}

fn next_cursor(frames: &[Frame]) -> Result<i64, String> {
    frames
        .iter()
        .find_map(|f| match f {
            Frame::SubEnd { next_cursor, .. } => Some(*next_cursor),
            _ => None,
        })
        .ok_or_else(|| "pull response without SUB_END".to_owned())
}

fn pull_frames(cursor: i64) -> Vec<Frame> {
    vec![
        pull_header(0, 0, 0, 0b0011),
        subscription("all", TASKS, &[("project_id", &["p1"])], cursor, None),
    ]
}

/// Creates a fresh partition, bootstraps a reader on it while it is empty,
/// writes `case` through the extension (as many commits per push request as
/// the operation cap allows) and checks that one pull returns the whole window.
///
/// Errors: a failed request, or a pull that does not hold exactly the window.
pub fn setup(dsn: &str, case: PullCase) -> Result<PullFixture, String> {
    let partition = partition_name(&format!("pull-{}x{}", case.commits, case.rows_per_commit));
    let allowed = Some(allow_all_projects());
    let mut reader = RawSession::new(
        connect_to(dsn),
        &partition,
        ACTOR,
        "bench-reader",
        allowed.clone(),
    );
    reader.acquire_epoch()?;
    let cursor = next_cursor(&reader.round(pull_frames(-1))?.frames)?;

    let mut writer = RawSession::new(connect_to(dsn), &partition, ACTOR, "bench-writer", allowed);
    writer.acquire_epoch()?;
    let per_request = (OPS_PER_REQUEST / case.rows_per_commit).max(1);
    for first in (0..case.commits).step_by(per_request) {
        let commits = (first..(first + per_request).min(case.commits))
            .map(|c| {
                let ops = (0..case.rows_per_commit)
                    .map(|r| {
                        upsert(
                            &Task::new(
                                format!("pull-{c}-{r}"),
                                "p1",
                                format!("row {r} of commit {c}"),
                            ),
                            None,
                        )
                    })
                    .collect();
                commit(format!("pull-{c}"), ops)
            })
            .collect();
        writer.push(commits)?;
    }

    let pull = reader.encode(pull_frames(cursor));
    let select_app = reader
        .conn
        .prepare(
            "SELECT _sync_row_id, _sync_version, _sync_payload, id, project_id, title, done, priority
               FROM public.tasks WHERE _sync_partition = $1",
        )
        .map_err(pg_err)?;
    let select_log = reader
        .conn
        .prepare(
            "SELECT commit_seq, idx, row_id, op, row_version, scopes, payload
               FROM syncular.sync_changes WHERE partition = $1 AND commit_seq > $2 ORDER BY commit_seq, idx",
        )
        .map_err(pg_err)?;
    let mut fixture = PullFixture {
        case,
        reader,
        pull,
        select_app,
        select_log,
        cursor,
    };
    fixture.check()?;
    Ok(fixture)
}

impl PullFixture {
    /// One pull, decoded: the whole window, nothing else, in one response.
    fn check(&mut self) -> Result<(), String> {
        let response = self.reader.send_bytes(&self.pull).map_err(pg_err)?;
        let msg = crate::wire::decode_response(&response)?;
        let got = delivered(&msg)?;
        let end = next_cursor(&msg.frames)?;
        let want = (
            self.case.commits,
            self.case.rows(),
            self.cursor + self.case.commits as i64,
        );
        if (got.commit_seqs.len(), got.rows.len(), end) != want {
            return Err(format!(
                "pull of {}: expected (commits, rows, next cursor) {want:?}, got ({}, {}, {end})",
                self.case.label(),
                got.commit_seqs.len(),
                got.rows.len()
            ));
        }
        Ok(())
    }

    /// Pulls the window again and again for about `seconds` (diagnostic:
    /// a target for `perf record -a`); returns how many pulls.
    ///
    /// Errors: a failed pull.
    pub fn pull_for(&mut self, seconds: u64) -> Result<usize, String> {
        let began = Instant::now();
        let mut pulls = 0;
        while began.elapsed().as_secs() < seconds {
            self.time_pull()?;
            pulls += 1;
        }
        Ok(pulls)
    }

    fn time_pull(&mut self) -> Result<(Duration, usize), String> {
        let began = Instant::now();
        let response = self.reader.send_bytes(&self.pull).map_err(pg_err)?;
        Ok((began.elapsed(), response.len()))
    }

    fn time_select(
        conn: &mut Client,
        stmt: &Statement,
        args: &[&(dyn postgres::types::ToSql + Sync)],
        want: usize,
    ) -> Result<Duration, String> {
        let began = Instant::now();
        let rows = conn.query(stmt, args).map_err(pg_err)?;
        let took = began.elapsed();
        if rows.len() != want {
            return Err(format!(
                "plain SELECT returned {} rows, expected {want}",
                rows.len()
            ));
        }
        Ok(took)
    }

    /// Medians of `reps` pulls and `SELECT`s, alternated, after one untimed
    /// round of each (the pull is re-checked first, its statements counted
    /// through `probe` on `admin`).
    ///
    /// Errors: a failed statement, a wrong window or row count.
    pub fn measure(
        &mut self,
        reps: usize,
        probe: &Probe,
        admin: &mut Client,
    ) -> Result<PullTimes, String> {
        probe.reset_statements(admin)?;
        self.check()?;
        let statements = probe.statements_since_reset(admin)?;
        if std::env::var_os("BENCH_PULL_BREAKDOWN").is_some() {
            for s in probe.statement_breakdown(admin, Some(20))? {
                let query: String = s.query.chars().take(300).collect();
                println!("  pull statement: {} {:?} {:?} ms {query}", s.calls, s.nested, s.mean_ms);
            }
        }
        let (partition, want) = (self.reader.partition.clone(), self.case.rows());
        let (mut pulls, mut apps, mut logs, mut bytes) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for rep in 0..=reps {
            let (pull, size) = self.time_pull()?;
            let conn = &mut self.reader.conn;
            let app = Self::time_select(conn, &self.select_app, &[&partition], want)?;
            let log = Self::time_select(conn, &self.select_log, &[&partition, &self.cursor], want)?;
            if rep > 0 {
                pulls.push(pull);
                apps.push(app);
                logs.push(log);
                bytes = size;
            }
        }
        Ok(PullTimes {
            pull: median(pulls),
            select_app: median(apps),
            select_log: median(logs),
            response_bytes: bytes,
            statements,
        })
    }
}

/// The [`LOG_TABLES`] this extension has, schema-qualified.
///
/// Errors: a Postgres error.
pub fn log_tables(admin: &mut Client) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for t in LOG_TABLES {
        let name = format!("syncular.{t}");
        let exists: bool = admin
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
            .map_err(pg_err)?
            .get(0);
        if exists {
            out.push(name);
        }
    }
    Ok(out)
}

/// Whether each table (schema-qualified) was ever analyzed, from
/// `pg_stat_all_tables`: `(table, last_analyze, last_autoanalyze,
/// pg_statistic rows)` — no `pg_statistic` row means the planner has never
/// had statistics for it.
///
/// Errors: a Postgres error.
pub fn analyze_status(
    admin: &mut Client,
    tables: &[String],
) -> Result<Vec<(String, String, String, i64)>, String> {
    let mut out = Vec::new();
    for t in tables {
        let row = admin
            .query_one(
                "SELECT coalesce(s.last_analyze::text, 'never'), coalesce(s.last_autoanalyze::text, 'never'),
                        (SELECT count(*) FROM pg_statistic WHERE starelid = $1::text::regclass)
                   FROM pg_stat_all_tables s WHERE s.relid = $1::text::regclass",
                &[t],
            )
            .map_err(pg_err)?;
        out.push((t.clone(), row.get(0), row.get(1), row.get(2)));
    }
    Ok(out)
}
