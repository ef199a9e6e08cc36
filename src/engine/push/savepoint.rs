//! The per-commit subtransaction of the push (SPEC §6.4, §2.3): every
//! `PUSH_COMMIT` runs inside its own internal subtransaction — PL/pgSQL's
//! `BEGIN … EXCEPTION` pattern (BeginInternalSubTransaction, then Release or
//! RollbackAndRelease, restoring the memory context and resource owner).
//!
//! Unlike `store::spi::subtransaction::run` (which rolls back only on an ERROR),
//! this one also rolls back when the closure *returns* `Err` — a commit-level
//! rejection decided in Rust — and hands back a caught Postgres ERROR whole,
//! so the push can turn selected SQLSTATEs (unique violation, data
//! exceptions) into a rejected result and re-raise everything else unchanged.

use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::{PgSqlErrorCode, PgTryBuilder};
use std::panic::AssertUnwindSafe;

/// How one subtransaction ended.
pub enum SavepointOutcome<T, E> {
    /// The closure returned `Ok`: the subtransaction was released, its writes
    /// belong to the caller's transaction.
    Released(T),
    /// The closure returned `Err`: every write it made was rolled back.
    RolledBack(E),
    /// The closure raised a Postgres ERROR (or panicked): rolled back; the
    /// error is returned so the caller can classify or re-raise it
    /// ([`CaughtError::rethrow`]). Boxed: the report is large and rare.
    Raised(Box<CaughtError>),
}

/// The SQLSTATE of a caught error (`ERRCODE_INTERNAL_ERROR` for a Rust panic).
pub fn caught_sqlstate(caught: &CaughtError) -> PgSqlErrorCode {
    match caught {
        CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) => r.sql_error_code(),
        CaughtError::RustPanic { .. } => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
    }
}

/// The SQLSTATE class (first two characters) of `code`, e.g. `"23"`.
pub fn sqlstate_class(code: PgSqlErrorCode) -> String {
    let mut text = sqlstate_text(code);
    text.truncate(2);
    text
}

/// The five-character SQLSTATE of `code`, e.g. `"P0001"`.
pub fn sqlstate_text(code: PgSqlErrorCode) -> String {
    let mut raw = code as i32;
    let mut out = String::with_capacity(5);
    for _ in 0..5 {
        out.push(char::from(((raw & 0x3F) as u8) + b'0'));
        raw >>= 6;
    }
    out
}

/// Runs `f` in a new internal subtransaction of the current transaction (see
/// the module docs). Must be called inside a transaction (every SQL function
/// call is). Row locks taken *before* the call survive a rollback.
pub fn run<T, E>(f: impl FnOnce() -> Result<T, E>) -> SavepointOutcome<T, E> {
    // SAFETY: inside a backend transaction; context and owner are saved and
    // restored exactly as PL/pgSQL's exec_stmt_block does.
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
    let rollback = move || unsafe {
        pg_sys::MemoryContextSwitchTo(old_context);
        pg_sys::RollbackAndReleaseCurrentSubTransaction();
        pg_sys::MemoryContextSwitchTo(old_context);
        pg_sys::CurrentResourceOwner = old_owner;
    };
    PgTryBuilder::new(AssertUnwindSafe(|| match f() {
        Ok(value) => {
            // SAFETY: the subtransaction begun above is the current one.
            unsafe { pg_sys::ReleaseCurrentSubTransaction() };
            restore();
            SavepointOutcome::Released(value)
        }
        Err(e) => {
            rollback();
            SavepointOutcome::RolledBack(e)
        }
    }))
    .catch_others(|caught| {
        // pgrx's FFI guard already copied and flushed the error state.
        rollback();
        SavepointOutcome::Raised(Box::new(caught))
    })
    .execute()
}
