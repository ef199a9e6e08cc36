//! Applying one push operation (SPEC §6.1, §6.2, §3.4, §2.2, §5.10.3) inside
//! the commit's subtransaction: the authorization row, the version check,
//! the scope-column strip, the app-row and scope-index writes, and the change
//! the operation emits. The first non-applied operation terminates the
//! commit with its result record (the caller rolls the commit back).
//!
//! Order per operation (the reference server's): unknown table →
//! resolver denied → read the stored row →
//! - delete: absent row ⇒ applied, no change, no authorization; else
//!   authorize the STORED row's scopes (`sync.forbidden`), delete row and
//!   its scope entries, emit a delete tagged with the stored scopes;
//! - upsert: payload decode (`sync.invalid_request`), primary key = `rowId`
//!   (`sync.invalid_request`); existing row ⇒ authorize the STORED row,
//!   `baseVersion` 0 or ≠ stored version ⇒ `conflict` carrying the stored
//!   row, strip the scope columns back to the stored values (re-encoding the
//!   payload when that changed it), crdt merge, write version + 1;
//!   absent row ⇒ `baseVersion ≠ 0` ⇒ authorize the payload then
//!   `sync.row_missing`; else authorize the payload's scopes, crdt merge,
//!   write version 1 (its scope entries go with the request's log).
//!
//! A sparse payload (wire version 3, `syncular.commit` `patch`;
//! `crates/protocol/WIRE_V3.md`) follows the rules of that generation, as
//! `syncular-authority` 0.49.2 decides them: the payload is a sparse row
//! (primary key present; an absent column keeps its stored value). Existing
//! row ⇒ authorize the STORED row, a present scope column that differs ⇒
//! `sync.invalid_request` (immutable, §3.4), `baseVersion` above the stored
//! version ⇒ `sync.invalid_request`, `baseVersion` 0 or some present
//! comparable column (not the primary key, not crdt) whose column version
//! is above `baseVersion` ⇒ `conflict` carrying those columns as
//! `conflictColumns`; else the present columns are merged into the stored
//! row and move to the new version. Absent row ⇒ the payload's scopes are
//! authorized when it carries them, `baseVersion ≠ 0` ⇒ `sync.row_missing`
//! (`sync.forbidden` without scope values), a partial payload ⇒
//! `sync.row_missing`, an unversioned upsert of a row deleted within the
//! retention horizon (a tombstone) ⇒ `sync.row_deleted` — decided by the
//! insert statement itself (its `RETURNING` probes the tombstone; the
//! rejection rolls the insert back), so after the write validator; a delete
//! earlier in the same request is known before. What is logged and served
//! is the full merged row. Per-column versions:
//! [`crate::engine::column_versions`].
//!
//! The crdt merge (§5.10.3, [`crate::engine::crdt`]) replaces every
//! non-NULL `crdt` value with `merge(stored, incoming)` and re-encodes the
//! payload when that changed it; it runs only on a clean apply (after the
//! version check, which looks at `baseVersion` alone, so a crdt column never
//! conflicts on its own account), and a failure is `sync.crdt_merge_failed`.
//!
//! An upsert whose row references blobs (`blob_ref` values) checks that they
//! are stored (§5.9.6: `blob.not_found`) after the crdt merge and before the
//! write validator; the reference index (§5.9.4) follows every write
//! ([`crate::engine::blobs::refs`]).
//!
//! The table's write validator (§6.7, [`crate::engine::validators`]) runs
//! last before each write — after decode, authorization, the scope strip,
//! the version check and the crdt merge (it sees the merged row, §6.7); a
//! delete of an absent row runs none. Its rejection terminates the commit
//! with the host's record and details.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use syncular_protocol::frame_fields::Op;
use syncular_protocol::request::Operation;
use syncular_protocol::blob::row_blob_ids;
use syncular_protocol::constants::WIRE_VERSION_3;
use syncular_protocol::row_codec::{decode_row, encode_row, identical, render_row, ColumnType, Row};
use syncular_protocol::sparse_row::{decode_sparse_row, SparseSlot};
use syncular_protocol::schema_ir::TableSchema;
use syncular_protocol::scopes::authorize_write;
use syncular_protocol::ErrorCode;

