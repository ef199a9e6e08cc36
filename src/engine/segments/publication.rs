//! Publications (SPEC §5.1, §5.4): the mutable record that makes stored
//! bytes servable in one context — `(partition, logEpoch, table,
//! schemaVersion, mediaType, scopeDigest, asOfCommitSeq, page window)` —
//! until its own expiry. Reuse ([`find_live`]) and download select the one
//! publication of the caller's context; digests are never unioned.

use crate::engine::error::{EngineError, EngineResult};
use crate::store::segments::bytes as stored;
use crate::store::segments::publications as store;
pub use crate::store::segments::publications::{Publication, PublicationKey};

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
    if store::upsert_publication(p)? {
        return Ok(p.clone());
    }
    store::select_publication(&p.key())?.ok_or_else(|| {
        EngineError::internal(format!("segment publication of {} vanished while publishing", p.segment_id))
    })
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
    let Some(publication) = store::select_publication(key)? else { return Ok(None) };
    if publication.expires_at_ms <= now_ms {
        return Ok(None);
    }
    let Some(record) = stored::select_segment(key.partition, &publication.segment_id)? else { return Ok(None) };
    Ok(Some(LivePublication {
        publication,
        byte_length: record.byte_length,
        chunk_count: record.chunk_count,
    }))
}
