//! The §5.5 download: re-authorized on every call. A segment reference is
//! never a bearer capability — the caller presents the requested scopes of
//! the owning subscription (the canonical JSON of `X-Syncular-Scopes`), the
//! effective scopes are derived again against the actor's allowed scopes
//! (the gateway's `allowed_scopes`, else the registered resolver, exactly as
//! `syncular.sync`), and their §3.5 digest must equal the digest of a
//! publication of the segment in the caller's partition and live log epoch.
//!
//! Outcomes, in this order:
//! - `sync.not_found` (42704): a malformed id, a partition with no registry
//!   row, no publication of the segment in this partition under its live
//!   epoch (another partition, an older epoch, never published, forgotten),
//!   or bytes no longer stored;
//! - `sync.forbidden` (42501): requested scopes missing or not a JSON map of
//!   string lists, no schema, the resolver raised or gave no map (revoked),
//!   an effective map that revokes (§3.2 rule 5), or no publication under
//!   the caller's digest;
//! - `sync.segment_expired` (42704): publications under the caller's digest
//!   exist but every one has expired;
//! - else the segment record (the bytes follow).
//!
//! Host errors of the allowed-scope resolution pass through as in
//! `syncular.sync`: `syncular.invalid_argument` (a malformed
//! `allowed_scopes`), `syncular.resolver_malformed`, and under the §7.3.3
//! outage signal `sync.auth_lease_required` (a download names no client, so
//! no auth lease serves it — as for blobs).

use std::collections::BTreeMap;

use serde_json::{json, Value};
use syncular_protocol::scope_digest::{digests_equal, scope_digest};
use syncular_protocol::scopes::{effective, Effective, ScopeMap};
use syncular_protocol::ErrorCode;

use crate::engine::error::{EngineError, EngineResult};
use crate::engine::auth::caller::{check_caller, resolve_allowed, Caller};
use crate::engine::segments::is_segment_id;
use crate::store::partitions::select_partition_registry;
use crate::store::segments::bytes::{self, SegmentRecord};
use crate::store::segments::publications::publications_of_segment;

fn not_found(segment_id: &str, why: &str) -> EngineError {
    EngineError::protocol(ErrorCode::NotFound, format!("segment {segment_id} {why} (§5.5)"))
}

fn forbidden(segment_id: &str, why: &str) -> EngineError {
    EngineError::protocol(ErrorCode::Forbidden, format!("segment {segment_id}: {why} (§5.5)"))
}

/// Parses the requested-scopes JSON (`{"variable": ["value", …]}`).
fn parse_requested(text: &str) -> Option<ScopeMap> {
    let map: BTreeMap<String, Vec<String>> = serde_json::from_str(text).ok()?;
    Some(map)
}

/// Authorizes `caller` to download `segment_id` under `requested_scopes`
/// (the canonical JSON of the owning subscription's requested scope map;
/// `None` = not presented); returns the stored segment's record.
/// Errors: see the module documentation.
pub fn authorize(caller: &Caller<'_>, segment_id: &str, requested_scopes: Option<&str>) -> EngineResult<SegmentRecord> {
    check_caller(caller)?;
    if !is_segment_id(segment_id) {
        return Err(not_found(segment_id, "is not a segment id"));
    }
    let Some(registry) = select_partition_registry(caller.partition)? else {
        return Err(not_found(segment_id, "is not published in this partition"));
    };
    let publications = publications_of_segment(caller.partition, &registry.log_epoch, segment_id)?;
    if publications.is_empty() {
        return Err(not_found(segment_id, "is not published in this partition and log epoch"));
    }
    let Some(record) = bytes::select_segment(caller.partition, segment_id)? else {
        return Err(not_found(segment_id, "is no longer stored"));
    };
    let Some(requested) = requested_scopes.and_then(parse_requested) else {
        return Err(forbidden(segment_id, "the requested scopes (X-Syncular-Scopes) are missing or not a JSON map of string lists"));
    };
    let Some(schema) = crate::engine::schema::load_fenced_schema()? else {
        return Err(forbidden(segment_id, "no schema is registered"));
    };
    let now_ms = crate::engine::clock::now_ms()?;
    let allowed = resolve_allowed(caller, &schema, "", now_ms, None)?.allowed;
    let effective = match effective(&requested, allowed.map()) {
        Effective::Active(map) => map,
        Effective::Revoked(_) => return Err(forbidden(segment_id, "the requested scopes are revoked for this actor")),
    };
    let digest = scope_digest(effective.iter());
    let mut matching = publications.iter().filter(|p| digests_equal(&p.scope_digest, &digest)).peekable();
    if matching.peek().is_none() {
        return Err(forbidden(segment_id, "the effective scopes do not match the segment's scope digest"));
    }
    if !matching.any(|p| p.expires_at_ms > now_ms) {
        return Err(EngineError::protocol(
            ErrorCode::SegmentExpired,
            format!("segment {segment_id} has expired; pull again for fresh descriptors (§5.1, §5.5)"),
        ));
    }
    Ok(record)
}

/// [`authorize`], then every byte of the segment (exactly the bytes whose
/// SHA-256 is the id). Errors: as [`authorize`]; a chunk removed meanwhile
/// (`sync.not_found`).
pub fn read_all(caller: &Caller<'_>, segment_id: &str, requested_scopes: Option<&str>) -> EngineResult<Vec<u8>> {
    let record = authorize(caller, segment_id, requested_scopes)?;
    let mut out = Vec::with_capacity(usize::try_from(record.byte_length).unwrap_or(0));
    for idx in 0..record.chunk_count {
        out.extend_from_slice(&chunk(caller.partition, segment_id, idx)?);
    }
    Ok(out)
}

/// [`authorize`], answering the segment's shape:
/// `{"segmentId", "byteLength", "chunkCount", "mediaType"}` (chunks
/// `0 .. chunkCount`, read with [`chunk`]).
pub fn open(caller: &Caller<'_>, segment_id: &str, requested_scopes: Option<&str>) -> EngineResult<Value> {
    let record = authorize(caller, segment_id, requested_scopes)?;
    Ok(json!({
        "segmentId": segment_id,
        "byteLength": record.byte_length,
        "chunkCount": record.chunk_count,
        "mediaType": record.media_type,
    }))
}

/// Chunk `idx` of a stored segment (no authorization: call it after
/// [`open`]; any transaction — the sweep's grace period keeps the bytes). Errors: `sync.not_found` (42704)
/// when the partition stores no such chunk (never stored, swept, or `idx`
/// outside `0 .. chunkCount`).
pub fn chunk(partition: &str, segment_id: &str, idx: i32) -> EngineResult<Vec<u8>> {
    bytes::select_segment_chunk(partition, segment_id, idx)?
        .ok_or_else(|| not_found(segment_id, &format!("has no chunk {idx} in this partition")))
}