use crate::engine::column_versions::ColumnVersions;
use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::push::outcomes::StoredOpResult;
use crate::engine::auth::allowed::Allowed;
use crate::engine::schema::RegisteredTable;
use crate::engine::storable::{preview, unstorable};
use crate::engine::scope_match::parse_stored_scopes_lenient;
use crate::engine::blobs::refs as blob_refs;
use crate::engine::push::validator as commit_validator;
use crate::engine::{crdt, validators};
pub use crate::engine::commit::{scopes_json, StagedChange};
use crate::engine::commit::guard::{EngineWrite, Effects, Restamp, SideEffect};
use crate::store::app_rows::{self, AppRowWrite, AppTableSql, StoredRow};
use crate::store::log::row_scopes;

mod rows;
mod side_effects;

pub use side_effects::side_effect_change;

/// The record that terminates a commit and, for a write validator's
/// rejection that carries them, its §6.3.1 details (JSON text).
#[derive(Debug, Clone)]
pub struct Terminated {
    /// The terminating result record.
    pub record: StoredOpResult,
    /// The details of `record` (validated §6.3.1 object), if any.
    pub details: Option<String>,
}

impl From<StoredOpResult> for Terminated {
    fn from(record: StoredOpResult) -> Self {
        Terminated { record, details: None }
    }
}

/// How one operation ended: applied (maybe with a change) or terminated
/// with its result record.
pub type OpOutcome = Result<Option<StagedChange>, Terminated>;

/// What an operation is doing while a Postgres ERROR may be raised, so the
/// commit's subtransaction can attribute it: an app-table write (a class-23
/// or class-22 error rejects the commit) or its write validator (any
/// non-transient error rejects it with `sync.constraint_violation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// App-table statements of operation `.0`.
    Writing(i32),
    /// The write validator of operation `.0` (§6.7).
    Validating(i32),
    /// The reaction planner (§6.9): its ERROR fails the request.
    Planning,
}

/// The compiled table behind a registered table.
pub fn table_schema(t: &RegisteredTable) -> &TableSchema {
    &t.table
}

/// §3.4 steps 2–4 on `scopes` (the authorization row's stored scopes); the
/// denial is a `sync.forbidden` record at `op_index`.
fn authorize(
    table: &TableSchema,
    scopes: &BTreeMap<String, String>,
    allowed: &Allowed,
    op_index: i32,
) -> Result<(), Stop> {
    let view: BTreeMap<&str, Option<&str>> = table
        .scopes
        .iter()
        .map(|s| {
            (
                s.variable.as_str(),
                scopes.get(&s.variable).map(String::as_str),
            )
        })
        .collect();
    authorize_write(table, &view, allowed.map()).map_err(|e| {
        Stop::from(StoredOpResult::error(
            op_index,
            ErrorCode::Forbidden,
            e.message,
        ))
    })
}

/// Scope values of a decoded row for every declared variable; `Err` names the
/// first variable whose column is NULL or empty.
fn extract_scopes(table: &TableSchema, row: &Row) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (variable, value) in table.stored_scopes(row) {
        match value.filter(|v| !v.is_empty()) {
            Some(v) => {
                out.insert(variable.to_owned(), v.to_owned());
            }
            None => return Err(variable.to_owned()),
        }
    }
    Ok(out)
}

/// §5.10.3 rule 2: every non-NULL `crdt` value of `row` that `skip` does not
/// exclude becomes `merge(stored, incoming)` ([`crdt::merge_row`]); a failure
/// is a `sync.crdt_merge_failed` record. Returns whether `row` changed.
fn merge_crdt(
    table: &TableSchema,
    row: &mut Row,
    stored: Option<&Row>,
    skip: &dyn Fn(usize) -> bool,
    op_index: i32,
) -> Result<bool, Stop> {
    crdt::merge_row(table, row, stored, skip).map(|changed| !changed.is_empty()).map_err(|f| {
        Stop::from(StoredOpResult::error(op_index, ErrorCode::CrdtMergeFailed, f.describe(&table.name)))
    })
}

