//! The incremental window of one subscription (SPEC §4.5): commits with
//! `cursor < commitSeq ≤ maxCommitSeq` that carry changes of the table whose
//! stored scopes match the effective scopes, oldest first, cut at
//! `limitCommits` changes without ever splitting a commit, read through the
//! `sync_change_scopes` inverted index ([`crate::store::pull_window`]).
//!
//! `nextCursor` (§4.5): `max(cursor, maxCommitSeq)` when the window was
//! exhausted (the cursor advances over quiet stretches); otherwise — the
//! change limit or the byte budget cut it — `max(cursor, last delivered
//! commitSeq)`. Exhaustion is proven by scanning on to the next matching
//! commit, so a window that ends exactly at the limit still advances to
//! `maxCommitSeq`.

use syncular_protocol::frame_fields::{Op, StoredScopes};
use syncular_protocol::response::{Change, Commit};
use syncular_protocol::scopes::ScopeMap;

use crate::engine::budget::Budget;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::scope_match::{candidate_key, matches, parse_stored_scopes};
use crate::store::pull_window::{read_window_page, WindowPageQuery, WindowRow};

/// Candidate commits read per store call (bounds SPI memory; a window page
/// holds at most this many commits' changes for the table).
const WINDOW_BATCH_MAX: i64 = 256;

/// One change of a delivered commit (§4.5 change record; `tableIndex` is
/// always 0: a subscription's commit frames name only its table).
#[derive(Debug, Clone, PartialEq)]
pub struct WindowChange {
    /// Primary key of the row.
    pub row_id: String,
    /// Upsert or delete.
    pub op: Op,
    /// Present for upserts.
    pub row_version: Option<i64>,
    /// Stored scopes (§3.1), canonical key order.
    pub scopes: StoredScopes,
    /// Present for upserts: the verbatim row-codec payload.
    pub row: Option<Vec<u8>>,
}

/// One commit to deliver as a `COMMIT` frame.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowCommit {
    /// The commit's `commitSeq`.
    pub commit_seq: i64,
    /// Server commit time (ms since the Unix epoch).
    pub created_at_ms: i64,
    /// The pushing actor.
    pub actor_id: String,
    /// Its changes of the subscription's table that match the effective scopes, in `idx` order.
    pub changes: Vec<WindowChange>,
}

impl WindowCommit {
    /// The §4.5 `COMMIT` frame of this commit: a one-table dictionary
    /// (`tableIndex` 0 for every change).
    pub fn frame(&self, table: &str) -> Commit {
        Commit {
            commit_seq: self.commit_seq,
            created_at_ms: self.created_at_ms,
            actor_id: self.actor_id.clone(),
            tables: vec![table.to_owned()],
            changes: self
                .changes
                .iter()
                .map(|c| Change {
                    table_index: 0,
                    row_id: c.row_id.clone(),
                    op: c.op,
                    row_version: c.row_version,
                    scopes: c.scopes.clone(),
                    row: c.row.clone(),
                })
                .collect(),
        }
    }
}

/// What one incremental section delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowOutcome {
    /// `SUB_END.nextCursor`.
    pub next_cursor: i64,
    /// Commit frames written.
    pub commits: usize,
    /// Changes written across them.
    pub changes: usize,
    /// True when the byte budget (not the change limit) cut the window.
    pub deferred: bool,
}

/// Parameters of one incremental section.
pub struct WindowRequest<'a> {
    /// Host partition of the request.
    pub partition: &'a str,
    /// The subscription's table.
    pub table: &'a str,
    /// Effective scopes of the subscription (non-empty).
    pub effective: &'a ScopeMap,
    /// The request cursor (`0 ≤ cursor ≤ max_commit_seq`).
    pub cursor: i64,
    /// `maxCommitSeq` read for this pull (inclusive window end).
    pub max_commit_seq: i64,
    /// Clamped `limitCommits` (changes).
    pub limit_changes: i32,
}

