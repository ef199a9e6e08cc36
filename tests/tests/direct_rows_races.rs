//! Races and isolation levels against the push path's direct rows (the log
//! rows inserted without a statement, the tombstone / row-scope probes, the
//! request context read by primary-key probes): what the old one-statement
//! path guaranteed across backends must still hold.
//!
//! - a duplicate delivery waiting on the first one's idempotency lock
//!   replays it (READ COMMITTED: the outcome probe runs under a snapshot
//!   taken after the lock);
//! - an outcome committed by another backend before a READ COMMITTED
//!   transaction's push is seen even though the transaction started earlier;
//! - under REPEATABLE READ a duplicate delivery committed after the snapshot
//!   fails the request (never a second application), and its retry replays;
//! - a push rolled back to a savepoint in the caller's transaction leaves
//!   nothing, and the same commit then applies as new;
//! - REPEATABLE READ / SERIALIZABLE transactions see their own direct rows
//!   (replay cached, delete then re-insert clears the tombstone);
//! - many concurrent pushers keep the log dense and consistent.

use std::thread;
use std::time::{Duration, Instant};

use ssp2::model::PushStatus;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema};
use syncular_integration_tests::wire::{commit, delete, upsert, PushOutcome, RawSession, Task};

fn session(partition: &str, client_id: &str, epoch: Option<&str>) -> RawSession {
    let mut s = RawSession::new(connect(), partition, "alice", client_id, Some(allow_projects(&["p1"])));
    s.log_epoch = epoch.map(str::to_owned);
    s
}

/// A session with the partition's epoch acquired.
fn first_session(label: &str, client_id: &str) -> (RawSession, String, postgres::Client) {
    let mut admin = connect();
    register_schema(&mut admin).unwrap();
    let partition = partition_name(label);
    let mut s = session(&partition, client_id, None);
    let epoch = s.acquire_epoch().unwrap();
    s.log_epoch = Some(epoch);
    (s, partition, admin)
}

fn one(admin: &mut postgres::Client, sql: &str, partition: &str) -> i64 {
    admin.query_one(sql, &[&partition]).unwrap().get(0)
}

/// Waits until a backend running `syncular.sync` waits for a lock of `kind`.
fn wait_for_lock(admin: &mut postgres::Client, kind: &str) {
    let began = Instant::now();
    loop {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity \
                  WHERE wait_event_type = 'Lock' AND wait_event = $1 AND query LIKE '%syncular.sync%'",
                &[&kind],
            )
            .unwrap()
            .get(0);
        if waiting >= 1 {
            return;
        }
        assert!(began.elapsed() < Duration::from_secs(20), "no backend ever waited for a {kind} lock");
        thread::sleep(Duration::from_millis(20));
    }
}

fn statuses(o: &[PushOutcome]) -> Vec<PushStatus> {
    o.iter().map(|x| x.status).collect()
}

fn sqlstate(e: &postgres::Error) -> String {
    e.code().map(|c| c.code().to_owned()).unwrap_or_default()
}

/// The first delivery holds its idempotency lock in an open transaction; the
/// duplicate (same client, same commits) waits for it, then replays: the
/// applied commit `cached` with the same `commitSeq`, the rejection
/// identical; one commit and two outcomes stored.
#[test]
fn direct_rows_a_duplicate_delivery_waiting_for_the_first_replays_it() {
    let (mut a, partition, mut admin) = first_session("dr-dup", "dup");
    let mut b = session(&partition, "dup", a.log_epoch.as_deref());
    let commits = || {
        vec![
            commit("k1", vec![upsert(&Task::new("r", "p1", "first"), None)]),
            commit("k2", vec![upsert(&Task::new("q", "p9", "forbidden"), None)]),
        ]
    };
    a.conn.batch_execute("BEGIN").unwrap();
    let first = a.push(commits()).unwrap();
    assert_eq!(statuses(&first), vec![PushStatus::Applied, PushStatus::Rejected]);
    let second = thread::spawn(move || {
        let r = b.push(commits());
        (b, r)
    });
    wait_for_lock(&mut admin, "advisory");
    a.conn.batch_execute("COMMIT").unwrap();
    let (_b, second) = second.join().unwrap();
    let second = second.expect("the duplicate delivery succeeds");
    assert_eq!(statuses(&second), vec![PushStatus::Cached, PushStatus::Rejected], "{second:?}");
    assert_eq!(second[0].commit_seq, first[0].commit_seq);
    assert_eq!(second[1], first[1]);
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &partition), 1);
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_push_results WHERE partition = $1", &partition), 2);
    assert_eq!(one(&mut admin, "SELECT _sync_version FROM public.tasks WHERE _sync_partition = $1 AND id = 'r'", &partition), 1);
}

