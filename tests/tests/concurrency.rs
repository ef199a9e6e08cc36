//! Concurrency (issue 4, §2.1, §2.3, §6.3, §6.4): 8 connections push to one
//! partition at once — several hundred commits each, with replays of acked
//! commits, a clientCommitId repeated inside one request, deliveries whose
//! transaction rolls back before the client retries them, and simultaneous
//! duplicate deliveries of the same commit id from two connections. The log
//! must end dense (`commitSeq` exactly 1..N), every acknowledged commit
//! present exactly once, every replay `cached` with the original sequence
//! number and results, and no statement may deadlock or time out. A ninth
//! connection pulls incrementally the whole time: commits become visible in
//! `commitSeq` order, so it sees every commit exactly once, without a gap.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;
use ssp2::model::{Frame, PushStatus};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_all_projects, allow_projects, partition_name, register_schema,
};
use syncular_integration_tests::transport::call_sync;
use syncular_integration_tests::wire::{
    commit, db_message, decode_response, delivered, pull_header, push_outcomes, request,
    subscription, upsert, PushOutcome, RawSession, Task,
};

const CONNECTIONS: usize = 8;
/// Fresh commits per connection (each writes its own row).
const OWN_COMMITS: usize = 220;
/// Every `SHARED_EVERY`-th round, the two connections of a pair deliver the
/// same (clientId, clientCommitId) at the same moment.
const SHARED_EVERY: usize = 3;
/// Every `REPLAY_EVERY`-th round, an acked commit is delivered again.
const REPLAY_EVERY: usize = 5;
/// Every `INNER_DUP_EVERY`-th round, the fresh commit appears twice in one request.
const INNER_DUP_EVERY: usize = 10;
/// Every `ROLLBACK_EVERY`-th round, the first delivery runs in a transaction
/// that rolls back (a lost response), and the client retries it.
const ROLLBACK_EVERY: usize = 11;
const ACTOR: &str = "worker";

/// A reusable barrier for two or more threads whose wait gives up (panics)
/// after a timeout, so a failed partner can never hang the test.
struct TimedBarrier {
    parties: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl TimedBarrier {
    fn new(parties: usize) -> Self {
        TimedBarrier {
            parties,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
        }
    }

    fn wait(&self, timeout: Duration) {
        let mut guard = self.state.lock().expect("barrier lock");
        let generation = guard.1;
        guard.0 += 1;
        if guard.0 == self.parties {
            guard.0 = 0;
            guard.1 += 1;
            self.cv.notify_all();
            return;
        }
        let deadline = Instant::now() + timeout;
        while guard.1 == generation {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "barrier partner did not arrive within {timeout:?}"
            );
            guard = self.cv.wait_timeout(guard, left).expect("barrier wait").0;
        }
    }
}

/// Everything one delivery observed.
#[derive(Clone, Debug)]
struct Delivery {
    client_id: String,
    outcome: PushOutcome,
    kind: &'static str,
}

struct Pusher {
    conn: Client,
    partition: String,
    epoch: String,
    allowed: serde_json::Value,
}

impl Pusher {
    fn push(&mut self, client_id: &str, frames: Vec<Frame>) -> Vec<PushOutcome> {
        let n = frames.len();
        let bytes = request(client_id, Some(&self.epoch), frames);
        let response = call_sync(
            &mut self.conn,
            &self.partition,
            ACTOR,
            &bytes,
            Some(&self.allowed),
        )
        .unwrap_or_else(|e| panic!("push by {client_id} failed: {}", db_message(&e)));
        let outcomes = push_outcomes(&decode_response(&response).expect("response decodes"));
        assert_eq!(outcomes.len(), n, "one PUSH_RESULT per PUSH_COMMIT");
        outcomes
    }