/// Streams the window through `emit_commit` (writes one `COMMIT` frame and
/// returns the response's bytes written so far). `written` is the response
/// size before the section. Errors: store failures and corrupt stored
/// scopes/ops (`syncular.internal`), and whatever `emit_commit` returns.
pub fn run_window(
    req: &WindowRequest<'_>,
    budget: &mut Budget,
    mut written: usize,
    mut emit_commit: impl FnMut(&WindowCommit) -> EngineResult<usize>,
) -> EngineResult<WindowOutcome> {
    let mut out = WindowOutcome { next_cursor: req.cursor, commits: 0, changes: 0, deferred: false };
    let Some((variable, values)) = candidate_key(req.effective) else {
        out.next_cursor = req.cursor.max(req.max_commit_seq);
        return Ok(out);
    };
    let limit = usize::try_from(req.limit_changes).unwrap_or(1).max(1);
    let mut last_delivered = req.cursor;
    let mut after = req.cursor;
    let mut truncated = false;
    'scan: loop {
        let wanted = limit.saturating_sub(out.changes) as i64 + 1;
        let batch = wanted.clamp(16, WINDOW_BATCH_MAX);
        let rows = read_window_page(&WindowPageQuery {
            partition: req.partition,
            table: req.table,
            variable,
            values,
            after_seq: after,
            through_seq: req.max_commit_seq,
            candidate_limit: batch,
        })?;
        let groups = group_commits(rows, req.effective)?;
        let exhausted = (groups.len() as i64) < batch;
        for (seq, commit) in groups {
            after = seq;
            let Some(commit) = commit else { continue };
            // Commits are never split: stop before a commit that would pass
            // the limit, unless nothing was delivered yet (then it goes alone).
            if out.changes > 0 && out.changes + commit.changes.len() > limit {
                truncated = true;
                break 'scan;
            }
            if budget.exhausted(written, 0) {
                truncated = true;
                out.deferred = true;
                break 'scan;
            }
            written = emit_commit(&commit)?;
            budget.note_delivered();
            out.commits += 1;
            out.changes += commit.changes.len();
            last_delivered = seq;
        }
        if exhausted {
            break;
        }
    }
    if out.deferred {
        budget.note_deferred();
    }
    out.next_cursor = if truncated {
        req.cursor.max(last_delivered)
    } else {
        req.cursor.max(req.max_commit_seq)
    };
    Ok(out)
}

/// Folds page rows (ordered by `commit_seq`, `idx`) into one entry per
/// candidate commit: `None` when it has no metadata (vanished) or no change
/// matching the effective scopes, else the commit with its matching changes.
fn group_commits(
    rows: Vec<WindowRow>,
    effective: &ScopeMap,
) -> EngineResult<Vec<(i64, Option<WindowCommit>)>> {
    let mut out: Vec<(i64, Option<WindowCommit>)> = Vec::new();
    for row in rows {
        let start_new = out.last().map(|(seq, _)| *seq != row.commit_seq).unwrap_or(true);
        if start_new {
            let commit = row.meta.as_ref().map(|m| WindowCommit {
                commit_seq: row.commit_seq,
                created_at_ms: m.created_at_ms,
                actor_id: m.actor_id.clone(),
                changes: Vec::new(),
            });
            out.push((row.commit_seq, commit));
        }
        let Some((_, Some(commit))) = out.last_mut() else { continue };
        let Some(change) = row.change else { continue };
        let scopes = parse_stored_scopes(&change.scopes_json)?;
        if !matches(&scopes, effective) {
            continue;
        }
        let op = match change.op {
            1 => Op::Upsert,
            2 => Op::Delete,
            other => {
                return Err(EngineError::internal(format!(
                    "sync_changes op {other} at commit {} is neither 1 (upsert) nor 2 (delete)",
                    row.commit_seq
                )))
            }
        };
        let (row_version, payload) = match op {
            Op::Upsert => (change.row_version, change.payload),
            Op::Delete => (None, None),
        };
        commit.changes.push(WindowChange {
            row_id: change.row_id,
            op,
            row_version,
            scopes,
            row: payload,
        });
    }
    for entry in out.iter_mut() {
        if entry.1.as_ref().is_some_and(|c| c.changes.is_empty()) {
            entry.1 = None;
        }
    }
    Ok(out)
}
