//! Durable reactions (§6.9) across connections: four workers claiming one
//! partition's reactions concurrently never hold one reaction at once while
//! its lease holds, and every reaction completes exactly once; a worker
//! that "crashes" (its connection goes, the lease is never completed) loses
//! its lease at expiry and the reaction is reclaimed with attempts + 1,
//! while the crashed token can no longer acknowledge it; a reaction
//! dead-letters after its max attempts; overlapping deliveries of one
//! commit on several connections plan and enqueue once; a commit that
//! enqueued signals `syncular_reaction` at COMMIT. Time is driven with
//! `syncular.now_ms` where leases must expire (no timed assertions).

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use serde_json::{json, Value};
use syncular_integration_tests::bump::{Scratch, PARTITION};

const T0: i64 = 1_800_000_000_000;

/// A scratch database whose reaction planner plans one `card.changed`
/// reaction per operation (key = row id; `maxAttempts` from the row's
/// title when it is a number) and counts its calls.
fn with_planner(label: &str) -> Scratch {
    let db = Scratch::new(label);
    db.connect()
        .batch_execute(
            "CREATE SEQUENCE public.planner_calls; \
             CREATE FUNCTION public.plan(commit jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$ BEGIN \
               PERFORM nextval('public.planner_calls'); \
               RETURN (SELECT jsonb_agg(jsonb_build_object('key', o->>'rowId', 'type', 'card.changed', 'version', 1, \
                          'payload', jsonb_build_object('rowId', o->>'rowId'), \
                          'maxAttempts', CASE WHEN o->'row'->>'title' ~ '^[0-9]+$' THEN (o->'row'->>'title')::int END)) \
                         FROM jsonb_array_elements(commit->'operations') o); END $$; \
             SELECT syncular.set_reaction_planner('public.plan(jsonb)');",
        )
        .unwrap();
    db
}

/// `syncular.commit` of upserts of `ids` (title `title`) under a fixed
/// client and `commit_id`.
fn deliver(c: &mut postgres::Client, commit_id: &str, ids: &[String], title: &str) -> Value {
    let ops: Vec<Value> = ids.iter().map(|id| json!({"table": "cards", "op": "upsert", "row": {"id": id, "ws": "w1", "title": title}})).collect();
    c.query_one(
        "SELECT syncular.commit($1, 'alice', $2::text::jsonb, client_id => 'rx-client', client_commit_id => $3, \
                                allowed_scopes => '{\"ws\": [\"*\"]}')",
        &[&PARTITION, &Value::from(ops).to_string(), &commit_id],
    )
    .unwrap()
    .get(0)
}

