//! A push request's log (and `syncular.commit`'s), staged commit by commit
//! while the request runs, then written in one go ([`write_request`]).

use std::collections::{BTreeMap, BTreeSet};

use syncular_protocol::frame_fields::Op;

use crate::engine::error::{EngineError, EngineResult};
use crate::engine::notify;
use crate::store::log::{request, LogAuthor, LogChange, RequestLog};
use crate::store::partitions;

/// A change staged by an applied operation (§2.2), written to the log once
/// the commit's `commitSeq` is allocated.
#[derive(Debug, Clone)]
pub struct StagedChange {
    /// IR table name (`tbl`).
    pub table: String,
    /// The row's `rowId` (rendered primary key).
    pub row_id: String,
    /// Upsert or delete.
    pub op: Op,
    /// `server_version` after the write (upserts).
    pub row_version: Option<i64>,
    /// Stored scopes (variable → value) of the row (delete: before removal).
    pub scopes: BTreeMap<String, String>,
    /// Row-codec payload after the write (upserts).
    pub payload: Option<Vec<u8>>,
    /// True for an upsert that inserted a row absent before: its tombstone,
    /// if any, is cleared and, unless a later change of the request deletes
    /// it, its `scopes` become its `sync_row_scopes` entries when the log is
    /// written.
    pub inserted: bool,
}

/// Stored scopes as JSON text `{"variable":"value",…}` (sorted keys): a
/// change's `scopes`, a row's `_sync_scopes`.
pub fn scopes_json(scopes: &BTreeMap<String, String>) -> String {
    serde_json::to_string(scopes).unwrap_or_else(|_| "{}".to_owned())
}

/// The request's log, staged commit by commit.
#[derive(Default)]
pub struct RequestLogBuilder {
    log: RequestLog,
    /// The fate of every row the request's applied commits changed.
    rows: BTreeMap<(String, String), RowFate>,
}

/// What the request's changes leave of a row's tombstone and scope entries.
#[derive(Debug, Clone)]
struct RowFate {
    /// Position of the commit of the row's last change.
    last_commit: i32,
    /// The last change deletes the row.
    deleted: bool,
    /// Some change of the request inserted the row (absent before it).
    inserted: bool,
    /// The stored scopes of the row's last change (an insert's stay through
    /// its updates: scope columns are immutable on update, §3.4).
    scopes: BTreeMap<String, String>,
}

impl RequestLogBuilder {
    /// Stages an applied commit's header, changes, scope index and outcome
    /// (`outcome`: its stored record as JSON, whose `commitSeq` the log
    /// statement sets); returns its position (1-based) among the request's
    /// applied commits.
    pub fn applied(&mut self, client_commit_id: &str, staged: &[StagedChange], outcome: String) -> EngineResult<i32> {
        self.log.applied.push(client_commit_id.to_owned());
        let position = i32::try_from(self.log.applied.len()).map_err(|_| EngineError::internal("commit position overflow"))?;
        let mut scope_entries: BTreeSet<(i32, String, String, String)> = BTreeSet::new();
        for (idx, change) in staged.iter().enumerate() {
            self.log.changes.push(LogChange {
                commit: position,
                idx: i32::try_from(idx).map_err(|_| EngineError::internal("change index overflow"))?,
                table: change.table.clone(),
                row_id: change.row_id.clone(),
                op: i16::from(change.op.byte()),
                row_version: change.row_version,
                scopes_json: scopes_json(&change.scopes),
                payload: change.payload.clone(),
            });
            for (var, value) in &change.scopes {
                scope_entries.insert((position, change.table.clone(), var.clone(), value.clone()));
            }
            let fate = self
                .rows
                .entry((change.table.clone(), change.row_id.clone()))
                .or_insert_with(|| RowFate { last_commit: position, deleted: false, inserted: false, scopes: BTreeMap::new() });
            fate.last_commit = position;
            fate.deleted = change.op == Op::Delete;
            fate.inserted |= change.inserted;
            fate.scopes.clone_from(&change.scopes);
        }
        self.log.change_scopes.extend(scope_entries);
        self.log.outcomes.push((client_commit_id.to_owned(), position, outcome));
        Ok(position)
    }

    /// The complete log. Tombstones and row-scope entries follow each row's
    /// final state in the request: deleted → the tombstone points at the
    /// deleting commit (the entries of a row that existed before were removed
    /// with it; an entry of a row inserted by the request was never written);
    /// (re-)inserted → the tombstone goes and the row's entries are written.
    fn finish(&mut self) -> &RequestLog {
        self.log.tombstones.clear();
        self.log.cleared_tombstones.clear();
        self.log.row_scopes.clear();
        for ((table, row_id), fate) in &self.rows {
            if fate.deleted {
                self.log.tombstones.push((fate.last_commit, table.clone(), row_id.clone()));
            } else if fate.inserted {
                self.log.cleared_tombstones.push((table.clone(), row_id.clone()));
                for (var, value) in &fate.scopes {
                    self.log.row_scopes.push((table.clone(), var.clone(), value.clone(), row_id.clone()));
                }
            }
        }
        &self.log
    }

    /// Stages a rejected commit's outcome (no `commitSeq`).
    pub fn rejected(&mut self, client_commit_id: &str, outcome: String) {
        self.log.outcomes.push((client_commit_id.to_owned(), 0, outcome));
    }

    /// `(table, row_id) → deleted` for every row the request's applied
    /// commits changed so far (the push's tombstone rule reads it).
    pub fn row_deleted(&self, table: &str, row_id: &str) -> Option<bool> {
        self.rows.get(&(table.to_owned(), row_id.to_owned())).map(|f| f.deleted)
    }
}

/// Writes the request's log (`author` the pushing client) and queues the
/// NOTIFY of each applied commit with changes (signed with `key` when the
/// caller already read it); returns the allocated `commitSeq` base (the
/// applied commit at position `n` has `base + n`; 0 when none was applied).
/// A partition registered before its counter row existed (only a hand-edited
/// or partially restored database: the registry and counter are created
/// together) gets its counter and the log is written again — every part that
/// carries a `commitSeq` hangs on the counter row, so the failed call wrote
/// none of it (only row-scope entries, which the second call keeps).
/// Errors: store failures.
pub fn write_request(author: &LogAuthor<'_>, log: &mut RequestLogBuilder, key: Option<&[u8]>) -> EngineResult<i64> {
    // The store picks the form: rows without statements, or single-shard statements under Citus.
    let write = |log: &RequestLog| request::write_request_log(author, log);
    let log = log.finish();
    let base = match write(log) {
        Ok(base) => base,
        Err(e) if e.is_missing_counter() => {
            partitions::insert_partition_counter(author.partition)?;
            write(log)?
        }
        Err(e) => return Err(e.into()),
    }
    .unwrap_or(0);
    super::count_log_write();
    let with_changes: BTreeSet<i32> = log.changes.iter().map(|c| c.commit).collect();
    for position in with_changes {
        notify::notify_commit(key, author.partition, base + i64::from(position))?;
    }
    Ok(base)
}
