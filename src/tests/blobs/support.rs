//! Helpers of the blob `#[pg_test]`s.

use serde_json::Value;
use syncular_protocol::blob::blob_id_of;

use crate::tests::support::{run, text, try_run};
use crate::store::spi::subtransaction::SubtransactionError;

/// `bytes` as an SQL bytea literal.
pub fn bytea_lit(bytes: &[u8]) -> String {
    format!("'\\x{}'::bytea", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// `syncular.blob_put(partition, id of bytes, bytes)`; its result.
pub fn put(partition: &str, bytes: &[u8]) -> Value {
    let sql = format!("SELECT syncular.blob_put('{partition}', '{}', {})::text", blob_id_of(bytes), bytea_lit(bytes));
    serde_json::from_str(&text(&sql).expect("blob_put result")).expect("json")
}

/// A canonical BlobRef text of `bytes`.
pub fn blob_ref(bytes: &[u8]) -> String {
    format!(r#"{{"blobId":"{}","byteLength":{}}}"#, blob_id_of(bytes), bytes.len())
}

/// Runs `sql` in a subtransaction (an ERROR comes back as data).
pub fn attempt(sql: &str) -> Result<(), SubtransactionError> {
    try_run(sql)
}

/// `blob_id` of every reference of `partition`, as `tbl/row_id/blob_id` lines joined by `,`.
pub fn refs(partition: &str) -> String {
    text(&format!(
        "SELECT coalesce(string_agg(tbl || '/' || row_id || '/' || left(blob_id, 13), ',' ORDER BY tbl, row_id, blob_id), '') \
         FROM syncular.sync_blob_refs WHERE partition = '{partition}'"
    ))
    .unwrap_or_default()
}

/// Stored blobs of `partition`: `left(blob_id, 13):byte_length:chunk_count`, sorted.
pub fn stored(partition: &str) -> String {
    text(&format!(
        "SELECT coalesce(string_agg(left(blob_id, 13) || ':' || byte_length || ':' || chunk_count, ',' ORDER BY blob_id), '') \
         FROM syncular.sync_blobs WHERE partition = '{partition}'"
    ))
    .unwrap_or_default()
}

/// Sets the engine clock.
pub fn set_now(ms: i64) {
    run(&format!("SET LOCAL syncular.now_ms = '{ms}'"));
}
