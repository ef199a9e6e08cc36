//! JWT authentication at a running gateway (issue 8): HS256 tokens signed in the test map
//! claims to actor and partition; a real client syncs and connects its socket with a valid
//! token (header), a WebSocket upgrade may pass `?access_token=`; expired, forged, missing
//! and malformed tokens, and tokens without the configured partition claim, answer 401 `sync.auth_required` on HTTP and before upgrading, and
//! no token ever appears in the gateway's logs.
//! Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use jsonwebtoken::{encode, EncodingKey, Header};
use serde_json::{json, Value};
use syncular_client::native_transport::HostTransport;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{partition_name, TASKS};
use syncular_integration_tests::gateway::{grant, post_sync, read_until_closed, read_until_hello, setup, Gateway, Peer};
use syncular_integration_tests::wire::{pull_header, request, subscription};
use tungstenite::client::IntoClientRequest;

const SECRET: &[u8] = b"integration-test-secret-0123456789abcdef";

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

fn token(claims: Value, secret: &[u8]) -> String {
    encode(&Header::default(), &claims, &EncodingKey::from_secret(secret).unwrap()).unwrap()
}

fn jwt_gateway() -> (Gateway, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let path = dir.0.join("secret");
    std::fs::write(&path, SECRET).unwrap();
    let gw = Gateway::start_with(&[
        "--auth",
        "jwt",
        "--jwt-algorithm",
        "HS256",
        "--jwt-secret-file",
        path.to_str().unwrap(),
        "--jwt-partition-claim",
        "tenant",
        "--jwt-leeway-secs",
        "0",
    ]);
    (gw, dir)
}

