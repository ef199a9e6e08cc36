//! One gateway's lane of the benchmark (`BENCH_RT_GATEWAYS` runs one per
//! gateway, one after the other, each with its own gateway process and fresh
//! partitions): warm-up, idle-session memory, the latency cells (each next to
//! bare NOTIFY → LISTEN at the same rate), the reconnect storm, and the round
//! comparison (`POST /sync` of this gateway interleaved with the same rounds
//! through `SELECT syncular.sync`, so each lane carries its own baseline).

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use super::commits::{run_paced, CommitRun, Pace};
use super::config::Config;
use super::gateway::{Gateway, Kind, Metrics};
use super::procstat::{CpuProbe, CpuSample, CpuUse};
use super::report::{self, Cell, Memory};
use super::rounds::{self, Layout, Path, RoundRun};
use super::sessions::Sessions;
use super::setup::{make_client_records, new_partition, session_specs};
use super::storm::{self, Storm};
use super::{http, notify_baseline, tally};

/// What one gateway's lane measured.
#[derive(Clone, Debug)]
pub struct Lane {
    pub kind: Kind,
    pub memory: Memory,
    pub cells: Vec<Cell>,
    pub storm: Option<Storm>,
    pub rounds: Vec<RoundRun>,
}

impl Lane {
    /// True when every delivery (cells and storm) was correct.
    pub fn correct(&self) -> bool {
        self.cells.iter().all(|c| {
            c.delivery.lost == 0 && c.delivery.duplicated == 0 && c.delivery.out_of_order == 0
        }) && self.storm.as_ref().is_none_or(Storm::correct)
    }
}

/// Runs every gateway-dependent part against `kind`'s gateway; `say` prints a
/// progress line; `postmaster` is the server's pid for the CPU columns.
///
/// Errors: the gateway did not start or exited, a request or commit failed.
pub fn run(
    cfg: &Config,
    rt: &tokio::runtime::Runtime,
    kind: Kind,
    postmaster: Option<u32>,
    say: &dyn Fn(&str),
) -> Result<Lane, String> {
    let mut gw = Gateway::start(cfg, kind)?;
    let log = cfg.log_of(kind);
    println!(
        "  {} gateway {} (pid {} holds the listening socket) on {}, log {}",
        kind.name(),
        cfg.bin_of(kind).display(),
        gw.pid(),
        gw.addr,
        log.display()
    );
    let probe = CpuProbe { gateway_pid: gw.pid(), postmaster_pid: postmaster };
    let gw_addr = gw.addr;
    let scrape = || -> Metrics {
        match rt.block_on(http::get(gw_addr, "/metrics")) {
            Ok((200, body)) => Metrics::parse(&String::from_utf8_lossy(&body)),
            _ => Metrics::default(),
        }
    };
    let died = |gw: &mut Gateway| -> Result<(), String> {
        if gw.alive() {
            Ok(())
        } else {
            Err(format!("the {} gateway exited; see {}", kind.name(), log.display()))
        }
    };

    say("warm-up: 16 sessions and a few commits on a scratch partition");
    warm_up(cfg, rt, &gw)?;
    thread::sleep(Duration::from_secs(1));

    let largest = cfg.sessions[0];
    say(&format!("client records for {largest} sessions (one pull each through syncular.sync)"));
    let (partition, epoch) = new_partition(&cfg.dsn, "rt-latency")?;
    let specs = session_specs(&partition, &epoch, "rt", largest);
    make_client_records(&cfg.dsn, &specs)?;

    say(&format!("memory: opening {largest} idle sessions"));
    let before_kib = gw.rss_kib()?;
    let mut sessions = Sessions::new(rt.handle().clone(), gw.addr, cfg.wake_jitter_ms);
    let hellos = sessions.open(&specs)?;
    thread::sleep(Duration::from_secs(2));
    let memory = Memory { sessions: largest, before_kib, after_kib: gw.rss_kib()? };
    let requiring = hellos.iter().filter(|h| h.requires_sync).count();
    if requiring > 0 {
        println!("  {requiring} hellos had requiresSync (their sessions catch up by pull first)");
    }
    report::print_memory(&memory);

    say("warm-up: 1 s of commits at 100/s to the sessions (not reported)");
    let warm = run_paced(&cfg.dsn, &partition, &epoch, Pace::Rate(100), Duration::from_secs(1), cfg.committers, "warm")?;
    if let Some((_, hi)) = warm.seq_range() {
        sessions.wait_covered(hi, cfg.drain);
    }
    sessions.drain_logs();

    let mut cells = Vec::new();
    for &n in &cfg.sessions {
        if n < sessions.len() {
            sessions.shrink_to(n);
            thread::sleep(Duration::from_secs(1));
        }
        for &rate in &cfg.rates {
            say(&format!("NOTIFY baseline at {rate}/s"));
            let baseline = notify_baseline::run(&cfg.dsn, rate, cfg.cell, Duration::from_secs(2))?;
            say(&format!("cell: {n} sessions, {rate} commits/s"));
            let m0 = scrape();
            let c0 = probe.sample();
            let label = format!("cell-{n}-{rate}");
            let run = run_paced(&cfg.dsn, &partition, &epoch, Pace::Rate(rate), cfg.cell, cfg.committers, &label)?;
            let cpu = CpuUse::between(&c0, &probe.sample());
            let behind = match run.seq_range() {
                Some((_, hi)) => sessions.wait_covered(hi, cfg.drain),
                None => 0,
            };
            let samples = (c0, probe.sample());
            let m1 = scrape();
            let cell = account_cell(n, rate, run, baseline, &sessions, behind, cpu, samples, (&m0, &m1));
            println!(
                "  reached {:.0}/s; delta p50/p95/p99 {:.2}/{:.2}/{:.2} ms; NOTIFY p95 {:.2} ms; wakes {}; lost {}",
                cell.achieved,
                cell.delivery.latency.p(0.5),
                cell.delivery.latency.p(0.95),
                cell.delivery.latency.p(0.99),
                cell.baseline.latency.p(0.95),
                cell.delivery.wakes,
                cell.delivery.lost
            );
            cells.push(cell);
            died(&mut gw)?;
        }
    }
    sessions.shrink_to(0);

    let storm = if cfg.storm_sessions > 0 {
        let s = storm::run(cfg, rt.handle(), gw.addr, &probe, say)?;
        report::print_storm(&s);
        died(&mut gw)?;
        Some(s)
    } else {
        None
    };

    let rounds = run_rounds(cfg, rt, &gw, &probe, say)?;
    died(&mut gw)?;
    gw.stop();
    Ok(Lane { kind, memory, cells, storm, rounds })
}

