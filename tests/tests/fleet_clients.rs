//! The published clients of both generations — `syncular-client` 0.15.48 (wire 1/2) and 0.49.2
//! (wire 3), each in its driver process ([`syncular_integration_tests::fleet`]) — against one
//! real gateway over HTTP and WebSocket. Each scenario is written once and runs per generation
//! (`<scenario>::fleet_v2`, `<scenario>::fleet_v3`): bootstrap from inline rows and from
//! downloaded segments, incremental pull, scopes, a forbidden write, the replay of a commit
//! whose response was lost, a realtime delta and socket rounds; and, for wire 3 only, the
//! `ROUND_FAILURE` the client reports after that lost response.
//! Needs `SYNCULAR_TEST_DSN`, the gateway binary and both drivers (scripts/test builds them).

use serde_json::json;
use syncular_integration_tests::fleet::proxy::LossyProxy;
use syncular_integration_tests::fleet::{as_server_tasks, seed_rows, FleetClient, Generation, Limits, Report, Stage};
use syncular_integration_tests::fleet_scenarios;
use syncular_integration_tests::gateway::{stored_cursor, wait_until};

fleet_scenarios!(
    bootstrap_from_inline_rows,
    bootstrap_from_downloaded_segments,
    incremental_pull,
    scopes_bound_what_a_client_receives,
    a_forbidden_write_is_rejected_and_never_seen,
    a_lost_response_replays_as_cached_once,
    realtime_delivers_deltas_and_runs_socket_rounds,
);

/// Rows of p1 the bootstraps read: three pages of ten at most (10, 10, 5).
const P1_ROWS: usize = 25;
const PAGE: usize = 10;

/// A partition with [`P1_ROWS`] rows in p1 and 5 in p2, and bob (granted p1) subscribed to p1
/// with `limits`; returns bob's completed bootstrap report.
fn bootstrap(generation: Generation, label: &str, limits: Limits) -> (Stage, FleetClient, Report) {
    let mut s = Stage::new(label, &[("bob", &["p1"])], &[]);
    let mut rows = seed_rows("a", "p1", P1_ROWS);
    rows.extend(seed_rows("b", "p2", 5));
    s.seed(&rows);
    let mut bob = s.client_with(generation, "bob", "bob-1", limits);
    bob.subscribe_projects("tasks", &["p1"]);
    let report = bob.synced(20);
    (s, bob, report)
}

fn bootstrap_from_inline_rows(generation: Generation) {
    let limits = Limits { accept: Some(0b0001), limit_snapshot_rows: Some(PAGE as i32), max_snapshot_pages: Some(1), ..Limits::default() };
    let (mut s, mut bob, report) = bootstrap(generation, "fleet-boot-inline", limits);
    assert_eq!(report.segment_rows_applied as usize, P1_ROWS, "every p1 row from the snapshot: {report:?}");
    assert_eq!(bob.subscription("tasks")["hasResumeToken"], false, "bootstrap complete");
    assert_eq!(as_server_tasks(&bob.tasks()), s.server_tasks_of("p1"), "exactly the server's p1 rows");
    assert_eq!(s.segments_served(), 0.0, "inline only: nothing downloaded");
}

fn bootstrap_from_downloaded_segments(generation: Generation) {
    let limits = Limits { accept: Some(0b0010), limit_snapshot_rows: Some(PAGE as i32), max_snapshot_pages: Some(2), ..Limits::default() };
    let (mut s, mut bob, report) = bootstrap(generation, "fleet-boot-segments", limits);
    assert_eq!(report.segment_rows_applied as usize, P1_ROWS, "every p1 row from segments: {report:?}");
    assert_eq!(bob.subscription("tasks")["hasResumeToken"], false, "bootstrap complete");
    assert_eq!(as_server_tasks(&bob.tasks()), s.server_tasks_of("p1"), "exactly the server's p1 rows");
    let pages = P1_ROWS.div_ceil(PAGE);
    assert_eq!(s.segments_served(), pages as f64, "one GET /segments/{{id}} per page of {PAGE} rows");
}

