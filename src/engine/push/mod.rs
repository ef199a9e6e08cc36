//! The push half of a sync round (SPEC §6, §2.3, §6.4, §2.1): every
//! `PUSH_COMMIT` of the request, sequentially in frame order.
//!
//! First, the request's advisory locks are taken in ascending key order,
//! without a statement ([`crate::store::push::locks`]; for a sync request
//! with its fences, before its first statement —
//! `store::round::context::read` — and [`run_locked`] follows): one per distinct
//! `clientCommitId` — simultaneous deliveries of one commit serialize there
//! and the later one replays — and one per row bucket the operations name,
//! so two requests writing the same rows in different orders queue instead
//! of deadlocking.
//!
//! Then the stored outcomes of the request's keys are read, in one
//! statement (for a sync request, with its context).
//!
//! Per commit:
//! 1. a `clientCommitId` already seen in this request replays the outcome
//!    of its first occurrence (`cached` / `rejected`, §6.3);
//! 2. a stored outcome replays (`applied` → `cached`; an unreadable record
//!    → `sync.idempotency_cache_miss`, never persisted);
//! 3. otherwise the operations run inside the commit's own subtransaction
//!    ([`crate::engine::push::savepoint`]) — app rows (and the row-scope
//!    entries of deleted rows), overlapping with other pushers of the
//!    partition — then the §6.8
//!    commit validator and the §6.9 reaction planner, if registered (a
//!    planner failure fails the request). Applied: its header, changes,
//!    scope-index entries, outcome and planned reactions are staged. Rejected (a
//!    terminating result record, or a class-23 constraint error / class-22
//!    data error raised by an app-table write): the subtransaction is rolled
//!    back — nothing of the commit survives — and only the `rejected`
//!    outcome is staged. Any other error fails the whole request.
//!
//! Last, the request's log is written ([`crate::store::log::request`]): the
//! inserted rows' scope entries, then one statement allocating the dense
//! `commitSeq`s of the applied commits from the partition's counter row
//! (locked from there to the caller's transaction end: the only
//! partition-wide critical section), then every staged row and outcome
//! (without statements outside Citus); the planned reactions follow with their `commitSeq`s
//! ([`crate::store::reactions::enqueue`], plus one `syncular_reaction`
//! NOTIFY); each applied commit with changes queues its notification.

pub mod apply;
pub mod outcomes;
pub mod savepoint;
pub mod server_commit;
pub mod validator;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap};

use syncular_protocol::request::PushCommit;
use syncular_protocol::response::{PushResult, PushResultDetails};
use syncular_protocol::ErrorCode;

use crate::engine::push::validator::{self as commit_validator, Verdict};
use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::push::apply::{apply_operation, side_effect_change, Busy, PayloadForm, StagedChange, Terminated};
use crate::engine::push::outcomes::{cache_miss, StoredDetail, StoredOpResult, StoredPushResult, StoredStatus};
use crate::engine::auth::resolver::is_transient_sqlstate;
use crate::engine::push::savepoint::{self as push_savepoint, caught_sqlstate, sqlstate_class, sqlstate_text, SavepointOutcome};
use crate::engine::reactions::{self, planner, records::Planned};
use crate::engine::commit::{self, RequestLogBuilder};
use crate::store::log::LogAuthor;
use crate::store::notifications::queue_notification_direct;
use crate::store::reactions::enqueue::{insert_reactions, NewReaction};
use crate::store::push::outcomes::{self as push_results, StoredOutcomes};
use crate::store::push::locks as push_locks;

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

/// How one `PUSH_COMMIT` of the request is answered.
enum Slot {
    /// Its key was already stored before this request (replayed).
    Stored(Known),
    /// New: applied or rejected by this request (index into the outcomes).
    New(usize),
    /// The key of an earlier frame of this request (slot index): replays its outcome.
    Again(usize),
}

