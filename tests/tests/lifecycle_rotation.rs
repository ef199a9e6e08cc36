//! The log's lifecycle end to end with real parts (SPEC §2.1 backup-restore rule, §4.6
//! pruning horizon, §8 realtime): `syncular.rotate_log_epoch`, `CALL syncular.drop_partition`
//! and `CALL syncular.prune`, each driven by an operator connection while real
//! `syncular-client` 0.15.48 instances (SQL transport, or the reference gateway over
//! HTTP/WebSocket) keep syncing.
//!
//! - a rotation resets every client: the one with a pending outbox and a lost ack re-bootstraps,
//!   replays its outbox (the lost-ack commit is answered `cached`, nothing is applied twice) and
//!   ends with exactly the server's rows; an idle client converges to the same rows;
//! - a wire-version-1 request served before a rotation is refused after it
//!   (`sync.client_wire_unsupported`), nothing stored; an unknown partition is created rotated;
//! - a rotation reaches open realtime sessions through the gateway without any new commit
//!   (`reset-required` wake), no delta is served to a session still on the old epoch, and
//!   deltas resume after the client's recovery round;
//! - after a (simulated, per-partition) restore to an earlier point plus a rotation, a gateway
//!   that kept running delivers every commit of the new timeline;
//! - `CALL syncular.drop_partition` refuses to run inside a transaction block, otherwise deletes
//!   exactly the partition's rows everywhere (another partition untouched), and both a fresh and
//!   an old client end with zero rows;
//! - pruning (`CALL syncular.prune`, and the same through `advance_horizon` + `prune_batch`)
//!   returns its counts, keeps the horizon at an active laggard's cursor, keeps exactly the
//!   newest 1,000 commits once nobody holds them, the laggard converges through `reset` and
//!   re-bootstrap, expired client records go; the procedure refuses a transaction block.
//!
//! Every test uses its own partitions and never calls a lifecycle function with a NULL partition
//! (that would touch the partitions of tests running in parallel).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use postgres::Client;
use serde_json::Value;
use ssp2::model::{Frame, Message, MsgKind, PushStatus, SubStatus};
use syncular_client::{CommitOutcomeStatus, SegmentRequest, SyncClient, Transport, TransportError};
use syncular_integration_tests::clients::{
    delete_task, held_snapshot, new_client, subscribe_projects, sync_idle, task_values,
    upsert_task, HeldRow,
};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_projects, fingerprint, partition_name, register_schema, server_tasks, Coverage,
};
use syncular_integration_tests::gateway::{grant, setup, stored_cursor, wait_until, Gateway, Peer};
use syncular_integration_tests::transport::{call_sync, PgTransport};
use syncular_integration_tests::wire::{
    commit, decode_response, delivered, pull_header, push_outcomes, resp_header_epoch,
    subscription, upsert, RawSession, Task, SCHEMA_VERSION,
};

// ---------------------------------------------------------------------------------------------
// helpers

fn admin() -> Client {
    let mut conn = connect();
    register_schema(&mut conn).expect("register the sample schema");
    conn
}

fn max_commit_seq(conn: &mut Client, partition: &str) -> i64 {
    conn.query_opt(
        "SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1",
        &[&partition],
    )
    .expect("read max_commit_seq")
    .map_or(0, |r| r.get(0))
}

fn horizon_seq(conn: &mut Client, partition: &str) -> i64 {
    conn.query_one(
        "SELECT horizon_seq FROM syncular.sync_partitions WHERE partition = $1",
        &[&partition],
    )
    .expect("read horizon_seq")
    .get(0)
}

/// `(log_epoch, epoch_required)` of the partition's registry row.
fn registry(conn: &mut Client, partition: &str) -> Option<(String, bool)> {
    conn.query_opt(
        "SELECT log_epoch, epoch_required FROM syncular.sync_partition_registry WHERE partition = $1",
        &[&partition],
    )
    .expect("read the registry")
    .map(|r| (r.get(0), r.get(1)))
}

fn count(conn: &mut Client, table: &str, partition: &str) -> i64 {
    conn.query_one(
        format!("SELECT count(*) FROM syncular.{table} WHERE partition = $1").as_str(),
        &[&partition],
    )
    .unwrap_or_else(|e| panic!("count {table}: {e}"))
    .get(0)
}

/// One row of `SELECT * FROM syncular.rotate_log_epoch($1)`.
struct Rotation {
    partition: String,
    log_epoch: String,
    clients_deleted: i64,
}

