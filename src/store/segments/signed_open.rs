//! The reads behind a §5.4 signed-URL download
//! ([`crate::engine::segments::signed_url::open_signed`]): the expiry of the
//! publications a token can name (the stored segment's record is
//! [`crate::store::segments::bytes::select_segment`]).
//! Every statement names its partition (the partition comes out of the
//! verified token's `aud`).

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// What the publications of a segment under one log epoch say about one
/// scope digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicationState {
    /// Publications of the segment in the partition and epoch (any digest).
    pub any: bool,
    /// The latest expiry among those published under the digest, Unix ms
    /// (`None`: none under it).
    pub digest_expires_at_ms: Option<i64>,
}

/// [`PublicationState`] of `segment_id` in `partition` under `log_epoch`
/// for `scope_digest`. Errors: SPI failures.
pub fn select_publication_state(partition: &str, log_epoch: &str, segment_id: &str, scope_digest: &str) -> StoreResult<PublicationState> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT count(*) > 0, max(expires_at_ms) FILTER (WHERE scope_digest = $4) \
             FROM syncular.sync_segment_publications \
             WHERE partition = $1 AND segment_id = $2 AND log_epoch = $3",
            Some(1),
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(segment_id),
                DatumWithOid::from(log_epoch),
                DatumWithOid::from(scope_digest),
            ],
        )?;
        let row = t.first();
        Ok(PublicationState { any: row.get::<bool>(1)?.unwrap_or(false), digest_expires_at_ms: row.get::<i64>(2)? })
    })
    .map_err(StoreError::spi("select_segment_publication_state"))
}