/// A new commit's outcome before the log was written.
enum Outcome {
    /// Applied at `position` (1-based among the request's applied commits).
    Applied { position: i32, operations: usize },
    /// Rejected: the stored record.
    Rejected(StoredPushResult),
}

/// Runs the push half for `commits` in frame order. Request-level errors
/// (store failures, unexpected Postgres errors) fail the whole request.
///
/// Order: the request's idempotency and row locks, without a statement
/// ([`push_locks`]); the stored outcomes of its keys are read;
/// per new commit, its operations in its own subtransaction; then the whole
/// request's log and outcomes are written, allocating the `commitSeq`s
/// ([`commit::write_request`]) — the partition's counter row is taken
/// there, last. `forms` gives the payload form of each operation of each
/// commit (`syncular.commit`: `upsert` full, `patch` sparse); without it,
/// the form of the request's wire version ([`PayloadForm::of_wire`]).
pub fn run(ctx: &SyncContext<'_>, commits: &[PushCommit], forms: Option<&[Vec<PayloadForm>]>) -> EngineResult<Vec<CommitAnswer>> {
    if commits.is_empty() {
        return Ok(Vec::new());
    }
    push_locks::lock_keys(lock_keys(&ctx.partition, &ctx.client_id, commits))?;
    let stored = push_results::select_push_results(&ctx.partition, &ctx.client_id, &commit_ids(commits))?;
    run_with(ctx, commits, &stored, forms)
}

/// The distinct `clientCommitId`s of `commits` (for the stored-outcome
/// read); one Postgres cannot hold (NUL) is left out — its request is
/// refused before its push runs.
pub fn commit_ids(commits: &[PushCommit]) -> Vec<String> {
    let ids: BTreeSet<&str> =
        commits.iter().map(|c| c.client_commit_id.as_str()).filter(|id| !id.contains('\0')).collect();
    ids.into_iter().map(str::to_owned).collect()
}

/// [`run`] for a request whose locks ([`lock_keys`]) the caller already
/// took and whose `stored` outcomes ([`commit_ids`]) it read after them (a
/// sync request takes the locks with its fences, before its first
/// statement, and reads the outcomes with its context:
/// `store::round::context::read`).
pub fn run_locked(ctx: &SyncContext<'_>, commits: &[PushCommit], stored: &StoredOutcomes) -> EngineResult<Vec<CommitAnswer>> {
    run_with(ctx, commits, stored, None)
}

/// [`run_locked`] with the operations' payload forms ([`run`]).
fn run_with(
    ctx: &SyncContext<'_>,
    commits: &[PushCommit],
    stored: &StoredOutcomes,
    forms: Option<&[Vec<PayloadForm>]>,
) -> EngineResult<Vec<CommitAnswer>> {
    if commits.is_empty() {
        return Ok(Vec::new());
    }
    if ctx.schema.commit_validator.is_some() {
        // §6.8: candidate-state validation needs the partition serialized.
        push_locks::lock_keys(vec![push_locks::partition_key(&ctx.partition)])?;
    }
    let mut slots: Vec<Slot> = Vec::with_capacity(commits.len());
    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut log = RequestLogBuilder::default();
    let mut reactions: Vec<(i32, String, Planned)> = Vec::new();
    for (c, commit) in commits.iter().enumerate() {
        let id = commit.client_commit_id.as_str();
        if let Some(&at) = first.get(id) {
            slots.push(Slot::Again(at));
            continue;
        }
        first.insert(id, slots.len());
        if let Some(known) = lookup(stored, id) {
            slots.push(Slot::Stored(known));
            continue;
        }
        let outcome = apply_commit(ctx, commit, forms.and_then(|f| f.get(c)).map(Vec::as_slice), &mut log, &mut reactions)?;
        slots.push(Slot::New(outcomes.len()));
        outcomes.push(outcome);
    }
    let author = LogAuthor {
        partition: &ctx.partition,
        client_id: &ctx.client_id,
        actor_id: &ctx.actor_id,
        created_at_ms: ctx.now_ms,
    };
    let base = commit::write_request(&author, &mut log, ctx.notification_key.as_deref())?;
    enqueue_reactions(ctx, base, &reactions)?;
    let stored: Vec<StoredPushResult> = outcomes
        .iter()
        .map(|o| match o {
            Outcome::Applied { position, operations } => applied(ctx, base + i64::from(*position), *operations),
            Outcome::Rejected(r) => r.clone(),
        })
        .collect();
    let mut answers = Vec::with_capacity(commits.len());
    for (commit, slot) in commits.iter().zip(&slots) {
        let id = commit.client_commit_id.as_str();
        let answer = match slot {
            Slot::Stored(known) => replay(known, id)?,
            Slot::New(i) => answer(&stored[*i], id, false)?,
            Slot::Again(at) => match &slots[*at] {
                Slot::Stored(known) => replay(known, id)?,
                Slot::New(i) => answer(&stored[*i], id, true)?,
                Slot::Again(_) => return Err(EngineError::internal("a repeated commit points at a repeat")),
            },
        };
        answers.push(answer);
    }
    Ok(answers)
}

