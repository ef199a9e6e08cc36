//! Auth leases (SPEC §7.3) end to end: a real `syncular-client` (0.15.48, native HTTP and
//! WebSocket transport) through a running gateway whose connections have leases on
//! (`syncular.lease_ttl`). The client receives the `LEASE` frame, persists it in `leaseState`
//! (it survives reopening the client's database), keeps the same id across rounds, syncs on
//! the lease while the database resolver signals an outage, surfaces
//! `sync.auth_lease_revoked` after `syncular.revoke_lease` without losing local rows, and
//! recovers under a fresh id on its first live round once the resolver is back (no host call).
//! A gateway without the setting never sends a lease. Needs `SYNCULAR_TEST_DSN` and the
//! gateway binary (scripts/test builds it).
//!
//! The client records a lease code in `leaseState` only from a transport error carrying it
//! (§7.3.5); its native HTTP transport reports any non-2xx status as `transport.failed`, so
//! the failing rounds here go through [`CodedHttp`]: the same `POST /sync`, with the
//! gateway's §10.1 JSON error body read into the `TransportError` — what a host transport
//! is expected to do.

use postgres::Client;
use syncular_client::native_transport::HostTransport;
use serde_json::Value;
use syncular_client::{ClientLimits, SegmentRequest, SyncClient, SyncOutcome, Transport, TransportError};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{partition_name, schema_ir, server_tasks};
use syncular_integration_tests::gateway::{
    grant, http_agent, raw_ws, read_until_hello, setup, transport_config, wait_until, Gateway, Peer, WAIT,
};

/// `POST /sync` to a dev-auth gateway, a non-200 answer turned into a `TransportError`
/// with the §10.1 body's `code` and `message`. Segments go through the native transport.
struct CodedHttp<'a> {
    base_url: String,
    actor: String,
    partition: String,
    inner: &'a mut HostTransport,
}

impl Transport for CodedHttp<'_> {
    fn sync(&mut self, request: &[u8]) -> Result<Vec<u8>, TransportError> {
        let mut resp = http_agent()
            .post(format!("{}/sync", self.base_url))
            .header("content-type", "application/vnd.syncular.sync.v2")
            .header("x-syncular-actor", &self.actor)
            .header("x-syncular-partition", &self.partition)
            .send(request)
            .map_err(|e| TransportError::new("transport.failed", e.to_string()))?;
        let status = resp.status().as_u16();
        let body = resp.body_mut().read_to_vec().map_err(|e| TransportError::new("transport.failed", e.to_string()))?;
        if status == 200 {
            return Ok(body);
        }
        let error: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        Err(TransportError::new(
            error["code"].as_str().unwrap_or("transport.failed"),
            error["message"].as_str().unwrap_or("non-JSON error body"),
        ))
    }

    fn realtime_sync(&mut self, request: &[u8]) -> Result<Vec<u8>, TransportError> {
        self.sync(request)
    }

    fn download_segment(&mut self, request: &SegmentRequest) -> Result<Vec<u8>, TransportError> {
        self.inner.download_segment(request)
    }

    fn realtime_connect(&mut self) -> Result<(), TransportError> {
        Err(TransportError::new("transport.realtime_unsupported", "HTTP rounds only"))
    }

    fn realtime_send(&mut self, _text: &str) -> Result<(), TransportError> {
        Err(TransportError::new("transport.realtime_unsupported", "HTTP rounds only"))
    }

    fn realtime_close(&mut self) -> Result<(), TransportError> {
        Ok(())
    }
}

/// One round of `peer` (actor `actor` in `partition`) over [`CodedHttp`].
fn coded_sync(peer: &mut Peer, gw: &Gateway, partition: &str, actor: &str) -> Result<(), String> {
    let mut transport = CodedHttp {
        base_url: gw.base_url.clone(),
        actor: actor.to_owned(),
        partition: partition.to_owned(),
        inner: &mut peer.transport,
    };
    match peer.client.sync(&mut transport) {
        SyncOutcome::Ok(_) => Ok(()),
        SyncOutcome::Failed { error_code, message } => Err(format!("{error_code}: {message}")),
    }
}

/// One hour, the TTL the leasing gateway's connections run with.
const TTL_S: i64 = 3600;

fn leasing_gateway() -> Gateway {
    leasing_gateway_with("")
}

/// A dev-auth gateway whose connections run with leases on and the extra `-c` settings `more`.
fn leasing_gateway_with(more: &str) -> Gateway {
    let dsn = syncular_integration_tests::dsn();
    assert!(!dsn.contains("://"), "a key=value test DSN is expected");
    Gateway::start_with_dsn(&format!("{dsn} options='-c syncular.lease_ttl={TTL_S}{more}'"), &["--auth", "dev"])
}

