//! `realtime_bench`: what the gateway `syncular-gateway` adds on top of the
//! extension, each number next to a baseline measured on the same server in
//! the same run (issue 8, "Benchmark"; modules in `syncular_integration_tests::rtbench`).
//!
//! 1. Gateway memory per idle session: VmRSS before and after opening the
//!    largest session count of `BENCH_RT_SESSIONS`.
//! 2. Commit → delta latency p50/p95/p99 for each session count × commit rate
//!    (`BENCH_RT_SESSIONS` × `BENCH_RT_RATES`), next to bare NOTIFY → LISTEN at
//!    the same rate, with the delivery accounting (lost, duplicated, out of
//!    order, wake-ups) and where the time went (CPU, `realtime_deltas` calls).
//! 3. Sync rounds/s through `POST /sync` next to `SELECT syncular.sync`.
//! 4. The goals, measured and met or not.
//!
//! Usage: `realtime_bench [DSN]` (default `$SYNCULAR_TEST_DSN`); the gateway
//! binary from `SYNCULAR_GATEWAY_BIN`. `scripts/bench-realtime` builds
//! everything and starts a durable server. Not a test: it fails only on a
//! wrong delivery or a failed request, never on a timing.

use std::collections::HashMap;
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use syncular_integration_tests::connect_to;
use syncular_integration_tests::rtbench::commits::{run_paced, CommitRun, Pace};
use syncular_integration_tests::rtbench::config::Config;
use syncular_integration_tests::rtbench::gateway::{Gateway, Metrics};
use syncular_integration_tests::rtbench::procstat::{postmaster_of, CpuProbe, CpuSample, CpuUse};
use syncular_integration_tests::rtbench::report::{self, Cell, Memory};
use syncular_integration_tests::rtbench::rounds::{self, Layout, Path};
use syncular_integration_tests::rtbench::sessions::{SessionSpec, Sessions};
use syncular_integration_tests::rtbench::setup::{self, new_partition};
use syncular_integration_tests::rtbench::{http, notify_baseline, tally};

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("realtime_bench: deliveries were wrong (see the delivery table)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("realtime_bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn step(t0: Instant, what: &str) {
    println!("[+{:>5.1}s] {what}", t0.elapsed().as_secs_f64());
}

/// Returns whether every delivery was correct.
fn run() -> Result<bool, String> {
    let cfg = Config::from_env()?;
    let t0 = Instant::now();
    let mut admin = connect_to(&cfg.dsn);
    setup::prepare_database(&mut admin)?;
    let (fsync, sync_commit, version) = setup::durability(&mut admin)?;
    let backend: i32 = admin
        .query_one("SELECT pg_backend_pid()", &[])
        .map_err(|e| e.to_string())?
        .get(0);
    println!(
        "realtime bench: Postgres {version}, fsync={fsync}, synchronous_commit={sync_commit}, {} cores, load average {}",
        thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        load_average()
    );
    println!(
        "  sessions {:?} × rates {:?}/s, {:.0} s per cell over {} committing connections; rounds: {:?} connections × {:.0} s",
        cfg.sessions,
        cfg.rates,
        cfg.cell.as_secs_f64(),
        cfg.committers,
        cfg.round_connections,
        cfg.round_secs.as_secs_f64()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut gw = Gateway::start(&cfg)?;
    println!(
        "  gateway {} (pid {}) on {}, log {}",
        cfg.gateway_bin.display(),
        gw.pid(),
        gw.addr,
        cfg.gateway_log.display()
    );
    let probe = CpuProbe {
        gateway_pid: gw.pid(),
        postmaster_pid: postmaster_of(backend as u32),
    };
    let gw_addr = gw.addr;
    let scrape = |rt: &tokio::runtime::Runtime| -> Metrics {
        match rt.block_on(http::get(gw_addr, "/metrics")) {
            Ok((200, body)) => Metrics::parse(&String::from_utf8_lossy(&body)),
            _ => Metrics::default(),
        }
    };

    step(t0, "warm-up: 16 sessions and a few commits on a scratch partition");
    warm_up(&cfg, &rt, &gw)?;
    thread::sleep(Duration::from_secs(1));

    step(t0, "commit capacity: closed-loop single-row commits, 2 s each");
    let mut capacity = Vec::new();
    for n in [1, cfg.committers] {
        let (p, e) = new_partition(&cfg.dsn, "rt-capacity")?;
        let run = run_paced(&cfg.dsn, &p, &e, Pace::ClosedLoop, Duration::from_secs(2), n, "cap")?;
        capacity.push((n, run.achieved()));
    }
    report::print_capacity(&capacity);

    let largest = cfg.sessions[0];
    step(t0, &format!("client records for {largest} sessions (one pull each through syncular.sync)"));
    let (partition, epoch) = new_partition(&cfg.dsn, "rt-latency")?;
    let specs = session_specs(&partition, &epoch, largest);
    make_client_records(&cfg.dsn, &specs)?;

    step(t0, &format!("memory: opening {largest} idle sessions"));
    let before_kib = gw.rss_kib()?;
    let mut sessions = Sessions::new(rt.handle().clone(), gw.addr, cfg.wake_jitter_ms);
    let hellos = sessions.open(&specs)?;
    thread::sleep(Duration::from_secs(2));
    let memory = Memory {
        sessions: largest,
        before_kib,
        after_kib: gw.rss_kib()?,
    };
    let requiring = hellos.iter().filter(|h| h.requires_sync).count();
    if requiring > 0 {
        println!("  {requiring} hellos had requiresSync (their sessions catch up by pull first)");
    }
    report::print_memory(&memory);

    step(t0, "warm-up: 1 s of commits at 100/s to the sessions (not reported)");
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
            step(t0, &format!("NOTIFY baseline at {rate}/s"));
            let baseline = notify_baseline::run(&cfg.dsn, rate, cfg.cell, Duration::from_secs(2))?;
            step(t0, &format!("cell: {n} sessions, {rate} commits/s"));
            let m0 = scrape(&rt);
            let c0 = probe.sample();
            let label = format!("cell-{n}-{rate}");
            let run = run_paced(&cfg.dsn, &partition, &epoch, Pace::Rate(rate), cfg.cell, cfg.committers, &label)?;
            let cpu = CpuUse::between(&c0, &probe.sample());
            let behind = match run.seq_range() {
                Some((_, hi)) => sessions.wait_covered(hi, cfg.drain),
                None => 0,
            };
            let m1 = scrape(&rt);
            let samples = (c0, probe.sample());
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
            if !gw.alive() {
                return Err(format!("the gateway exited; see {}", cfg.gateway_log.display()));
            }
        }
    }
    sessions.shrink_to(0);

    let mut runs = Vec::new();
    let mut groups = Vec::new();
    for &n in &cfg.round_connections {
        groups.push((n, Layout::Own));
        if n > 1 {
            groups.push((n, Layout::Shared));
        }
    }
    for (connections, layout) in groups {
        for rep in 1..=cfg.round_repeat {
            for path in [Path::Sql, Path::Http, Path::SqlSplit] {
                step(t0, &format!("rounds ({rep}/{}): {}, {connections} × {}", cfg.round_repeat, path.label(), layout.label()));
                let c0 = probe.sample();
                let mut run = rounds::run(
                    &cfg.dsn,
                    rt.handle(),
                    gw.addr,
                    path,
                    layout,
                    connections,
                    cfg.round_secs,
                )?;
                run.cpu = Some(CpuUse::between(&c0, &probe.sample()));
                runs.push(run);
            }
        }
    }
    gw.stop();
    step(t0, &format!("done (load average {})", load_average()));

    println!();
    report::print_capacity(&capacity);
    report::print_cells(&cells);
    report::print_rounds(&runs);
    report::print_memory(&memory);
    report::print_goals(&cells, &runs, Some(&memory));
    Ok(cells.iter().all(|c| {
        c.delivery.lost == 0 && c.delivery.duplicated == 0 && c.delivery.out_of_order == 0
    }))
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
        gw_us_per_delta: per_delta(gw_secs),
        bench_us_per_delta: per_delta(bench_secs),
        delta_calls,
        delta_call_ms,
    }
}

