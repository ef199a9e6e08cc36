//! Plain SQL writes become commits (issue 9), seen by the real client
//! `syncular-client` 0.15.48 syncing through `SELECT syncular.sync`:
//! - a client that bootstrapped before a plain `UPDATE` and `DELETE` receives
//!   both in its next incremental pull, with the bumped server version;
//! - a `COPY … FROM` is one commit that a bootstrapped client pulls;
//! - a client whose pending update is based on the version before a plain
//!   SQL write gets `sync.version_conflict` carrying the SQL-written row;
//! - a rolled-back plain write leaves no commit and no NOTIFY; a committed
//!   one delivers exactly one notification per statement, after COMMIT;
//! - a DELETE then re-INSERT of one id reaches a client as a delete, then
//!   the new row at version 1.

use std::io::Write;
use std::time::Duration;

use serde_json::json;
use ssp2::model::{Frame, Op};
use syncular_client::Mutation;
use syncular_integration_tests::capture::{
    commits, held_tasks, log_shape, set_partition, sql_writer, LogShape,
};
use syncular_integration_tests::clients::{
    new_client, subscribe_projects, sync_idle, task_values, upsert_task,
};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_projects, bound_statements, partition_name, register_schema, server_tasks, ServerTask,
    TASKS,
};
use syncular_integration_tests::notify::{expected_payload, CommitListener};
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::{db_message, decode_response, decode_task, Task};

const QUIET: Duration = Duration::from_millis(400);
const MAX_WAIT: Duration = Duration::from_secs(10);

fn fresh_partition(label: &str) -> String {
    let mut conn = connect();
    register_schema(&mut conn).expect("register the sample schema");
    partition_name(label)
}

/// One change of a pulled `COMMIT` frame: `(commit_seq, row id, op, row
/// version, decoded row)`.
type PulledChange = (i64, String, Op, Option<i64>, Option<Task>);

/// Every change the responses delivered in `COMMIT` frames, in order.
fn pulled_changes(responses: &[Vec<u8>]) -> Vec<PulledChange> {
    let mut out = Vec::new();
    for response in responses {
        let msg = decode_response(response).expect("response decodes");
        for frame in &msg.frames {
            if let Frame::Commit {
                commit_seq,
                changes,
                ..
            } = frame
            {
                for c in changes {
                    let row = c
                        .row
                        .as_deref()
                        .map(|r| decode_task(r).expect("pulled row decodes"));
                    out.push((*commit_seq, c.row_id.clone(), c.op, c.row_version, row));
                }
            }
        }
    }
    out
}

fn task(
    id: &str,
    project: &str,
    title: &str,
    done: bool,
    priority: Option<i64>,
    version: i64,
) -> ServerTask {
    (
        id.to_owned(),
        project.to_owned(),
        title.to_owned(),
        done,
        priority,
        version,
    )
}

/// The message of a failed statement, which must start with `code`.
fn expect_refusal(result: Result<u64, postgres::Error>, code: &str) -> String {
    let err = result.expect_err("the statement must fail");
    let message = db_message(&err);
    assert!(
        message.starts_with(&format!("{code}: ")),
        "expected {code}, got {message}"
    );
    message
}

