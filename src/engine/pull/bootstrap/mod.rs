//! Bootstrap (SPEC §4.7, §5.1, §5.2, §5.4, §5.7): the pinned, paged,
//! resumable snapshot of one subscription's table, delivered as rows
//! segments — inline (`SEGMENT_INLINE`) or stored and referenced
//! (`SEGMENT_REF`) according to the client's `accept` bits.
//!
//! - Pin: `asOfCommitSeq = maxCommitSeq` on start; a usable resume token keeps
//!   its pin and row cursor. A token that does not parse, names other tables,
//!   has an out-of-range `tableIndex`, or whose pin is behind the pruning
//!   horizon or ahead of `maxCommitSeq` silently restarts with a fresh pin —
//!   never a request error.
//! - Pages: up to `maxSnapshotPages` pages of up to `limitSnapshotRows` rows,
//!   keyset-paged by row id through `sync_row_scopes`
//!   ([`crate::store::pull::bootstrap_page`]); each page is one SSG2 segment built
//!   with the protocol crate's streaming encoder from the stored verbatim
//!   payloads and `_sync_version`s. Completion is proven by a one-row
//!   lookahead, so a finished table never costs an extra empty round.
//! - Delivery ([`Delivery`], §4.2): bit 0 only → every page inline, its rows
//!   bounded by the response budget (below); bit 1 only → every page stored
//!   ([`crate::engine::segments`]) and sent as a `SEGMENT_REF`; both → a page
//!   of at most `syncular.segment_inline_max_bytes` (default 256 KiB) that
//!   also fits the remaining budget goes inline, any other as a
//!   `SEGMENT_REF`. In the last two modes every page is a full window
//!   (`limitSnapshotRows` rows, or fewer at the table end) bounded by
//!   [`crate::settings::SEGMENT_PAGE_MAX_BYTES`] (16 MiB, ≥ 1 row) instead of
//!   the budget, and is stored and published — inline ones too, so the
//!   next identical bootstrap reuses them.
//! - Reuse (§5.1): before building a stored-mode page, the publication of
//!   its context — (partition, live log epoch, table, schema version, rows,
//!   the caller's scope digest, pin, page window = start cursor + clamped
//!   `limitSnapshotRows`) — is looked up; an unexpired one is served without
//!   rebuilding: inline (its stored bytes) when the client takes both and it
//!   is small enough and fits the budget — the delivery choice depends on
//!   the size only, never on whether the page was reused — else as a
//!   `SEGMENT_REF`. Two simultaneous first builds both build; the bytes are
//!   stored once, and when their bytes differ (rows changed between them at
//!   the same pin) the second serves the first one's publication.
//! - Images (§5.3, `accept` bit 2): at the start of a table the whole table
//!   may go as one sqlite image instead of pages
//!   ([`image`]); a bootstrap resumed
//!   mid-table stays on rows.
//! - `SEGMENT_REF` (§5.4) carries the caller's scope digest, the page's
//!   cursors (`rowCursor` absent on a table-start page) and, for a client
//!   that advertised bit 3 when `syncular.segment_url_base` is set, a signed
//!   `url` ([`stored::attach_signed_url`], the one place they are attached).
//! - Snapshot semantics: pages read current rows (see the store module's
//!   note); every change after the pin is replayed by the incremental pull
//!   that follows, so the client converges — a reused page built earlier at
//!   the same pin is as valid as a fresh one.
//! - Budget ([`crate::engine::budget`]): no new page starts past it (inline pages,
//!   descriptors alike); an inline-only page stops adding rows once the
//!   response plus the page reaches it (keeping at least one row). A fresh
//!   bootstrap deferred before its first page still gets a first segment so
//!   the §5.6 first-page clear happens: an empty inline one for an
//!   inline-only client, else its real first page (as a descriptor when it
//!   does not fit).

