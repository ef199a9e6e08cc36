//! The push half of a sync round (SPEC §6, §2.3, §6.4, §2.1): every
//! `PUSH_COMMIT` of the request, sequentially in frame order.
//!
//! Per commit:
//! 1. a `clientCommitId` already seen in this request replays the outcome
//!    recorded for its first occurrence (`cached` / `rejected`, §6.3);
//! 2. optimistic idempotency lookup — a stored outcome replays without
//!    taking the partition lock (`applied` → `cached`; an unreadable record
//!    → `sync.idempotency_cache_miss`, never persisted);
//! 3. otherwise the partition counter row is locked (`SELECT … FOR UPDATE`,
//!    once per request, held to the caller's transaction end) and the key is
//!    re-checked under the lock;
//! 4. the operations run inside the commit's own subtransaction
//!    ([`crate::engine::push_savepoint`]). Applied: the next dense
//!    `commitSeq` is allocated from the counter row, the commit header, its
//!    changes, their scope-index entries, tombstones and the `applied`
//!    outcome are written, and — when the commit emitted changes — the
//!    commit notification is queued; then the subtransaction is released.
//!    Rejected (a terminating result record, or a class-23 constraint error
//!    / class-22 data error raised by an app-table write): the
//!    subtransaction is rolled back — nothing of the commit survives — and
//!    only the `rejected` outcome is persisted. Any other error fails the
//!    whole request.

use std::cell::Cell;
use std::collections::HashMap;

use syncular_protocol::frame_fields::Op;
use syncular_protocol::request::PushCommit;
use syncular_protocol::response::{PushResult, PushResultDetails};
use syncular_protocol::ErrorCode;

use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::notify;
use crate::engine::push_apply::{apply_operation, scopes_json, StagedChange};
use crate::engine::push_result::{cache_miss, StoredOpResult, StoredPushResult, StoredStatus};
use crate::engine::push_savepoint::{self, caught_sqlstate, sqlstate_class, SavepointOutcome};
use crate::store::changes::{self, NewChange};
use crate::store::commits::{self, NewCommit};
use crate::store::{partitions, push_results, tombstones};

/// The answer to one `PUSH_COMMIT`: its `PUSH_RESULT` and, for a rejection
/// with §6.3.1 recovery metadata, its `PUSH_RESULT_DETAILS`.
#[derive(Debug, Clone)]
pub struct CommitAnswer {
    /// The commit's `PUSH_RESULT` (applied, cached or rejected).
    pub result: PushResult,
    /// The §6.3.1 companion of a rejection, when its record carries details.
    pub details: Option<PushResultDetails>,
}

/// How a commit's outcome was obtained (for tests and logs).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Known {
    /// Persisted outcome of this key.
    Stored(StoredPushResult),
    /// The stored record could not be read (never persisted).
    CacheMiss,
}

/// Runs the push half for `commits` in frame order. Request-level errors
/// (store failures, unexpected Postgres errors) fail the whole request.
pub fn run(ctx: &SyncContext<'_>, commits: &[PushCommit]) -> EngineResult<Vec<CommitAnswer>> {
    let mut answers = Vec::with_capacity(commits.len());
    let mut seen: HashMap<&str, Known> = HashMap::new();
    let mut locked = false;
    for commit in commits {
        let id = commit.client_commit_id.as_str();
        if let Some(known) = seen.get(id) {
            answers.push(replay(known, id)?);
            continue;
        }
        // Optimistic lookup without the lock (a replay-only request never
        // queues behind pushes); once this request holds the lock one
        // lookup is the locked re-check.
        if !locked {
            if let Some(known) = lookup(ctx, id)? {
                answers.push(replay(&known, id)?);
                seen.insert(id, known);
                continue;
            }
            crate::engine::partition::lock(&ctx.partition)?;
            locked = true;
        }
        if let Some(known) = lookup(ctx, id)? {
            answers.push(replay(&known, id)?);
            seen.insert(id, known);
            continue;
        }
        let stored = apply_commit(ctx, commit)?;
        answers.push(answer(&stored, id, false)?);
        seen.insert(id, Known::Stored(stored));
    }
    Ok(answers)
}

fn lookup(ctx: &SyncContext<'_>, client_commit_id: &str) -> EngineResult<Option<Known>> {
    let text = push_results::select_push_result(&ctx.partition, &ctx.client_id, client_commit_id)?;
    Ok(text.map(|t| StoredPushResult::from_json(&t).map_or(Known::CacheMiss, Known::Stored)))
}

fn replay(known: &Known, client_commit_id: &str) -> EngineResult<CommitAnswer> {
    match known {
        Known::Stored(stored) => answer(stored, client_commit_id, true),
        Known::CacheMiss => Ok(CommitAnswer {
            result: cache_miss(client_commit_id),
            details: None,
        }),
    }
}

fn answer(
    stored: &StoredPushResult,
    client_commit_id: &str,
    replay: bool,
) -> EngineResult<CommitAnswer> {
    match stored.to_frames(client_commit_id, replay) {
        Some((result, details)) => Ok(CommitAnswer { result, details }),
        None if replay => Ok(CommitAnswer {
            result: cache_miss(client_commit_id),
            details: None,
        }),
        None => Err(EngineError::internal(
            "a push result built by this request does not encode",
        )),
    }
}

