//! `sync_segment_publications` statements: one row per context a segment
//! was published under — `(partition, log_epoch, tbl, schema_version,
//! media_type, scope_digest, as_of_commit_seq, page window)` — each with its
//! own expiry. Lookups select the one row of the caller's context; they never
//! union digests across contexts.
//!
//! The page window is stored as `from_start` + `row_cursor` (`''` when
//! `from_start`) + `page_rows`; this module maps it to `Option<String>`
//! (`None` = the table start), and `media_type` (`smallint`) to `u8`.
//! [`Publication`] and [`PublicationKey`] are the engine's types too
//! (re-exported by `crate::engine::segments`).

use pgrx::datum::DatumWithOid;
use pgrx::spi::{Spi, SpiHeapTupleData};

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// One publication: every column of `sync_segment_publications`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// Host partition.
    pub partition: String,
    /// The partition's `logEpoch` at publication (§2.1).
    pub log_epoch: String,
    /// Table name (`tbl`).
    pub table: String,
    /// Schema version the bytes are encoded for.
    pub schema_version: i32,
    /// `mediaType` (§5.4): 1 = rows, 2 = sqlite.
    pub media_type: u8,
    /// §3.5 digest of the effective scopes the bytes were built for.
    pub scope_digest: String,
    /// The bootstrap pin.
    pub as_of_commit_seq: i64,
    /// Page start; `None` = the table start.
    pub row_cursor: Option<String>,
    /// Page window in rows (clamped `limitSnapshotRows`; 0 for an image).
    pub page_rows: i32,
    /// Content address of the bytes.
    pub segment_id: String,
    /// Continuation after the page; `None` = last page of the table.
    pub next_row_cursor: Option<String>,
    /// Rows in the segment.
    pub row_count: i64,
    /// When published (or last re-published), Unix ms.
    pub published_at_ms: i64,
    /// Expiry, Unix ms (live while `> now`).
    pub expires_at_ms: i64,
}

/// The context of a publication (the row's primary key): what reuse and
/// download look a publication up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicationKey<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// The partition's live `logEpoch`.
    pub log_epoch: &'a str,
    /// Table name.
    pub table: &'a str,
    /// Schema version.
    pub schema_version: i32,
    /// `mediaType` (1 rows, 2 sqlite).
    pub media_type: u8,
    /// §3.5 scope digest.
    pub scope_digest: &'a str,
    /// The bootstrap pin.
    pub as_of_commit_seq: i64,
    /// Page start; `None` = the table start.
    pub row_cursor: Option<&'a str>,
    /// Page window in rows.
    pub page_rows: i32,
}

impl Publication {
    /// The context of this publication.
    pub fn key(&self) -> PublicationKey<'_> {
        PublicationKey {
            partition: &self.partition,
            log_epoch: &self.log_epoch,
            table: &self.table,
            schema_version: self.schema_version,
            media_type: self.media_type,
            scope_digest: &self.scope_digest,
            as_of_commit_seq: self.as_of_commit_seq,
            row_cursor: self.row_cursor.as_deref(),
            page_rows: self.page_rows,
        }
    }
}

const COLUMNS: &str = "partition, log_epoch, tbl, schema_version, media_type, scope_digest, as_of_commit_seq, \
     from_start, row_cursor, page_rows, segment_id, next_row_cursor, row_count, published_at_ms, expires_at_ms";

fn row_of(row: &SpiHeapTupleData<'_>) -> Result<Publication, pgrx::spi::Error> {
    let from_start = row.get::<bool>(8)?.unwrap_or(true);
    let cursor = row.get::<String>(9)?.unwrap_or_default();
    Ok(Publication {
        partition: row.get::<String>(1)?.unwrap_or_default(),
        log_epoch: row.get::<String>(2)?.unwrap_or_default(),
        table: row.get::<String>(3)?.unwrap_or_default(),
        schema_version: row.get::<i32>(4)?.unwrap_or(0),
        media_type: row.get::<i16>(5)?.and_then(|m| u8::try_from(m).ok()).unwrap_or(0),
        scope_digest: row.get::<String>(6)?.unwrap_or_default(),
        as_of_commit_seq: row.get::<i64>(7)?.unwrap_or(0),
        row_cursor: (!from_start).then_some(cursor),
        page_rows: row.get::<i32>(10)?.unwrap_or(0),
        segment_id: row.get::<String>(11)?.unwrap_or_default(),
        next_row_cursor: row.get::<String>(12)?,
        row_count: row.get::<i64>(13)?.unwrap_or(0),
        published_at_ms: row.get::<i64>(14)?.unwrap_or(0),
        expires_at_ms: row.get::<i64>(15)?.unwrap_or(0),
    })
}

