//! Epoch rotation end to end with real clients (SPEC §2.1 backup-restore rule):
//! `syncular.rotate_log_epoch`, driven by an operator connection while real `syncular-client`
//! 0.15.48 instances keep syncing over the SQL transport.
//!
//! - a rotation resets every client: the one with a pending outbox and a lost ack re-bootstraps,
//!   replays its outbox (the lost-ack commit is answered `cached`, nothing is applied twice) and
//!   ends with exactly the server's rows; an idle client converges to the same rows;
//! - a wire-version-1 request served before a rotation is refused after it
//!   (`sync.client_wire_unsupported`), nothing stored; an unknown partition is created rotated.
//!
//! A rotation seen by open realtime sessions of the gateway: `lifecycle_rotation_realtime.rs`.
//! Helpers: `syncular_integration_tests::lifecycle`. Every test uses its own partitions and never
//! calls a lifecycle function with a NULL partition (that would touch the partitions of tests
//! running in parallel).

use ssp2::model::PushStatus;
use syncular_client::CommitOutcomeStatus;
use syncular_integration_tests::clients::{
    delete_task, held_snapshot, new_client, subscribe_projects, sync_idle, task_values, upsert_task,
};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, fingerprint, partition_name, Coverage};
use syncular_integration_tests::lifecycle::{
    admin, count, db_error, ids, max_commit_seq, registry, rotate, server_held, sync_lossy,
    LossyTransport,
};
use syncular_integration_tests::transport::{call_sync, PgTransport};
use syncular_integration_tests::wire::{
    v1_request,
    commit, decode_response, delivered, pull_header, push_outcomes, resp_header_epoch,
    subscription, upsert, RawSession, Task,
};

// ---------------------------------------------------------------------------------------------
// 1. rotation with real clients

