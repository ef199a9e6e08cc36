//! `syncular.gateway_round` over a real connection (docs/src/sql/sync.md): the
//! bytes and errors of `syncular.sync`; a request without `PUSH_COMMIT`, as a
//! statement of its own, commits with `synchronous_commit = off` — for that
//! transaction only; a request with pushes, a call inside `BEGIN`, and a
//! transaction where anything else writes — before the call or after it, in a
//! `DO` block or pipelined before one `Sync` (pgbench's pipeline mode) —
//! commit durably.
//!
//! "Durably" after the fact: a row written last in the transaction records the
//! WAL insert position; once the statement returned, the WAL is flushed past it
//! only if the COMMIT waited for its flush (an asynchronous commit leaves it to
//! the WAL writer, which may have flushed meanwhile: such a check passes for a
//! durable commit always and fails for an asynchronous one unless the WAL writer
//! was faster).

use std::process::Command;

use postgres::Client;
use serde_json::Value;
use ssp2::model::PushStatus;
use syncular_integration_tests::{connect, dsn};
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

/// `partition`'s session with one applied commit, and a pull-only request from cursor 1.
fn session(label: &str) -> (RawSession, String, Value, Vec<u8>) {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name(label);
    let allowed = allow_projects(&["p1"]);
    let mut s = RawSession::new(connect(), &partition, "alice", &format!("{label}-client"), Some(allowed.clone()));
    s.acquire_epoch().expect("epoch");
    let out = s.push(vec![commit("c1", vec![upsert(&Task::new("a", "p1", "one"), None)])]).expect("push");
    assert_eq!(out[0].status, PushStatus::Applied);
    let pull = s.encode(vec![pull_header(100, 100, 1, 0b0011), subscription("s1", "tasks", &[("project_id", &["p1"])], 1, None)]);
    (s, partition, allowed, pull)
}

/// A push + pull request of `session` committing `id`.
fn push_request(s: &RawSession, id: &str) -> Vec<u8> {
    s.encode(vec![
        commit(id, vec![upsert(&Task::new(id, "p1", id), None)]),
        pull_header(100, 100, 1, 0b0011),
        subscription("s1", "tasks", &[("project_id", &["p1"])], 1, None),
    ])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `SELECT syncular.gateway_round(…)` with every argument inline (for `DO` blocks and pgbench).
fn round_sql(partition: &str, request: &[u8], allowed: &Value) -> String {
    format!("syncular.gateway_round('{partition}', 'alice', '\\x{}'::bytea, '{allowed}'::jsonb)", hex(request))
}

/// A fresh observation table: what the transaction saw last (setting, WAL insert position).
fn observations(conn: &mut Client, table: &str) {
    conn.batch_execute(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (setting text, lsn pg_lsn, xid xid8)"
    ))
    .expect("observation table");
}

/// The observation row, and whether the WAL is flushed past its position now.
fn observed(conn: &mut Client, table: &str) -> (String, bool, usize) {
    let row = conn
        .query_one(
            &format!("SELECT min(setting), bool_and(pg_catalog.pg_current_wal_flush_lsn() > lsn), count(DISTINCT xid)::int FROM {table}"),
            &[],
        )
        .expect("observation");
    (row.get(0), row.get(1), row.get::<_, i32>(2) as usize)
}

