//! NOTIFY (issue 4, DESIGN §4): a `LISTEN syncular_commit` connection
//! receives exactly one notification per applied commit that has changes,
//! payload `<base64url(partition)>:<commitSeq>`, only after COMMIT — none
//! while the pushing transaction is open, none after ROLLBACK, none for a
//! rejected commit, a replay, or a commit whose only operations deleted
//! absent rows.

use std::time::Duration;

use ssp2::model::PushStatus;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema};
use syncular_integration_tests::notify::{expected_payload, CommitListener, Seen, CHANNEL};
use syncular_integration_tests::wire::{
    commit, db_message, decode_response, delete, push_outcomes, upsert, RawSession, Task,
};

const QUIET: Duration = Duration::from_millis(400);
const MAX_WAIT: Duration = Duration::from_secs(10);

fn payloads(seen: &[Seen]) -> Vec<String> {
    seen.iter().map(|s| s.payload.clone()).collect()
}

#[test]
fn one_notification_per_applied_commit_after_commit_and_never_otherwise() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("notify");
    let mut listener = CommitListener::listen(connect()).expect("LISTEN");
    let mut s = RawSession::new(
        connect(),
        &partition,
        "alice",
        "notify-client",
        Some(allow_projects(&["p1"])),
    );
    s.acquire_epoch().expect("epoch");
    assert!(
        listener
            .drain(&partition, QUIET, MAX_WAIT)
            .expect("drain")
            .is_empty(),
        "acquiring the epoch applies nothing and notifies nothing"
    );

    // 1. Autocommit push: exactly one notification, after the statement's commit.
    let out = s
        .push(vec![commit(
            "c1",
            vec![upsert(&Task::new("a", "p1", "first"), None)],
        )])
        .expect("push c1");
    assert_eq!(out[0].status, PushStatus::Applied);
    assert_eq!(out[0].commit_seq, Some(1));
    let seen = listener
        .wait_for(&partition, 1, QUIET, MAX_WAIT)
        .expect("listen");
    assert_eq!(
        payloads(&seen),
        [expected_payload(&partition, 1)],
        "one notification for commit 1"
    );
    assert!(seen.iter().all(|n| n.channel == CHANNEL));

    // 2. Inside an open transaction: nothing until COMMIT, then exactly one.
    let bytes = s.encode(vec![commit(
        "c2",
        vec![upsert(&Task::new("b", "p1", "second"), None)],
    )]);
    let allowed = s.allowed.clone();
    let mut tx = s.conn.transaction().expect("begin");
    let response: Vec<u8> = tx
        .query_one(
            "SELECT syncular.sync($1::text, $2::text, $3::bytea, $4::jsonb)",
            &[&partition, &"alice", &bytes, &allowed],
        )
        .map_err(|e| db_message(&e))
        .expect("push c2 in a transaction")
        .get(0);
    let out = push_outcomes(&decode_response(&response).expect("decode"));
    assert_eq!(
        (out[0].status, out[0].commit_seq),
        (PushStatus::Applied, Some(2))
    );
    assert!(
        listener
            .drain(&partition, QUIET, MAX_WAIT)
            .expect("drain")
            .is_empty(),
        "no notification is delivered while the pushing transaction is open"
    );
    tx.commit().expect("commit");
    let seen = listener
        .wait_for(&partition, 1, QUIET, MAX_WAIT)
        .expect("listen");
    assert_eq!(
        payloads(&seen),
        [expected_payload(&partition, 2)],
        "delivered at COMMIT"
    );

    // 3. Rolled back: never delivered; the sequence number is reused.
    let bytes = s.encode(vec![commit(
        "c3",
        vec![upsert(&Task::new("c", "p1", "rolled back"), None)],
    )]);
    let mut tx = s.conn.transaction().expect("begin");
    let response: Vec<u8> = tx
        .query_one(
            "SELECT syncular.sync($1::text, $2::text, $3::bytea, $4::jsonb)",
            &[&partition, &"alice", &bytes, &allowed],
        )
        .map_err(|e| db_message(&e))
        .expect("push c3 in a transaction")
        .get(0);
    let out = push_outcomes(&decode_response(&response).expect("decode"));
    assert_eq!(
        (out[0].status, out[0].commit_seq),
        (PushStatus::Applied, Some(3))
    );
    tx.rollback().expect("rollback");
    assert!(
        listener
            .drain(&partition, QUIET, MAX_WAIT)
            .expect("drain")
            .is_empty(),
        "a rolled-back commit is never announced"
    );

    // 4. Rejected commits (forbidden scope, unknown table, corrupt payload): none.
    let mut bad_payload = upsert(&Task::new("d", "p1", "corrupt"), None);
    bad_payload.payload = Some(vec![0xff, 0x01]);
    let mut unknown_table = upsert(&Task::new("e", "p1", "nowhere"), None);
    unknown_table.table = "no_such_table".to_owned();
    let out = s
        .push(vec![
            commit(
                "r1",
                vec![upsert(&Task::new("x", "p9", "not allowed"), None)],
            ),
            commit("r2", vec![unknown_table]),
            commit("r3", vec![bad_payload]),
        ])
        .expect("push rejected commits");
    assert!(
        out.iter().all(|o| o.status == PushStatus::Rejected),
        "all three are rejected: {out:?}"
    );
    assert!(
        listener
            .drain(&partition, QUIET, MAX_WAIT)
            .expect("drain")
            .is_empty(),
        "a rejected commit is never announced"
    );

    // 5. A replay (cached) of an applied commit: none.
    let out = s
        .push(vec![commit(
            "c1",
            vec![upsert(&Task::new("a", "p1", "first"), None)],
        )])
        .expect("replay c1");
    assert_eq!(
        (out[0].status, out[0].commit_seq),
        (PushStatus::Cached, Some(1))
    );
    assert!(
        listener
            .drain(&partition, QUIET, MAX_WAIT)
            .expect("drain")
            .is_empty(),
        "a replay is never announced"
    );

    // 6. A commit whose only operation deletes an absent row: applied, no changes, none.
    let out = s
        .push(vec![commit("d1", vec![delete("never-existed", None)])])
        .expect("push d1");
    assert_eq!(out[0].status, PushStatus::Applied, "{out:?}");
    let empty_seq = out[0].commit_seq.expect("commitSeq");
    assert!(
        listener
            .drain(&partition, QUIET, MAX_WAIT)
            .expect("drain")
            .is_empty(),
        "a commit without changes is not announced"
    );

    // 7. Three applied commits in one request: three notifications, in order.
    let out = s
        .push(vec![
            commit("m1", vec![upsert(&Task::new("m1", "p1", "multi 1"), None)]),
            commit("m2", vec![upsert(&Task::new("m2", "p1", "multi 2"), None)]),
            commit("m3", vec![delete("a", None)]),
        ])
        .expect("push m1..m3");
    let seqs: Vec<i64> = out.iter().map(|o| o.commit_seq.expect("applied")).collect();
    assert_eq!(
        seqs,
        [empty_seq + 1, empty_seq + 2, empty_seq + 3],
        "{out:?}"
    );
    let seen = listener
        .wait_for(&partition, 3, QUIET, MAX_WAIT)
        .expect("listen");
    let expected: Vec<String> = seqs
        .iter()
        .map(|q| expected_payload(&partition, *q))
        .collect();
    assert_eq!(
        payloads(&seen),
        expected,
        "one notification per applied commit, in commit order"
    );

    // Every notification came from the pushing backends, never a duplicate.
    let total: i64 = admin
        .query_one(
            "SELECT count(*) FROM syncular.sync_commits WHERE partition = $1",
            &[&partition],
        )
        .expect("count commits")
        .get(0);
    assert_eq!(
        total,
        empty_seq + 3,
        "commits 1..{} are in the log",
        empty_seq + 3
    );
}

