//! `syncular.gateway_round` over a real connection (docs/src/sql/sync.md): the
//! bytes and errors of `syncular.sync`; a request without `PUSH_COMMIT`, as a
//! statement of its own, commits with `synchronous_commit = off` — for that
//! transaction only; a request with pushes, or a call inside `BEGIN`, commits
//! durably.

use postgres::Client;
use serde_json::Value;
use ssp2::model::PushStatus;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema};
use syncular_integration_tests::transport::call_sync;
use syncular_integration_tests::wire::{
    commit, db_message, decode_response, pull_header, push_outcomes, subscription, upsert, RawSession, Task,
};

/// The round, then the commit mode its transaction will use (the target list is
/// evaluated left to right, so the setting is read after the round set it).
const ROUND_AND_MODE: &str = "SELECT syncular.gateway_round($1::text, $2::text, $3::bytea, $4::jsonb), \
                              pg_catalog.current_setting('synchronous_commit')";

fn round(conn: &mut impl postgres::GenericClient, partition: &str, request: &[u8], allowed: &Value) -> Result<(Vec<u8>, String), postgres::Error> {
    let row = conn.query_one(ROUND_AND_MODE, &[&partition, &"alice", &request, allowed])?;
    Ok((row.get(0), row.get(1)))
}

fn show(conn: &mut Client) -> String {
    conn.query_one("SHOW synchronous_commit", &[]).expect("SHOW").get(0)
}

#[test]
fn only_a_pull_only_round_of_its_own_commits_asynchronously() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("gwround");
    let allowed = allow_projects(&["p1"]);
    let mut s = RawSession::new(connect(), &partition, "alice", "gw-round-client", Some(allowed.clone()));
    s.acquire_epoch().expect("epoch");
    let out = s.push(vec![commit("c1", vec![upsert(&Task::new("a", "p1", "one"), None)])]).expect("push");
    assert_eq!(out[0].status, PushStatus::Applied);
    let pull_frames = || vec![pull_header(100, 100, 1, 0b0011), subscription("s1", "tasks", &[("project_id", &["p1"])], 1, None)];
    let pull = s.encode(pull_frames());

    let mut conn = connect();
    assert_eq!(show(&mut conn), "on", "the server's default");
    let by_sync = call_sync(&mut conn, &partition, "alice", &pull, Some(&allowed)).expect("syncular.sync");
    let (bytes, mode) = round(&mut conn, &partition, &pull, &allowed).expect("gateway_round, pull only");
    assert_eq!(bytes, by_sync, "the bytes of syncular.sync for the same request and state");
    assert_eq!(mode, "off", "a pull-only round of its own commits asynchronously");
    assert_eq!(show(&mut conn), "on", "the setting ends with the round's transaction");

    let mut tx = conn.transaction().expect("BEGIN");
    let (bytes, mode) = round(&mut tx, &partition, &pull, &allowed).expect("gateway_round inside BEGIN");
    tx.commit().expect("COMMIT");
    assert_eq!(bytes, by_sync);
    assert_eq!(mode, "on", "inside the caller's transaction the caller decides");

    let mut frames = vec![commit("c2", vec![upsert(&Task::new("b", "p1", "two"), None)])];
    frames.extend(pull_frames());
    let (bytes, mode) = round(&mut conn, &partition, &s.encode(frames), &allowed).expect("gateway_round with a push");
    assert_eq!(mode, "on", "a round with pushes commits durably");
    let response = decode_response(&bytes).expect("response");
    assert_eq!(push_outcomes(&response)[0].status, PushStatus::Applied);
    let stored: i64 = conn
        .query_one("SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &[&partition])
        .expect("count")
        .get(0);
    assert_eq!(stored, 2, "the pushed commit is stored once the statement returned");

    let err = round(&mut conn, &partition, b"SSP2", &allowed).expect_err("a truncated request fails");
    assert!(db_message(&err).starts_with("sync.invalid_request"), "{}", db_message(&err));
    assert_eq!(show(&mut conn), "on");
}
