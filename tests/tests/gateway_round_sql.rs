//! `syncular.gateway_round` over a real connection (docs/src/sql/sync.md): the
//! bytes and errors of `syncular.sync`; a request without `PUSH_COMMIT`, as a
//! statement of its own, commits asynchronously; a request with pushes, a call
//! inside `BEGIN`, and a transaction where anything else writes — before the
//! call or after it, in a `DO` block or pipelined before one `Sync` (pgbench's
//! pipeline mode) — commits durably; the caller's `synchronous_commit` is never
//! changed during the transaction, nor overridden when the caller changes it.
//!
//! Durable or not, observed after the fact: the transaction's last row records
//! the WAL insert position (or, for a lone statement, the position is read right
//! before it); once the statement returned, the WAL is flushed past it when the
//! COMMIT waited for its flush. The tests run one at a time with the WAL writer
//! slowed down (`wal_writer_delay` 10 s, `ALTER SYSTEM`, put back at the end), so
//! an asynchronous commit stays unflushed meanwhile; a lone asynchronous commit
//! is looked for in up to five rounds (another backend's durable commit flushes
//! everything before it).

use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use postgres::Client;
use serde_json::Value;
use ssp2::model::{Frame, PushStatus};
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema};
use syncular_integration_tests::transport::call_sync;
use syncular_integration_tests::wire::{
    commit, db_message, decode_response, pull_header, push_outcomes, request, subscription, upsert, RawSession, Task,
};
use syncular_integration_tests::{connect, dsn};

