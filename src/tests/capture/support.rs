//! Helpers for the capture `#[pg_test]`s (`capture_*`): the settings of a
//! plain SQL writer, plain SQL writes to `support::tasks_ir(1)`'s `tasks`,
//! and a fingerprint of everything a write may change.

use pgrx::spi::quote_literal;
use syncular_protocol::row_codec::{RowValue, TableLayout};

use crate::store::spi::subtransaction::SubtransactionError;
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