#[test]
fn capture_update_and_delete_reach_a_bootstrapped_client_in_its_next_pull() {
    let partition = fresh_partition("capture-pull");
    let allowed = allow_projects(&["p1", "p2"]);

    // A (a real client) writes the rows: commit 1.
    let mut a = new_client("capture-writer").expect("client A");
    subscribe_projects(&mut a, "a-tasks", &["p1", "p2"]).expect("A subscribes");
    let mut ta = PgTransport::new(connect(), &partition, "alice", Some(allowed.clone()));
    a.mutate(vec![
        upsert_task(task_values("t1", "p1", "write the spec", false, Some(3))),
        upsert_task(task_values("t2", "p1", "review", false, None)),
        upsert_task(task_values("t3", "p2", "ship", true, Some(-7))),
    ])
    .expect("A inserts");
    let report = sync_idle(&mut a, &mut ta, 12).expect("A syncs");
    assert_eq!(report.applied.len(), 1, "{report:?}");

    // B bootstraps: three rows at version 1.
    let mut b = new_client("capture-reader").expect("client B");
    subscribe_projects(&mut b, "b-tasks", &["p1", "p2"]).expect("B subscribes");
    let mut tb = PgTransport::new(connect(), &partition, "bob", Some(allowed.clone()));
    let report = sync_idle(&mut b, &mut tb, 12).expect("B bootstraps");
    assert_eq!(report.segment_rows_applied, 3, "{report:?}");
    assert_eq!(
        held_tasks(&b).expect("B rows"),
        [
            task("t1", "p1", "write the spec", false, Some(3), 1),
            task("t2", "p1", "review", false, None, 1),
            task("t3", "p2", "ship", true, Some(-7), 1),
        ]
    );
    assert_eq!(b.subscription_state("b-tasks").expect("sub").cursor, 1);

    // Plain SQL, outside the sync protocol: one UPDATE, one DELETE.
    let mut sql = sql_writer(&partition, Some("ops-console"));
    let updated = sql
        .execute(
            "UPDATE public.tasks SET title = $2, priority = 9, done = true WHERE _sync_partition = $1 AND id = 't1'",
            &[&partition, &"renamed by sql"],
        )
        .map_err(|e| db_message(&e))
        .expect("plain UPDATE");
    assert_eq!(updated, 1);
    let deleted = sql
        .execute(
            "DELETE FROM public.tasks WHERE _sync_partition = $1 AND id = 't2'",
            &[&partition],
        )
        .map_err(|e| db_message(&e))
        .expect("plain DELETE");
    assert_eq!(deleted, 1);

    let mut admin = connect();
    assert_eq!(
        commits(&mut admin, &partition).expect("log")[1..],
        [
            (2, "sql:ops-console".to_owned(), "ops-console".to_owned(), 1),
            (3, "sql:ops-console".to_owned(), "ops-console".to_owned(), 1),
        ],
        "one commit per statement, by the configured actor"
    );
    assert_eq!(
        log_shape(&mut admin, &partition).expect("log shape"),
        LogShape::dense(3)
    );
    let server = server_tasks(&mut admin, &partition).expect("server rows");
    assert_eq!(
        server,
        [
            task("t1", "p1", "renamed by sql", true, Some(9), 2),
            task("t3", "p2", "ship", true, Some(-7), 1)
        ],
        "the UPDATE bumped t1 to version 2"
    );

    // B's next pull is incremental and carries exactly the two SQL commits.
    let before = tb.responses.len();
    let report = sync_idle(&mut b, &mut tb, 12).expect("B pulls");
    assert_eq!(
        (report.commits_applied, report.segment_rows_applied),
        (2, 0),
        "{report:?}"
    );
    let changes = pulled_changes(&tb.responses[before..]);
    let mut renamed = Task::new("t1", "p1", "renamed by sql");
    renamed.done = true;
    renamed.priority = Some(9);
    assert_eq!(
        changes,
        [
            (2, "t1".to_owned(), Op::Upsert, Some(2), Some(renamed)),
            (3, "t2".to_owned(), Op::Delete, None, None),
        ],
        "B pulled the UPDATE (row version 2) and the DELETE"
    );
    assert_eq!(b.subscription_state("b-tasks").expect("sub").cursor, 3);
    assert_eq!(
        held_tasks(&b).expect("B rows"),
        server,
        "B holds exactly the server's rows"
    );

    // A, which wrote the rows through the protocol, converges too.
    sync_idle(&mut a, &mut ta, 12).expect("A pulls");
    assert_eq!(held_tasks(&a).expect("A rows"), server);

    // A later client update based on the SQL version applies on top of it.
    a.mutate(vec![Mutation::Upsert {
        table: TASKS.to_owned(),
        values: task_values("t1", "p1", "client after sql", false, Some(9)),
        base_version: Some(2),
    }])
    .expect("A updates t1");
    let report = sync_idle(&mut a, &mut ta, 12).expect("A pushes");
    assert_eq!(
        (report.applied.len(), report.rejected.len()),
        (1, 0),
        "{report:?}"
    );
    sync_idle(&mut b, &mut tb, 12).expect("B pulls again");
    assert_eq!(
        held_tasks(&b).expect("B rows")[0],
        task("t1", "p1", "client after sql", false, Some(9), 3)
    );
}

