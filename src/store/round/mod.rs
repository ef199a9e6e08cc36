//! The sync round's own statements (engine side: [`crate::engine::round`]):
//! the one context read before anything else ([`context`]) and the wire-3
//! `ROUND_FAILURE` reports ([`failures`]); the commit mode of a pull-only
//! gateway round ([`commit_asynchronously`]).

use pgrx::callbacks::{register_xact_callback, PgXactCallbackEvent};
use pgrx::pg_sys;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

pub mod context;
pub mod failures;

/// Whether the current transaction is the calling statement's own and has written nothing yet:
/// not inside `BEGIN … COMMIT` or a multi-statement simple query, and no transaction id
/// assigned (a statement before it in the same transaction — pipelined before one `Sync`, or in
/// the caller's `DO` block or function — would have written). Read it before the round writes.
pub fn transaction_is_fresh() -> bool {
    // SAFETY: read the backend's transaction state; no arguments.
    unsafe { !pg_sys::IsTransactionBlock() && pg_sys::GetTopTransactionIdIfAny() == pg_sys::InvalidTransactionId }
}

/// `SET LOCAL synchronous_commit TO off` for the current transaction, which the caller found
/// fresh ([`transaction_is_fresh`]) before its own bookkeeping writes; and, at PRE_COMMIT, the
/// value it had back when this backend wrote any WAL record after this call (a statement
/// pipelined after it before one `Sync` — they share the transaction —, the rest of a `DO` block
/// or function, a data-modifying CTE of the same statement, a deferred trigger). So only a
/// transaction whose writes are all this call's commits asynchronously. Used by `syncular.gateway_round` for a request without `PUSH_COMMIT` frames,
/// whose writes are bookkeeping only. Errors: SPI failures.
pub fn commit_asynchronously() -> StoreResult<()> {
    let before = Spi::connect_mut(|client| {
        let t = plan_cache::execute(
            client,
            "SELECT pg_catalog.current_setting('synchronous_commit'), \
                    pg_catalog.set_config('synchronous_commit', 'off', true)",
            Some(1),
            &[],
        )?;
        Ok(t.first().get::<String>(1)?.unwrap_or_else(|| "on".to_owned()))
    })
    .map_err(StoreError::spi("commit_asynchronously"))?;
    let records = wal_records();
    register_xact_callback(PgXactCallbackEvent::PreCommit, move || {
        if wal_records() != records {
            restore_synchronous_commit(&before);
        }
    });
    Ok(())
}

/// WAL records this backend has written (`pgWalUsage`, per backend, never reset).
fn wal_records() -> i64 {
    // SAFETY: a plain read of a backend-local counter that only this process writes.
    unsafe { (*std::ptr::addr_of!(pg_sys::pgWalUsage)).wal_records }
}

/// Puts `synchronous_commit` back to `value` for the rest of the transaction (its COMMIT). At
/// PRE_COMMIT there is no snapshot for SPI: the GUC is set directly, as `set_config(…, true)`
/// does; a failure is an ERROR, which fails the COMMIT (nothing commits asynchronously that
/// must not).
fn restore_synchronous_commit(value: &str) {
    let value = std::ffi::CString::new(value).unwrap_or_else(|_| c"on".to_owned());
    // SAFETY: NUL-terminated strings that outlive the call; a USERSET GUC set LOCAL for the
    // transaction in progress; errors are raised as Postgres ERRORs (elevel ERROR).
    unsafe {
        pg_sys::set_config_option(
            c"synchronous_commit".as_ptr(),
            value.as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_LOCAL,
            true,
            pg_sys::elog::PgLogLevel::ERROR as i32,
            false,
        );
    }
}