//!
//! Files: [`stored`] (a page served from, or into, its publication; signed
//! URLs), [`page`] (building one rows segment from the page reader) and
//! [`image`] (the sqlite image lane).


use syncular_protocol::constants::{ACCEPT_EXTERNAL_ROWS, ACCEPT_INLINE_ROWS};
use syncular_protocol::response::SegmentRef;
use syncular_protocol::resume_token::ResumeToken;
use syncular_protocol::scope_digest::scope_digest;
use syncular_protocol::scopes::ScopeMap;

use crate::engine::budget::Budget;
use crate::engine::error::EngineResult;
use crate::engine::pull::limits::PullLimits;
use crate::engine::schema::RegisteredTable;

pub mod image;
mod page;
mod stored;

use image::serve_image;
use page::{build_page, empty_segment};
use stored::serve_stored;

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
    /// The partition's live `logEpoch` (§2.1): publications are per epoch.
    pub log_epoch: &'a str,
    /// "Now" of the request, Unix ms (publication expiry and lookups).
    pub now_ms: i64,
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

/// How rows segments travel to this client (§4.2, §5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// `accept` bit 0 only: every page inline (`SEGMENT_INLINE`), its rows
    /// bounded by the response budget; nothing stored.
    Inline,
    /// Bit 1 only: every page stored and sent as a `SEGMENT_REF`.
    External,
    /// Bits 0 and 1: a page of at most `inline_max` bytes that fits the
    /// budget goes inline, any other as a `SEGMENT_REF`; every page stored.
    Mixed {
        /// `syncular.segment_inline_max_bytes`.
        inline_max: usize,
    },
}

impl Delivery {
    /// The delivery for `accept` (which carries bit 0 or bit 1: validated
    /// before the pull) with inline threshold `inline_max` bytes.
    pub fn for_accept(accept: u8, inline_max: usize) -> Delivery {
        match (accept & ACCEPT_INLINE_ROWS != 0, accept & ACCEPT_EXTERNAL_ROWS != 0) {
            (true, true) => Delivery::Mixed { inline_max },
            (false, true) => Delivery::External,
            _ => Delivery::Inline,
        }
    }

    /// True when `len` bytes go inline given the budget state.
    fn inlines(self, len: usize, budget: &Budget, written: usize) -> bool {
        match self {
            Delivery::Inline => true,
            Delivery::External => false,
            Delivery::Mixed { inline_max } => len <= inline_max && !budget.page_full(written, len),
        }
    }
}

