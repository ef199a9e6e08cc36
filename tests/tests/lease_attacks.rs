//! Attacks on auth leases (§7.3) kept as regression tests, over the SQL API with hand-built
//! requests: actor/client confusion, scope escape under a lease, expiry boundary, revocation,
//! one LEASE frame per round (push then pull, wire v1).
use serde_json::{json, Value};
use ssp2::model::{Frame, Message, PushStatus};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema};
use syncular_integration_tests::wire::{commit, pull_header, push_outcomes, subscription, upsert, RawSession, Task};

const OUTAGE: &str = "resolver_outage";

fn session(partition: &str, actor: &str, client: &str, allowed: Value) -> RawSession {
    let mut c = connect();
    register_schema(&mut c).unwrap();
    c.batch_execute("SET syncular.lease_ttl = '1h'").unwrap();
    RawSession::new(c, partition, actor, client, Some(allowed))
}

fn leases(msg: &Message) -> Vec<(String, i64)> {
    msg.frames
        .iter()
        .filter_map(|f| match f {
            Frame::Lease { lease_id, expires_at_ms } => Some((lease_id.clone(), *expires_at_ms)),
            _ => None,
        })
        .collect()
}

fn pull_frames() -> Vec<Frame> {
    vec![pull_header(100, 100, 1, 0b0011), subscription("s1", "tasks", &[("project_id", &["p1"])], -1, None)]
}

#[test]
fn lease_actor_confusion_and_scope_escape() {
    let p = partition_name("brklease");
    let mut alice = session(&p, "alice", "c-alice", allow_projects(&["p1"]));
    alice.acquire_epoch().unwrap();
    let msg = alice.round(pull_frames()).unwrap();
    let l = leases(&msg);
    assert_eq!(l.len(), 1, "one LEASE frame: {msg:?}");
    // bob reuses alice's client id, live and under the outage
    let mut bob = session(&p, "bob", "c-alice", allow_projects(&["p9"]));
    bob.log_epoch = alice.log_epoch.clone();
    let live = bob.round(pull_frames());
    eprintln!("bob live with alice's client id: {:?}", live.as_ref().map(leases));
    assert!(live.is_err(), "bob used alice's client id live");
    bob.allowed = Some(json!(OUTAGE));
    let out = bob.round(pull_frames());
    eprintln!("bob outage with alice's client id: {:?}", out.as_ref().map(leases));
    assert!(out.is_err(), "bob served from alice's lease");
    // alice under outage: served, no new LEASE frame; a write outside p1 is refused
    alice.allowed = Some(json!(OUTAGE));
    let msg = alice.round(pull_frames()).unwrap();
    assert!(leases(&msg).is_empty(), "outage round issued a lease");
    let res = alice.push(vec![commit("cc1", vec![upsert(&Task::new("t-out", "p2", "escape"), None)])]).unwrap();
    eprintln!("outage push to p2: {res:?}");
    assert_ne!(res[0].status, PushStatus::Applied, "lease-served write outside the leased scopes applied");
    // server commit as alice's client under outage, other actor
    let r = alice.conn.query_one(
        "SELECT syncular.commit($1, 'bob', '[{\"table\":\"tasks\",\"row\":{\"id\":\"t-x\",\"project_id\":\"p1\",\"title\":\"x\",\"done\":false}}]'::jsonb, client_id => 'c-alice', allowed_scopes => '\"resolver_outage\"'::jsonb)::text",
        &[&p],
    );
    eprintln!("syncular.commit as bob with alice's client under outage: {:?}", r.as_ref().map(|r| r.get::<_, String>(0)).map_err(|e| e.to_string()));
    assert!(r.is_err(), "bob committed on alice's lease");
    // realtime_open as bob with alice's client under outage
    let r = alice.conn.query_one("SELECT syncular.realtime_open($1, 'bob', 'c-alice', '\"resolver_outage\"'::jsonb)::text", &[&p]);
    eprintln!("realtime_open bob/c-alice outage: {:?}", r.as_ref().map(|r| r.get::<_, String>(0)).map_err(|e| e.to_string()));
    assert!(r.is_err());
}

