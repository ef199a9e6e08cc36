//! Blobs (SPEC §5.9; docs/src/sql/blobs.md): the SQL a gateway calls for
//! `PUT /blobs/{blobId}`, `POST /blobs/{blobId}/upload-grant` and
//! `GET /blobs/{blobId}`, plus the orphan sweep (admin).
//!
//! All `SECURITY DEFINER` with a pinned `search_path`; granted to
//! `syncular_gateway` except `blob_sweep_orphans`. Uploads need no actor
//! (§5.9.3: host authentication only, not a scope-bearing act); reads take
//! the actor and allowed scopes exactly like `syncular.sync`.

use pgrx::callbacks::{register_subxact_callback, register_xact_callback, PgSubXactCallbackEvent, PgXactCallbackEvent};
use super::json_arg::Jsonb;
use pgrx::prelude::*;
use pgrx::JsonB;

use crate::api::errors::{raise, OrRaise};
use crate::api::sync::{caller, required, required_text};
use crate::engine::blobs::{download, sweep, upload};

/// Arms the transaction-end hooks of an upload: a COMMIT (or PREPARE) with
/// an unfinished upload fails (its chunks would be stored without a blob
/// record); any end forgets the backend's upload state. A subtransaction
/// that ends takes the upload along (rolled back) or hands it to its parent
/// (released).
fn arm_upload_hooks() {
    register_subxact_callback(PgSubXactCallbackEvent::AbortSub, upload::subtransaction_aborted);
    register_subxact_callback(PgSubXactCallbackEvent::CommitSub, upload::subtransaction_committed);
    for event in [PgXactCallbackEvent::PreCommit, PgXactCallbackEvent::PrePrepare] {
        register_xact_callback(event, || {
            if let Some(e) = upload::unfinished() {
                upload::reset();
                raise(e);
            }
        });
    }
    for event in [PgXactCallbackEvent::Commit, PgXactCallbackEvent::Abort] {
        register_xact_callback(event, upload::reset);
    }
}

/// `syncular.blob_put(partition text, blob_id text, bytes bytea) returns jsonb`
///
/// Stores `bytes` as blob `blob_id` of `partition` (§5.9.3) when their
/// SHA-256 is `blob_id`; returns `{"blobId", "byteLength", "stored"}`
/// (`stored` false: already present — idempotent). Errors:
/// `blob.hash_mismatch` (22023), `blob.too_large` (22023, over
/// `syncular.blob_max_bytes`), `sync.invalid_request` (22023, malformed id),
/// `syncular.invalid_argument` (22023: NULL/empty arguments, an upload in
/// progress).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn blob_put(partition: Option<&str>, blob_id: Option<&str>, bytes: Option<&[u8]>) -> JsonB {
    let partition = required_text(partition, "partition");
    let blob_id = required_text(blob_id, "blob_id");
    let bytes = required(bytes, "bytes");
    arm_upload_hooks();
    JsonB(upload::put(partition, blob_id, bytes).or_raise())
}

/// `syncular.blob_upload_begin(partition text, blob_id text, byte_length
/// bigint DEFAULT NULL) returns boolean` — starts a streamed upload in the
/// caller's transaction (then `blob_upload_append`…, `blob_upload_finish`,
/// all in the same transaction and subtransaction). `byte_length` is the
/// declared size (a `Content-Length`), checked against the cap up front.
/// Returns whether the blob is already stored (its bytes are then verified
/// but not stored again). Identical uploads queue on a lock until the first
/// one's transaction ends. Errors: as [`blob_put`].
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn blob_upload_begin(partition: Option<&str>, blob_id: Option<&str>, byte_length: default!(Option<i64>, "NULL")) -> bool {
    let partition = required_text(partition, "partition");
    let blob_id = required_text(blob_id, "blob_id");
    arm_upload_hooks();
    upload::begin(partition, blob_id, byte_length).or_raise()
}

/// `syncular.blob_upload_append(partition text, blob_id text, bytes bytea)
/// returns bigint` — the next bytes of the upload (any size; stored in
/// chunks of at most 1 MiB); returns the bytes received so far.
/// Errors: `blob.too_large` once the total exceeds the cap;
/// `syncular.invalid_argument` without a matching `blob_upload_begin`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn blob_upload_append(partition: Option<&str>, blob_id: Option<&str>, bytes: Option<&[u8]>) -> i64 {
    let partition = required_text(partition, "partition");
    let blob_id = required_text(blob_id, "blob_id");
    let bytes = required(bytes, "bytes");
    upload::append(partition, blob_id, bytes).or_raise()
}