mod tempdir {
    /// A private temporary directory removed on drop.
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Self {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("gw-jwt-{}-{}-{n}", std::process::id(), super::now()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn ws_status(gw: &Gateway, query: &str, bearer: Option<&str>) -> u16 {
    let mut req = format!("{}{query}", gw.ws_url()).into_client_request().unwrap();
    if let Some(t) = bearer {
        req.headers_mut().insert("authorization", format!("Bearer {t}").parse().unwrap());
    }
    match tungstenite::connect(req) {
        Ok((_, resp)) => resp.status().as_u16(),
        Err(tungstenite::Error::Http(resp)) => resp.status().as_u16(),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn valid_tokens_sync_and_connect_bad_tokens_are_401_and_never_logged() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-jwt");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let (gw, _dir) = jwt_gateway();
    let good = token(json!({"sub": "alice", "tenant": partition, "exp": now() + 300}), SECRET);

    // A real client with the bearer header syncs over HTTP and over its socket.
    let mut alice = Peer::new(&gw.base_url, &partition, "alice", "alice-jwt");
    alice.transport = HostTransport::from_config(&json!({"baseUrl": gw.base_url, "headers": {"authorization": format!("Bearer {good}")}})).unwrap();
    alice.subscribe("s", &["p1"]);
    alice.write_task("j1", "p1", "with a token");
    alice.sync_idle(6).expect("HTTP sync with a valid token");
    let rows: i64 = conn
        .query_one("SELECT count(*) FROM public.tasks WHERE _sync_partition = $1", &[&partition])
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "the token's tenant claim chose the partition");
    alice.connect();
    alice.pump_until("hello", |p| p.hello().is_some());
    assert_eq!(alice.hello().unwrap()["actorId"], "alice");
    assert_eq!(ws_status(&gw, &format!("?clientId=q1&access_token={good}"), None), 101);

    let ssp2 = "application/vnd.syncular.sync.v2";
    let body = request("x", None, vec![pull_header(0, 0, 0, 1), subscription("s", TASKS, &[("project_id", &["p1"])], -1, None)]);
    let expired = token(json!({"sub": "alice", "tenant": partition, "exp": now() - 10}), SECRET);
    let forged = token(json!({"sub": "alice", "tenant": partition, "exp": now() + 300}), b"not-the-gateway-secret-0123456789abcdef");
    let no_exp = token(json!({"sub": "alice", "tenant": partition}), SECRET);
    let no_sub = token(json!({"tenant": partition, "exp": now() + 300}), SECRET);
    // --jwt-partition-claim is set: a token without it is refused, never routed to the
    // default partition.
    let no_tenant = token(json!({"sub": "alice", "exp": now() + 300}), SECRET);
    for (what, auth) in [
        ("expired", Some(expired.as_str())),
        ("forged", Some(forged.as_str())),
        ("no exp", Some(no_exp.as_str())),
        ("no sub", Some(no_sub.as_str())),
        ("no tenant", Some(no_tenant.as_str())),
        ("garbage", Some("abc.def.ghi")),
        ("missing", None),
    ] {
        let header = auth.map(|t| format!("Bearer {t}"));
        let mut headers = vec![("content-type", ssp2)];
        if let Some(h) = &header {
            headers.push(("authorization", h.as_str()));
        }
        let (status, _, resp) = post_sync(&gw.base_url, &headers, &body);
        let v: Value = serde_json::from_slice(&resp).unwrap();
        assert_eq!((status, v["code"].as_str()), (401, Some("sync.auth_required")), "{what}: {v}");
        assert_eq!(ws_status(&gw, "?clientId=c9", auth), 401, "{what} (upgrade)");
        if let Some(t) = auth {
            assert_eq!(ws_status(&gw, &format!("?clientId=c9&access_token={t}"), None), 401, "{what} (query)");
        }
    }
    let logs = gw.logs.lock().unwrap().join("\n");
    for t in [&good, &expired, &forged] {
        let signature = t.rsplit('.').next().unwrap();
        assert!(!logs.contains(signature), "a token reached the logs");
    }
    assert!(!logs.contains("access_token"), "query strings are not logged");
}

#[test]
fn dev_auth_with_jwt_flags_is_refused_and_the_unsafe_banner_ignores_the_log_filter() {
    use std::process::{Command, Stdio};
    use syncular_integration_tests::gateway::{gateway_bin, wait_until};
    let dir = tempdir::Dir::new();
    let secret = dir.0.join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    // A flag on the command line, and the reviewer's case: dev mode from the environment with
    // a JWT flag — both refused at startup, before anything is served.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 3] = [
        (&["--auth", "dev", "--jwt-algorithm", "HS256"], &[], "--jwt-algorithm"),
        (&["--jwt-secret-file", secret.to_str().unwrap(), "--log-filter", "off"], &[("SYNCULAR_GATEWAY_AUTH", "dev")], "--jwt-secret-file"),
        (&["--auth", "dev"], &[("SYNCULAR_GATEWAY_JWT_PARTITION_CLAIM", "tenant")], "--jwt-partition-claim"),
    ];
    for (args, env, flag) in cases {
        let mut cmd = Command::new(gateway_bin());
        for (k, _) in std::env::vars() {
            if k.starts_with("SYNCULAR_GATEWAY_") {
                cmd.env_remove(k);
            }
        }
        let mut child = cmd
            .args(["--database-url", "host=/nonexistent dbname=x", "--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the gateway");
        // Bounded: a gateway that starts instead of refusing fails the test (and is killed).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        let status = status.unwrap_or_else(|| panic!("{args:?} {env:?}: the gateway started instead of refusing: {stderr}"));
        assert!(!status.success(), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains("--auth dev") && stderr.contains(flag), "{args:?}: {stderr}");
    }
    // Dev mode alone starts, and says UNSAFE on stderr even with logging switched off.
    let gw = Gateway::start_with(&["--auth", "dev", "--log-filter", "off"]);
    wait_until("the UNSAFE banner on stderr", || gw.logs.lock().unwrap().iter().any(|l| l.contains("UNSAFE: --auth dev")));
    gw.wait_health(200);
    assert!(gw.stop().success());
}

/// A raw socket authenticated by `bearer` (no client record needed: it only waits for its
/// close).
fn bearer_ws(
    gw: &Gateway,
    client_id: &str,
    bearer: &str,
) -> tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>> {
    let mut req = format!("{}?clientId={client_id}", gw.ws_url()).into_client_request().unwrap();
    req.headers_mut().insert("authorization", format!("Bearer {bearer}").parse().unwrap());
    let (ws, resp) = tungstenite::connect(req).expect("upgrade");
    assert_eq!(resp.status().as_u16(), 101);
    ws
}

#[test]
fn a_socket_is_closed_when_its_token_expires() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-jwt-exp");
    let (gw, _dir) = jwt_gateway();
    let short = token(json!({"sub": "alice", "tenant": partition, "exp": now() + 3}), SECRET);
    let long = token(json!({"sub": "bob", "tenant": partition, "exp": now() + 300}), SECRET);
    let mut expiring = bearer_ws(&gw, "exp-1", &short);
    let mut lasting = bearer_ws(&gw, "exp-2", &long);
    let started = std::time::Instant::now();
    // Closed with 1008 once the token expired — never while it was valid.
    assert_eq!(read_until_closed(&mut expiring), Some(1008));
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "closed before the token expired");
    // The socket with a valid token stays (it answers a ping).
    lasting.send(tungstenite::Message::Ping(b"still there".to_vec().into())).unwrap();
    loop {
        match lasting.read().expect("the long-lived socket stays open") {
            tungstenite::Message::Pong(p) if p.as_ref() == b"still there" => break,
            _ => continue,
        }
    }
}

#[test]
fn a_socket_whose_scopes_came_from_its_token_is_closed_by_refresh_scopes() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-jwt-claims");
    let dir = tempdir::Dir::new();
    let path = dir.0.join("secret");
    std::fs::write(&path, SECRET).unwrap();
    let gw = Gateway::start_with(&[
        "--auth", "jwt", "--jwt-algorithm", "HS256", "--jwt-secret-file", path.to_str().unwrap(),
        "--jwt-partition-claim", "tenant", "--jwt-scopes-claim", "scopes",
    ]);
    let claims = |sub: &str| token(json!({"sub": sub, "tenant": partition, "exp": now() + 300, "scopes": {"project_id": ["p1"]}}), SECRET);
    let mut alice = bearer_ws(&gw, "claims-a", &claims("alice"));
    let mut carol = bearer_ws(&gw, "claims-c", &claims("carol"));
    // Both sessions joined (a refresh committed before a session joins is not one it missed).
    read_until_hello(&mut alice);
    read_until_hello(&mut carol);
    // The host revokes alice: her token's scopes cannot be re-resolved, so her socket closes
    // (fail-closed) and she reconnects with a fresh token; carol's socket stays.
    conn.execute("SELECT syncular.refresh_scopes($1, 'alice')", &[&partition]).unwrap();
    assert_eq!(read_until_closed(&mut alice), Some(1008));
    carol.send(tungstenite::Message::Ping(b"ok".to_vec().into())).unwrap();
    loop {
        match carol.read().expect("carol's socket stays open") {
            tungstenite::Message::Pong(_) => break,
            _ => continue,
        }
    }
}
