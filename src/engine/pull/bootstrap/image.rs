//! The sqlite image lane of a bootstrap (SPEC §5.3): at the start of a table,
//! for a client that advertised `accept` bit 2, one whole-table image sent
//! as a `SEGMENT_REF` (never inline, never mid-table), reused while its
//! publication lives.
//!
//! Order: the publication of the image's context — (partition, live log
//! epoch, table, schema version, sqlite, the caller's scope digest, pin,
//! table start, `page_rows` 0) — is looked up first: a live one is served
//! as is (it was eligible when built at this pin), and a storm of identical
//! bootstraps builds once (§5.3: "MUST NOT rebuild per client while an
//! unexpired one exists"). On a miss the §5.3 eligibility probe runs (more
//! than one rows page of matching rows at the pin); an ineligible snapshot,
//! or one an image cannot carry unchanged ([`build_image`]
//! answers `None`), stays on the rows lane. Otherwise the image is built in
//! a temporary file, its bytes stored and published, and described. Two
//! simultaneous first builds both build (images are not byte-deterministic,
//! §5.3); the second publication keeps the first live one and serves it.
//!
//! Eligibility ([`image_lane_offered`], [`snapshot_exceeds_one_page`],
//! [`image_eligible`]) is decided here; the image itself is built by
//! [`crate::engine::segments::image`].

use syncular_protocol::constants::ACCEPT_SQLITE;
use syncular_protocol::response::{MediaType, SegmentRef};
use syncular_protocol::scopes::ScopeMap;

use super::stored::attach_signed_url;
use super::{BootstrapRequest, Emit};
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::pull::limits::PullLimits;
use crate::engine::schema::RegisteredTable;
use crate::engine::segments::image::{build_image, scan_matching, ImageRequest};
use crate::engine::segments::publication::find_live_at;
use crate::engine::segments::{publish_effective, store_bytes, Publication, PublicationKey, MEDIA_TYPE_SQLITE};

/// What an image delivery moved: its rows and the response size after it.
pub struct ImageServed {
    /// Rows in the image.
    pub rows: u64,
    /// Response bytes written after the descriptor.
    pub written: usize,
}

