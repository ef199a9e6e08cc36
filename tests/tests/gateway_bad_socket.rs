//! Broken and hostile WebSocket clients against a running gateway (issue 8, §8.1, §8.7):
//! refused upgrades answer §10.1 JSON before upgrading (no clientId, no auth, a reserved or
//! foreign clientId, connection caps); after the upgrade, garbage text, malformed presence,
//! unknown channel tags, a bad request header, bytes past END, a request over the body
//! limit, a second round while one is in flight, and idleness close the socket with a clear
//! code; unknown control events are tolerated; a socket that never reads is closed instead
//! of growing the gateway's memory. The gateway stays healthy throughout.
//! Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use serde_json::Value;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{partition_name, TASKS};
use syncular_integration_tests::gateway::{
    grant, raw_request_status, raw_ws, read_until_closed, read_until_hello, setup, sql_commit_task, wait_until, Gateway, Peer,
};
use syncular_integration_tests::wire::{commit, pull_header, request, subscription, upsert, Task};
use tungstenite::client::IntoClientRequest;
use tungstenite::Message;

/// Tries an upgrade; returns the HTTP status and JSON body of a refusal.
fn refused(gw: &Gateway, query: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut req = format!("{}{query}", gw.ws_url()).into_client_request().unwrap();
    for (k, v) in headers {
        let name = tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap();
        req.headers_mut().insert(name, v.parse().unwrap());
    }
    match tungstenite::connect(req) {
        Ok(_) => panic!("upgrade {query} was accepted"),
        Err(tungstenite::Error::Http(resp)) => {
            let body = resp.body().clone().unwrap_or_default();
            let v: Value = serde_json::from_slice(&body).unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&body)));
            (resp.status().as_u16(), v)
        }
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn refused_upgrades_answer_json_before_upgrading() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-refuse");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let gw = Gateway::start(&["--max-sessions-per-client", "1", "--max-sessions", "2"]);
    let auth = [("x-syncular-actor", "alice"), ("x-syncular-partition", partition.as_str())];

    assert_eq!(refused(&gw, "", &auth).1["code"], "sync.invalid_request", "clientId is required");
    let (status, body) = refused(&gw, "?clientId=c1", &[]);
    assert_eq!((status, body["code"].as_str()), (401, Some("sync.auth_required")));
    let (status, body) = refused(&gw, "?clientId=%5B%22remote-command%22%2Cx", &auth);
    assert_eq!((status, body["code"].as_str()), (400, Some("sync.invalid_client_id")), "{body}");

    // A clientId bound to alice cannot be used by mallory.
    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "alice-bound");
    alice.subscribe("s", &["p1"]);
    alice.sync_idle(6).unwrap();
    let (status, body) = refused(&gw, "?clientId=alice-bound", &[("x-syncular-actor", "mallory"), auth[1]]);
    assert_eq!((status, body["code"].as_str()), (400, Some("sync.invalid_client_id")), "{body}");

    // Caps: one session per clientId, two per gateway.
    let _s1 = raw_ws(&gw, &partition, "alice", "cap-1");
    let (status, body) = refused(&gw, "?clientId=cap-1", &auth);
    assert_eq!((status, body["code"].as_str()), (429, Some("sync.websocket_connection_limit")));
    let _s2 = raw_ws(&gw, &partition, "alice", "cap-2");
    let (status, body) = refused(&gw, "?clientId=cap-3", &auth);
    assert_eq!((status, body["code"].as_str()), (429, Some("sync.websocket_connection_limit")));
    assert_eq!(body["retryable"], true);
}

/// An upgrade of alice's with the given version, key and extra header lines, on a socket of its own
/// (dropped on return): the status code (0 when the connection closed without one).
fn handshake(gw: &Gateway, partition: &str, client_id: &str, version: &str, key: &str, extra: &str) -> u16 {
    let request = format!(
        "GET /realtime?clientId={client_id} HTTP/1.1\r\nhost: x\r\nx-syncular-actor: alice\r\n\
         x-syncular-partition: {partition}\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\
         sec-websocket-version: {version}\r\nsec-websocket-key: {key}\r\n{extra}\r\n"
    );
    raw_request_status(gw, request.as_bytes())
}