#[test]
fn capture_copy_is_one_commit_that_a_bootstrapped_client_pulls() {
    let partition = fresh_partition("capture-copy");
    let allowed = allow_projects(&["p1", "p2", "p3"]);
    let mut b = new_client("copy-reader").expect("client B");
    subscribe_projects(&mut b, "b-tasks", &["p1", "p2", "p3"]).expect("B subscribes");
    let mut tb = PgTransport::new(connect(), &partition, "bob", Some(allowed));
    sync_idle(&mut b, &mut tb, 12).expect("B bootstraps an empty partition");
    assert!(held_tasks(&b).expect("B rows").is_empty());

    const ROWS: usize = 500;
    let mut data = String::new();
    for i in 0..ROWS {
        let priority = if i % 4 == 0 {
            "\\N".to_owned()
        } else {
            (i as i64 - 250).to_string()
        };
        data.push_str(&format!(
            "c{i:04}\tp{}\tcopied\\trow {i}\t{}\t{priority}\n",
            i % 3 + 1,
            i % 2 == 0
        ));
    }
    let mut sql = sql_writer(&partition, None);
    let mut writer = sql
        .copy_in("COPY public.tasks (id, project_id, title, done, priority) FROM STDIN")
        .expect("COPY starts");
    writer.write_all(data.as_bytes()).expect("COPY data");
    let copied = writer
        .finish()
        .map_err(|e| db_message(&e))
        .expect("COPY finishes");
    assert_eq!(copied, ROWS as u64);

    let mut admin = connect();
    let role: String = admin
        .query_one("SELECT current_user::text", &[])
        .expect("role")
        .get(0);
    assert_eq!(
        commits(&mut admin, &partition).expect("log"),
        [(1, format!("sql:{role}"), role, ROWS as i64)],
        "one COPY = one commit of every row; no actor_id set → the role"
    );
    let server = server_tasks(&mut admin, &partition).expect("server rows");
    assert_eq!(server.len(), ROWS);
    assert_eq!(
        server[1],
        task("c0001", "p2", "copied\trow 1", false, Some(-249), 1)
    );
    assert_eq!(
        server[4],
        task("c0004", "p2", "copied\trow 4", true, None, 1)
    );

    let before = tb.responses.len();
    let report = sync_idle(&mut b, &mut tb, 50).expect("B pulls the COPY");
    assert_eq!(
        (report.commits_applied, report.segment_rows_applied),
        (1, 0),
        "{report:?}"
    );
    let changes = pulled_changes(&tb.responses[before..]);
    assert_eq!(changes.len(), ROWS);
    assert!(
        changes
            .iter()
            .all(|c| c.0 == 1 && c.2 == Op::Upsert && c.3 == Some(1)),
        "{:?}",
        &changes[..3]
    );
    assert_eq!(held_tasks(&b).expect("B rows"), server);

    // A fresh client bootstraps the same rows.
    let mut c = new_client("copy-late").expect("client C");
    subscribe_projects(&mut c, "c-tasks", &["p1", "p2", "p3"]).expect("C subscribes");
    let mut tc = PgTransport::new(
        connect(),
        &partition,
        "carol",
        Some(allow_projects(&["p1", "p2", "p3"])),
    );
    let report = sync_idle(&mut c, &mut tc, 200).expect("C bootstraps");
    assert_eq!(report.segment_rows_applied as usize, ROWS, "{report:?}");
    assert_eq!(held_tasks(&c).expect("C rows"), server);
}

