//! Segment expiry and garbage collection (SPEC §5.1, §5.5; docs/src/sql/segments.md "Segment
//! expiry and garbage collection"): `syncular.segment_sweep`.
//!
//! One call, in bounded batches of at most `max_rows` each:
//! 1. deletes publications that expired more than `grace_ms` ago (a
//!    publisher that refreshed one meanwhile keeps it: the DELETE re-checks);
//! 2. deletes the bytes (chunks, then the `sync_segments` row) of segments
//!    stored more than `grace_ms` ago that no publication references —
//!    after locking the row `FOR UPDATE SKIP LOCKED` and re-reading the
//!    publications in a later statement ([`crate::store::segments::sweep`]:
//!    a publisher reusing the bytes holds the row `FOR KEY SHARE`, so they
//!    are skipped, or it waits and stores them again);
//! 3. deletes signed-URL keys retired long enough to verify nothing
//!    ([`crate::engine::segments::signed_url::RETIRED_KEY_MS`]).
//!
//! **Downloads in flight.** A download opens (`segment_open`,
//! `segment_open_signed`) only while a publication is live, and its chunks
//! are read afterwards, one statement each. The publication stays stored
//! until `grace_ms` after its expiry, and the bytes until no publication
//! remains, so every download has at least `grace_ms` from its open to
//! read its last chunk (default 1 h); past that its next chunk read fails
//! and the body ends early (the client's content-address check fails and
//! it pulls again).

use serde_json::{json, Value};

use crate::engine::clock;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::segments::signed_url::RETIRED_KEY_MS;
use crate::store::segments::{sweep as store, url_keys};

/// The default grace period: 1 hour.
pub const DEFAULT_GRACE_MS: i64 = 60 * 60 * 1000;

/// Counts of one sweep call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Expired publications deleted.
    pub publications: i64,
    /// Segments whose bytes were deleted.
    pub segments: i64,
    /// Signed-URL keys deleted.
    pub url_keys: i64,
}

impl Swept {
    /// `{"publications", "segments", "urlKeys"}`.
    pub fn to_json(self) -> Value {
        json!({"publications": self.publications, "segments": self.segments, "urlKeys": self.url_keys})
    }
}

/// One sweep (module docs). Errors: `syncular.invalid_argument` (`max_rows`
/// < 1, a negative grace, a REPEATABLE READ / SERIALIZABLE caller: its
/// snapshot could miss a publication committed after it), store failures.
pub fn sweep(max_rows: i64, grace_ms: i64) -> EngineResult<Swept> {
    if max_rows < 1 || grace_ms < 0 {
        return Err(EngineError::host(
            HostCode::InvalidArgument,
            format!("max_rows must be ≥ 1 and grace_ms ≥ 0, got {max_rows} and {grace_ms}"),
        ));
    }
    // SAFETY: reads backend transaction state.
    if unsafe { pgrx::pg_sys::XactIsoLevel } >= pgrx::pg_sys::XACT_REPEATABLE_READ as i32 {
        return Err(EngineError::host(
            HostCode::InvalidArgument,
            "syncular.segment_sweep runs under READ COMMITTED only: it re-reads the publications after locking each segment",
        ));
    }
    let now_ms = clock::now_ms()?;
    let cutoff = now_ms.saturating_sub(grace_ms);
    let mut out = Swept::default();
    for key in store::expired_publications(cutoff, max_rows)? {
        if store::delete_expired_publication(&key, cutoff)? {
            out.publications += 1;
        }
    }
    for (partition, segment_id) in store::unpublished_segments(cutoff, max_rows)? {
        if !store::lock_segment_for_sweep(&partition, &segment_id)? || store::segment_published(&partition, &segment_id)? {
            continue;
        }
        if store::delete_segment(&partition, &segment_id)? {
            out.segments += 1;
        }
    }
    out.url_keys = i64::try_from(url_keys::delete_keys_retired_by(now_ms.saturating_sub(RETIRED_KEY_MS))?).unwrap_or(i64::MAX);
    Ok(out)
}