/// READ COMMITTED: a transaction open since before another backend stored
/// the outcome replays it (each probe takes a fresh statement snapshot).
#[test]
fn direct_rows_an_outcome_committed_meanwhile_is_replayed_under_read_committed() {
    let (mut a, partition, mut admin) = first_session("dr-rc", "rc");
    let mut b = session(&partition, "rc", a.log_epoch.as_deref());
    b.conn.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED; SELECT 1").unwrap();
    let first = a.push(vec![commit("k1", vec![upsert(&Task::new("r", "p1", "first"), None)])]).unwrap();
    assert_eq!(first[0].status, PushStatus::Applied);
    let again = b.push(vec![commit("k1", vec![upsert(&Task::new("r", "p1", "first"), None)])]).unwrap();
    assert_eq!((again[0].status, again[0].commit_seq), (PushStatus::Cached, first[0].commit_seq));
    b.conn.batch_execute("COMMIT").unwrap();
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &partition), 1);
}

/// REPEATABLE READ, snapshot taken before the first delivery committed: the
/// duplicate cannot see the stored outcome, so the request must fail (23505
/// on the outcome key or 40001 on the row) and store nothing; after the
/// rollback the retry replays. Never a second application.
#[test]
fn direct_rows_under_repeatable_read_a_duplicate_delivery_fails_and_its_retry_replays() {
    let (mut a, partition, mut admin) = first_session("dr-rr", "rr");
    let mut b = session(&partition, "rr", a.log_epoch.as_deref());
    for (id, task) in [("k-rej", Task::new("q", "p9", "forbidden")), ("k-app", Task::new("r", "p1", "applied"))] {
        b.conn.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
        let first = a.push(vec![commit(id, vec![upsert(&task, None)])]).unwrap();
        let bytes = b.encode(vec![commit(id, vec![upsert(&task, None)])]);
        let err = b.send_bytes(&bytes).expect_err("the stale duplicate must fail");
        let state = sqlstate(&err);
        assert!(state == "23505" || state == "40001", "{id}: {state} {err}");
        b.conn.batch_execute("ROLLBACK").unwrap();
        let retry = b.push(vec![commit(id, vec![upsert(&task, None)])]).unwrap();
        let expected = if first[0].status == PushStatus::Applied { PushStatus::Cached } else { PushStatus::Rejected };
        assert_eq!((retry[0].status, retry[0].commit_seq), (expected, first[0].commit_seq), "{id}: {retry:?}");
    }
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &partition), 1);
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_push_results WHERE partition = $1", &partition), 2);
    assert_eq!(one(&mut admin, "SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1", &partition), 1);
}

/// `BEGIN; SAVEPOINT a; SELECT syncular.sync(push); ROLLBACK TO a; …`: the
/// rolled-back push leaves nothing (log rows, outcome, counter), the same
/// commit then applies as new with the same `commitSeq`, and its replay in
/// the same transaction is cached.
#[test]
fn direct_rows_a_push_rolled_back_to_a_savepoint_in_the_callers_transaction() {
    let (mut a, partition, mut admin) = first_session("dr-sp", "sp");
    let c = || vec![commit("k1", vec![upsert(&Task::new("r", "p1", "x"), None), delete("gone", None)])];
    a.push(vec![commit("k0", vec![upsert(&Task::new("gone", "p1", "x"), None)])]).unwrap();
    a.conn.batch_execute("BEGIN; SAVEPOINT a").unwrap();
    let first = a.push(c()).unwrap();
    assert_eq!((first[0].status, first[0].commit_seq), (PushStatus::Applied, Some(2)));
    a.conn.batch_execute("ROLLBACK TO SAVEPOINT a").unwrap();
    let again = a.push(c()).unwrap();
    assert_eq!((again[0].status, again[0].commit_seq), (PushStatus::Applied, Some(2)), "applied as new: {again:?}");
    let replay = a.push(c()).unwrap();
    assert_eq!((replay[0].status, replay[0].commit_seq), (PushStatus::Cached, Some(2)));
    a.conn.batch_execute("COMMIT").unwrap();
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &partition), 2);
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_changes WHERE partition = $1", &partition), 3);
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_push_results WHERE partition = $1", &partition), 2);
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_tombstones WHERE partition = $1", &partition), 1);
    assert_eq!(one(&mut admin, "SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = $1", &partition), 1);
}

