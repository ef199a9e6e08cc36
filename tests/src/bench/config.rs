//! The `BENCH_*` knobs of the issue-29 benchmark, read once from the environment.

use crate::env_usize;

/// What one run of the benchmark does.
#[derive(Clone, Debug)]
pub struct Config {
    /// Single-row commits per connection in one measured run
    /// (`BENCH_COMMITS`, default 2,000; 300 with `BENCH_QUICK=1`).
    pub commits: usize,
    /// Measured rounds; every round runs each backend once per scenario,
    /// alternated, and the report takes the median; the never-analyzed lane
    /// runs as many rounds of its own (`BENCH_ROUNDS`, default 3; 1 with
    /// `BENCH_QUICK=1`).
    pub rounds: usize,
    /// Rows already in the partition of the "preloaded" scenario
    /// (`BENCH_PRELOAD`, default 100,000 — also with `BENCH_QUICK=1`).
    pub preload: usize,
    /// Timed repetitions of each pull and each plain `SELECT`
    /// (`BENCH_PULL_REPS`, default 20; 5 with `BENCH_QUICK=1`).
    pub pull_reps: usize,
    /// Single-row commits per connection of the unreported warm-up run of
    /// each backend, before the never-analyzed lane and again before the
    /// rounds (min(200, `commits`)).
    pub warmup: usize,
}

impl Config {
    /// Reads the knobs; `BENCH_QUICK=1` lowers the defaults for fast iteration.
    pub fn from_env() -> Config {
        let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
        let commits = env_usize("BENCH_COMMITS", if quick { 300 } else { 2000 }).max(1);
        Config {
            commits,
            rounds: env_usize("BENCH_ROUNDS", if quick { 1 } else { 3 }).max(1),
            preload: env_usize("BENCH_PRELOAD", 100_000),
            pull_reps: env_usize("BENCH_PULL_REPS", if quick { 5 } else { 20 }).max(1),
            warmup: commits.min(200),
        }
    }
}
