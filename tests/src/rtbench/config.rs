//! The benchmark's knobs, all from the environment (`scripts/bench-realtime`
//! documents them in its header). Defaults keep a whole run under ~10 minutes
//! on 2 cores.

use std::path::PathBuf;
use std::time::Duration;

use super::gateway::Kind;

/// Everything the run is parameterized by.
#[derive(Clone, Debug)]
pub struct Config {
    /// libpq-style DSN of the server (first argument, else `SYNCULAR_TEST_DSN`).
    pub dsn: String,
    /// The gateways to measure, each in its own lane (`BENCH_RT_GATEWAYS`,
    /// default `rust`; `rust node` for both, `release` adds the last release's Rust gateway).
    pub gateways: Vec<Kind>,
    /// The Rust gateway binary (`SYNCULAR_GATEWAY_BIN`).
    pub gateway_bin: PathBuf,
    /// The Node gateway's command (`SYNCULAR_NODE_GATEWAY_BIN`, default
    /// `gateways/node/bin/syncular-gateway-node`).
    pub node_gateway_bin: PathBuf,
    /// Why the Node lane cannot run, as found by `scripts/bench-realtime`
    /// (`BENCH_RT_NODE_SKIP`: no `gateways/node`, no `node`/`npm`, a failed build).
    pub node_skip: Option<String>,
    /// The release's Rust gateway binary (`SYNCULAR_RELEASE_GATEWAY_BIN`, built by
    /// `scripts/bench-realtime` from the last release's commit when the `release` lane is asked).
    pub release_gateway_bin: PathBuf,
    /// Why the release lane cannot run (`BENCH_RT_RELEASE_SKIP`: its build failed).
    pub release_skip: Option<String>,
    /// Extra gateway flags, whitespace-separated (`BENCH_RT_GATEWAY_ARGS`).
    pub gateway_args: Vec<String>,
    /// Where the Rust gateway's stderr goes (`BENCH_RT_GATEWAY_LOG`); the Node
    /// gateway's goes next to it, `-node` before the extension.
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
    /// Sessions of the reconnect storm (`BENCH_RT_STORM_SESSIONS`, default 200; 0 skips it).
    pub storm_sessions: usize,
    /// Commits/s flowing during the storm (`BENCH_RT_STORM_RATE`, default 100).
    pub storm_rate: u32,
    /// Reconnect waves (`BENCH_RT_STORM_WAVES`, default 8).
    pub storm_waves: usize,
    /// Share of the sessions reconnecting in one wave, percent (`BENCH_RT_STORM_SHARE`, default 25).
    pub storm_share_pct: usize,
    /// How long a wave's sessions stay disconnected, ms (`BENCH_RT_STORM_PAUSE_MS`, default 500).
    pub storm_pause: Duration,
}

impl Config {
    /// The log file of `kind`'s gateway.
    pub fn log_of(&self, kind: Kind) -> PathBuf {
        match kind {
            Kind::Rust => self.gateway_log.clone(),
            Kind::Node | Kind::Release => {
                let stem = self.gateway_log.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                let ext = self.gateway_log.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
                self.gateway_log.with_file_name(format!("{stem}-{}{ext}", kind.name()))
            }
        }
    }

    /// The command of `kind`'s gateway.
    pub fn bin_of(&self, kind: Kind) -> PathBuf {
        match kind {
            Kind::Rust => self.gateway_bin.clone(),
            Kind::Node => self.node_gateway_bin.clone(),
            Kind::Release => self.release_gateway_bin.clone(),
        }
    }
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
        let mut gateways = Vec::new();
        let names = env_or("BENCH_RT_GATEWAYS", "rust");
        for name in names.split([',', ' ']).map(str::trim).filter(|s| !s.is_empty()) {
            let kind = match name {
                "rust" => Kind::Rust,
                "node" => Kind::Node,
                "release" => Kind::Release,
                other => return Err(format!("BENCH_RT_GATEWAYS: unknown gateway {other:?} (rust, node, release)")),
            };
            if !gateways.contains(&kind) {
                gateways.push(kind);
            }
        }
        if gateways.is_empty() {
            return Err(format!("BENCH_RT_GATEWAYS={names:?} names no gateway (rust, node, release)"));
        }
        Ok(Config {
            dsn,
            gateways,
            gateway_bin,
            node_gateway_bin: std::env::var("SYNCULAR_NODE_GATEWAY_BIN")
                .map(PathBuf::from)
                .unwrap_or_else(|_| repo.join("gateways/node/bin/syncular-gateway-node")),
            node_skip: std::env::var("BENCH_RT_NODE_SKIP").ok().filter(|s| !s.trim().is_empty()),
            release_gateway_bin: std::env::var("SYNCULAR_RELEASE_GATEWAY_BIN")
                .map(PathBuf::from)
                .unwrap_or_else(|_| repo.join("target/bench-release-gateway/release/syncular-gateway")),
            release_skip: std::env::var("BENCH_RT_RELEASE_SKIP").ok().filter(|s| !s.trim().is_empty()),
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
            storm_sessions: env_num("BENCH_RT_STORM_SESSIONS", 200usize)?,
            storm_rate: env_num("BENCH_RT_STORM_RATE", 100u32)?.max(1),
            storm_waves: env_num("BENCH_RT_STORM_WAVES", 8usize)?.max(1),
            storm_share_pct: env_num("BENCH_RT_STORM_SHARE", 25usize)?.clamp(1, 100),
            storm_pause: Duration::from_millis(env_num("BENCH_RT_STORM_PAUSE_MS", 500u64)?),
        })
    }
}
