//! WebSocket `/realtime` through a running gateway (issue 8, §8): a connected client
//! receives another client's commit as a pushed `0x00` delta (no request of its own) and its
//! ack reaches the client record; a socket round (§8.7) registers a new subscription at
//! round end; a commit over `--max-delta-bytes` gives `delta-too-large` and the client
//! catches up with a pull; presence join/update/leave reaches scope-mates only.
//! Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use serde_json::json;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::partition_name;
use syncular_integration_tests::gateway::{grant, setup, stored_cursor, wait_until, Gateway, Peer, Received};

fn max_commit_seq(conn: &mut postgres::Client, partition: &str) -> i64 {
    conn.query_opt("SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1", &[&partition])
        .unwrap()
        .map_or(0, |r| r.get(0))
}

/// A peer that synced `projects` over HTTP, then connected its socket.
#[test]
fn a_connected_client_receives_another_clients_commit_as_a_delta_and_acks_it() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-delta");
    grant(&mut conn, &partition, "alice", &["p1"]);
    grant(&mut conn, &partition, "bob", &["p1"]);
    let gw = Gateway::start(&["--heartbeat-secs", "1"]);

    let mut bob = Peer::connected(&gw, &partition, "bob", "bob-1", &["p1"]);
    let hello = bob.hello().unwrap();
    assert_eq!(hello["requiresSync"], false, "{hello}");
    assert_eq!(hello["clientId"], "bob-1");
    assert_eq!(hello["actorId"], "bob");

    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "alice-1");
    alice.subscribe("tasks", &["p1"]);
    alice.write_task("t-live", "p1", "pushed to bob");
    alice.sync_idle(6).unwrap();
    let seq = max_commit_seq(&mut conn, &partition);

    // Bob never calls sync again: the row arrives on his socket.
    bob.pump_until("bob holds t-live", |p| p.holds("t-live"));
    assert_eq!(bob.delta_count(), 1, "{:?}", bob.events());
    assert!(bob.wakes().is_empty(), "{:?}", bob.wakes());
    // The client acked the delta; the gateway persisted the ack (batched).
    wait_until("bob's ack persisted", || stored_cursor(&mut conn, &partition, "bob-1") == Some(seq));
    assert!(gw.metric("syncular_gateway_deltas_sent_total") >= 1.0);
    assert!(gw.metric("syncular_gateway_delta_calls_total") >= 1.0);
    // §8.5 heartbeat on the configured interval.
    bob.pump_until("heartbeat", |p| p.events().iter().any(|e| e == "heartbeat"));
}

#[test]
fn a_socket_round_registers_a_new_subscription_at_round_end() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-round");
    grant(&mut conn, &partition, "alice", &["p1", "p2"]);
    grant(&mut conn, &partition, "bob", &["p1", "p2"]);
    let gw = Gateway::start(&[]);

    // Connect first (no client record yet: no registrations), then sync over the socket.
    let mut bob = Peer::new(&gw.base_url, &partition, "bob", "bob-2");
    bob.connect();
    bob.pump_until("hello", |p| p.hello().is_some());
    assert_eq!(bob.hello().unwrap()["requiresSync"], true);
    bob.subscribe("p1", &["p1"]);
    bob.sync_idle(6).expect("socket rounds");
    let socket_rounds = gw.metric("syncular_gateway_rounds_total{binding=\"socket\"");
    assert!(socket_rounds >= 1.0, "the client synced over the socket");
    wait_until("round-end reloads", || {
        gw.metric("syncular_gateway_refreshes_total{mode=\"round-end\",outcome=\"applied\"") >= socket_rounds
    });

    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "alice-2");
    alice.subscribe("all", &["p1", "p2"]);
    alice.write_task("r1", "p1", "first");
    alice.sync_idle(6).unwrap();
    bob.pump_until("delta for p1", |p| p.holds("r1"));

    // A second subscription added by a later socket round is live right after it.
    bob.subscribe("p2", &["p2"]);
    bob.sync_idle(6).unwrap();
    let socket_rounds = gw.metric("syncular_gateway_rounds_total{binding=\"socket\"");
    wait_until("round-end reloads", || {
        gw.metric("syncular_gateway_refreshes_total{mode=\"round-end\",outcome=\"applied\"") >= socket_rounds
    });
    alice.write_task("r2", "p2", "second");
    alice.sync_idle(6).unwrap();
    bob.pump_until("delta for p2", |p| p.holds("r2"));
    assert_eq!(bob.deltas_containing("r2"), 1);
    assert!(bob.wakes().is_empty(), "{:?}", bob.wakes());
}

