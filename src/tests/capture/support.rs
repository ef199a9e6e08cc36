//! Helpers for the capture `#[pg_test]`s (`capture_*`): the settings of a
//! plain SQL writer, plain SQL writes to `support::tasks_ir(1)`'s `tasks`,
//! and a fingerprint of everything a write may change.

use pgrx::prelude::*;
use pgrx::spi::quote_literal;
use pgrx::JsonB;
use serde_json::{json, Value};
use syncular_protocol::row_codec::{RowValue, TableLayout};

use crate::store::spi::subtransaction::{self, SubtransactionError};
use crate::tests::support::{int8, run, text, try_run};

/// `SET LOCAL syncular.partition = p`: the test transaction's plain SQL
/// writes go to partition `p`.
pub fn set_partition(p: &str) {
    run(&format!("SET LOCAL syncular.partition = {}", quote_literal(p)));
}

/// `SET LOCAL syncular.actor_id = a`.
pub fn set_actor(a: &str) {
    run(&format!("SET LOCAL syncular.actor_id = {}", quote_literal(a)));
}

/// Runs `sql` in a subtransaction (an ERROR comes back as data).
pub fn write(sql: &str) -> Result<(), SubtransactionError> {
    try_run(sql)
}

/// Runs `sql`, which must succeed.
pub fn write_ok(sql: &str) {
    try_run(sql).unwrap_or_else(|e| panic!("{sql}: {} {}", e.sqlstate, e.message));
}

/// `count(*)` of `sql`'s rows (`SELECT count(*) …`).
pub fn count(sql: &str) -> i64 {
    int8(sql).unwrap_or_else(|| panic!("{sql}: NULL"))
}

/// Commits of partition `p`.
pub fn commits(p: &str) -> i64 {
    count(&format!("SELECT count(*) FROM syncular.sync_commits WHERE partition = {}", quote_literal(p)))
}

/// `sync_partitions.max_commit_seq` of `p` (0 when it has no counter row).
pub fn max_commit_seq(p: &str) -> i64 {
    int8(&format!(
        "SELECT coalesce(max(max_commit_seq), 0) FROM syncular.sync_partitions WHERE partition = {}",
        quote_literal(p)
    ))
    .unwrap_or(0)
}

/// Notifications queued by this backend so far.
pub fn notifications() -> u64 {
    crate::engine::notify::queued_in_backend().0
}

/// Everything a captured write can change, as text: every app row of
/// `tasks` (all partitions, every column), every log table's rows and the
/// partition counters and registry, plus the notifications this backend
/// queued.
pub fn fingerprint() -> (String, u64) {
    fingerprint_of(&["public.tasks"])
}

/// [`fingerprint`] over the app tables `tables` (qualified names).
pub fn fingerprint_of(tables: &[&str]) -> (String, u64) {
    let apps: String = tables
        .iter()
        .map(|t| format!("(SELECT string_agg(t::text, ',' ORDER BY t._sync_partition, t._sync_row_id) FROM {t} t), "))
        .collect();
    let sql = format!("SELECT concat_ws(E'\\n', {apps}\
        (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM syncular.sync_commits x), \
        (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM syncular.sync_changes x), \
        (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM syncular.sync_change_scopes x), \
        (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM syncular.sync_row_scopes x), \
        (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM syncular.sync_tombstones x), \
        (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM syncular.sync_partitions x), \
        (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM syncular.sync_partition_registry x))");
    (text(&sql).unwrap_or_default(), notifications())
}

/// Asserts `result` failed with `sqlstate` / `code` (message starting with
/// it, containing `fragment`) and changed nothing (see [`fingerprint`]).
pub fn refused(sql: &str, sqlstate: &str, code: &str, fragment: &str) {
    refused_in(&["public.tasks"], sql, sqlstate, code, fragment);
}

/// [`refused`] with [`fingerprint_of`] the app tables `tables`.
pub fn refused_in(tables: &[&str], sql: &str, sqlstate: &str, code: &str, fragment: &str) {
    let before = fingerprint_of(tables);
    crate::tests::support::expect_error(write(sql), sqlstate, code, fragment);
    assert_eq!(fingerprint_of(tables), before, "{sql} changed something although it failed");
}

/// The codec layout of `tasks` (`support::tasks_ir(1)`).
pub fn layout() -> TableLayout {
    crate::tests::sync_support::tasks_layout()
}

