//! Bootstrap (SPEC §4.7, §5.2, §5.7): the pinned, paged, resumable snapshot
//! of one subscription's table, delivered as `SEGMENT_INLINE` rows segments.
//!
//! - Pin: `asOfCommitSeq = maxCommitSeq` on start; a usable resume token keeps
//!   its pin and row cursor. A token that does not parse, names other tables,
//!   has an out-of-range `tableIndex`, or whose pin is behind the pruning
//!   horizon or ahead of `maxCommitSeq` silently restarts with a fresh pin —
//!   never a request error.
//! - Pages: up to `maxSnapshotPages` pages of up to `limitSnapshotRows` rows,
//!   keyset-paged by row id through `sync_row_scopes`
//!   ([`crate::store::bootstrap_page`]); each page is one SSG2 segment built
//!   with the protocol crate's streaming encoder from the stored verbatim
//!   payloads and `_sync_version`s. Completion is proven by a one-row
//!   lookahead, so a finished table never costs an extra empty round.
//! - Snapshot semantics: pages read current rows (see the store module's
//!   note); every change after the pin is replayed by the incremental pull
//!   that follows, so the client converges.
//! - Budget ([`super::budget`]): a page stops adding rows once the response
//!   plus the page reaches the budget (keeping at least one row), and no new
//!   page starts past it; a fresh bootstrap deferred before its first page
//!   gets an empty first segment so the §5.6 first-page clear still happens.

use syncular_protocol::resume_token::ResumeToken;
use syncular_protocol::scopes::ScopeMap;
use syncular_protocol::segment::{SegmentEncoder, SegmentHeader};
use syncular_protocol::ErrorCode;

use crate::engine::budget::Budget;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::pull_limits::PullLimits;
use crate::engine::scope_match::{candidate_key, stored_scopes_match};
use crate::engine::schema::RegisteredTable;
use crate::store::bootstrap_page::{read_bootstrap_page, PageQuery};

/// Candidates read per store call while filling a page (bounds SPI memory).
const PAGE_BATCH: i64 = 1000;

/// Where a bootstrap starts: its pin and row cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapStart {
    /// `asOfCommitSeq` (§4.7).
    pub as_of_commit_seq: i64,
    /// Exclusive row-id cursor; `None` = table start.
    pub row_cursor: Option<String>,
    /// True when the token was usable and this is a resume.
    pub resumed: bool,
}

/// Decides the pin and row cursor from the round-tripped token (raw JSON
/// text, `None` when absent): resume when the token parses as the §4.7 shape,
/// names exactly `[table]` with `tableIndex = 0`, and its pin lies in
/// `[horizon_seq, max_commit_seq]`; otherwise a fresh pin at
/// `max_commit_seq`, from the table start (silent restart, §4.7).
pub fn bootstrap_start(
    token: Option<&str>,
    table: &str,
    max_commit_seq: i64,
    horizon_seq: i64,
) -> BootstrapStart {
    let fresh = BootstrapStart { as_of_commit_seq: max_commit_seq, row_cursor: None, resumed: false };
    let Some(raw) = token else { return fresh };
    let Some(parsed) = ResumeToken::parse(raw) else { return fresh };
    // A row cursor Postgres `text` cannot hold (NUL) is unusable too.
    let usable = parsed.matches_tables(&[table])
        && !parsed.row_cursor.as_deref().is_some_and(|c| c.contains('\0'))
        && parsed.table_index == 0
        && parsed.as_of_commit_seq >= horizon_seq
        && parsed.as_of_commit_seq <= max_commit_seq;
    if !usable {
        return fresh;
    }
    BootstrapStart {
        as_of_commit_seq: parsed.as_of_commit_seq,
        row_cursor: parsed.row_cursor,
        resumed: true,
    }
}

/// What one bootstrap section delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapOutcome {
    /// `SUB_END.bootstrapState`: the resume token JSON text, `None` when the
    /// table is exhausted (completion signal, §4.7).
    pub resume_token: Option<String>,
    /// Segments (pages) written.
    pub segments: usize,
    /// Rows written across all segments.
    pub rows: u64,
    /// True when the budget cut the section short.
    pub deferred: bool,
}

/// Everything a bootstrap section needs besides the response writer.
pub struct BootstrapRequest<'a> {
    /// Host partition of the request.
    pub partition: &'a str,
    /// Registered schema version the segments are encoded for (§5.2 header).
    pub schema_version: i32,
    /// The subscription's table.
    pub table: &'a RegisteredTable,
    /// Effective scopes of the subscription (non-empty).
    pub effective: &'a ScopeMap,
    /// Pin and row cursor ([`bootstrap_start`]).
    pub start: BootstrapStart,
    /// True for a fresh bootstrap in the client's sense (§5.6): request
    /// `cursor < 0` and no token. Its first segment is never omitted.
    pub fresh: bool,
    /// Clamped §4.2 limits.
    pub limits: PullLimits,
}