#[test]
fn a_commit_over_the_delta_cap_wakes_delta_too_large_and_the_client_catches_up() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-big");
    grant(&mut conn, &partition, "alice", &["p1"]);
    grant(&mut conn, &partition, "bob", &["p1"]);
    let gw = Gateway::start(&["--max-delta-bytes", "400"]);
    let mut bob = Peer::connected(&gw, &partition, "bob", "bob-3", &["p1"]);

    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "alice-3");
    alice.subscribe("tasks", &["p1"]);
    alice.write_task("big", "p1", &"x".repeat(2_000));
    alice.sync_idle(6).unwrap();
    let big_seq = max_commit_seq(&mut conn, &partition);
    bob.pump_until("delta-too-large wake", |p| p.wakes().iter().any(|w| w == "delta-too-large"));
    assert!(!bob.holds("big"));
    assert_eq!(bob.deltas_containing("big"), 0);
    assert!(bob.client.sync_needed(), "a wake-up sets the sync-needed signal");

    // The client's recovery pull (over the socket) brings the row; its ack lifts suppression.
    bob.sync_idle(6).unwrap();
    assert!(bob.holds("big"));
    wait_until("post-round ack persisted", || stored_cursor(&mut conn, &partition, "bob-3") >= Some(big_seq));

    alice.write_task("small", "p1", "fits");
    alice.sync_idle(6).unwrap();
    bob.pump_until("small delta", |p| p.holds("small"));
    assert_eq!(bob.deltas_containing("small"), 1, "deltas resumed: {:?}", bob.events());
    assert!(gw.metric("syncular_gateway_wakes_total{reason=\"delta-too-large\"") >= 1.0);
}

