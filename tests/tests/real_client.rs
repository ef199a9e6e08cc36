//! Real client end to end (issue 4): two `syncular-client` 0.15.48 clients on
//! one partition, talking to the extension through `syncular.sync` over
//! Postgres connections. A inserts, updates and deletes; B bootstraps, then
//! pulls incrementally, and ends with exactly A's rows. A client whose
//! allowed scopes do not cover a row never receives it.

use std::collections::BTreeSet;

use serde_json::json;
use syncular_integration_tests::clients::{
    delete_task, held_snapshot, new_client, subscribe_projects, sync_idle, task_values, upsert_task,
};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_projects, partition_name, register_schema, server_tasks,
};
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::{decode_response, delivered};

fn fresh_partition(label: &str) -> String {
    let mut conn = connect();
    register_schema(&mut conn).expect("register the sample schema");
    partition_name(label)
}

fn max_commit_seq(partition: &str) -> i64 {
    connect()
        .query_one(
            "SELECT coalesce((SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1), 0)",
            &[&partition],
        )
        .expect("read max_commit_seq")
        .get(0)
}

#[test]
fn b_bootstraps_then_pulls_incrementally_and_ends_with_exactly_a_rows() {
    let partition = fresh_partition("real-client");
    let allowed = allow_projects(&["p1", "p2"]);

    let mut a = new_client("client-a").expect("client A");
    subscribe_projects(&mut a, "a-tasks", &["p1", "p2"]).expect("A subscribes");
    let mut ta = PgTransport::new(connect(), &partition, "alice", Some(allowed.clone()));

    // A: two insert commits.
    a.mutate(vec![
        upsert_task(task_values("t1", "p1", "write the spec", false, Some(3))),
        upsert_task(task_values("t2", "p1", "review", false, None)),
        upsert_task(task_values("t3", "p2", "ship", true, Some(-7))),
    ])
    .expect("A inserts t1..t3");
    a.mutate(vec![upsert_task(task_values(
        "t4",
        "p2",
        "celebrate",
        false,
        Some(i64::from(i32::MAX) + 1),
    ))])
    .expect("A inserts t4");
    let report = sync_idle(&mut a, &mut ta, 12).expect("A syncs its inserts");
    assert_eq!(
        report.applied.len(),
        2,
        "both insert commits applied: {report:?}"
    );
    assert!(
        report.rejected.is_empty() && report.failed.is_empty(),
        "{report:?}"
    );
    assert!(a.pending_commit_ids().is_empty(), "A's outbox drained");
    assert_eq!(
        max_commit_seq(&partition),
        2,
        "two applied commits → commitSeq 1..2"
    );

    let server_ids: Vec<String> = server_tasks(&mut connect(), &partition)
        .expect("server rows")
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(
        server_ids,
        ["t1", "t2", "t3", "t4"],
        "the server holds A's rows"
    );

    // B: a fresh client bootstraps (cursor −1 → inline rows segments).
    let mut b = new_client("client-b").expect("client B");
    subscribe_projects(&mut b, "b-tasks", &["p1", "p2"]).expect("B subscribes");
    let mut tb = PgTransport::new(connect(), &partition, "bob", Some(allowed.clone()));
    let report = sync_idle(&mut b, &mut tb, 12).expect("B bootstraps");
    assert_eq!(
        report.segment_rows_applied, 4,
        "B's bootstrap delivered the 4 rows: {report:?}"
    );
    assert_eq!(
        report.commits_applied, 0,
        "a bootstrap is not a log replay: {report:?}"
    );
    let state = b.subscription_state("b-tasks").expect("B's subscription");
    assert_eq!(state.status, "active");
    assert!(!state.has_resume_token, "bootstrap completed");
    assert_eq!(state.cursor, 2, "bootstrap pinned at maxCommitSeq");
    assert_eq!(
        held_snapshot(&b).expect("B rows"),
        held_snapshot(&a).expect("A rows"),
        "after bootstrap B holds exactly A's rows (values and versions)"
    );

    // A: update t1, delete t2, insert t5 — three commits.
    a.mutate(vec![upsert_task(task_values(
        "t1",
        "p1",
        "write the spec, v2",
        true,
        Some(4),
    ))])
    .expect("A updates t1");
    a.mutate(vec![delete_task("t2")]).expect("A deletes t2");
    a.mutate(vec![upsert_task(task_values(
        "t5", "p2", "retro", false, None,
    ))])
    .expect("A inserts t5");
    let report = sync_idle(&mut a, &mut ta, 12).expect("A syncs its changes");
    assert_eq!(report.applied.len(), 3, "{report:?}");
    assert_eq!(max_commit_seq(&partition), 5);

    // B: incremental pull from cursor 2.
    let before = tb.responses.len();
    let report = sync_idle(&mut b, &mut tb, 12).expect("B pulls incrementally");
    assert_eq!(
        report.segment_rows_applied, 0,
        "no re-bootstrap: {report:?}"
    );
    assert_eq!(
        report.commits_applied, 3,
        "B applied commits 3..5: {report:?}"
    );
    let mut seqs = Vec::new();
    for response in &tb.responses[before..] {
        let msg = decode_response(response).expect("B's responses decode");
        seqs.extend(delivered(&msg).expect("rows decode").commit_seqs);
    }
    assert_eq!(
        seqs,
        [3, 4, 5],
        "B received exactly the new commits, in order"
    );
    assert_eq!(b.subscription_state("b-tasks").expect("sub").cursor, 5);

    let a_rows = held_snapshot(&a).expect("A rows");
    let b_rows = held_snapshot(&b).expect("B rows");
    assert_eq!(
        b_rows, a_rows,
        "after the incremental pull B holds exactly A's rows"
    );
    let ids: Vec<&str> = b_rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ids, ["t1", "t3", "t4", "t5"], "t2 deleted, t5 added");
    let t1 = &b_rows[0];
    assert_eq!(t1.2.get("title"), Some(&json!("write the spec, v2")));
    assert_eq!(t1.2.get("done"), Some(&json!(true)));
    assert!(
        t1.1 >= 2,
        "t1's server version advanced with the update: {}",
        t1.1
    );

    // The server's projection agrees with both clients.
    let server: Vec<(String, String)> = server_tasks(&mut connect(), &partition)
        .expect("server rows")
        .into_iter()
        .map(|r| (r.0, r.2))
        .collect();
    let held: Vec<(String, String)> = b_rows
        .iter()
        .map(|r| {
            (
                r.0.clone(),
                r.2["title"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(server, held);

    // A further round for B is quiet: nothing new, same cursor.
    let report = sync_idle(&mut b, &mut tb, 3).expect("B idle round");
    assert_eq!(
        (report.commits_applied, report.segment_rows_applied),
        (0, 0)
    );
    assert_eq!(held_snapshot(&b).expect("B rows"), a_rows);
}

#[test]
fn a_client_whose_scopes_do_not_cover_a_row_never_receives_it() {
    let partition = fresh_partition("real-client-scopes");

    let mut a = new_client("writer").expect("writer");
    subscribe_projects(&mut a, "writer-tasks", &["p1", "p2"]).expect("writer subscribes");
    let mut ta = PgTransport::new(
        connect(),
        &partition,
        "alice",
        Some(allow_projects(&["p1", "p2"])),
    );
    a.mutate(vec![
        upsert_task(task_values("secret-1", "p1", "p1 only", false, None)),
        upsert_task(task_values("open-1", "p2", "p2 row", false, Some(1))),
    ])
    .expect("writer inserts");
    let report = sync_idle(&mut a, &mut ta, 12).expect("writer syncs");
    assert_eq!(report.applied.len(), 1, "{report:?}");

    // C asks for p1 and p2 but is allowed only p2: effective = {p2}.
    let mut c = new_client("reader-c").expect("reader C");
    subscribe_projects(&mut c, "c-tasks", &["p1", "p2"]).expect("C subscribes");
    let mut tc = PgTransport::new(
        connect(),
        &partition,
        "carol",
        Some(allow_projects(&["p2"])),
    );
    // D asks only for p1 and is allowed only p2: revoked.
    let mut d = new_client("reader-d").expect("reader D");
    subscribe_projects(&mut d, "d-tasks", &["p1"]).expect("D subscribes");
    let mut td = PgTransport::new(connect(), &partition, "dave", Some(allow_projects(&["p2"])));

    sync_idle(&mut c, &mut tc, 12).expect("C bootstraps");
    sync_idle(&mut d, &mut td, 12).expect("D syncs");

    // More writes on both sides of the fence, then incremental pulls.
    a.mutate(vec![upsert_task(task_values(
        "secret-2", "p1", "p1 again", true, None,
    ))])
    .expect("writer adds a p1 row");
    a.mutate(vec![upsert_task(task_values(
        "open-1",
        "p2",
        "p2 row, edited",
        true,
        Some(2),
    ))])
    .expect("writer edits the p2 row");
    a.mutate(vec![delete_task("secret-1")])
        .expect("writer deletes a p1 row");
    a.mutate(vec![upsert_task(task_values(
        "open-2",
        "p2",
        "p2 second",
        false,
        None,
    ))])
    .expect("writer adds a p2 row");
    let report = sync_idle(&mut a, &mut ta, 12).expect("writer syncs again");
    assert_eq!(report.applied.len(), 4, "{report:?}");
    sync_idle(&mut c, &mut tc, 12).expect("C pulls");
    sync_idle(&mut d, &mut td, 12).expect("D pulls");

    let c_state = c.subscription_state("c-tasks").expect("C sub");
    assert_eq!(c_state.status, "active");
    assert_eq!(
        c_state.effective_scopes,
        Some(json!({ "project_id": ["p2"] }))
    );
    let c_rows = held_snapshot(&c).expect("C rows");
    let c_ids: Vec<&str> = c_rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(c_ids, ["open-1", "open-2"], "C holds exactly the p2 rows");
    assert_eq!(c_rows[0].2["title"], json!("p2 row, edited"));
    let a_p2: Vec<_> = held_snapshot(&a)
        .expect("A rows")
        .into_iter()
        .filter(|r| r.2["project_id"] == json!("p2"))
        .collect();
    assert_eq!(c_rows, a_p2, "C's rows equal the writer's p2 rows");

    // Not one byte of a p1 row reached C: no row, no delete, no scope value.
    let p1_ids: BTreeSet<&str> = ["secret-1", "secret-2"].into();
    for response in &tc.responses {
        let msg = decode_response(response).expect("C's responses decode");
        let got = delivered(&msg).expect("rows decode");
        assert!(
            got.rows.iter().all(|t| t.project_id == "p2"),
            "C received {:?}",
            got.rows
        );
        assert!(
            got.deleted.iter().all(|id| !p1_ids.contains(id.as_str())),
            "C saw {:?}",
            got.deleted
        );
        assert!(
            got.change_scopes.iter().all(|(_, v)| v != "p1"),
            "C saw p1 scopes {:?}",
            got.change_scopes
        );
        for id in &p1_ids {
            assert!(
                !response.windows(id.len()).any(|w| w == id.as_bytes()),
                "the row id {id} appears in a response to C"
            );
        }
    }

    let d_state = d.subscription_state("d-tasks").expect("D sub");
    assert_eq!(
        d_state.status, "revoked",
        "requested p1 ∩ allowed p2 = ∅ → revoked"
    );
    assert!(
        held_snapshot(&d).expect("D rows").is_empty(),
        "D holds nothing"
    );
    for response in &td.responses {
        let msg = decode_response(response).expect("D's responses decode");
        let got = delivered(&msg).expect("rows decode");
        assert!(
            got.rows.is_empty() && got.deleted.is_empty(),
            "D received {got:?}"
        );
    }

    // C may not write into p1 either: the commit is rejected, nothing lands.
    c.mutate(vec![upsert_task(task_values(
        "sneaky",
        "p1",
        "not allowed",
        false,
        None,
    ))])
    .expect("C writes locally");
    let report = sync_idle(&mut c, &mut tc, 4).expect("C pushes");
    assert_eq!(
        report.rejected.len(),
        1,
        "the p1 write is rejected: {report:?}"
    );
    let rejection = c.rejections().last().expect("a rejection record").clone();
    assert_eq!(rejection.code, "sync.forbidden", "{rejection:?}");
    let server_ids: Vec<String> = server_tasks(&mut connect(), &partition)
        .expect("server rows")
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert!(
        !server_ids.iter().any(|id| id == "sneaky"),
        "{server_ids:?}"
    );
}

#[test]
fn request_level_errors_reach_the_client_as_their_sync_code() {
    let partition = fresh_partition("real-client-errors");
    let mut c = new_client("typo-client").expect("client");
    c.subscribe(
        "typo".to_owned(),
        "tasks".to_owned(),
        vec![("team_id".to_owned(), vec!["t1".to_owned()])],
        None,
    )
    .expect("the client accepts any key locally");
    let mut t = PgTransport::new(connect(), &partition, "erin", Some(allow_projects(&["p1"])));
    c.mutate(vec![upsert_task(task_values(
        "e1",
        "p1",
        "must not land",
        false,
        None,
    ))])
    .expect("local write");
    let err = sync_idle(&mut c, &mut t, 6).expect_err("an undeclared scope key fails the round");
    assert!(err.starts_with("sync.invalid_subscription: "), "{err}");
    assert_eq!(
        c.pending_commit_ids().len(),
        1,
        "the commit stays in the outbox"
    );
    assert!(
        server_tasks(&mut connect(), &partition)
            .expect("server rows")
            .is_empty(),
        "the failed request pushed nothing"
    );
}

#[test]
fn a_client_on_an_unserved_schema_version_stops_at_the_floor() {
    let partition = fresh_partition("real-client-floor");
    let mut ir = syncular_integration_tests::fixtures::schema_ir();
    ir["version"] = json!(99);
    let mut c = syncular_client::SyncClient::new(
        "future-client".to_owned(),
        &ir,
        syncular_client::ClientLimits::default(),
    )
    .expect("client on schema 99");
    subscribe_projects(&mut c, "f-tasks", &["p1"]).expect("subscribe");
    c.mutate(vec![upsert_task(task_values(
        "f1",
        "p1",
        "from the future",
        false,
        None,
    ))])
    .expect("local write");
    let mut t = PgTransport::new(connect(), &partition, "fred", Some(allow_projects(&["p1"])));
    let report = sync_idle(&mut c, &mut t, 6).expect("the floor response is a normal response");
    let floor = report
        .schema_floor
        .clone()
        .expect("the client surfaced the schema floor");
    let registered: i32 = connect()
        .query_one("SELECT syncular.current_schema_version()", &[])
        .expect("current version")
        .get(0);
    assert_eq!(floor.latest_schema_version, Some(registered), "{floor:?}");
    assert!(floor.required_schema_version.is_some(), "{floor:?}");
    assert!(
        report.applied.is_empty() && report.rejected.is_empty(),
        "nothing processed: {report:?}"
    );
    assert_eq!(
        c.pending_commit_ids().len(),
        1,
        "the outbox is kept for after the upgrade"
    );
    assert!(server_tasks(&mut connect(), &partition)
        .expect("server rows")
        .is_empty());
}

#[test]
fn a_paged_bootstrap_under_concurrent_writes_converges_to_the_server_rows() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use syncular_integration_tests::wire::{commit, delete, upsert, RawSession, Task};

    let partition = fresh_partition("real-client-busy-bootstrap");
    let allowed = allow_projects(&["p1", "p2"]);
    // Seed 150 rows so the bootstrap needs many small pages.
    let mut seeder = RawSession::new(
        connect(),
        &partition,
        "wanda",
        "seeder",
        Some(allowed.clone()),
    );
    seeder.acquire_epoch().expect("epoch");
    let seed: Vec<_> = (0..150)
        .map(|i| {
            upsert(
                &Task::new(
                    format!("r{i:03}"),
                    if i % 2 == 0 { "p1" } else { "p2" },
                    format!("seed {i}"),
                ),
                None,
            )
        })
        .collect();
    seeder.push(vec![commit("seed", seed)]).expect("seed");

    // The writer keeps updating, deleting and re-inserting rows while B bootstraps.
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (mut s, done) = (seeder, Arc::clone(&done));
        std::thread::spawn(move || {
            for k in 0..240u32 {
                let i = (k * 37) % 160;
                let id = format!("r{i:03}");
                let project = if i % 2 == 0 { "p1" } else { "p2" };
                let op = if k % 5 == 4 {
                    delete(&id, None)
                } else {
                    upsert(&Task::new(id, project, format!("edit {k}")), None)
                };
                let out = s
                    .push(vec![commit(format!("w{k}"), vec![op])])
                    .expect("writer push");
                assert_ne!(
                    out[0].status,
                    ssp2::model::PushStatus::Rejected,
                    "{:?}",
                    out[0]
                );
            }
            done.store(true, Ordering::SeqCst);
        })
    };

    let limits = syncular_client::ClientLimits {
        limit_snapshot_rows: Some(7),
        max_snapshot_pages: Some(1),
        limit_commits: Some(5),
        ..Default::default()
    };
    let mut b = syncular_client::SyncClient::new(
        "busy-reader".to_owned(),
        &syncular_integration_tests::fixtures::schema_ir(),
        limits,
    )
    .expect("client B");
    subscribe_projects(&mut b, "b", &["p1", "p2"]).expect("subscribe");
    let mut tb = PgTransport::new(connect(), &partition, "bob", Some(allowed));
    let mut rounds = 0;
    while !done.load(Ordering::SeqCst) {
        syncular_integration_tests::clients::sync_once(&mut b, &mut tb)
            .expect("B round under load");
        rounds += 1;
        assert!(rounds < 5_000, "bounded");
    }
    writer.join().expect("writer");
    for _ in 0..20 {
        let report = sync_idle(&mut b, &mut tb, 50).expect("B catches up");
        if report.commits_applied == 0
            && report.segment_rows_applied == 0
            && report.bootstrapping.is_empty()
        {
            break;
        }
    }
    assert!(
        rounds > 3,
        "B synced while the writer ran ({rounds} rounds)"
    );

    let server: Vec<(String, i64, String)> = server_tasks(&mut connect(), &partition)
        .expect("server rows")
        .into_iter()
        .map(|r| (r.0, r.5, r.2))
        .collect();
    let held: Vec<(String, i64, String)> = held_snapshot(&b)
        .expect("B rows")
        .into_iter()
        .map(|r| {
            (
                r.0,
                r.1,
                r.2["title"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        held, server,
        "B converged to exactly the server's rows and versions"
    );
}