#[test]
fn payload_names_partitions_that_contain_colons_and_non_ascii_text() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = format!("{}:tenant/ü:42", partition_name("notify-odd"));
    let mut listener = CommitListener::listen(connect()).expect("LISTEN");
    let mut s = RawSession::new(
        connect(),
        &partition,
        "alice",
        "odd-client",
        Some(allow_projects(&["p1"])),
    );
    s.acquire_epoch().expect("epoch");
    let out = s
        .push(vec![commit(
            "c1",
            vec![upsert(&Task::new("a", "p1", "x"), None)],
        )])
        .expect("push");
    assert_eq!(out[0].commit_seq, Some(1));
    let seen = listener
        .wait_for(&partition, 1, QUIET, MAX_WAIT)
        .expect("listen");
    assert_eq!(payloads(&seen), [expected_payload(&partition, 1)]);
}

#[test]
fn a_notification_driven_pull_delivers_the_announced_commit() {
    use syncular_integration_tests::clients::{
        held_snapshot, new_client, subscribe_projects, sync_idle, task_values, upsert_task,
    };
    use syncular_integration_tests::notify::parse_payload;
    use syncular_integration_tests::transport::PgTransport;

    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("notify-driven");
    let allowed = allow_projects(&["p1"]);
    let mut a = new_client("writer").expect("A");
    let mut ta = PgTransport::new(connect(), &partition, "alice", Some(allowed.clone()));
    let mut b = new_client("follower").expect("B");
    subscribe_projects(&mut b, "b", &["p1"]).expect("B subscribes");
    let mut tb = PgTransport::new(connect(), &partition, "bob", Some(allowed));
    sync_idle(&mut b, &mut tb, 6).expect("B starts empty");
    let mut listener = CommitListener::listen(connect()).expect("LISTEN");

    for round in 1..=3i64 {
        a.mutate(vec![upsert_task(task_values(
            &format!("t{round}"),
            "p1",
            &format!("round {round}"),
            false,
            None,
        ))])
        .expect("A writes");
        sync_idle(&mut a, &mut ta, 6).expect("A pushes");
        // The gateway's loop: wait for the announcement, then pull.
        let seen = listener
            .wait_for(&partition, 1, Duration::from_millis(200), MAX_WAIT)
            .expect("listen");
        assert_eq!(seen.len(), 1, "round {round}: one announcement: {seen:?}");
        let (p, seq) = parse_payload(&seen[0].payload).expect("payload parses");
        assert_eq!((p.as_str(), seq), (partition.as_str(), round));
        let report = sync_idle(&mut b, &mut tb, 6).expect("B pulls");
        assert_eq!(report.commits_applied, 1, "round {round}: {report:?}");
        assert_eq!(b.subscription_state("b").expect("sub").cursor, seq);
        assert_eq!(held_snapshot(&b).expect("B rows").len(), round as usize);
    }
}
