//! Harness for the tests against a running `syncular-gateway` (`tests/tests/gateway_*.rs`):
//! spawn the binary (`SYNCULAR_GATEWAY_BIN`, default `<target>/debug/syncular-gateway`) on
//! `127.0.0.1:0` against `SYNCULAR_TEST_DSN`, read its `listening on http://ADDR` line, stop it
//! with SIGTERM; a test scope resolver (`public.gw_test_allowed`, memberships in
//! `public.gw_test_memberships`) for the dev auth mode; real `syncular-client` peers over the
//! client's own native HTTP/WebSocket transport; raw HTTP (`ureq`) and WebSocket
//! (`tungstenite`) for bad input. Waits are bounded (they fail the test, never hang it).

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postgres::Client;
use serde_json::{json, Value};
use syncular_client::native_transport::{HostTransport, Inbound};
use syncular_client::{SyncClient, SyncOutcome, SyncReport};

use crate::clients::{new_client, subscribe_projects};
use crate::fixtures::{register_schema, TASKS};

/// Environment variable naming the gateway binary.
pub const BIN_ENV: &str = "SYNCULAR_GATEWAY_BIN";
/// Comma-separated URLs every spawned gateway also LISTENs on (`--notify-database-url`): for
/// runs against a Citus cluster whose sync functions are delegated to the workers.
pub const NOTIFY_URLS_ENV: &str = "SYNCULAR_TEST_NOTIFY_DATABASE_URLS";

/// Default bound of every wait in the gateway tests.
pub const WAIT: Duration = Duration::from_secs(20);

/// The gateway binary: `$SYNCULAR_GATEWAY_BIN`, else `syncular-gateway` next to the test
/// executable's `deps/` folder (`<target>/debug/`).
pub fn gateway_bin() -> PathBuf {
    if let Ok(p) = std::env::var(BIN_ENV) {
        if !p.is_empty() {
            return PathBuf::from(p);
        }
    }
    let exe = std::env::current_exe().expect("current test executable");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>/deps");
    dir.join("syncular-gateway")
}

/// A running gateway process.
pub struct Gateway {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// `--gateway-id` (its LISTEN connection is `syncular-gateway-listen-<id>`).
    pub id: String,
    /// stderr lines (logs), for assertions and failure output.
    pub logs: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    /// Starts a dev-auth gateway with `extra` flags.
    pub fn start(extra: &[&str]) -> Gateway {
        let mut args = vec!["--auth", "dev"];
        args.extend_from_slice(extra);
        Gateway::start_with(&args)
    }

    /// Starts a gateway with exactly these flags (plus database URL, listen address, id, and
    /// one `--notify-database-url` per entry of `SYNCULAR_TEST_NOTIFY_DATABASE_URLS`).
    pub fn start_with(args: &[&str]) -> Gateway {
        Gateway::start_with_dsn(&crate::dsn(), args)
    }

    /// [`Gateway::start_with`] against another connection string (e.g. the test DSN plus
    /// `options='-c …'` session settings for the gateway's connections).
    pub fn start_with_dsn(dsn: &str, args: &[&str]) -> Gateway {
        Gateway::start_with_env(dsn, args, &[])
    }

