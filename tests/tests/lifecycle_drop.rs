//! `CALL syncular.drop_partition` end to end with real parts, driven by an operator connection
//! while real `syncular-client` 0.15.48 instances keep syncing (SQL transport, or the reference
//! gateway over HTTP/WebSocket).
//!
//! - the procedure refuses to run inside a transaction block, otherwise deletes exactly the
//!   partition's rows everywhere (another partition untouched), and both a fresh and an old
//!   client end with zero rows;
//! - with a gateway running, the drop reaches an open realtime session without any new commit
//!   (`reset-required` wake); after the client's recovery every commit of the partition's new
//!   timeline (commitSeq 1, 2, … again, below the old timeline's max) is delivered to the
//!   session as a delta, and the client ends with exactly the server's rows.
//!
//! Helpers: `syncular_integration_tests::lifecycle` and `::gateway`. Every test uses its own
//! partitions and never calls a lifecycle function with a NULL partition (that would touch the
//! partitions of tests running in parallel).

use std::time::Instant;

use syncular_integration_tests::capture::sql_writer;
use syncular_integration_tests::clients::{
    delete_task, held_snapshot, new_client, subscribe_projects, sync_idle, task_values, upsert_task,
};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_projects, fingerprint, partition_name, server_tasks, Coverage,
};
use syncular_integration_tests::gateway::{grant, setup, stored_cursor, wait_until, Gateway, Peer};
use syncular_integration_tests::lifecycle::{
    assert_call_refused_in_transaction,
    admin, db_error, max_commit_seq, registry, server_held,
};
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::{decode_response, resp_header_epoch};

// ---------------------------------------------------------------------------------------------
// 1. CALL syncular.drop_partition