fn incremental_pull(generation: Generation) {
    let mut s = Stage::new("fleet-incremental", &[("alice", &["p1"]), ("bob", &["p1"])], &[]);
    let mut alice = s.client(generation, "alice", "alice-1");
    alice.subscribe_projects("tasks", &["p1"]);
    alice.synced(6);
    alice.write_task("t1", "p1", "first");
    alice.write_task("t2", "p1", "second");
    assert_eq!(alice.synced(6).applied.len(), 2);

    let mut bob = s.client(generation, "bob", "bob-1");
    bob.subscribe_projects("tasks", &["p1"]);
    bob.synced(6);
    assert_eq!(as_server_tasks(&bob.tasks()), s.server_tasks(), "bootstrapped");

    // Three commits: an update, a delete, an insert.
    alice.upsert(syncular_integration_tests::clients::task_values("t1", "p1", "first, edited", true, Some(4)), None);
    alice.delete("t2", None);
    alice.write_task("t3", "p1", "third");
    assert_eq!(alice.synced(6).applied.len(), 3);

    let pulled = bob.synced(6);
    assert_eq!((pulled.commits_applied, pulled.segment_rows_applied), (3, 0), "three commits, no snapshot: {pulled:?}");
    let server = s.server_tasks();
    assert_eq!(server.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(), ["t1", "t3"]);
    assert_eq!(as_server_tasks(&bob.tasks()), server, "bob holds the server's rows and versions");
    assert_eq!(as_server_tasks(&alice.tasks()), server, "so does alice");
    alice.close();
    bob.close();
}

fn scopes_bound_what_a_client_receives(generation: Generation) {
    let mut s = Stage::new("fleet-scopes", &[("alice", &["p1", "p2"]), ("carol", &["p2"]), ("dave", &["p2"])], &[]);
    let mut alice = s.client(generation, "alice", "alice-1");
    alice.subscribe_projects("tasks", &["p1", "p2"]);
    alice.synced(6);
    alice.write_task("secret-1", "p1", "p1 only");
    alice.write_task("open-1", "p2", "p2 row");
    alice.synced(6);

    // Carol asks for p1 and p2 and is allowed p2: effective {p2}. Dave asks for p1 only: revoked.
    let mut carol = s.client(generation, "carol", "carol-1");
    carol.subscribe_projects("c", &["p1", "p2"]);
    carol.synced(6);
    let mut dave = s.client(generation, "dave", "dave-1");
    dave.subscribe_projects("d", &["p1"]);
    dave.synced(6);

    alice.write_task("secret-2", "p1", "p1 again");
    alice.write_task("open-2", "p2", "p2 second");
    alice.synced(6);
    carol.synced(6);
    dave.synced(6);
    assert_eq!(carol.subscription("c")["effectiveScopes"], json!({"project_id": ["p2"]}));
    assert_eq!(as_server_tasks(&carol.tasks()), s.server_tasks_of("p2"), "carol holds exactly the p2 rows");
    assert_eq!(dave.subscription("d")["status"], "revoked", "requested p1 ∩ allowed p2 = ∅");
    assert!(dave.tasks().is_empty(), "dave holds nothing");

    // Over the socket too: of a p1 commit and a p2 commit, only the p2 one reaches carol.
    carol.connect();
    carol.pump_until("hello", |c| c.hello().is_some());
    alice.write_task("secret-3", "p1", "p1 live");
    alice.synced(6);
    alice.write_task("open-3", "p2", "p2 live");
    alice.synced(6);
    carol.pump_until("open-3 delivered", |c| c.holds("open-3"));
    assert_eq!(carol.delta_count(), 1, "one delta, the p2 commit's: {:?}", carol.events());
    assert_eq!(as_server_tasks(&carol.tasks()), s.server_tasks_of("p2"));
}

fn a_forbidden_write_is_rejected_and_never_seen(generation: Generation) {
    let mut s = Stage::new("fleet-forbidden", &[("alice", &["p1", "p2"]), ("bob", &["p1"])], &[]);
    let mut alice = s.client(generation, "alice", "alice-1");
    alice.subscribe_projects("tasks", &["p1", "p2"]);
    alice.synced(6);
    let mut bob = s.client(generation, "bob", "bob-1");
    bob.subscribe_projects("tasks", &["p1"]);
    bob.synced(6);

    let stolen = bob.write_task("stolen", "p2", "not bob's project");
    let report = bob.synced(6);
    assert_eq!(report.rejected, vec![stolen.clone()], "{report:?}");
    let rejections = bob.rejections();
    assert_eq!(rejections.len(), 1, "{rejections:?}");
    assert_eq!((rejections[0].code.as_str(), rejections[0].op_index), ("sync.forbidden", 0));
    assert_eq!(rejections[0].client_commit_id, stolen);
    assert!(bob.pending().is_empty() && !bob.holds("stolen"), "the optimistic write is gone");
    assert_eq!(s.commits_with_id(&stolen), 0, "nothing committed");

    // A write bob may make goes through, so alice's pull is not empty for lack of traffic.
    bob.write_task("fine", "p1", "bob's own");
    bob.synced(6);
    alice.synced(6);
    assert!(alice.holds("fine") && !alice.holds("stolen"));
    assert_eq!(as_server_tasks(&alice.tasks()), s.server_tasks());
    assert!(s.server_tasks().iter().all(|t| t.0 != "stolen"));
}

