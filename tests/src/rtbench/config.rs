//! The benchmark's knobs, all from the environment (`scripts/bench-realtime`
//! documents them in its header). Defaults keep a whole run under ~10 minutes
//! on 2 cores.

use std::path::PathBuf;
use std::time::Duration;

/// Everything the run is parameterized by.
#[derive(Clone, Debug)]
pub struct Config {
    /// libpq-style DSN of the server (first argument, else `SYNCULAR_TEST_DSN`).
    pub dsn: String,
    /// The gateway binary (`SYNCULAR_GATEWAY_BIN`).
    pub gateway_bin: PathBuf,
    /// Extra gateway flags, whitespace-separated (`BENCH_RT_GATEWAY_ARGS`).
    pub gateway_args: Vec<String>,
    /// Where the gateway's stderr goes (`BENCH_RT_GATEWAY_LOG`).
    pub gateway_log: PathBuf,
    /// Connected-session counts of the latency cells, largest first
    /// (`BENCH_RT_SESSIONS`, default `1000,100`). The largest is also the
    /// idle-memory sample.
    pub sessions: Vec<usize>,
    /// Commit rates of the latency cells, commits/s (`BENCH_RT_RATES`, default `100,1000`).
    pub rates: Vec<u32>,
    /// Length of one latency cell and of its NOTIFY baseline (`BENCH_RT_CELL_SECS`, default 6).
    pub cell: Duration,
    /// Committing connections (`BENCH_RT_COMMITTERS`, default 4: more connections on one
    /// partition queue on its counter row and commit less, not more).
    pub committers: usize,
    /// How long a cell waits after its last commit for every session to catch up
    /// (`BENCH_RT_DRAIN_SECS`, default 15).
    pub drain: Duration,
    /// Upper bound of the random wait before a woken session's catch-up pull, the
    /// §8.4 jitter (`BENCH_RT_WAKE_JITTER_MS`, default 200).
    pub wake_jitter_ms: u64,
    /// Concurrent connections of the HTTP/SQL round comparison, one comparison
    /// each (`BENCH_RT_ROUND_CONNECTIONS`, default `1,4`); the goal is judged on the largest.
    pub round_connections: Vec<usize>,
    /// Length of each side of the round comparison (`BENCH_RT_ROUND_SECS`, default 6).
    pub round_secs: Duration,
    /// How many times each side of the round comparison runs, interleaved; the
    /// best run of each side is reported (`BENCH_RT_ROUND_REPEAT`, default 2).
    pub round_repeat: usize,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|_| format!("{name}={v:?} is not a number")),
        Err(_) => Ok(default),
    }
}

fn env_list<T: std::str::FromStr>(name: &str, default: &str) -> Result<Vec<T>, String> {
    let raw = env_or(name, default);
    let list: Result<Vec<T>, _> = raw
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect();
    match list {
        Ok(l) if !l.is_empty() => Ok(l),
        _ => Err(format!("{name}={raw:?} is not a comma-separated list of numbers")),
    }
}

impl Config {
    /// Reads the knobs; `dsn` comes from the command line or `SYNCULAR_TEST_DSN`.
    ///
    /// Errors: a knob that does not parse, or no DSN.
    pub fn from_env() -> Result<Config, String> {
        let dsn = std::env::args()
            .nth(1)
            .or_else(|| std::env::var(crate::DSN_ENV).ok())
            .ok_or("usage: realtime_bench DSN (or set SYNCULAR_TEST_DSN)")?;
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let gateway_bin = std::env::var("SYNCULAR_GATEWAY_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| repo.join("target/release/syncular-gateway"));
        let mut sessions: Vec<usize> = env_list("BENCH_RT_SESSIONS", "1000,100")?;
        sessions.sort_unstable_by(|a, b| b.cmp(a));
        sessions.dedup();
        Ok(Config {
            dsn,
            gateway_bin,
            gateway_args: env_or("BENCH_RT_GATEWAY_ARGS", "")
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            gateway_log: PathBuf::from(env_or(
                "BENCH_RT_GATEWAY_LOG",
                "/tmp/syncular-bench-gateway.log",
            )),
            sessions,
            rates: env_list("BENCH_RT_RATES", "100,1000")?,
            cell: Duration::from_secs_f64(env_num("BENCH_RT_CELL_SECS", 6.0)?),
            committers: env_num("BENCH_RT_COMMITTERS", 4usize)?.max(1),
            drain: Duration::from_secs_f64(env_num("BENCH_RT_DRAIN_SECS", 15.0)?),
            wake_jitter_ms: env_num("BENCH_RT_WAKE_JITTER_MS", 200)?,
            round_connections: env_list("BENCH_RT_ROUND_CONNECTIONS", "1,4")?
                .into_iter()
                .map(|n: usize| n.max(1))
                .collect(),
            round_secs: Duration::from_secs_f64(env_num("BENCH_RT_ROUND_SECS", 6.0)?),
            round_repeat: env_num("BENCH_RT_ROUND_REPEAT", 2usize)?.max(1),
        })
    }
}