/// The request's lock keys, taken before any lookup or write: one per
/// distinct `clientCommitId` of `client_id` (a duplicate delivery waits for
/// the first, then replays its stored outcome) and one per row bucket the
/// operations name (pushes touching the same rows queue here, in one
/// order, instead of deadlocking on the rows). Ascending, each once.
pub fn lock_keys(partition: &str, client_id: &str, commits: &[PushCommit]) -> Vec<i64> {
    let mut keys = Vec::with_capacity(commits.len() * 2);
    for c in commits {
        keys.push(push_locks::idempotency_key(partition, client_id, &c.client_commit_id));
        keys.extend(c.operations.iter().map(|op| push_locks::row_key(partition, &op.table, &op.row_id)));
    }
    push_locks::ordered(keys)
}

/// The `applied` record of a commit with `operations` operations at `commit_seq`.
fn applied(ctx: &SyncContext<'_>, commit_seq: i64, operations: usize) -> StoredPushResult {
    StoredPushResult {
        status: StoredStatus::Applied,
        commit_seq: Some(commit_seq),
        recorded_at_ms: ctx.now_ms,
        results: (0..operations)
            .map(|i| StoredOpResult::Applied { op_index: i32::try_from(i).unwrap_or(i32::MAX) })
            .collect(),
        details: vec![],
    }
}

/// The stored outcome of `client_commit_id`, if any (an unreadable record
/// is a cache miss).
fn lookup(stored: &StoredOutcomes, client_commit_id: &str) -> Option<Known> {
    stored
        .get(client_commit_id)
        .map(|t| StoredPushResult::from_json(t).map_or(Known::CacheMiss, Known::Stored))
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
    Rejected(Box<Terminated>),
    /// A request-level failure: roll back, fail the request.
    Fatal(EngineError),
}

impl From<EngineError> for Stop {
    fn from(e: EngineError) -> Self {
        Stop::Fatal(e)
    }
}

