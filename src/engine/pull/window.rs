//! The incremental window of one subscription (SPEC §4.5): commits with
//! `cursor < commitSeq ≤ maxCommitSeq` that carry changes of the table whose
//! stored scopes match the effective scopes, oldest first, cut at
//! `limitCommits` changes without ever splitting a commit, read through the
//! `sync_change_scopes` inverted index ([`crate::store::pull::window`]).
//!
//! A page is: the next candidate commits (up to the changes still wanted
//! plus one, so a page usually covers the whole response), their
//! `sync_commits` metadata, and their changes of the table — at most the
//! changes still wanted plus one rows; when that cut lands inside a commit,
//! the page ends before it and the next page starts at it (a commit larger
//! than the whole limit is read alone, in full, when it goes first).
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
use crate::store::pull::window::{
    read_commit_metas, read_window_candidates, read_window_changes, CandidateQuery, CommitMeta,
    SeqRuns, WindowChange as StoredChange,
};

/// Most candidate commits read per page: one more than the largest
/// `limitCommits` (§4.2), so one page proves exhaustion of a full window.
const WINDOW_BATCH_MAX: i64 = 1001;

/// One commit to deliver: its §4.5 `COMMIT` frame with a one-table
/// dictionary (`tableIndex` 0 for every change), holding the changes of the
/// subscription's table that match the effective scopes, in `idx` order.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowCommit {
    frame: Commit,
}

impl WindowCommit {
    /// The commit's `commitSeq`.
    pub fn commit_seq(&self) -> i64 {
        self.frame.commit_seq
    }

    /// Its matching changes.
    pub fn changes(&self) -> &[Change] {
        &self.frame.changes
    }

    /// The `COMMIT` frame to write.
    pub fn frame(&self) -> &Commit {
        &self.frame
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
        let remaining = limit.saturating_sub(out.changes);
        let wanted = remaining as i64 + 1;
        let batch = wanted.clamp(16, WINDOW_BATCH_MAX);
        let candidates = read_window_candidates(&CandidateQuery {
            partition: req.partition,
            table: req.table,
            variable,
            values,
            after_seq: after,
            through_seq: req.max_commit_seq,
            limit: batch,
        })?;
        let (Some(&first), Some(&last)) = (candidates.first(), candidates.last()) else { break };
        let runs = SeqRuns::of(&candidates);
        let metas = read_commit_metas(req.partition, &runs)?;
        let mut changes = read_window_changes(req.partition, req.table, &runs, Some(wanted))?;
        // Commits of this page whose changes are all in `changes`.
        let mut complete_through = last;
        if changes.len() as i64 >= wanted {
            let cut = changes.last().map(|c| c.commit_seq).unwrap_or(first);
            if cut > first {
                // The row limit cut a later commit: this page ends before it.
                let keep = changes.partition_point(|c| c.commit_seq < cut);
                changes.truncate(keep);
                complete_through = cut - 1;
            } else if out.changes > 0 && matching_changes(&changes, req.effective)? > remaining {
                // The first commit alone has more matching changes than may
                // still be delivered: the window is cut before it.
                truncated = true;
                break 'scan;
            } else {
                // The first commit is larger than the row limit: read it
                // whole (it goes alone when nothing was delivered yet).
                changes = read_window_changes(req.partition, req.table, &SeqRuns::of(&[first]), None)?;
                complete_through = first;
            }
        }
        let page = candidates.iter().copied().take_while(|&seq| seq <= complete_through);
        for (seq, commit) in fold_commits(page, metas, changes, req.table, req.effective)? {
            let Some(commit) = commit else { continue };
            // Commits are never split: stop before a commit that would pass
            // the limit, unless nothing was delivered yet (then it goes alone).
            if out.changes > 0 && out.changes + commit.changes().len() > limit {
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
            out.changes += commit.changes().len();
            last_delivered = seq;
        }
        // Every candidate up to `complete_through` was handled (delivered,
        // or without a matching change): the next page starts after it.
        after = complete_through;
        if (candidates.len() as i64) < batch && complete_through == last {
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

/// How many of `changes` match the effective scopes.
fn matching_changes(changes: &[StoredChange], effective: &ScopeMap) -> EngineResult<usize> {
    let mut scopes = ScopeCache::default();
    let mut n = 0;
    for change in changes {
        if scopes.parse(&change.scopes_json, effective)?.1 {
            n += 1;
        }
    }
    Ok(n)
}

/// Parsed stored scopes of the last change seen: consecutive changes
/// usually carry the same scopes (one row's commits, one workspace's
/// writes), so each distinct JSON text is parsed and matched once.
#[derive(Default)]
struct ScopeCache {
    json: String,
    parsed: StoredScopes,
    matches: bool,
}

impl ScopeCache {
    /// `(stored scopes, whether they match effective)` of `json`.
    fn parse(&mut self, json: &str, effective: &ScopeMap) -> EngineResult<(&StoredScopes, bool)> {
        if self.json.is_empty() || self.json != json {
            self.parsed = parse_stored_scopes(json)?;
            self.matches = matches(&self.parsed, effective);
            json.clone_into(&mut self.json);
        }
        Ok((&self.parsed, self.matches))
    }
}

/// Folds one page into one entry per candidate commit, ascending: `None`
/// when it has no metadata (vanished) or no change matching the effective
/// scopes, else the commit with its matching changes in `idx` order.
/// `metas` and `changes` are ascending by `commit_seq` (changes by
/// `(commit_seq, idx)`); rows of other commits are ignored.
fn fold_commits(
    candidates: impl Iterator<Item = i64>,
    metas: Vec<CommitMeta>,
    changes: Vec<StoredChange>,
    table: &str,
    effective: &ScopeMap,
) -> EngineResult<Vec<(i64, Option<WindowCommit>)>> {
    let mut metas = metas.into_iter().peekable();
    let mut changes = changes.into_iter().peekable();
    let mut scopes = ScopeCache::default();
    let mut out = Vec::new();
    for seq in candidates {
        while metas.next_if(|m| m.commit_seq < seq).is_some() {}
        let meta = metas.next_if(|m| m.commit_seq == seq);
        while changes.next_if(|c| c.commit_seq < seq).is_some() {}
        let mut frame = meta.map(|m| Commit {
            commit_seq: seq,
            created_at_ms: m.created_at_ms,
            actor_id: m.actor_id,
            tables: vec![table.to_owned()],
            changes: Vec::new(),
        });
        while let Some(change) = changes.next_if(|c| c.commit_seq == seq) {
            let Some(frame) = frame.as_mut() else { continue };
            let (stored, matching) = scopes.parse(&change.scopes_json, effective)?;
            if !matching {
                continue;
            }
            let op = match change.op {
                1 => Op::Upsert,
                2 => Op::Delete,
                other => {
                    return Err(EngineError::internal(format!(
                        "sync_changes op {other} at commit {seq} is neither 1 (upsert) nor 2 (delete)"
                    )))
                }
            };
            let (row_version, row) = match op {
                Op::Upsert => (change.row_version, change.payload),
                Op::Delete => (None, None),
            };
            frame.changes.push(Change {
                table_index: 0,
                row_id: change.row_id,
                op,
                row_version,
                scopes: stored.clone(),
                row,
            });
        }
        let commit = frame.filter(|f| !f.changes.is_empty()).map(|frame| WindowCommit { frame });
        out.push((seq, commit));
    }
    Ok(out)
}
