//! Resource limits of a running gateway against real, hostile sockets (review findings 5, 6,
//! 9): a socket that does not drain its round response is dropped after `--write-timeout-secs`
//! and the response freed; the gateway-wide round budget (`--round-buffer-bytes`) refuses a
//! request or response that does not fit with 1013; `--max-sessions-per-actor` answers 429
//! before upgrading; a session whose queue overflowed gets its 1008 Close frame even though
//! its queue is full; presence is rate-capped by default (latest wins). HTTP: a half-sent or
//! trickled request head is dropped after `--http-header-read-timeout-secs`, silent and idle
//! keep-alive connections after `--http-idle-timeout-secs`, and `--max-connections` (WebSockets
//! included) refuses the next connection with 503 — while normal requests and upgrades work.
//! Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{partition_name, TASKS};
use syncular_integration_tests::gateway::{grant, raw_ws, read_until_closed, setup, sql_commit_task, wait_until, Gateway, WAIT};
use syncular_integration_tests::stream_fixture::commit_incompressible_rows;
use syncular_integration_tests::wire::{pull_header, request, subscription};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

/// A TCP connection to `addr` whose receive buffer is 4 KiB (set before connecting, so the
/// advertised window stays small): a peer that stops reading stalls the gateway quickly.
fn small_rcvbuf_stream(addr: SocketAddr) -> TcpStream {
    let SocketAddr::V4(v4) = addr else { panic!("IPv4 expected") };
    // SAFETY: plain socket(2)/setsockopt(2)/connect(2) on a descriptor we own; it is handed
    // to TcpStream (which closes it) right after.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket()");
        let size: libc::c_int = 4096;
        let rc = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "setsockopt(SO_RCVBUF)");
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
            sin_zero: [0; 8],
        };
        let rc = libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "connect()");
        TcpStream::from_raw_fd(fd)
    }
}

fn addr(gw: &Gateway) -> SocketAddr {
    gw.base_url.trim_start_matches("http://").parse().expect("gateway address")
}

/// A dev-auth WebSocket over a small-receive-buffer connection.
fn slow_ws(gw: &Gateway, partition: &str, actor: &str, client_id: &str) -> WebSocket<TcpStream> {
    let mut req = format!("{}?clientId={client_id}", gw.ws_url()).into_client_request().unwrap();
    req.headers_mut().insert("x-syncular-actor", actor.parse().unwrap());
    req.headers_mut().insert("x-syncular-partition", partition.parse().unwrap());
    let (ws, resp) = tungstenite::client(req, small_rcvbuf_stream(addr(gw))).expect("ws handshake");
    assert_eq!(resp.status().as_u16(), 101);
    ws
}

fn tagged(tag: u8, bytes: &[u8]) -> Message {
    let mut v = vec![tag];
    v.extend_from_slice(bytes);
    Message::Binary(v.into())
}

/// A bootstrap pull of `tasks` in project p1 under the partition's current `logEpoch`.
fn pull(conn: &mut postgres::Client, partition: &str, client: &str) -> Vec<u8> {
    let epoch: Option<String> = conn
        .query_opt("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&partition])
        .unwrap()
        .map(|r| r.get(0));
    request(client, epoch.as_deref(), vec![pull_header(0, 0, 0, 1), subscription("s", TASKS, &[("project_id", &["p1"])], -1, None)])
}

/// One socket round: sends `req`, reads until the response's END. Returns the response bytes.
fn round<S: Read + Write>(ws: &mut WebSocket<S>, req: &[u8]) -> Vec<u8> {
    ws.send(tagged(0x01, req)).unwrap();
    let mut scanner = syncular_client::MessageStreamScanner::default();
    let mut whole = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "no round response");
        match ws.read().expect("round response") {
            Message::Binary(b) if b.first() == Some(&0x01) => {
                whole.extend_from_slice(&b[1..]);
                if scanner.push(&b[1..]).expect("well-framed response stream").is_some() {
                    return whole;
                }
            }
            _ => {}
        }
    }
}