/// A peer whose client database is the file `path` (reopened when it exists).
fn file_peer(gw: &Gateway, partition: &str, actor: &str, client_id: &str, path: &str) -> Peer {
    let transport = HostTransport::from_config(&transport_config(&gw.base_url, actor, partition)).expect("transport");
    let client = SyncClient::open_path(client_id.to_owned(), &schema_ir(), ClientLimits::default(), path).expect("open client db");
    Peer { client, transport, received: Vec::new() }
}

/// The stored lease of `client_id`: (lease_id, expires_at_ms, revoked).
fn stored(conn: &mut Client, partition: &str, client_id: &str) -> Option<(String, i64, bool)> {
    conn.query_opt(
        "SELECT lease_id, expires_at_ms, revoked_at_ms IS NOT NULL FROM syncular.leases($1) WHERE client_id = $2",
        &[&partition, &client_id],
    )
    .expect("syncular.leases")
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

fn lease_id(peer: &Peer) -> Option<String> {
    peer.client.lease_state().and_then(|l| l.lease_id.clone())
}

fn server_ids(conn: &mut Client, partition: &str) -> Vec<String> {
    server_tasks(conn, partition).unwrap().into_iter().map(|r| r.0).collect()
}

#[test]
fn the_real_client_holds_the_lease_syncs_on_it_in_an_outage_and_surfaces_revocation() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-lease");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let gw = leasing_gateway();
    let db = std::env::temp_dir().join(format!("syncular-lease-{}-{partition}.db", std::process::id()));
    let db = db.to_str().unwrap().to_owned();
    let _ = std::fs::remove_file(&db);

    // (a) Issued on an authorized round, persisted, slid under the same id.
    let mut alice = file_peer(&gw, &partition, "alice", "alice-1", &db);
    alice.subscribe("mine", &["p1"]);
    alice.write_task("t1", "p1", "before the outage");
    alice.sync_idle(6).expect("live rounds");
    let state = alice.client.lease_state().cloned().expect("leaseState after a LEASE frame");
    let (id, expires, revoked) = stored(&mut conn, &partition, "alice-1").expect("a stored lease");
    assert_eq!(state.lease_id.as_deref(), Some(id.as_str()));
    assert_eq!(state.expires_at_ms, Some(expires));
    assert_eq!(state.error_code, None);
    assert!(!revoked);
    drop(alice);
    let mut alice = file_peer(&gw, &partition, "alice", "alice-1", &db);
    assert_eq!(alice.client.lease_state().cloned(), Some(state.clone()), "leaseState survives reopening the database");
    alice.sync().expect("another live round");
    assert_eq!(lease_id(&alice).as_deref(), Some(id.as_str()), "a refresh slides the same lease");
    assert!(alice.client.lease_state().unwrap().expires_at_ms >= Some(expires));

    // (b) The resolver signals an outage: the round is served from the lease, no refresh.
    conn.execute("INSERT INTO public.gw_test_outages VALUES ($1)", &[&partition]).unwrap();
    let before = stored(&mut conn, &partition, "alice-1");
    alice.write_task("t2", "p1", "during the outage");
    alice.sync().expect("a lease-authorized round");
    assert_eq!(server_ids(&mut conn, &partition), vec!["t1", "t2"]);
    assert_eq!(stored(&mut conn, &partition, "alice-1"), before, "no refresh during lease service");
    // The socket path opens and syncs on the lease too (realtime_open re-resolves through it).
    alice.connect();
    alice.pump_until("hello", |p| p.hello().is_some());
    alice.write_task("t3", "p1", "over the socket, on the lease");
    alice.sync().expect("a socket round on the lease");
    assert_eq!(server_ids(&mut conn, &partition), vec!["t1", "t2", "t3"]);

    // (c) Revoked: the open socket's registrations are re-resolved at once (the revocation
    // notifies the actor's sessions) and fail closed; the next leased round fails
    // request-level; local rows stay.
    let emptied = "syncular_gateway_refreshes_total{mode=\"host\",outcome=\"emptied\"";
    let before_refresh = gw.metric(emptied);
    let revoked: bool = conn.query_one("SELECT syncular.revoke_lease($1, $2)", &[&partition, &id]).unwrap().get(0);
    assert!(revoked);
    wait_until("the revoked lease's session is emptied", || gw.metric(emptied) > before_refresh);
    alice.disconnect();
    alice.write_task("t4", "p1", "queued while revoked");
    let err = coded_sync(&mut alice, &gw, &partition, "alice").expect_err("a revoked lease serves nothing");
    assert!(err.starts_with("sync.auth_lease_revoked"), "{err}");
    assert_eq!(alice.client.lease_state().unwrap().error_code.as_deref(), Some("sync.auth_lease_revoked"));
    assert_eq!(alice.task_ids(), vec!["t1", "t2", "t3", "t4"], "no purge on a lease error");
    assert_eq!(server_ids(&mut conn, &partition), vec!["t1", "t2", "t3"], "t4 stays queued");

    // Recovery (§7.3.4, Appendix B 15 (c)): the resolver is back; the next live round mints a
    // fresh id, no host call needed.
    conn.execute("DELETE FROM public.gw_test_outages WHERE partition = $1", &[&partition]).unwrap();
    alice.sync_idle(6).expect("live again");
    let fresh = lease_id(&alice).expect("a fresh lease");
    assert_ne!(fresh, id, "the revoked handle never comes back");
    assert_eq!(alice.client.lease_state().unwrap().error_code, None);
    assert_eq!(stored(&mut conn, &partition, "alice-1").map(|s| s.0), Some(fresh));
    assert_eq!(server_ids(&mut conn, &partition), vec!["t1", "t2", "t3", "t4"], "the queued write drained");
    let _ = std::fs::remove_file(&db);
}

