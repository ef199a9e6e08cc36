//! Epoch rotation seen by a running gateway (SPEC §2.1 backup-restore rule, §8 realtime), with
//! real `syncular-client` 0.15.48 peers over the gateway's HTTP and WebSocket transport.
//!
//! - a rotation reaches open realtime sessions without any new commit (`reset-required` wake),
//!   no delta is served to a session still on the old epoch, and deltas resume after the
//!   client's recovery round;
//! - after a (simulated, per-partition) restore to an earlier point plus a rotation, a gateway
//!   that kept running delivers every commit of the new timeline.
//!
//! Rotation with SQL-transport clients: `lifecycle_rotation.rs`. Helpers:
//! `syncular_integration_tests::lifecycle` and `::gateway`. Every test uses its own partitions.

use std::time::{Duration, Instant};

use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{partition_name, server_tasks};
use syncular_integration_tests::gateway::{grant, setup, stored_cursor, wait_until, Gateway, Peer};
use syncular_integration_tests::lifecycle::{
    backup_partition, max_commit_seq, restore_partition, rotate,
};

// ---------------------------------------------------------------------------------------------
// 1. rotation fences realtime sessions (gateway)

#[test]
fn lifecycle_rotation_wakes_open_realtime_sessions_with_reset_required_without_a_commit() {
    let mut op = connect();
    setup(&mut op);
    let partition = partition_name("rot-gw");
    for actor in ["alice", "bob", "carol"] {
        grant(&mut op, &partition, actor, &["p1"]);
    }
    let gw = Gateway::start(&[]);

    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "rot-alice");
    alice.subscribe("tasks", &["p1"]);
    alice.write_task("r1", "p1", "before the rotation");
    alice.sync_idle(6).expect("alice pushes r1");
    let mut bob = Peer::connected(&gw, &partition, "bob", "rot-bob", &["p1"]);
    let mut carol = Peer::connected(&gw, &partition, "carol", "rot-carol", &["p1"]);
    assert!(bob.holds("r1") && carol.holds("r1"));
    assert_eq!(bob.hello().unwrap()["requiresSync"], false);
    // The sessions are live: a commit reaches them as a delta.
    alice.write_task("r1b", "p1", "live");
    alice.sync_idle(6).unwrap();
    bob.pump_until("bob's delta r1b", |p| p.holds("r1b"));
    carol.pump_until("carol's delta r1b", |p| p.holds("r1b"));
    wait_until("bob's ack persisted", || {
        stored_cursor(&mut op, &partition, "rot-bob") == Some(2)
    });
    assert!(bob.wakes().is_empty() && carol.wakes().is_empty());

    let seq = max_commit_seq(&mut op, &partition);
    let rotated_at = Instant::now();
    let r = rotate(&mut op, &partition);
    assert_eq!(
        r.clients_deleted, 3,
        "alice, bob and carol had client records"
    );

    // Without any new commit, both sessions are woken with reset-required.
    bob.pump_until("bob's reset-required wake", |p| {
        p.wakes().iter().any(|w| w == "reset-required")
    });
    carol.pump_until("carol's reset-required wake", |p| {
        p.wakes().iter().any(|w| w == "reset-required")
    });
    let latency = rotated_at.elapsed();
    assert_eq!(
        max_commit_seq(&mut op, &partition),
        seq,
        "no commit was made"
    );
    assert!(
        bob.client.sync_needed(),
        "a wake-up raises the sync-needed signal"
    );
    assert!(gw.metric("syncular_gateway_wakes_total{reason=\"reset-required\"") >= 2.0);
    eprintln!("rotation → reset-required wake in {latency:?}");

    // Bob recovers over the socket: reset, re-bootstrap, same rows.
    let report = bob.sync_idle(8).expect("bob's recovery rounds");
    assert_eq!(report.resets, ["tasks"], "{report:?}");
    assert_eq!(bob.task_ids(), ["r1", "r1b"]);
    let bob_cursor = bob.client.subscription_state("tasks").unwrap().cursor;
    assert_eq!(bob_cursor, seq);
    wait_until("bob's post-round ack under the new epoch", || {
        stored_cursor(&mut op, &partition, "rot-bob") == Some(seq)
    });

    // Alice (HTTP) resets and writes in the new continuity; bob gets it as a delta again,
    // carol (still on the old epoch locally, never synced) gets no delta of it.
    let report = alice.sync_idle(6).expect("alice resets");
    assert_eq!(report.resets, ["tasks"], "{report:?}");
    alice.write_task("r2", "p1", "after the rotation");
    alice.sync_idle(6).unwrap();
    bob.pump_until("bob's delta r2", |p| p.holds("r2"));
    assert_eq!(bob.deltas_containing("r2"), 1, "{:?}", bob.events());
    std::thread::sleep(Duration::from_millis(500));
    carol.pump();
    assert_eq!(
        carol.deltas_containing("r2"),
        0,
        "no delta for a session that has not recovered: {:?}",
        carol.events()
    );
    assert!(!carol.holds("r2"));
    let report = carol.sync_idle(8).expect("carol recovers");
    assert_eq!(report.resets, ["tasks"], "{report:?}");
    assert_eq!(carol.task_ids(), ["r1", "r1b", "r2"]);
    assert_eq!(bob.task_ids(), carol.task_ids());
}

