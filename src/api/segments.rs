//! Stored segments (SPEC §5.5; docs/src/sql/segments.md "Stored segments"): the SQL a gateway
//! calls for `GET /segments/{segmentId}` — whole (`syncular.segment`) or
//! streamed (`syncular.segment_open`, then `syncular.segment_chunk` per
//! chunk, in one transaction).
//!
//! All `SECURITY DEFINER` with a pinned `search_path`, granted to
//! `syncular_gateway`. The actor and allowed scopes are taken exactly like
//! `syncular.sync` (the resolver when `allowed_scopes` is NULL); the
//! requested scopes are the `X-Syncular-Scopes` header text as sent.

use pgrx::prelude::*;
use super::json_arg::Jsonb;
use pgrx::JsonB;

use crate::api::errors::OrRaise;
use crate::api::sync::{caller, required_text};
use crate::engine::segments::download;

/// `syncular.segment(partition text, actor_id text, segment_id text,
/// requested_scopes text, allowed_scopes jsonb DEFAULT NULL) returns bytea`
/// — the §5.5 direct download: re-derives the effective scopes from
/// `requested_scopes` (the canonical JSON of the owning subscription's
/// requested scope map, `X-Syncular-Scopes`) and the actor's allowed scopes,
/// recomputes the §3.5 digest and returns exactly the segment's bytes (their
/// SHA-256 is `segment_id`). Errors: `sync.not_found` (42704: malformed or
/// unknown id, no publication in this partition under its live log epoch),
/// `sync.segment_expired` (42704: only expired publications match),
/// `sync.forbidden` (42501: requested scopes NULL or malformed, digest
/// mismatch, revoked, resolver failure), `syncular.invalid_argument` (22023:
/// NULL/empty partition, actor or id; malformed `allowed_scopes`).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn segment(
    partition: Option<&str>,
    actor_id: Option<&str>,
    segment_id: Option<&str>,
    requested_scopes: Option<&str>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
) -> Vec<u8> {
    let allowed = allowed_scopes.map(|j| j.0);
    let caller = caller(partition, actor_id, allowed.as_ref());
    let segment_id = required_text(segment_id, "segment_id");
    download::read_all(&caller, segment_id, requested_scopes).or_raise()
}

/// `syncular.segment_open(partition text, actor_id text, segment_id text,
/// requested_scopes text, allowed_scopes jsonb DEFAULT NULL) returns jsonb`
/// — the authorization of [`segment`] without the bytes:
/// `{"segmentId", "byteLength", "chunkCount", "mediaType"}`; read chunks
/// `0 .. chunkCount-1` with `syncular.segment_chunk`, each in any
/// transaction (the sweep keeps bytes `grace_ms` past their last
/// publication's expiry, docs/src/sql/segments.md "Expiry and garbage collection").
/// Errors: as [`segment`].
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn segment_open(
    partition: Option<&str>,
    actor_id: Option<&str>,
    segment_id: Option<&str>,
    requested_scopes: Option<&str>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
) -> JsonB {
    let allowed = allowed_scopes.map(|j| j.0);
    let caller = caller(partition, actor_id, allowed.as_ref());
    let segment_id = required_text(segment_id, "segment_id");
    JsonB(download::open(&caller, segment_id, requested_scopes).or_raise())
}

/// `syncular.segment_chunk(partition text, segment_id text, idx integer)
/// returns bytea` — chunk `idx` (at most 1 MiB) of a stored segment, for a
/// gateway streaming a download it authorized with `segment_open`
/// (no authorization of its own: only the gateway may call it, and it may
/// claim any actor anyway). Errors: `sync.not_found` (42704) when the
/// partition stores no such chunk (unknown segment, swept, or `idx` outside
/// `0 .. chunkCount-1`) — never NULL; `syncular.invalid_argument` (NULL
/// arguments).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn segment_chunk(partition: Option<&str>, segment_id: Option<&str>, idx: Option<i32>) -> Vec<u8> {
    let partition = required_text(partition, "partition");
    let segment_id = required_text(segment_id, "segment_id");
    let idx = *crate::api::sync::required(idx.as_ref(), "idx");
    download::chunk(partition, segment_id, idx).or_raise()
}