/// Why the commit's subtransaction stopped early.
enum Stop {
    /// A terminating result record: roll back, persist the rejection.
    Rejected(StoredOpResult),
    /// A request-level failure: roll back, fail the request.
    Fatal(EngineError),
}

impl From<EngineError> for Stop {
    fn from(e: EngineError) -> Self {
        Stop::Fatal(e)
    }
}

/// Applies one new commit in its own subtransaction and persists its
/// outcome; returns the persisted outcome.
fn apply_commit(ctx: &SyncContext<'_>, commit: &PushCommit) -> EngineResult<StoredPushResult> {
    let writing: Cell<Option<i32>> = Cell::new(None);
    let outcome = push_savepoint::run(|| -> Result<StoredPushResult, Stop> {
        let mut staged: Vec<StagedChange> = Vec::new();
        for (i, op) in commit.operations.iter().enumerate() {
            let op_index =
                i32::try_from(i).map_err(|_| EngineError::internal("operation index overflow"))?;
            match apply_operation(ctx, op_index, op, &writing)? {
                Ok(Some(change)) => staged.push(change),
                Ok(None) => {}
                Err(record) => return Err(Stop::Rejected(record)),
            }
        }
        Ok(record_applied(ctx, commit, &staged)?)
    });
    let rejected = match outcome {
        SavepointOutcome::Released(stored) => return Ok(stored),
        SavepointOutcome::RolledBack(Stop::Fatal(e)) => return Err(e),
        SavepointOutcome::RolledBack(Stop::Rejected(record)) => record,
        SavepointOutcome::Raised(caught) => {
            let state = caught_sqlstate(&caught);
            match (writing.get(), sqlstate_class(state).as_str()) {
                (Some(op_index), "23") => StoredOpResult::error(
                    op_index,
                    ErrorCode::ConstraintViolation,
                    "write violates a relational constraint",
                ),
                (Some(op_index), "22") => StoredOpResult::error(
                    op_index,
                    ErrorCode::InvalidRequest,
                    "a row value cannot be stored in its Postgres column",
                ),
                _ => (*caught).rethrow(),
            }
        }
    };
    let stored = StoredPushResult {
        status: StoredStatus::Rejected,
        commit_seq: None,
        recorded_at_ms: ctx.now_ms,
        results: vec![rejected],
        details: vec![],
    };
    push_results::insert_push_result(
        &ctx.partition,
        &ctx.client_id,
        &commit.client_commit_id,
        &stored.to_json(),
    )?;
    Ok(stored)
}

/// Writes the log of an applied commit (inside its subtransaction) and its
/// `applied` outcome; queues the notification when it has changes.
fn record_applied(
    ctx: &SyncContext<'_>,
    commit: &PushCommit,
    staged: &[StagedChange],
) -> EngineResult<StoredPushResult> {
    let partition = ctx.partition.as_str();
    let commit_seq = partitions::allocate_commit_seq(partition)?;
    commits::insert_commit(&NewCommit {
        partition,
        commit_seq,
        client_id: &ctx.client_id,
        client_commit_id: &commit.client_commit_id,
        actor_id: &ctx.actor_id,
        created_at_ms: ctx.now_ms,
    })?;
    let mut rows = Vec::with_capacity(staged.len());
    let mut index_entries = Vec::new();
    for (idx, change) in staged.iter().enumerate() {
        rows.push(NewChange {
            idx: i32::try_from(idx).map_err(|_| EngineError::internal("change index overflow"))?,
            table: change.table.clone(),
            row_id: change.row_id.clone(),
            op: i16::from(change.op.byte()),
            row_version: change.row_version,
            scopes_json: scopes_json(&change.scopes),
            payload: change.payload.clone(),
        });
        for (var, value) in &change.scopes {
            index_entries.push((change.table.clone(), var.clone(), value.clone()));
        }
    }
    // Tombstones follow each row's final state in this commit: deleted → the
    // tombstone points at this commit; (re-)inserted → any tombstone goes.
    for (i, change) in staged.iter().enumerate() {
        let key = (&change.table, &change.row_id);
        if staged[i + 1..]
            .iter()
            .any(|later| (&later.table, &later.row_id) == key)
        {
            continue;
        }
        let inserted = staged[..=i]
            .iter()
            .any(|c| (&c.table, &c.row_id) == key && c.inserted);
        if change.op == Op::Delete {
            tombstones::upsert_tombstone(partition, &change.table, &change.row_id, commit_seq)?;
        } else if inserted {
            tombstones::delete_tombstone(partition, &change.table, &change.row_id)?;
        }
    }
    changes::insert_changes(partition, commit_seq, &rows)?;
    changes::insert_change_scopes(partition, commit_seq, &index_entries)?;
    let results = (0..commit.operations.len())
        .map(|i| StoredOpResult::Applied {
            op_index: i32::try_from(i).unwrap_or(i32::MAX),
        })
        .collect();
    let stored = StoredPushResult {
        status: StoredStatus::Applied,
        commit_seq: Some(commit_seq),
        recorded_at_ms: ctx.now_ms,
        results,
        details: vec![],
    };
    push_results::insert_push_result(
        partition,
        &ctx.client_id,
        &commit.client_commit_id,
        &stored.to_json(),
    )?;
    if !staged.is_empty() {
        notify::notify_commit(partition, commit_seq)?;
    }
    Ok(stored)
}