// ---------------------------------------------------------------------------------------------
// 2. rotation after a restore, with a gateway that kept running

/// Regression test (failed before a0fadbd, gateway): on the `reset-required` reload the
/// session's delivered cursor became `max(delivered, known_max)` = 6, the pre-restore timeline's
/// position, so the new timeline's commits 4..6 fell in a window the gateway believed delivered:
/// no delta, no wake, and the first delta after them (commit 7) moved the client's cursor past
/// them — silent loss. The gateway now restarts a partition's timeline on a new `logEpoch`
/// (crates/gateway/src/realtime/hub.rs `Hub::refresh`, deltas.rs `Partition::restart_timeline`).
///
/// §2.1 backup-restore rule with a gateway that keeps running: the storage of a partition is
/// restored to an earlier point (its log goes back from commit 6 to commit 3), the operator
/// rotates the epoch; the connected client is woken `reset-required`, recovers, and then must
/// receive every later commit of the new timeline — the gateway must not keep the pre-restore
/// timeline's cursors (commits 4..6 of the new timeline are not the ones it delivered before).
#[test]
fn lifecycle_rotation_after_a_restore_fences_a_running_gateway_and_no_commit_is_lost() {
    let mut op = connect();
    setup(&mut op);
    let partition = partition_name("rot-restore");
    for actor in ["alice", "bob"] {
        grant(&mut op, &partition, actor, &["p1"]);
    }
    let gw = Gateway::start(&[]);
    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "rr-alice");
    alice.subscribe("tasks", &["p1"]);
    for i in 1..=3 {
        alice.write_task(&format!("a{i}"), "p1", "before the backup");
        alice.sync_idle(6).unwrap();
    }
    let mut bob = Peer::connected(&gw, &partition, "bob", "rr-bob", &["p1"]);
    assert_eq!(bob.task_ids(), ["a1", "a2", "a3"]);
    backup_partition(&mut op, &partition);

    // After the backup: three more commits, delivered to bob as deltas.
    for i in 4..=6 {
        alice.write_task(
            &format!("a{i}"),
            "p1",
            "after the backup (lost by the restore)",
        );
        alice.sync_idle(6).unwrap();
    }
    bob.pump_until("bob holds a6", |p| p.holds("a6"));
    assert_eq!(max_commit_seq(&mut op, &partition), 6);

    // Restore to the backup, then rotate (the gateway keeps running).
    restore_partition(&mut op, &partition);
    assert_eq!(
        max_commit_seq(&mut op, &partition),
        3,
        "the restored log ends at commit 3"
    );
    assert_eq!(server_tasks(&mut op, &partition).unwrap().len(), 3);
    let r = rotate(&mut op, &partition);
    assert!(r.clients_deleted >= 1);
    bob.pump_until("bob's reset-required wake", |p| {
        p.wakes().iter().any(|w| w == "reset-required")
    });
    let report = bob.sync_idle(8).expect("bob recovers");
    assert_eq!(report.resets, ["tasks"], "{report:?}");
    assert_eq!(
        bob.task_ids(),
        ["a1", "a2", "a3"],
        "bob holds the restored timeline"
    );
    let report = alice.sync_idle(6).expect("alice recovers");
    assert_eq!(report.resets, ["tasks"], "{report:?}");

    // The new timeline: commits 4, 5, 6, 7 are new rows. Bob must get every one of them — as a
    // delta or, if the gateway cannot bridge, through a wake-up and a pull.
    for i in 1..=4 {
        alice.write_task(&format!("n{i}"), "p1", "the new timeline");
        alice.sync_idle(6).unwrap();
    }
    assert_eq!(max_commit_seq(&mut op, &partition), 7);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        bob.pump();
        if bob.client.sync_needed() {
            bob.sync_idle(6).expect("bob pulls after a wake-up");
        }
        if bob.task_ids().len() == 7 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let server: Vec<String> = server_tasks(&mut op, &partition)
        .unwrap()
        .into_iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(
        bob.task_ids(),
        server,
        "bob must hold every row of the new timeline (cursor {:?}); socket events: {:?}",
        bob.client.subscription_state("tasks").map(|s| s.cursor),
        bob.events()
    );
}