fn rotate(conn: &mut Client, partition: &str) -> Rotation {
    let rows = conn
        .query("SELECT * FROM syncular.rotate_log_epoch($1)", &[&partition])
        .expect("rotate_log_epoch");
    assert_eq!(rows.len(), 1, "one row for the one rotated partition");
    Rotation {
        partition: rows[0].get("partition"),
        log_epoch: rows[0].get("log_epoch"),
        clients_deleted: rows[0].get("clients_deleted"),
    }
}

/// The server's `tasks` rows of `partition` in the shape a client holds them (id, version, values).
fn server_held(conn: &mut Client, partition: &str) -> Vec<HeldRow> {
    server_tasks(conn, partition)
        .expect("server rows")
        .into_iter()
        .map(|(id, project, title, done, priority, version)| {
            let values = task_values(&id, &project, &title, done, priority);
            (id, version, values)
        })
        .collect()
}

fn ids(rows: &[HeldRow]) -> Vec<&str> {
    rows.iter().map(|r| r.0.as_str()).collect()
}

fn db_error(e: &postgres::Error) -> (String, String, Option<Value>) {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("expected a server error, got {e}"));
    (
        db.code().code().to_owned(),
        db.message().to_owned(),
        db.detail().and_then(|d| serde_json::from_str(d).ok()),
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

const DAY_MS: i64 = 86_400_000;

/// A transport that can lose the response of one round after the server committed it: the
/// "ack" of the commits that round pushed never reaches the client (§2.3, §7.2), so they stay
/// in its outbox and are delivered again later.
struct LossyTransport {
    inner: PgTransport,
    lose_next_response: bool,
}

impl Transport for LossyTransport {
    fn sync(&mut self, request: &[u8]) -> Result<Vec<u8>, TransportError> {
        let response = self.inner.sync(request)?;
        if std::mem::take(&mut self.lose_next_response) {
            return Err(TransportError::new(
                "transport.failed",
                "connection reset after the request was sent (the response was lost)",
            ));
        }
        Ok(response)
    }

    fn realtime_sync(&mut self, request: &[u8]) -> Result<Vec<u8>, TransportError> {
        self.sync(request)
    }

    fn download_segment(&mut self, request: &SegmentRequest) -> Result<Vec<u8>, TransportError> {
        self.inner.download_segment(request)
    }

    fn realtime_connect(&mut self) -> Result<(), TransportError> {
        self.inner.realtime_connect()
    }

    fn realtime_send(&mut self, text: &str) -> Result<(), TransportError> {
        self.inner.realtime_send(text)
    }

    fn realtime_close(&mut self) -> Result<(), TransportError> {
        self.inner.realtime_close()
    }
}

fn sync_lossy(
    client: &mut SyncClient,
    t: &mut LossyTransport,
    max_rounds: u32,
) -> Result<syncular_client::SyncReport, String> {
    match client.sync_until_idle(t, Some(max_rounds)) {
        syncular_client::SyncOutcome::Ok(r) => Ok(r),
        syncular_client::SyncOutcome::Failed {
            error_code,
            message,
        } => Err(format!("{error_code}: {message}")),
    }
}

/// Every `SUB_START` of the responses: `(subscription id, status, reasonCode)`.
fn sub_starts(responses: &[Vec<u8>]) -> Vec<(String, SubStatus, String)> {
    responses
        .iter()
        .flat_map(|r| decode_response(r).expect("response decodes").frames)
        .filter_map(|f| match f {
            Frame::SubStart {
                id,
                status,
                reason_code,
                ..
            } => Some((id, status, reason_code)),
            _ => None,
        })
        .collect()
}

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

fn v1_request(client_id: &str, frames: Vec<Frame>) -> Vec<u8> {
    let mut all = vec![Frame::ReqHeader {
        client_id: client_id.to_owned(),
        schema_version: SCHEMA_VERSION,
        log_epoch: None,
    }];
    all.extend(frames);
    ssp2::encode_message(&Message {
        wire_version: 1,
        msg_kind: MsgKind::Request,
        frames: all,
    })
}

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

// ---------------------------------------------------------------------------------------------
// 3. rotation fences realtime sessions (gateway)

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
// 4. CALL syncular.drop_partition

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
        let mut tx = op.transaction().unwrap();
        let err = tx
            .query("CALL syncular.drop_partition($1, 3)", &[&doomed])
            .expect_err("refused inside BEGIN");
        let (sqlstate, message, _) = db_error(&err);
        assert_eq!(
            (sqlstate.as_str(), message.as_str()),
            ("2D000", "invalid transaction termination"),
            "{err}"
        );
        tx.rollback().unwrap();
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
// 5. CALL syncular.prune

#[derive(Debug, PartialEq, Eq)]
struct PruneCounts {
    partitions: i32,
    commits: i64,
    push_results: i64,
    clients: i64,
}

/// How the scenario prunes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// `CALL syncular.prune(partition, batch_rows)` (outside a transaction block).
    Procedure,
    /// What the procedure does, one statement (= one transaction) at a time:
    /// `syncular.advance_horizon`, then `syncular.prune_batch` until `done`.
    BatchFunctions,
}