/// The round comparison: per connection count and layout, `repeat` times
/// `SELECT syncular.sync`, this gateway's `POST /sync`, the bare relay.
fn run_rounds(
    cfg: &Config,
    rt: &tokio::runtime::Runtime,
    gw: &Gateway,
    probe: &CpuProbe,
    say: &dyn Fn(&str),
) -> Result<Vec<RoundRun>, String> {
    let mut groups = Vec::new();
    for &n in &cfg.round_connections {
        groups.push((n, Layout::Own));
        if n > 1 {
            groups.push((n, Layout::Shared));
        }
    }
    if let Some(&n) = cfg.round_connections.iter().max() {
        groups.push((n, Layout::PullOnly));
    }
    let mut runs = Vec::new();
    for (connections, layout) in groups {
        for rep in 1..=cfg.round_repeat {
            for path in [Path::Sql, Path::Http, Path::Relay] {
                say(&format!("rounds ({rep}/{}): {}, {connections} × {}", cfg.round_repeat, path.label(), layout.label()));
                let c0 = probe.sample();
                let mut run = rounds::run(&cfg.dsn, rt.handle(), gw.addr, path, layout, connections, cfg.round_secs)?;
                run.cpu = Some(CpuUse::between(&c0, &probe.sample()));
                runs.push(run);
            }
        }
    }
    Ok(runs)
}

/// Accounts one cell's deliveries and diagnostics.
#[allow(clippy::too_many_arguments)]
fn account_cell(
    sessions_n: usize,
    rate: u32,
    run: CommitRun,
    baseline: notify_baseline::BaselineRun,
    sessions: &Sessions,
    behind: usize,
    cpu: CpuUse,
    (s0, s1): (CpuSample, CpuSample),
    (m0, m1): (&Metrics, &Metrics),
) -> Cell {
    let achieved = run.achieved();
    let max_start_lag_ms = run.max_start_lag.as_secs_f64() * 1e3;
    let commits: HashMap<i64, Instant> = run.commits.into_iter().collect();
    let delivery = tally::account(&commits, &sessions.drain_logs());
    let (gw_secs, _, bench_secs) = s1.cpu_secs_since(&s0);
    let deltas = delivery.deltas as f64;
    let per_delta = |secs: f64| if deltas > 0.0 { secs * 1e6 / deltas } else { f64::NAN };
    let delta_calls = m1.delta(m0, "syncular_gateway_delta_calls_total");
    let call_secs = m1.delta(m0, "syncular_gateway_delta_call_seconds_sum");
    let call_count = m1.delta(m0, "syncular_gateway_delta_call_seconds_count");
    let delta_call_ms = match (call_secs, call_count) {
        (Some(s), Some(n)) if n > 0.0 => Some(s / n * 1e3),
        _ => None,
    };
    Cell {
        sessions: sessions_n,
        rate,
        achieved,
        max_start_lag_ms,
        baseline,
        delivery,
        behind,
        cpu,
        gw_cpu_secs: gw_secs,
        gw_us_per_delta: per_delta(gw_secs),
        bench_us_per_delta: per_delta(bench_secs),
        delta_calls,
        delta_call_ms,
    }
}

/// Warms the gateway's pool, runtime and delta path on a scratch partition:
/// 16 sessions receive 20 commits, then close.
fn warm_up(cfg: &Config, rt: &tokio::runtime::Runtime, gw: &Gateway) -> Result<(), String> {
    let (partition, epoch) = new_partition(&cfg.dsn, "rt-warmup")?;
    let specs = session_specs(&partition, &epoch, "rt", 16);
    make_client_records(&cfg.dsn, &specs)?;
    let mut sessions = Sessions::new(rt.handle().clone(), gw.addr, cfg.wake_jitter_ms);
    sessions.open(&specs)?;
    let run = run_paced(&cfg.dsn, &partition, &epoch, Pace::Rate(100), Duration::from_millis(200), 2, "warmup")?;
    if let Some((_, hi)) = run.seq_range() {
        let behind = sessions.wait_covered(hi, Duration::from_secs(10));
        if behind > 0 {
            return Err(format!(
                "warm-up: {behind} of 16 sessions received no delta within 10 s — is the gateway's realtime path working? (log: {})",
                cfg.log_of(gw.kind).display()
            ));
        }
    }
    sessions.shrink_to(0);
    Ok(())
}
