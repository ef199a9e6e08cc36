//! The per-statement half of the capture (module docs of [`super`]): the
//! statement's rows become one commit through the commit writer
//! ([`crate::engine::commit::write_statement`]).

use std::ffi::CStr;

use pgrx::pg_sys;

use super::{context, Nested};
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::{clock, commit};
use crate::store::capture::transition::{self as log, CapturedOp};
use crate::store::log::statement::{Nesting, StatementAuthor};

/// The name of the current role (`SET ROLE` included; a SECURITY DEFINER
/// function does not change it).
fn current_role_name() -> EngineResult<String> {
    // SAFETY: GetOuterUserId reads backend state; GetUserNameFromId(…, noerr = true)
    // returns NULL (never raises) for a role that no longer exists.
    let name = unsafe { pg_sys::GetUserNameFromId(pg_sys::GetOuterUserId(), true) };
    if name.is_null() {
        return Err(EngineError::internal("the current role has no name"));
    }
    // SAFETY: a NUL-terminated palloc'd string.
    Ok(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
}

/// The actor of captured writes: `syncular.actor_id`, else the current role.
pub fn actor_id() -> EngineResult<String> {
    match crate::settings::actor_id() {
        Some(a) => Ok(a),
        None => current_role_name(),
    }
}

/// Writes the rows of the finished statement `op` on `relid` (IR table
/// `tbl`) as one applied commit and queues its notification; `nested`: what
/// app triggers' nested writes did around it ([`super::statement_closed`]).
/// Errors: store failures, `syncular.partition_required`.
///
/// # Safety
/// `trigger_data` must be the `TriggerData` of the AFTER STATEMENT trigger in
/// progress, whose transition table holds the statement's rows.
pub unsafe fn statement_end(
    relid: pg_sys::Oid,
    tbl: &str,
    op: CapturedOp,
    trigger_data: *mut pg_sys::TriggerData,
    nested: Nested,
) -> EngineResult<()> {
    let t = context(relid, tbl)?;
    let partition = t.partition.as_str();
    let plan_key = t.plan_key(relid);
    // Every row in the statement's partition (a nested statement could have changed the setting).
    // SAFETY: forwarded from the caller.
    let outside = unsafe { log::with_transition_tables(trigger_data, |c| log::rows_outside_partition(c, &plan_key, partition, op)) }?;
    if outside > 0 {
        return Err(super::partition_changed(tbl, partition, "another partition for some of its rows"));
    }
    // §5.9.6 / §5.9.4: referenced blobs must be stored; then the reference index.
    let blob_columns = crate::engine::schema::blob_columns(&t.registered().table);
    // SAFETY: forwarded from the caller.
    unsafe { crate::engine::blobs::refs::captured(trigger_data, &plan_key, partition, tbl, op, &blob_columns) }?;
    let now_ms = clock::now_ms()?;
    let actor = actor_id()?;
    let client_id = format!("sql:{actor}");
    let client_commit_id = uuid::Uuid::new_v4().to_string();
    // One entry per variable (patterns may share one), as the stored scopes.
    let mut scope_columns: Vec<(String, String)> = Vec::new();
    for s in &t.registered().table.scopes {
        if scope_columns.iter().all(|(v, _)| *v != s.variable) {
            scope_columns.push((s.variable.clone(), s.column.clone()));
        }
    }
    let author = StatementAuthor {
        partition,
        client_id: &client_id,
        client_commit_id: &client_commit_id,
        actor_id: &actor,
        created_at_ms: now_ms,
    };
    // An app trigger's nested write logged rows meanwhile: log only what the table still holds.
    let nesting = Nesting {
        current_rows: nested.logged_meanwhile.then(|| t.registered().sql.qualified_name.as_str()),
        enclosed: nested.enclosed,
    };
    // SAFETY: forwarded from the caller.
    unsafe { commit::write_statement(trigger_data, &plan_key, &author, tbl, op, &scope_columns, nesting) }?;
    Ok(())
}
