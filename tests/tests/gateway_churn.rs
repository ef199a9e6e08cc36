//! A reconnect storm against a running gateway (§8.1, §8.2, §8.4): N real clients (default 50,
//! `SYNCULAR_CHURN_SESSIONS`) connect their sockets, sync over them, write, disconnect and
//! reconnect again and again (`SYNCULAR_CHURN_CYCLES`, default 5) while commits flow from SQL
//! (every ~5 ms) and from the clients' own rounds; connected, a client behaves like an app
//! (applies deltas, syncs when woken). Then every client syncs once more and must hold exactly
//! the server's rows; and one more commit must reach every one of them over its socket alone
//! (deltas resumed after the storm — no session wedged suppressed or lost by the hub).
//!
//! The partition is `*slow-round*` (the test resolver takes 15 ms: registrations resolve as
//! slowly as a real host's membership query might), so the fanout right after a round's `END`
//! races the round's registration reload.
//!
//! Only behaviour every gateway must have is relied on (the dev-auth headers, the §8 socket,
//! no gateway flag, no metric): the suite also runs against other gateway implementations
//! (`SYNCULAR_GATEWAY_BIN`). Every wait is bounded; a client thread never panics past its
//! barriers (its failures are collected and reported together).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use syncular_integration_tests::fixtures::{partition_name, server_tasks};
use syncular_integration_tests::gateway::{grant, setup, sql_commit_task, Gateway, Peer, Received};
use syncular_integration_tests::raw_session::Rng;
use syncular_integration_tests::{connect, env_usize};

/// Bound of every wait of a client (a storm on a small machine is slow).
const WAIT: Duration = Duration::from_secs(60);

fn hellos(p: &Peer) -> usize {
    p.received.iter().filter(|r| matches!(r, Received::Text(v) if v["event"] == "hello")).count()
}

/// Connects the socket (retrying a refused upgrade, as a client backs off) and waits for its
/// `hello`.
fn connect_socket(p: &mut Peer, rng: &mut Rng) -> Result<(), String> {
    let before = hellos(p);
    let deadline = Instant::now() + WAIT;
    loop {
        match p.client.connect_realtime(&mut p.transport) {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("connect refused ({e}); retrying");
                std::thread::sleep(Duration::from_millis(50 + rng.below(200)));
            }
            Err(e) => return Err(format!("connect: {e}")),
        }
    }
    pump_until(p, "hello", |p| hellos(p) > before)
}

fn pump_until(p: &mut Peer, what: &str, cond: impl Fn(&Peer) -> bool) -> Result<(), String> {
    let deadline = Instant::now() + WAIT;
    loop {
        p.pump();
        if cond(p) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}; last events: {:?}", p.events().iter().rev().take(8).collect::<Vec<_>>()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stays connected for `ms` milliseconds like an app: applies deltas, and runs a sync round
/// when a wake-up (or a dropped delta) raised the sync-needed signal (§8.4).
fn live_for(p: &mut Peer, ms: u64) -> Result<(), String> {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        p.pump();
        if p.client.sync_needed() {
            p.sync_idle(6).map_err(|e| format!("sync on wake-up: {e}"))?;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn phase<T>(label: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| format!("{label}: {e}")),
        Err(panic) => Err(format!(
            "{label}: panicked: {}",
            panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned())).unwrap_or_default()
        )),
    }
}

