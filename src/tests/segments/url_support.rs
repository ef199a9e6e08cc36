//! Helpers of the segment `#[pg_test]`s: stored segments and publications
//! written straight into the tables.

use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;

use crate::store::spi::subtransaction::{self, SubtransactionError};
use crate::tests::support::run;

/// The live log epoch the helpers register partitions with.
pub const EPOCH: &str = "epoch-1";

/// Sets the engine clock.
pub fn set_now(ms: i64) {
    run(&format!("SET LOCAL syncular.now_ms = '{ms}'"));
}

/// Registers `partition` with log epoch [`EPOCH`] (idempotent).
pub fn register_partition(partition: &str) {
    run(&format!(
        "INSERT INTO syncular.sync_partition_registry (partition, log_epoch, last_authenticated_at_ms) \
         VALUES ('{partition}', '{EPOCH}', 0) ON CONFLICT DO NOTHING"
    ));
}

/// Stores segment `segment_id` of `partition` (one 3-byte chunk), created at `created_at_ms`.
pub fn store_segment(partition: &str, segment_id: &str, created_at_ms: i64) {
    run(&format!(
        "INSERT INTO syncular.sync_segments (partition, segment_id, media_type, byte_length, chunk_count, created_at_ms) \
         VALUES ('{partition}', '{segment_id}', 1, 3, 1, {created_at_ms}); \
         INSERT INTO syncular.sync_segment_chunks (partition, segment_id, idx, bytes) \
         VALUES ('{partition}', '{segment_id}', 0, 'abc'::bytea)"
    ));
}

/// Publishes `segment_id` of `partition` under `epoch` and `digest` for table `tbl`
/// (page window `page_rows` distinguishes publications), expiring at `expires_at_ms`.
pub fn publish(partition: &str, epoch: &str, tbl: &str, page_rows: i32, digest: &str, segment_id: &str, expires_at_ms: i64) {
    run(&format!(
        "INSERT INTO syncular.sync_segment_publications (partition, log_epoch, tbl, schema_version, media_type, \
            scope_digest, as_of_commit_seq, from_start, row_cursor, page_rows, segment_id, next_row_cursor, \
            row_count, published_at_ms, expires_at_ms) \
         VALUES ('{partition}', '{epoch}', '{tbl}', 1, 1, '{digest}', 5, true, '', {page_rows}, '{segment_id}', NULL, \
            1, 0, {expires_at_ms})"
    ));
}

/// `syncular.segment_open_signed(segment_id, token)` in a subtransaction.
pub fn open_signed(segment_id: &str, token: &str) -> Result<Value, SubtransactionError> {
    let sql = "SELECT syncular.segment_open_signed($1, $2)";
    let (seg, tok) = (segment_id.to_owned(), token.to_owned());
    subtransaction::run(move || {
        Spi::get_one_with_args::<JsonB>(sql, &[seg.as_str().into(), tok.as_str().into()])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .map(|j| j.0)
            .unwrap_or(Value::Null)
    })
}

/// The `st` token of a minted URL.
pub fn token_of(url: &str) -> String {
    url.split_once("?st=").expect("a signed URL").1.to_owned()
}
