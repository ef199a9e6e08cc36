//! The mover's interface (`syncular.object_store_*`, granted to `syncular_gateway`): its
//! configuration and signing keys, its heartbeat and the work queue; its reports are
//! [`crate::engine::objects::report`].

use std::collections::HashSet;

use serde_json::{json, Value};
use syncular_object_store as objects;

use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::store::objects::{config, stored, work};

/// The longest presigned-URL lifetime (§5.4: TTL ≤ 15 min), seconds.
pub const MAX_URL_TTL_S: i32 = 900;

/// The window of copies listed on every work call: the last this-many ms (an index range).
pub const RECENT_COPIES_MS: i64 = 120_000;

/// The longest heartbeat a mover may claim, ms.
pub const MAX_HEALTHY_FOR_MS: i64 = 10 * 60_000;

fn invalid(message: impl Into<String>) -> EngineError {
    EngineError::host(HostCode::InvalidArgument, message)
}

/// `syncular.object_store_configure`: validates and stores the configuration (a fresh partition
/// salt the first time; kept afterwards: blob object keys depend on it) and the fingerprint of
/// the mover that owns it from now on (movers with another one are refused: [`check_owner`]).
/// The heartbeat starts lapsed. Errors: `syncular.invalid_argument` (22023) naming the bad field.
pub fn configure(
    endpoint: &str,
    bucket: &str,
    region: &str,
    key_prefix: &str,
    access_key_id: &str,
    url_ttl_s: i32,
    fingerprint: &str,
) -> EngineResult<()> {
    objects::validate_endpoint(endpoint).map_err(|e| invalid(format!("endpoint: {e}")))?;
    objects::validate_bucket(bucket).map_err(|e| invalid(format!("bucket: {e}")))?;
    objects::validate_region(region).map_err(|e| invalid(format!("region: {e}")))?;
    objects::validate_prefix(key_prefix).map_err(|e| invalid(format!("key_prefix: {e}")))?;
    check_access_key_id(access_key_id)?;
    if fingerprint.len() > 128 || !fingerprint.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(invalid("mover_fingerprint must be at most 128 ASCII letters and digits"));
    }
    if !(1..=MAX_URL_TTL_S).contains(&url_ttl_s) {
        return Err(invalid(format!("url_ttl_s must be 1 ..= {MAX_URL_TTL_S} (§5.4), got {url_ttl_s}")));
    }
    // Another bucket (or origin, or prefix): what the old one held is copied again; blobs only
    // the old bucket holds stay recorded (copy its `blob/` keys over: docs "Moving to another bucket").
    if let Some(location) = config::select_location()? {
        if location != (endpoint.to_owned(), bucket.to_owned(), region.to_owned(), key_prefix.to_owned()) {
            stored::forget_copies()?;
        }
    }
    let salt = match config::select_layout()? {
        Some((_, salt)) if !salt.is_empty() => salt,
        _ => {
            let mut salt = vec![0u8; 32];
            getrandom::fill(&mut salt).map_err(|e| EngineError::internal(format!("no randomness for the partition salt: {e}")))?;
            salt
        }
    };
    config::upsert_config(endpoint, bucket, region, key_prefix, access_key_id, url_ttl_s, &salt, fingerprint, clock::now_ms()?)?;
    Ok(())
}

fn check_access_key_id(access_key_id: &str) -> EngineResult<()> {
    if access_key_id.is_empty() || access_key_id.len() > 256 || !access_key_id.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err(invalid("access_key_id must be 1..256 visible ASCII characters other than '/'"));
    }
    Ok(())
}

/// Refuses a mover whose `fingerprint` (non-empty) is not the one that configured the tier last:
/// two movers with different buckets or credentials must not take turns (the last one started
/// owns it). Errors: `syncular.object_store_conflict` (55000).
pub fn check_owner(fingerprint: &str) -> EngineResult<()> {
    if fingerprint.is_empty() {
        return Ok(());
    }
    match config::select_fingerprint()? {
        Some(owner) if owner != fingerprint => Err(EngineError::host(
            HostCode::ObjectStoreConflict,
            "another mover configured the object store since this one started (another bucket, prefix or key): \
             restart this mover with the same settings, or stop it",
        )),
        _ => Ok(()),
    }
}