/// Why an operation did not apply: its terminating result record, or a
/// request-level failure.
enum Stop {
    Record(Box<Terminated>),
    Fatal(EngineError),
}

impl From<EngineError> for Stop {
    fn from(e: EngineError) -> Self {
        Stop::Fatal(e)
    }
}

impl From<StoredOpResult> for Stop {
    fn from(r: StoredOpResult) -> Self {
        Stop::Record(Box::new(r.into()))
    }
}

impl From<crate::store::StoreError> for Stop {
    fn from(e: crate::store::StoreError) -> Self {
        Stop::Fatal(e.into())
    }
}

/// How an upsert's payload reads and which rules decide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadForm {
    /// A full row (§2.4; wire 1 and 2, `syncular.commit` `upsert`): the
    /// SPEC 0.15.48 §6.2 rules (row-level conflicts, scope columns stripped).
    Full,
    /// A sparse row (wire 3, `syncular.commit` `patch`): the v3 rules
    /// (module docs).
    Sparse,
}

impl PayloadForm {
    /// The form of the upserts of a request of `wire_version`.
    pub fn of_wire(wire_version: u16) -> PayloadForm {
        if wire_version >= WIRE_VERSION_3 {
            PayloadForm::Sparse
        } else {
            PayloadForm::Full
        }
    }
}

/// What the request's earlier commits left of rows: `Some(true)` when a
/// row's last change in this request deletes it (its tombstone is written
/// with the request's log), `Some(false)` when it writes it, `None` when the
/// request did not touch it.
pub type RequestRows<'a> = &'a dyn Fn(&str, &str) -> Option<bool>;

/// A decoded upsert payload: the row (absent and NULL columns both `None`)
/// and, for a sparse payload, which columns it carries.
struct Decoded {
    row: Row,
    /// `None`: a full row (every column present).
    present: Option<Vec<bool>>,
}

impl Decoded {
    fn present(&self, i: usize) -> bool {
        self.present.as_ref().is_none_or(|p| p.get(i).copied().unwrap_or(false))
    }

    fn partial(&self) -> bool {
        self.present.as_ref().is_some_and(|p| p.iter().any(|present| !present))
    }
}

/// What one operation works on.
struct Target<'a> {
    ctx: &'a SyncContext<'a>,
    table: &'a TableSchema,
    sql: &'a AppTableSql,
    validator: Option<pgrx::pg_sys::Oid>,
    op_index: i32,
    op: &'a Operation,
    form: PayloadForm,
    request_rows: RequestRows<'a>,
    busy: &'a Cell<Option<Busy>>,
    evidence: Option<&'a RefCell<Vec<serde_json::Value>>>,
    /// What the capture triggers recorded during this operation's writes.
    effects: RefCell<Effects>,
}

