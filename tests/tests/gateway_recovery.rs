//! Realtime recovery through running gateways (issue 8): a host `syncular.refresh_scopes`
//! after a membership change stops that actor's deltas on two gateways at once; killing the
//! gateway's LISTEN backend loses no delta and duplicates none; a gateway restart drains
//! acks on SIGTERM (exit 0) and the next gateway resumes the client from its cursor; a round
//! cut by the request timeout mid-transaction leaves no pooled connection inside it.
//! Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use syncular_integration_tests::connect;
use std::time::Duration;

use syncular_integration_tests::fixtures::{partition_name, server_tasks};
use syncular_integration_tests::gateway::{
    grant, raw_ws, read_until_closed, revoke_and_refresh, setup, sql_commit_task, stored_cursor, wait_until, Gateway, Peer,
};

#[test]
fn refresh_scopes_stops_an_actors_deltas_on_two_gateways_at_once() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-revoke");
    grant(&mut conn, &partition, "bob", &["p1", "p2"]);
    let (g1, g2) = (Gateway::start(&[]), Gateway::start(&[]));
    g1.wait_health(200);
    g2.wait_health(200);
    // Bob on two devices, one per gateway; both receive p1 commits.
    let mut b1 = Peer::connected(&g1, &partition, "bob", "bob-dev-1", &["p1", "p2"]);
    let mut b2 = Peer::connected(&g2, &partition, "bob", "bob-dev-2", &["p1", "p2"]);
    sql_commit_task(&mut conn, &partition, "alice", "before", "p1", "visible");
    b1.pump_until("b1 gets p1", |p| p.holds("before"));
    b2.pump_until("b2 gets p1", |p| p.holds("before"));

    // Revoke p1 in the same transaction as refresh_scopes: both sessions are refreshed
    // (fail-closed) and woken.
    revoke_and_refresh(&mut conn, &partition, "bob", "p1");
    b1.pump_until("b1 woken", |p| p.wakes().iter().any(|w| w == "catchup-required"));
    b2.pump_until("b2 woken", |p| p.wakes().iter().any(|w| w == "catchup-required"));
    // The recovery pulls (socket rounds) see the revocation.
    b1.sync_idle(6).unwrap();
    b2.sync_idle(6).unwrap();

    // A p1 commit, then a p2 commit: deltas are cursor-contiguous, so once the p2 row
    // arrived, a p1 delta would have arrived before it.
    let secret = "secret-after-revocation";
    sql_commit_task(&mut conn, &partition, "alice", secret, "p1", "must not reach bob");
    sql_commit_task(&mut conn, &partition, "alice", "open-p2", "p2", "still visible");
    for (name, b) in [("b1", &mut b1), ("b2", &mut b2)] {
        b.pump_until(&format!("{name} gets the p2 row"), |p| p.holds("open-p2") || p.client.sync_needed());
        if !b.holds("open-p2") {
            // A wake raced the reload: the pull brings p2 and never p1.
            b.sync_idle(6).unwrap();
        }
        assert!(b.holds("open-p2"));
        assert!(!b.holds(secret), "{name} holds a revoked row");
        assert_eq!(b.deltas_containing(secret), 0, "{name} received a revoked commit on its socket");
    }
    for g in [&g1, &g2] {
        assert!(g.metric("syncular_gateway_refreshes_total{mode=\"host\"") >= 1.0);
    }
}

#[test]
fn killing_the_listen_connection_loses_no_delta_and_duplicates_none() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-listen");
    grant(&mut conn, &partition, "bob", &["p1"]);
    let gw = Gateway::start(&[]);
    gw.wait_health(200);
    let mut bob = Peer::connected(&gw, &partition, "bob", "bob-l", &["p1"]);
    sql_commit_task(&mut conn, &partition, "alice", "l1", "p1", "before the kill");
    bob.pump_until("l1", |p| p.holds("l1"));

    let killed: i64 = conn
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            &[&gw.listen_application_name()],
        )
        .unwrap()
        .get(0);
    assert_eq!(killed, 1, "exactly one LISTEN backend per gateway");
    // Commits while the gateway may be deaf: their notifications can be lost.
    sql_commit_task(&mut conn, &partition, "alice", "l2", "p1", "during the outage");
    sql_commit_task(&mut conn, &partition, "alice", "l3", "p1", "during the outage");
    wait_until("LISTEN reconnected", || gw.metric("syncular_gateway_listen_reconnects_total") >= 1.0);
    gw.wait_health(200);
    bob.pump_until("l2 and l3 after the reconnect", |p| p.holds("l2") && p.holds("l3"));
    sql_commit_task(&mut conn, &partition, "alice", "l4", "p1", "after");
    bob.pump_until("l4", |p| p.holds("l4"));
    for id in ["l1", "l2", "l3", "l4"] {
        assert_eq!(bob.deltas_containing(id), 1, "{id} delivered exactly once: {:?}", bob.events());
    }
    assert!(bob.wakes().is_empty(), "{:?}", bob.wakes());
}