/// Handshakes the WebSocket layer refuses — a version it does not speak, a malformed key (both
/// answered before the session is counted), a subprotocol list `ws` cannot parse (refused by `ws`
/// after the Node gateway counted it; the Rust one ignores subprotocols and upgrades) — give their
/// session slot back: with one slot, after fifteen of them the session the caps allow still opens.
#[test]
fn refused_handshakes_give_their_session_slot_back() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-handshake");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let gw = Gateway::start(&["--max-sessions-per-client", "1", "--max-sessions", "1"]);
    let key = "dGhlIHNhbXBsZSBub25jZQ==";
    for i in 0..5 {
        let status = handshake(&gw, &partition, "slot", "12", key, "");
        assert_eq!(status, 400, "version 12, attempt {i}");
        let status = handshake(&gw, &partition, "slot", "13", "not-a-key", "");
        assert_eq!(status, 400, "a key that is not 16 bytes of base64, attempt {i}");
        let status = handshake(&gw, &partition, "slot", "13", key, "sec-websocket-protocol: a b\r\n");
        assert!([0, 101, 400].contains(&status), "an unparsable subprotocol list, attempt {i}: {status}");
    }
    // A socket dropped right after its 101 frees its slot once the gateway notices: wait for it.
    let mut opened = None;
    wait_until("the slot is free again", || {
        let mut req = format!("{}?clientId=slot", gw.ws_url()).into_client_request().unwrap();
        req.headers_mut().insert("x-syncular-actor", "alice".parse().unwrap());
        req.headers_mut().insert("x-syncular-partition", partition.parse().unwrap());
        opened = tungstenite::connect(req).ok().map(|(ws, _)| ws);
        opened.is_some()
    });
    let mut ws = opened.unwrap();
    assert!(read_until_hello(&mut ws)["sessionId"].is_string(), "the session opens");
}

