//! Blob download authorization (SPEC §5.9.5): a blob id is never a
//! capability. The actor may read a blob iff at least one row of the
//! partition that references it (the reference index, §5.9.4) passes the
//! §3.4 stored-row scope check against the actor's allowed scopes —
//! resolved once per call, from the caller's `allowed_scopes` or the
//! registered resolver. Unknown blob → `blob.not_found`; no authorized row
//! (none at all, none the actor may see, a resolver that raised) →
//! `blob.forbidden`. Every call re-authorizes; nothing is remembered.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use syncular_protocol::blob::is_blob_id;
use syncular_protocol::scopes::authorize_write;
use syncular_protocol::ErrorCode;

use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::objects::urls::{self, BlobGet};
use crate::engine::scope_match::parse_stored_scopes_lenient;
use crate::engine::auth::caller::{check_caller, resolve_allowed, Caller};
use crate::engine::auth::allowed::Allowed;
use crate::store::blobs::bytes::{self, BlobRecord};
use crate::store::blobs::refs;

/// Referencing rows read per statement while looking for an authorized one.
const PAGE_ROWS: i64 = 500;

fn forbidden(blob_id: &str) -> EngineError {
    EngineError::protocol(
        ErrorCode::BlobForbidden,
        format!("no row this actor may see references blob {blob_id} (§5.9.5)"),
    )
}

/// Authorizes `caller` to read `blob_id`; returns its record.
/// Errors: `blob.not_found` (also for a malformed id),
/// `blob.forbidden`, and the allowed-scope errors of a sync request
/// (`syncular.invalid_argument`, `sync.invalid_subscription`,
/// `syncular.resolver_malformed`; `sync.auth_lease_required` (28000) under
/// the §7.3.3 outage signal: a download names no client, so no lease serves it).
pub fn authorize(caller: &Caller<'_>, blob_id: &str) -> EngineResult<BlobRecord> {
    check_caller(caller)?;
    // A malformed id names no stored blob: unknown (§5.9.5), like any other.
    let stored = if is_blob_id(blob_id) { bytes::select_blob(caller.partition, blob_id)? } else { None };
    let Some(record) = stored else {
        return Err(EngineError::protocol(ErrorCode::BlobNotFound, format!("blob {blob_id} is not stored (§5.9.5)")));
    };
    let Some(schema) = crate::engine::schema::load_fenced_schema()? else {
        return Err(forbidden(blob_id));
    };
    let tables = refs::referencing_tables(caller.partition, blob_id)?;
    if tables.is_empty() {
        return Err(forbidden(blob_id));
    }
    // A download names no client, so no auth lease (§7.3, keyed by
    // (partition, clientId)) can serve it: under the outage signal it is
    // `sync.auth_lease_required`.
    let now_ms = crate::engine::clock::now_ms()?;
    let allowed = resolve_allowed(caller, &schema, "", now_ms, None)?.allowed;
    let Allowed::Map(allowed) = allowed else { return Err(forbidden(blob_id)) };
    for tbl in tables {
        // A table the schema no longer declares is skipped (its rows serve no one).
        let Some(registered) = schema.table(&tbl) else { continue };
        let table = &registered.table;
        let mut after = String::new();
        loop {
            let page = refs::referencing_rows(&registered.qualified_name, caller.partition, &tbl, blob_id, &after, PAGE_ROWS)?;
            for (_, scopes_json) in &page {
                let scopes = parse_stored_scopes_lenient(scopes_json);
                let view: BTreeMap<&str, Option<&str>> =
                    table.scopes.iter().map(|s| (s.variable.as_str(), scopes.get(&s.variable).map(String::as_str))).collect();
                if authorize_write(table, &view, Some(&allowed)).is_ok() {
                    return Ok(record);
                }
            }
            match page.last() {
                Some((row_id, _)) if page.len() as i64 == PAGE_ROWS => after.clone_from(row_id),
                _ => break,
            }
        }
    }
    Err(forbidden(blob_id))
}

/// [`authorize`], answering the blob's shape:
/// `{"blobId", "byteLength", "chunkCount"}` (chunks `0 .. chunkCount`), plus
/// `"url"` and `"urlExpiresAtMs"` when the object store holds the blob (§5.9.5
/// always-issue: answer the URL, do not stream). Errors: as [`authorize`];
/// `syncular.object_store_unavailable` (57P03) when only the bucket holds the
/// bytes and it cannot be used now.
pub fn open(caller: &Caller<'_>, blob_id: &str) -> EngineResult<Value> {
    let record = authorize(caller, blob_id)?;
    let mut answer = json!({"blobId": blob_id, "byteLength": record.byte_length, "chunkCount": record.chunk_count});
    match urls::blob_get(caller.partition, blob_id, crate::engine::clock::now_ms()?)? {
        BlobGet::Url((url, expires_at_ms)) => {
            answer["url"] = json!(url);
            answer["urlExpiresAtMs"] = json!(expires_at_ms);
        }
        BlobGet::Unavailable { in_postgres: false } => {
            return Err(EngineError::host(
                HostCode::ObjectStoreUnavailable,
                format!("blob {blob_id} is held only by the object store, which cannot be used now: retry later"),
            ))
        }
        BlobGet::Unavailable { in_postgres: true } | BlobGet::NotStored => {}
    }
    Ok(answer)
}

/// [`authorize`], then chunk `chunk` of the blob's bytes.
/// Errors: as [`authorize`]; `syncular.invalid_argument` for a chunk
/// outside `0 .. chunkCount`.
pub fn read(caller: &Caller<'_>, blob_id: &str, chunk: i32) -> EngineResult<Vec<u8>> {
    let record = authorize(caller, blob_id)?;
    let out_of_range = || {
        EngineError::host(
            HostCode::InvalidArgument,
            format!("chunk {chunk} is out of range: blob {blob_id} has chunks 0 .. {}", record.chunk_count),
        )
    };
    if chunk < 0 || chunk >= record.chunk_count {
        return Err(out_of_range());
    }
    bytes::select_blob_chunk(caller.partition, blob_id, chunk)?.ok_or_else(|| {
        EngineError::internal(format!("blob {blob_id} is recorded with {} chunks but chunk {chunk} is missing", record.chunk_count))
    })
}