#[test]
fn capture_pending_update_on_the_old_version_conflicts_with_the_sql_row() {
    let partition = fresh_partition("capture-conflict");
    let allowed = allow_projects(&["p1"]);
    let mut a = new_client("capture-offline").expect("client A");
    subscribe_projects(&mut a, "a-tasks", &["p1"]).expect("A subscribes");
    let mut ta = PgTransport::new(connect(), &partition, "alice", Some(allowed));
    a.mutate(vec![
        upsert_task(task_values("t1", "p1", "original", false, Some(1))),
        upsert_task(task_values("t2", "p1", "second", false, None)),
    ])
    .expect("A inserts");
    sync_idle(&mut a, &mut ta, 12).expect("A syncs");
    assert_eq!(
        held_tasks(&a).expect("A rows"),
        [
            task("t1", "p1", "original", false, Some(1), 1),
            task("t2", "p1", "second", false, None, 1)
        ],
        "A holds both rows at server version 1"
    );

    // Plain SQL edits both rows (version 2) while A is offline.
    let mut sql = sql_writer(&partition, Some("backoffice"));
    let n = sql
        .execute(
            "UPDATE public.tasks SET title = 'edited in sql: ' || id, priority = 42
              WHERE _sync_partition = $1 AND id IN ('t1', 't2')",
            &[&partition],
        )
        .map_err(|e| db_message(&e))
        .expect("plain UPDATE");
    assert_eq!(n, 2);

    // A edits t1 and t2 offline, each commit based on version 1 — pending in the outbox.
    let pending: Vec<String> = ["t1", "t2"]
        .iter()
        .map(|id| {
            a.mutate(vec![Mutation::Upsert {
                table: TASKS.to_owned(),
                values: task_values(id, "p1", "edited offline", true, Some(1)),
                base_version: Some(1),
            }])
            .expect("A edits offline")
        })
        .collect();
    assert_eq!(a.pending_commit_ids(), pending);

    let report = sync_idle(&mut a, &mut ta, 12).expect("A syncs");
    assert!(
        report.applied.is_empty(),
        "nothing based on version 1 applies: {report:?}"
    );
    assert_eq!(report.conflicts, 2, "{report:?}");
    assert!(
        a.pending_commit_ids().is_empty(),
        "conflicts leave the outbox"
    );

    let conflicts = a.conflicts();
    assert_eq!(conflicts.len(), 2, "{conflicts:?}");
    for (conflict, (commit_id, row_id)) in conflicts.iter().zip(pending.iter().zip(["t1", "t2"])) {
        assert_eq!(conflict.code, "sync.version_conflict", "{conflict:?}");
        assert_eq!(
            (&conflict.client_commit_id, conflict.row_id.as_str()),
            (commit_id, row_id)
        );
        assert_eq!(
            conflict.server_version, 2,
            "the SQL write's version: {conflict:?}"
        );
        assert_eq!(
            conflict.server_row.get("title"),
            Some(&json!(format!("edited in sql: {row_id}"))),
            "{conflict:?}"
        );
        assert_eq!(
            conflict.server_row.get("priority"),
            Some(&json!(42)),
            "{conflict:?}"
        );
    }

    // The server kept the SQL rows; A now holds them too.
    let server = server_tasks(&mut connect(), &partition).expect("server rows");
    assert_eq!(
        server,
        [
            task("t1", "p1", "edited in sql: t1", false, Some(42), 2),
            task("t2", "p1", "edited in sql: t2", false, Some(42), 2),
        ]
    );
    assert_eq!(
        log_shape(&mut connect(), &partition).expect("log"),
        LogShape::dense(2),
        "rejected pushes commit nothing"
    );
    assert_eq!(held_tasks(&a).expect("A rows"), server);
}