/// Reads until the socket closes; the close code (None: dropped without a Close frame).
fn close_code<S: Read + Write>(ws: &mut WebSocket<S>) -> Option<u16> {
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "socket not closed within {WAIT:?}");
        match ws.read() {
            Ok(Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e)) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return None,
        }
    }
}

/// `roundBufferBytes` of `/healthz`: bytes leased from the round budget.
fn round_buffer_bytes(gw: &Gateway) -> i64 {
    let (_, body) = gw.get("/healthz");
    let v: Value = serde_json::from_str(&body).expect("healthz JSON");
    v["roundBufferBytes"].as_i64().unwrap_or_else(|| panic!("no roundBufferBytes in {v}"))
}

#[test]
fn a_socket_that_does_not_drain_its_round_response_is_dropped_and_the_response_freed() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-nodrain");
    grant(&mut conn, &partition, "alice", &["p1"]);
    // A ~9 MB response (12 MB of base62 text, compressed): more than the kernel's socket
    // buffers take (tcp_wmem max is 4 MiB by default), so the gateway itself holds the rest.
    commit_incompressible_rows(&mut conn, &partition, 48, 250_000);
    // Pull pages stop at syncular.response_budget_bytes (4 MiB by default, as much as the
    // kernel's socket buffers take): raise it for the gateway's connections.
    let dsn = syncular_integration_tests::dsn();
    assert!(!dsn.contains("://"), "a key=value test DSN is expected");
    let dsn = format!("{dsn} options='-c syncular.response_budget_bytes=33554432'");
    let gw = Gateway::start_with_dsn(&dsn, &["--auth", "dev", "--write-timeout-secs", "1", "--idle-timeout-secs", "120"]);
    let mut ws = slow_ws(&gw, &partition, "alice", "nodrain");
    wait_until("one session", || gw.metric("syncular_gateway_sessions_open") == 1.0);
    ws.send(tagged(0x01, &pull(&mut conn, &partition, "nodrain"))).unwrap();
    // Never read; keep talking (acks) so that only the write side can end the session.
    let deadline = Instant::now() + WAIT;
    while gw.metric("syncular_gateway_sessions_open") > 0.0 {
        assert!(Instant::now() < deadline, "a socket that does not drain its round response stayed open; logs:\n{}", gw.logs.lock().unwrap().iter().filter(|l| !l.contains("on_response")).cloned().collect::<Vec<_>>().join("\n"));
        let _ = ws.send(Message::Text(r#"{"type":"ack","cursor":0}"#.into()));
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_until("the response's bytes returned to the round budget", || round_buffer_bytes(&gw) == 0);
    assert!(gw.logs.lock().unwrap().iter().any(|l| l.contains("does not drain")));
    // A client that reads gets the same round.
    let mut reader = raw_ws(&gw, &partition, "alice", "drains");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = reader.get_mut() {
        s.set_read_timeout(Some(WAIT)).unwrap();
    }
    let len = round(&mut reader, &pull(&mut conn, &partition, "drains")).len();
    assert!(len > 6_000_000, "{len} bytes");
    gw.wait_health(200);
}

#[test]
fn the_round_budget_refuses_requests_and_responses_that_do_not_fit_with_1013() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-budget");
    grant(&mut conn, &partition, "alice", &["p1"]);
    commit_incompressible_rows(&mut conn, &partition, 6, 50_000); // a ~200 KB response (segments are compressed)
    let small = partition_name("gw-budget-small");
    grant(&mut conn, &small, "alice", &["p1"]);
    sql_commit_task(&mut conn, &small, "alice", "s1", "p1", "small");
    let gw = Gateway::start(&["--round-buffer-bytes", "100000"]);

    // Two unfinished requests of 60 KB each: the first is buffered, the second does not fit.
    let full = pull(&mut conn, &small, "x");
    let header = &full[..8];
    let partial = [header, &[0x02], &200_000u32.to_le_bytes()[..], &[0u8; 60_000][..]].concat();
    let mut a = raw_ws(&gw, &small, "alice", "budget-a");
    a.send(tagged(0x01, &partial)).unwrap();
    wait_until("the first partial request is buffered", || round_buffer_bytes(&gw) >= 60_000);
    let mut b = raw_ws(&gw, &small, "alice", "budget-b");
    b.send(tagged(0x01, &partial)).unwrap();
    assert_eq!(read_until_closed(&mut b), Some(1013), "over the round budget: try again later");
    assert!(round_buffer_bytes(&gw) <= 100_000);
    // The first socket goes away: its bytes return, and a normal round fits again.
    drop(a);
    wait_until("the budget is free again", || round_buffer_bytes(&gw) == 0);
    let mut c = raw_ws(&gw, &small, "alice", "budget-c");
    assert!(round(&mut c, &pull(&mut conn, &small, "budget-c")).len() > 8);
    wait_until("the finished round's bytes returned", || round_buffer_bytes(&gw) == 0);

    // A response larger than the whole budget: the socket is closed with 1013, not buffered.
    let mut d = raw_ws(&gw, &partition, "alice", "budget-d");
    d.send(tagged(0x01, &pull(&mut conn, &partition, "budget-d"))).unwrap();
    assert_eq!(read_until_closed(&mut d), Some(1013));
    wait_until("nothing leased", || round_buffer_bytes(&gw) == 0);
    gw.wait_health(200);
}

/// Tries an upgrade that must be refused; returns (status, JSON body).
fn refused(gw: &Gateway, partition: &str, actor: &str, client_id: &str) -> (u16, Value) {
    let mut req = format!("{}?clientId={client_id}", gw.ws_url()).into_client_request().unwrap();
    req.headers_mut().insert("x-syncular-actor", actor.parse().unwrap());
    req.headers_mut().insert("x-syncular-partition", partition.parse().unwrap());
    match tungstenite::connect(req) {
        Ok(_) => panic!("upgrade of {client_id} was accepted"),
        Err(tungstenite::Error::Http(resp)) => {
            let body = resp.body().clone().unwrap_or_default();
            (resp.status().as_u16(), serde_json::from_slice(&body).expect("JSON refusal"))
        }
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn one_actor_cannot_hold_more_than_max_sessions_per_actor() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-per-actor");
    let gw = Gateway::start(&["--max-sessions-per-actor", "2"]);
    let first = raw_ws(&gw, &partition, "alice", "actor-1");
    let _second = raw_ws(&gw, &partition, "alice", "actor-2");
    let (status, body) = refused(&gw, &partition, "alice", "actor-3");
    assert_eq!((status, body["code"].as_str(), body["retryable"].as_bool()), (429, Some("sync.websocket_connection_limit"), Some(true)), "{body}");
    // Other actors, and the same actor in another partition, are not affected.
    let _bob = raw_ws(&gw, &partition, "bob", "actor-4");
    let _elsewhere = raw_ws(&gw, &partition_name("gw-per-actor-2"), "alice", "actor-5");
    // A closed session frees its place.
    drop(first);
    wait_until("the first session is gone", || gw.metric("syncular_gateway_sessions_open") == 3.0);
    let _third = raw_ws(&gw, &partition, "alice", "actor-3");
    gw.wait_health(200);
}

/// Waits until `n` round-end registration reloads were applied (the sessions hold their
/// scope keys: presence publishes are authorized).
fn wait_round_end_reloads(gw: &Gateway, n: usize) {
    wait_until("round-end reloads", || {
        gw.metric("syncular_gateway_refreshes_total{mode=\"round-end\",outcome=\"applied\"") >= n as f64
    });
}

fn presence(key: &str, doc: Value) -> Message {
    Message::Text(json!({"event": "presence", "data": {"scopeKey": key, "doc": doc}}).to_string().into())
}

#[test]
fn a_session_whose_queue_overflowed_still_gets_its_1008_close_frame() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-flood");
    grant(&mut conn, &partition, "att", &["p1"]);
    grant(&mut conn, &partition, "vic", &["p1"]);
    sql_commit_task(&mut conn, &partition, "att", "seed", "p1", "x");
    // No rate cap: every publish fans out (the flood the cap exists for).
    let gw = Gateway::start(&["--presence-min-interval-ms", "0", "--session-queue", "8"]);
    let mut victim = slow_ws(&gw, &partition, "vic", "victim");
    victim.get_mut().set_read_timeout(Some(WAIT)).unwrap();
    round(&mut victim, &pull(&mut conn, &partition, "victim")); // registers project:p1
    let mut attacker = raw_ws(&gw, &partition, "att", "attacker");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = attacker.get_mut() {
        s.set_read_timeout(Some(WAIT)).unwrap();
    }
    round(&mut attacker, &pull(&mut conn, &partition, "attacker"));
    wait_round_end_reloads(&gw, 2);
    // The victim stops reading; the attacker floods.
    let pad = "p".repeat(2000);
    let mut sent = 0;
    while !gw.logs.lock().unwrap().iter().any(|l| l.contains("outbound queue full")) {
        assert!(sent < 20_000, "the victim's queue never overflowed");
        attacker.send(presence("project:p1", json!({"x": sent, "pad": pad}))).unwrap();
        sent += 1;
    }
    // The victim reads again: what was already on the wire, then the Close frame with 1008 —
    // not a dropped connection (1005).
    assert_eq!(close_code(&mut victim), Some(1008));
    gw.wait_health(200);
}

#[test]
fn presence_is_rate_capped_by_default_latest_wins() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-presence-default");
    grant(&mut conn, &partition, "att", &["p1"]);
    grant(&mut conn, &partition, "mate", &["p1"]);
    sql_commit_task(&mut conn, &partition, "att", "seed", "p1", "x");
    let gw = Gateway::start(&[]);
    let mut mate = raw_ws(&gw, &partition, "mate", "mate");
    let mut attacker = raw_ws(&gw, &partition, "att", "flooder");
    for ws in [&mut mate, &mut attacker] {
        if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
            s.set_read_timeout(Some(WAIT)).unwrap();
        }
    }
    round(&mut mate, &pull(&mut conn, &partition, "mate"));
    round(&mut attacker, &pull(&mut conn, &partition, "flooder"));
    wait_round_end_reloads(&gw, 2);
    let started = Instant::now();
    for i in 0..300 {
        attacker.send(presence("project:p1", json!({"x": i}))).unwrap();
    }
    let burst = started.elapsed();
    let mut fanouts = 0;
    loop {
        match mate.read().expect("presence fanouts") {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                if v["event"] == "presence" && v["data"]["actorId"] == "att" {
                    fanouts += 1;
                    if v["data"]["doc"]["x"] == 299 {
                        break;
                    }
                }
            }
            _ => continue,
        }
    }
    let windows = (burst.as_millis() / 50) as usize + 2;
    assert!(fanouts <= windows, "{fanouts} fanouts of 300 publishes in {burst:?} (default cap: 50 ms windows)");
    gw.wait_health(200);
}