fn commits_of(conn: &mut Client, partition: &str) -> i64 {
    conn.query_one("SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &[&partition])
        .expect("count")
        .get(0)
}

#[test]
fn a_pull_only_round_in_a_do_block_that_writes_commits_durably() {
    let (s, partition, allowed, pull) = session("gwround-do");
    let mut conn = connect();
    observations(&mut conn, "gwround_do_obs");
    let observe = "INSERT INTO gwround_do_obs SELECT pg_catalog.current_setting('synchronous_commit'), \
                   pg_catalog.pg_current_wal_insert_lsn(), pg_catalog.pg_current_xact_id()";
    // Written before the round: the round finds its transaction not fresh.
    conn.batch_execute(&format!(
        "DO $$ BEGIN INSERT INTO gwround_do_obs VALUES ('before', '0/0', pg_catalog.pg_current_xact_id()); \
         PERFORM {}; {observe}; END $$",
        round_sql(&partition, &pull, &allowed)
    ))
    .expect("DO: write, then the round");
    let (setting, flushed, xids) = observed(&mut conn, "gwround_do_obs");
    assert_eq!((setting.as_str(), xids), ("before", 1));
    let after: String = conn.query_one("SELECT setting FROM gwround_do_obs WHERE setting <> 'before'", &[]).unwrap().get(0);
    assert_eq!(after, "on", "a round after a write leaves the transaction durable");
    assert!(flushed, "the commit waited for its WAL flush");

    // Written after the round: PRE_COMMIT puts the setting back.
    observations(&mut conn, "gwround_do_obs");
    let push = push_request(&s, "c-do");
    conn.batch_execute(&format!(
        "DO $$ BEGIN PERFORM {}; PERFORM {}; {observe}; END $$",
        round_sql(&partition, &pull, &allowed),
        round_sql(&partition, &push, &allowed)
    ))
    .expect("DO: the round, then a push");
    let (setting, flushed, _) = observed(&mut conn, "gwround_do_obs");
    assert_eq!(setting, "off", "the pull-only round turned it off for the moment");
    assert!(flushed, "a push after the pull-only round: the COMMIT still waited for its WAL flush");
    assert_eq!(commits_of(&mut conn, &partition), 2);
    assert_eq!(show(&mut conn), "on");
    conn.batch_execute("DROP TABLE gwround_do_obs").unwrap();
}

/// pgbench of `SYNCULAR_PG_BIN` (else on PATH): one transaction of `script` in pipeline mode
/// (extended protocol: every statement before one `Sync`, one implicit transaction).
fn pgbench_pipeline(script: &str) {
    let path = std::env::temp_dir().join(format!("gwround-{}-{}.pgbench", std::process::id(), script.len()));
    std::fs::write(&path, format!("\\startpipeline\n{script}\\endpipeline\n")).expect("script");
    let bin = match std::env::var("SYNCULAR_PG_BIN") {
        Ok(dir) if !dir.is_empty() => format!("{dir}/pgbench"),
        _ => "pgbench".to_owned(),
    };
    let out = Command::new(&bin)
        .args(["-n", "-t", "1", "-c", "1", "-M", "extended", "-f"])
        .arg(&path)
        .arg(dsn())
        .output()
        .unwrap_or_else(|e| panic!("{bin}: {e} (set SYNCULAR_PG_BIN to the server's bin directory)"));
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "pgbench: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn pipelined_rounds_share_one_transaction_and_commit_durably() {
    let (s, partition, allowed, pull) = session("gwround-pipe");
    let mut conn = connect();
    observations(&mut conn, "gwround_pipe_obs");
    let observe = "INSERT INTO gwround_pipe_obs SELECT pg_catalog.current_setting('synchronous_commit'), \
                   pg_catalog.pg_current_wal_insert_lsn(), pg_catalog.pg_current_xact_id();\n";
    // A push, then a pull-only round before the same Sync: the pull finds the push's writes.
    pgbench_pipeline(&format!(
        "SELECT {};\nSELECT {};\n{observe}",
        round_sql(&partition, &push_request(&s, "c-pipe-1"), &allowed),
        round_sql(&partition, &pull, &allowed)
    ));
    let (setting, flushed, xids) = observed(&mut conn, "gwround_pipe_obs");
    assert_eq!(setting, "on", "a pull-only round pipelined after a push leaves the transaction durable");
    assert!(flushed && xids == 1);
    assert_eq!(commits_of(&mut conn, &partition), 2);

    // A pull-only round, then a push before the same Sync: PRE_COMMIT puts the setting back.
    observations(&mut conn, "gwround_pipe_obs");
    pgbench_pipeline(&format!(
        "SELECT {};\nSELECT {};\n{observe}",
        round_sql(&partition, &pull, &allowed),
        round_sql(&partition, &push_request(&s, "c-pipe-2"), &allowed)
    ));
    let (setting, flushed, xids) = observed(&mut conn, "gwround_pipe_obs");
    assert_eq!((setting.as_str(), xids), ("off", 1), "one transaction; the pull-only round turned it off for the moment");
    assert!(flushed, "a push pipelined after a pull-only round: the COMMIT still waited for its WAL flush");
    assert_eq!(commits_of(&mut conn, &partition), 3);
    conn.batch_execute("DROP TABLE gwround_pipe_obs").unwrap();
}