/// Applies one new commit in its own subtransaction (each operation's
/// payload read in its `forms` entry, else the wire version's form) and
/// stages its log rows and outcome in `log` (written by [`run`] after the
/// last commit).
fn apply_commit(
    ctx: &SyncContext<'_>,
    commit: &PushCommit,
    forms: Option<&[PayloadForm]>,
    log: &mut RequestLogBuilder,
    reactions: &mut Vec<(i32, String, Planned)>,
) -> EngineResult<Outcome> {
    let busy: Cell<Option<Busy>> = Cell::new(None);
    let hooked = ctx.schema.commit_validator.is_some() || ctx.schema.reaction_planner.is_some();
    let evidence = hooked.then(|| RefCell::new(Vec::new()));
    let wire_form = PayloadForm::of_wire(ctx.wire_version);
    let request_rows = |tbl: &str, row_id: &str| log.row_deleted(tbl, row_id);
    let outcome = push_savepoint::run(|| -> Result<(Vec<StagedChange>, Vec<Planned>), Stop> {
        let mut staged: Vec<StagedChange> = Vec::new();
        for (i, op) in commit.operations.iter().enumerate() {
            let op_index =
                i32::try_from(i).map_err(|_| EngineError::internal("operation index overflow"))?;
            let form = forms.and_then(|f| f.get(i)).copied().unwrap_or(wire_form);
            let (outcome, side_effects) = apply_operation(ctx, op_index, op, form, &request_rows, &busy, evidence.as_ref())?;
            match outcome {
                Ok(change) => staged.extend(change),
                Err(terminated) => return Err(Stop::Rejected(Box::new(terminated))),
            }
            for side in side_effects {
                match side_effect_change(ctx, op_index, side)? {
                    Ok(change) => staged.extend(change),
                    Err(terminated) => return Err(Stop::Rejected(Box::new(terminated))),
                }
            }
        }
        let Some(evidence) = evidence.as_ref() else { return Ok((staged, Vec::new())) };
        let input = commit_validator::input(&ctx.client_id, &commit.client_commit_id, &ctx.actor_id, &ctx.partition, evidence.take());
        if let Some(validator) = ctx.schema.commit_validator {
            validate_commit(commit, validator, &input, &busy)?;
        }
        let planned = match ctx.schema.reaction_planner {
            // §6.9: after every validator accepted, before the log is appended.
            Some(oid) => {
                busy.set(Some(Busy::Planning));
                let planned = planner::plan(oid, &input)?;
                busy.set(None);
                planned
            }
            None => Vec::new(),
        };
        Ok((staged, planned))
    });
    let rejected = match outcome {
        SavepointOutcome::Released((staged, planned)) => {
            // Placeholder commitSeq: the log writer sets the allocated one.
            let outcome = applied(ctx, 0, commit.operations.len()).to_json();
            let position = log.applied(&commit.client_commit_id, &staged, outcome)?;
            reactions.extend(planned.into_iter().map(|p| (position, commit.client_commit_id.clone(), p)));
            return Ok(Outcome::Applied { position, operations: commit.operations.len() });
        }
        SavepointOutcome::RolledBack(Stop::Fatal(e)) => return Err(e),
        SavepointOutcome::RolledBack(Stop::Rejected(terminated)) => *terminated,
        SavepointOutcome::Raised(caught) => caught_rejection(ctx, busy.get(), *caught)?.into(),
    };
    let details = rejected
        .details
        .map(|details_json| StoredDetail { op_index: rejected.record.op_index(), details_json })
        .into_iter()
        .collect();
    let stored = StoredPushResult {
        status: StoredStatus::Rejected,
        commit_seq: None,
        recorded_at_ms: ctx.now_ms,
        results: vec![rejected.record],
        details,
    };
    log.rejected(&commit.client_commit_id, stored.to_json());
    Ok(Outcome::Rejected(stored))
}