#[test]
fn a_gateway_restart_drains_acks_and_resumes_the_client_from_its_cursor() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-restart");
    grant(&mut conn, &partition, "bob", &["p1"]);
    let g1 = Gateway::start(&["--ack-flush-ms", "60000"]);
    let mut bob = Peer::connected(&g1, &partition, "bob", "bob-r", &["p1"]);
    let seq = sql_commit_task(&mut conn, &partition, "alice", "r1", "p1", "live");
    bob.pump_until("r1", |p| p.holds("r1"));
    // The ack is buffered (flush interval 60 s): SIGTERM must write it before exiting.
    wait_until("ack received", || g1.metric("syncular_gateway_acks_received_total") >= 1.0);
    let mut raw = raw_ws(&g1, &partition, "bob", "bob-raw");
    wait_until("both sessions registered", || g1.metric("syncular_gateway_sessions_open") == 2.0);
    let status = g1.stop();
    assert!(status.success(), "graceful shutdown exits 0: {status:?}");
    assert_eq!(stored_cursor(&mut conn, &partition, "bob-r"), Some(seq), "pending ack drained at shutdown");
    assert_eq!(read_until_closed(&mut raw), Some(1001), "sockets are closed with 1001 (going away)");

    let missed = sql_commit_task(&mut conn, &partition, "alice", "r2", "p1", "while no gateway ran");
    let g2 = Gateway::start(&[]);
    bob.disconnect();
    bob.retarget(&g2.base_url, &partition, "bob");
    bob.received.clear();
    bob.connect();
    bob.pump_until("hello from g2", |p| p.hello().is_some());
    let hello = bob.hello().unwrap();
    assert_eq!(hello["cursor"], seq, "resumes from the acked cursor: {hello}");
    assert_eq!(hello["latestCursor"], missed);
    assert_eq!(hello["requiresSync"], true);
    assert!(bob.client.sync_needed());
    bob.sync_idle(6).unwrap();
    assert!(bob.holds("r2"));
    wait_until("post-round ack", || stored_cursor(&mut conn, &partition, "bob-r") == Some(missed));
    sql_commit_task(&mut conn, &partition, "alice", "r3", "p1", "live again");
    bob.pump_until("r3 as a delta", |p| p.holds("r3"));
    assert_eq!(bob.deltas_containing("r3"), 1);
}

/// A pull cut by `--request-timeout-secs` while it waits inside its transaction (the scope
/// resolver blocked by a lock) must not hand its connection back to the pool still inside that
/// transaction: the next round with pushes — one statement, no `BEGIN` of its own — would run in
/// it, be acknowledged, and never be committed. Found by a breaker; fails on the gateway before
/// the fix (the push is lost when the gateway stops).
#[test]
fn a_round_cut_mid_transaction_leaves_no_pooled_connection_inside_it() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-cut-tx");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let gw = Gateway::start(&["--pool-size", "1", "--request-timeout-secs", "1"]);
    let mut a = Peer::new(&gw.base_url, &partition, "alice", "cut-tx-a");
    a.subscribe("tasks", &["p1"]);
    a.sync_idle(6).expect("a's first sync");
    let mut b = Peer::new(&gw.base_url, &partition, "alice", "cut-tx-b");
    b.subscribe("tasks", &["p1"]);
    b.sync_idle(6).expect("b's first sync");

    // The resolver reads gw_test_memberships: locked for 2.5 s, a's pull waits past the 1 s
    // request timeout inside its transaction.
    let mut locker = connect();
    let mut lock = locker.transaction().expect("locker transaction");
    lock.batch_execute("LOCK TABLE public.gw_test_memberships IN ACCESS EXCLUSIVE MODE").expect("lock");
    let puller = std::thread::spawn(move || a.sync());
    std::thread::sleep(Duration::from_millis(2500));
    lock.commit().expect("unlock");
    let _ = puller.join().expect("puller thread");
    let app = format!("syncular-gateway-{}", gw.id);
    wait_until("the cut pull's transaction is gone", || {
        let open: i64 = conn
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state LIKE 'idle in transaction%'",
                &[&app],
            )
            .expect("pg_stat_activity")
            .get(0);
        open == 0
    });

    b.write_task("cut-tx-t1", "p1", "acknowledged");
    let report = b.sync().expect("push round");
    assert_eq!(report.applied.len(), 1, "the push is applied: {report:?}");
    let visible = server_tasks(&mut conn, &partition).expect("server rows");
    assert!(visible.iter().any(|t| t.0 == "cut-tx-t1"), "acknowledged but not committed: {visible:?}");
    drop(b);
    gw.stop();
    let after = server_tasks(&mut conn, &partition).expect("server rows");
    assert!(after.iter().any(|t| t.0 == "cut-tx-t1"), "the acknowledged push was lost: {after:?}");
}
