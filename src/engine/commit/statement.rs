//! A captured plain SQL statement's commit (docs/src/guide/plain-sql.md "Writing with plain
//! SQL"): its `commitSeq` and header, its log rows set-based from the
//! statement's transition table, and its NOTIFY.

use pgrx::pg_sys;

use crate::engine::error::EngineResult;
use crate::engine::notify;
use crate::store::capture::transition::{self, CapturedOp};
use crate::store::log::statement::{self as log, StatementAuthor};

/// Writes the rows of the finished statement `op` on IR table `tbl` as one
/// applied commit of `author` and queues its notification; returns its
/// `commitSeq`. The partition's counter row is taken here, after the rows
/// (the push's order). `plan_key` names the app table's layout for the kept
/// plans; `scope_columns` its `(variable, column)` pairs, one per variable.
/// `current_rows` (the app table's qualified name): a nested statement or
/// commit logged rows while this statement ran (an app trigger's write), so
/// only the transition rows the table still holds as they are are logged —
/// a row the nested write changed or removed was logged by it, later than
/// this statement's stale copy would be. Errors: store failures (a missing counter row among them:
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
    current_rows: Option<&str>,
) -> EngineResult<i64> {
    // SAFETY: forwarded from the caller.
    let commit_seq = unsafe {
        transition::with_transition_tables(trigger_data, |c| {
            let commit_seq = log::allocate_commit(c, author)?;
            log::write_statement_log(c, plan_key, author.partition, commit_seq, tbl, op, scope_columns, current_rows)?;
            Ok(commit_seq)
        })
    }?;
    super::count_log_write();
    notify::notify_commit(None, author.partition, commit_seq)?;
    Ok(commit_seq)
}