/// `syncular.object_store_signing_keys`: stores `[{"day": "YYYYMMDD", "accessKeyId",
/// "signingKey": "<64 hex>"}…]` and deletes keys of days before yesterday; returns how many it
/// stored. Errors: `syncular.invalid_argument` for a malformed entry;
/// `syncular.object_store_conflict` ([`check_owner`]).
pub fn put_signing_keys(keys: &Value, fingerprint: &str) -> EngineResult<i64> {
    check_owner(fingerprint)?;
    let Some(list) = keys.as_array() else { return Err(invalid("keys must be a JSON array")) };
    let now_ms = clock::now_ms()?;
    let mut n = 0;
    for entry in list {
        let field = |name: &str| entry.get(name).and_then(Value::as_str).ok_or_else(|| invalid(format!("every key needs a string {name:?}")));
        let day = field("day")?;
        if !is_day(day) {
            return Err(invalid(format!("day must be a date YYYYMMDD, got {day:?}")));
        }
        let access_key_id = field("accessKeyId")?;
        check_access_key_id(access_key_id)?;
        let key = decode_hex32(field("signingKey")?).ok_or_else(|| invalid("signingKey must be 64 hex digits"))?;
        config::upsert_key(day, access_key_id, &key, now_ms)?;
        n += 1;
    }
    let (today, _) = objects::amz_date(now_ms.saturating_sub(86_400_000)).map_err(|e| EngineError::internal(e.to_string()))?;
    config::delete_keys_before(&today)?;
    Ok(n)
}

/// Whether `day` is a calendar date `YYYYMMDD` (1970 … 9999).
fn is_day(day: &str) -> bool {
    if day.len() != 8 || !day.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let n = |r: std::ops::Range<usize>| day[r].parse::<u32>().unwrap_or(0);
    let (y, m, d) = (n(0..4), n(4..6), n(6..8));
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => 0,
    };
    y >= 1970 && (1..=days).contains(&d)
}

fn decode_hex32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// `syncular.object_store_heartbeat`: the bucket answers (`healthy_for_ms` > 0: presign for that
/// long) or not (0: stop presigning now). Returns whether a configuration exists.
/// Errors: `syncular.invalid_argument` outside `0 ..= 600000`; `syncular.object_store_conflict`
/// for a mover that does not own the configuration ([`check_owner`]).
pub fn heartbeat(healthy_for_ms: i64, fingerprint: &str) -> EngineResult<bool> {
    check_owner(fingerprint)?;
    if !(0..=MAX_HEALTHY_FOR_MS).contains(&healthy_for_ms) {
        return Err(invalid(format!("healthy_for_ms must be 0 ..= {MAX_HEALTHY_FOR_MS}, got {healthy_for_ms}")));
    }
    let until = if healthy_for_ms == 0 { 0 } else { clock::now_ms()?.saturating_add(healthy_for_ms) };
    Ok(config::set_healthy_until(until)?)
}