fn prune(conn: &mut Client, via: Via, partition: &str, batch_rows: i32) -> PruneCounts {
    match via {
        Via::Procedure => {
            let row = conn
                .query_one("CALL syncular.prune($1, $2)", &[&partition, &batch_rows])
                .unwrap_or_else(|e| panic!("CALL syncular.prune($1, {batch_rows}) outside a transaction block failed: {:?}", db_error(&e)));
            PruneCounts {
                partitions: row.get("partitions"),
                commits: row.get("commits"),
                push_results: row.get("push_results"),
                clients: row.get("clients"),
            }
        }
        Via::BatchFunctions => {
            conn.query_one("SELECT syncular.advance_horizon($1)", &[&partition])
                .expect("advance_horizon");
            let mut n = PruneCounts {
                partitions: 1,
                commits: 0,
                push_results: 0,
                clients: 0,
            };
            for _ in 0..1000 {
                let b = conn
                    .query_one(
                        "SELECT commits, push_results, clients, fence_busy, done FROM syncular.prune_batch($1, $2)",
                        &[&partition, &batch_rows],
                    )
                    .expect("prune_batch");
                let (commits, results, clients): (i64, i64, i64) = (b.get(0), b.get(1), b.get(2));
                let (busy, done): (bool, bool) = (b.get(3), b.get(4));
                assert!(
                    commits <= i64::from(batch_rows),
                    "a batch is bounded: {commits} > {batch_rows}"
                );
                assert!(!busy, "nobody reads this partition's log");
                n.commits += commits;
                n.push_results += results;
                n.clients += clients;
                if done {
                    return n;
                }
            }
            panic!("prune_batch never reported done");
        }
    }
}

/// Fails as of main 8910311: the procedure's body calls `pg_catalog.coalesce(names,
/// ARRAY[]::text[])` (sql/lifecycle.sql and the 0.1.0→0.2.0 upgrade script) — COALESCE is SQL
/// syntax, not a function, so every `CALL syncular.prune(…)` fails with 42883 `function
/// pg_catalog.coalesce(text[], text[]) does not exist`. With `COALESCE(…)` unqualified this test
/// passes (checked by replacing the procedure on the throwaway server).
#[test]
fn lifecycle_prune_procedure_keeps_the_newest_1000_commits_and_a_laggard_converges() {
    prune_scenario(Via::Procedure);
}

#[test]
fn lifecycle_prune_batch_functions_keep_the_newest_1000_commits_and_a_laggard_converges() {
    prune_scenario(Via::BatchFunctions);
}

