//! A stored-mode bootstrap page (SPEC §5.2, §5.4): the live publication of
//! its context, or built, stored and published now; delivered inline or as
//! a `SEGMENT_REF` carrying, for a client that asked, a signed URL.

use syncular_protocol::constants::ACCEPT_SIGNED_URLS;
use syncular_protocol::response::{MediaType, SegmentRef};

use super::{build_page, BootstrapRequest, Delivery, Emit, Page, Served};
use crate::engine::budget::Budget;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::segments::publication::find_live_at;
use crate::engine::segments::signed_url;
use crate::engine::segments::{
    publish_effective, read_bytes, segment_id_of, store_bytes, LivePublication, Publication, PublicationKey,
    MEDIA_TYPE_ROWS,
};

/// One stored-mode page after `after`: the live publication of its context
/// when there is one, else built, stored and published now; then delivered
/// inline or as a descriptor ([`Delivery::inlines`]).
pub(super) fn serve_stored(
    req: &BootstrapRequest<'_>,
    digest: &str,
    delivery: Delivery,
    after: Option<&str>,
    budget: &Budget,
    written: usize,
    emit: &mut impl FnMut(Emit<'_>) -> EngineResult<usize>,
) -> EngineResult<Served> {
    let key = PublicationKey {
        partition: req.partition,
        log_epoch: req.log_epoch,
        table: req.table.name(),
        schema_version: req.schema_version,
        media_type: MEDIA_TYPE_ROWS,
        scope_digest: digest,
        as_of_commit_seq: req.start.as_of_commit_seq,
        row_cursor: after,
        page_rows: req.limits.limit_snapshot_rows,
    };
    let (live, built) = match find_live_at(&key, req.now_ms)? {
        Some(hit) => (hit, None),
        None => {
            let max = crate::settings::SEGMENT_PAGE_MAX_BYTES as usize;
            let page = build_page(req, after, |pending| pending >= max)?;
            let live = store_and_publish(req, &key, &page)?;
            (live, Some(page))
        }
    };
    let p = &live.publication;
    let served = |_written: usize| Served {
        rows: u64::try_from(p.row_count).unwrap_or(0),
        cursor: p.next_row_cursor.clone(),
        done: p.next_row_cursor.is_none(),
    };
    let len = usize::try_from(live.byte_length).unwrap_or(usize::MAX);
    if delivery.inlines(len, budget, written) {
        let bytes = match built {
            Some(page) if segment_id_of(&page.segment) == p.segment_id => Some(page.segment),
            _ => read_bytes(req.partition, &p.segment_id)?,
        };
        if let Some(bytes) = bytes {
            return Ok(served(emit(Emit::Inline(&bytes))?));
        }
    }
    let mut descriptor = SegmentRef {
        segment_id: p.segment_id.clone(),
        media_type: MediaType::Rows,
        table: req.table.name().to_owned(),
        byte_length: live.byte_length,
        row_count: p.row_count,
        as_of_commit_seq: p.as_of_commit_seq,
        // The caller's digest (equal to the publication's: it is part of the
        // lookup key), never one of another context of the same bytes.
        scope_digest: digest.to_owned(),
        row_cursor: p.row_cursor.clone(),
        next_row_cursor: p.next_row_cursor.clone(),
        url: None,
        url_expires_at_ms: None,
    };
    attach_signed_url(req, &mut descriptor)?;
    Ok(served(emit(Emit::Ref(&descriptor))?))
}

/// Attaches a §5.4 signed URL to `descriptor` — the one place it happens:
/// only for a client that advertised `accept` bit 3; a presigned GET of the
/// object store when the bucket holds the segment and the tier is healthy
/// ([`crate::engine::objects`]), else a native one when
/// `syncular.segment_url_base` is set (else no `url`: the client downloads
/// through the direct endpoint, §5.5). `url` and `urlExpiresAtMs` are set
/// together. Minted here, inside the pull right after scope resolution, for
/// the caller's digest. Errors: key store failures (`syncular.internal`).
pub(super) fn attach_signed_url(req: &BootstrapRequest<'_>, descriptor: &mut SegmentRef) -> EngineResult<()> {
    if req.limits.accept & ACCEPT_SIGNED_URLS == 0 {
        return Ok(());
    }
    // The object store's presigned GET when the bucket holds the bytes (§5.4 delegated presign),
    // else the native scheme.
    let url = match crate::engine::objects::urls::segment_get(&descriptor.segment_id, req.now_ms)? {
        Some(presigned) => Some(presigned),
        None => signed_url::mint(req.partition, &descriptor.segment_id, &descriptor.scope_digest, req.now_ms)?,
    };
    if let Some((url, expires_at_ms)) = url {
        descriptor.url = Some(url);
        descriptor.url_expires_at_ms = Some(expires_at_ms);
    }
    Ok(())
}

/// Stores a built page and publishes it for `key`; returns the context's
/// publication afterwards (ours, or a concurrent builder's live one).
fn store_and_publish(req: &BootstrapRequest<'_>, key: &PublicationKey<'_>, page: &Page) -> EngineResult<LivePublication> {
    let segment_id = segment_id_of(&page.segment);
    let byte_length = i64::try_from(page.segment.len()).unwrap_or(i64::MAX);
    store_bytes(req.partition, &segment_id, MEDIA_TYPE_ROWS, byte_length, &mut page.segment.as_slice())?;
    let mine = Publication {
        partition: key.partition.to_owned(),
        log_epoch: key.log_epoch.to_owned(),
        table: key.table.to_owned(),
        schema_version: key.schema_version,
        media_type: key.media_type,
        scope_digest: key.scope_digest.to_owned(),
        as_of_commit_seq: key.as_of_commit_seq,
        row_cursor: key.row_cursor.map(str::to_owned),
        page_rows: key.page_rows,
        segment_id: segment_id.clone(),
        next_row_cursor: if page.table_done { None } else { page.cursor.clone() },
        row_count: i64::try_from(page.rows).unwrap_or(i64::MAX),
        published_at_ms: req.now_ms,
        expires_at_ms: req.now_ms.saturating_add(crate::settings::segment_ttl_ms()),
    };
    let published = publish_effective(&mine)?;
    if published.segment_id == segment_id {
        let chunk = crate::engine::segments::CHUNK_BYTES as i64;
        let chunk_count = i32::try_from((byte_length + chunk - 1) / chunk).unwrap_or(i32::MAX);
        return Ok(LivePublication { publication: published, byte_length, chunk_count });
    }
    find_live_at(key, req.now_ms)?.ok_or_else(|| {
        EngineError::internal(format!("the publication of {} for this page vanished while publishing", published.segment_id))
    })
}