/// REPEATABLE READ and SERIALIZABLE: inside one transaction a push, its
/// replay (cached: the outcome probe sees the transaction's own rows), a
/// delete and a re-insert in later requests (the tombstone probe sees the
/// tombstone this transaction wrote and clears it), all committed.
#[test]
fn direct_rows_snapshot_isolation_sees_its_own_direct_rows() {
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        let (mut a, partition, mut admin) = first_session("dr-iso", "iso");
        a.conn.batch_execute(&format!("BEGIN ISOLATION LEVEL {level}")).unwrap();
        let ins = |id: &str, title: &str| vec![commit(id, vec![upsert(&Task::new("r", "p1", title), None)])];
        let first = a.push(ins("k1", "one")).unwrap();
        assert_eq!((first[0].status, first[0].commit_seq), (PushStatus::Applied, Some(1)), "{level}");
        let replay = a.push(ins("k1", "one")).unwrap();
        assert_eq!((replay[0].status, replay[0].commit_seq), (PushStatus::Cached, Some(1)), "{level}");
        let del = a.push(vec![commit("k2", vec![delete("r", None)])]).unwrap();
        assert_eq!(del[0].status, PushStatus::Applied, "{level}: {del:?}");
        let back = a.push(ins("k3", "back")).unwrap();
        assert_eq!((back[0].status, back[0].commit_seq), (PushStatus::Applied, Some(3)), "{level}: {back:?}");
        a.conn.batch_execute("COMMIT").unwrap();
        let shape = admin
            .query_one(
                "SELECT (SELECT count(*) FROM syncular.sync_tombstones WHERE partition = $1), \
                        (SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = $1 AND row_id = 'r'), \
                        (SELECT count(*) FROM syncular.sync_commits WHERE partition = $1), \
                        (SELECT title FROM public.tasks WHERE _sync_partition = $1 AND id = 'r')",
                &[&partition],
            )
            .unwrap();
        assert_eq!(
            (shape.get::<_, i64>(0), shape.get::<_, i64>(1), shape.get::<_, i64>(2), shape.get::<_, String>(3)),
            (0, 1, 3, "back".to_owned()),
            "{level}"
        );
    }
}