impl Target<'_> {
    fn error(&self, code: ErrorCode, message: impl Into<String>) -> Stop {
        Stop::from(StoredOpResult::error(self.op_index, code, message))
    }

    /// Runs the table's write validator, if any (§6.7: after decode and
    /// authorization, right before the write). A rejection terminates the
    /// commit with the host's code, message and details.
    fn validate(&self, op: Op, row: Option<&Row>, stored: Option<&Row>, versions: (Option<i64>, Option<i64>)) -> Result<(), Stop> {
        self.record_evidence(op, row, stored, versions);
        let Some(validator) = self.validator else { return Ok(()) };
        let write = validators::Write {
            partition: &self.ctx.partition,
            actor_id: &self.ctx.actor_id,
            table: self.table,
            op,
            row_id: &self.op.row_id,
            row,
            stored,
        };
        self.busy.set(Some(Busy::Validating(self.op_index)));
        let verdict = validators::validate(validator, &write)?;
        self.busy.set(None);
        match verdict {
            None => Ok(()),
            Some(r) => Err(Stop::Record(Box::new(Terminated {
                record: StoredOpResult::Error { op_index: self.op_index, code: r.code, message: r.message, retryable: false },
                details: r.details,
            }))),
        }
    }

    /// Adds this operation's evidence for the whole-commit validator (§6.8),
    /// when one runs: `versions` = (stored, next) server versions.
    fn record_evidence(&self, op: Op, row: Option<&Row>, stored: Option<&Row>, versions: (Option<i64>, Option<i64>)) {
        let Some(evidence) = self.evidence else { return };
        let layout = self.table.layout();
        evidence.borrow_mut().push(commit_validator::evidence(
            self.op_index,
            if op == Op::Delete { "delete" } else { "upsert" },
            &self.table.name,
            &self.op.row_id,
            row.map(|r| render_row(layout, r)),
            stored.map(|r| render_row(layout, r)),
            versions.0,
            versions.1,
        ));
    }

    /// The stored payload decoded (a corrupt one fails the request).
    fn decode_stored(&self, stored: &StoredRow) -> Result<Row, Stop> {
        decode_row(self.table.layout(), &stored.payload).map_err(|e| {
            Stop::Fatal(EngineError::internal(format!(
                "stored payload of {:?}/{:?} does not decode: {}",
                self.table.name, self.op.row_id, e.message
            )))
        })
    }

    /// The stored row decoded, for the validators only (`None` without one).
    fn stored_row_for_validator(&self, stored: &StoredRow) -> Result<Option<Row>, Stop> {
        if self.validator.is_none() && self.evidence.is_none() {
            return Ok(None);
        }
        self.decode_stored(stored).map(Some)
    }

    fn change(
        &self,
        op: Op,
        row_version: Option<i64>,
        scopes: BTreeMap<String, String>,
        payload: Option<Vec<u8>>,
        inserted: bool,
    ) -> StagedChange {
        StagedChange {
            table: self.table.name.clone(),
            row_id: self.op.row_id.clone(),
            op,
            row_version,
            scopes,
            payload,
            inserted,
        }
    }

    /// The §5.9.6 existence check of the blobs `ids` the written row
    /// references (locked against the sweep): an absent one terminates the
    /// commit with `blob.not_found`.
    fn check_blobs(&self, ids: &[String]) -> Result<(), Stop> {
        match blob_refs::first_missing(&self.ctx.partition, ids)? {
            None => Ok(()),
            Some(missing) => Err(self.error(
                ErrorCode::BlobNotFound,
                blob_refs::not_found_message(&self.table.name, &self.op.row_id, &missing),
            )),
        }
    }

    /// App-table writes run with `writing` set, so an ERROR they raise is
    /// attributed to this operation.
    fn write<T>(&self, f: impl FnOnce() -> crate::store::StoreResult<T>) -> Result<T, Stop> {
        self.busy.set(Some(Busy::Writing(self.op_index)));
        let guard = EngineWrite::row(&self.table.name, &self.ctx.partition, &self.op.row_id);
        let out = f()?;
        let effects = guard.finish();
        let mut all = self.effects.borrow_mut();
        all.restamped.extend(effects.restamped);
        all.side_effects.extend(effects.side_effects);
        self.busy.set(None);
        Ok(out)
    }

    /// Decodes an upsert payload in the request's form (`sync.invalid_request`
    /// when it does not decode, or its primary key is not `rowId`).
    fn decode(&self, payload: &[u8]) -> Result<Decoded, Stop> {
        let layout = self.table.layout();
        let decoded = match self.form {
            PayloadForm::Full => decode_row(layout, payload).map(|row| Decoded { row, present: None }),
            PayloadForm::Sparse => {
                decode_sparse_row(layout, self.table.primary_key_index, payload).map(|slots| {
                    let present = slots.iter().map(SparseSlot::is_present).collect();
                    let row = slots.into_iter().map(SparseSlot::into_value).collect();
                    Decoded { row, present: Some(present) }
                })
            }
        }
        .map_err(|e| {
            self.error(ErrorCode::InvalidRequest, format!("row payload failed row-codec decode (§1.7): {}", e.message))
        })?;
        if self.table.row_id(&decoded.row).as_deref() != Some(self.op.row_id.as_str()) {
            return Err(self.error(ErrorCode::InvalidRequest, "payload primary key does not match rowId"));
        }
        Ok(decoded)
    }

    fn apply(&self) -> Result<Option<StagedChange>, Stop> {
        if let Some(why) = unstorable(&self.op.row_id) {
            return Err(self.error(ErrorCode::InvalidRequest, format!("rowId {} {why}", preview(&self.op.row_id))));
        }
        let stored = app_rows::select_app_row(self.sql, &self.ctx.partition, &self.op.row_id)?;
        if self.op.op == Op::Delete {
            // §6.2: deleting an absent row is applied, emits nothing (and runs no write
            // validator; it is still evidence for the whole-commit validator, §6.8).
            if stored.is_none() {
                self.record_evidence(Op::Delete, None, None, (None, None));
            }
            return stored.map(|s| self.delete(s)).transpose();
        }
        let payload = self
            .op
            .payload
            .as_deref()
            .ok_or_else(|| self.error(ErrorCode::InvalidRequest, "upsert without payload"))?;
        let decoded = self.decode(payload)?;
        match stored {
            Some(stored) => self.update(stored, decoded, payload).map(Some),
            None => self.insert(decoded, payload).map(Some),
        }
    }
}

