//! Races around §8.7 socket rounds, repeated hundreds of times against a real gateway, real
//! Postgres and raw sockets (the timing a real client cannot be told to keep):
//!
//! - commits made from SQL while a round runs — before its pull reads the log, after it, while
//!   the registrations reload at round end — reach the session: in the round's response or as
//!   `0x00` deltas after its `END` (§8.2, §8.7), none missing, none twice, never only as a
//!   wake-up the client would have to pull for;
//! - presence published inside every registration-reload window — a socket round's end (the
//!   grant gained at that round, or kept), `syncular.refresh_scopes`, the reload of a session
//!   joining while a refresh runs — reaches the peer that holds the key (§8.6.3).
//!
//! The partitions are named `*slow-round*`: the test resolver takes 15 ms there, so every
//! round's pull and every reload leaves a window for the other side to land in. Iterations:
//! `SYNCULAR_RACE_ITERATIONS` (default 300 for the delta race; the presence phases scale from
//! it); the random offsets print their seed (`SYNCULAR_RACE_SEED` replays it).

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use syncular_integration_tests::fixtures::{partition_name, TASKS};
use syncular_integration_tests::gateway::{grant, setup, sql_commit_task, Gateway, WAIT};
use syncular_integration_tests::raw_session::{commit_seqs, error_codes, next_cursors, Incoming, RawSession, Rng};
use syncular_integration_tests::wire::{decode_response, pull_header, request, subscription};
use syncular_integration_tests::{connect, env_usize};

const KEY: &str = "project:p1";
/// How long a commit or a presence message may take to arrive once it is due.
const ARRIVAL: Duration = Duration::from_secs(2);
/// A race that failed this often has made its point: stop there (the report says how many
/// iterations ran).
const MAX_FAILURES: usize = 25;

/// The smallest `SUB_END.nextCursor` of a successful round's response (panics on a failed one).
fn floor(msg: &ssp2::model::Message) -> i64 {
    assert!(error_codes(msg).is_empty(), "the round failed: {:?}", msg.frames);
    next_cursors(msg).into_iter().min().unwrap_or_else(|| panic!("no SUB_END: {:?}", msg.frames))
}

