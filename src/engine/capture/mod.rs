//! Plain SQL writes become commits (issue 9; SPEC §6.10 server-authored
//! commits; docs/src/guide/plain-sql.md "Writing with plain SQL").
//!
//! `INSERT`, `UPDATE`, `DELETE` and `COPY … FROM` on an app table, by any role
//! allowed to write it, are captured by the table's triggers
//! ([`crate::store::capture::triggers`]) in the writer's own transaction:
//! - per statement, before any row: the partition comes from
//!   `syncular.partition` (unset → `syncular.partition_required`) and its
//!   registry row exists; the partition's counter row is taken only at the
//!   statement's end, by its log write — rows first, then the counter, the
//!   push's order, so a single-statement write and a push cannot deadlock on
//!   it (a transaction that writes again after a captured statement holds the
//!   counter while it locks rows: a push waiting for that counter while
//!   holding one of those rows is a deadlock Postgres detects, 40P01);
//! - per row ([`row`]): the row-codec payload is encoded from the typed
//!   columns (the bytes a client would push for those values), the row id
//!   from the primary key, the stored scopes from the scope columns, the
//!   version 1 or the stored one + 1; what clients could not hold, and writes
//!   of computed or immutable columns, fail the statement;
//! - per statement, after the rows ([`statement`]): one commit per statement
//!   and event (an `INSERT … ON CONFLICT DO UPDATE` that both inserts and
//!   updates writes two) — the next dense `commitSeq`, the header (client id
//!   `sql:<actor>`, actor `syncular.actor_id` or the current role), the
//!   changes and their scope index, the row-scope index and tombstones
//!   (set-based from the transition table), and the commit NOTIFY.
//!
//! The engine's own app-table writes (pushes, `syncular.commit`; schema
//! rewrites and partition drops for whole tables) hold
//! [`crate::engine::commit::guard::EngineWrite`]: the row they name is
//! logged by the engine (re-read when an app BEFORE ROW trigger may have
//! rewritten it), and every other row written meanwhile — a foreign-key
//! cascade, also onto the same table, an app trigger's own write — is
//! computed here per row and logged in the engine's commit. Captured
//! commits write no `sync_push_results` record (nothing replays them) and
//! no `sync_clients` record.

pub mod row;
pub mod statement;
pub mod validate;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::pg_sys;

use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::schema::{require_registered_schema, RegisteredSchema, RegisteredTable};
use crate::engine::{clock, partition};
use crate::engine::auth::caller::check_partition;
use crate::engine::commit::guard;
use crate::store::capture::triggers;

pub use row::{
    delete_row, insert_row, refused_rewrite, restamped_column_versions, restamped_scopes, stored_truth, update_row, Inserted, Rewritten, RowStorage, Updated,
};
pub use statement::statement_end;

/// One app table being written by a captured statement.
#[derive(Debug)]
pub struct CaptureTable {
    /// The registered schema the statement writes under.
    pub schema: Rc<RegisteredSchema>,
    /// Position of the table in `schema.tables`.
    pub index: usize,
    /// `syncular.partition` of the statement.
    pub partition: String,
}

impl CaptureTable {
    /// The registered table.
    pub fn registered(&self) -> &RegisteredTable {
        &self.schema.tables[self.index]
    }

    /// The IR table name (`tbl`).
    pub fn name(&self) -> &str {
        self.registered().name()
    }

    /// Names this table's layout for the plan cache of its log statements:
    /// relation and schema version (digits only: it goes into SQL text).
    pub fn plan_key(&self, relid: pg_sys::Oid) -> String {
        format!("capture relid {} v{}", u32::from(relid), self.schema.version)
    }
}

thread_local! {
    /// relid → the table context of the statement in progress on it.
    static CONTEXT: RefCell<HashMap<u32, Rc<CaptureTable>>> = RefCell::new(HashMap::new());
    /// Captured statements in progress (their BEFORE STATEMENT trigger fired,
    /// their AFTER STATEMENT trigger not yet), innermost last.
    static OPEN: RefCell<Vec<OpenStatement>> = const { RefCell::new(Vec::new()) };
}