    /// Delivers inside a transaction that rolls back: the server did the
    /// work, the client never got (or lost) the answer.
    fn push_rolled_back(&mut self, client_id: &str, frames: Vec<Frame>) {
        let bytes = request(client_id, Some(&self.epoch), frames);
        let mut tx = self.conn.transaction().expect("begin");
        let row = tx
            .query_one(
                "SELECT syncular.sync($1::text, $2::text, $3::bytea, $4::jsonb)",
                &[&self.partition, &ACTOR, &bytes, &Some(&self.allowed)],
            )
            .unwrap_or_else(|e| panic!("push in rolled-back tx failed: {}", db_message(&e)));
        let _: Vec<u8> = row.get(0);
        tx.rollback().expect("rollback");
    }
}

fn run_connection(
    index: usize,
    partition: String,
    epoch: String,
    start: Arc<TimedBarrier>,
    pair: Arc<TimedBarrier>,
) -> Vec<Delivery> {
    let mut conn = connect();
    // A deadlock would surface as 40P01 from the deadlock detector; a stuck
    // lock wait as a statement timeout. Either fails the push (bounded).
    conn.batch_execute("SET statement_timeout = '60s'; SET deadlock_timeout = '200ms'")
        .expect("session settings");
    let mut pusher = Pusher {
        conn,
        partition,
        epoch,
        allowed: allow_all_projects(),
    };
    let own_client = format!("own-{index}");
    let pair_client = format!("pair-{}", index / 2);
    let mut log: Vec<Delivery> = Vec::new();
    let mut acked: Vec<(String, PushOutcome)> = Vec::new();
    start.wait(Duration::from_secs(60));

    for k in 0..OWN_COMMITS {
        let commit_id = format!("c{k}");
        let row = Task::new(
            format!("r-{index}-{k}"),
            "p1",
            format!("row {k} of connection {index}"),
        );
        let frame = commit(commit_id.clone(), vec![upsert(&row, None)]);

        if k % ROLLBACK_EVERY == ROLLBACK_EVERY - 1 {
            pusher.push_rolled_back(&own_client, vec![frame.clone()]);
        }
        if k % INNER_DUP_EVERY == INNER_DUP_EVERY - 1 {
            let outcomes = pusher.push(&own_client, vec![frame.clone(), frame.clone()]);
            log.push(Delivery {
                client_id: own_client.clone(),
                outcome: outcomes[0].clone(),
                kind: "fresh",
            });
            log.push(Delivery {
                client_id: own_client.clone(),
                outcome: outcomes[1].clone(),
                kind: "inner-duplicate",
            });
            acked.push((commit_id, outcomes[0].clone()));
        } else {
            let outcomes = pusher.push(&own_client, vec![frame]);
            log.push(Delivery {
                client_id: own_client.clone(),
                outcome: outcomes[0].clone(),
                kind: "fresh",
            });
            acked.push((commit_id, outcomes[0].clone()));
        }

        if k % SHARED_EVERY == 0 {
            let shared_row = Task::new(format!("s-{}-{k}", index / 2), "p2", format!("shared {k}"));
            let shared = commit(format!("s{k}"), vec![upsert(&shared_row, None)]);
            pair.wait(Duration::from_secs(60));
            let outcomes = pusher.push(&pair_client, vec![shared]);
            log.push(Delivery {
                client_id: pair_client.clone(),
                outcome: outcomes[0].clone(),
                kind: "shared",
            });
        }

        if k % REPLAY_EVERY == REPLAY_EVERY - 1 {
            let (old_id, _) = acked[k - 2].clone();
            let old_row = Task::new(
                format!("r-{index}-{}", k - 2),
                "p1",
                format!("row {} of connection {index}", k - 2),
            );
            let outcomes = pusher.push(
                &own_client,
                vec![commit(old_id, vec![upsert(&old_row, None)])],
            );
            log.push(Delivery {
                client_id: own_client.clone(),
                outcome: outcomes[0].clone(),
                kind: "replay",
            });
        }
    }
    log
}