fn push_request(conn: &mut postgres::Client, partition: &str, client: &str) -> Vec<u8> {
    let epoch: String = conn
        .query_one("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&partition])
        .unwrap()
        .get(0);
    request(client, Some(&epoch), vec![commit(format!("cc-{client}"), vec![upsert(&Task::new("held", "p1", "x"), None)])])
}

fn tagged(tag: u8, bytes: &[u8]) -> Message {
    let mut v = vec![tag];
    v.extend_from_slice(bytes);
    Message::Binary(v.into())
}

#[test]
fn broken_streams_and_garbage_close_the_socket_with_a_clear_code() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-garbage");
    grant(&mut conn, &partition, "alice", &["p1"]);
    sql_commit_task(&mut conn, &partition, "alice", "seed", "p1", "creates the partition");
    let gw = Gateway::start(&["--max-body-bytes", "4096", "--ws-max-message-bytes", "8192"]);
    let pull = request("g", None, vec![pull_header(0, 0, 0, 1), subscription("s", TASKS, &[("project_id", &["p1"])], -1, None)]);
    // Expected close code; the oversized message may instead end in a reset (the gateway stops
    // reading mid-message), which is also a closed socket.
    let cases: Vec<(&str, Vec<Message>, u16)> = vec![
        ("garbage text", vec![Message::Text("{{{ not json".into())], 1007),
        ("a JSON array", vec![Message::Text("[1,2]".into())], 1007),
        ("malformed ack", vec![Message::Text(r#"{"type":"ack","cursor":"7"}"#.into())], 1007),
        ("malformed presence", vec![Message::Text(r#"{"event":"presence","data":{"scopeKey":"project:p1","doc":5}}"#.into())], 1007),
        // JSON a serde reader refuses must not reach the peers (a gateway would relay it altered
        // — 1e400 as null — or break their clients): a number beyond f64, a lone surrogate, depth.
        ("presence beyond f64", vec![Message::Text(r#"{"event":"presence","data":{"scopeKey":"project:p1","doc":{"a":1e400}}}"#.into())], 1007),
        ("presence lone surrogate", vec![Message::Text(r#"{"event":"presence","data":{"scopeKey":"project:p1","doc":{"a":"\ud800"}}}"#.into())], 1007),
        ("ack nested 200 deep", vec![Message::Text(format!(r#"{{"type":"ack","cursor":1,"x":{}{}}}"#, "[".repeat(200), "]".repeat(200)).into())], 1007),
        ("unknown channel tag", vec![tagged(0x05, b"hello")], 1002),
        ("a delta tag from the client", vec![tagged(0x00, &pull)], 1002),
        ("empty binary", vec![Message::Binary(Vec::new().into())], 1002),
        ("bad request header", vec![tagged(0x01, b"SSP9\x02\x00\x01\x00")], 1002),
        ("a response header", vec![tagged(0x01, b"SSP2\x02\x00\x02\x00")], 1002),
        ("bytes past END", vec![tagged(0x01, &[pull.as_slice(), &[0x01]].concat())], 1002),
        ("a message over --ws-max-message-bytes", vec![Message::Text(format!("{{\"type\":\"x\",\"p\":\"{}\"}}", "y".repeat(10_000)).into())], 1009),
        ("request over the body limit", vec![tagged(0x01, &[&pull[..8], &[0x02], &5000u32.to_le_bytes()[..], &[0u8; 5000][..]].concat())], 1009),
    ];
    for (i, (what, messages, code)) in cases.into_iter().enumerate() {
        let mut ws = raw_ws(&gw, &partition, "alice", &format!("garbage-{i}"));
        for m in messages {
            ws.send(m).unwrap();
        }
        let got = read_until_closed(&mut ws);
        let reset_ok = what.contains("ws-max-message-bytes") && got.is_none();
        assert!(got == Some(code) || reset_ok, "{what}: closed with {got:?}, expected {code}");
    }
    wait_until("sessions closed", || gw.metric("syncular_gateway_sessions_open") == 0.0);
    gw.wait_health(200);
}

#[test]
fn a_second_round_while_one_is_in_flight_closes_the_socket() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-pipeline");
    grant(&mut conn, &partition, "alice", &["p1"]);
    sql_commit_task(&mut conn, &partition, "alice", "seed", "p1", "creates the partition");
    let gw = Gateway::start(&[]);
    let req = push_request(&mut conn, &partition, "pipe-1");
    // Hold the partition's commit lock: the first round's push waits on it (in flight).
    let mut locker = connect();
    let mut tx = locker.transaction().unwrap();
    tx.execute("SELECT 1 FROM syncular.sync_partitions WHERE partition = $1 FOR UPDATE", &[&partition]).unwrap();
    let mut ws = raw_ws(&gw, &partition, "alice", "pipe-1");
    ws.send(tagged(0x01, &req)).unwrap();
    ws.send(tagged(0x01, &req)).unwrap();
    tx.rollback().unwrap();
    assert_eq!(read_until_closed(&mut ws), Some(1002));
    gw.wait_health(200);
}

#[test]
fn unknown_events_are_tolerated_and_idle_sockets_are_closed() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-idle");
    let gw = Gateway::start(&["--idle-timeout-secs", "1"]);
    let mut ws = raw_ws(&gw, &partition, "alice", "idle-1");
    ws.send(Message::Text(r#"{"event":"future-thing","data":[1]}"#.into())).unwrap();
    ws.send(Message::Text(r#"{"type":"future-type"}"#.into())).unwrap();
    ws.send(Message::Text(r#"{"type":"ack","cursor":0}"#.into())).unwrap();
    wait_until("the ack after the unknown events was processed", || gw.metric("syncular_gateway_acks_received_total") >= 1.0);
    // Then silence: the idle timeout closes the socket with 1001.
    assert_eq!(read_until_closed(&mut ws), Some(1001));
}

#[test]
fn a_socket_that_never_reads_is_closed_while_reading_sockets_stay() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-noread");
    grant(&mut conn, &partition, "bob", &["p1"]);
    let gw = Gateway::start(&["--idle-timeout-secs", "3", "--heartbeat-secs", "1", "--session-queue", "8"]);
    let mut reader = Peer::new(&gw.base_url, &partition, "bob", "bob-reader");
    reader.subscribe("s", &["p1"]);
    reader.sync_idle(6).unwrap();
    reader.connect();
    let mut sleeper = Peer::new(&gw.base_url, &partition, "bob", "bob-noread");
    sleeper.subscribe("s", &["p1"]);
    sleeper.sync_idle(6).unwrap();
    // A socket for the second client that never reads a byte (so never answers a ping).
    let ws = raw_ws(&gw, &partition, "bob", "bob-noread");
    wait_until("two sessions", || gw.metric("syncular_gateway_sessions_open") == 2.0);
    let title = "z".repeat(60_000);
    let mut commits = 0;
    // Keep traffic flowing to both until the gateway drops the silent one.
    while gw.metric("syncular_gateway_sessions_open") > 1.0 {
        sql_commit_task(&mut conn, &partition, "alice", &format!("n{commits}"), "p1", &title);
        commits += 1;
        reader.pump();
        assert!(commits < 2_000, "the non-reading socket was never closed");
    }
    drop(ws);
    // The reading client kept its socket (it answers pings) and received every commit.
    let last = format!("n{}", commits - 1);
    reader.pump_until("the reader got everything", |p| p.holds(&last) || p.client.sync_needed());
    if !reader.holds(&last) {
        reader.sync_idle(50).unwrap();
    }
    assert_eq!(reader.task_ids().len(), commits);
    if reader.client.sync_needed() {
        reader.sync_idle(50).unwrap();
    }
    sql_commit_task(&mut conn, &partition, "alice", "after", "p1", "small");
    reader.pump_until("still connected", |p| p.holds("after") || p.client.sync_needed());
    assert_eq!(gw.metric("syncular_gateway_sessions_open"), 1.0);
    gw.wait_health(200);
}
