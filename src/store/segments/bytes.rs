//! `sync_segments` / `sync_segment_chunks` statements: a segment's bytes,
//! stored once per `(partition, segment_id)` in chunks `idx` 0 ..
//! `chunk_count` of at most 1 MiB. Identical bytes stored by a concurrent
//! builder are not an error: the second `INSERT` waits for the first
//! transaction, then does nothing ([`insert_segment`] says whether this call
//! owns the record and must write the chunks).

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::Spi;
use pgrx::PgMemoryContexts;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// A stored segment's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRecord {
    /// `mediaType` (§5.4): 1 = rows, 2 = sqlite.
    pub media_type: i16,
    /// Uncompressed size in bytes.
    pub byte_length: i64,
    /// Number of chunk rows (`idx` 0 .. chunk_count).
    pub chunk_count: i32,
    /// When the bytes were first stored, Unix ms.
    pub created_at_ms: i64,
}

fn exec(statement: &'static str, sql: &str, args: &[DatumWithOid<'_>]) -> StoreResult<u64> {
    Spi::connect_mut(|client| plan_cache::execute(client, sql, None, args).map(|t| t.len() as u64))
        .map_err(StoreError::spi(statement))
}

/// Records a segment unless `(partition, segment_id)` is already stored;
/// `true` when this call inserted the record (it then writes the chunks in
/// the same transaction). Errors: SPI failures.
pub fn insert_segment(partition: &str, segment_id: &str, record: SegmentRecord) -> StoreResult<bool> {
    exec(
        "insert_segment",
        "INSERT INTO syncular.sync_segments \
           (partition, segment_id, media_type, byte_length, chunk_count, created_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (partition, segment_id) DO NOTHING RETURNING 1",
        &[
            DatumWithOid::from(partition),
            DatumWithOid::from(segment_id),
            DatumWithOid::from(record.media_type),
            DatumWithOid::from(record.byte_length),
            DatumWithOid::from(record.chunk_count),
            DatumWithOid::from(record.created_at_ms),
        ],
    )
    .map(|n| n > 0)
}

/// Stores chunk `idx` of a segment (nothing when that chunk is stored).
/// Errors: SPI failures.
///
/// Runs in a memory context of its own, deleted on return: the `bytea` the
/// chunk is converted to (up to 1 MiB) is freed per chunk instead of living
/// until the calling SQL function returns — a 100 MB image stored from a
/// pull costs one chunk of backend memory, not 100 MB.
pub fn insert_segment_chunk(partition: &str, segment_id: &str, idx: i32, bytes: &[u8]) -> StoreResult<()> {
    let mut scratch = PgMemoryContexts::Transient {
        // SAFETY: reading the backend's current memory context (set whenever a function runs).
        parent: unsafe { pg_sys::CurrentMemoryContext },
        name: "syncular segment chunk",
        min_context_size: 0,
        initial_block_size: 8 * 1024,
        max_block_size: 8 * 1024 * 1024,
    };
    // SAFETY: nothing allocated inside outlives the closure (the statement's
    // result is a row count); an ERROR inside aborts the (sub)transaction,
    // whose cleanup resets the memory contexts.
    unsafe {
        scratch.switch_to(|_| {
            exec(
                "insert_segment_chunk",
                "INSERT INTO syncular.sync_segment_chunks (partition, segment_id, idx, bytes) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (partition, segment_id, idx) DO NOTHING",
                &[DatumWithOid::from(partition), DatumWithOid::from(segment_id), DatumWithOid::from(idx), DatumWithOid::from(bytes)],
            )
        })
    }
    .map(|_| ())
}

/// The record of a stored segment, `None` when absent. Errors: SPI failures.
pub fn select_segment(partition: &str, segment_id: &str) -> StoreResult<Option<SegmentRecord>> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT media_type, byte_length, chunk_count, created_at_ms FROM syncular.sync_segments \
             WHERE partition = $1 AND segment_id = $2",
            Some(1),
            &[DatumWithOid::from(partition), DatumWithOid::from(segment_id)],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        let row = t.first();
        Ok(Some(SegmentRecord {
            media_type: row.get::<i16>(1)?.unwrap_or(0),
            byte_length: row.get::<i64>(2)?.unwrap_or(0),
            chunk_count: row.get::<i32>(3)?.unwrap_or(0),
            created_at_ms: row.get::<i64>(4)?.unwrap_or(0),
        }))
    })
    .map_err(StoreError::spi("select_segment"))
}

/// Chunk `idx` of a segment, `None` when absent. Errors: SPI failures.
pub fn select_segment_chunk(partition: &str, segment_id: &str, idx: i32) -> StoreResult<Option<Vec<u8>>> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT bytes FROM syncular.sync_segment_chunks WHERE partition = $1 AND segment_id = $2 AND idx = $3",
            Some(1),
            &[DatumWithOid::from(partition), DatumWithOid::from(segment_id), DatumWithOid::from(idx)],
        )?;
        if t.is_empty() {
            return Ok(None);
        }
        t.first().get::<Vec<u8>>(1)
    })
    .map_err(StoreError::spi("select_segment_chunk"))
}