/// Applies operation `op_index` of a commit, its upsert payload read in
/// `form`. `busy` says what the operation
/// is doing while app-table statements or its write validator run, so a
/// Postgres ERROR they raise (unique violation, a validator's exception, …)
/// can be attributed to the operation ([`Busy`]). `request_rows` tells what
/// the request's earlier commits did to a row (the tombstone rule of a
/// sparse upsert). With `evidence`, the operation's §6.8 evidence is appended to it.
/// `Ok((Err(terminated), _))` terminates the commit; `Err` is a request-level
/// failure. Beside the outcome: the rows the operation's writes caused
/// without naming them ([`side_effect_change`] makes them changes).
#[allow(clippy::too_many_arguments)]
pub fn apply_operation(
    ctx: &SyncContext<'_>,
    op_index: i32,
    op: &Operation,
    form: PayloadForm,
    request_rows: RequestRows<'_>,
    busy: &Cell<Option<Busy>>,
    evidence: Option<&RefCell<Vec<serde_json::Value>>>,
) -> EngineResult<(OpOutcome, Vec<SideEffect>)> {
    let Some(registered) = ctx.schema.table(&op.table) else {
        return Ok((
            Err(StoredOpResult::error(op_index, ErrorCode::UnknownTable, format!("table {} is not handled by this server", preview(&op.table))).into()),
            Vec::new(),
        ));
    };
    if let Allowed::Denied { .. } = ctx.allowed {
        return Ok((
            Err(StoredOpResult::error(
                op_index,
                ErrorCode::Forbidden,
                "no allowed scopes for this actor (resolver failed or none configured, §3.4 step 4)",
            )
            .into()),
            Vec::new(),
        ));
    }
    let target = Target {
        ctx,
        table: table_schema(registered),
        sql: &registered.sql,
        validator: registered.validator,
        op_index,
        op,
        form,
        request_rows,
        busy,
        evidence,
        effects: RefCell::default(),
    };
    let outcome = target.apply();
    let effects = target.effects.take();
    match outcome {
        Ok(change) => Ok((Ok(change.map(|c| restamped(c, &effects.restamped))), effects.side_effects)),
        Err(Stop::Record(record)) => Ok((Err(*record), Vec::new())),
        Err(Stop::Fatal(e)) => Err(e),
    }
}

/// `change` as the table holds it: a user trigger's rewrite of the row
/// ([`crate::engine::commit::guard`]) replaces its payload and scopes.
fn restamped(mut change: StagedChange, restamped: &[Restamp]) -> StagedChange {
    if let Some(r) = restamped.iter().rev().find(|r| r.table == change.table && r.row_id == change.row_id) {
        change.payload = Some(r.payload.clone());
        change.scopes.clone_from(&r.scopes);
    }
    change
}
