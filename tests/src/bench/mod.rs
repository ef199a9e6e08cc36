//! The issue-29 benchmark (`scripts/bench`, binary `bench`): the commit path
//! next to plain upserts and the seed's floor on the same server in the same
//! run, on never-analyzed and on analyzed tables.
//!
//! - [`config`]: the `BENCH_*` knobs
//! - [`backends`]: plain upsert, plain upsert + `pg_notify`, the extension, the seed's floor — one single-row commit per transaction
//! - [`stats`]: statements (`pg_stat_statements`), WAL bytes, records and full-page images per run; the
//!   statement breakdown with mean times and the time outside SQL per push
//! - [`scenarios`]: the connection layouts (and the never-analyzed lane), the preloaded partition, one measured run
//! - [`pull`]: incremental pull of 1,000 one-row commits and of 10 × 100 rows next to plain `SELECT`s
//! - [`report`]: the header, the runs, the tables, the statement breakdown, the pulls
//! - [`goals`]: the ratios, the goals of issue 29 (met / not met) and the information lines
//!
//! Not a test: it never asserts on a timing; it fails only when a commit is
//! not applied or a pull does not return exactly the window it wrote.

pub mod backends;
pub mod config;
pub mod goals;
pub mod pull;
pub mod report;
pub mod scenarios;
pub mod stats;

/// A Postgres error as text, with its cause (e.g. why a parameter did not serialize).
pub fn pg_err(e: postgres::Error) -> String {
    match std::error::Error::source(&e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// The median of `values` (the upper one of an even count); panics on an empty list.
pub fn median<T: PartialOrd + Copy>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}