/// Pulls incrementally (cursor from 0) until `done` is set and a pull brings
/// nothing new; returns every commitSeq seen, in order. Panics on a gap or
/// repeat: a commit may never become visible before a lower-numbered one.
fn run_reader(partition: String, epoch: String, done: Arc<AtomicBool>) -> (Vec<i64>, usize) {
    let mut s = RawSession::new(
        connect(),
        &partition,
        ACTOR,
        "reader",
        Some(allow_all_projects()),
    );
    s.conn
        .batch_execute("SET statement_timeout = '60s'")
        .expect("session settings");
    s.log_epoch = Some(epoch);
    let mut cursor = 0i64;
    let mut seen: Vec<i64> = Vec::new();
    let mut busy_pulls = 0usize;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        assert!(
            Instant::now() < deadline,
            "reader did not finish within 300 s"
        );
        let finished = done.load(Ordering::SeqCst);
        let msg = s
            .round(vec![
                pull_header(0, 0, 0, 0b0011),
                subscription(
                    "all",
                    "tasks",
                    &[("project_id", &["p1", "p2"])],
                    cursor,
                    None,
                ),
            ])
            .unwrap_or_else(|e| panic!("reader pull failed: {e}"));
        let got = delivered(&msg).expect("rows decode").commit_seqs;
        if !finished && !got.is_empty() {
            busy_pulls += 1;
        }
        for seq in &got {
            let expected = seen.last().map_or(1, |last| last + 1);
            assert_eq!(
                *seq,
                expected,
                "reader saw commit {seq} after {:?}: a gap or a repeat",
                seen.last()
            );
            seen.push(*seq);
        }
        cursor = msg
            .frames
            .iter()
            .find_map(|f| match f {
                Frame::SubEnd { next_cursor, .. } => Some(*next_cursor),
                _ => None,
            })
            .expect("SUB_END");
        if finished && got.is_empty() {
            return (seen, busy_pulls);
        }
    }
}