/// `syncular.blob_upload_finish(partition text, blob_id text) returns jsonb`
/// — verifies the content address over every byte appended and records
/// the blob; returns `{"blobId", "byteLength", "stored"}`.
/// Errors: `blob.hash_mismatch` (roll back: the chunks go with it),
/// `syncular.invalid_argument` without a matching `blob_upload_begin`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn blob_upload_finish(partition: Option<&str>, blob_id: Option<&str>) -> JsonB {
    let partition = required_text(partition, "partition");
    let blob_id = required_text(blob_id, "blob_id");
    JsonB(upload::finish(partition, blob_id).or_raise())
}

/// `syncular.blob_upload_grant(partition text, blob_id text, byte_length
/// bigint) returns jsonb` — the §5.9.3 upload grant of a server that stores
/// the bytes itself: `{"present": true}` (stored: skip the upload) or
/// `{"present": false}` (no presigned URL: `PUT /blobs/{blobId}`).
/// Errors: `blob.too_large` (declared size over the cap),
/// `sync.invalid_request`, `syncular.invalid_argument`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn blob_upload_grant(partition: Option<&str>, blob_id: Option<&str>, byte_length: Option<i64>) -> JsonB {
    let partition = required_text(partition, "partition");
    let blob_id = required_text(blob_id, "blob_id");
    let byte_length = *required(byte_length.as_ref(), "byte_length");
    JsonB(upload::grant(partition, blob_id, byte_length).or_raise())
}

/// `syncular.blob_open(partition text, actor_id text, blob_id text,
/// allowed_scopes jsonb DEFAULT NULL) returns jsonb` — download
/// authorization (§5.9.5): `{"blobId", "byteLength", "chunkCount"}` when a
/// row of the partition that references the blob passes the §3.4 scope
/// check for the actor (`allowed_scopes`, or the resolver when NULL).
/// Errors: `blob.not_found` (42704; also for a malformed id),
/// `blob.forbidden` (42501), the allowed-scope errors of
/// `syncular.sync`.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn blob_open(
    partition: Option<&str>,
    actor_id: Option<&str>,
    blob_id: Option<&str>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
) -> JsonB {
    let allowed = allowed_scopes.map(|j| j.0);
    let caller = caller(partition, actor_id, allowed.as_ref());
    let blob_id = required_text(blob_id, "blob_id");
    JsonB(download::open(&caller, blob_id).or_raise())
}

/// `syncular.blob_read(partition text, actor_id text, blob_id text, chunk
/// integer, allowed_scopes jsonb DEFAULT NULL) returns bytea` — chunk
/// `chunk` (0 .. chunkCount) of the blob's bytes, authorized again exactly
/// like [`blob_open`]. Read the chunks of one download in one REPEATABLE
/// READ transaction. Errors: as [`blob_open`]; `syncular.invalid_argument`
/// for a chunk out of range.
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn blob_read(
    partition: Option<&str>,
    actor_id: Option<&str>,
    blob_id: Option<&str>,
    chunk: Option<i32>,
    allowed_scopes: default!(Option<Jsonb>, "NULL"),
) -> Vec<u8> {
    let allowed = allowed_scopes.map(|j| j.0);
    let caller = caller(partition, actor_id, allowed.as_ref());
    let blob_id = required_text(blob_id, "blob_id");
    let chunk = *required(chunk.as_ref(), "chunk");
    download::read(&caller, blob_id, chunk).or_raise()
}

/// `syncular.blob_sweep_orphans(older_than_ms bigint DEFAULT 86400000,
/// max_rows integer DEFAULT 1000, partition text DEFAULT NULL) returns
/// bigint` — deletes up to `max_rows` blobs uploaded more than
/// `older_than_ms` ago that no row references (§5.9.2), in `partition` or
/// every partition; returns how many. Never deletes a referenced blob, nor
/// one a concurrent writer is referencing (skipped). Admin only; run it in
/// its own READ COMMITTED transaction and repeat until it returns 0.
/// Errors: `syncular.invalid_argument` (22023).
#[pg_extern(volatile, parallel_unsafe, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn blob_sweep_orphans(
    older_than_ms: default!(Option<i64>, 86400000),
    max_rows: default!(Option<i32>, 1000),
    partition: default!(Option<&str>, "NULL"),
) -> i64 {
    debug_assert_eq!(sweep::DEFAULT_GRACE_MS, 86_400_000);
    let older_than_ms = *required(older_than_ms.as_ref(), "older_than_ms");
    let max_rows = *required(max_rows.as_ref(), "max_rows");
    sweep::sweep(partition, older_than_ms, i64::from(max_rows)).or_raise()
}