/// `/proc/loadavg`'s 1/5/15-minute figures.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Session `i`: actor `rt-u<i>`, clientId `rt-c<i>`.
fn session_specs(partition: &str, epoch: &str, n: usize) -> Vec<SessionSpec> {
    (0..n)
        .map(|i| SessionSpec {
            partition: partition.to_owned(),
            epoch: epoch.to_owned(),
            actor: format!("rt-u{i}"),
            client_id: format!("rt-c{i}"),
        })
        .collect()
}

/// One bootstrap pull per session (4 connections), so each has a client
/// record subscribed to the written scope at the latest cursor.
fn make_client_records(dsn: &str, specs: &[SessionSpec]) -> Result<(), String> {
    let chunk = specs.len().div_ceil(4).max(1);
    thread::scope(|s| {
        let handles: Vec<_> = specs
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || -> Result<(), String> {
                    let mut conn = connect_to(dsn);
                    for spec in part {
                        setup::pull_client_record(&mut conn, &spec.partition, &spec.epoch, &spec.actor, &spec.client_id)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| Err("client record thread panicked".to_owned())))
    })
}

/// Warms the gateway's pool, runtime and delta path on a scratch partition:
/// 16 sessions receive 20 commits, then close.
fn warm_up(cfg: &Config, rt: &tokio::runtime::Runtime, gw: &Gateway) -> Result<(), String> {
    let (partition, epoch) = new_partition(&cfg.dsn, "rt-warmup")?;
    let specs: Vec<SessionSpec> = session_specs(&partition, &epoch, 16);
    make_client_records(&cfg.dsn, &specs)?;
    let mut sessions = Sessions::new(rt.handle().clone(), gw.addr, cfg.wake_jitter_ms);
    sessions.open(&specs)?;
    let run = run_paced(&cfg.dsn, &partition, &epoch, Pace::Rate(100), Duration::from_millis(200), 2, "warmup")?;
    if let Some((_, hi)) = run.seq_range() {
        let behind = sessions.wait_covered(hi, Duration::from_secs(10));
        if behind > 0 {
            return Err(format!(
                "warm-up: {behind} of 16 sessions received no delta within 10 s — is the gateway's realtime path working? (log: {})",
                cfg.gateway_log.display()
            ));
        }
    }
    sessions.shrink_to(0);
    Ok(())
}