/// The rejection record of a Postgres ERROR caught while the commit ran
/// (`busy`: what it was doing): an app-table write's class-23 / class-22
/// error, a `syncular.write_refused` an app trigger's rewrite caused and a
/// write validator's non-transient exception reject the commit; a planner's non-transient exception fails the request (its text
/// to the server log only, §6.9); anything else is raised again.
fn caught_rejection(ctx: &SyncContext<'_>, busy: Option<Busy>, caught: pgrx::pg_sys::panic::CaughtError) -> EngineResult<StoredOpResult> {
    let class = sqlstate_class(caught_sqlstate(&caught));
    Ok(match (busy, class.as_str()) {
        (Some(Busy::Writing(op_index)), "23") => {
            StoredOpResult::error(op_index, ErrorCode::ConstraintViolation, "write violates a relational constraint")
        }
        (Some(Busy::Writing(op_index)), "22") => {
            StoredOpResult::error(op_index, ErrorCode::InvalidRequest, "a row value cannot be stored in its Postgres column")
        }
        // An app trigger moved the row to other scopes or another id on update (docs "What
        // your own triggers may do"): this commit cannot be logged as stored, the next can.
        (Some(Busy::Writing(op_index)), "0A") if caught_message(&caught).starts_with(HostCode::WriteRefused.as_str()) => {
            let message = caught_message(&caught);
            let reason = message.strip_prefix(HostCode::WriteRefused.as_str()).and_then(|m| m.strip_prefix(": ")).unwrap_or(&message);
            StoredOpResult::error(op_index, ErrorCode::ConstraintViolation, reason)
        }
        // §6.7, §6.8: a validator's exception (not a deliberate rejection) is the generic
        // constraint code, without its text; a transient failure fails the request.
        (Some(Busy::Validating(op_index)), _) if !is_transient_sqlstate(&class) => {
            StoredOpResult::error(op_index, ErrorCode::ConstraintViolation, "the validator raised an error")
        }
        (Some(Busy::Planning), _) if !is_transient_sqlstate(&class) => {
            let name = ctx.schema.reaction_planner.map_or_else(|| "(unregistered)".to_owned(), planner::display_name);
            pgrx::log!("syncular: the reaction planner {name} raised: {}", caught_message(&caught));
            return Err(planner::failed(
                &name,
                format_args!("raised an error (SQLSTATE {}); see the server log", sqlstate_text(caught_sqlstate(&caught))),
            ));
        }
        _ => caught.rethrow(),
    })
}

/// Runs the whole-commit validator (§6.8) on the staged commit, inside its
/// subtransaction: a rejection terminates the commit like an operation's.
fn validate_commit(
    commit: &PushCommit,
    validator: pgrx::pg_sys::Oid,
    input: &serde_json::Value,
    busy: &Cell<Option<Busy>>,
) -> Result<(), Stop> {
    busy.set(Some(Busy::Validating(0)));
    let verdict = commit_validator::validate(validator, input, commit.operations.len())?;
    busy.set(None);
    match verdict {
        Verdict::Accept => Ok(()),
        Verdict::Reject { op_index, rejection } => Err(Stop::Rejected(Box::new(Terminated {
            record: StoredOpResult::Error { op_index, code: rejection.code, message: rejection.message, retryable: false },
            details: rejection.details,
        }))),
        Verdict::BadIndex(message) => {
            Err(Stop::Rejected(Box::new(StoredOpResult::error(0, ErrorCode::ConstraintViolation, message).into())))
        }
    }
}

/// The text of a caught error (for the server log).
fn caught_message(caught: &pgrx::pg_sys::panic::CaughtError) -> String {
    use pgrx::pg_sys::panic::CaughtError;
    match caught {
        CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) => r.message().to_owned(),
        CaughtError::RustPanic { ereport, .. } => ereport.message().to_owned(),
    }
}

/// Enqueues the reactions the request's applied commits planned (§6.9
/// "Atomic storage"; `base`: the allocated `commitSeq` base) and, when there
/// are any, signals [`reactions::CHANNEL`] (delivered at COMMIT; Postgres
/// folds repeats of one payload within a transaction).
fn enqueue_reactions(ctx: &SyncContext<'_>, base: i64, planned: &[(i32, String, Planned)]) -> EngineResult<()> {
    if planned.is_empty() {
        return Ok(());
    }
    let rows: Vec<NewReaction> = planned
        .iter()
        .map(|(position, client_commit_id, p)| NewReaction {
            commit_seq: base + i64::from(*position),
            client_commit_id: client_commit_id.clone(),
            idempotency_key: reactions::records::idempotency_key(&ctx.partition, &ctx.client_id, client_commit_id, &p.key),
            kind: p.kind.clone(),
            version: p.version,
            payload: p.payload.to_string(),
            max_attempts: p.max_attempts,
        })
        .collect();
    insert_reactions(&ctx.partition, &ctx.client_id, ctx.now_ms, &rows)?;
    queue_notification_direct(reactions::CHANNEL, &ctx.partition)?;
    Ok(())
}
