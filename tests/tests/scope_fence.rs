//! The scope fence across connections (§3.1, §3.2, §3.4): an update cannot
//! re-home a row into another scope — the stored scope stays, every payload
//! served (COMMIT change rows and bootstrap rows) carries the stored scope
//! value, and a reader fenced to the other scope never receives the row.

use ssp2::model::{Frame, PushStatus};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_projects, partition_name, register_schema, server_tasks,
};
use syncular_integration_tests::wire::{
    commit, delivered, pull_header, subscription, upsert, Delivered, RawSession, Task,
};

fn pull(s: &mut RawSession, project: &str, cursor: i64) -> Delivered {
    let msg = s
        .round(vec![
            pull_header(0, 0, 0, 0b0011),
            subscription("s", "tasks", &[("project_id", &[project])], cursor, None),
        ])
        .expect("pull");
    assert!(
        msg.frames
            .iter()
            .any(|f| matches!(f, Frame::SubStart { .. })),
        "{msg:?}"
    );
    delivered(&msg).expect("rows decode")
}

#[test]
fn an_update_cannot_move_a_row_into_another_scope() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("scope-fence");
    let mut writer = RawSession::new(
        connect(),
        &partition,
        "alice",
        "writer",
        Some(allow_projects(&["p1", "p2"])),
    );
    writer.acquire_epoch().expect("epoch");
    let out = writer
        .push(vec![commit(
            "c1",
            vec![upsert(&Task::new("t1", "p1", "lives in p1"), None)],
        )])
        .expect("insert");
    assert_eq!(out[0].status, PushStatus::Applied);
    // The writer (allowed in both) re-sends t1 claiming project p2.
    let out = writer
        .push(vec![commit(
            "c2",
            vec![upsert(&Task::new("t1", "p2", "renamed, moved?"), None)],
        )])
        .expect("update");
    assert_eq!(
        out[0].status,
        PushStatus::Applied,
        "the update applies (scope columns are stripped): {:?}",
        out[0]
    );

    let server = server_tasks(&mut admin, &partition).expect("server rows");
    assert_eq!(server.len(), 1);
    assert_eq!(
        (server[0].1.as_str(), server[0].2.as_str()),
        ("p1", "renamed, moved?"),
        "the stored scope stays p1, the other columns update"
    );

    // A reader fenced to p2 never receives t1, by bootstrap or by log.
    let mut p2_reader = RawSession::new(
        connect(),
        &partition,
        "pat",
        "p2-reader",
        Some(allow_projects(&["p2"])),
    );
    p2_reader.acquire_epoch().expect("epoch");
    let boot = pull(&mut p2_reader, "p2", -1);
    let log = pull(&mut p2_reader, "p2", 0);
    assert!(
        boot.rows.is_empty() && log.rows.is_empty(),
        "p2 reader got {boot:?} {log:?}"
    );
    assert!(log.commit_seqs.is_empty(), "no p2 commit exists: {log:?}");

    // A p1 reader receives t1 — and every payload says p1.
    let mut p1_reader = RawSession::new(
        connect(),
        &partition,
        "paul",
        "p1-reader",
        Some(allow_projects(&["p1"])),
    );
    p1_reader.acquire_epoch().expect("epoch");
    let boot = pull(&mut p1_reader, "p1", -1);
    let log = pull(&mut p1_reader, "p1", 0);
    assert_eq!(boot.rows.len(), 1, "{boot:?}");
    assert_eq!(log.commit_seqs, [1, 2], "{log:?}");
    for row in boot.rows.iter().chain(log.rows.iter()) {
        assert_eq!(
            row.project_id, "p1",
            "a served payload claims another scope: {row:?}"
        );
    }
    assert_eq!(log.rows[1].title, "renamed, moved?");
    assert!(
        log.change_scopes
            .iter()
            .all(|(k, v)| k == "project_id" && v == "p1"),
        "{log:?}"
    );
}