/// A partition with > 1,000 commits, one client C that synced early and then went away:
/// pruning keeps the horizon at C's cursor while C is active, keeps exactly the newest 1,000
/// commits once C is inactive (`syncular.now_ms` 15 days ahead on the operator's session), C
/// converges through `reset` (`sync.cursor_expired`) and re-bootstrap, and 31 days ahead its
/// client record expires.
fn prune_scenario(via: Via) {
    let mut op = admin();
    let partition = partition_name(if via == Via::Procedure {
        "prune-call"
    } else {
        "prune-batches"
    });
    let allowed = allow_projects(&["p1"]);

    // C syncs two commits (ten rows), then stays away.
    let mut c = new_client("prune-c").expect("client C");
    subscribe_projects(&mut c, "c-tasks", &["p1"]).unwrap();
    let mut tc = PgTransport::new(connect(), &partition, "carl", Some(allowed.clone()));
    c.mutate(
        (0..5)
            .map(|i| upsert_task(task_values(&format!("r{i}"), "p1", "v0", false, None)))
            .collect(),
    )
    .unwrap();
    c.mutate(
        (5..10)
            .map(|i| upsert_task(task_values(&format!("r{i}"), "p1", "v0", false, None)))
            .collect(),
    )
    .unwrap();
    sync_idle(&mut c, &mut tc, 12).unwrap();
    let c_cursor: i64 = op
        .query_one("SELECT cursor FROM syncular.sync_clients WHERE partition = $1 AND client_id = 'prune-c'", &[&partition])
        .unwrap()
        .get(0);
    assert_eq!(c_cursor, 2);

    // ~1,200 captured plain-SQL commits: updates, a few deletes (tombstones in the pruned range)
    // and inserts.
    let mut writer = connect();
    writer
        .batch_execute(&format!("SET syncular.partition = '{partition}'"))
        .unwrap();
    writer
        .batch_execute(
            "DO $$ BEGIN
               FOR i IN 1..1500 LOOP
                 UPDATE public.tasks SET title = 'rev ' || i, done = (i % 2 = 0)
                  WHERE _sync_partition = current_setting('syncular.partition') AND id = 'r' || (i % 10);
                 IF i = 7 THEN
                   DELETE FROM public.tasks WHERE _sync_partition = current_setting('syncular.partition') AND id IN ('r1', 'r3');
                 END IF;
                 IF i % 150 = 0 THEN
                   INSERT INTO public.tasks (id, project_id, title, done, priority) VALUES ('n' || i, 'p1', 'new ' || i, false, i);
                 END IF;
               END LOOP;
             END $$",
        )
        .unwrap();
    let max = max_commit_seq(&mut op, &partition);
    assert!(max > 1100, "enough commits to prune: {max}");
    assert_eq!(count(&mut op, "sync_commits", &partition), max);

    // Now: C is active and holds the horizon at its cursor.
    let n = prune(&mut op, via, &partition, 100);
    assert_eq!(
        (n.partitions, n.commits, n.push_results, n.clients),
        (1, c_cursor, 0, 0)
    );
    assert_eq!(
        horizon_seq(&mut op, &partition),
        c_cursor,
        "an active laggard holds the horizon"
    );
    let stats = op
        .query_one("SELECT * FROM syncular.partition_stats($1)", &[&partition])
        .unwrap();
    assert_eq!(
        stats
            .get::<_, Option<String>>("laggard_client_id")
            .as_deref(),
        Some("prune-c")
    );
    assert_eq!(stats.get::<_, i64>("retained_commits"), max - c_cursor);

    // Fifteen days later C is no longer active: everything but the newest 1,000 commits goes.
    op.batch_execute(&format!(
        "SET syncular.now_ms = '{}'",
        now_ms() + 15 * DAY_MS
    ))
    .unwrap();
    let stats = op
        .query_one("SELECT * FROM syncular.partition_stats($1)", &[&partition])
        .unwrap();
    assert_eq!(stats.get::<_, i64>("active_clients"), 0);
    assert_eq!(stats.get::<_, i64>("prune_target"), max - 1000);
    let n = prune(&mut op, via, &partition, 75);
    assert_eq!(
        (n.partitions, n.commits, n.push_results, n.clients),
        (1, max - 1000 - c_cursor, 0, 0)
    );
    assert_eq!(horizon_seq(&mut op, &partition), max - 1000);
    assert_eq!(
        count(&mut op, "sync_commits", &partition),
        1000,
        "exactly the newest 1,000 commits stay"
    );
    let lowest: i64 = op
        .query_one(
            "SELECT min(commit_seq) FROM syncular.sync_commits WHERE partition = $1",
            &[&partition],
        )
        .unwrap()
        .get(0);
    assert_eq!(lowest, max - 999);
    let stale: i64 = op
        .query_one(
            "SELECT (SELECT count(*) FROM syncular.sync_changes WHERE partition = $1 AND commit_seq <= $2)
                  + (SELECT count(*) FROM syncular.sync_change_scopes WHERE partition = $1 AND commit_seq <= $2)
                  + (SELECT count(*) FROM syncular.sync_tombstones WHERE partition = $1 AND commit_seq <= $2)",
            &[&partition, &(max - 1000)],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        stale, 0,
        "no change, change-scope entry or tombstone at or below the horizon"
    );
    assert_eq!(
        count(&mut op, "sync_push_results", &partition),
        2,
        "C's push outcomes are kept"
    );
    // A second pass has nothing to do.
    let n = prune(&mut op, via, &partition, 75);
    assert_eq!(
        (n.partitions, n.commits, n.push_results, n.clients),
        (1, 0, 0, 0)
    );
    op.batch_execute("RESET syncular.now_ms").unwrap();

    // C comes back with cursor 2 < horizon: reset (sync.cursor_expired), re-bootstrap, converged.
    let first = tc.responses.len();
    let report = sync_idle(&mut c, &mut tc, 12).expect("C recovers");
    assert_eq!(report.resets, ["c-tasks"], "{report:?}");
    let starts = sub_starts(&tc.responses[first..]);
    assert_eq!(
        starts.first().map(|s| (s.1, s.2.as_str())),
        Some((SubStatus::Reset, "sync.cursor_expired")),
        "{starts:?}"
    );
    let server = server_held(&mut op, &partition);
    assert!(
        !ids(&server).contains(&"r1") && ids(&server).contains(&"n1500"),
        "{:?}",
        ids(&server)
    );
    assert_eq!(
        held_snapshot(&c).unwrap(),
        server,
        "C holds exactly the server's rows, deleted ones gone"
    );
    assert_eq!(c.subscription_state("c-tasks").unwrap().cursor, max);

    // Thirty-one days later C's client record has expired as well.
    op.batch_execute(&format!(
        "SET syncular.now_ms = '{}'",
        now_ms() + 31 * DAY_MS
    ))
    .unwrap();
    let n = prune(&mut op, via, &partition, 75);
    op.batch_execute("RESET syncular.now_ms").unwrap();
    assert_eq!(
        (n.partitions, n.commits, n.push_results, n.clients),
        (1, 0, 0, 1)
    );
    assert_eq!(count(&mut op, "sync_clients", &partition), 0);
    assert_eq!(
        horizon_seq(&mut op, &partition),
        max - 1000,
        "the newest 1,000 still stay"
    );

    if via == Via::Procedure {
        // Inside a transaction block the procedure cannot COMMIT between batches: refused.
        let mut tx = op.transaction().unwrap();
        let err = tx
            .query("CALL syncular.prune($1, 100)", &[&partition])
            .expect_err("refused inside BEGIN");
        let (sqlstate, message, _) = db_error(&err);
        assert_eq!(
            (sqlstate.as_str(), message.as_str()),
            ("2D000", "invalid transaction termination"),
            "{err}"
        );
        tx.rollback().unwrap();
    }
}