/// One segment handed to the response writer.
#[derive(Debug, Clone, Copy)]
pub enum Emit<'a> {
    /// A complete SSG2 rows segment for a `SEGMENT_INLINE` frame.
    Inline(&'a [u8]),
    /// A `SEGMENT_REF` descriptor.
    Ref(&'a SegmentRef),
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

/// What one delivered page moved.
struct Served {
    rows: u64,
    /// Where the next page starts.
    cursor: Option<String>,
    /// The table is exhausted.
    done: bool,
}


/// The bootstrap pages of one subscription, written one segment per
/// [`BootstrapRun::step`] (§1.4 streaming: a streamed pull holds one page at
/// a time) — the table's image, or one page. The caller decided with
/// [`delivers_segments`] that this response serves the section, so at least
/// one segment is written. `emit` writes the `SEGMENT_INLINE` or
/// `SEGMENT_REF` frame and returns the response's bytes written so far.
#[derive(Debug)]
pub struct BootstrapRun {
    delivery: Delivery,
    digest: String,
    cursor: Option<String>,
    pages: i32,
    segments: usize,
    rows: u64,
    deferred: bool,
    done: bool,
    finished: bool,
}

impl BootstrapRun {
    /// A section at `req.start` with nothing written yet.
    pub fn new(req: &BootstrapRequest<'_>) -> Self {
        BootstrapRun {
            delivery: Delivery::for_accept(req.limits.accept, crate::settings::segment_inline_max_bytes()),
            digest: scope_digest(req.effective.iter()),
            cursor: req.start.row_cursor.clone(),
            pages: 0,
            segments: 0,
            rows: 0,
            deferred: false,
            done: false,
            finished: false,
        }
    }

    /// Writes the section's next segment through `emit` (`written` = the
    /// response's bytes so far); `false` once the section has nothing more
    /// to write (possibly after writing one now): then [`Self::outcome`].
    /// Errors: store failures (`syncular.internal`); a stored payload or
    /// version the encoder refuses (`syncular.internal`: the stored state is
    /// corrupt).
    pub fn step(
        &mut self,
        req: &BootstrapRequest<'_>,
        budget: &mut Budget,
        written: usize,
        emit: &mut dyn FnMut(Emit<'_>) -> EngineResult<usize>,
    ) -> EngineResult<bool> {
        if self.finished {
            return Ok(false);
        }
        // §5.3: at the start of the table, a client taking images may get the
        // whole table as one (it counts as one page; no resume token follows).
        if self.pages == 0 && self.segments == 0 {
            if let Some(image) = serve_image(req, &self.digest, &mut |e| emit(e))? {
                budget.note_delivered();
                self.segments = 1;
                self.rows = image.rows;
                self.done = true;
                return Ok(self.finish(budget));
            }
        }
        if self.pages >= req.limits.max_snapshot_pages {
            return Ok(self.finish(budget));
        }
        if budget.exhausted(written, 0) {
            if self.pages > 0 {
                self.deferred = true;
                return Ok(self.finish(budget));
            }
            if req.fresh && self.delivery == Delivery::Inline {
                // §5.6: the first-page clear happens only in the response to
                // the fresh request, so a fresh bootstrap deferred by the
                // budget still gets its first page — empty (a few header
                // bytes): the client clears, then resumes from the table
                // start with the token. (A client that takes references
                // gets its real first page instead: a descriptor is small.)
                emit(Emit::Inline(&empty_segment(req)?))?;
                self.segments += 1;
                self.deferred = true;
                return Ok(self.finish(budget));
            }
            // A resumed bootstrap the caller chose to serve (SUB_START said
            // `bootstrap = true`) gets a page of at least one row.
        }
        let mut after = written;
        let mut emit = |e: Emit<'_>| {
            after = emit(e)?;
            Ok(after)
        };
        let served = if self.delivery == Delivery::Inline {
            let page = build_page(req, self.cursor.as_deref(), |pending| budget.page_full(written, pending))?;
            emit(Emit::Inline(&page.segment))?;
            Served { rows: page.rows, cursor: page.cursor, done: page.table_done }
        } else {
            serve_stored(req, &self.digest, self.delivery, self.cursor.as_deref(), budget, written, &mut emit)?
        };
        budget.note_delivered();
        self.pages += 1;
        self.segments += 1;
        self.rows += served.rows;
        self.cursor = served.cursor;
        if served.done {
            self.done = true;
            return Ok(self.finish(budget));
        }
        if self.pages >= req.limits.max_snapshot_pages {
            // The last page this response takes: close the section with it.
            return Ok(self.finish(budget));
        }
        if budget.exhausted(after, 0) {
            // No further page starts past the budget: deferred, closed now.
            self.deferred = true;
            return Ok(self.finish(budget));
        }
        Ok(true)
    }

    fn finish(&mut self, budget: &mut Budget) -> bool {
        if self.deferred {
            budget.note_deferred();
        }
        self.finished = true;
        false
    }

    /// The §4.7 outcome of the section so far (complete once
    /// [`Self::step`] returned `false`).
    pub fn outcome(&self, req: &BootstrapRequest<'_>) -> BootstrapOutcome {
        let resume_token = if self.done { None } else { Some(resume_token(req, self.cursor.clone())) };
        BootstrapOutcome { resume_token, segments: self.segments, rows: self.rows, deferred: self.deferred }
    }
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
