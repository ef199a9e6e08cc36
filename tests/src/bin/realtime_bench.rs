//! `realtime_bench`: what a gateway (`syncular-gateway`, and with
//! `BENCH_RT_GATEWAYS="rust node"` also `syncular-gateway-node`) adds on top
//! of the extension, each number next to a baseline measured on the same
//! server in the same run (issues 8 and 30; modules in
//! `syncular_integration_tests::rtbench`).
//!
//! Once: the server's commit capacity (closed-loop single-row commits) and the
//! send floor (CPU of one bare write per (message, socket), `rtbench::floors::send`). Then
//! one lane per gateway (`rtbench::lane`), each with its own gateway process:
//! 1. Gateway memory per idle session: VmRSS before and after opening the
//!    largest session count of `BENCH_RT_SESSIONS`.
//! 2. Commit → delta latency p50/p95/p99 for each session count × commit rate
//!    (`BENCH_RT_SESSIONS` × `BENCH_RT_RATES`), next to bare NOTIFY → LISTEN at
//!    the same rate, with the delivery accounting (lost, duplicated, out of
//!    order, wake-ups) and where the time went (CPU, `realtime_deltas` calls).
//! 3. The reconnect storm: reconnect → caught-up latency next to the same
//!    sessions' steady commit → delta latency, lost / duplicated deliveries.
//! 4. Sync rounds/s through `POST /sync` next to `SELECT syncular.sync`.
//!
//! Then the tables of every lane and issue 30's goals, met or not, one
//! column per gateway.
//!
//! Usage: `realtime_bench [DSN]` (default `$SYNCULAR_TEST_DSN`); the gateway
//! binaries from `SYNCULAR_GATEWAY_BIN` / `SYNCULAR_NODE_GATEWAY_BIN`.
//! `scripts/bench-realtime` builds everything and starts a durable server. Not
//! a test: it fails only on a wrong delivery or a failed request, never on a
//! timing.

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use syncular_integration_tests::connect_to;
use syncular_integration_tests::rtbench::commits::{run_paced, Pace};
use syncular_integration_tests::rtbench::config::Config;
use syncular_integration_tests::rtbench::goals::{self, Outcome};
use syncular_integration_tests::rtbench::procstat::postmaster_of;
use syncular_integration_tests::rtbench::report;
use syncular_integration_tests::rtbench::setup::{self, new_partition};
use syncular_integration_tests::rtbench::lane;
use syncular_integration_tests::rtbench::floors::send as send_floor;

/// The send floor's message payload (a one-row delta's size) and rounds over every socket.
const FLOOR_PAYLOAD: usize = 200;
const FLOOR_ROUNDS: usize = 200;

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("realtime_bench: a lane failed or deliveries were wrong (see the delivery tables)");
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

/// Returns whether every lane ran (or was skipped) and every delivery was correct.
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
    let names: Vec<&str> = cfg.gateways.iter().map(|k| k.name()).collect();
    println!(
        "  gateways {}; sessions {:?} × rates {:?}/s, {:.0} s per cell over {} committing connections; storm {} sessions × {} waves of {} % at {}/s; rounds: {:?} connections × {:.0} s",
        names.join(" "),
        cfg.sessions,
        cfg.rates,
        cfg.cell.as_secs_f64(),
        cfg.committers,
        cfg.storm_sessions,
        cfg.storm_waves,
        cfg.storm_share_pct,
        cfg.storm_rate,
        cfg.round_connections,
        cfg.round_secs.as_secs_f64()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let postmaster = postmaster_of(backend as u32);

    step(t0, "commit capacity: closed-loop single-row commits, 2 s each");
    let mut capacity = Vec::new();
    for n in [1, cfg.committers] {
        let (p, e) = new_partition(&cfg.dsn, "rt-capacity")?;
        let run = run_paced(&cfg.dsn, &p, &e, Pace::ClosedLoop, Duration::from_secs(2), n, "cap")?;
        capacity.push((n, run.achieved()));
    }
    report::print_capacity(&capacity);

    let floor_sockets = cfg.sessions.iter().copied().max().unwrap_or(1000);
    step(t0, &format!("send floor: one write per (message, socket) to {floor_sockets} loopback sockets"));
    let floor = send_floor::run(&rt, floor_sockets, FLOOR_PAYLOAD, FLOOR_ROUNDS)?;
    report::print_send_floor(&floor);

    let mut lanes = Vec::new();
    for &kind in &cfg.gateways {
        step(t0, &format!("=== {} gateway", kind.name()));
        let outcome = match kind.unavailable(&cfg) {
            Some(why) => {
                println!("  skipped: {why}");
                Outcome::Skipped(why)
            }
            None => match lane::run(&cfg, &rt, kind, postmaster, &|what| step(t0, &format!("[{}] {what}", kind.name()))) {
                Ok(l) => Outcome::Ran(Box::new(l)),
                Err(e) => {
                    println!("  {} gateway FAILED: {e}", kind.name());
                    Outcome::Failed(e)
                }
            },
        };
        lanes.push((kind, outcome));
    }
    step(t0, &format!("done (load average {})", load_average()));

    println!();
    report::print_capacity(&capacity);
    report::print_send_floor(&floor);
    let mut ok = true;
    for (kind, outcome) in &lanes {
        match outcome {
            Outcome::Ran(l) => {
                println!();
                println!("──────── {} gateway ────────", kind.name());
                report::print_cells(&l.cells);
                if let Some(s) = &l.storm {
                    report::print_storm(s);
                }
                report::print_rounds(&l.rounds);
                report::print_memory(&l.memory);
                ok &= l.correct();
            }
            Outcome::Failed(_) => ok = false,
            Outcome::Skipped(_) => {}
        }
    }
    goals::print_goals(&lanes, &capacity, &floor);
    Ok(ok)
}

/// `/proc/loadavg`'s 1/5/15-minute figures.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