#[test]
fn lifecycle_rotation_resets_clients_replays_the_outbox_and_converges_to_the_server_rows() {
    let mut op = admin();
    let partition = partition_name("rot-clients");
    let allowed = allow_projects(&["p1", "p2"]);

    // A writes and syncs four rows; B bootstraps them.
    let mut a = new_client("rot-a").expect("client A");
    subscribe_projects(&mut a, "a-tasks", &["p1", "p2"]).expect("A subscribes");
    let mut ta = LossyTransport {
        inner: PgTransport::new(connect(), &partition, "alice", Some(allowed.clone())),
        lose_next_response: false,
    };
    a.mutate(vec![
        upsert_task(task_values("t1", "p1", "one", false, Some(1))),
        upsert_task(task_values("t2", "p1", "two", false, None)),
    ])
    .expect("A inserts t1, t2");
    a.mutate(vec![
        upsert_task(task_values("t3", "p2", "three", true, Some(3))),
        upsert_task(task_values("t4", "p2", "four", false, None)),
    ])
    .expect("A inserts t3, t4");
    let report = sync_lossy(&mut a, &mut ta, 12).expect("A syncs");
    assert_eq!(report.applied.len(), 2, "{report:?}");
    let mut b = new_client("rot-b").expect("client B");
    subscribe_projects(&mut b, "b-tasks", &["p1", "p2"]).expect("B subscribes");
    let mut tb = PgTransport::new(connect(), &partition, "bob", Some(allowed.clone()));
    sync_idle(&mut b, &mut tb, 12).expect("B bootstraps");
    assert_eq!(ids(&held_snapshot(&b).unwrap()), ["t1", "t2", "t3", "t4"]);

    // A lost ack: the server applies t5, the client never hears it.
    let lost = a
        .mutate(vec![upsert_task(task_values(
            "t5",
            "p1",
            "lost ack",
            false,
            Some(5),
        ))])
        .expect("A inserts t5");
    ta.lose_next_response = true;
    let err = match a.sync(&mut ta) {
        syncular_client::SyncOutcome::Failed {
            error_code,
            message,
        } => format!("{error_code}: {message}"),
        syncular_client::SyncOutcome::Ok(report) => {
            panic!("the round's response is lost, yet: {report:?}")
        }
    };
    assert!(err.starts_with("transport.failed"), "{err}");
    assert_eq!(
        a.pending_commit_ids(),
        std::slice::from_ref(&lost),
        "the lost-ack commit stays in A's outbox"
    );
    assert_eq!(
        max_commit_seq(&mut op, &partition),
        3,
        "the server applied it as commit 3"
    );
    let lost_seq_stored: i64 = op
        .query_one(
            "SELECT count(*) FROM syncular.sync_push_results WHERE partition = $1 AND client_commit_id = $2",
            &[&partition, &lost],
        )
        .unwrap()
        .get(0);
    assert_eq!(lost_seq_stored, 1, "its outcome is stored");

    // Pending local work that never reaches the server before the rotation.
    let y1 = a
        .mutate(vec![upsert_task(task_values(
            "t1",
            "p1",
            "one, edited offline",
            true,
            Some(10),
        ))])
        .expect("A edits t1");
    let y2 = a.mutate(vec![delete_task("t2")]).expect("A deletes t2");
    let y3 = a
        .mutate(vec![upsert_task(task_values(
            "t6",
            "p2",
            "six, offline",
            false,
            None,
        ))])
        .expect("A inserts t6");
    assert_eq!(
        a.pending_commit_ids(),
        [lost.clone(), y1.clone(), y2.clone(), y3.clone()]
    );
    let before_rotation = server_held(&mut op, &partition);
    assert_eq!(
        ids(&before_rotation),
        ["t1", "t2", "t3", "t4", "t5"],
        "nothing pending reached the server"
    );

    // The operator rotates the partition's epoch (backup-restore rule).
    let (old_epoch, required) = registry(&mut op, &partition).expect("registry row");
    assert!(!required, "no rotation yet: epochs are not required");
    let clients_before = count(&mut op, "sync_clients", &partition);
    let results_before = count(&mut op, "sync_push_results", &partition);
    assert_eq!(clients_before, 2, "A and B have client records");
    let r = rotate(&mut op, &partition);
    assert_eq!(r.partition, partition);
    assert_ne!(r.log_epoch, old_epoch, "a new epoch");
    assert!(!r.log_epoch.is_empty());
    assert_eq!(
        r.clients_deleted, clients_before,
        "every client record of the partition deleted"
    );
    assert_eq!(
        registry(&mut op, &partition),
        Some((r.log_epoch.clone(), true)),
        "stored, and epochs now required"
    );
    assert_eq!(count(&mut op, "sync_clients", &partition), 0);
    assert_eq!(
        count(&mut op, "sync_push_results", &partition),
        results_before,
        "push outcomes are kept"
    );
    assert_eq!(
        max_commit_seq(&mut op, &partition),
        3,
        "the log itself is untouched"
    );

    // A syncs: reset, re-bootstrap, outbox replay.
    let first = ta.inner.responses.len();
    let report = sync_lossy(&mut a, &mut ta, 12).expect("A recovers from the rotation");
    let first_response = decode_response(&ta.inner.responses[first]).expect("decodes");
    assert_eq!(
        resp_header_epoch(&first_response),
        (Some(r.log_epoch.clone()), true),
        "A's first request after the rotation is answered with the reset response and the new epoch"
    );
    assert_eq!(
        first_response.frames.len(),
        1,
        "reset response: RESP_HEADER only (then END): {first_response:?}"
    );
    assert_eq!(report.resets, ["a-tasks"], "{report:?}");
    assert!(
        a.pending_commit_ids().is_empty(),
        "the outbox drained: {report:?}"
    );
    assert!(
        report.rejected.is_empty() && report.failed.is_empty(),
        "{report:?}"
    );
    // The lost-ack commit was answered `cached` with its original commitSeq; the others applied.
    let mut outcomes = Vec::new();
    for resp in &ta.inner.responses[first..] {
        outcomes.extend(push_outcomes(&decode_response(resp).unwrap()));
    }
    let lost_outcome = outcomes
        .iter()
        .find(|o| o.client_commit_id == lost)
        .expect("the lost-ack commit was replayed");
    assert_eq!(
        (lost_outcome.status, lost_outcome.commit_seq),
        (PushStatus::Cached, Some(3)),
        "{outcomes:?}"
    );
    for y in [&y1, &y2, &y3] {
        let o = outcomes
            .iter()
            .find(|o| &o.client_commit_id == y)
            .expect("pending commit pushed");
        assert_eq!(o.status, PushStatus::Applied, "{o:?}");
    }
    assert_eq!(
        a.commit_outcome(&lost).unwrap().expect("outcome").status,
        CommitOutcomeStatus::Cached
    );
    assert_eq!(
        a.commit_outcome(&y1).unwrap().expect("outcome").status,
        CommitOutcomeStatus::Applied
    );
    assert_eq!(
        max_commit_seq(&mut op, &partition),
        6,
        "three new commits, the lost-ack one not applied again"
    );

    let server = server_held(&mut op, &partition);
    assert_eq!(
        ids(&server),
        ["t1", "t3", "t4", "t5", "t6"],
        "the pending mutations applied on the server"
    );
    let t1 = &server[0];
    assert_eq!(
        (t1.1, t1.2["title"].as_str()),
        (2, Some("one, edited offline"))
    );
    assert_eq!(server[3].1, 1, "t5 (lost ack) applied exactly once");
    assert_eq!(
        held_snapshot(&a).unwrap(),
        server,
        "A holds exactly the server's rows (values and versions)"
    );
    let sub = a.subscription_state("a-tasks").unwrap();
    assert_eq!(
        (sub.status.as_str(), sub.cursor, sub.has_resume_token),
        ("active", 6, false)
    );

    // B never had pending work: reset, re-bootstrap, same rows.
    let first_b = tb.responses.len();
    let report = sync_idle(&mut b, &mut tb, 12).expect("B recovers from the rotation");
    assert_eq!(report.resets, ["b-tasks"], "{report:?}");
    assert_eq!(
        resp_header_epoch(&decode_response(&tb.responses[first_b]).unwrap()),
        (Some(r.log_epoch.clone()), true)
    );
    assert_eq!(
        held_snapshot(&b).unwrap(),
        server,
        "B converges to the same rows"
    );
    assert_eq!(
        count(&mut op, "sync_clients", &partition),
        2,
        "both clients re-registered under the new epoch"
    );

    // Life goes on in the new continuity: B's next write reaches A incrementally.
    b.mutate(vec![upsert_task(task_values(
        "t7", "p1", "after", false, None,
    ))])
    .unwrap();
    sync_idle(&mut b, &mut tb, 12).unwrap();
    let report = sync_lossy(&mut a, &mut ta, 12).unwrap();
    assert_eq!(
        (
            report.commits_applied,
            report.segment_rows_applied,
            report.resets.len()
        ),
        (1, 0, 0),
        "{report:?}"
    );
    assert_eq!(held_snapshot(&a).unwrap(), server_held(&mut op, &partition));
}