#[test]
fn lifecycle_drop_partition_deletes_exactly_the_partition_and_clients_end_empty() {
    let mut op = admin();
    let doomed = partition_name("drop-doomed");
    let kept = partition_name("drop-kept");
    let allowed = allow_projects(&["p1", "p2"]);

    let mut a = new_client("drop-a").expect("client A");
    subscribe_projects(&mut a, "a-tasks", &["p1", "p2"]).unwrap();
    let mut ta = PgTransport::new(connect(), &doomed, "alice", Some(allowed.clone()));
    for i in 0..6 {
        a.mutate(vec![
            upsert_task(task_values(
                &format!("d{i}"),
                "p1",
                "doomed",
                false,
                Some(i),
            )),
            upsert_task(task_values(
                &format!("e{i}"),
                "p2",
                "doomed too",
                true,
                None,
            )),
        ])
        .unwrap();
    }
    a.mutate(vec![delete_task("d0"), delete_task("e5")])
        .unwrap(); // tombstones
    let report = sync_idle(&mut a, &mut ta, 12).unwrap();
    assert_eq!(report.applied.len(), 7, "{report:?}");
    let mut k = new_client("drop-k").expect("client K");
    subscribe_projects(&mut k, "k-tasks", &["p1"]).unwrap();
    let mut tk = PgTransport::new(connect(), &kept, "kim", Some(allowed.clone()));
    k.mutate(vec![upsert_task(task_values(
        "d0",
        "p1",
        "same id, other partition",
        false,
        None,
    ))])
    .unwrap();
    k.mutate(vec![delete_task("d0")]).unwrap();
    k.mutate(vec![upsert_task(task_values(
        "d1", "p1", "kept", false, None,
    ))])
    .unwrap();
    sync_idle(&mut k, &mut tk, 12).unwrap();

    let kept_before = fingerprint(&mut op, &kept, Coverage::Everything).unwrap();
    let doomed_before = fingerprint(&mut op, &doomed, Coverage::Everything).unwrap();
    let total: i64 = doomed_before.iter().map(|t| t.1).sum();
    let nonempty: Vec<&str> = doomed_before
        .iter()
        .filter(|t| t.1 > 0)
        .map(|t| t.0.as_str())
        .collect();
    for table in [
        "\"public\".\"tasks\"",
        "\"syncular\".\"sync_commits\"",
        "\"syncular\".\"sync_changes\"",
        "\"syncular\".\"sync_change_scopes\"",
        "\"syncular\".\"sync_row_scopes\"",
        "\"syncular\".\"sync_tombstones\"",
        "\"syncular\".\"sync_push_results\"",
        "\"syncular\".\"sync_clients\"",
        "\"syncular\".\"sync_partitions\"",
        "\"syncular\".\"sync_partition_registry\"",
    ] {
        assert!(
            nonempty.contains(&table),
            "the doomed partition has rows in {table}: {doomed_before:?}"
        );
    }

    // Inside a transaction block the procedure cannot COMMIT between batches: refused, nothing gone.
    {
        assert_call_refused_in_transaction(&mut op, "CALL syncular.drop_partition($1, 3)", &[&doomed]);
    }
    assert_eq!(
        fingerprint(&mut op, &doomed, Coverage::Everything).unwrap(),
        doomed_before,
        "nothing deleted"
    );

    // Outside a transaction: every row, in batches of 3, counted exactly.
    let row = op
        .query_one("CALL syncular.drop_partition($1, 3)", &[&doomed])
        .expect("CALL drop_partition");
    let rows_deleted: i64 = row.get("rows_deleted");
    assert_eq!(
        rows_deleted, total,
        "rows_deleted counts every row the partition had"
    );
    let after = fingerprint(&mut op, &doomed, Coverage::Everything).unwrap();
    assert!(
        after.iter().all(|t| t.1 == 0),
        "no row of the partition is left anywhere: {after:?}"
    );
    assert_eq!(
        fingerprint(&mut op, &kept, Coverage::Everything).unwrap(),
        kept_before,
        "the other partition is untouched"
    );
    assert_eq!(
        op.query("SELECT * FROM syncular.partition_stats($1)", &[&doomed])
            .unwrap()
            .len(),
        0,
        "the partition is unknown"
    );
    // Dropping an unknown partition is a no-op.
    let row = op
        .query_one("CALL syncular.drop_partition($1)", &[&doomed])
        .unwrap();
    assert_eq!(row.get::<_, i64>("rows_deleted"), 0);

    // A fresh client bootstraps the (new, empty) partition.
    let mut f = new_client("drop-f").expect("client F");
    subscribe_projects(&mut f, "f-tasks", &["p1", "p2"]).unwrap();
    let mut tf = PgTransport::new(connect(), &doomed, "fred", Some(allowed.clone()));
    sync_idle(&mut f, &mut tf, 12).expect("F bootstraps");
    assert!(
        held_snapshot(&f).unwrap().is_empty(),
        "nothing to bootstrap"
    );
    assert_eq!(f.subscription_state("f-tasks").unwrap().status, "active");
    let (new_epoch, required) = registry(&mut op, &doomed).expect("re-created on first sight");
    assert!(!required);

    // The old client still holds the old epoch and ten rows: it resets and ends empty.
    assert_eq!(held_snapshot(&a).unwrap().len(), 10);
    let first = ta.responses.len();
    let report = sync_idle(&mut a, &mut ta, 12).expect("A recovers");
    assert_eq!(
        resp_header_epoch(&decode_response(&ta.responses[first]).unwrap()),
        (Some(new_epoch), true)
    );
    assert_eq!(report.resets, ["a-tasks"], "{report:?}");
    assert!(
        held_snapshot(&a).unwrap().is_empty(),
        "A's rows were discarded: {:?}",
        held_snapshot(&a).unwrap()
    );
    assert!(server_tasks(&mut op, &doomed).unwrap().is_empty());

    // The partition's log starts again at commitSeq 1; F receives A's next write.
    a.mutate(vec![upsert_task(task_values(
        "n1", "p1", "new life", false, None,
    ))])
    .unwrap();
    let report = sync_idle(&mut a, &mut ta, 12).unwrap();
    assert_eq!(report.applied.len(), 1);
    assert_eq!(
        max_commit_seq(&mut op, &doomed),
        1,
        "a dense log from 1 in the new continuity"
    );
    sync_idle(&mut f, &mut tf, 12).unwrap();
    assert_eq!(held_snapshot(&f).unwrap(), server_held(&mut op, &doomed));
    assert_eq!(held_snapshot(&a).unwrap(), server_held(&mut op, &doomed));
    // The kept partition's client is unaffected.
    let report = sync_idle(&mut k, &mut tk, 12).unwrap();
    assert!(report.resets.is_empty(), "{report:?}");
    assert_eq!(held_snapshot(&k).unwrap(), server_held(&mut op, &kept));
}

// ---------------------------------------------------------------------------------------------
// 2. drop_partition wakes open realtime sessions (gateway)

