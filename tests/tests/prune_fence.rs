//! The pruning fence (docs/src/sql/lifecycle.md): a transaction that
//! pulled holds its partition's fence until it ends, so a pruning batch
//! deletes nothing under it (it reports `fence_busy` after waiting 200 ms)
//! and deletes as soon as the reader is gone; a push-only transaction holds
//! no fence, so pruning runs beside it.

use std::time::Instant;

use syncular_integration_tests::capture::sql_writer;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema};
use syncular_integration_tests::wire::{commit, pull_header, subscription, upsert, RawSession, Task};

fn prune_batch(conn: &mut postgres::Client, p: &str) -> (i64, bool, bool) {
    let row = conn
        .query_one("SELECT commits, fence_busy, done FROM syncular.prune_batch($1, 10000)", &[&p])
        .expect("prune_batch");
    (row.get(0), row.get(1), row.get(2))
}

#[test]
fn a_reading_transaction_holds_pruning_off_and_a_pushing_one_does_not() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let p = partition_name("prune-fence");
    let mut writer = sql_writer(&p, None);
    writer
        .batch_execute(
            "DO $$ BEGIN FOR i IN 1..1100 LOOP \
               INSERT INTO public.tasks (id, project_id, title, done) VALUES ('t' || i, 'p1', 'x', false); \
             END LOOP; END $$",
        )
        .expect("1,100 plain SQL commits");
    let horizon: i64 = admin.query_one("SELECT syncular.advance_horizon($1)", &[&p]).unwrap().get(0);
    assert_eq!(horizon, 100);

    let mut reader = RawSession::new(connect(), &p, "alice", "reader", Some(allow_projects(&["p1"])));
    reader.acquire_epoch().expect("epoch");
    reader.conn.batch_execute("BEGIN").unwrap();
    reader
        .round(vec![pull_header(100, 100, 1, 0b0011), subscription("s", "tasks", &[("project_id", &["p1"])], 1000, None)])
        .expect("an incremental pull");

    let started = Instant::now();
    assert_eq!(prune_batch(&mut admin, &p), (0, true, false), "the open reader holds the fence");
    assert!(started.elapsed().as_millis() >= 200, "the batch waited in the lock queue first");
    let left: i64 = admin
        .query_one("SELECT count(*) FROM syncular.sync_commits WHERE partition = $1 AND commit_seq <= 100", &[&p])
        .unwrap()
        .get(0);
    assert_eq!(left, 100, "nothing was deleted under the reader");
    reader.conn.batch_execute("COMMIT").unwrap();

    // A push-only transaction left open: pruning does not wait for it.
    let mut pusher = RawSession::new(connect(), &p, "alice", "pusher", Some(allow_projects(&["p1"])));
    pusher.acquire_epoch().expect("epoch");
    pusher.conn.batch_execute("BEGIN").unwrap();
    let outcomes = pusher.push(vec![commit("k1", vec![upsert(&Task::new("n1", "p1", "new"), None)])]).unwrap();
    assert_eq!(outcomes.len(), 1);
    assert_eq!(prune_batch(&mut admin, &p), (100, false, false));
    assert_eq!(prune_batch(&mut admin, &p), (0, false, true));
    pusher.conn.batch_execute("COMMIT").unwrap();
    let kept: i64 = admin
        .query_one("SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &[&p])
        .unwrap()
        .get(0);
    assert_eq!(kept, 1001, "the newest 1,000 and the pushed commit");
}