// ---------------------------------------------------------------------------------------------
// 2. wire version 1 after a rotation

#[test]
fn lifecycle_rotation_refuses_wire_version_1_that_was_served_before() {
    let mut op = admin();
    let partition = partition_name("rot-v1");
    let allowed = allow_projects(&["p1"]);
    let mut v1 = connect();

    let push_and_pull = v1_request(
        "v1-client",
        vec![
            commit(
                "v1-c1",
                vec![upsert(&Task::new("old", "p1", "from a v1 client"), None)],
            ),
            pull_header(0, 0, 0, 0b0011),
            subscription("s", "tasks", &[("project_id", &["p1"])], 0, None),
        ],
    );
    let pull_only = v1_request(
        "v1-client",
        vec![
            pull_header(0, 0, 0, 0b0011),
            subscription("s", "tasks", &[("project_id", &["p1"])], 1, None),
        ],
    );

    // Before: served in version 1, applied, then replayed as cached.
    let msg = decode_response(
        &call_sync(&mut v1, &partition, "vera", &push_and_pull, Some(&allowed)).expect("v1 served"),
    )
    .unwrap();
    assert_eq!(msg.wire_version, 1);
    assert_eq!(push_outcomes(&msg)[0].status, PushStatus::Applied);
    assert_eq!(delivered(&msg).unwrap().commit_seqs, [1]);
    let msg = decode_response(
        &call_sync(&mut v1, &partition, "vera", &push_and_pull, Some(&allowed)).expect("v1 replay"),
    )
    .unwrap();
    assert_eq!(
        (
            push_outcomes(&msg)[0].status,
            push_outcomes(&msg)[0].commit_seq
        ),
        (PushStatus::Cached, Some(1))
    );
    call_sync(&mut v1, &partition, "vera", &pull_only, Some(&allowed)).expect("v1 pull served");

    let r = rotate(&mut op, &partition);
    assert_eq!(r.clients_deleted, 1, "the v1 client's record");
    let before = fingerprint(&mut op, &partition, Coverage::Everything).unwrap();

    // After: the same bytes are refused, request-level, before any push or pull.
    for (what, bytes) in [("push + pull", &push_and_pull), ("pull only", &pull_only)] {
        let err = call_sync(&mut v1, &partition, "vera", bytes, Some(&allowed))
            .expect_err("v1 refused after the rotation");
        let (sqlstate, message, detail) = db_error(&err);
        assert!(
            message.starts_with("sync.client_wire_unsupported"),
            "{what}: {message}"
        );
        assert_eq!(sqlstate, "0A000", "{what}: schema-mismatch class");
        let detail = detail.expect("the §10.1 object in DETAIL");
        assert_eq!(detail["code"], "sync.client_wire_unsupported", "{detail}");
        assert_eq!(detail["category"], "schema-mismatch", "{detail}");
        assert_eq!(detail["recommendedAction"], "upgradeClient", "{detail}");
    }
    // A new v1 commit is refused too, and nothing at all changed in the partition.
    let fresh = v1_request(
        "v1-client",
        vec![commit(
            "v1-c2",
            vec![upsert(&Task::new("new", "p1", "after"), None)],
        )],
    );
    let err = call_sync(&mut v1, &partition, "vera", &fresh, Some(&allowed)).expect_err("refused");
    assert!(db_error(&err).1.starts_with("sync.client_wire_unsupported"));
    // (the registry's last-seen time may be refreshed; the rest must be identical)
    let after = fingerprint(&mut op, &partition, Coverage::Everything).unwrap();
    let strip = |f: Vec<(String, i64, String)>| -> Vec<(String, i64, String)> {
        f.into_iter()
            .filter(|t| !t.0.contains("sync_partition_registry"))
            .collect()
    };
    assert_eq!(
        strip(after),
        strip(before),
        "a refused v1 request stores nothing"
    );
    assert_eq!(max_commit_seq(&mut op, &partition), 1);

    // A partition never seen before is created rotated: v1 is refused from its first request.
    let unknown = partition_name("rot-v1-unknown");
    let u = rotate(&mut op, &unknown);
    assert_eq!(
        (u.partition.as_str(), u.clients_deleted),
        (unknown.as_str(), 0)
    );
    assert_eq!(
        registry(&mut op, &unknown),
        Some((u.log_epoch.clone(), true))
    );
    let err =
        call_sync(&mut v1, &unknown, "vera", &pull_only, Some(&allowed)).expect_err("refused");
    assert!(
        db_error(&err).1.starts_with("sync.client_wire_unsupported"),
        "{err}"
    );
    // An empty partition name is an argument error, not "every partition".
    let err = op
        .query("SELECT * FROM syncular.rotate_log_epoch('')", &[])
        .expect_err("empty partition");
    let (sqlstate, message, _) = db_error(&err);
    assert_eq!(sqlstate, "22023", "{message}");
    assert!(
        message.starts_with("syncular.invalid_argument"),
        "{message}"
    );

    // Version 2 clients acquire the new epoch and read the retained log.
    let mut v2 = RawSession::new(connect(), &partition, "walt", "v2-client", Some(allowed));
    assert_eq!(v2.acquire_epoch().expect("epoch"), r.log_epoch);
    let msg = v2
        .round(vec![
            pull_header(0, 0, 0, 0b0011),
            subscription("s", "tasks", &[("project_id", &["p1"])], 0, None),
        ])
        .expect("v2 pull after the rotation");
    assert_eq!(delivered(&msg).unwrap().commit_seqs, [1]);
}