fn presence_events(p: &Peer) -> Vec<(String, String, String)> {
    p.received
        .iter()
        .filter_map(|r| match r {
            Received::Text(v) if v["event"] == "presence" => Some((
                v["data"]["scopeKey"].as_str().unwrap_or("").to_owned(),
                v["data"]["kind"].as_str().or(v["data"]["error"].as_str()).unwrap_or("").to_owned(),
                v["data"]["actorId"].as_str().unwrap_or("").to_owned(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn presence_reaches_scope_mates_only_and_leaves_on_disconnect() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-presence");
    grant(&mut conn, &partition, "alice", &["p1"]);
    grant(&mut conn, &partition, "bob", &["p1"]);
    grant(&mut conn, &partition, "dave", &["p2"]);
    grant(&mut conn, &partition, "carol", &["p1"]);
    let gw = Gateway::start(&[]);
    let mut alice = Peer::connected(&gw, &partition, "alice", "a-4", &["p1"]);
    let mut bob = Peer::connected(&gw, &partition, "bob", "b-4", &["p1"]);
    let mut dave = Peer::connected(&gw, &partition, "dave", "d-4", &["p2"]);
    let key = "project:p1";

    alice.client.set_presence(&mut alice.transport, key, Some(&json!({"cursor": 1}))).unwrap();
    bob.pump_until("join", |p| presence_events(p).len() == 1);
    alice.client.set_presence(&mut alice.transport, key, Some(&json!({"cursor": 2}))).unwrap();
    bob.pump_until("update", |p| presence_events(p).len() == 2);
    assert_eq!(bob.client.presence(key)[0].doc, json!({"cursor": 2}));
    // Dave holds only project:p2: his publish on p1 is refused; nothing of alice reached him
    // (his refusal is queued after alice's fanouts were).
    dave.client.set_presence(&mut dave.transport, key, Some(&json!({"x": 1}))).unwrap();
    dave.pump_until("forbidden", |p| !presence_events(p).is_empty());
    assert_eq!(presence_events(&dave), vec![(key.to_owned(), "presence.forbidden".to_owned(), String::new())]);
    // Oversized documents are refused to the publisher only.
    alice.client.set_presence(&mut alice.transport, key, Some(&json!({"blob": "y".repeat(20_000)}))).unwrap();
    alice.pump_until("too large", |p| presence_events(p).iter().any(|e| e.1 == "presence.too_large"));

    // Bob publishes; a late joiner gets the snapshot join-burst of alice and bob.
    bob.client.set_presence(&mut bob.transport, key, Some(&json!({"cursor": 9}))).unwrap();
    alice.pump_until("bob's join", |p| presence_events(p).iter().any(|e| e.2 == "bob"));
    let mut carol = Peer::connected(&gw, &partition, "carol", "c-4", &["p1"]);
    carol.pump_until("snapshot", |p| presence_events(p).len() == 2);
    let mut actors: Vec<String> = presence_events(&carol).into_iter().filter(|e| e.1 == "join").map(|e| e.2).collect();
    actors.sort();
    assert_eq!(actors, vec!["alice", "bob"]);

    // Explicit leave, then disconnect-implies-leave.
    alice.client.set_presence(&mut alice.transport, key, None).unwrap();
    bob.pump_until("leave", |p| presence_events(p).last().is_some_and(|e| e.1 == "leave" && e.2 == "alice"));
    alice.client.set_presence(&mut alice.transport, key, Some(&json!({"cursor": 3}))).unwrap();
    bob.pump_until("rejoin", |p| presence_events(p).last().is_some_and(|e| e.1 == "join" && e.2 == "alice"));
    alice.disconnect();
    bob.pump_until("leave on disconnect", |p| presence_events(p).last().is_some_and(|e| e.1 == "leave" && e.2 == "alice"));
    dave.pump();
    assert_eq!(presence_events(&dave).len(), 1, "dave never saw project:p1 presence: {:?}", presence_events(&dave));
}

/// Rust gateway only (scripts/test NODE_RUST_ONLY): the Node gateway's presence is local to it.
#[test]
fn presence_crosses_gateways_through_the_relay() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-relay");
    for actor in ["alice", "bob", "carol", "dave"] {
        grant(&mut conn, &partition, actor, &["p1"]);
    }
    let g1 = Gateway::start(&["--presence-heartbeat-secs", "1"]);
    let g2 = Gateway::start(&["--presence-heartbeat-secs", "1"]);
    g1.wait_health(200);
    g2.wait_health(200);
    let key = "project:p1";
    let mut alice = Peer::connected(&g1, &partition, "alice", "a-5", &["p1"]);
    let mut bob = Peer::connected(&g2, &partition, "bob", "b-5", &["p1"]);

    alice.client.set_presence(&mut alice.transport, key, Some(&json!({"cursor": 1}))).unwrap();
    bob.pump_until("alice's join via the relay", |p| presence_events(p).iter().any(|e| e.1 == "join" && e.2 == "alice"));
    // A document over one NOTIFY payload (7,900 bytes) travels in parts.
    let big = json!({"text": "q".repeat(12_000)});
    alice.client.set_presence(&mut alice.transport, key, Some(&big)).unwrap();
    bob.pump_until("big update", |p| p.client.presence(key).iter().any(|peer| peer.doc == big));
    bob.client.set_presence(&mut bob.transport, key, Some(&json!({"cursor": 7}))).unwrap();
    alice.pump_until("bob's join via the relay", |p| presence_events(p).iter().any(|e| e.1 == "join" && e.2 == "bob"));

    // A late joiner on g1 gets bob's (remote) document in its snapshot.
    let mut carol = Peer::connected(&g1, &partition, "carol", "c-5", &["p1"]);
    carol.pump_until("snapshot", |p| presence_events(p).len() == 2);
    // Disconnect on g1 → leave on g2.
    alice.disconnect();
    bob.pump_until("alice's leave via the relay", |p| presence_events(p).last().is_some_and(|e| e.1 == "leave" && e.2 == "alice"));
    // g2 shuts down gracefully: its `bye` makes bob leave on g1.
    assert!(g2.stop().success());
    carol.pump_until("bob's leave after g2's bye", |p| presence_events(p).iter().any(|e| e.1 == "leave" && e.2 == "bob"));
    assert!(carol.client.presence(key).is_empty());

    // A gateway that dies without a bye: its peers leave after three silent heartbeats.
    let g3 = Gateway::start(&["--presence-heartbeat-secs", "1"]);
    g3.wait_health(200);
    let mut dave = Peer::connected(&g3, &partition, "dave", "d-5", &["p1"]);
    dave.client.set_presence(&mut dave.transport, key, Some(&json!({"here": true}))).unwrap();
    carol.pump_until("dave's join", |p| presence_events(p).iter().any(|e| e.1 == "join" && e.2 == "dave"));
    drop(dave);
    drop(g3); // SIGKILL
    carol.pump_until("dave expires", |p| presence_events(p).iter().any(|e| e.1 == "leave" && e.2 == "dave"));
}

/// Alice's presence fanouts `bob` received on `key`: `(kind, doc["cursor"], timestamp ms)`.
fn fanouts_of_alice(bob: &Peer, key: &str) -> Vec<(String, Option<i64>, i64)> {
    bob.received
        .iter()
        .filter_map(|r| match r {
            Received::Text(v) if v["event"] == "presence" && v["data"]["scopeKey"] == key && v["data"]["actorId"] == "alice" => Some((
                v["data"]["kind"].as_str().unwrap_or("").to_owned(),
                v["data"]["doc"]["cursor"].as_i64(),
                v["data"]["timestamp"].as_i64().unwrap_or(0),
            )),
            _ => None,
        })
        .collect()
}

/// A gateway with the presence rate cap at `interval_ms`, and alice and bob both on `project:p1`
/// of a fresh partition (`label`).
fn alice_and_bob(label: &str, interval_ms: u64) -> (Gateway, Peer, Peer) {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name(label);
    grant(&mut conn, &partition, "alice", &["p1"]);
    grant(&mut conn, &partition, "bob", &["p1"]);
    let gw = Gateway::start(&["--presence-min-interval-ms", &interval_ms.to_string()]);
    let alice = Peer::connected(&gw, &partition, "alice", &format!("a-{label}"), &["p1"]);
    let bob = Peer::connected(&gw, &partition, "bob", &format!("b-{label}"), &["p1"]);
    (gw, alice, bob)
}

/// Alice publishes `{"cursor": n}` on `project:p1`, or leaves it (`None`).
fn publish(alice: &mut Peer, cursor: Option<i64>) {
    let doc = cursor.map(|cursor| json!({ "cursor": cursor }));
    alice.client.set_presence(&mut alice.transport, "project:p1", doc.as_ref()).unwrap();
}

#[test]
fn a_leave_resets_the_presence_rate_cap_and_a_flush_held_before_it_fans_out_nothing() {
    let (_gw, mut alice, mut bob) = alice_and_bob("gw-presence-leave-rate", 600);
    let key = "project:p1";
    // 1 fans out at once; 2 is held for the window's end (600 ms after 1); the leave (300 ms
    // later) drops it and resets the cap: 3 fans out at once, 4 is held for 3's window — not
    // flushed at 1's window end by the flush scheduled for 2.
    publish(&mut alice, Some(1));
    publish(&mut alice, Some(2));
    std::thread::sleep(std::time::Duration::from_millis(300));
    publish(&mut alice, None);
    publish(&mut alice, Some(3));
    publish(&mut alice, Some(4));
    bob.pump_until("the latest document", |p| p.client.presence(key).first().is_some_and(|peer| peer.doc == json!({"cursor": 4})));
    std::thread::sleep(std::time::Duration::from_millis(1000));
    bob.pump();
    let seen = fanouts_of_alice(&bob, key);
    let docs: Vec<_> = seen.iter().map(|(kind, cursor, _)| (kind.as_str(), *cursor)).collect();
    assert_eq!(docs, [("join", Some(1)), ("leave", None), ("join", Some(3)), ("update", Some(4))], "{seen:?}");
    let (three, four) = (seen[2].2, seen[3].2);
    assert!(four - three >= 590, "4 fanned out {} ms after 3, inside 3's 600 ms window: {seen:?}", four - three);
}

#[test]
fn a_publish_at_the_windows_end_supersedes_the_document_held_for_it() {
    let (_gw, mut alice, mut bob) = alice_and_bob("gw-presence-boundary", 100);
    let key = "project:p1";
    // Each round: a leave (the cap starts over), 1 fans out, 2 is held for the window's end, 3 is
    // published right at that end — just before or after the held flush runs (timers fire a
    // little late) — so 3 must be the last document either way, and no two documents may go out
    // inside one window.
    let rounds = 40;
    for i in 0..rounds {
        let base = 3 * i;
        publish(&mut alice, None);
        let t0 = std::time::Instant::now();
        publish(&mut alice, Some(base + 1));
        std::thread::sleep(std::time::Duration::from_millis(20));
        publish(&mut alice, Some(base + 2));
        let at = std::time::Duration::from_micros(99_500 + 75 * i as u64);
        while t0.elapsed() < at {
            std::hint::spin_loop();
        }
        publish(&mut alice, Some(base + 3));
        std::thread::sleep(std::time::Duration::from_millis(130));
        bob.pump();
    }
    let last = 3 * (rounds - 1) + 3;
    bob.pump_until("the last document", |p| p.client.presence(key).first().is_some_and(|peer| peer.doc == json!({ "cursor": last })));
    let seen = fanouts_of_alice(&bob, key);
    for window in seen.split(|(kind, _, _)| kind == "leave").filter(|w| !w.is_empty()) {
        let docs: Vec<i64> = window.iter().filter_map(|(_, cursor, _)| *cursor).collect();
        let newest = docs.iter().max().copied();
        assert_eq!(docs.last().copied(), newest, "an older document followed a newer one: {window:?}");
        assert_eq!(newest.map(|d| d % 3), Some(0), "the round's last document (3) is the one left: {window:?}");
        for pair in window.windows(2) {
            assert!(pair[1].2 - pair[0].2 >= 99, "two documents inside one 100 ms window: {window:?}");
        }
    }
}

#[test]
fn the_presence_rate_cap_coalesces_to_the_latest_document() {
    let (_gw, mut alice, mut bob) = alice_and_bob("gw-presence-rate", 400);
    let key = "project:p1";
    // 30 publishes in a burst (well inside one window): the first fans out at once, the rest
    // coalesce — never an error, never a stale document, at most one update per window.
    let started = std::time::Instant::now();
    for i in 0..30 {
        publish(&mut alice, Some(i));
    }
    let burst = started.elapsed();
    bob.pump_until("the latest document", |p| p.client.presence(key).first().is_some_and(|peer| peer.doc == json!({"cursor": 29})));
    std::thread::sleep(std::time::Duration::from_millis(900));
    bob.pump();
    let fanouts = presence_events(&bob).into_iter().filter(|e| e.0 == key && e.2 == "alice").count();
    let windows = (burst.as_millis() / 400) as usize + 2;
    assert!(fanouts >= 2 && fanouts <= windows, "{fanouts} fanouts for a {burst:?} burst (≤ {windows} windows)");
    assert_eq!(bob.client.presence(key)[0].doc, json!({"cursor": 29}), "latest wins");
    alice.pump();
    assert!(
        presence_events(&alice).iter().all(|e| e.1 != "presence.too_large" && e.1 != "presence.forbidden"),
        "rate limiting is never an error: {:?}",
        presence_events(&alice)
    );
}
