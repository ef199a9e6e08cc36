//! Publications (SPEC §5.1, §5.4): the mutable record that makes stored
//! bytes servable in one context — `(partition, logEpoch, table,
//! schemaVersion, mediaType, scopeDigest, asOfCommitSeq, page window)` —
//! until its own expiry. Reuse ([`find_live`]) and download select the one
//! publication of the caller's context; digests are never unioned.

use crate::engine::error::{EngineError, EngineResult};
use crate::store::segments::bytes as stored;
use crate::store::segments::publications::{self as store, PublicationKeyRef, PublicationRow};

/// One publication: every column of `sync_segment_publications`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publication {
    /// Host partition.
    pub partition: String,
    /// The partition's live `logEpoch` (§2.1) when published.
    pub log_epoch: String,
    /// The table the segment holds.
    pub table: String,
    /// Registered schema version the bytes are encoded for.
    pub schema_version: i32,
    /// `mediaType` (§5.4): 1 = rows, 2 = sqlite.
    pub media_type: u8,
    /// §3.5 digest (64 lowercase hex) of the effective scopes the bytes
    /// were built for.
    pub scope_digest: String,
    /// The bootstrap pin `asOfCommitSeq` (§4.7).
    pub as_of_commit_seq: i64,
    /// Page start (exclusive row id); `None` = the table start.
    pub row_cursor: Option<String>,
    /// Page window in rows: the clamped `limitSnapshotRows` (0 for an image).
    pub page_rows: i32,
    /// Content address of the bytes (`"sha256:" + hex`).
    pub segment_id: String,
    /// Continuation after the page; `None` = last page of the table.
    pub next_row_cursor: Option<String>,
    /// Rows in the segment.
    pub row_count: i64,
    /// Publication time, Unix ms.
    pub published_at_ms: i64,
    /// Expiry, Unix ms: live while `now < expires_at_ms`.
    pub expires_at_ms: i64,
}

/// The context a publication is looked up by (reuse key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicationKey<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// The partition's live `logEpoch`.
    pub log_epoch: &'a str,
    /// Table name.
    pub table: &'a str,
    /// Registered schema version.
    pub schema_version: i32,
    /// `mediaType` (1 rows, 2 sqlite).
    pub media_type: u8,
    /// §3.5 digest of the caller's effective scopes.
    pub scope_digest: &'a str,
    /// The bootstrap pin.
    pub as_of_commit_seq: i64,
    /// Page start; `None` = the table start.
    pub row_cursor: Option<&'a str>,
    /// Page window in rows (clamped `limitSnapshotRows`; 0 for an image).
    pub page_rows: i32,
}

/// A live publication whose bytes are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePublication {
    /// The publication.
    pub publication: Publication,
    /// Size of the stored bytes.
    pub byte_length: i64,
    /// Chunk rows of the stored bytes.
    pub chunk_count: i32,
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

    fn row(&self) -> PublicationRow {
        PublicationRow {
            partition: self.partition.clone(),
            log_epoch: self.log_epoch.clone(),
            table: self.table.clone(),
            schema_version: self.schema_version,
            media_type: i16::from(self.media_type),
            scope_digest: self.scope_digest.clone(),
            as_of_commit_seq: self.as_of_commit_seq,
            row_cursor: self.row_cursor.clone(),
            page_rows: self.page_rows,
            segment_id: self.segment_id.clone(),
            next_row_cursor: self.next_row_cursor.clone(),
            row_count: self.row_count,
            published_at_ms: self.published_at_ms,
            expires_at_ms: self.expires_at_ms,
        }
    }

    pub(crate) fn from_row(r: PublicationRow) -> Publication {
        Publication {
            partition: r.partition,
            log_epoch: r.log_epoch,
            table: r.table,
            schema_version: r.schema_version,
            media_type: u8::try_from(r.media_type).unwrap_or(0),
            scope_digest: r.scope_digest,
            as_of_commit_seq: r.as_of_commit_seq,
            row_cursor: r.row_cursor,
            page_rows: r.page_rows,
            segment_id: r.segment_id,
            next_row_cursor: r.next_row_cursor,
            row_count: r.row_count,
            published_at_ms: r.published_at_ms,
            expires_at_ms: r.expires_at_ms,
        }
    }
}

fn key_ref<'a>(k: &PublicationKey<'a>) -> PublicationKeyRef<'a> {
    PublicationKeyRef {
        partition: k.partition,
        log_epoch: k.log_epoch,
        table: k.table,
        schema_version: k.schema_version,
        media_type: i16::from(k.media_type),
        scope_digest: k.scope_digest,
        as_of_commit_seq: k.as_of_commit_seq,
        row_cursor: k.row_cursor,
        page_rows: k.page_rows,
    }
}

/// Publishes `p` (its bytes must be stored: [`super::store_bytes`]). When
/// the context already has a publication of the same segment, its expiry is
/// extended to the later of both (concurrent identical publications never
/// lose one another); an expired publication of other bytes is replaced; a
/// live publication of other bytes is kept (see [`publish_effective`]).
/// Errors: store failures (`syncular.internal`).
pub fn publish(p: &Publication) -> EngineResult<()> {
    publish_effective(p).map(|_| ())
}

/// [`publish`], returning the publication the context holds afterwards:
/// `p` itself (expiry possibly extended), or — when a concurrent builder
/// published other bytes for the same context first (rows changed between
/// the two builds at the same pin; both are valid snapshots) — that live
/// publication, which the caller serves instead of its own bytes so that a
/// descriptor always names a published segment.
/// Errors: store failures; the context's row vanished between the two
/// statements (`syncular.internal`).
pub fn publish_effective(p: &Publication) -> EngineResult<Publication> {
    if store::upsert_publication(&p.row())? {
        return Ok(p.clone());
    }
    let existing = store::select_publication(&key_ref(&p.key()))?.ok_or_else(|| {
        EngineError::internal(format!("segment publication of {} vanished while publishing", p.segment_id))
    })?;
    Ok(Publication::from_row(existing))
}

/// The unexpired publication of context `key` whose bytes are stored, or
/// `None` (absent, expired at the engine clock's now, or bytes gone).
/// Errors: store failures; an unusable `syncular.now_ms`.
pub fn find_live(key: &PublicationKey<'_>) -> EngineResult<Option<LivePublication>> {
    let now_ms = crate::engine::clock::now_ms()?;
    find_live_at(key, now_ms)
}

/// [`find_live`] at `now_ms`.
pub fn find_live_at(key: &PublicationKey<'_>, now_ms: i64) -> EngineResult<Option<LivePublication>> {
    let Some(row) = store::select_publication(&key_ref(key))? else { return Ok(None) };
    if row.expires_at_ms <= now_ms {
        return Ok(None);
    }
    let Some(record) = stored::select_segment(key.partition, &row.segment_id)? else { return Ok(None) };
    Ok(Some(LivePublication {
        publication: Publication::from_row(row),
        byte_length: record.byte_length,
        chunk_count: record.chunk_count,
    }))
}