/// Claims up to `n` rows for `owner`: `(idempotency_key, attempts)`.
fn claim(c: &mut postgres::Client, owner: &str, n: i32, lease_ms: i64) -> Vec<(String, i32)> {
    c.query(
        "SELECT idempotency_key, attempts FROM syncular.claim_reactions($1, $2, ARRAY['card.changed'], $3, $4)",
        &[&PARTITION, &owner, &n, &lease_ms],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

fn complete(c: &mut postgres::Client, key: &str, owner: &str) -> bool {
    c.query_one("SELECT syncular.complete_reaction($1, $2, $3)", &[&PARTITION, &key, &owner]).unwrap().get(0)
}

fn statuses(c: &mut postgres::Client) -> HashMap<String, (String, i32)> {
    c.query("SELECT idempotency_key, status, attempts FROM syncular.sync_reactions WHERE partition = $1", &[&PARTITION])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

#[test]
fn reactions_four_concurrent_workers_never_share_a_live_lease_and_complete_each_reaction_once() {
    let db = with_planner("rxclaim");
    let mut c = db.connect();
    let total = 120;
    for k in 0..total / 4 {
        let ids: Vec<String> = (0..4).map(|i| format!("card-{k}-{i}")).collect();
        assert_eq!(deliver(&mut c, &format!("commit-{k}"), &ids, "t")["status"], "applied");
    }
    assert_eq!(statuses(&mut c).len(), total);
    // key → the worker holding it now; a second holder while the (long) lease holds fails.
    let held: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let start = Arc::new(Barrier::new(4));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (mut conn, start, held) = (db.connect(), Arc::clone(&start), Arc::clone(&held));
            thread::spawn(move || -> Vec<String> {
                let mut done = Vec::new();
                start.wait();
                for round in 0.. {
                    let owner = format!("worker-{w}:{round}");
                    let batch = claim(&mut conn, &owner, 3, 600_000);
                    if batch.is_empty() {
                        break;
                    }
                    for (key, attempts) in &batch {
                        assert_eq!(*attempts, 1, "{key} was leased before");
                        if let Some(other) = held.lock().unwrap().insert(key.clone(), w) {
                            panic!("{key} held by worker {other} and worker {w} at once");
                        }
                    }
                    for (key, _) in batch {
                        held.lock().unwrap().remove(&key);
                        assert!(complete(&mut conn, &key, &owner), "{key}: the owner completes");
                        done.push(key);
                    }
                }
                done
            })
        })
        .collect();
    let mut completed: Vec<String> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    completed.sort();
    let before = completed.len();
    completed.dedup();
    assert_eq!((before, completed.len()), (total, total), "each reaction completed exactly once");
    assert!(statuses(&mut c).values().all(|(s, a)| s == "completed" && *a == 1));
}

#[test]
fn reactions_a_crashed_workers_lease_expires_and_the_reaction_is_reclaimed() {
    let db = with_planner("rxcrash");
    let mut c = db.connect();
    deliver(&mut c, "one", &["card-1".to_owned()], "t");
    let key = statuses(&mut c).into_keys().next().unwrap();
    {
        let mut crashed = db.connect();
        crashed.batch_execute(&format!("SET syncular.now_ms = '{T0}'")).unwrap();
        assert_eq!(claim(&mut crashed, "crashed:1", 10, 30_000), vec![(key.clone(), 1)]);
        // The connection goes without completing: a crash.
    }
    let mut other = db.connect();
    other.batch_execute(&format!("SET syncular.now_ms = '{}'", T0 + 29_999)).unwrap();
    assert!(claim(&mut other, "other:1", 10, 30_000).is_empty(), "the lease still holds");
    other.batch_execute(&format!("SET syncular.now_ms = '{}'", T0 + 30_000)).unwrap();
    assert_eq!(claim(&mut other, "other:2", 10, 30_000), vec![(key.clone(), 2)], "reclaimed at expiry, attempts + 1");
    let mut late = db.connect();
    late.batch_execute(&format!("SET syncular.now_ms = '{}'", T0 + 30_001)).unwrap();
    assert!(!complete(&mut late, &key, "crashed:1"), "the crashed token cannot acknowledge");
    let renewed: Option<i64> = late
        .query_one("SELECT syncular.extend_reaction_lease($1, $2, 'crashed:1')", &[&PARTITION, &key])
        .unwrap()
        .get(0);
    assert_eq!(renewed, None);
    assert!(complete(&mut other, &key, "other:2"));
    assert_eq!(statuses(&mut c)[&key], ("completed".to_owned(), 2));
}

#[test]
fn reactions_a_reaction_dead_letters_after_its_max_attempts() {
    let db = with_planner("rxdead");
    let mut c = db.connect();
    deliver(&mut c, "one", &["card-1".to_owned()], "2"); // maxAttempts 2
    let key = statuses(&mut c).into_keys().next().unwrap();
    let mut now = T0;
    let mut last = String::new();
    for attempt in 1..=2 {
        c.batch_execute(&format!("SET syncular.now_ms = '{now}'")).unwrap();
        let owner = format!("w:{attempt}");
        assert_eq!(claim(&mut c, &owner, 1, 1000), vec![(key.clone(), attempt)]);
        last = c
            .query_one("SELECT syncular.fail_reaction($1, $2, $3, 'mail.down')", &[&PARTITION, &key, &owner])
            .unwrap()
            .get(0);
        now += 1000;
    }
    assert_eq!(last, "dead-letter");
    c.batch_execute(&format!("SET syncular.now_ms = '{}'", now + 86_400_000)).unwrap();
    assert!(claim(&mut c, "w:3", 1, 1000).is_empty());
    let listed: i64 = c.query_one("SELECT count(*) FROM syncular.list_reactions($1, 'dead-letter')", &[&PARTITION]).unwrap().get(0);
    assert_eq!(listed, 1);
}

#[test]
fn reactions_overlapping_deliveries_of_one_commit_enqueue_once() {
    let db = with_planner("rxonce");
    let commits = 20;
    let start = Arc::new(Barrier::new(4));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (mut c, start) = (db.connect(), Arc::clone(&start));
            thread::spawn(move || -> Vec<String> {
                start.wait();
                (0..commits)
                    .map(|k| deliver(&mut c, &format!("commit-{k}"), &[format!("card-{k}")], "t")["status"].as_str().unwrap().to_owned())
                    .collect()
            })
        })
        .collect();
    let statuses_by_worker: Vec<Vec<String>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    for k in 0..commits {
        assert_eq!(statuses_by_worker.iter().filter(|s| s[k] == "applied").count(), 1, "commit {k}");
    }
    let mut c = db.connect();
    let calls: i64 = c.query_one("SELECT last_value FROM public.planner_calls", &[]).unwrap().get(0);
    assert_eq!(calls, commits as i64, "one planner call per commit");
    let rows = statuses(&mut c);
    assert_eq!(rows.len(), commits);
    let seqs: i64 = c
        .query_one(
            "SELECT count(*) FROM syncular.sync_reactions r JOIN syncular.sync_commits m \
               ON m.partition = r.partition AND m.commit_seq = r.source_commit_seq \
              AND m.client_commit_id = r.source_client_commit_id WHERE r.partition = $1",
            &[&PARTITION],
        )
        .unwrap()
        .get(0);
    assert_eq!(seqs, commits as i64, "every reaction points at its source commit");
}

#[test]
fn reactions_a_commit_that_enqueued_signals_workers_at_commit() {
    let db = with_planner("rxnotify");
    let mut listener = db.connect();
    listener.batch_execute("LISTEN syncular_reaction").unwrap();
    let mut c = db.connect();
    let mut tx = c.transaction().unwrap();
    for k in 0..3 {
        let ops = json!([{"table": "cards", "op": "upsert", "row": {"id": format!("card-{k}"), "ws": "w1", "title": "t"}}]);
        tx.execute(
            "SELECT syncular.commit($1, 'alice', $2::text::jsonb, allowed_scopes => '{\"ws\": [\"*\"]}')",
            &[&PARTITION, &ops.to_string()],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    let mut notes = listener.notifications();
    let first = notes.timeout_iter(Duration::from_secs(10)).next().unwrap().expect("a signal after COMMIT");
    let mut seen = vec![(first.channel().to_owned(), first.payload().to_owned())];
    // Anything queued with it arrives with it: a short drain catches extras.
    while let Some(n) = notes.timeout_iter(Duration::from_millis(300)).next().unwrap() {
        seen.push((n.channel().to_owned(), n.payload().to_owned()));
    }
    assert_eq!(seen, vec![("syncular_reaction".to_owned(), PARTITION.to_owned())], "one signal per transaction");
}
