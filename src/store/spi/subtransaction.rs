//! Running a closure inside an internal subtransaction (the plpgsql
//! `BEGIN … EXCEPTION` pattern): on success the subtransaction is released
//! (its writes become part of the caller's transaction); on a Postgres ERROR
//! or Rust panic inside it, the subtransaction is rolled back — every write it
//! made vanishes — and the error is returned as data, leaving the caller's
//! transaction usable.
//!
//! Used for the scope resolver (§3.2 rule 5: a raising resolver means
//! revoked/forbidden) and available for per-commit isolation (§6.4).

use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::PgTryBuilder;
use std::panic::AssertUnwindSafe;

/// What a failed subtransaction reports: the Postgres SQLSTATE (5 chars) and
/// the error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubtransactionError {
    /// SQLSTATE, e.g. `"P0001"` for a plpgsql `RAISE`.
    pub sqlstate: String,
    /// The Postgres error message (primary text only).
    pub message: String,
    /// The error's DETAIL, if any (the extension's own errors carry their
    /// §10.1 JSON there).
    pub detail: Option<String>,
}

fn describe(caught: &CaughtError) -> SubtransactionError {
    match caught {
        CaughtError::PostgresError(report)
        | CaughtError::ErrorReport(report)
        | CaughtError::RustPanic { ereport: report, .. } => SubtransactionError {
            sqlstate: sqlstate_text(report.sql_error_code()),
            message: report.message().to_string(),
            detail: report.detail().map(str::to_owned),
        },
    }
}

fn sqlstate_text(code: pgrx::PgSqlErrorCode) -> String {
    // MAKE_SQLSTATE packs 5 six-bit characters, least significant first.
    let mut raw = code as i32;
    let mut out = String::with_capacity(5);
    for _ in 0..5 {
        out.push(char::from(((raw & 0x3F) as u8) + b'0'));
        raw >>= 6;
    }
    out
}

/// Runs `f` in a new internal subtransaction of the current transaction.
///
/// `Ok(value)` when `f` returned normally (the subtransaction is released);
/// `Err(error)` when `f` raised a Postgres ERROR or panicked (the
/// subtransaction is rolled back). Memory context and resource owner are
/// restored either way. Must be called inside a transaction (any SQL
/// function call is).
pub fn run<R>(f: impl FnOnce() -> R) -> Result<R, SubtransactionError> {
    run_rethrowing(f, |_| false)
}

/// [`run`], except that an error whose SQLSTATE satisfies `rethrow` is
/// re-raised unchanged (same SQLSTATE, message, detail) after the
/// subtransaction is rolled back — the caller's transaction then aborts as
/// if the error had never been caught (plpgsql's bare `RAISE;`). Used for
/// errors that say nothing about the closure's answer (query cancel,
/// deadlock, out of memory, …).
pub fn run_rethrowing<R>(
    f: impl FnOnce() -> R,
    rethrow: impl Fn(&str) -> bool,
) -> Result<R, SubtransactionError> {
    let rethrow = AssertUnwindSafe(rethrow);
    // SAFETY: we are in a backend inside a transaction; the memory context
    // and resource owner are saved and restored exactly as PL/pgSQL's
    // exec_stmt_block does around BeginInternalSubTransaction.
    let (old_context, old_owner) = unsafe {
        let ctx = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(ctx);
        (ctx, owner)
    };
    let restore = move || unsafe {
        pg_sys::MemoryContextSwitchTo(old_context);
        pg_sys::CurrentResourceOwner = old_owner;
    };
    PgTryBuilder::new(AssertUnwindSafe(|| {
        let value = f();
        // SAFETY: the subtransaction begun above is the current one.
        unsafe { pg_sys::ReleaseCurrentSubTransaction() };
        restore();
        Ok(value)
    }))
    .catch_others(|caught| {
        let error = describe(&caught);
        // SAFETY: the error state was already flushed by pgrx's FFI guard;
        // rolling back the current subtransaction discards its writes.
        unsafe {
            pg_sys::MemoryContextSwitchTo(old_context);
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        restore();
        if (*rethrow)(&error.sqlstate) {
            caught.rethrow()
        }
        Err(error)
    })
    .execute()
}