/// A captured statement in progress.
#[derive(Debug, Clone, Copy)]
struct OpenStatement {
    /// The subtransaction it started in.
    subtransaction: u32,
    /// [`crate::engine::commit::log_writes`] when it started.
    log_writes: u64,
}

/// What happened around a captured statement while it ran (app triggers'
/// nested writes; [`statement_closed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nested {
    /// It ran from an app trigger of another captured statement still in progress.
    pub enclosed: bool,
    /// A nested statement or commit logged rows while it ran.
    pub logged_meanwhile: bool,
}

/// A captured statement starts (its BEFORE STATEMENT trigger).
pub fn statement_opened() {
    let open = OpenStatement { subtransaction: guard::current_subtransaction(), log_writes: crate::engine::commit::log_writes() };
    OPEN.with(|o| o.borrow_mut().push(open));
}

/// A captured statement ends (its AFTER STATEMENT trigger): what happened
/// around it. Without its start on record (never expected) it assumes a
/// nested write logged rows: the careful log form is right either way.
pub fn statement_closed() -> Nested {
    OPEN.with(|o| {
        let mut o = o.borrow_mut();
        let started = o.pop();
        Nested {
            enclosed: !o.is_empty(),
            logged_meanwhile: started.is_none_or(|s| s.log_writes != crate::engine::commit::log_writes()),
        }
    })
}

/// Subtransaction `aborted` rolled back: the statements it started ended
/// there (their AFTER STATEMENT triggers never fire). `None`: the whole
/// transaction ended. Never fails (it runs while Postgres aborts).
pub fn statements_aborted(aborted: Option<u32>) {
    let _ = OPEN.try_with(|o| {
        if let Ok(mut o) = o.try_borrow_mut() {
            match aborted {
                Some(sub) => o.retain(|s| s.subtransaction < sub),
                None => o.clear(),
            }
        }
    });
}

/// The partition of a captured write: the engine's, when an engine write
/// (a push) caused it — a foreign-key cascade onto another app table —, else
/// `syncular.partition`. Errors: `syncular.partition_required`,
/// `syncular.invalid_argument` (longer than the sync functions accept).
fn required_partition(tbl: &str) -> EngineResult<String> {
    let partition = match guard::engine_partition() {
        Some(p) => p,
        None => crate::settings::partition().ok_or_else(|| {
            EngineError::host(
                HostCode::PartitionRequired,
                format!(
                    "a plain SQL write to synced table {tbl:?} needs its partition: SET syncular.partition = '<partition>' (or SET LOCAL) first"
                ),
            )
        })?,
    };
    check_partition(&partition)?;
    Ok(partition)
}

/// The refusal of a statement during which the partition setting changed.
pub fn partition_changed(tbl: &str, started: &str, now: &str) -> EngineError {
    EngineError::host(
        HostCode::WriteRefused,
        format!(
            "syncular.partition changed while a statement on synced table {tbl:?} ran (from {started:?} to {now:?}): a statement writes one partition"
        ),
    )
}

/// Before the first row of a captured statement on `relid` (IR table
/// `tbl`): resolves the partition and the registered table and creates the
/// partition's registry row on first sight. Errors: `syncular.partition_required`,
/// `syncular.no_schema`, `syncular.internal` (a trigger on a table that is
/// not this registered app table), store failures.
pub fn statement_start(relid: pg_sys::Oid, tbl: &str) -> EngineResult<()> {
    if crate::engine::validators::running() {
        return Err(EngineError::host(
            HostCode::WriteRefused,
            format!(
                "a validator wrote synced table {tbl:?}: validators must not change synced tables (§6.7, §6.8) — \
                 the write would reach clients as its own commit ahead of the one being validated"
            ),
        ));
    }
    let partition = required_partition(tbl)?;
    let schema = require_registered_schema()?;
    // The statement locked the app table before this read, which orders it against a
    // bump's ALTER TABLE under READ COMMITTED; under REPEATABLE READ the snapshot may
    // predate a bump: 40001 then (schema_store::confirm_marker_in_snapshot).
    crate::store::schema_store::confirm_marker_in_snapshot(i64::from(schema.version))?;
    let index = schema.tables.iter().position(|t| t.name() == tbl).ok_or_else(|| {
        EngineError::internal(format!("capture trigger for {tbl:?}, which the registered schema does not declare"))
    })?;
    // The relation check once per table and loaded schema (a bump loads a new one).
    let key = u32::from(relid);
    let checked = CONTEXT.with(|c| c.borrow().get(&key).is_some_and(|t| Rc::ptr_eq(&t.schema, &schema) && t.index == index));
    if !checked && triggers::table_oid(&schema.app_schema, tbl)? != Some(relid) {
        return Err(EngineError::internal(format!(
            "capture trigger for {tbl:?} fired on another table: capture triggers belong to the registered app tables only"
        )));
    }
    // Before any row of the statement: a drop batch of the partition waits for this
    // transaction, or this statement for the batch (store::lifecycle::fence).
    crate::store::lifecycle::fence::share_writes(&partition);
    // The registry (and counter) row exists before any row is written; the
    // counter row itself is taken only by the commit's log write at the
    // statement's end — after the rows, as a push takes it.
    partition::ensure_registered(&partition, clock::now_ms()?)?;
    let t = Rc::new(CaptureTable { schema, index, partition });
    CONTEXT.with(|c| c.borrow_mut().insert(u32::from(relid), t));
    Ok(())
}

