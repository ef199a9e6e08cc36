//! Pruning under load (SPEC §4.6; docs/src/sql/lifecycle.md `syncular.prune`): the machinery
//! shared by the integration test `tests/tests/prune_under_load.rs` and the
//! benchmark `scripts/bench-prune` (binary `tests/src/bin/bench_prune.rs`).
//!
//! - [`prefill`]: a partition's log built through the extension — plain SQL
//!   writes captured as commits (one statement = one commit: single- and
//!   three-row inserts, updates, deletes) and pushed commits;
//! - [`pushers`]: connections that keep pushing single-row commits through
//!   `syncular.sync`, each push timed (push-only requests, and push + pull
//!   rounds that take the pruning fence like a real client's round);
//! - [`pullers`]: a raw SSP2 "sweeper" that walks the log from the horizon
//!   and checks that every incremental window it receives is dense, and the
//!   real `syncular-client` 0.15.48 over [`crate::transport::PgTransport`];
//! - [`pruner`]: `CALL syncular.prune` in a session whose clock is moved past
//!   the §4.6 active window, and a monitor sampling the pruning backend's
//!   transactions (one per batch) from `pg_stat_activity`;
//! - [`checks`]: the log's shape around the horizon, before and after.
//!
//! Every partition holds one app table, `public.tasks` (the sample schema of
//! [`crate::fixtures::schema_ir`]); the prefill writes projects
//! [`PREFILL_PROJECTS`], pusher `i` writes project `q<i>`.

use std::time::Duration;

pub mod checks;
pub mod prefill;
pub mod pruner;
pub mod pullers;
pub mod pushers;

/// Projects the prefill writes (scope values of `project:{project_id}`).
pub const PREFILL_PROJECTS: [&str; 4] = ["p0", "p1", "p2", "p3"];

/// The project pusher `index` writes (only its own rows).
pub fn pusher_project(index: usize) -> String {
    format!("q{index}")
}

/// Every project a reader of the whole partition subscribes to: the
/// prefill's and those of `pushers` pushers.
pub fn all_projects(pushers: usize) -> Vec<String> {
    PREFILL_PROJECTS
        .iter()
        .map(|p| (*p).to_owned())
        .chain((0..pushers).map(pusher_project))
        .collect()
}

/// A Postgres error as one line, with the server's message when there is one.
pub fn pg_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

/// The wall clock in Unix ms (the server runs on this machine).
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Latency summary of a set of requests.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// How many.
    pub count: usize,
    /// Median (nearest rank).
    pub p50: Duration,
    /// 99th percentile (nearest rank).
    pub p99: Duration,
    /// Longest.
    pub max: Duration,
}

impl Latency {
    /// Summarizes `values` (any order); all zero when empty.
    pub fn of(mut values: Vec<Duration>) -> Latency {
        if values.is_empty() {
            return Latency::default();
        }
        values.sort();
        let rank = |q: f64| {
            let i = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
            values[i - 1]
        };
        Latency {
            count: values.len(),
            p50: rank(0.50),
            p99: rank(0.99),
            max: values[values.len() - 1],
        }
    }
}

/// Milliseconds with two decimals, for reports.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// `a ÷ b` of two durations, "n/a" when `b` is zero.
pub fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        "n/a".to_owned()
    } else {
        format!("{:.2}", a.as_secs_f64() / b.as_secs_f64())
    }
}