#[test]
fn lease_expiry_boundary_and_revocation() {
    let p = partition_name("brkexp");
    let mut a = session(&p, "alice", "c-exp", allow_projects(&["p1"]));
    a.conn.batch_execute("SET syncular.now_ms = '1000000000000'").unwrap();
    a.acquire_epoch().unwrap();
    let l = leases(&a.round(pull_frames()).unwrap());
    let (id, exp) = l[0].clone();
    assert_eq!(exp, 1_000_000_000_000 + 3_600_000);
    a.allowed = Some(json!(OUTAGE));
    a.conn.batch_execute(&format!("SET syncular.now_ms = '{}'", exp - 1)).unwrap();
    assert!(a.round(pull_frames()).is_ok(), "served just before expiry");
    a.conn.batch_execute(&format!("SET syncular.now_ms = '{exp}'")).unwrap();
    let e = a.round(pull_frames()).unwrap_err();
    assert!(e.contains("auth_lease_required"), "{e}");
    // revoke: outage -> revoked; a hand-cleared revocation must not verify
    a.conn.batch_execute("SET syncular.now_ms = '1000000000001'").unwrap();
    let ok: bool = a.conn.query_one("SELECT syncular.revoke_lease($1, $2)", &[&p, &id]).unwrap().get(0);
    assert!(ok);
    let e = a.round(pull_frames()).unwrap_err();
    assert!(e.contains("auth_lease_revoked"), "{e}");
    a.conn.execute("UPDATE syncular.sync_auth_leases SET revoked_at_ms = NULL WHERE partition = $1", &[&p]).unwrap();
    let e = a.round(pull_frames()).unwrap_err();
    assert!(e.contains("auth_lease_required"), "hand-cleared revocation served: {e}");
    a.conn.execute("UPDATE syncular.sync_auth_leases SET revoked_at_ms = 1000000000001 WHERE partition = $1", &[&p]).unwrap();
    let e = a.round(pull_frames()).unwrap_err();
    assert!(e.contains("auth_lease_revoked"), "{e}");
    // recovery: a live round mints a fresh id; the revoked one is never served again
    a.allowed = Some(allow_projects(&["p1"]));
    let live = leases(&a.round(pull_frames()).unwrap());
    assert_eq!(live.len(), 1, "recovery sends one LEASE frame");
    assert_ne!(live[0].0, id, "the revoked handle resurrected");
    a.allowed = Some(json!(OUTAGE));
    assert!(a.round(pull_frames()).is_ok(), "the fresh lease serves an outage");
    let gone: bool = a.conn.query_one("SELECT syncular.revoke_lease($1, $2)", &[&p, &id]).unwrap().get(0);
    assert!(!gone, "the revoked id is no longer stored");
    // copy the signature/row to another client id by hand -> must not verify
    a.conn.batch_execute("RESET syncular.now_ms").unwrap();
}

/// Push then pull halves with the same bytes (what the gateway does): exactly one LEASE frame in
/// total; also a v1 request.
#[test]
fn lease_frames_per_half_and_v1() {
    let p = partition_name("brkhalves");
    let mut a = session(&p, "alice", "c-halves", allow_projects(&["p1"]));
    a.acquire_epoch().unwrap();
    let mut frames = vec![commit("h1", vec![upsert(&Task::new("t1", "p1", "x"), None)])];
    frames.extend(pull_frames());
    let bytes = a.encode(frames);
    let push: Vec<u8> = a.conn.query_one("SELECT syncular.push($1, 'alice', $2, $3)", &[&p, &bytes, &a.allowed]).unwrap().get(0);
    let pull: Vec<u8> = a.conn.query_one("SELECT syncular.pull($1, 'alice', $2, $3)", &[&p, &bytes, &a.allowed]).unwrap().get(0);
    let n_push = leases(&syncular_integration_tests::wire::decode_response(&push).unwrap()).len();
    let n_pull = leases(&syncular_integration_tests::wire::decode_response(&pull).unwrap()).len();
    eprintln!("push half LEASE frames {n_push}, pull half {n_pull}");
    assert_eq!(n_push + n_pull, 1);
    let v1 = syncular_integration_tests::wire::v1_request("c-halves", pull_frames());
    let r: Vec<u8> = a.conn.query_one("SELECT syncular.sync($1, 'alice', $2, $3)", &[&p, &v1, &a.allowed]).unwrap().get(0);
    let msg = syncular_integration_tests::wire::decode_response(&r).unwrap();
    eprintln!("v1: {} LEASE frames, wire {}", leases(&msg).len(), msg.wire_version);
    let _ = push_outcomes(&msg);
}
