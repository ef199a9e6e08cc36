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
use crate::engine::scope_match::parse_stored_scopes_lenient;
use crate::engine::blobs::refs as blob_refs;
use crate::engine::push::validator as commit_validator;
use crate::engine::{crdt, validators};
pub use crate::engine::commit::{scopes_json, StagedChange};
use crate::engine::commit::guard::{EngineWrite, Effects, Restamp, SideEffect};
use crate::store::app_rows::{self, AppRowWrite, AppTableSql, StoredRow};
use crate::store::log::row_scopes;

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

    /// Delete of an existing row: authorize the stored row, remove it and its
    /// scope entries, emit a delete tagged with the stored scopes.
    fn delete(&self, stored: StoredRow) -> Result<StagedChange, Stop> {
        let partition = self.ctx.partition.as_str();
        let scopes = parse_stored_scopes_lenient(&stored.scopes_json);
        authorize(self.table, &scopes, &self.ctx.allowed, self.op_index)?;
        let stored_row = self.stored_row_for_validator(&stored)?;
        self.validate(Op::Delete, None, stored_row.as_ref(), (Some(stored.version), None))?;
        self.write(|| {
            app_rows::delete_app_row(self.sql, partition, &self.op.row_id)?;
            row_scopes::delete_row_scopes(partition, &self.table.name, &self.op.row_id)
        })?;
        if self.table.layout().columns.iter().any(|c| c.ty == ColumnType::BlobRef) {
            crate::store::blobs::refs::delete_row_blob_refs(partition, &self.table.name, &self.op.row_id)?;
        }
        Ok(self.change(Op::Delete, None, scopes, None, false))
    }

    /// The version check of an update: SPEC 0.15.48 §6.2 for a full row
    /// (`baseVersion` 0 or ≠ stored ⇒ conflict), the column-level rule for a
    /// sparse one (module docs). `Err` terminates the commit.
    fn check_versions(&self, stored: &StoredRow, versions: &ColumnVersions, decoded: &Decoded) -> Result<(), Stop> {
        let Some(base) = self.op.base_version else { return Ok(()) };
        match self.form {
            PayloadForm::Full => {
                if base == 0 || base != stored.version {
                    return Err(StoredOpResult::conflict(self.op_index, stored.version, &stored.payload, None).into());
                }
                Ok(())
            }
            PayloadForm::Sparse => {
                if base > stored.version {
                    return Err(self.error(
                        ErrorCode::InvalidRequest,
                        format!("baseVersion {base} exceeds the stored server version {} (§6.2)", stored.version),
                    ));
                }
                let pk = self.table.primary_key_index;
                let layout = self.table.layout();
                let comparable =
                    |i: usize| i != pk && decoded.present(i) && layout.columns.get(i).is_some_and(|c| c.ty != ColumnType::Crdt);
                match versions.conflict(layout.len(), base, comparable) {
                    None => Ok(()),
                    Some(columns) => Err(StoredOpResult::conflict(
                        self.op_index,
                        stored.version,
                        &stored.payload,
                        Some(&columns),
                    )
                    .into()),
                }
            }
        }
    }

    /// The stored row's column versions (a malformed value reads as NULL,
    /// with a WARNING: [`ColumnVersions::read_or_reset`]).
    fn column_versions(&self, stored: &StoredRow) -> ColumnVersions {
        ColumnVersions::read_or_reset(
            stored.column_versions.as_deref(),
            stored.version,
            format_args!("{:?}/{:?}", self.table.name, self.op.row_id),
        )
    }

    /// Update of an existing row (§6.2, §3.4 rules 2 and 5; a sparse payload
    /// merges into the stored row).
    fn update(&self, stored: StoredRow, decoded: Decoded, payload: &[u8]) -> Result<StagedChange, Stop> {
        let scopes = parse_stored_scopes_lenient(&stored.scopes_json);
        authorize(self.table, &scopes, &self.ctx.allowed, self.op_index)?;
        let stored_row = self.decode_stored(&stored)?;
        let versions = self.column_versions(&stored);
        let mut row = decoded.row.clone();
        let mut reencode = false;
        match self.form {
            PayloadForm::Full => {
                self.check_versions(&stored, &versions, &decoded)?;
                // §3.4 rule 5: scope columns keep their stored values.
                for s in &self.table.scopes {
                    if !identical(&row[s.column_index], &stored_row[s.column_index]) {
                        row[s.column_index] = stored_row[s.column_index].clone();
                        reencode = true;
                    }
                }
            }
            PayloadForm::Sparse => {
                if let Some(s) = self
                    .table
                    .scopes
                    .iter()
                    .find(|s| decoded.present(s.column_index) && !identical(&row[s.column_index], &stored_row[s.column_index]))
                {
                    return Err(self.error(
                        ErrorCode::InvalidRequest,
                        format!(
                            "scope column {:?} of {:?} is immutable on update (§3.4): delete the row and insert it with the new scope",
                            self.table.columns[s.column_index].name, self.table.name
                        ),
                    ));
                }
                self.check_versions(&stored, &versions, &decoded)?;
                // Absent columns keep their stored values; what is logged is the merged row.
                for (i, slot) in row.iter_mut().enumerate() {
                    if !decoded.present(i) {
                        slot.clone_from(&stored_row[i]);
                    }
                }
                reencode = true;
            }
        }
        // §5.10.3: only the crdt values the payload carries are merged.
        reencode |= merge_crdt(self.table, &mut row, Some(&stored_row), &|i| !decoded.present(i), self.op_index)?;
        let blob_ids = row_blob_ids(self.table.layout(), &row);
        self.check_blobs(&blob_ids)?;
        let new_payload = if reencode {
            encode_row(self.table.layout(), &row).map_err(|e| {
                EngineError::internal(format!("re-encoding a merged, scope-stripped or crdt-merged row failed: {}", e.message))
            })?
        } else {
            payload.to_vec()
        };
        self.validate(Op::Upsert, Some(&row), Some(&stored_row), (Some(stored.version), Some(stored.version + 1)))?;
        let version = stored.version + 1;
        let pk = self.table.primary_key_index;
        let column_versions = match self.form {
            // A full row names every column: the values tell what changed.
            PayloadForm::Full => versions.next(row.len(), pk, version, |i| !identical(&row[i], &stored_row[i])),
            PayloadForm::Sparse => versions.next(row.len(), pk, version, |i| decoded.present(i)),
        };
        let scopes_text = scopes_json(&scopes);
        let present = decoded.present.as_deref();
        self.write(|| {
            app_rows::update_app_row(
                self.sql,
                &AppRowWrite {
                    partition: &self.ctx.partition,
                    row_id: &self.op.row_id,
                    values: &row,
                    version,
                    scopes_json: &scopes_text,
                    payload: &new_payload,
                    column_versions: column_versions.as_deref(),
                    present,
                },
            )
        })?;
        // The row's scopes are unchanged (rule 5): its sync_row_scopes entries stay.
        let old_ids = row_blob_ids(self.table.layout(), &stored_row);
        blob_refs::record_row(&self.ctx.partition, &self.table.name, &self.op.row_id, &old_ids, &blob_ids)?;
        Ok(self.change(Op::Upsert, Some(version), scopes, Some(new_payload), false))
    }

    /// The checks of a sparse upsert of an absent row before it may insert
    /// (module docs): authorization whenever the payload carries its scope
    /// values, then `sync.row_missing` / `sync.row_deleted`.
    fn check_sparse_insert(&self, decoded: &Decoded) -> Result<(), Stop> {
        let carries_scopes = self.table.scopes.iter().all(|s| decoded.present(s.column_index));
        let scopes = extract_scopes(self.table, &decoded.row).ok().filter(|_| carries_scopes);
        if let Some(scopes) = &scopes {
            authorize(self.table, scopes, &self.ctx.allowed, self.op_index)?;
        }
        if self.op.base_version.is_some_and(|b| b != 0) {
            return Err(match scopes {
                None => self.error(
                    ErrorCode::Forbidden,
                    format!("upsert into {:?} has no value for its scope columns (§3.4)", self.table.name),
                ),
                Some(_) => self.error(
                    ErrorCode::RowMissing,
                    "upsert with a non-zero baseVersion targets an absent row (§6.2)",
                ),
            });
        }
        if decoded.partial() {
            return Err(self.error(ErrorCode::RowMissing, "a partial payload targets an absent row (§6.3)"));
        }
        // A delete earlier in this request (its tombstone is written with the request's log);
        // a stored tombstone is probed by the insert (`insert`) — both after the partial check,
        // so a partial payload of a deleted row is `sync.row_missing` either way.
        if self.op.base_version.is_none() && (self.request_rows)(&self.table.name, &self.op.row_id) == Some(true) {
            return Err(self.row_deleted());
        }
        Ok(())
    }

    /// `sync.row_deleted`: an unversioned upsert of a row deleted within the
    /// retention horizon.
    fn row_deleted(&self) -> Stop {
        self.error(
            ErrorCode::RowDeleted,
            "the row was deleted: an upsert without baseVersion does not recreate it within the retention horizon (send baseVersion 0 to insert it again)",
        )
    }

    /// Insert of an absent row: authorize the payload's scopes (§3.4 step 2),
    /// `baseVersion ≠ 0` ⇒ `sync.row_missing` (only after authorization, so
    /// absence is not disclosed), write version 1 (its scope entries go with the request's log).
    fn insert(&self, decoded: Decoded, payload: &[u8]) -> Result<StagedChange, Stop> {
        if self.form == PayloadForm::Sparse {
            self.check_sparse_insert(&decoded)?;
        }
        // The tombstone rule of an unversioned sparse upsert: probed by the insert statement
        // itself (a tombstoned row rejects the commit, which rolls the insert back), or first
        // under router statements (Citus).
        let probe = self.form == PayloadForm::Sparse && self.op.base_version.is_none();
        let router = crate::settings::router_statements();
        if probe && router && crate::store::log::tombstones::exists(&self.ctx.partition, &self.table.name, &self.op.row_id)? {
            return Err(self.row_deleted());
        }
        let probe_in_insert = probe && !router;
        let mut row = decoded.row;
        let partition = self.ctx.partition.as_str();
        let scopes = extract_scopes(self.table, &row).map_err(|variable| {
            self.error(
                ErrorCode::Forbidden,
                format!(
                    "insert into {:?} has no value for scope variable {variable:?} (§3.4)",
                    self.table.name
                ),
            )
        })?;
        authorize(self.table, &scopes, &self.ctx.allowed, self.op_index)?;
        if let Some((variable, _)) = scopes.iter().find(|(_, v)| v.contains('\0')) {
            return Err(self.error(
                ErrorCode::InvalidRequest,
                format!("scope value of {variable:?} contains a NUL character, which this server cannot store"),
            ));
        }
        if self.op.base_version.is_some_and(|b| b != 0) {
            return Err(self.error(
                ErrorCode::RowMissing,
                "upsert with a non-zero baseVersion targets an absent row (§6.2)",
            ));
        }
        let merged = merge_crdt(self.table, &mut row, None, &|_| false, self.op_index)?;
        // A sparse payload is stored as the full row it carries (every column present).
        let payload = if merged || self.form == PayloadForm::Sparse {
            encode_row(self.table.layout(), &row).map_err(|e| {
                EngineError::internal(format!("encoding an inserted row failed: {}", e.message))
            })?
        } else {
            payload.to_vec()
        };
        let blob_ids = row_blob_ids(self.table.layout(), &row);
        self.check_blobs(&blob_ids)?;
        self.validate(Op::Upsert, Some(&row), None, (None, Some(1)))?;
        let scopes_text = scopes_json(&scopes);
        let tombstoned = self.write(|| {
            app_rows::insert_app_row(
                self.sql,
                &AppRowWrite {
                    partition,
                    row_id: &self.op.row_id,
                    values: &row,
                    version: 1,
                    scopes_json: &scopes_text,
                    payload: &payload,
                    column_versions: None,
                    present: None,
                },
                probe_in_insert,
            )
        })?;
        if tombstoned {
            return Err(self.row_deleted());
        }
        // The row's sync_row_scopes entries are written with the request's log
        // (`StagedChange::inserted`; a leftover one is kept, ON CONFLICT).
        blob_refs::record_row(partition, &self.table.name, &self.op.row_id, &[], &blob_ids)?;
        Ok(self.change(Op::Upsert, Some(1), scopes, Some(payload), true))
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
        if self.op.row_id.contains('\0') {
            return Err(self.error(
                ErrorCode::InvalidRequest,
                format!(
                    "rowId {:?} contains a NUL character, which this server cannot store",
                    self.op.row_id
                ),
            ));
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
            Err(StoredOpResult::error(op_index, ErrorCode::UnknownTable, format!("table {:?} is not handled by this server", op.table)).into()),
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

/// A row operation `op_index`'s write caused without naming it
/// ([`crate::engine::commit::guard`]: a foreign-key cascade, an app
/// trigger's write) as a further change of the commit: a deleted row's
/// scope entries and blob references go, a written row's blob references
/// are checked (§5.9.6) and recorded (§5.9.4). The capture's row trigger
/// computed it as for plain SQL. Errors: `blob.not_found` terminates the
/// commit; store failures.
pub fn side_effect_change(ctx: &SyncContext<'_>, op_index: i32, side: SideEffect) -> EngineResult<OpOutcome> {
    let partition = ctx.partition.as_str();
    let (old_ids, new_ids) = &side.blob_ids;
    if side.op == Op::Delete {
        row_scopes::delete_row_scopes(partition, &side.table, &side.row_id)?;
        let blob_columns = ctx.schema.table(&side.table).is_some_and(|t| !crate::engine::schema::blob_columns(table_schema(t)).is_empty());
        if blob_columns {
            crate::store::blobs::refs::delete_row_blob_refs(partition, &side.table, &side.row_id)?;
        }
    } else {
        if let Some(missing) = blob_refs::first_missing(partition, new_ids)? {
            return Ok(Err(StoredOpResult::error(
                op_index,
                ErrorCode::BlobNotFound,
                blob_refs::not_found_message(&side.table, &side.row_id, &missing),
            )
            .into()));
        }
        blob_refs::record_row(partition, &side.table, &side.row_id, old_ids, new_ids)?;
    }
    Ok(Ok(Some(StagedChange {
        table: side.table,
        row_id: side.row_id,
        op: side.op,
        row_version: side.row_version,
        scopes: side.scopes,
        payload: side.payload,
        inserted: side.inserted,
    })))
}
