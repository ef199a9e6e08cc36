//! One bootstrap rows page (SPEC §4.7, §5.2): matching rows of the page
//! reader ([`crate::store::pull::bootstrap_page`]) encoded as one SSG2 rows
//! segment, cut at the page's row limit or byte budget.

use syncular_protocol::segment::{SegmentEncoder, SegmentHeader};

use super::{BootstrapRequest, Page, PAGE_BATCH};
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::scope_match::{candidate_key, ScopeMatcher};
use crate::store::pull::bootstrap_page::{PageQuery, PageReader};

fn segment_header(req: &BootstrapRequest<'_>) -> SegmentHeader {
    SegmentHeader {
        table: req.table.name().to_owned(),
        schema_version: req.schema_version,
        layout: req.table.layout().clone(),
    }
}

/// An SSG2 segment with no rows (header and end marker only).
pub(super) fn empty_segment(req: &BootstrapRequest<'_>) -> EngineResult<Vec<u8>> {
    let internal = |e: &dyn std::fmt::Display| EngineError::internal(format!("empty rows segment: {e}"));
    let encoder = SegmentEncoder::new(Vec::new(), &segment_header(req)).map_err(|e| internal(&e))?;
    encoder.finish().map_err(|e| internal(&e))
}

/// Builds one page after `after` (exclusive): matching rows in row-id order
/// until `limitSnapshotRows` rows, `full(pending bytes)` says stop (≥ 1 row
/// kept), or the end of the table; a one-row lookahead proves the end.
pub(super) fn build_page(req: &BootstrapRequest<'_>, after: Option<&str>, full: impl Fn(usize) -> bool) -> EngineResult<Page> {
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
    let mut reader = PageReader::new();
    let mut scopes = ScopeMatcher::default();
    'scan: loop {
        let remaining = limit - encoder.rows() + 1;
        let batch = i64::try_from(remaining).unwrap_or(PAGE_BATCH).clamp(1, PAGE_BATCH);
        let candidates = reader.read(&PageQuery {
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
            if !scopes.matches(&data.scopes_json, req.effective)? {
                continue;
            }
            // A matching row exists beyond the page: the page is full.
            if encoder.rows() >= limit || (encoder.rows() >= 1 && full(pending_bytes)) {
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
