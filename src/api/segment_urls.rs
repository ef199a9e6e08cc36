//! Signed segment URLs (SPEC §5.4 native scheme; docs/src/sql/segments.md "Signed segment
//! URLs"): the verification a gateway runs for `GET /segments/{id}?st=…`
//! (granted to `syncular_gateway`) and the key rotation (admin). Minting
//! happens inside the pull ([`crate::engine::segments::signed_url::mint`]).

use pgrx::prelude::*;
use pgrx::JsonB;

use crate::api::errors::OrRaise;
use crate::api::sync::{required, required_text};
use crate::engine::segments::signed_url;

/// `syncular.segment_open_signed(segment_id text, token text) returns
/// jsonb` — verifies the `st` token of a signed segment URL for a fetch of
/// `segment_id` (§5.4: MAC against every key, `exp` with ≤ 60 s skew,
/// `seg`, `sd` against a live publication's digest, `aud` against the
/// partition) and answers `{"segmentId", "byteLength", "chunkCount",
/// "mediaType", "partition", "urlExpiresAtMs"}`; the gateway then reads
/// `syncular.segment_chunk(partition, segment_id, idx)` for idx 0 ..
/// chunkCount (`partition` stays in the gateway). No actor, no scopes: the
/// URL is the entire grant. Errors: `sync.forbidden` (42501; every token
/// fault, expiry included), `sync.not_found` (42704),
/// `sync.segment_expired` (42704), `syncular.invalid_argument` (a NULL
/// argument, an empty `segment_id`).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn segment_open_signed(segment_id: Option<&str>, token: Option<&str>) -> JsonB {
    let segment_id = required_text(segment_id, "segment_id");
    // An empty token is a malformed grant (sync.forbidden), not a missing argument.
    let token = required(token, "token");
    JsonB(signed_url::open_signed(segment_id, token).or_raise())
}

/// `syncular.rotate_segment_url_key(drop_previous boolean DEFAULT false)
/// returns bigint` — adds a fresh 32-byte key that signs every URL from now
/// on (returns its `key_id`); older keys keep verifying the URLs they
/// signed until those expired, and are deleted once retired for 16 min
/// (the longest TTL + the skew) by this function or `segment_sweep`. With
/// `drop_previous`, every older key is deleted at once: URLs already
/// issued stop working (a leaked key; clients recover by pulling again).
/// Admin only. Errors: `syncular.invalid_argument` (22023: NULL
/// `drop_previous`).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn rotate_segment_url_key(drop_previous: default!(Option<bool>, false)) -> i64 {
    signed_url::rotate_key(*required(drop_previous.as_ref(), "drop_previous")).or_raise()
}

/// `syncular.segment_signed_url(partition text, segment_id text,
/// scope_digest text) returns jsonb` — mints a §5.4 signed URL for a
/// segment of `partition` published under `scope_digest`, exactly as a
/// pull does for a `SEGMENT_REF`: `{"url", "urlExpiresAtMs"}`, or NULL
/// when `syncular.segment_url_base` is empty. No authorization happens
/// here (the caller vouches for the digest), so it is admin only: for
/// operators checking a CDN path, and hosts that hand out URLs themselves.
/// Errors: `syncular.invalid_argument` (NULL/empty arguments).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn segment_signed_url(partition: Option<&str>, segment_id: Option<&str>, scope_digest: Option<&str>) -> Option<JsonB> {
    let partition = required_text(partition, "partition");
    let segment_id = required_text(segment_id, "segment_id");
    let scope_digest = required_text(scope_digest, "scope_digest");
    let now_ms = crate::engine::clock::now_ms().or_raise();
    signed_url::mint(partition, segment_id, scope_digest, now_ms)
        .or_raise()
        .map(|(url, expires)| JsonB(serde_json::json!({"url": url, "urlExpiresAtMs": expires})))
}