#[test]
fn an_outage_without_a_lease_is_auth_lease_required_and_leases_off_sends_nothing() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-lease-off");
    grant(&mut conn, &partition, "bob", &["p1"]);

    // Leases off (the default): a live round sends no LEASE frame and stores nothing.
    let plain = Gateway::start(&[]);
    let mut bob = Peer::new(&plain.base_url, &partition, "bob", "bob-1");
    bob.subscribe("mine", &["p1"]);
    bob.write_task("b1", "p1", "x");
    bob.sync_idle(6).expect("live rounds");
    assert_eq!(bob.client.lease_state(), None);
    assert_eq!(stored(&mut conn, &partition, "bob-1"), None);

    // Leases on, but the first round already meets the outage: no lease to serve it.
    let gw = leasing_gateway();
    conn.execute("INSERT INTO public.gw_test_outages VALUES ($1)", &[&partition]).unwrap();
    let mut carol = Peer::new(&gw.base_url, &partition, "bob", "bob-2");
    carol.subscribe("mine", &["p1"]);
    carol.sync().expect("the epoch acquisition round resolves no scopes");
    let err = coded_sync(&mut carol, &gw, &partition, "bob").expect_err("no lease, no service");
    assert!(err.starts_with("sync.auth_lease_required"), "{err}");
    assert_eq!(carol.client.lease_state().unwrap().error_code.as_deref(), Some("sync.auth_lease_required"));
    conn.execute("DELETE FROM public.gw_test_outages WHERE partition = $1", &[&partition]).unwrap();
}

#[test]
fn a_socket_opened_on_a_lease_closes_at_the_leases_expiry() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-lease-expiry");
    grant(&mut conn, &partition, "dana", &["p1"]);
    // The gateway's connections stamp time in 2020: the lease they issue is valid by the
    // database's clock and long expired by the gateway's, so a socket opened on it closes at once.
    let gw = leasing_gateway_with(" -c syncular.now_ms=1600000000000");
    let mut dana = Peer::new(&gw.base_url, &partition, "dana", "dana-1");
    dana.subscribe("mine", &["p1"]);
    dana.sync_idle(6).expect("live rounds");
    assert_eq!(dana.client.lease_state().and_then(|l| l.expires_at_ms), Some(1_600_000_000_000 + TTL_S * 1000));
    drop(dana);

    conn.execute("INSERT INTO public.gw_test_outages VALUES ($1)", &[&partition]).unwrap();
    let mut ws = raw_ws(&gw, &partition, "dana", "dana-1");
    read_until_hello(&mut ws);
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
        s.set_read_timeout(Some(WAIT)).ok();
    }
    let frame = loop {
        match ws.read().expect("the gateway closes the socket") {
            tungstenite::Message::Close(frame) => break frame.expect("a close frame with a code"),
            _ => continue,
        }
    };
    assert_eq!(u16::from(frame.code), 1008);
    assert!(frame.reason.as_str().starts_with("sync.auth_lease_required"), "{frame:?}");
    conn.execute("DELETE FROM public.gw_test_outages WHERE partition = $1", &[&partition]).unwrap();
}