#[test]
fn capture_notifies_once_per_committed_statement_and_never_for_a_rollback() {
    let partition = fresh_partition("capture-notify");
    let mut listener = CommitListener::listen(connect()).expect("LISTEN");
    let mut admin = connect();
    let mut w = connect();
    bound_statements(&mut w).expect("timeout");

    // 1. A rolled-back transaction of plain writes: no commit, no NOTIFY, no rows.
    {
        let mut tx = w.transaction().expect("begin");
        tx.execute(
            "SELECT pg_catalog.set_config('syncular.partition', $1, true)",
            &[&partition],
        )
        .expect("SET LOCAL syncular.partition");
        let n = tx
            .execute(
                "INSERT INTO public.tasks (id, project_id, title, done) VALUES ('r1', 'p1', 'doomed', false), ('r2', 'p2', 'doomed', true)",
                &[],
            )
            .map_err(|e| db_message(&e))
            .expect("INSERT in the doomed transaction");
        assert_eq!(n, 2);
        tx.execute(
            "UPDATE public.tasks SET title = 'still doomed' WHERE _sync_partition = $1",
            &[&partition],
        )
        .map_err(|e| db_message(&e))
        .expect("UPDATE in the doomed transaction");
        tx.rollback().expect("rollback");
    }
    assert!(
        listener
            .drain(&partition, QUIET, MAX_WAIT)
            .expect("drain")
            .is_empty(),
        "no NOTIFY for a rollback"
    );
    assert_eq!(
        log_shape(&mut admin, &partition).expect("log"),
        LogShape::dense(0)
    );
    assert!(server_tasks(&mut admin, &partition)
        .expect("rows")
        .is_empty());

    // 2. A committed transaction of several statements, one of them undone by
    //    ROLLBACK TO SAVEPOINT, one touching no row: nothing while it is
    //    open, then exactly one notification per statement that wrote rows.
    let mut tx = w.transaction().expect("begin");
    tx.execute(
        "SELECT pg_catalog.set_config('syncular.partition', $1, true)",
        &[&partition],
    )
    .expect("SET LOCAL syncular.partition");
    let run = |tx: &mut postgres::Transaction<'_>, sql: &str| -> u64 {
        tx.execute(sql, &[&partition])
            .map_err(|e| db_message(&e))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    let inserted = run(
        &mut tx,
        "INSERT INTO public.tasks (id, project_id, title, done, priority)
         SELECT x.id, x.p, 'new', false, NULL FROM (VALUES ('a', 'p1'), ('b', 'p1'), ('c', 'p2')) x(id, p)
          WHERE $1::text IS NOT NULL",
    );
    assert_eq!(inserted, 3);
    assert_eq!(
        run(
            &mut tx,
            "UPDATE public.tasks SET done = true WHERE _sync_partition = $1 AND id IN ('a', 'b')"
        ),
        2
    );
    assert_eq!(
        run(
            &mut tx,
            "UPDATE public.tasks SET done = true WHERE _sync_partition = $1 AND id = 'absent'"
        ),
        0,
        "a statement that touches no row writes no commit"
    );
    assert_eq!(
        run(
            &mut tx,
            "DELETE FROM public.tasks WHERE _sync_partition = $1 AND id = 'c'"
        ),
        1
    );
    tx.batch_execute("SAVEPOINT s").expect("savepoint");
    assert_eq!(
        run(&mut tx, "INSERT INTO public.tasks (id, project_id, title, done) SELECT 'undone', 'p1', 'x', false WHERE $1::text IS NOT NULL"),
        1
    );
    tx.batch_execute("ROLLBACK TO SAVEPOINT s")
        .expect("rollback to savepoint");
    assert_eq!(
        run(
            &mut tx,
            "UPDATE public.tasks SET title = 'kept' WHERE _sync_partition = $1 AND id = 'a'"
        ),
        1
    );
    assert!(
        listener
            .drain(&partition, QUIET, MAX_WAIT)
            .expect("drain")
            .is_empty(),
        "nothing is announced while the transaction is open"
    );
    tx.commit().expect("commit");
    let seen = listener
        .wait_for(&partition, 4, QUIET, MAX_WAIT)
        .expect("listen");
    let payloads: Vec<String> = seen.into_iter().map(|s| s.payload).collect();
    assert_eq!(
        payloads,
        (1..=4).map(|seq| expected_payload(&partition, seq)).collect::<Vec<_>>(),
        "one notification per statement that wrote rows, in commit order; none for the undone savepoint"
    );
    let role: String = admin
        .query_one("SELECT current_user::text", &[])
        .expect("role")
        .get(0);
    let client = format!("sql:{role}");
    assert_eq!(
        commits(&mut admin, &partition).expect("log"),
        [
            (1, client.clone(), role.clone(), 3),
            (2, client.clone(), role.clone(), 2),
            (3, client.clone(), role.clone(), 1),
            (4, client.clone(), role.clone(), 1),
        ]
    );
    assert_eq!(
        log_shape(&mut admin, &partition).expect("log"),
        LogShape::dense(4)
    );

    // 3. SET LOCAL ended with the transaction: a plain write now fails, as do
    //    a scope change, a written computed column, a NULL in a non-nullable
    //    column and a TRUNCATE; none commits or notifies.
    expect_refusal(
        w.execute(
            "UPDATE public.tasks SET title = 'no partition' WHERE _sync_partition = $1",
            &[&partition],
        ),
        "syncular.partition_required",
    );
    set_partition(&mut w, &partition, None).expect("session setting");
    expect_refusal(
        w.execute(
            "UPDATE public.tasks SET project_id = 'p9' WHERE _sync_partition = $1 AND id = 'a'",
            &[&partition],
        ),
        "syncular.write_refused",
    );
    expect_refusal(
        w.execute(
            "UPDATE public.tasks SET _sync_version = 99 WHERE _sync_partition = $1 AND id = 'a'",
            &[&partition],
        ),
        "syncular.write_refused",
    );
    expect_refusal(
        w.execute("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('n', 'p1', NULL, false)", &[]),
        "syncular.invalid_row",
    );
    {
        // In a transaction that is rolled back whatever happens: a TRUNCATE that
        // wrongly succeeded must not wipe the other tests' partitions.
        let mut tx = w.transaction().expect("begin");
        expect_refusal(
            tx.execute("TRUNCATE public.tasks", &[]),
            "syncular.write_refused",
        );
        tx.rollback().expect("rollback");
    }
    assert!(
        listener
            .drain(&partition, QUIET, MAX_WAIT)
            .expect("drain")
            .is_empty(),
        "failed statements announce nothing"
    );
    assert_eq!(
        log_shape(&mut admin, &partition).expect("log"),
        LogShape::dense(4)
    );

    // 4. Autocommit statements: one notification each.
    assert_eq!(
        w.execute(
            "UPDATE public.tasks SET priority = 5 WHERE _sync_partition = $1",
            &[&partition]
        )
        .map_err(|e| db_message(&e))
        .expect("autocommit UPDATE"),
        2
    );
    assert_eq!(
        w.execute(
            "DELETE FROM public.tasks WHERE _sync_partition = $1 AND id = 'b'",
            &[&partition]
        )
        .map_err(|e| db_message(&e))
        .expect("autocommit DELETE"),
        1
    );
    let seen = listener
        .wait_for(&partition, 2, QUIET, MAX_WAIT)
        .expect("listen");
    let payloads: Vec<String> = seen.into_iter().map(|s| s.payload).collect();
    assert_eq!(
        payloads,
        [
            expected_payload(&partition, 5),
            expected_payload(&partition, 6)
        ]
    );
    assert_eq!(
        log_shape(&mut admin, &partition).expect("log"),
        LogShape::dense(6)
    );
    assert_eq!(
        server_tasks(&mut admin, &partition).expect("rows"),
        [task("a", "p1", "kept", true, Some(5), 4)],
        "a: inserted (1), done (2), renamed (3), priority (4)"
    );
}