fn key_args<'a>(k: &PublicationKey<'a>) -> Vec<DatumWithOid<'a>> {
    vec![
        DatumWithOid::from(k.partition),
        DatumWithOid::from(k.log_epoch),
        DatumWithOid::from(k.table),
        DatumWithOid::from(k.schema_version),
        DatumWithOid::from(i16::from(k.media_type)),
        DatumWithOid::from(k.scope_digest),
        DatumWithOid::from(k.as_of_commit_seq),
        DatumWithOid::from(k.row_cursor.is_none()),
        DatumWithOid::from(k.row_cursor.unwrap_or("")),
        DatumWithOid::from(k.page_rows),
    ]
}

const KEY_WHERE: &str = "partition = $1 AND log_epoch = $2 AND tbl = $3 AND schema_version = $4 \
     AND media_type = $5 AND scope_digest = $6 AND as_of_commit_seq = $7 AND from_start = $8 \
     AND row_cursor = $9 AND page_rows = $10";

/// Inserts `p`, or — when its context already has a row — extends that
/// row's expiry if it names the same segment, or replaces it if it expired
/// by `p.published_at_ms`; returns whether `p`'s segment is now the one
/// published. `false`: the context holds a live publication of other bytes
/// (a concurrent builder saw other rows at the same pin), left as it is and
/// locked to the end of the transaction. Concurrent identical publications
/// end as one row with the later expiry; publications under other digests
/// are other rows. Errors: SPI failures.
pub fn upsert_publication(p: &Publication) -> StoreResult<bool> {
    let mut args = key_args(&p.key());
    args.extend([
        DatumWithOid::from(p.segment_id.as_str()),
        DatumWithOid::from(p.next_row_cursor.as_deref()),
        DatumWithOid::from(p.row_count),
        DatumWithOid::from(p.published_at_ms),
        DatumWithOid::from(p.expires_at_ms),
    ]);
    let sql = format!(
        "INSERT INTO syncular.sync_segment_publications AS p ({COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (partition, log_epoch, tbl, schema_version, media_type, scope_digest, \
                      as_of_commit_seq, from_start, row_cursor, page_rows) \
         DO UPDATE SET segment_id = EXCLUDED.segment_id, next_row_cursor = EXCLUDED.next_row_cursor, \
                       row_count = EXCLUDED.row_count, \
                       published_at_ms = GREATEST(p.published_at_ms, EXCLUDED.published_at_ms), \
                       expires_at_ms = GREATEST(p.expires_at_ms, EXCLUDED.expires_at_ms) \
           WHERE p.segment_id = EXCLUDED.segment_id OR p.expires_at_ms <= EXCLUDED.published_at_ms \
         RETURNING 1"
    );
    Spi::connect_mut(|client| plan_cache::execute(client, &sql, None, &args).map(|t| !t.is_empty()))
        .map_err(StoreError::spi("upsert_segment_publication"))
}

/// The publication of one context (expired or not), `None` when absent.
/// Errors: SPI failures.
pub fn select_publication(key: &PublicationKey<'_>) -> StoreResult<Option<Publication>> {
    let sql = format!("SELECT {COLUMNS} FROM syncular.sync_segment_publications WHERE {KEY_WHERE}");
    let args = key_args(key);
    Spi::connect_mut(|client| {
        let mut t = plan_cache::execute(client, &sql, Some(1), &args)?;
        t.next().as_ref().map(row_of).transpose()
    })
    .map_err(StoreError::spi("select_segment_publication"))
}

/// Every publication of `segment_id` in `partition` under `log_epoch`
/// (expired ones included), for download authorization. Errors: SPI failures.
pub fn publications_of_segment(partition: &str, log_epoch: &str, segment_id: &str) -> StoreResult<Vec<Publication>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM syncular.sync_segment_publications \
         WHERE partition = $1 AND segment_id = $2 AND log_epoch = $3"
    );
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            &sql,
            None,
            &[DatumWithOid::from(partition), DatumWithOid::from(segment_id), DatumWithOid::from(log_epoch)],
        )?;
        let mut out = Vec::with_capacity(t.len());
        for row in t {
            out.push(row_of(&row)?);
        }
        Ok(out)
    })
    .map_err(StoreError::spi("segment_publications"))
}