/// A page built but not yet written.
struct Page {
    segment: Vec<u8>,
    rows: u64,
    /// Cursor after the page (last delivered row id, or the start cursor).
    cursor: Option<String>,
    /// True when no matching row exists after `cursor`.
    table_done: bool,
}

/// Writes the bootstrap pages of one subscription through `emit_segment`
/// (the caller decided with [`delivers_segments`] that this response serves
/// the section: at least one segment is written)
/// (called once per finished SSG2 segment; it writes the `SEGMENT_INLINE`
/// frame and returns the response's bytes written so far) and returns the
/// §4.7 outcome. `written` is the response size before the first page.
/// Errors: store failures (`syncular.internal`); a stored payload or version
/// the encoder refuses (`syncular.internal`: the stored state is corrupt).
pub fn run_bootstrap(
    req: &BootstrapRequest<'_>,
    budget: &mut Budget,
    mut written: usize,
    mut emit_segment: impl FnMut(&[u8]) -> EngineResult<usize>,
) -> EngineResult<BootstrapOutcome> {
    let mut cursor = req.start.row_cursor.clone();
    let mut segments = 0usize;
    let mut rows = 0u64;
    let mut deferred = false;
    let mut done = false;
    for page_no in 0..req.limits.max_snapshot_pages {
        if budget.exhausted(written, 0) {
            if page_no > 0 {
                deferred = true;
                break;
            }
            if req.fresh {
                // §5.6: the first-page clear happens only in the response to
                // the fresh request, so a fresh bootstrap deferred by the
                // budget still gets its first page — empty (a few header
                // bytes): the client clears, then resumes from the table
                // start with the token.
                emit_segment(&empty_segment(req)?)?;
                segments += 1;
                deferred = true;
                break;
            }
            // A resumed bootstrap the caller chose to serve (SUB_START said
            // `bootstrap = true`) gets a page of at least one row.
        }
        let page = build_page(req, cursor.as_deref(), budget, written)?;
        written = emit_segment(&page.segment)?;
        budget.note_delivered();
        segments += 1;
        rows += page.rows;
        cursor = page.cursor;
        if page.table_done {
            done = true;
            break;
        }
    }
    if deferred {
        budget.note_deferred();
    }
    let resume_token = if done { None } else { Some(resume_token(req, cursor)) };
    Ok(BootstrapOutcome { resume_token, segments, rows, deferred })
}

/// True when a bootstrap section delivers at least one segment in this
/// response — the value of `SUB_START.bootstrap` ("true iff this response
/// delivers bootstrap segments", §4.4): always for a fresh bootstrap (its
/// first segment is never omitted), otherwise unless the budget is already
/// spent (`written` = response bytes before the section).
pub fn delivers_segments(fresh: bool, budget: &Budget, written: usize) -> bool {
    fresh || !budget.exhausted(written, 0)
}

/// The §4.7 resume token (`SUB_END.bootstrapState`) at `row_cursor` of the
/// request's pin, canonical text.
pub fn resume_token(req: &BootstrapRequest<'_>, row_cursor: Option<String>) -> String {
    ResumeToken {
        as_of_commit_seq: req.start.as_of_commit_seq,
        tables: vec![req.table.name().to_owned()],
        table_index: 0,
        row_cursor,
    }
    .render()
}

fn segment_header(req: &BootstrapRequest<'_>) -> SegmentHeader {
    SegmentHeader {
        table: req.table.name().to_owned(),
        schema_version: req.schema_version,
        layout: req.table.layout().clone(),
    }
}

/// An SSG2 segment with no rows (header and end marker only).
fn empty_segment(req: &BootstrapRequest<'_>) -> EngineResult<Vec<u8>> {
    let internal = |e: &dyn std::fmt::Display| EngineError::internal(format!("empty rows segment: {e}"));
    let encoder = SegmentEncoder::new(Vec::new(), &segment_header(req)).map_err(|e| internal(&e))?;
    encoder.finish().map_err(|e| internal(&e))
}