/// One test at a time, with the WAL writer slowed down while it runs.
struct SlowWalWriter {
    conn: Client,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl SlowWalWriter {
    fn new() -> Self {
        static ONE: Mutex<()> = Mutex::new(());
        let guard = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let mut conn = connect();
        conn.batch_execute("ALTER SYSTEM SET wal_writer_delay = '10s'").expect("slow the WAL writer down (superuser)");
        conn.batch_execute("SELECT pg_catalog.pg_reload_conf()").expect("reload");
        std::thread::sleep(Duration::from_millis(300)); // the WAL writer reads its new delay
        SlowWalWriter { conn, _one_at_a_time: guard }
    }
}

impl Drop for SlowWalWriter {
    fn drop(&mut self) {
        let _ = self.conn.batch_execute("ALTER SYSTEM RESET wal_writer_delay");
        let _ = self.conn.batch_execute("SELECT pg_catalog.pg_reload_conf()");
    }
}

/// The round's bytes and the `synchronous_commit` the same statement reads after it.
const ROUND_AND_SETTING: &str = "SELECT syncular.gateway_round($1::text, $2::text, $3::bytea, $4::jsonb), \
                                 pg_catalog.current_setting('synchronous_commit')";

fn round(conn: &mut impl postgres::GenericClient, partition: &str, request: &[u8], allowed: &Value) -> Result<(Vec<u8>, String), postgres::Error> {
    let row = conn.query_one(ROUND_AND_SETTING, &[&partition, &"alice", &request, allowed])?;
    Ok((row.get(0), row.get(1)))
}

/// The WAL insert position now.
fn insert_lsn(conn: &mut Client) -> String {
    conn.query_one("SELECT pg_catalog.pg_current_wal_insert_lsn()::text", &[]).expect("WAL position").get(0)
}

/// Whether the WAL is flushed past `lsn` now, and whether anything was inserted after it.
fn flushed_past(conn: &mut Client, lsn: &str) -> (bool, bool) {
    let row = conn
        .query_one(
            "SELECT pg_catalog.pg_current_wal_flush_lsn() > $1::text::pg_lsn, pg_catalog.pg_current_wal_insert_lsn() > $1::text::pg_lsn",
            &[&lsn],
        )
        .expect("WAL positions");
    (row.get(0), row.get(1))
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
    let pull = s.encode(pull_frames());
    (s, partition, allowed, pull)
}

/// The pull half of every request here: one subscription from cursor 1.
fn pull_frames() -> Vec<Frame> {
    vec![pull_header(100, 100, 1, 0b0011), subscription("s1", "tasks", &[("project_id", &["p1"])], 1, None)]
}

/// A push + pull request of `session` committing `id`.
fn push_request(s: &RawSession, id: &str) -> Vec<u8> {
    let mut frames = vec![commit(id, vec![upsert(&Task::new(id, "p1", id), None)])];
    frames.extend(pull_frames());
    s.encode(frames)
}

/// A pull-only request of a client `client_id` has never used: its first pull writes the client
/// record (a commit to flush, or not).
fn new_client_pull(s: &RawSession, client_id: &str) -> Vec<u8> {
    request(client_id, s.log_epoch.as_deref(), pull_frames())
}

fn commits_of(conn: &mut Client, partition: &str) -> i64 {
    conn.query_one("SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &[&partition])
        .expect("count")
        .get(0)
}

#[test]
fn only_a_pull_only_round_of_its_own_commits_asynchronously() {
    let _slow = SlowWalWriter::new();
    let (s, partition, allowed, pull) = session("gwround");
    let mut conn = connect();
    let by_sync = call_sync(&mut conn, &partition, "alice", &pull, Some(&allowed)).expect("syncular.sync");
    let (bytes, setting) = round(&mut conn, &partition, &pull, &allowed).expect("gateway_round, pull only");
    assert_eq!(bytes, by_sync, "the bytes of syncular.sync for the same request and state");
    assert_eq!(setting, "on", "the setting is not touched during the statement");

    let new_client_pull = |i: usize| new_client_pull(&s, &format!("gwround-new-{i}"));
    let mut asynchronous = false;
    for i in 0..5 {
        let before = insert_lsn(&mut conn);
        round(&mut conn, &partition, &new_client_pull(i), &allowed).expect("gateway_round, a new client's pull");
        let (flushed, wrote) = flushed_past(&mut conn, &before);
        assert!(wrote, "the pull wrote its client record");
        if !flushed {
            asynchronous = true;
            break;
        }
    }
    assert!(asynchronous, "a pull-only round of its own commits without waiting for its WAL flush");

    let before = insert_lsn(&mut conn);
    let mut tx = conn.transaction().expect("BEGIN");
    let (bytes, _) = round(&mut tx, &partition, &new_client_pull(9), &allowed).expect("gateway_round inside BEGIN");
    tx.commit().expect("COMMIT");
    assert_eq!(decode_response(&bytes).map(|_| ()), Ok(()));
    assert_eq!(flushed_past(&mut conn, &before), (true, true), "inside the caller's transaction the caller decides (on)");

    let before = insert_lsn(&mut conn);
    let (bytes, _) = round(&mut conn, &partition, &push_request(&s, "c2"), &allowed).expect("gateway_round with a push");
    assert_eq!(flushed_past(&mut conn, &before), (true, true), "a round with pushes commits durably");
    assert_eq!(push_outcomes(&decode_response(&bytes).expect("response"))[0].status, PushStatus::Applied);
    assert_eq!(commits_of(&mut conn, &partition), 2, "the pushed commit is stored once the statement returned");

    let err = round(&mut conn, &partition, b"SSP2", &allowed).expect_err("a truncated request fails");
    assert!(db_message(&err).starts_with("sync.invalid_request"), "{}", db_message(&err));
}

/// `gateway_round` with `max_response_bytes` = `limit`: the bytes, or the error's SQLSTATE and message.
fn round_within(conn: &mut Client, partition: &str, request: &[u8], allowed: &Value, limit: i32) -> Result<Vec<u8>, (String, String)> {
    conn.query_one(
        "SELECT syncular.gateway_round($1::text, 'alice', $2::bytea, $3::jsonb, NULL::text, $4::integer)",
        &[&partition, &request, allowed, &limit],
    )
    .map(|row| row.get(0))
    .map_err(|e| (e.code().map(|c| c.code().to_owned()).unwrap_or_default(), db_message(&e)))
}

#[test]
fn max_response_bytes_answers_a_round_within_it_and_aborts_one_past_it() {
    let (s, partition, allowed, pull) = session("gwlimit");
    let mut conn = connect();
    let whole = call_sync(&mut conn, &partition, "alice", &pull, Some(&allowed)).expect("syncular.sync");
    let size = i32::try_from(whole.len()).expect("small");
    assert_eq!(round_within(&mut conn, &partition, &pull, &allowed, size), Ok(whole.clone()), "exactly its size: answered");
    let (state, message) = round_within(&mut conn, &partition, &pull, &allowed, size - 1).expect_err("one byte past");
    assert_eq!(state, "54000", "{message}");
    assert!(message.starts_with("syncular.response_too_large: "), "{message}");

    // A round with a push whose response passes the limit: aborted, nothing of it stored.
    let (state, message) = round_within(&mut conn, &partition, &push_request(&s, "c-big"), &allowed, 16).expect_err("past 16 bytes");
    assert_eq!((state.as_str(), message.starts_with("syncular.response_too_large")), ("54000", true), "{message}");
    assert_eq!(commits_of(&mut conn, &partition), 1, "the push of an aborted round is not stored");
    let bytes = round_within(&mut conn, &partition, &push_request(&s, "c-big"), &allowed, 1 << 20).expect("within 1 MiB");
    assert_eq!(push_outcomes(&decode_response(&bytes).expect("response"))[0].status, PushStatus::Applied);
    assert_eq!(commits_of(&mut conn, &partition), 2, "the same push within the limit is stored");

    for limit in [0, -1] {
        let (state, message) = round_within(&mut conn, &partition, &pull, &allowed, limit).expect_err("not a limit");
        assert_eq!((state.as_str(), message.starts_with("syncular.invalid_argument")), ("22023", true), "{message}");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `syncular.gateway_round(…)` with every argument inline (for `DO` blocks and pgbench).
fn round_sql(partition: &str, request: &[u8], allowed: &Value) -> String {
    format!("syncular.gateway_round('{partition}', 'alice', '\\x{}'::bytea, '{allowed}'::jsonb)", hex(request))
}

/// A fresh observation table: the WAL insert position at the transaction's last row.
fn observations(conn: &mut Client, table: &str) -> String {
    conn.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (lsn pg_lsn, xid xid8)"))
        .expect("observation table");
    format!("INSERT INTO {table} SELECT pg_catalog.pg_current_wal_insert_lsn(), pg_catalog.pg_current_xact_id()")
}

/// Whether the WAL is flushed past every observed position, and in how many transactions they were made.
fn observed(conn: &mut Client, table: &str) -> (bool, i64) {
    let row = conn
        .query_one(
            &format!("SELECT bool_and(pg_catalog.pg_current_wal_flush_lsn() > lsn), count(DISTINCT xid) FROM {table}"),
            &[],
        )
        .expect("observation");
    (row.get(0), row.get(1))
}

#[test]
fn a_do_block_that_writes_besides_a_pull_only_round_commits_as_the_caller_says() {
    let _slow = SlowWalWriter::new();
    let (s, partition, allowed, pull) = session("gwround-do");
    let mut conn = connect();
    let observe = observations(&mut conn, "gwround_do_obs");
    // A write before the round: the round finds its transaction not fresh.
    conn.batch_execute(&format!(
        "DO $$ BEGIN INSERT INTO gwround_do_obs VALUES ('0/0', pg_catalog.pg_current_xact_id()); PERFORM {}; {observe}; END $$",
        round_sql(&partition, &pull, &allowed)
    ))
    .expect("DO: a write, then the round");
    assert_eq!(observed(&mut conn, "gwround_do_obs"), (true, 1), "a write before the round: durable");

    // A push after the round: PRE_COMMIT sees the WAL it wrote.
    let observe = observations(&mut conn, "gwround_do_obs");
    conn.batch_execute(&format!(
        "DO $$ BEGIN PERFORM {}; PERFORM {}; {observe}; END $$",
        round_sql(&partition, &pull, &allowed),
        round_sql(&partition, &push_request(&s, "c-do"), &allowed)
    ))
    .expect("DO: the round, then a push");
    assert_eq!(observed(&mut conn, "gwround_do_obs"), (true, 1), "a push after the round: durable");
    assert_eq!(commits_of(&mut conn, &partition), 2);

    // The caller's own setting after the round wins.
    let observe = observations(&mut conn, "gwround_do_obs");
    conn.batch_execute(&format!(
        "DO $$ BEGIN SET LOCAL synchronous_commit = off; PERFORM {}; SET LOCAL synchronous_commit = on; {observe}; END $$",
        round_sql(&partition, &pull, &allowed)
    ))
    .expect("DO: off, the round, on, a write");
    assert_eq!(observed(&mut conn, "gwround_do_obs"), (true, 1), "the caller's later SET LOCAL on holds");
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
    let _slow = SlowWalWriter::new();
    let (s, partition, allowed, pull) = session("gwround-pipe");
    let mut conn = connect();
    for (order, first, second) in [
        ("a push, then a pull-only round", push_request(&s, "c-pipe-1"), pull.clone()),
        ("a pull-only round, then a push", pull.clone(), push_request(&s, "c-pipe-2")),
    ] {
        let observe = observations(&mut conn, "gwround_pipe_obs");
        pgbench_pipeline(&format!(
            "SELECT {};\nSELECT {};\n{observe};\n",
            round_sql(&partition, &first, &allowed),
            round_sql(&partition, &second, &allowed)
        ));
        assert_eq!(observed(&mut conn, "gwround_pipe_obs"), (true, 1), "{order} before one Sync: durable");
    }
    assert_eq!(commits_of(&mut conn, &partition), 3);
    conn.batch_execute("DROP TABLE gwround_pipe_obs").unwrap();
}

#[test]
fn a_level_other_than_on_is_left_in_force() {
    let _slow = SlowWalWriter::new();
    let (s, partition, allowed, _) = session("gwround-level");
    let mut conn = connect();
    let new_client_pull = |name: &str| new_client_pull(&s, name);
    // The caller's SET LOCAL before the round, pipelined before the same Sync.
    let before = insert_lsn(&mut conn);
    pgbench_pipeline(&format!(
        "SELECT pg_catalog.set_config('synchronous_commit', 'remote_apply', true);\nSELECT {};\n",
        round_sql(&partition, &new_client_pull("gwround-level-1"), &allowed)
    ));
    assert_eq!(flushed_past(&mut conn, &before), (true, true), "remote_apply set before the round holds");

    // The session's level off, the caller's SET LOCAL on after the round, in a DO block.
    conn.batch_execute("SET synchronous_commit = off").unwrap();
    let before = insert_lsn(&mut conn);
    conn.batch_execute(&format!(
        "DO $$ BEGIN PERFORM {}; SET LOCAL synchronous_commit = on; END $$",
        round_sql(&partition, &new_client_pull("gwround-level-2"), &allowed)
    ))
    .expect("DO: the round, then SET LOCAL on");
    conn.batch_execute("RESET synchronous_commit").unwrap();
    assert_eq!(flushed_past(&mut conn, &before), (true, true), "SET LOCAL on after the round holds");
}
