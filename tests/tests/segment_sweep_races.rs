//! `syncular.segment_sweep` racing publishers (docs/src/sql/segments.md "Segment expiry and garbage collection"),
//! two connections, no timing: waits are on `pg_stat_activity` lock waits.
//!
//! The publisher side is simulated with the statements of the publication protocol
//! (`src/store/segments/sweep.rs`): a publisher reusing stored bytes locks their
//! `sync_segments` row `FOR KEY SHARE` before relying on them, and stores them again when the
//! row is gone; a publisher refreshing a publication updates its row.
//! - publisher first: the sweep skips the bytes (never waits for them), and after the
//!   publisher's commit they are published and kept;
//! - sweep first: the publisher's lock waits for the sweep, then finds the bytes gone (0 rows)
//!   and stores them again — no publication ever names missing bytes;
//! - a refresh of an expired publication racing its deletion: the sweep waits, re-checks and
//!   keeps it (and its bytes).
//!
//! Needs `SYNCULAR_TEST_DSN`.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use postgres::Client;
use syncular_integration_tests::blob_fixture::{Db, PARTITION};
use syncular_integration_tests::gateway::wait_until;
use syncular_integration_tests::segment_fixture::{live_epoch, now_ms, publish, store};

const LOCK_BYTES: &str = "SELECT 1 FROM syncular.sync_segments WHERE partition = $1 AND segment_id = $2 FOR KEY SHARE";

fn sweep(c: &mut impl postgres::GenericClient) -> (i64, i64) {
    let v: serde_json::Value = c.query_one("SELECT syncular.segment_sweep(1000, 0)", &[]).unwrap().get(0);
    (v["publications"].as_i64().unwrap(), v["segments"].as_i64().unwrap())
}

fn stored(c: &mut Client, id: &str) -> (i64, i64, i64) {
    let r = c
        .query_one(
            "SELECT (SELECT count(*) FROM syncular.sync_segments WHERE segment_id = $1), \
                    (SELECT count(*) FROM syncular.sync_segment_chunks WHERE segment_id = $1), \
                    (SELECT count(*) FROM syncular.sync_segment_publications WHERE segment_id = $1)",
            &[&id],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

fn wait_for_lock(db: &Db, pid: i32, what: &str) {
    let mut watcher = db.connect();
    wait_until(what, || {
        watcher
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", &[&pid])
            .unwrap()
            .get::<_, i64>(0)
            == 1
    });
}

#[test]
fn segment_sweep_a_publisher_reusing_bytes_never_loses_them_to_the_sweep() {
    let db = Db::new("segsweep");
    let mut a = db.connect();
    let mut b = db.connect();
    let epoch = live_epoch(&mut a, PARTITION);
    let old = now_ms() - 10_000;

    // Publisher first: it holds the bytes; the sweep skips them without waiting.
    let id = store(&mut a, PARTITION, b"reused bytes one", old);
    let mut tx = a.transaction().unwrap();
    assert_eq!(tx.query(LOCK_BYTES, &[&PARTITION, &id]).unwrap().len(), 1);
    publish(&mut tx, PARTITION, &epoch, "d", 1, &id, now_ms() + 3_600_000);
    assert_eq!(sweep(&mut b), (0, 0), "bytes a pending publisher holds are skipped, not waited for");
    tx.commit().unwrap();
    assert_eq!(sweep(&mut b), (0, 0), "published bytes are never swept");
    assert_eq!(stored(&mut b, &id), (1, 1, 1));

    // Sweep first: it deleted the bytes (not yet committed); the publisher waits, then finds them
    // gone and stores them again.
    let id2 = store(&mut a, PARTITION, b"reused bytes two", old);
    let mut sweeping = b.transaction().unwrap();
    assert_eq!(sweep(&mut sweeping), (0, 1));
    let pid: i32 = a.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let (done_tx, done) = mpsc::channel();
    let (epoch2, id2b) = (epoch.clone(), id2.clone());
    let publisher = thread::spawn(move || {
        let mut tx = a.transaction().unwrap();
        let present = tx.query(LOCK_BYTES, &[&PARTITION, &id2b]).unwrap().len();
        done_tx.send(()).unwrap();
        if present == 0 {
            store(&mut tx, PARTITION, b"reused bytes two", now_ms());
        }
        publish(&mut tx, PARTITION, &epoch2, "d", 2, &id2b, now_ms() + 3_600_000);
        tx.commit().unwrap();
        present
    });
    wait_for_lock(&db, pid, "the publisher waits for the sweep's lock");
    assert!(done.recv_timeout(Duration::from_millis(0)).is_err(), "the publisher must wait");
    sweeping.commit().unwrap();
    assert_eq!(publisher.join().unwrap(), 0, "after the sweep, the bytes are gone: the publisher stores them again");
    assert_eq!(stored(&mut b, &id2), (1, 1, 1), "published, with its bytes");
}

#[test]
fn segment_sweep_refreshing_an_expired_publication_wins_over_its_deletion() {
    let db = Db::new("segrefresh");
    let mut a = db.connect();
    let mut b = db.connect();
    let epoch = live_epoch(&mut a, PARTITION);
    let id = store(&mut a, PARTITION, b"refreshed bytes", now_ms() - 10_000);
    publish(&mut a, PARTITION, &epoch, "d", 1, &id, now_ms() - 5_000);
    // The publisher refreshes the expired publication (row locked until it commits) …
    let mut tx = a.transaction().unwrap();
    tx.execute("UPDATE syncular.sync_segment_publications SET expires_at_ms = $2 WHERE segment_id = $1", &[&id, &(now_ms() + 3_600_000)])
        .unwrap();
    // … while the sweep, which listed it as expired, tries to delete it: it waits, re-checks, keeps it.
    let pid: i32 = b.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let sweeper = thread::spawn(move || sweep(&mut b));
    wait_for_lock(&db, pid, "the sweep waits for the refreshing publisher");
    tx.commit().unwrap();
    assert_eq!(sweeper.join().unwrap(), (0, 0));
    assert_eq!(stored(&mut a, &id), (1, 1, 1));
}