#[test]
fn capture_delete_then_reinsert_reaches_a_client_as_a_delete_then_version_1() {
    // A DELETE followed by a re-INSERT of the same id reaches a client as a
    // delete then a fresh row at version 1 (tombstone cleared).
    let partition = fresh_partition("capture-reinsert");
    let mut b = new_client("reinsert-reader").expect("client B");
    subscribe_projects(&mut b, "b-tasks", &["p1"]).expect("B subscribes");
    let mut tb = PgTransport::new(connect(), &partition, "bob", Some(allow_projects(&["p1"])));
    let mut sql = sql_writer(&partition, Some("ops"));
    sql.execute(
        "INSERT INTO public.tasks (id, project_id, title, done) VALUES ('x', 'p1', 'one', false)",
        &[],
    )
    .map_err(|e| db_message(&e))
    .expect("insert");
    sql.execute(
        "UPDATE public.tasks SET title = 'two' WHERE _sync_partition = $1 AND id = 'x'",
        &[&partition],
    )
    .map_err(|e| db_message(&e))
    .expect("update");
    sync_idle(&mut b, &mut tb, 12).expect("B bootstraps");
    assert_eq!(
        held_tasks(&b).expect("B rows"),
        [task("x", "p1", "two", false, None, 2)]
    );

    sql.execute(
        "DELETE FROM public.tasks WHERE _sync_partition = $1 AND id = 'x'",
        &[&partition],
    )
    .map_err(|e| db_message(&e))
    .expect("delete");
    sql.execute(
        "INSERT INTO public.tasks (id, project_id, title, done) VALUES ('x', 'p1', 'again', true)",
        &[],
    )
    .map_err(|e| db_message(&e))
    .expect("re-insert");
    let tombstones: i64 = connect()
        .query_one(
            "SELECT count(*) FROM syncular.sync_tombstones WHERE partition = $1",
            &[&partition],
        )
        .expect("tombstones")
        .get(0);
    assert_eq!(tombstones, 0, "the re-insert cleared the tombstone");
    let before = tb.responses.len();
    let report = sync_idle(&mut b, &mut tb, 12).expect("B pulls");
    assert_eq!(report.commits_applied, 2, "{report:?}");
    let ops: Vec<(i64, Op, Option<i64>)> = pulled_changes(&tb.responses[before..])
        .into_iter()
        .map(|c| (c.0, c.2, c.3))
        .collect();
    assert_eq!(ops, [(3, Op::Delete, None), (4, Op::Upsert, Some(1))]);
    let server = server_tasks(&mut connect(), &partition).expect("rows");
    assert_eq!(server, [task("x", "p1", "again", true, None, 1)]);
    assert_eq!(held_tasks(&b).expect("B rows"), server);

    // A fresh client bootstraps the same.
    let mut c = new_client("reinsert-late").expect("client C");
    subscribe_projects(&mut c, "c-tasks", &["p1"]).expect("C subscribes");
    let mut tc = PgTransport::new(
        connect(),
        &partition,
        "carol",
        Some(allow_projects(&["p1"])),
    );
    sync_idle(&mut c, &mut tc, 12).expect("C bootstraps");
    assert_eq!(held_tasks(&c).expect("C rows"), server);
}