/// `syncular.object_store_work`: up to `max_items` things to do, as JSON objects with an `"op"`:
/// `copySegment` / `copyBlob` (`partition`, `segmentId`|`blobId`, `objectKey`, `byteLength`,
/// `chunkCount`: read the chunks with `segment_chunk` / `object_store_blob_chunk` and PUT them),
/// `verifyUpload` (`partition`, `blobId`, `objectKey`, `byteLength`: HEAD/GET the presigned
/// upload, hash it), `deleteSegment` / `deleteBlob` (`objectKey`), `checkSegment` / `checkBlob`
/// (`objectKey`, `etag`, `byteLength`: HEAD it, objects last checked before now −
/// `check_after_ms`). Copies of the last two minutes ([`RECENT_COPIES_MS`]) are listed on every
/// call; older ones and deletions by a whole-table scan at most once per `scan_after_ms`. Empty
/// without a configuration. Errors: `syncular.invalid_argument`.
pub fn work(max_items: i32, check_after_ms: i64, scan_after_ms: i64) -> EngineResult<Vec<Value>> {
    if max_items < 1 {
        return Err(invalid(format!("max_items must be at least 1, got {max_items}")));
    }
    if check_after_ms < 0 || scan_after_ms < 0 {
        return Err(invalid(format!("check_after_ms and scan_after_ms must not be negative, got {check_after_ms}, {scan_after_ms}")));
    }
    let Some((prefix, salt)) = config::select_layout()? else { return Ok(Vec::new()) };
    let now_ms = clock::now_ms()?;
    let limit = i64::from(max_items);
    // Copies of the last two minutes every call (index ranges); the whole tables — older copies
    // (a mover that was down), deletions — once per `scan_after_ms`.
    let full = config::claim_full_scan(now_ms, scan_after_ms)?;
    let since_ms = if full { 0 } else { now_ms.saturating_sub(RECENT_COPIES_MS) };
    let mut out = Vec::new();
    // A row whose key cannot be formed (a malformed id written by hand) is skipped, never fatal.
    let blob_key = |partition: &str, blob_id: &str| objects::blob_object_key(&prefix, &objects::partition_token(&salt, partition), blob_id).ok();
    let segment_key = |segment_id: &str| objects::segment_object_key(&prefix, segment_id).ok();
    for (partition, blob_id, byte_length, staging_key) in work::grants_due(now_ms, limit)? {
        if let Some(key) = blob_key(&partition, &blob_id) {
            out.push(json!({"op": "verifyUpload", "partition": partition, "blobId": blob_id, "objectKey": key,
                            "stagingKey": staging_key, "byteLength": byte_length}));
        }
    }
    // Grants (any actor may ask for them) fill at most half a round.
    out.truncate(usize::try_from(max_items / 2).unwrap_or(0).max(1));
    let mut seen = HashSet::new();
    let copies = work::segments_to_copy(now_ms, since_ms, limit)?;
    let mut cut = copies.len() as i64 >= limit;
    for (partition, segment_id, byte_length, chunk_count) in copies {
        if let (true, Some(key)) = (seen.insert(segment_id.clone()), segment_key(&segment_id)) {
            out.push(json!({"op": "copySegment", "partition": partition, "segmentId": segment_id, "objectKey": key,
                            "byteLength": byte_length, "chunkCount": chunk_count}));
        }
    }
    let copies = work::blobs_to_copy(since_ms, limit)?;
    cut |= copies.len() as i64 >= limit;
    for (partition, blob_id, byte_length, chunk_count) in copies {
        if let Some(key) = blob_key(&partition, &blob_id) {
            out.push(json!({"op": "copyBlob", "partition": partition, "blobId": blob_id, "objectKey": key,
                            "byteLength": byte_length, "chunkCount": chunk_count}));
        }
    }
    let (segments_gone, blobs_gone) =
        if full { (work::segments_to_delete(limit)?, work::blobs_to_delete(limit)?) } else { (Vec::new(), Vec::new()) };
    cut |= segments_gone.len() as i64 >= limit || blobs_gone.len() as i64 >= limit;
    for segment_id in segments_gone {
        if let Some(key) = segment_key(&segment_id) {
            out.push(json!({"op": "deleteSegment", "segmentId": segment_id, "objectKey": key}));
        }
    }
    for (partition, blob_id) in blobs_gone {
        if let Some(key) = blob_key(&partition, &blob_id) {
            out.push(json!({"op": "deleteBlob", "partition": partition, "blobId": blob_id, "objectKey": key}));
        }
    }
    for (partition, id, byte_length, etag) in work::objects_to_check(now_ms.saturating_sub(check_after_ms), limit)? {
        if partition.is_empty() {
            if let Some(key) = segment_key(&id) {
                out.push(json!({"op": "checkSegment", "segmentId": id, "objectKey": key, "byteLength": byte_length, "etag": etag}));
            }
        } else if let Some(key) = blob_key(&partition, &id) {
            out.push(json!({"op": "checkBlob", "partition": partition, "blobId": id, "objectKey": key, "byteLength": byte_length, "etag": etag}));
        }
    }
    // A whole-table scan cut at its limit goes on at the next call (a backlog drains at a round's
    // pace, not one round a minute).
    if full && cut {
        config::reopen_full_scan()?;
    }
    out.truncate(usize::try_from(max_items).unwrap_or(usize::MAX));
    Ok(out)
}