/// Alice behind a [`LossyProxy`], subscribed to p1 and synced (her log epoch is known, so her
/// next round pushes).
fn behind_a_lossy_proxy(generation: Generation, label: &str) -> (Stage, LossyProxy, FleetClient) {
    let s = Stage::new(label, &[("alice", &["p1"])], &[]);
    let proxy = LossyProxy::start(&s.gw.base_url);
    let mut alice = FleetClient::spawn(generation, &proxy.base_url, &s.partition, "alice", "alice-1");
    alice.subscribe_projects("tasks", &["p1"]);
    alice.synced(6);
    (s, proxy, alice)
}

fn a_lost_response_replays_as_cached_once(generation: Generation) {
    let (mut s, proxy, mut alice) = behind_a_lossy_proxy(generation, "fleet-replay");
    let cid = alice.write_task("once", "p1", "exactly once");
    proxy.lose_next_sync_response();
    let lost = alice.sync().expect_err("the response never reached the client");
    assert_eq!(proxy.lost(), 1, "{lost}");
    assert_eq!(alice.pending(), vec![cid.clone()], "the commit stays queued");
    assert_eq!(s.commits_with_id(&cid), 1, "the gateway ran the round before the answer was lost");

    let retry = alice.sync_idle(6).unwrap_or_else(|e| panic!("the retry: {e}"));
    assert!(retry.report.applied.contains(&cid), "{:?}", retry.report);
    assert_eq!(alice.outcome(&cid)["status"], "cached", "answered from the stored result");
    assert!(alice.pending().is_empty());
    assert_eq!(s.commits_with_id(&cid), 1, "still one commit");
    let server = s.server_tasks();
    assert_eq!(server.iter().filter(|t| t.0 == "once").count(), 1);
    assert_eq!(as_server_tasks(&alice.tasks()), server, "alice holds it once, at the server's version");
    // The relay carries her socket too (an upgrade becomes a plain byte relay).
    alice.connect();
    alice.pump_until("hello through the proxy", |c| c.hello().is_some());
}

fn realtime_delivers_deltas_and_runs_socket_rounds(generation: Generation) {
    let mut s = Stage::new("fleet-realtime", &[("alice", &["p1"]), ("bob", &["p1"])], &[]);
    let mut bob = s.client(generation, "bob", "bob-1");
    bob.subscribe_projects("tasks", &["p1"]);
    bob.connect_after_sync();
    assert_eq!(bob.hello().expect("hello")["requiresSync"], false);

    let mut alice = s.client(generation, "alice", "alice-1");
    alice.subscribe_projects("tasks", &["p1"]);
    alice.synced(6);
    alice.write_task("t-live", "p1", "pushed to bob");
    alice.synced(6);
    let seq = s.max_commit_seq();
    // Bob asks for nothing: the row arrives on his socket.
    bob.pump_until("bob holds t-live", |c| c.holds("t-live"));
    assert_eq!(bob.delta_count(), 1, "{:?}", bob.events());
    assert!(bob.wakes().is_empty(), "a delta, not a wake-up: {:?}", bob.wakes());
    wait_until("bob's ack persisted", || stored_cursor(&mut s.conn, &s.partition, "bob-1") == Some(seq));

    // Connected, bob's own rounds go over the socket.
    let socket_rounds = || s.gw.metric("syncular_gateway_rounds_total{binding=\"socket\"");
    let before = socket_rounds();
    bob.write_task("t-back", "p1", "over the socket");
    bob.synced(6);
    assert!(socket_rounds() > before, "bob's round went over the socket");
    alice.synced(6);
    let server = s.server_tasks();
    assert_eq!(as_server_tasks(&alice.tasks()), server);
    assert_eq!(as_server_tasks(&bob.tasks()), server);
}

mod round_failure_report {
    use super::*;

    /// Wire 3 only: after a lost response the 0.49.2 client reports the failure
    /// (`ROUND_FAILURE`, the failed exchange's code) on its next request, and the server records
    /// it once.
    #[test]
    fn fleet_v3() {
        let (mut s, proxy, mut alice) = behind_a_lossy_proxy(Generation::V3, "fleet-round-failure");
        alice.write_task("r1", "p1", "lost ack");
        proxy.lose_next_sync_response();
        let lost = alice.sync().expect_err("the response never reached the client");
        assert_eq!(proxy.lost(), 1, "{lost}");
        alice.sync_idle(6).unwrap_or_else(|e| panic!("the round after: {e}"));
        let reports: Vec<(String, String, i64)> = s
            .conn
            .query("SELECT client_id, code, reports FROM syncular.round_failures($1)", &[&s.partition])
            .expect("syncular.round_failures")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        assert_eq!(reports, vec![("alice-1".to_owned(), lost.code.clone(), 1)], "one report of {lost}");
    }
}