/// Builds one page after `after` (exclusive): matching rows in row-id order
/// until `limitSnapshotRows` rows, the budget (≥ 1 row kept), or the end of
/// the table; a one-row lookahead proves the end.
fn build_page(
    req: &BootstrapRequest<'_>,
    after: Option<&str>,
    budget: &Budget,
    written: usize,
) -> EngineResult<Page> {
    let corrupt = |e: &dyn std::fmt::Display| {
        EngineError::internal(format!(
            "stored row of table {:?} cannot be encoded as a rows segment: {e}",
            req.table.name()
        ))
    };
    let mut encoder = SegmentEncoder::new(Vec::new(), &segment_header(req)).map_err(|e| corrupt(&e))?;
    let Some((variable, values)) = candidate_key(req.effective) else {
        // An active subscription always has a non-empty effective map (§3.2
        // rule 5); an empty one selects nothing.
        let segment = encoder.finish().map_err(|e| corrupt(&e))?;
        return Ok(Page { segment, rows: 0, cursor: after.map(str::to_owned), table_done: true });
    };
    let limit = u64::try_from(req.limits.limit_snapshot_rows).unwrap_or(1).max(1);
    let mut delivered_cursor: Option<String> = after.map(str::to_owned);
    let mut scan_cursor: Option<String> = after.map(str::to_owned);
    let mut pending_bytes = 0usize;
    let mut table_done = false;
    'scan: loop {
        let remaining = limit - encoder.rows() + 1;
        let batch = i64::try_from(remaining).unwrap_or(PAGE_BATCH).clamp(1, PAGE_BATCH);
        let candidates = read_bootstrap_page(&PageQuery {
            partition: req.partition,
            app_table: &req.table.qualified_name,
            table: req.table.name(),
            variable,
            values,
            after_row_id: scan_cursor.as_deref(),
            candidate_limit: batch,
        })?;
        let exhausted = (candidates.len() as i64) < batch;
        for candidate in candidates {
            scan_cursor = Some(candidate.row_id.clone());
            let Some(data) = candidate.data else { continue };
            if !stored_scopes_match(&data.scopes_json, req.effective)? {
                continue;
            }
            // A matching row exists beyond the page: the page is full.
            if encoder.rows() >= limit
                || (encoder.rows() >= 1 && budget.page_full(written, pending_bytes))
            {
                break 'scan;
            }
            encoder
                .push_payload_trusted(data.server_version, &data.payload)
                .map_err(|e| corrupt(&e))?;
            pending_bytes += 8 + data.payload.len();
            delivered_cursor = Some(candidate.row_id);
        }
        if exhausted {
            table_done = true;
            break;
        }
    }
    let rows = encoder.rows();
    let segment = encoder.finish().map_err(|e| corrupt(&e))?;
    Ok(Page { segment, rows, cursor: delivered_cursor, table_done })
}

/// `sync.invalid_request` for a bootstrap the client cannot receive: rows
/// segments are only delivered inline until stored segments (`SEGMENT_REF`)
/// exist, so `accept` must carry bit 0.
pub fn inline_rows_required(subscription_id: &str) -> EngineError {
    EngineError::protocol(
        ErrorCode::InvalidRequest,
        format!(
            "subscription {subscription_id:?} needs a bootstrap, but PULL_HEADER.accept lacks bit 0 \
             (inline rows segments, SEGMENT_INLINE); this server does not deliver external rows \
             segments (SEGMENT_REF) yet, so accept must include bit 0 (§4.2, §5.7)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(as_of: i64, tables: &[&str], index: usize, cursor: Option<&str>) -> String {
        ResumeToken {
            as_of_commit_seq: as_of,
            tables: tables.iter().map(|t| t.to_string()).collect(),
            table_index: index,
            row_cursor: cursor.map(str::to_owned),
        }
        .render()
    }

    #[test]
    fn a_usable_token_keeps_its_pin_and_cursor() {
        let t = token(7, &["tasks"], 0, Some("r9"));
        let s = bootstrap_start(Some(&t), "tasks", 10, 5);
        assert_eq!(s, BootstrapStart { as_of_commit_seq: 7, row_cursor: Some("r9".into()), resumed: true });
        // Pin exactly at the horizon or at maxCommitSeq is still usable.
        assert!(bootstrap_start(Some(&token(5, &["tasks"], 0, None)), "tasks", 10, 5).resumed);
        assert!(bootstrap_start(Some(&token(10, &["tasks"], 0, None)), "tasks", 10, 5).resumed);
    }

    #[test]
    fn unusable_tokens_restart_at_a_fresh_pin() {
        let fresh = BootstrapStart { as_of_commit_seq: 10, row_cursor: None, resumed: false };
        for bad in [
            "not json".to_string(),
            "{}".to_string(),
            token(4, &["tasks"], 0, Some("r1")),          // pin behind the horizon
            token(11, &["tasks"], 0, Some("r1")),         // pin from the future
            token(7, &["notes"], 0, Some("r1")),          // other table
            token(7, &["tasks", "notes"], 0, Some("r1")), // other table list
            token(7, &["notes", "tasks"], 1, Some("r1")), // other table list
            token(7, &["tasks"], 0, Some("r\u{0}1")),    // cursor Postgres cannot hold
        ] {
            assert_eq!(bootstrap_start(Some(&bad), "tasks", 10, 5), fresh, "{bad}");
        }
        assert_eq!(bootstrap_start(None, "tasks", 10, 5), fresh);
    }

    #[test]
    fn fresh_bootstraps_always_deliver_a_segment() {
        let mut b = Budget::new(100);
        assert!(delivers_segments(false, &b, 1000), "nothing delivered yet: never deferred");
        b.note_delivered();
        assert!(!delivers_segments(false, &b, 1000));
        assert!(delivers_segments(true, &b, 1000));
        assert!(delivers_segments(false, &b, 10));
    }
}
