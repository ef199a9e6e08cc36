//! `CALL syncular.drop_partition` racing the partition's writers (docs/src/sql/lifecycle.md
//! `syncular.drop_partition`; `store::lifecycle::fence`, the write fence).
//!
//! - a push whose transaction is still open when the drop starts: the drop waits for it, and
//!   its rows go with the partition (no app row, log row or counter outlives the drop);
//! - the same for a plain SQL write captured in an open transaction;
//! - a rotation that updated the registry row after the drop's snapshot: the drop still removes
//!   the row (deleted by its key, not by a stale row address) instead of reporting the
//!   partition gone while its registry row stands.
//!
//! Each test checks that the drop was really waiting for the other transaction (a lock wait seen
//! in `pg_stat_activity`), then ends that transaction and counts the partition's rows in every
//! table that holds partition rows.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Client;
use ssp2::model::PushStatus;
use syncular_integration_tests::capture::sql_writer;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name};
use syncular_integration_tests::lifecycle::{admin, partition_tables, registry, rotate};
use syncular_integration_tests::wire::{commit, upsert, RawSession, Task};

/// Starts `CALL syncular.drop_partition(partition)` on a connection of its own; returns its
/// backend pid and the thread (joined: rows deleted, or the error text).
fn drop_in_background(partition: &str) -> (i32, JoinHandle<Result<i64, String>>) {
    let mut conn = connect();
    let pid: i32 = conn.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let p = partition.to_owned();
    let handle = std::thread::spawn(move || {
        conn.query_one("CALL syncular.drop_partition($1)", &[&p])
            .map(|r| r.get::<_, i64>(0))
            .map_err(|e| e.to_string())
    });
    (pid, handle)
}

/// Waits (up to 20 s) until backend `pid` waits for a lock; panics otherwise.
fn wait_for_lock_wait(conn: &mut Client, pid: i32, what: &str) {
    let started = Instant::now();
    loop {
        let waiting: bool = conn
            .query_one(
                "SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .unwrap()
            .get(0);
        if waiting {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the drop never waited for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `(table, rows of the partition)` for every table that holds rows of `partition` and is not empty of it.
fn leftovers(conn: &mut Client, partition: &str) -> Vec<(String, i64)> {
    partition_tables(conn)
        .into_iter()
        .map(|(table, column)| {
            let n: i64 = conn
                .query_one(format!("SELECT count(*) FROM {table} WHERE {column} = $1").as_str(), &[&partition])
                .unwrap()
                .get(0);
            (table, n)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// A pushing session of `partition` with one committed row `t0` (so the partition has rows
/// before the race).
fn pushing_session(partition: &str, client_id: &str) -> RawSession {
    let mut s = RawSession::new(connect(), partition, "alice", client_id, Some(allow_projects(&["p1"])));
    s.acquire_epoch().expect("epoch");
    let first = s.push(vec![commit("c0", vec![upsert(&Task::new("t0", "p1", "before"), None)])]).unwrap();
    assert_eq!(first[0].status, PushStatus::Applied, "{first:?}");
    s
}

#[test]
fn drop_waits_for_a_push_in_flight_and_drops_its_rows_too() {
    let mut op = admin();
    let p = partition_name("drop-race-push");
    let mut pusher = pushing_session(&p, "racer");
    pusher.conn.batch_execute("BEGIN").unwrap();
    let outcomes = pusher.push(vec![commit("c1", vec![upsert(&Task::new("t1", "p1", "in flight"), None)])]).unwrap();
    assert_eq!(outcomes[0].status, PushStatus::Applied, "{outcomes:?}");

    let (pid, dropper) = drop_in_background(&p);
    wait_for_lock_wait(&mut op, pid, "the open push");
    assert!(!dropper.is_finished(), "the drop ran beside an uncommitted push");
    pusher.conn.batch_execute("COMMIT").unwrap();
    let deleted = dropper.join().unwrap().expect("drop_partition");
    assert!(deleted > 0, "the drop deleted the partition's rows");
    assert_eq!(leftovers(&mut op, &p), Vec::<(String, i64)>::new(), "nothing of the partition outlives the drop");
    assert_eq!(registry(&mut op, &p), None);

    // The next request meets an unknown partition: a new timeline, empty.
    let mut after = RawSession::new(connect(), &p, "alice", "after", Some(allow_projects(&["p1"])));
    after.acquire_epoch().expect("a fresh epoch");
    let n: i64 = op.query_one("SELECT count(*) FROM public.tasks WHERE _sync_partition = $1", &[&p]).unwrap().get(0);
    assert_eq!(n, 0);
}

#[test]
fn drop_waits_for_a_plain_sql_write_in_flight_and_drops_it_too() {
    let mut op = admin();
    let p = partition_name("drop-race-sql");
    let _seed = pushing_session(&p, "seed");
    let mut writer = sql_writer(&p, None);
    writer.batch_execute("BEGIN").unwrap();
    writer
        .batch_execute("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('w1', 'p1', 'captured', false)")
        .expect("a captured insert");

    let (pid, dropper) = drop_in_background(&p);
    wait_for_lock_wait(&mut op, pid, "the open captured write");
    assert!(!dropper.is_finished(), "the drop ran beside an uncommitted captured write");
    writer.batch_execute("COMMIT").unwrap();
    dropper.join().unwrap().expect("drop_partition");
    assert_eq!(leftovers(&mut op, &p), Vec::<(String, i64)>::new(), "nothing of the partition outlives the drop");
}

#[test]
fn drop_removes_a_registry_row_updated_after_its_snapshot() {
    let mut op = admin();
    let p = partition_name("drop-race-rotate");
    // Seeded by plain SQL: no client records, so the rotation holds the registry row alone
    // and the drop's first wait is its registry delete, whose snapshot predates the rotation.
    let mut writer = sql_writer(&p, None);
    writer
        .batch_execute("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('r1', 'p1', 'seed', false)")
        .expect("a captured insert");
    let mut rotator = connect();
    rotator.batch_execute("BEGIN").unwrap();
    let rotation = rotate(&mut rotator, &p);
    assert_eq!((rotation.partition.as_str(), rotation.clients_deleted), (p.as_str(), 0));

    // The drop's deletes reach the registry row the rotation holds and wait there, with their
    // snapshot taken before the rotation commits.
    let (pid, dropper) = drop_in_background(&p);
    wait_for_lock_wait(&mut op, pid, "the open rotation");
    rotator.batch_execute("COMMIT").unwrap();
    dropper.join().unwrap().expect("drop_partition");
    assert_eq!(registry(&mut op, &p), None, "the rotated registry row went with the partition");
    assert_eq!(leftovers(&mut op, &p), Vec::<(String, i64)>::new());
}