/// The context of the statement in progress on `relid` (set up by
/// [`statement_start`]). Errors: as [`statement_start`]; `syncular.write_refused`
/// when the partition setting changed since the statement started.
pub fn context(relid: pg_sys::Oid, tbl: &str) -> EngineResult<Rc<CaptureTable>> {
    let partition = required_partition(tbl)?;
    let key = u32::from(relid);
    let hit = CONTEXT.with(|c| c.borrow().get(&key).filter(|t| t.name() == tbl).cloned());
    if let Some(t) = hit {
        if !guard::engine_writing() {
            if t.partition != partition {
                return Err(partition_changed(tbl, &t.partition, &partition));
            }
            return Ok(t);
        }
        // Under an engine write no statement trigger set the context up: one left by an
        // earlier statement (another partition, an older schema) is not this write's.
        if t.partition == partition && Rc::ptr_eq(&t.schema, &require_registered_schema()?) {
            return Ok(t);
        }
    }
    statement_start(relid, tbl)?;
    CONTEXT
        .with(|c| c.borrow().get(&key).cloned())
        .ok_or_else(|| EngineError::internal("capture context vanished"))
}

/// The refusal of a write to app table `tbl` that has a BEFORE ROW trigger
/// `name` running after the capture's (what it changes would not reach clients).
pub fn trigger_after_capture(tbl: &str, name: &str) -> EngineError {
    EngineError::host(
        HostCode::WriteRefused,
        format!(
            "BEFORE ROW trigger {name:?} on synced table {tbl:?} runs after the capture (triggers run in name order): what it changes would be stored but never reach clients — rename it to sort before \"zz_syncular_capture_row\""
        ),
    )
}

/// The refusal of a `TRUNCATE` of app table `tbl`.
pub fn truncate_refused(tbl: &str) -> EngineError {
    EngineError::host(
        HostCode::WriteRefused,
        format!(
            "TRUNCATE of synced table {tbl:?} cannot be expressed as commits: DELETE the rows of one partition instead (SET syncular.partition = '…'; DELETE FROM … WHERE _sync_partition = current_setting('syncular.partition'))"
        ),
    )
}

/// (Re)installs the capture triggers on every app table of the registered
/// schema; returns how many tables. Errors: `syncular.no_schema`, store failures.
pub fn install_all() -> EngineResult<i32> {
    crate::engine::distribution::refuse_worker()?;
    if crate::engine::distribution::is_distributed()? {
        return Err(EngineError::host(
            HostCode::WriteRefused,
            "the app tables are distributed by Citus, which runs triggers on the shards: plain SQL writes cannot be captured there; write through syncular.sync or syncular.commit (docs/src/operate/citus.md)",
        ));
    }
    let schema = require_registered_schema()?;
    for t in &schema.tables {
        triggers::install(&schema.app_schema, t.name())?;
    }
    Ok(i32::try_from(schema.tables.len()).unwrap_or(i32::MAX))
}