/// A string value.
pub fn s(v: &str) -> Option<RowValue> {
    Some(RowValue::String(v.to_owned()))
}

/// A canonical BlobRef text (§5.9.1) of the blob of bytes `abc` ([`put_abc`]).
pub const BLOB_REF: &str =
    r#"{"blobId":"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad","byteLength":3}"#;

/// Stores the blob [`BLOB_REF`] names (bytes `abc`) in `partition`: a row
/// may reference only a stored blob (§5.9.6).
pub fn put_abc(partition: &str) {
    crate::tests::support::run(&format!(
        "SELECT syncular.blob_put('{partition}', 'sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', 'abc'::bytea)"
    ));
}

/// `syncular.commit` of `ops` in `p` by actor `svc`, allowed every `ws` value
/// `w1`, `w2` (an ERROR comes back as data).
pub fn engine_commit(p: &str, ops: Value) -> Result<Value, SubtransactionError> {
    subtransaction::run(move || {
        Spi::get_one_with_args::<JsonB>(
            "SELECT syncular.commit($1, 'svc', $2, allowed_scopes => $3)",
            &[p.into(), JsonB(ops).into(), JsonB(json!({"ws": ["w1", "w2"]})).into()],
        )
        .unwrap_or_else(|e| panic!("SPI: {e}"))
        .expect("non-NULL outcome")
        .0
    })
}

/// [`engine_commit`], which must apply; its `commitSeq`.
pub fn engine_applied(p: &str, ops: Value) -> i64 {
    let out = engine_commit(p, ops).unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
    assert_eq!(out["status"], "applied", "{out}");
    out["commitSeq"].as_i64().expect("commitSeq")
}

/// The log replays to what app table `public.tbl` holds in `p`: per row, its
/// last change is an upsert with the stored version, payload and scopes
/// exactly when the row exists, else a delete with a tombstone at that
/// commit; the row-scope index is the stored rows' scopes; no standing row
/// has a tombstone.
pub fn assert_log_is(p: &str, tbl: &str) {
    let mismatches = text(&format!(
        "WITH last AS ( \
           SELECT DISTINCT ON (row_id) row_id, op, row_version, payload, scopes, commit_seq \
           FROM syncular.sync_changes WHERE partition = '{p}' AND tbl = '{tbl}' \
           ORDER BY row_id, commit_seq DESC, idx DESC), \
         app AS (SELECT _sync_row_id AS row_id, _sync_version AS v, _sync_payload AS payload, _sync_scopes AS scopes \
           FROM public.{tbl} WHERE _sync_partition = '{p}') \
         SELECT string_agg(coalesce(l.row_id, a.row_id), ',') FROM last l FULL JOIN app a USING (row_id) \
         WHERE NOT ( \
           (a.row_id IS NOT NULL AND l.op = 1 AND l.row_version = a.v AND l.payload = a.payload AND l.scopes = a.scopes) \
           OR (a.row_id IS NULL AND l.op = 2 AND EXISTS (SELECT 1 FROM syncular.sync_tombstones t \
               WHERE t.partition = '{p}' AND t.tbl = '{tbl}' AND t.row_id = l.row_id AND t.commit_seq = l.commit_seq)))"
    ));
    assert_eq!(mismatches, None, "rows of {tbl} whose log differs from the table in {p}");
    let index = text(&format!(
        "SELECT string_agg(var || '=' || value || '@' || row_id, ',' ORDER BY row_id, var) \
         FROM syncular.sync_row_scopes WHERE partition = '{p}' AND tbl = '{tbl}'"
    ));
    let stored = text(&format!(
        "SELECT string_agg(s.key || '=' || s.value || '@' || n._sync_row_id, ',' ORDER BY n._sync_row_id, s.key) \
         FROM public.{tbl} n CROSS JOIN LATERAL jsonb_each_text(n._sync_scopes) s WHERE n._sync_partition = '{p}'"
    ));
    assert_eq!(index, stored, "the row-scope index of {tbl} in {p} is the stored rows' scopes");
    // A standing row has no tombstone.
    let stray = text(&format!(
        "SELECT string_agg(t.row_id, ',') FROM syncular.sync_tombstones t JOIN public.{tbl} a \
         ON a._sync_partition = t.partition AND a._sync_row_id = t.row_id WHERE t.partition = '{p}' AND t.tbl = '{tbl}'"
    ));
    assert_eq!(stray, None, "standing rows of {tbl} in {p} with a tombstone");
}