    /// [`Gateway::start_with_dsn`] with extra environment variables (e.g. the object store's
    /// credentials, which have no flags).
    pub fn start_with_env(dsn: &str, args: &[&str], env: &[(&str, &str)]) -> Gateway {
        static N: AtomicU64 = AtomicU64::new(0);
        let id = format!("gwt-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        let bin = gateway_bin();
        let mut cmd = Command::new(&bin);
        for (k, _) in std::env::vars() {
            if k.starts_with("SYNCULAR_GATEWAY_") && k != BIN_ENV {
                cmd.env_remove(k);
            }
        }
        cmd.args(["--database-url", dsn, "--listen", "127.0.0.1:0", "--gateway-id", &id]);
        // By hand on a Citus cluster with delegated functions (docs/src/operate/citus.md "Scaling out with
        // Citus"): every gateway also listens on these nodes (comma-separated URLs).
        if let Ok(urls) = std::env::var(NOTIFY_URLS_ENV) {
            for url in urls.split(',').map(str::trim).filter(|u| !u.is_empty()) {
                cmd.args(["--notify-database-url", url]);
            }
        }
        cmd.envs(env.iter().copied());
        cmd.args(args)
            .env("SYNCULAR_GATEWAY_LOG", "info,syncular_gateway=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e} (build it: cargo build -p syncular-gateway)", bin.display()));
        let logs = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr");
        let log_sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log_sink.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                if let Some(url) = line.trim().strip_prefix("listening on ") {
                    let _ = tx.send(url.to_owned());
                }
                line.clear();
            }
        });
        let base_url = match rx.recv_timeout(WAIT) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!("gateway did not print its address; logs:\n{}", logs.lock().unwrap().join("\n"));
            }
        };
        Gateway { child: Some(child), base_url, id, logs }
    }

    /// `application_name` of its LISTEN connection.
    pub fn listen_application_name(&self) -> String {
        format!("syncular-gateway-listen-{}", self.id)
    }

    /// The realtime URL `ws://…/realtime`.
    pub fn ws_url(&self) -> String {
        format!("{}/realtime", self.base_url.replacen("http://", "ws://", 1))
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn stop(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let pid = child.id() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("gateway did not exit after SIGTERM; logs:\n{}", self.logs.lock().unwrap().join("\n"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// GET a root endpoint (`/healthz`, `/metrics`): (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        let mut resp = http_agent().get(format!("{}{path}", self.base_url)).call().expect("GET");
        let status = resp.status().as_u16();
        (status, resp.body_mut().read_to_string().unwrap_or_default())
    }

    /// The sum of the metric lines starting with `prefix` — a metric name
    /// (`syncular_gateway_sessions_open`) or a name with leading labels
    /// (`syncular_gateway_wakes_total{reason="delta-too-large"`); 0 when absent.
    pub fn metric(&self, prefix: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .filter(|l| l.starts_with(prefix) && (prefix.contains('{') || l[prefix.len()..].starts_with([' ', '{'])))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Waits until `/healthz` answers `status` (bounded).
    pub fn wait_health(&self, status: u16) {
        wait_until(&format!("healthz {status}"), || self.get("/healthz").0 == status);
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `cond` every 20 ms until it holds; panics after [`WAIT`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A ureq agent that returns error statuses as responses.
pub fn http_agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(60))).build().into()
}

/// Registers the sample schema and installs the test scope resolver (idempotent):
/// `public.gw_test_allowed(partition, actor)` = `{"project_id": [projects of the actor]}`
/// from `public.gw_test_memberships` (1.5 s slow for partitions named `*slow-open*`, 15 ms for `*slow-round*`; the
/// auth-lease outage signal `"resolver_outage"` for partitions in `public.gw_test_outages`).
pub fn setup(conn: &mut Client) {
    register_schema(conn).expect("register schema");
    let mut tx = conn.transaction().expect("tx");
    tx.execute("SELECT pg_advisory_xact_lock(7315002)", &[]).expect("lock");
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS public.gw_test_memberships (
             partition text NOT NULL, actor text NOT NULL, project text NOT NULL,
             PRIMARY KEY (partition, actor, project));
         CREATE TABLE IF NOT EXISTS public.gw_test_outages(partition text PRIMARY KEY);
         CREATE OR REPLACE FUNCTION public.gw_test_allowed(partition text, actor_id text) RETURNS jsonb
           LANGUAGE plpgsql VOLATILE AS $$
           BEGIN
             -- A partition listed in gw_test_outages: the authority is down (SPEC 7.3.3 signal).
             IF EXISTS (SELECT 1 FROM public.gw_test_outages o WHERE o.partition = gw_test_allowed.partition) THEN
               RETURN '\"resolver_outage\"'::jsonb;
             END IF;
             -- Partitions named *slow-open* resolve slowly: commits land while a socket opens.
             IF gw_test_allowed.partition LIKE '%slow-open%' THEN PERFORM pg_sleep(1.5); END IF;
             -- *slow-round*: every resolution (a round's pull, a registration reload) takes
             -- 15 ms, so commits and presence land inside socket rounds and their reloads.
             IF gw_test_allowed.partition LIKE '%slow-round%' THEN PERFORM pg_sleep(0.015); END IF;
             RETURN (SELECT jsonb_build_object('project_id', coalesce(jsonb_agg(m.project ORDER BY m.project), '[]'::jsonb))
                       FROM public.gw_test_memberships m
                      WHERE m.partition = gw_test_allowed.partition AND m.actor = gw_test_allowed.actor_id);
           END $$;
         SELECT syncular.set_scope_resolver('public.gw_test_allowed(text,text)');",
    )
    .expect("resolver");
    tx.commit().expect("commit");
}

/// Grants `actor` the projects in `partition`.
pub fn grant(conn: &mut Client, partition: &str, actor: &str, projects: &[&str]) {
    for p in projects {
        conn.execute(
            "INSERT INTO public.gw_test_memberships VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&partition, &actor, p],
        )
        .expect("grant");
    }
}

/// Revokes one project from `actor` and calls `syncular.refresh_scopes` in the same
/// transaction (contract §5).
pub fn revoke_and_refresh(conn: &mut Client, partition: &str, actor: &str, project: &str) {
    let mut tx = conn.transaction().expect("tx");
    tx.execute(
        "DELETE FROM public.gw_test_memberships WHERE partition = $1 AND actor = $2 AND project = $3",
        &[&partition, &actor, &project],
    )
    .expect("revoke");
    tx.execute("SELECT syncular.refresh_scopes($1, $2)", &[&partition, &actor]).expect("refresh_scopes");
    tx.commit().expect("commit");
}

/// A server-authored commit of one `tasks` row (through `syncular.commit`): returns its
/// commitSeq.
pub fn sql_commit_task(conn: &mut Client, partition: &str, actor: &str, id: &str, project: &str, title: &str) -> i64 {
    let ops = json!([{"table": TASKS, "op": "upsert", "row": {"id": id, "project_id": project, "title": title, "done": false, "priority": null}}]);
    let row = conn
        .query_one(
            "SELECT syncular.commit($1, $2, $3::jsonb, allowed_scopes => '{\"project_id\": [\"*\"]}')",
            &[&partition, &actor, &ops],
        )
        .expect("syncular.commit");
    let out: Value = row.get(0);
    assert_eq!(out["status"], "applied", "{out}");
    out["commitSeq"].as_i64().expect("commitSeq")
}

/// The stored cursor of a client record (`None` without one).
pub fn stored_cursor(conn: &mut Client, partition: &str, client_id: &str) -> Option<i64> {
    conn.query_opt("SELECT cursor FROM syncular.sync_clients WHERE partition = $1 AND client_id = $2", &[&partition, &client_id])
        .expect("read cursor")
        .map(|r| r.get(0))
}

/// One thing a [`Peer`] received on its socket.
#[derive(Debug, Clone)]
pub enum Received {
    /// A text control message.
    Text(Value),
    /// A `0x00` delta (SSP2 response bytes, tag stripped).
    Delta(Vec<u8>),
}

/// A real `syncular-client` with its native HTTP/WebSocket transport to a gateway (dev auth).
pub struct Peer {
    /// The client.
    pub client: SyncClient,
    /// Its transport.
    pub transport: HostTransport,
    /// Everything received on the socket, in order.
    pub received: Vec<Received>,
}

/// The transport config of the client's native transport for a dev-auth gateway.
pub fn transport_config(base_url: &str, actor: &str, partition: &str) -> Value {
    json!({"baseUrl": base_url, "headers": {"x-syncular-actor": actor, "x-syncular-partition": partition}})
}

impl Peer {
    /// A fresh client `client_id` of `actor` in `partition`, talking to `base_url`.
    pub fn new(base_url: &str, partition: &str, actor: &str, client_id: &str) -> Peer {
        let transport = HostTransport::from_config(&transport_config(base_url, actor, partition)).expect("native transport");
        Peer { client: new_client(client_id).expect("client"), transport, received: Vec::new() }
    }

    /// A client subscribed to `tasks` of `projects` that synced once over HTTP (so it has a
    /// client record with its subscriptions) and then connected its socket (`hello` read).
    pub fn connected(gw: &Gateway, partition: &str, actor: &str, client_id: &str, projects: &[&str]) -> Peer {
        let mut p = Peer::new(&gw.base_url, partition, actor, client_id);
        p.subscribe("tasks", projects);
        p.sync_idle(6).expect("initial HTTP sync");
        p.connect();
        p.pump_until("hello", |p| p.hello().is_some());
        p
    }

    /// Points the transport at another gateway (the socket must be disconnected).
    pub fn retarget(&mut self, base_url: &str, partition: &str, actor: &str) {
        self.transport.shutdown();
        self.transport = HostTransport::from_config(&transport_config(base_url, actor, partition)).expect("native transport");
    }

    /// Subscribes to `tasks` of `projects` (subscription id `sub`).
    pub fn subscribe(&mut self, sub: &str, projects: &[&str]) {
        subscribe_projects(&mut self.client, sub, projects).expect("subscribe");
    }

    /// One sync round (over the socket when connected, else HTTP).
    pub fn sync(&mut self) -> Result<SyncReport, String> {
        match self.client.sync(&mut self.transport) {
            SyncOutcome::Ok(r) => Ok(r),
            SyncOutcome::Failed { error_code, message } => Err(format!("{error_code}: {message}")),
        }
    }

    /// Rounds until idle (at most `max_rounds`).
    pub fn sync_idle(&mut self, max_rounds: u32) -> Result<SyncReport, String> {
        match self.client.sync_until_idle(&mut self.transport, Some(max_rounds)) {
            SyncOutcome::Ok(r) => Ok(r),
            SyncOutcome::Failed { error_code, message } => Err(format!("{error_code}: {message}")),
        }
    }

    /// Upserts a task locally (pushed by the next round).
    pub fn write_task(&mut self, id: &str, project: &str, title: &str) {
        let values = crate::clients::task_values(id, project, title, false, None);
        self.client.mutate(vec![crate::clients::upsert_task(values)]).expect("mutate");
    }

    /// Opens the realtime socket.
    pub fn connect(&mut self) {
        self.client.connect_realtime(&mut self.transport).expect("connect realtime");
    }

    /// Closes the realtime socket.
    pub fn disconnect(&mut self) {
        self.client.disconnect_realtime(&mut self.transport);
    }

    /// Applies whatever the socket delivered so far (local buffer only; no request to the
    /// server). Returns how many messages were handled.
    pub fn pump(&mut self) -> usize {
        let inbound = self.transport.take_inbound();
        let n = inbound.len();
        for frame in inbound {
            match frame {
                Inbound::Text(t) => {
                    self.received.push(Received::Text(serde_json::from_str(&t).unwrap_or(Value::String(t.clone()))));
                    self.client.on_realtime_text(&t);
                }
                Inbound::Binary(b) => {
                    self.received.push(Received::Delta(b.clone()));
                    self.client.on_realtime_binary(&mut self.transport, &b);
                }
            }
        }
        n
    }

    /// Pumps until `cond` holds (bounded by [`WAIT`]).
    pub fn pump_until(&mut self, what: &str, mut cond: impl FnMut(&Peer) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            self.pump();
            if cond(self) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for: {what}; received: {:?}", self.events());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Row ids of the tasks the client holds.
    pub fn task_ids(&self) -> Vec<String> {
        self.client.read_rows(TASKS).expect("read rows").into_iter().map(|r| r.row_id).collect()
    }

    /// True when the client holds task `id`.
    pub fn holds(&self, id: &str) -> bool {
        self.task_ids().iter().any(|t| t == id)
    }

    /// The control events received (`event` or `type` names) and `delta` for binaries.
    pub fn events(&self) -> Vec<String> {
        self.received
            .iter()
            .map(|r| match r {
                Received::Text(v) => v["event"].as_str().or(v["type"].as_str()).unwrap_or("?").to_owned(),
                Received::Delta(_) => "delta".to_owned(),
            })
            .collect()
    }

    /// The wake-up reasons received, in order.
    pub fn wakes(&self) -> Vec<String> {
        self.received
            .iter()
            .filter_map(|r| match r {
                Received::Text(v) if v["event"] == "sync" => v["data"]["reason"].as_str().map(str::to_owned),
                _ => None,
            })
            .collect()
    }

    /// The first `hello` received.
    pub fn hello(&self) -> Option<Value> {
        self.received.iter().find_map(|r| match r {
            Received::Text(v) if v["event"] == "hello" => Some(v["data"].clone()),
            _ => None,
        })
    }

    /// Deltas whose bytes contain `needle` (e.g. a unique row id).
    pub fn deltas_containing(&self, needle: &str) -> usize {
        self.received
            .iter()
            .filter(|r| matches!(r, Received::Delta(b) if b.windows(needle.len()).any(|w| w == needle.as_bytes())))
            .count()
    }

    /// Number of deltas received.
    pub fn delta_count(&self) -> usize {
        self.received.iter().filter(|r| matches!(r, Received::Delta(_))).count()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.transport.shutdown();
    }
}

/// A raw WebSocket to the gateway (for broken clients), dev auth headers set.
pub fn raw_ws(
    gw: &Gateway,
    partition: &str,
    actor: &str,
    client_id: &str,
) -> tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>> {
    use tungstenite::client::IntoClientRequest;
    let mut req = format!("{}?clientId={client_id}", gw.ws_url()).into_client_request().expect("ws request");
    req.headers_mut().insert("x-syncular-actor", actor.parse().unwrap());
    req.headers_mut().insert("x-syncular-partition", partition.parse().unwrap());
    let (ws, resp) = tungstenite::connect(req).expect("ws connect");
    assert_eq!(resp.status().as_u16(), 101);
    ws
}

/// Sends `request` (raw bytes, a whole HTTP request) on a socket of its own and returns the
/// status code of the answer's status line (0 when the connection closed first). Only the status
/// line is read: a gateway may keep the connection open (an upgrade, a kept-alive refusal).
pub fn raw_request_status(gw: &Gateway, request: &[u8]) -> u16 {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(gw.base_url.trim_start_matches("http://")).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.write_all(request).expect("write the request");
    let (mut out, mut byte) = (Vec::new(), [0u8]);
    while !out.ends_with(b"\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
        out.push(byte[0]);
    }
    String::from_utf8_lossy(&out).split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Reads from a raw socket until the `hello` (§8.1) arrived — the session is joined, so a later
/// notification reaches it. Panics when the socket closes first or nothing comes within [`WAIT`].
pub fn read_until_hello(ws: &mut tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>) -> Value {
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
        s.set_read_timeout(Some(WAIT)).ok();
    }
    loop {
        match ws.read().expect("a hello before anything else ends the socket") {
            tungstenite::Message::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str()).expect("JSON text frame");
                if v["event"] == "hello" {
                    return v["data"].clone();
                }
            }
            tungstenite::Message::Close(frame) => panic!("closed before hello: {frame:?}"),
            _ => continue,
        }
    }
}

/// Reads from a raw socket until it is closed; returns the close code (None when the
/// connection just dropped). Bounded by [`WAIT`].
pub fn read_until_closed(
    ws: &mut tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>,
) -> Option<u16> {
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
        s.set_read_timeout(Some(WAIT)).ok();
    }
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
            Ok(_) => continue,
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => return None,
            Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                panic!("socket not closed within {WAIT:?}")
            }
            Err(_) => return None,
        }
    }
}

/// POST raw bytes to `{base}/sync` with headers; returns (status, headers, body).
pub fn post_sync(base_url: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut req = http_agent().post(format!("{base_url}/sync"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = req.send(body).expect("POST /sync");
    let status = resp.status().as_u16();
    let hs = resp.headers().iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())).collect();
    let mut out = Vec::new();
    resp.body_mut().as_reader().read_to_end(&mut out).expect("read body");
    (status, hs, out)
}