#[test]
fn eight_connections_push_concurrently_and_the_log_stays_dense_and_exactly_once() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("concurrency");
    let mut first = RawSession::new(
        connect(),
        &partition,
        ACTOR,
        "epoch-probe",
        Some(allow_all_projects()),
    );
    let epoch = first
        .acquire_epoch()
        .expect("acquire the partition's logEpoch");

    let start = Arc::new(TimedBarrier::new(CONNECTIONS));
    let pairs: Vec<Arc<TimedBarrier>> = (0..CONNECTIONS / 2)
        .map(|_| Arc::new(TimedBarrier::new(2)))
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (partition, epoch, done) = (partition.clone(), epoch.clone(), Arc::clone(&done));
        thread::spawn(move || run_reader(partition, epoch, done))
    };
    let began = Instant::now();
    let handles: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let (partition, epoch, start, pair) = (
                partition.clone(),
                epoch.clone(),
                Arc::clone(&start),
                Arc::clone(&pairs[i / 2]),
            );
            thread::spawn(move || run_connection(i, partition, epoch, start, pair))
        })
        .collect();
    let mut deliveries = Vec::new();
    let mut panics = Vec::new();
    for (i, handle) in handles.into_iter().enumerate() {
        match handle.join() {
            Ok(log) => deliveries.extend(log),
            Err(e) => panics.push(format!(
                "connection {i}: {}",
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default()
            )),
        }
    }
    done.store(true, Ordering::SeqCst);
    let reader_seen = reader.join();
    assert!(panics.is_empty(), "pushers failed: {panics:#?}");
    let (reader_seen, busy_pulls) =
        reader_seen.expect("the concurrent reader saw every commit in order");
    assert!(
        busy_pulls >= 2,
        "the reader pulled while the pushers ran ({busy_pulls} pulls)"
    );
    let elapsed = began.elapsed();

    // Every delivery of one commit id agrees on commitSeq and results; the
    // first delivery of a fresh commit is `applied`; every later one `cached`.
    let mut by_key: BTreeMap<(String, String), Vec<&Delivery>> = BTreeMap::new();
    for d in &deliveries {
        assert_ne!(
            d.outcome.status,
            PushStatus::Rejected,
            "no commit may be rejected: {d:?}"
        );
        assert!(
            d.outcome.commit_seq.is_some(),
            "applied/cached carry a commitSeq: {d:?}"
        );
        by_key
            .entry((d.client_id.clone(), d.outcome.client_commit_id.clone()))
            .or_default()
            .push(d);
    }
    for ((client, id), ds) in &by_key {
        let applied = ds
            .iter()
            .filter(|d| d.outcome.status == PushStatus::Applied)
            .count();
        assert_eq!(
            applied, 1,
            "{client}/{id}: exactly one delivery applies, got {ds:#?}"
        );
        let seq = ds[0].outcome.commit_seq;
        for d in ds {
            assert_eq!(
                d.outcome.commit_seq, seq,
                "{client}/{id}: every delivery reports one commitSeq"
            );
            assert_eq!(
                d.outcome.results, ds[0].outcome.results,
                "{client}/{id}: replay is byte-equivalent"
            );
            if d.kind != "fresh" && d.kind != "shared" {
                assert_eq!(
                    d.outcome.status,
                    PushStatus::Cached,
                    "{client}/{id}: a {} is cached",
                    d.kind
                );
            }
        }
        for d in ds.iter().filter(|d| d.kind == "fresh") {
            assert_eq!(
                d.outcome.status,
                PushStatus::Applied,
                "{client}/{id}: first delivery applies"
            );
        }
        if ds[0].kind == "shared" {
            assert_eq!(ds.len(), 2, "{client}/{id}: both pair members delivered it");
            let cached = ds
                .iter()
                .filter(|d| d.outcome.status == PushStatus::Cached)
                .count();
            assert_eq!(
                cached, 1,
                "{client}/{id}: the simultaneous duplicate is cached"
            );
        }
    }

    // The log: commitSeq exactly 1..N, each acknowledged commit exactly once
    // under the sequence number its deliveries reported.
    let expected: BTreeMap<i64, (String, String)> = by_key
        .iter()
        .map(|((client, id), ds)| {
            (
                ds[0].outcome.commit_seq.unwrap_or(-1),
                (client.clone(), id.clone()),
            )
        })
        .collect();
    let n = by_key.len();
    assert_eq!(expected.len(), n, "no two commits share a commitSeq");
    let replays = deliveries
        .iter()
        .filter(|d| d.kind == "replay" || d.kind == "inner-duplicate")
        .count();
    assert!(
        replays > CONNECTIONS * OWN_COMMITS / 10,
        "the run replayed commits ({replays})"
    );

    let mut conn = connect();
    let log: Vec<(i64, String, String)> = conn
        .query(
            "SELECT commit_seq, client_id, client_commit_id FROM syncular.sync_commits
              WHERE partition = $1 ORDER BY commit_seq",
            &[&partition],
        )
        .expect("read the log")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let seqs: Vec<i64> = log.iter().map(|r| r.0).collect();
    assert_eq!(
        seqs,
        (1..=n as i64).collect::<Vec<_>>(),
        "commitSeq is exactly 1..{n}"
    );
    for (seq, client, id) in &log {
        assert_eq!(
            expected.get(seq),
            Some(&(client.clone(), id.clone())),
            "commit {seq} is the acknowledged one"
        );
    }
    let max: i64 = conn
        .query_one(
            "SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1",
            &[&partition],
        )
        .expect("partition counter")
        .get(0);
    assert_eq!(
        max, n as i64,
        "the partition counter equals the last commitSeq"
    );
    let changes: i64 = conn
        .query_one(
            "SELECT count(*) FROM syncular.sync_changes WHERE partition = $1",
            &[&partition],
        )
        .expect("changes")
        .get(0);
    assert_eq!(changes, n as i64, "one change per commit, none duplicated");
    let rows: i64 = conn
        .query_one(
            "SELECT count(*) FROM public.tasks WHERE _sync_partition = $1",
            &[&partition],
        )
        .expect("app rows")
        .get(0);
    assert_eq!(
        rows, n as i64,
        "every commit wrote its own row exactly once"
    );
    let results: i64 = conn
        .query_one(
            "SELECT count(*) FROM syncular.sync_push_results WHERE partition = $1",
            &[&partition],
        )
        .expect("push results")
        .get(0);
    assert_eq!(
        results, n as i64,
        "one persisted result per idempotency key"
    );
    assert_eq!(
        reader_seen,
        (1..=n as i64).collect::<Vec<_>>(),
        "the concurrent reader saw commits 1..{n} exactly once, in order"
    );
    eprintln!(
        "concurrency: {} deliveries, {n} commits on {CONNECTIONS} connections in {:.1}s; {busy_pulls} concurrent pulls",
        deliveries.len(),
        elapsed.as_secs_f64()
    );
}