/// Serves the table's image through `emit` when the lane applies (module
/// docs); `None` = the rows lane serves the table. Errors: store failures,
/// build failures (`syncular.internal`, XX000).
pub fn serve_image(
    req: &BootstrapRequest<'_>,
    digest: &str,
    emit: &mut impl FnMut(Emit<'_>) -> EngineResult<usize>,
) -> EngineResult<Option<ImageServed>> {
    if !image_lane_offered(&req.limits, req.start.row_cursor.as_deref()) {
        return Ok(None);
    }
    let key = PublicationKey {
        partition: req.partition,
        log_epoch: req.log_epoch,
        table: req.table.name(),
        schema_version: req.schema_version,
        media_type: MEDIA_TYPE_SQLITE,
        scope_digest: digest,
        as_of_commit_seq: req.start.as_of_commit_seq,
        row_cursor: None,
        page_rows: 0,
    };
    let live = match find_live_at(&key, req.now_ms)? {
        Some(hit) => hit,
        None => {
            if !snapshot_exceeds_one_page(req.partition, req.table, req.effective, &req.limits)? {
                return Ok(None);
            }
            let Some(image) = build_image(&ImageRequest {
                partition: req.partition,
                table: req.table,
                effective: req.effective,
                schema_version: req.schema_version,
                as_of_commit_seq: req.start.as_of_commit_seq,
                scope_digest: digest,
            })?
            else {
                return Ok(None);
            };
            store_bytes(req.partition, image.segment_id(), MEDIA_TYPE_SQLITE, image.byte_length(), &mut image.reader()?)?;
            publish_effective(&Publication {
                partition: req.partition.to_owned(),
                log_epoch: req.log_epoch.to_owned(),
                table: req.table.name().to_owned(),
                schema_version: req.schema_version,
                media_type: MEDIA_TYPE_SQLITE,
                scope_digest: digest.to_owned(),
                as_of_commit_seq: req.start.as_of_commit_seq,
                row_cursor: None,
                page_rows: 0,
                segment_id: image.segment_id().to_owned(),
                next_row_cursor: None,
                row_count: image.row_count(),
                published_at_ms: req.now_ms,
                expires_at_ms: req.now_ms.saturating_add(crate::settings::segment_ttl_ms()),
            })?;
            find_live_at(&key, req.now_ms)?
                .ok_or_else(|| EngineError::internal("the image publication vanished while publishing"))?
        }
    };
    let p = &live.publication;
    let mut descriptor = SegmentRef {
        segment_id: p.segment_id.clone(),
        media_type: MediaType::Sqlite,
        table: req.table.name().to_owned(),
        byte_length: live.byte_length,
        row_count: p.row_count,
        as_of_commit_seq: p.as_of_commit_seq,
        // The caller's digest (part of the lookup key).
        scope_digest: digest.to_owned(),
        // §5.3: an image is the first and the last page of its table.
        row_cursor: None,
        next_row_cursor: None,
        url: None,
        url_expires_at_ms: None,
    };
    attach_signed_url(req, &mut descriptor)?;
    let written = emit(Emit::Ref(&descriptor))?;
    Ok(Some(ImageServed { rows: u64::try_from(p.row_count).unwrap_or(0), written }))
}

/// The cheap half of §5.3 eligibility: the client advertised `accept` bit 2
/// and the bootstrap stands at the start of the table (`row_cursor` null:
/// a fresh bootstrap, or a resume that has not delivered a row yet). A
/// resumed bootstrap with a cursor stays on the rows lane (§5.3: never
/// switch lanes mid-table).
pub fn image_lane_offered(limits: &PullLimits, row_cursor: Option<&str>) -> bool {
    limits.accept & ACCEPT_SQLITE != 0 && row_cursor.is_none()
}

/// True when more than `limits.limit_snapshot_rows` (clamped) rows of
/// `table` match `effective` in `partition` — the snapshot exceeds one rows
/// page. Reads at most `limitSnapshotRows + 1` matching rows (plus the
/// non-matching candidates between them), never counts the whole table.
/// Errors: store failures, corrupt stored scopes (`syncular.internal`).
pub fn snapshot_exceeds_one_page(
    partition: &str,
    table: &RegisteredTable,
    effective: &ScopeMap,
    limits: &PullLimits,
) -> EngineResult<bool> {
    let page = u64::try_from(limits.limit_snapshot_rows).unwrap_or(1).max(1);
    let mut seen = 0u64;
    scan_matching(partition, table, effective, Some(page + 1), |_| {
        seen += 1;
        true
    })?;
    Ok(seen > page)
}

/// §5.3 eligibility: [`image_lane_offered`] and [`snapshot_exceeds_one_page`]
/// (the probe runs only when the cheap half holds).
pub fn image_eligible(
    partition: &str,
    table: &RegisteredTable,
    effective: &ScopeMap,
    limits: &PullLimits,
    row_cursor: Option<&str>,
) -> EngineResult<bool> {
    if !image_lane_offered(limits, row_cursor) {
        return Ok(false);
    }
    snapshot_exceeds_one_page(partition, table, effective, limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncular_protocol::request::PullHeader;

    fn limits(accept: u8) -> PullLimits {
        PullLimits::from_header(&PullHeader { limit_commits: 0, limit_snapshot_rows: 0, max_snapshot_pages: 0, accept })
    }

    #[test]
    fn offered_only_with_bit_2_at_the_table_start() {
        assert!(image_lane_offered(&limits(0b0110), None));
        assert!(image_lane_offered(&limits(0b1111), None));
        assert!(!image_lane_offered(&limits(0b0011), None), "no bit 2");
        assert!(!image_lane_offered(&limits(0b0111), Some("r9")), "never mid-table");
    }
}