/// Waits (bounded) until the server closes `s`; returns how long that took.
fn closed_within(s: &mut TcpStream, bound: Duration) -> Duration {
    let started = Instant::now();
    s.set_read_timeout(Some(bound)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return started.elapsed(),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("connection still open after {bound:?}")
            }
            Err(_) => return started.elapsed(), // reset
        }
    }
}

/// `GET /healthz` on a raw connection (kept alive); the whole response (head and body).
fn get_healthz(s: &mut TcpStream) -> String {
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()));
            if len.is_some_and(|len| body.len() >= len) {
                return text;
            }
        }
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            return String::from_utf8_lossy(&got).into_owned();
        }
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn slow_heads_and_idle_http_connections_are_dropped_normal_requests_are_not() {
    let gw = Gateway::start(&["--http-header-read-timeout-secs", "1", "--http-idle-timeout-secs", "2"]);
    let addr = addr(&gw);
    // Half a request line, then nothing: dropped by the header-read timeout.
    let mut half = TcpStream::connect(addr).unwrap();
    half.write_all(b"GET /heal").unwrap();
    let took = closed_within(&mut half, Duration::from_secs(10));
    assert!(took < Duration::from_millis(1900), "half a request line held the connection for {took:?}");
    // A head trickled one byte every 200 ms: trickling does not extend the timeout.
    let mut trickle = TcpStream::connect(addr).unwrap();
    let mut writer = trickle.try_clone().unwrap();
    let feeder = std::thread::spawn(move || {
        for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: yes\r\n\r\n" {
            if writer.write_all(&[*b]).is_err() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        true
    });
    let took = closed_within(&mut trickle, Duration::from_secs(10));
    assert!(took < Duration::from_millis(1900), "a trickled head held the connection for {took:?}");
    assert!(!feeder.join().unwrap(), "the trickled head was never refused");
    // A connection that sends nothing, and a kept-alive one after its response: the idle timeout.
    let mut silent = TcpStream::connect(addr).unwrap();
    let took = closed_within(&mut silent, Duration::from_secs(10));
    assert!(took >= Duration::from_millis(1500) && took < Duration::from_secs(4), "silent connection closed after {took:?}");
    let mut kept = TcpStream::connect(addr).unwrap();
    // Normal requests are unaffected, also several on one kept-alive connection.
    for _ in 0..3 {
        let resp = get_healthz(&mut kept);
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        std::thread::sleep(Duration::from_millis(700));
    }
    let took = closed_within(&mut kept, Duration::from_secs(10));
    assert!(took >= Duration::from_millis(1000) && took < Duration::from_secs(4), "idle keep-alive connection closed after {took:?}");
    // Upgrades still work, and an upgraded socket is not an idle HTTP connection.
    let mut ws = raw_ws(&gw, &partition_name("gw-http-idle"), "alice", "upgraded");
    std::thread::sleep(Duration::from_secs(3));
    ws.send(Message::Text(r#"{"type":"ack","cursor":0}"#.into())).unwrap();
    wait_until("the ack went through", || gw.metric("syncular_gateway_acks_received_total") >= 1.0);
    gw.wait_health(200);
}

#[test]
fn the_connection_cap_counts_websockets_and_refuses_with_503() {
    let mut conn = connect();
    setup(&mut conn);
    let gw = Gateway::start(&["--max-connections", "3", "--http-idle-timeout-secs", "60"]);
    let addr = addr(&gw);
    let _ws = raw_ws(&gw, &partition_name("gw-cap"), "alice", "cap-ws");
    let idle1 = TcpStream::connect(addr).unwrap();
    let _idle2 = TcpStream::connect(addr).unwrap();
    // The fourth connection is refused at once, before it says anything.
    let mut over = TcpStream::connect(addr).unwrap();
    over.set_read_timeout(Some(WAIT)).unwrap();
    let mut answer = String::new();
    over.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    // Answered as the catalog code syncular-client 0.49 retries on its own; the host code rides along.
    assert_eq!((body["code"].as_str(), body["retryable"].as_bool()), (Some("sync.internal_error"), Some(true)), "{body}");
    assert_eq!(body["details"]["hostCode"], "syncular.unavailable", "{body}");
    // A closed connection frees its place.
    drop(idle1);
    let deadline = Instant::now() + WAIT;
    let health = loop {
        let mut s = TcpStream::connect(addr).unwrap();
        let resp = get_healthz(&mut s);
        if resp.starts_with("HTTP/1.1 200") {
            break resp;
        }
        assert!(resp.starts_with("HTTP/1.1 503") && Instant::now() < deadline, "{resp}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let v: Value = serde_json::from_str(health.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(v["connections"], 3, "the WebSocket, the idle connection and this one: {v}");
}