/// Eight pushers, each its own client, insert, update and delete rows of a
/// shared partition concurrently (deadlocks / serialization never expected
/// under READ COMMITTED: each row belongs to one pusher). The log stays
/// dense (`commitSeq` 1..N, one header and one outcome per commit), and the
/// tombstones, row-scope entries and app rows agree.
#[test]
fn direct_rows_concurrent_pushers_keep_the_log_dense_and_consistent() {
    const PUSHERS: usize = 8;
    const ROUNDS: usize = 15;
    let (_, partition, mut admin) = first_session("dr-many", "seed");
    let epoch: String = admin
        .query_one("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&partition])
        .unwrap()
        .get(0);
    let handles: Vec<_> = (0..PUSHERS)
        .map(|p| {
            let partition = partition.clone();
            let epoch = epoch.clone();
            thread::spawn(move || {
                let mut s = session(&partition, &format!("pusher-{p}"), Some(&epoch));
                for i in 0..ROUNDS {
                    let row = format!("r{p}-{}", i % 3);
                    let op = if i % 4 == 3 { delete(&row, None) } else { upsert(&Task::new(row.clone(), "p1", format!("v{i}")), None) };
                    let out = s.push(vec![commit(format!("{p}-{i}"), vec![op])]).unwrap_or_else(|e| panic!("pusher {p} round {i}: {e}"));
                    assert_eq!(out.len(), 1);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a pusher panicked");
    }
    let row = admin
        .query_one(
            "SELECT (SELECT count(*) FROM syncular.sync_commits WHERE partition = $1), \
                    (SELECT count(DISTINCT commit_seq) FROM syncular.sync_commits WHERE partition = $1), \
                    (SELECT coalesce(max(commit_seq), 0) FROM syncular.sync_commits WHERE partition = $1), \
                    (SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1), \
                    (SELECT count(*) FROM syncular.sync_commits c WHERE partition = $1 AND NOT EXISTS ( \
                        SELECT 1 FROM syncular.sync_push_results p WHERE p.partition = c.partition AND p.client_id = c.client_id \
                          AND p.client_commit_id = c.client_commit_id AND (p.result->>'commitSeq')::bigint = c.commit_seq)), \
                    (SELECT count(*) FROM syncular.sync_tombstones t JOIN public.tasks a \
                        ON a._sync_partition = t.partition AND a._sync_row_id = t.row_id WHERE t.partition = $1), \
                    (SELECT count(*) FROM public.tasks a WHERE a._sync_partition = $1 AND NOT EXISTS ( \
                        SELECT 1 FROM syncular.sync_row_scopes s WHERE s.partition = a._sync_partition AND s.row_id = a._sync_row_id)), \
                    (SELECT count(*) FROM syncular.sync_row_scopes s WHERE s.partition = $1 AND NOT EXISTS ( \
                        SELECT 1 FROM public.tasks a WHERE a._sync_partition = s.partition AND a._sync_row_id = s.row_id))",
            &[&partition],
        )
        .unwrap();
    let got: Vec<i64> = (0..8).map(|i| row.get::<_, i64>(i)).collect();
    let n = (PUSHERS * ROUNDS) as i64;
    // Deletes of rows that were never inserted are still commits (op results), so every push is a commit.
    assert_eq!(got[0], got[1], "commitSeqs are unique: {got:?}");
    assert_eq!((got[1], got[2], got[3]), (got[0], got[0], got[0]), "dense 1..N: {got:?}");
    assert!(got[0] > 0 && got[0] <= n, "{got:?}");
    assert_eq!(&got[4..], &[0, 0, 0, 0], "outcomes, tombstones and row-scope entries agree with the log and the rows: {got:?}");
}

/// One backend pushes (the direct path keeps its relations' Oids), then
/// `DROP EXTENSION` / `CREATE EXTENSION` replace every `sync_*` table: the
/// same backend's next pushes and context reads must use the new tables —
/// never an Oid of a dropped one — and write a fresh log there.
#[test]
fn direct_rows_a_reinstalled_extension_is_written_by_the_same_backend() {
    let base = syncular_integration_tests::dsn();
    let mut admin = syncular_integration_tests::connect_to(&base);
    let db = format!("syncular_direct_rows_{}", std::process::id());
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let mut conn = syncular_integration_tests::connect_to(&syncular_integration_tests::dsn_for_db(&base, &db));
    conn.batch_execute("CREATE EXTENSION syncular").unwrap();
    register_schema(&mut conn).unwrap();
    let mut s = RawSession::new(conn, "p-reinstall", "alice", "re", Some(allow_projects(&["p1"])));
    s.acquire_epoch().unwrap();
    let first = s.push(vec![commit("k1", vec![upsert(&Task::new("r1", "p1", "before"), None)])]).unwrap();
    assert_eq!((first[0].status, first[0].commit_seq), (PushStatus::Applied, Some(1)));
    let old_oid: u32 = s.conn.query_one("SELECT 'syncular.sync_commits'::regclass::oid", &[]).unwrap().get(0);

    s.conn.batch_execute("DROP EXTENSION syncular; CREATE EXTENSION syncular").unwrap();
    register_schema(&mut s.conn).unwrap();
    let new_oid: u32 = s.conn.query_one("SELECT 'syncular.sync_commits'::regclass::oid", &[]).unwrap().get(0);
    assert_ne!(old_oid, new_oid);
    s.acquire_epoch().expect("the new registry hands out a new epoch");
    let second = s.push(vec![commit("k2", vec![upsert(&Task::new("r2", "p1", "after"), None)])]).unwrap();
    assert_eq!((second[0].status, second[0].commit_seq), (PushStatus::Applied, Some(1)), "{second:?}");
    let replay = s.push(vec![commit("k2", vec![upsert(&Task::new("r2", "p1", "after"), None)])]).unwrap();
    assert_eq!((replay[0].status, replay[0].commit_seq), (PushStatus::Cached, Some(1)), "{replay:?}");
    let log = s
        .conn
        .query_one(
            "SELECT (SELECT string_agg(client_commit_id, ',') FROM syncular.sync_commits), \
                    (SELECT count(*) FROM syncular.sync_changes), \
                    (SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = 'r2'), \
                    (SELECT count(*) FROM syncular.sync_push_results)",
            &[],
        )
        .unwrap();
    assert_eq!(
        (log.get::<_, String>(0), log.get::<_, i64>(1), log.get::<_, i64>(2), log.get::<_, i64>(3)),
        ("k2".to_owned(), 1, 1, 1)
    );
    drop(s);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).unwrap();
}
