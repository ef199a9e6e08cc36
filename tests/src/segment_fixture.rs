//! Stored segments for the gateway and sweep tests (`tests/tests/gateway_segments.rs`,
//! `tests/tests/segment_sweep_races.rs`), written straight into `sync_segments`,
//! `sync_segment_chunks` and `sync_segment_publications` (the publisher is another seam), in a
//! [`crate::blob_fixture::Db`] (schema `notes` scoped by `ws:{ws}`; alice and bob hold `w1`).
//!
//! **Temporary shim.** Until the branch that builds delivery by capability is merged, this
//! branch has no `syncular.segment_open` / `syncular.segment_chunk`; [`install_shim`] creates
//! minimal SQL stand-ins ONLY when the function is missing (so after the merge the tests run
//! against the real ones): `segment_chunk` reads the chunk row; `segment_open` takes the digest
//! of the requested-scopes text as the effective digest (true only when requested ⊆ allowed,
//! which is all these tests send) and raises the §5.5 codes.

use postgres::Client;
use sha2::{Digest, Sha256};

/// Chunk size of stored segments (1 MiB).
pub const CHUNK: usize = 1024 * 1024;

/// `"sha256:" + hex` of `bytes` (§5.1).
pub fn segment_id(bytes: &[u8]) -> String {
    crate::blob_fixture::blob_id(bytes)
}

/// §3.5 scope digest of a canonical scope JSON text.
pub fn digest(canonical_scopes: &str) -> String {
    Sha256::digest(canonical_scopes.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Creates the stand-ins of `segment_open` / `segment_chunk` when missing (module docs).
pub fn install_shim(c: &mut Client) {
    c.batch_execute(
        r#"DO $shim$ BEGIN
  IF pg_catalog.to_regprocedure('syncular.segment_chunk(text,text,integer)') IS NULL THEN
    CREATE FUNCTION syncular.segment_chunk(partition text, segment_id text, idx integer) RETURNS bytea
      LANGUAGE sql STABLE AS $f$ SELECT c.bytes FROM syncular.sync_segment_chunks c
        WHERE c.partition = $1 AND c.segment_id = $2 AND c.idx = $3 $f$;
  END IF;
  IF pg_catalog.to_regprocedure('syncular.segment_open(text,text,text,text,jsonb)') IS NULL THEN
    CREATE FUNCTION syncular.segment_open(partition text, actor_id text, segment_id text, requested_scopes text,
        allowed_scopes jsonb DEFAULT NULL) RETURNS jsonb LANGUAGE plpgsql STABLE AS $f$
    DECLARE s record; epoch text; d text; any_pub boolean; expires bigint;
    BEGIN
      SELECT * INTO s FROM syncular.sync_segments g WHERE g.partition = $1 AND g.segment_id = $3;
      SELECT r.log_epoch INTO epoch FROM syncular.sync_partition_registry r WHERE r.partition = $1;
      IF s IS NULL OR epoch IS NULL THEN RAISE EXCEPTION 'sync.not_found: unknown segment' USING ERRCODE = '42704'; END IF;
      d := encode(sha256(convert_to($4, 'UTF8')), 'hex');
      SELECT count(*) > 0, max(p.expires_at_ms) FILTER (WHERE p.scope_digest = d) INTO any_pub, expires
        FROM syncular.sync_segment_publications p WHERE p.partition = $1 AND p.segment_id = $3 AND p.log_epoch = epoch;
      IF NOT any_pub THEN RAISE EXCEPTION 'sync.not_found: unknown segment' USING ERRCODE = '42704'; END IF;
      IF expires IS NULL THEN RAISE EXCEPTION 'sync.forbidden: scope digest mismatch' USING ERRCODE = '42501'; END IF;
      IF expires <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint THEN
        RAISE EXCEPTION 'sync.segment_expired: segment expired' USING ERRCODE = '42704';
      END IF;
      RETURN jsonb_build_object('segmentId', $3, 'byteLength', s.byte_length, 'chunkCount', s.chunk_count, 'mediaType', s.media_type);
    END $f$;
  END IF;
END $shim$;"#,
    )
    .expect("segment shim");
}

/// The live log epoch of `partition`, registering the partition when new.
pub fn live_epoch(c: &mut Client, partition: &str) -> String {
    c.execute(
        "INSERT INTO syncular.sync_partition_registry (partition, log_epoch, last_authenticated_at_ms) \
         VALUES ($1, 'seg-epoch-' || pg_catalog.gen_random_uuid(), 0) ON CONFLICT DO NOTHING",
        &[&partition],
    )
    .expect("registry");
    c.query_one("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&partition]).expect("epoch").get(0)
}

/// Stores `bytes` as a rows segment of `partition` (1 MiB chunks), created at `created_at_ms`;
/// returns its id.
pub fn store(c: &mut impl postgres::GenericClient, partition: &str, bytes: &[u8], created_at_ms: i64) -> String {
    let id = segment_id(bytes);
    let chunks: Vec<&[u8]> = if bytes.is_empty() { Vec::new() } else { bytes.chunks(CHUNK).collect() };
    c.execute(
        "INSERT INTO syncular.sync_segments (partition, segment_id, media_type, byte_length, chunk_count, created_at_ms) \
         VALUES ($1, $2, 1, $3, $4, $5)",
        &[&partition, &id, &(bytes.len() as i64), &(chunks.len() as i32), &created_at_ms],
    )
    .expect("segment row");
    for (i, chunk) in chunks.iter().enumerate() {
        c.execute(
            "INSERT INTO syncular.sync_segment_chunks (partition, segment_id, idx, bytes) VALUES ($1, $2, $3, $4)",
            &[&partition, &id, &(i as i32), chunk],
        )
        .expect("chunk row");
    }
    id
}

/// Publishes segment `id` of `partition` under `epoch` and `scope_digest` (page window
/// `page_rows` tells publications apart), expiring at `expires_at_ms`.
pub fn publish(c: &mut impl postgres::GenericClient, partition: &str, epoch: &str, scope_digest: &str, page_rows: i32, id: &str, expires_at_ms: i64) {
    c.execute(
        "INSERT INTO syncular.sync_segment_publications (partition, log_epoch, tbl, schema_version, media_type, \
            scope_digest, as_of_commit_seq, from_start, row_cursor, page_rows, segment_id, next_row_cursor, \
            row_count, published_at_ms, expires_at_ms) \
         VALUES ($1, $2, 'notes', 1, 1, $3, 0, true, '', $4, $5, NULL, 1, 0, $6)",
        &[&partition, &epoch, &scope_digest, &page_rows, &id, &expires_at_ms],
    )
    .expect("publication row");
}

/// Unix ms now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}