/// The partition's `logEpoch` (a wire-2 request names it, else the answer is a reset).
fn log_epoch(conn: &mut postgres::Client, partition: &str) -> String {
    conn.query_one("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&partition]).expect("epoch").get(0)
}

fn pull(epoch: &str, client_id: &str, subs: &[(&str, &str, i64)]) -> Vec<u8> {
    let mut frames = vec![pull_header(0, 0, 0, 1)];
    for (id, project, cursor) in subs {
        frames.push(subscription(id, TASKS, &[("project_id", &[project])], *cursor, None));
    }
    request(client_id, Some(epoch), frames)
}

/// A thread with its own connection that makes `syncular.commit`s at the offsets (ms after
/// it receives them) it is handed, and answers their commitSeqs.
struct Committer {
    tx: mpsc::Sender<Vec<u64>>,
    rx: mpsc::Receiver<Vec<i64>>,
}

impl Committer {
    fn start(partition: &str, actor: &str, project: &str) -> Committer {
        let (tx, work) = mpsc::channel::<Vec<u64>>();
        let (done, rx) = mpsc::channel();
        let (partition, actor, project) = (partition.to_owned(), actor.to_owned(), project.to_owned());
        std::thread::spawn(move || {
            let mut conn = connect();
            let mut n = 0u64;
            for offsets in work {
                let start = Instant::now();
                let mut seqs = Vec::new();
                for at in offsets {
                    let due = start + Duration::from_millis(at);
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    n += 1;
                    seqs.push(sql_commit_task(&mut conn, &partition, &actor, &format!("c{n}"), &project, "race"));
                }
                if done.send(seqs).is_err() {
                    return;
                }
            }
        });
        Committer { tx, rx }
    }

    fn commit_at(&self, offsets: Vec<u64>) {
        self.tx.send(offsets).expect("committer");
    }

    fn seqs(&self) -> Vec<i64> {
        self.rx.recv_timeout(WAIT).expect("the committer answered")
    }
}

/// What the client holds: its cursor and every commitSeq it applied (a set: a second copy
/// is a duplicate).
struct Applied {
    cursor: i64,
    seen: BTreeSet<i64>,
}

impl Applied {
    /// Applies a delta like a client (§8.2): every commit must lie past the cursor (no gap is
    /// checkable here, a duplicate is), the cursor moves to `SUB_END.nextCursor`. Returns the
    /// problems found.
    fn delta(&mut self, bytes: &[u8]) -> Vec<String> {
        let msg = decode_response(bytes).expect("a delta decodes");
        let mut problems = Vec::new();
        for c in commit_seqs(&msg) {
            if c <= self.cursor || !self.seen.insert(c) {
                problems.push(format!("commit {c} delivered twice (cursor {})", self.cursor));
            }
        }
        if let Some(next) = next_cursors(&msg).into_iter().max() {
            self.cursor = self.cursor.max(next);
        }
        problems
    }
}

#[test]
fn commits_landing_inside_socket_rounds_reach_the_session_as_deltas_after_end() {
    let iterations = env_usize("SYNCULAR_RACE_ITERATIONS", 300);
    let mut rng = Rng::from_env("commits inside rounds");
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-slow-round-deltas");
    grant(&mut conn, &partition, "alice", &["p1"]);
    sql_commit_task(&mut conn, &partition, "alice", "seed", "p1", "seed");
    let epoch = log_epoch(&mut conn, &partition);
    let gw = Gateway::start(&[]);
    let client = "race-deltas";
    let mut s = RawSession::connect(&gw, &partition, "alice", client);

    // Register the subscription over the socket (bootstrap), then ack like a client.
    s.send_round(&pull(&epoch, client, &[("s", "p1", -1)]));
    let first = s.finish_round(WAIT, |_| {});
    let mut applied = Applied { cursor: floor(&first), seen: BTreeSet::new() };
    s.ack(applied.cursor);

    let committer = Committer::start(&partition, "bob", "p1");
    let mut failures: Vec<String> = Vec::new();
    let (mut wakes, mut dropped, mut by_delta, mut by_round) = (0, 0, 0, 0);
    let mut ran = 0;
    for i in 0..iterations {
        if failures.len() >= MAX_FAILURES {
            break;
        }
        ran += 1;
        // Two commits at random offsets over ~4 resolver sleeps: before the round, before its
        // pull reads the log, after it, while the round-end reload runs, after the round.
        let mut offsets = vec![rng.below(70), rng.below(70)];
        offsets.sort_unstable();
        committer.commit_at(offsets.clone());
        // The round starts 0–25 ms after the committer's clock: some commits land before it.
        std::thread::sleep(Duration::from_millis(rng.below(25)));
        s.send_round(&pull(&epoch, client, &[("s", "p1", applied.cursor)]));
        let mut iteration_wakes = 0;
        let resp = s.finish_round(WAIT, |m| match m {
            // A delta that reaches a client with a pull in flight is dropped (§8.2: it counts
            // as a wake-up); the pull covers it.
            Incoming::Delta(_, _) => dropped += 1,
            Incoming::Text(v) if v["event"] == "sync" => iteration_wakes += 1,
            _ => {}
        });
        for c in commit_seqs(&resp) {
            assert!(c > applied.cursor && applied.seen.insert(c), "round {i}: the pull returned commit {c} twice");
            by_round += 1;
        }
        applied.cursor = applied.cursor.max(floor(&resp));
        // The post-round ack (§8.2 ack point).
        s.ack(applied.cursor);
        let made = committer.seqs();

        // Everything made must arrive without another round: as deltas after END.
        let deadline = Instant::now() + ARRIVAL;
        let mut problems = Vec::new();
        while !made.iter().all(|c| applied.seen.contains(c)) && Instant::now() < deadline {
            match s.read(deadline.saturating_duration_since(Instant::now())) {
                Some(Incoming::Delta(bytes, _)) => {
                    let before = applied.seen.len();
                    problems.extend(applied.delta(&bytes));
                    by_delta += applied.seen.len() - before;
                    s.ack(applied.cursor);
                }
                Some(Incoming::Text(v)) if v["event"] == "sync" => iteration_wakes += 1,
                _ => {}
            }
        }
        wakes += iteration_wakes;
        let missing: Vec<i64> = made.iter().copied().filter(|c| !applied.seen.contains(c)).collect();
        if !missing.is_empty() {
            problems.push(format!("commits {missing:?} never arrived as deltas ({iteration_wakes} wake-ups instead)"));
        }
        if !problems.is_empty() {
            failures.push(format!("iteration {i} (offsets {offsets:?} ms, made {made:?}): {}", problems.join("; ")));
            // Recover like a client would (pull), so the next iteration starts in step.
            s.send_round(&pull(&epoch, client, &[("s", "p1", applied.cursor)]));
            let resp = s.finish_round(WAIT, |_| {});
            applied.seen.extend(commit_seqs(&resp));
            applied.cursor = applied.cursor.max(floor(&resp));
            s.ack(applied.cursor);
            applied.seen.extend(made);
        }
    }
    eprintln!(
        "{ran} rounds: {by_round} commits in round responses, {by_delta} as deltas after END, \
         {wakes} wake-ups, {dropped} deltas dropped mid-round; {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{} of {ran} iterations failed:\n{}", failures.len(), failures.join("\n"));
}

/// The presence documents `session` received from `actor` on [`KEY`], in order (`None` for
/// a leave), reading for at most `timeout` until `until` holds for the latest one.
fn await_presence(s: &mut RawSession, actor: &str, timeout: Duration, until: impl Fn(Option<&Value>) -> bool, log: &mut Vec<Value>) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if log.iter().rev().find(|v| v["actorId"] == actor).is_some_and(|v| until(v.get("doc").filter(|d| !d.is_null()))) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        if let Some(Incoming::Text(v)) = s.read(deadline.saturating_duration_since(Instant::now())) {
            if v["event"] == "presence" && v["data"]["scopeKey"] == KEY {
                log.push(v["data"].clone());
            }
        }
    }
}

