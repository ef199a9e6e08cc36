//! The sync round's own statements (engine side: [`crate::engine::round`]):
//! the one context read before anything else ([`context`]) and the wire-3
//! `ROUND_FAILURE` reports ([`failures`]); the commit mode of a pull-only
//! gateway round ([`commit_asynchronously_if_alone`]).

use pgrx::callbacks::{register_xact_callback, PgXactCallbackEvent};
use pgrx::pg_sys;

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

/// Has the current transaction commit with `synchronous_commit = off` — decided at its
/// PRE_COMMIT, and only when this backend wrote no WAL record after this call (no statement
/// pipelined after it before the same `Sync` — they share the transaction —, no rest of a `DO`
/// block or function, no data-modifying CTE of the same statement, no deferred trigger wrote),
/// the transaction is still the call's (a `PREPARE TRANSACTION` leaves pgrx's callback
/// registered for the connection's next transaction) and `synchronous_commit` is `on` (the
/// default) both now and then: any other value — the session's, the role's, or the caller's
/// `SET LOCAL` before or after the call — is a choice left in force. The caller found the
/// transaction fresh ([`transaction_is_fresh`]) before its own bookkeeping writes, so then this
/// call's writes are the transaction's only ones. Nothing is changed before PRE_COMMIT. Used by
/// `syncular.gateway_round` for a request without `PUSH_COMMIT` frames (bookkeeping writes only).
pub fn commit_asynchronously_if_alone() {
    // SAFETY: reads the backend's transaction state; no arguments.
    let xid = unsafe { pg_sys::GetTopTransactionIdIfAny() };
    if xid == pg_sys::InvalidTransactionId || !synchronous_commit_is_on() {
        return; // nothing written (nothing for a COMMIT to wait for), or another level chosen
    }
    let records = wal_records();
    register_xact_callback(PgXactCallbackEvent::PreCommit, move || {
        // SAFETY: as above; the transaction is still in progress at PRE_COMMIT.
        let same = unsafe { pg_sys::GetTopTransactionIdIfAny() } == xid;
        if same && wal_records() == records && synchronous_commit_is_on() {
            commit_asynchronously();
        }
    });
}

/// Whether `synchronous_commit` is `on` (the default: a local flush and, with synchronous
/// standbys, theirs) in this backend now.
fn synchronous_commit_is_on() -> bool {
    // SAFETY: a plain read of the backend's GUC variable.
    let level = unsafe { *std::ptr::addr_of!(pg_sys::synchronous_commit) };
    level == pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_REMOTE_FLUSH as i32
}

/// WAL records this backend has written (`pgWalUsage`, per backend, never reset).
fn wal_records() -> i64 {
    // SAFETY: a plain read of a backend-local counter that only this process writes.
    unsafe { (*std::ptr::addr_of!(pg_sys::pgWalUsage)).wal_records }
}

/// `synchronous_commit = off` for the rest of the transaction (its COMMIT). At PRE_COMMIT there
/// is no snapshot for SPI: the GUC is set directly, as `set_config(…, true)` does; a failure is
/// an ERROR, which fails the COMMIT.
fn commit_asynchronously() {
    // SAFETY: NUL-terminated static strings; a USERSET GUC set LOCAL for the transaction in
    // progress; errors are raised as Postgres ERRORs (elevel ERROR).
    unsafe {
        pg_sys::set_config_option(
            c"synchronous_commit".as_ptr(),
            c"off".as_ptr(),
            pg_sys::GucContext::PGC_USERSET,
            pg_sys::GucSource::PGC_S_SESSION,
            pg_sys::GucAction::GUC_ACTION_LOCAL,
            true,
            pg_sys::elog::PgLogLevel::ERROR as i32,
            false,
        );
    }
}
