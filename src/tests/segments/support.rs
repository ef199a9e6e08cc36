//! Helpers for the stored-segment `#[pg_test]`s: downloads through
//! `syncular.segment`, digests, and counts of the segment tables.

use pgrx::prelude::*;
use pgrx::JsonB;
use serde_json::Value;
use syncular_protocol::response::SegmentRef;
use syncular_protocol::scope_digest::scope_digest;
use syncular_protocol::segment::decode_rows_segment;

use crate::store::spi::subtransaction::{self, SubtransactionError};
use crate::tests::sync_pull_support::task_values;

/// `syncular.segment(partition, actor, id, requested, allowed)` in a subtransaction.
pub fn download(
    partition: &str,
    actor: &str,
    segment_id: &str,
    requested: Option<&str>,
    allowed: Option<Value>,
) -> Result<Vec<u8>, SubtransactionError> {
    let (partition, actor, id, requested) =
        (partition.to_owned(), actor.to_owned(), segment_id.to_owned(), requested.map(str::to_owned));
    subtransaction::run(move || {
        Spi::get_one_with_args::<Vec<u8>>(
            "SELECT syncular.segment($1, $2, $3, $4, $5)",
            &[
                partition.as_str().into(),
                actor.as_str().into(),
                id.as_str().into(),
                requested.into(),
                allowed.map(JsonB).into(),
            ],
        )
        .unwrap_or_else(|e| panic!("SPI: {e}"))
        .expect("segment returns bytes")
    })
}

/// §3.5 digest of `{"ws": values}`.
pub fn ws_digest(values: &[&str]) -> String {
    let m: std::collections::BTreeMap<String, Vec<String>> =
        [("ws".to_owned(), values.iter().map(|v| v.to_string()).collect())].into_iter().collect();
    scope_digest(&m)
}

/// Row ids of a downloaded `tasks` rows segment, checking its content address.
pub fn ids_of(bytes: &[u8], r: &SegmentRef) -> Vec<String> {
    assert_eq!(crate::engine::segments::segment_id_of(bytes), r.segment_id, "bytes hash to the id");
    assert_eq!(bytes.len() as i64, r.byte_length);
    let seg = decode_rows_segment(bytes).expect("a rows segment");
    let mut out = Vec::new();
    for block in &seg.blocks {
        for row in block {
            let payload = syncular_protocol::row_codec::encode_row(&seg.header.layout, &row.values).unwrap();
            out.push(task_values(&payload).0);
        }
    }
    assert_eq!(out.len() as i64, r.row_count);
    out
}

/// `count(*)` of a segment table in `partition`.
pub fn count(table: &str, partition: &str) -> i64 {
    Spi::get_one_with_args::<i64>(
        &format!("SELECT count(*) FROM syncular.{table} WHERE partition = $1"),
        &[partition.into()],
    )
    .unwrap()
    .unwrap()
}

/// `SET LOCAL syncular.now_ms`.
pub fn set_now(ms: i64) {
    crate::tests::support::run(&format!("SET LOCAL syncular.now_ms = '{ms}'"));
}