#[test]
fn sessions_churning_while_commits_flow_all_converge_and_keep_receiving_deltas() {
    let sessions = env_usize("SYNCULAR_CHURN_SESSIONS", 50);
    let cycles = env_usize("SYNCULAR_CHURN_CYCLES", 5);
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-churn-slow-round");
    for i in 0..sessions + env_usize("SYNCULAR_CHURN_LATE_JOINERS", 10) {
        grant(&mut conn, &partition, &format!("churner-{i}"), &["p1"]);
    }
    sql_commit_task(&mut conn, &partition, "server", "seed", "p1", "before the storm");
    let gw = Gateway::start(&[]);
    let started = Instant::now();
    let mut seeds = Rng::from_env("churn");

    // Commits from SQL every ~5 ms until the storm is over.
    let storm_over = Arc::new(AtomicBool::new(false));
    let sql_commits = Arc::new(AtomicUsize::new(0));
    let committer = {
        let (partition, over, count) = (partition.clone(), storm_over.clone(), sql_commits.clone());
        std::thread::spawn(move || {
            let mut conn = connect();
            let mut n = 0;
            while !over.load(Ordering::SeqCst) {
                n += 1;
                sql_commit_task(&mut conn, &partition, "server", &format!("sql-{n}"), "p1", "during the storm");
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };

    // Barriers: the storm ended (main stops the commits and reads the rows), every client
    // synced and checked them, the last commit was made.
    let late = env_usize("SYNCULAR_CHURN_LATE_JOINERS", 10);
    let storm_done = Arc::new(Barrier::new(sessions + late + 1));
    let rows_known = Arc::new(Barrier::new(sessions + late + 1));
    let synced = Arc::new(Barrier::new(sessions + late + 1));
    let resumed_made = Arc::new(Barrier::new(sessions + late + 1));
    let expected: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..sessions + late {
        let (base, partition, seed) = (gw.base_url.clone(), partition.clone(), seeds.next_u64());
        let (storm_done, rows_known, synced, resumed_made, expected) =
            (storm_done.clone(), rows_known.clone(), synced.clone(), resumed_made.clone(), expected.clone());
        threads.push(std::thread::spawn(move || -> Vec<String> {
            let mut failures = Vec::new();
            let mut rng = Rng::new(seed);
            let actor = format!("churner-{i}");
            let mut peer = None;
            // The storm: connect, sync over the socket, write, stay a while, disconnect.
            let storm = phase("storm", || {
                if i >= sessions {
                    return Err(String::new());
                }
                let mut p = Peer::new(&base, &partition, &actor, &format!("churn-client-{i}"));
                p.subscribe("tasks", &["p1"]);
                for cycle in 0..cycles {
                    std::thread::sleep(Duration::from_millis(rng.below(100)));
                    connect_socket(&mut p, &mut rng)?;
                    p.write_task(&format!("own-{i}-{cycle}"), "p1", "pushed over the socket");
                    p.sync_idle(6).map_err(|e| format!("cycle {cycle}: sync: {e}"))?;
                    live_for(&mut p, 50 + rng.below(250))?;
                    if cycle + 1 < cycles {
                        p.disconnect();
                    }
                }
                Ok(p)
            });
            match storm {
                Ok(p) => peer = Some(p),
                Err(e) if i < sessions => failures.push(e),
                Err(_) => {}
            }
            storm_done.wait();
            rows_known.wait();
            // A late joiner boots the reference way: connect, then its first socket round
            // registers the subscription (§8.7: effective for the fanout right after END).
            if i >= sessions {
                match phase("late join", || {
                    let mut p = Peer::new(&base, &partition, &actor, &format!("churn-client-{i}"));
                    p.subscribe("tasks", &["p1"]);
                    connect_socket(&mut p, &mut rng)?;
                    Ok(p)
                }) {
                    Ok(p) => peer = Some(p),
                    Err(e) => failures.push(e),
                }
            }
            // Recovery: one more sync; the client holds exactly the server's rows.
            if let Some(p) = peer.as_mut() {
                let want = expected.lock().unwrap().clone();
                if let Err(e) = phase("converge", || {
                    p.sync_idle(20).map_err(|e| format!("final sync: {e}"))?;
                    let mut held = p.task_ids();
                    held.sort();
                    if held != want {
                        let missing: Vec<_> = want.iter().filter(|id| !held.contains(id)).collect();
                        let extra: Vec<_> = held.iter().filter(|id| !want.contains(id)).collect();
                        return Err(format!("rows differ: missing {missing:?}, extra {extra:?}"));
                    }
                    Ok(())
                }) {
                    failures.push(e);
                }
            }
            synced.wait();
            resumed_made.wait();
            // Deltas flow again: the last commit arrives on the socket, no sync of our own.
            if let Some(p) = peer.as_mut() {
                if let Err(e) = phase("resumed", || pump_until(p, "the post-storm commit as a delta", |p| p.holds("resumed"))) {
                    let wakes = p.wakes();
                    failures.push(format!("{e} (wake-ups: {wakes:?}, sync needed: {})", p.client.sync_needed()));
                }
            }
            failures.into_iter().map(|f| format!("client {i}: {f}")).collect()
        }));
    }

    storm_done.wait();
    storm_over.store(true, Ordering::SeqCst);
    committer.join().expect("committer");
    let want: Vec<String> = server_tasks(&mut conn, &partition).expect("server rows").into_iter().map(|t| t.0).collect();
    *expected.lock().unwrap() = want.clone();
    rows_known.wait();
    synced.wait();
    sql_commit_task(&mut conn, &partition, "server", "resumed", "p1", "after the storm");
    resumed_made.wait();
    let failures: Vec<String> = threads.into_iter().flat_map(|t| t.join().expect("client threads never panic")).collect();
    eprintln!(
        "{sessions} sessions × {cycles} cycles (+{late} late joiners), {} SQL commits during the storm, {} rows, {:?}; {} failures",
        sql_commits.load(Ordering::SeqCst),
        want.len(),
        started.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}