#[test]
fn a_backend_killed_while_holding_the_partition_lock_leaves_no_trace() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("killed-backend");
    let mut probe = RawSession::new(
        connect(),
        &partition,
        ACTOR,
        "probe",
        Some(allow_all_projects()),
    );
    let epoch = probe.acquire_epoch().expect("epoch");
    let mut listener =
        syncular_integration_tests::notify::CommitListener::listen(connect()).expect("LISTEN");
    let allowed = allow_all_projects();

    // A: pushes c1 inside an open transaction — it now holds the partition lock.
    let mut victim = connect();
    let victim_pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    let c1 = request(
        "client-a",
        Some(&epoch),
        vec![commit(
            "c1",
            vec![upsert(&Task::new("a1", "p1", "doomed"), None)],
        )],
    );
    victim.batch_execute("BEGIN").expect("begin");
    let response: Vec<u8> = victim
        .query_one(
            "SELECT syncular.sync($1::text, $2::text, $3::bytea, $4::jsonb)",
            &[&partition, &ACTOR, &c1, &Some(&allowed)],
        )
        .map_err(|e| db_message(&e))
        .expect("push c1 in an open transaction")
        .get(0);
    let out = push_outcomes(&decode_response(&response).expect("decode"));
    assert_eq!(
        (out[0].status, out[0].commit_seq),
        (PushStatus::Applied, Some(1))
    );

    // B: pushes c2 and must wait for the lock.
    let waiter = {
        let (partition, epoch, allowed) = (partition.clone(), epoch.clone(), allowed.clone());
        thread::spawn(move || {
            let mut conn = connect();
            conn.batch_execute("SET statement_timeout = '60s'")
                .expect("settings");
            let c2 = request(
                "client-b",
                Some(&epoch),
                vec![commit(
                    "c2",
                    vec![upsert(&Task::new("b1", "p1", "survivor"), None)],
                )],
            );
            let response = call_sync(&mut conn, &partition, ACTOR, &c2, Some(&allowed))
                .unwrap_or_else(|e| panic!("push c2: {}", db_message(&e)));
            push_outcomes(&decode_response(&response).expect("decode"))
        })
    };
    // Wait until B is actually blocked on A's lock, then kill A's backend.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let blocked: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                &[&victim_pid],
            )
            .expect("pg_stat_activity")
            .get(0);
        if blocked > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "B never blocked on the partition lock held by A"
        );
        thread::sleep(Duration::from_millis(20));
    }
    let killed: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&victim_pid])
        .expect("terminate")
        .get(0);
    assert!(killed);
    let out = waiter.join().expect("B finished");
    assert_eq!(
        (out[0].status, out[0].commit_seq),
        (PushStatus::Applied, Some(1)),
        "B gets commitSeq 1: A's commit never happened"
    );
    assert!(victim.is_closed() || victim.query_one("SELECT 1", &[]).is_err());

    // A's client retries c1 on a new connection: a fresh apply, not a replay.
    let mut retry = connect();
    let response = call_sync(&mut retry, &partition, ACTOR, &c1, Some(&allowed)).expect("retry c1");
    let out = push_outcomes(&decode_response(&response).expect("decode"));
    assert_eq!(
        (out[0].status, out[0].commit_seq),
        (PushStatus::Applied, Some(2))
    );

    let log: Vec<(i64, String)> = admin
        .query(
            "SELECT commit_seq, client_commit_id FROM syncular.sync_commits WHERE partition = $1 ORDER BY 1",
            &[&partition],
        )
        .expect("log")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(log, [(1, "c2".to_owned()), (2, "c1".to_owned())]);
    let seen = listener
        .wait_for(
            &partition,
            2,
            Duration::from_millis(400),
            Duration::from_secs(10),
        )
        .expect("listen");
    let payloads: Vec<String> = seen.into_iter().map(|n| n.payload).collect();
    assert_eq!(
        payloads,
        [1, 2].map(|s| syncular_integration_tests::notify::expected_payload(&partition, s)),
        "the killed transaction was never announced"
    );
}