/// A client with an open realtime session on a partition with four commits; the operator drops
/// the partition. The batch deleting the registry row notifies `syncular_scopes` (every actor):
/// the gateway reloads the session, meets the recreated partition's fresh `logEpoch` and wakes it
/// `reset-required` without any commit. After the client's recovery (reset, empty bootstrap),
/// the new timeline's commits 1..5 — pushes through the gateway (`syncular.sync`) and captured
/// plain-SQL writes — each reach the session as a delta: none of 1..4, below the old timeline's
/// max, is taken for already delivered.
#[test]
fn lifecycle_drop_partition_wakes_open_realtime_sessions_and_delivers_the_new_timeline() {
    let mut op = connect();
    setup(&mut op);
    let partition = partition_name("drop-gw");
    for actor in ["alice", "bob"] {
        grant(&mut op, &partition, actor, &["p1"]);
    }
    let gw = Gateway::start(&[]);

    // The old timeline: four commits, bob's session is live and holds them all.
    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "dg-alice");
    alice.subscribe("tasks", &["p1"]);
    for i in 1..=2 {
        alice.write_task(&format!("o{i}"), "p1", "the old timeline");
        alice.sync_idle(6).expect("alice pushes");
    }
    let mut bob = Peer::connected(&gw, &partition, "bob", "dg-bob", &["p1"]);
    assert_eq!(bob.task_ids(), ["o1", "o2"]);
    for i in 3..=4 {
        alice.write_task(&format!("o{i}"), "p1", "the old timeline, live");
        alice.sync_idle(6).expect("alice pushes");
    }
    bob.pump_until("bob's delta o4", |p| p.holds("o4"));
    assert_eq!(bob.deltas_containing("o3") + bob.deltas_containing("o4"), 2);
    assert_eq!(max_commit_seq(&mut op, &partition), 4);
    wait_until("bob's ack persisted", || {
        stored_cursor(&mut op, &partition, "dg-bob") == Some(4)
    });
    assert!(bob.wakes().is_empty(), "{:?}", bob.events());
    let (old_epoch, _) = registry(&mut op, &partition).expect("registry row");

    // The operator drops the partition (outside a transaction block).
    let dropped_at = Instant::now();
    let row = op
        .query_one("CALL syncular.drop_partition($1)", &[&partition])
        .unwrap_or_else(|e| panic!("CALL drop_partition: {:?}", db_error(&e)));
    assert!(row.get::<_, i64>("rows_deleted") > 0);

    // Without any new commit, the session is woken with reset-required.
    bob.pump_until("bob's reset-required wake after the drop", |p| {
        p.wakes().iter().any(|w| w == "reset-required")
    });
    eprintln!(
        "drop_partition → reset-required wake in {:?}",
        dropped_at.elapsed()
    );
    assert_eq!(
        max_commit_seq(&mut op, &partition),
        0,
        "no commit was made: the partition is empty"
    );
    assert!(server_tasks(&mut op, &partition).unwrap().is_empty());
    let (new_epoch, _) =
        registry(&mut op, &partition).expect("the gateway's reload re-created the partition");
    assert_ne!(new_epoch, old_epoch, "a new timeline");
    assert!(
        bob.client.sync_needed(),
        "a wake-up raises the sync-needed signal"
    );

    // Bob recovers over the socket: reset, bootstrap of the empty partition.
    let report = bob.sync_idle(8).expect("bob's recovery rounds");
    assert_eq!(report.resets, ["tasks"], "{report:?}");
    assert!(bob.task_ids().is_empty(), "{:?}", bob.task_ids());
    // Alice (HTTP) resets too.
    let report = alice.sync_idle(6).expect("alice resets");
    assert_eq!(report.resets, ["tasks"], "{report:?}");
    assert!(alice.task_ids().is_empty(), "{:?}", alice.task_ids());

    // The new timeline, from commitSeq 1: alice's pushes and plain SQL writes, alternately. Each
    // commit reaches bob's session as a delta (no pull), in order.
    let mut writer = sql_writer(&partition, Some("sql-writer"));
    for seq in 1..=5_i64 {
        let id = format!("n{seq}");
        if seq % 2 == 1 {
            alice.write_task(&id, "p1", "the new timeline, pushed");
            let report = alice.sync_idle(6).expect("alice pushes");
            assert_eq!(report.applied.len(), 1, "{report:?}");
        } else {
            writer
                .execute(
                    "INSERT INTO public.tasks (id, project_id, title, done, priority) \
                     VALUES ($1, 'p1', 'the new timeline, plain SQL', false, NULL)",
                    &[&id],
                )
                .expect("plain SQL write");
        }
        assert_eq!(
            max_commit_seq(&mut op, &partition),
            seq,
            "a dense log from 1 in the new timeline"
        );
        bob.pump_until(&format!("bob's delta of commit {seq} ({id})"), |p| {
            p.holds(&id)
        });
        assert_eq!(bob.deltas_containing(&id), 1, "{:?}", bob.events());
    }
    // Only reset-required wake-ups: how many depends on how many of the drop's notifications
    // reach the gateway before bob's session re-registers on the new timeline (on a loaded
    // machine up to one per notification); every commit of the new timeline came as a delta.
    let wakes = bob.wakes();
    assert!(
        !wakes.is_empty() && wakes.iter().all(|w| w == "reset-required"),
        "no other wake-up: {:?}",
        bob.events()
    );
    assert_eq!(bob.task_ids(), ["n1", "n2", "n3", "n4", "n5"]);
    assert_eq!(
        held_snapshot(&bob.client).unwrap(),
        server_held(&mut op, &partition),
        "bob holds exactly the server's rows"
    );
    assert_eq!(bob.client.subscription_state("tasks").unwrap().cursor, 5);
    let report = alice
        .sync_idle(6)
        .expect("alice pulls the plain SQL writes");
    assert!(report.resets.is_empty(), "{report:?}");
    assert_eq!(
        held_snapshot(&alice.client).unwrap(),
        server_held(&mut op, &partition)
    );
}
