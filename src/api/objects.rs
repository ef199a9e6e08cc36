//! The object-store tier's SQL surface for the mover (issue 28; docs/src/operate/object-store.md):
//! configuration, per-day signing keys, heartbeat, the work queue and its reports, and the raw
//! blob chunks it copies. All `SECURITY DEFINER` with a pinned `search_path`, granted to
//! `syncular_gateway` (the mover runs as a gateway login). The presigned URLs themselves are
//! minted by the sync functions (`SEGMENT_REF.url`, `blob_open`, `blob_upload_grant`).

use pgrx::prelude::*;
use super::json_arg::Jsonb;
use pgrx::JsonB;

use crate::api::errors::OrRaise;
use crate::api::sync::{required, required_text};
use crate::engine::objects::mover;

/// `syncular.object_store_configure(endpoint text, bucket text, region text, key_prefix text,
/// access_key_id text, url_ttl_s integer DEFAULT 900, mover_fingerprint text DEFAULT '') returns
/// void` — turns the tier on (or changes it; another bucket, origin or prefix forgets the copies
/// the old one held) and makes the mover of `mover_fingerprint` its owner (a hash of its settings
/// and secret: other movers' heartbeats and keys are refused): presigned URLs name `endpoint` (`http(s)://host[:port]`, no path; a CDN or the
/// bucket's public origin) with path-style `/{bucket}/{key}`, keys under `key_prefix` (empty or
/// ending in `/`), lifetime `url_ttl_s` (1 ..= 900 s, §5.4). Nothing is presigned before the
/// mover's first `object_store_signing_keys` and `object_store_heartbeat`. No secret is stored.
/// Errors: `syncular.invalid_argument` (22023) naming the bad field.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn object_store_configure(
    endpoint: Option<&str>,
    bucket: Option<&str>,
    region: Option<&str>,
    key_prefix: Option<&str>,
    access_key_id: Option<&str>,
    url_ttl_s: default!(Option<i32>, 900),
    mover_fingerprint: default!(Option<&str>, "''"),
) {
    let endpoint = required_text(endpoint, "endpoint");
    let bucket = required_text(bucket, "bucket");
    let region = required_text(region, "region");
    let key_prefix = required(key_prefix, "key_prefix");
    let access_key_id = required_text(access_key_id, "access_key_id");
    let url_ttl_s = *required(url_ttl_s.as_ref(), "url_ttl_s");
    let fingerprint = required(mover_fingerprint, "mover_fingerprint");
    mover::configure(endpoint, bucket, region, key_prefix, access_key_id, url_ttl_s, fingerprint).or_raise()
}

/// `syncular.object_store_signing_keys(keys jsonb, mover_fingerprint text DEFAULT '') returns
/// integer` — the mover's per-day SigV4
/// signing keys, `[{"day": "YYYYMMDD", "accessKeyId": "…", "signingKey": "<64 hex>"}…]` (the
/// derived key of that day, region and service `s3`; never the secret); keys of days before
/// yesterday are deleted. Returns how many were stored. Errors: `syncular.invalid_argument`,
/// `syncular.object_store_conflict` (55000: another mover owns the configuration).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn object_store_signing_keys(keys: Option<Jsonb>, mover_fingerprint: default!(Option<&str>, "''")) -> i64 {
    let keys = required(keys.as_ref(), "keys");
    let fingerprint = required(mover_fingerprint, "mover_fingerprint");
    mover::put_signing_keys(&keys.0, fingerprint).or_raise()
}

/// `syncular.object_store_heartbeat(healthy_for_ms bigint, mover_fingerprint text DEFAULT '')
/// returns boolean` — the bucket
/// answered the mover: presign for the next `healthy_for_ms` (≤ 600000); 0 stops presigning at
/// once (every byte is served from Postgres again). Returns whether the tier is configured.
/// Errors: `syncular.invalid_argument`, `syncular.object_store_conflict`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn object_store_heartbeat(healthy_for_ms: Option<i64>, mover_fingerprint: default!(Option<&str>, "''")) -> bool {
    let fingerprint = required(mover_fingerprint, "mover_fingerprint");
    mover::heartbeat(*required(healthy_for_ms.as_ref(), "healthy_for_ms"), fingerprint).or_raise()
}

/// `syncular.object_store_work(max_items integer DEFAULT 100, check_after_ms bigint DEFAULT
/// 60000, scan_after_ms bigint DEFAULT 60000) returns setof jsonb` — the mover's next work items
/// (`{"op": "copySegment" | "copyBlob" | "verifyUpload" | "deleteSegment" | "deleteBlob" |
/// "checkSegment" | "checkBlob", …}`; docs/src/operate/object-store.md "The mover's protocol"):
/// objects last HEADed `check_after_ms` ago are re-checked; whole tables (old copies, deletions)
/// are scanned at most once per `scan_after_ms`. Errors: `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn object_store_work(
    max_items: default!(Option<i32>, 100),
    check_after_ms: default!(Option<i64>, 60000),
    scan_after_ms: default!(Option<i64>, 60000),
) -> SetOfIterator<'static, JsonB> {
    let max_items = *required(max_items.as_ref(), "max_items");
    let check_after_ms = *required(check_after_ms.as_ref(), "check_after_ms");
    let scan_after_ms = *required(scan_after_ms.as_ref(), "scan_after_ms");
    SetOfIterator::new(mover::work(max_items, check_after_ms, scan_after_ms).or_raise().into_iter().map(JsonB))
}

/// `syncular.object_store_report(item jsonb) returns text` — what the mover did with one work
/// item: the item plus `"result"` (`copied`, `deleted`, `checked`, `missing`, `verified`,
/// `absent`, `invalid`) and `"etag"` where it has one. Returns what changed (for its log).
/// Errors: `syncular.invalid_argument` (22023) for a malformed report.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn object_store_report(item: Option<Jsonb>) -> String {
    let item = required(item.as_ref(), "item");
    crate::engine::objects::report::report(&item.0).or_raise()
}

/// `syncular.object_store_blob_chunk(partition text, blob_id text, idx integer) returns bytea` —
/// chunk `idx` of a blob's bytes as Postgres stores them, for the mover's copy (no actor: the
/// mover moves bytes, it serves no one). NULL when absent. Errors: `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn object_store_blob_chunk(partition: Option<&str>, blob_id: Option<&str>, idx: Option<i32>) -> Option<Vec<u8>> {
    let partition = required_text(partition, "partition");
    let blob_id = required_text(blob_id, "blob_id");
    let idx = *required(idx.as_ref(), "idx");
    crate::store::blobs::bytes::select_blob_chunk(partition, blob_id, idx)
        .map_err(crate::engine::error::EngineError::from)
        .or_raise()
}