/// Reads whatever is pending (a presence error shows what went wrong).
fn drain(s: &mut RawSession, log: &mut Vec<Value>) {
    while let Some(m) = s.read(Duration::from_millis(1)) {
        if let Incoming::Text(v) = m {
            if v["event"] == "presence" {
                log.push(v["data"].clone());
            }
        }
    }
}

fn doc_is(expected: Value) -> impl Fn(Option<&Value>) -> bool {
    move |doc| doc == Some(&expected)
}

#[test]
fn presence_published_inside_registration_reloads_reaches_the_peer() {
    let iterations = env_usize("SYNCULAR_RACE_ITERATIONS", 300) / 2;
    let mut rng = Rng::from_env("presence inside reloads");
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-slow-round-presence");
    grant(&mut conn, &partition, "alice", &["p1"]);
    grant(&mut conn, &partition, "bob", &["p1"]);
    sql_commit_task(&mut conn, &partition, "alice", "seed", "p1", "seed");
    let epoch = log_epoch(&mut conn, &partition);
    let gw = Gateway::start(&[]);
    let mut a = RawSession::connect(&gw, &partition, "alice", "pa");
    a.send_round(&pull(&epoch, "pa", &[("s", "p1", -1)]));
    a.finish_round(WAIT, |_| {});
    let mut b = RawSession::connect(&gw, &partition, "bob", "pb");
    let (mut a_log, mut b_log) = (Vec::new(), Vec::new());
    let mut failures: Vec<String> = Vec::new();
    let mut b_cursor = -1;

    // 1. The grant is gained at a round's end: B drops its subscription in one round
    //    (losing project:p1), re-adds it in the next and publishes the instant END arrives.
    //    Meanwhile A publishes inside B's round; B must end up with A's document too.
    let mut phases: Vec<String> = Vec::new();
    let (mut start, mut ran) = (failures.len(), 0);
    for i in 0..iterations {
        if failures.len() - start >= 10 {
            break;
        }
        ran += 1;
        b.send_round(&pull(&epoch, "pb", &[]));
        b.finish_round(WAIT, |_| {});
        b.send_round(&pull(&epoch, "pb", &[("s", "p1", b_cursor)]));
        std::thread::sleep(Duration::from_millis(rng.below(40)));
        a.publish(KEY, Some(json!({"a": i})));
        let resp = b.finish_round(WAIT, |m| {
            if let Incoming::Text(v) = m {
                if v["event"] == "presence" {
                    b_log.push(v["data"].clone());
                }
            }
        });
        b_cursor = floor(&resp);
        b.publish(KEY, Some(json!({"b": i})));
        let a_saw = await_presence(&mut a, "bob", ARRIVAL, doc_is(json!({"b": i})), &mut a_log);
        let b_saw = await_presence(&mut b, "alice", ARRIVAL, doc_is(json!({"a": i})), &mut b_log);
        if !a_saw || !b_saw {
            drain(&mut b, &mut b_log);
            failures.push(format!(
                "grant gained at round end, iteration {i}: A saw B's publish: {a_saw}, B saw A's: {b_saw}; B's last presence messages: {:?}",
                b_log.iter().rev().take(3).collect::<Vec<_>>()
            ));
        }
    }

    // 2. The grant is kept across the reload: B runs rounds, a `refresh_scopes` (bob's or the
    //    partition's) lands at a random offset, A publishes inside it all, B publishes at END.
    let (refresh_tx, refresh_rx) = mpsc::channel::<(u64, bool)>();
    let (refreshed_tx, refreshed) = mpsc::channel();
    let refresher_partition = partition.clone();
    std::thread::spawn(move || {
        let mut conn = connect();
        for (at, whole) in refresh_rx {
            std::thread::sleep(Duration::from_millis(at));
            let actor: Option<&str> = if whole { None } else { Some("bob") };
            conn.execute("SELECT syncular.refresh_scopes($1, $2)", &[&refresher_partition, &actor]).expect("refresh_scopes");
            if refreshed_tx.send(()).is_err() {
                return;
            }
        }
    });
    phases.push(format!("grant gained at round end: {} of {ran} failed", failures.len() - start));
    (start, ran) = (failures.len(), 0);
    for i in 0..iterations {
        if failures.len() - start >= 10 {
            break;
        }
        ran += 1;
        refresh_tx.send((rng.below(50), rng.below(2) == 0)).unwrap();
        b.send_round(&pull(&epoch, "pb", &[("s", "p1", b_cursor)]));
        std::thread::sleep(Duration::from_millis(rng.below(50)));
        a.publish(KEY, Some(json!({"a": 1000 + i})));
        let resp = b.finish_round(WAIT, |m| {
            if let Incoming::Text(v) = m {
                if v["event"] == "presence" {
                    b_log.push(v["data"].clone());
                }
            }
        });
        b_cursor = floor(&resp);
        b.publish(KEY, Some(json!({"b": 1000 + i})));
        refreshed.recv_timeout(WAIT).expect("refresh_scopes done");
        // And once more after the refresh is surely being processed.
        a.publish(KEY, Some(json!({"a": 2000 + i})));
        let a_saw = await_presence(&mut a, "bob", ARRIVAL, doc_is(json!({"b": 1000 + i})), &mut a_log);
        let b_saw = await_presence(&mut b, "alice", ARRIVAL, doc_is(json!({"a": 2000 + i})), &mut b_log);
        if !a_saw || !b_saw {
            drain(&mut b, &mut b_log);
            drain(&mut a, &mut a_log);
            failures.push(format!(
                "grant kept across a round end and refresh_scopes, iteration {i}: A saw B's publish: {a_saw}, B saw A's: {b_saw}; \
                 A's last: {:?}; B's last: {:?}",
                a_log.iter().rev().take(3).collect::<Vec<_>>(),
                b_log.iter().rev().take(3).collect::<Vec<_>>()
            ));
        }
    }

    // 3. A session that joins while a refresh runs reloads its registrations before it joins
    //    (the scopes epoch moved): B reconnects with a refresh_scopes at a random offset and
    //    publishes right after hello; A must see it, and B must get A's document (snapshot).
    phases.push(format!("grant kept across round ends and refresh_scopes: {} of {ran} failed", failures.len() - start));
    (start, ran) = (failures.len(), 0);
    for i in 0..iterations / 3 {
        if failures.len() - start >= 10 {
            break;
        }
        ran += 1;
        drop(b);
        refresh_tx.send((rng.below(20), rng.below(2) == 0)).unwrap();
        b = RawSession::connect(&gw, &partition, "bob", "pb");
        b.publish(KEY, Some(json!({"b": 3000 + i})));
        refreshed.recv_timeout(WAIT).expect("refresh_scopes done");
        b_log.clear();
        let a_saw = await_presence(&mut a, "bob", ARRIVAL, doc_is(json!({"b": 3000 + i})), &mut a_log);
        let b_saw = await_presence(&mut b, "alice", ARRIVAL, |d| d.is_some_and(|d| d.get("a").is_some()), &mut b_log);
        if !a_saw || !b_saw {
            drain(&mut b, &mut b_log);
            failures.push(format!(
                "session joining during a refresh, iteration {i}: A saw B's publish: {a_saw}, B got A's document: {b_saw}; B's log: {:?}",
                b_log.iter().rev().take(3).collect::<Vec<_>>()
            ));
        }
    }
    drop(refresh_tx);
    phases.push(format!("session joining during refresh_scopes: {} of {ran} failed", failures.len() - start));
    eprintln!("presence inside reloads: {}", phases.join("; "));
    assert!(failures.is_empty(), "{} iterations failed:\n{}", failures.len(), failures.join("\n"));
}