/// Every table holding rows of a partition: `(qualified name, partition column)` — the
/// `syncular.sync_*` tables (`partition`) and the app tables (`_sync_partition`).
fn partition_tables(conn: &mut Client) -> Vec<(String, String)> {
    conn.query(
        "SELECT format('%I.%I', c.table_schema, c.table_name), c.column_name::text
           FROM information_schema.columns c
           JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
          WHERE t.table_type = 'BASE TABLE'
            AND ((c.table_schema = 'syncular' AND c.column_name = 'partition')
              OR (c.table_schema NOT IN ('syncular', 'pg_catalog', 'information_schema') AND c.column_name = '_sync_partition'))
          ORDER BY 1",
        &[],
    )
    .expect("list the partition's tables")
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A backup of one partition's authoritative storage (every row of it, in session temp tables).
fn backup_partition(conn: &mut Client, partition: &str) {
    for (i, (table, column)) in partition_tables(conn).into_iter().enumerate() {
        conn.batch_execute(&format!(
            "DROP TABLE IF EXISTS pg_temp.backup_{i}; \
             CREATE TEMP TABLE backup_{i} AS SELECT * FROM {table} WHERE {column} = {}",
            literal(partition)
        ))
        .expect("backup");
    }
}

/// Restores the partition's storage to the backup (a point-in-time restore of one tenant): the
/// current rows are replaced by the backed-up ones, as raw stored state (capture triggers off).
/// Nothing is notified: a running gateway does not learn about it.
fn restore_partition(conn: &mut Client, partition: &str) {
    let tables = partition_tables(conn);
    let mut tx = conn.transaction().expect("tx");
    tx.batch_execute("SET LOCAL session_replication_role = replica")
        .unwrap();
    for (i, (table, column)) in tables.iter().enumerate() {
        tx.batch_execute(&format!(
            "DELETE FROM {table} WHERE {column} = {p}; INSERT INTO {table} SELECT * FROM pg_temp.backup_{i}",
            p = literal(partition)
        ))
        .expect("restore");
    }
    tx.commit().expect("restore committed");
}

/// Fails as of main 8910311 (gateway): on the `reset-required` reload the session's delivered
/// cursor becomes `max(delivered, known_max)` = 6, the pre-restore timeline's position, so the
/// new timeline's commits 4..6 fall in a window the gateway believes delivered: no delta, no
/// wake, and the first delta after them (commit 7) moves the client's cursor past them — silent
/// loss. Restarting the delivered cursor at the reload's `latestCursor` on a discontinuity
/// (crates/gateway/src/realtime/hub.rs, `Hub::refresh`) makes it pass.
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
