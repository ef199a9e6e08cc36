//! A captured plain SQL statement's commit (docs/src/guide/plain-sql.md "Writing with plain
//! SQL"): its `commitSeq` and header, its log rows set-based from the
//! statement's transition table, and its NOTIFY.

use pgrx::pg_sys;

use crate::engine::error::EngineResult;
use crate::engine::notify;
use crate::store::capture::transition::{self, CapturedOp};
use crate::store::log::statement::{self as log, Nesting, StatementAuthor};

/// Writes the rows of the finished statement `op` on IR table `tbl` as one
/// applied commit of `author` and queues its notification; returns its
/// `commitSeq`. The partition's counter row is taken here, after the rows
/// (the push's order). `plan_key` names the app table's layout for the kept
/// plans; `scope_columns` its `(variable, column)` pairs, one per variable.
/// `nesting`: what app triggers' nested writes mean for this statement's log
/// ([`Nesting`]). Errors: store failures (a missing counter row among them:
/// `capture::statement_start` creates it first).
///
/// # Safety
/// `trigger_data` must be the `TriggerData` of the AFTER STATEMENT trigger in
/// progress, whose transition table holds the statement's rows.
pub unsafe fn write_statement(
    trigger_data: *mut pg_sys::TriggerData,
    plan_key: &str,
    author: &StatementAuthor<'_>,
    tbl: &str,
    op: CapturedOp,
    scope_columns: &[(String, String)],
    nesting: Nesting<'_>,
) -> EngineResult<i64> {
    // SAFETY: forwarded from the caller.
    let commit_seq = unsafe {
        transition::with_transition_tables(trigger_data, |c| {
            let commit_seq = log::allocate_commit(c, author)?;
            log::write_statement_log(c, plan_key, author.partition, commit_seq, tbl, op, scope_columns, nesting)?;
            Ok(commit_seq)
        })
    }?;
    super::count_log_write();
    notify::notify_commit(None, author.partition, commit_seq)?;
    Ok(commit_seq)
}