/// One optimistic update attempt's outcome.
enum Attempt {
    Applied,
    Conflict {
        server_version: i64,
        server_row: Task,
    },
}

fn attempt(
    pusher: &mut Pusher,
    client_id: &str,
    commit_id: String,
    row: &Task,
    base: i64,
) -> Attempt {
    let outcomes = pusher.push(
        client_id,
        vec![commit(commit_id, vec![upsert(row, Some(base))])],
    );
    let o = &outcomes[0];
    match (o.status, o.results.as_slice()) {
        (PushStatus::Applied, _) => Attempt::Applied,
        (
            PushStatus::Rejected,
            [ssp2::model::OpResult::Conflict {
                code,
                server_version,
                server_row,
                ..
            }],
        ) => {
            assert_eq!(code, "sync.version_conflict", "{o:?}");
            Attempt::Conflict {
                server_version: *server_version,
                server_row: syncular_integration_tests::wire::decode_task(server_row)
                    .expect("conflict serverRow decodes"),
            }
        }
        _ => panic!("expected applied or a version conflict, got {o:?}"),
    }
}

#[test]
fn concurrent_base_version_updates_never_lose_an_update() {
    const WORKERS: usize = 8;
    const INCREMENTS: i64 = 20;
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("lost-update");
    let mut seed = RawSession::new(
        connect(),
        &partition,
        ACTOR,
        "seed",
        Some(allow_all_projects()),
    );
    let epoch = seed.acquire_epoch().expect("epoch");
    let mut counter = Task::new("counter", "p1", "count");
    counter.priority = Some(0);
    let out = seed
        .push(vec![commit("seed", vec![upsert(&counter, Some(0))])])
        .expect("seed");
    assert_eq!(
        out[0].status,
        PushStatus::Applied,
        "baseVersion 0 inserts: {:?}",
        out[0]
    );

    let start = Arc::new(TimedBarrier::new(WORKERS));
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (partition, epoch, start) = (partition.clone(), epoch.clone(), Arc::clone(&start));
            thread::spawn(move || {
                let mut conn = connect();
                conn.batch_execute("SET statement_timeout = '60s'")
                    .expect("settings");
                let mut pusher = Pusher {
                    conn,
                    partition,
                    epoch,
                    allowed: allow_all_projects(),
                };
                let client = format!("inc-{w}");
                let (mut version, mut value) = (1i64, 0i64);
                let (mut done, mut conflicts, mut n) = (0i64, 0u32, 0u32);
                start.wait(Duration::from_secs(60));
                while done < INCREMENTS {
                    n += 1;
                    assert!(n < 5_000, "worker {w}: no progress");
                    let mut next = Task::new("counter", "p1", format!("by {w}"));
                    next.priority = Some(value + 1);
                    match attempt(&mut pusher, &client, format!("a{n}"), &next, version) {
                        Attempt::Applied => {
                            done += 1;
                            version += 1;
                            value += 1;
                        }
                        Attempt::Conflict {
                            server_version,
                            server_row,
                        } => {
                            conflicts += 1;
                            assert!(
                                server_version > version,
                                "a conflict reports a newer version"
                            );
                            version = server_version;
                            value = server_row.priority.expect("counter value");
                        }
                    }
                }
                conflicts
            })
        })
        .collect();
    let conflicts: u32 = handles.into_iter().map(|h| h.join().expect("worker")).sum();

    let total = WORKERS as i64 * INCREMENTS;
    let row = admin
        .query_one(
            "SELECT priority, _sync_version FROM public.tasks WHERE _sync_partition = $1 AND id = 'counter'",
            &[&partition],
        )
        .expect("counter row");
    let (value, version): (Option<i64>, i64) = (row.get(0), row.get(1));
    assert_eq!(
        value,
        Some(total),
        "every applied increment counted once ({conflicts} conflicts)"
    );
    assert_eq!(
        version,
        total + 1,
        "server_version = baseVersion + 1 on every applied update"
    );
    let changes: i64 = admin
        .query_one(
            "SELECT count(*) FROM syncular.sync_changes WHERE partition = $1 AND row_id = 'counter'",
            &[&partition],
        )
        .expect("changes")
        .get(0);
    assert_eq!(
        changes,
        total + 1,
        "one change per applied commit, none for conflicts"
    );
    assert!(conflicts > 0, "the workers really raced");

    // An insert race on a fresh id: exactly one baseVersion-0 insert wins,
    // every other sees a conflict carrying the winner's row.
    let start = Arc::new(TimedBarrier::new(WORKERS));
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (partition, epoch, start) = (partition.clone(), epoch.clone(), Arc::clone(&start));
            thread::spawn(move || {
                let mut pusher = Pusher {
                    conn: connect(),
                    partition,
                    epoch,
                    allowed: allow_all_projects(),
                };
                start.wait(Duration::from_secs(60));
                let row = Task::new("contested", "p1", format!("claimed by {w}"));
                match attempt(
                    &mut pusher,
                    &format!("claim-{w}"),
                    "claim".to_owned(),
                    &row,
                    0,
                ) {
                    Attempt::Applied => None,
                    Attempt::Conflict {
                        server_version,
                        server_row,
                    } => Some((server_version, server_row.title)),
                }
            })
        })
        .collect();
    let results: Vec<Option<(i64, String)>> = handles
        .into_iter()
        .map(|h| h.join().expect("claimer"))
        .collect();
    let winners = results.iter().filter(|r| r.is_none()).count();
    assert_eq!(winners, 1, "exactly one insert wins: {results:?}");
    let stored: String = admin
        .query_one(
            "SELECT title FROM public.tasks WHERE _sync_partition = $1 AND id = 'contested'",
            &[&partition],
        )
        .expect("contested row")
        .get(0);
    for (version, title) in results.into_iter().flatten() {
        assert_eq!(
            (version, title.as_str()),
            (1, stored.as_str()),
            "losers see the winner's row"
        );
    }

    // A loser not allowed the winner's scope learns nothing: sync.forbidden, not a conflict.
    let mut outsider = Pusher {
        conn: connect(),
        partition: partition.clone(),
        epoch,
        allowed: allow_projects(&["p9"]),
    };
    let out = outsider.push(
        "outsider",
        vec![commit(
            "peek",
            vec![upsert(&Task::new("contested", "p9", "peek"), Some(0))],
        )],
    );
    assert_eq!(out[0].status, PushStatus::Rejected, "{:?}", out[0]);
    assert_eq!(
        out[0].error_codes(),
        ["sync.forbidden"],
        "no row leaks in a conflict: {:?}",
        out[0]
    );
}
