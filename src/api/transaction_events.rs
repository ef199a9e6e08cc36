//! What the extension keeps per transaction in backend memory follows
//! Postgres's transaction events: a rolled-back subtransaction (an app
//! trigger's `EXCEPTION` block, a savepoint) takes the engine-write guard's
//! records made in it ([`crate::engine::commit::guard::subtransaction_aborted`])
//! and the captured statements it started
//! ([`crate::engine::capture::statements_aborted`]); a transaction's end
//! ends every captured statement.

use pgrx::pg_sys;

use crate::engine::capture;
use crate::engine::commit::guard;

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_subtransaction(
    event: pg_sys::SubXactEvent::Type,
    my_subid: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        guard::subtransaction_aborted(my_subid);
        capture::statements_aborted(Some(my_subid));
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_transaction(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    if event == pg_sys::XactEvent::XACT_EVENT_ABORT || event == pg_sys::XactEvent::XACT_EVENT_COMMIT {
        capture::statements_aborted(None);
    }
}

/// Registers the callbacks (once per backend, from `_PG_init`).
pub fn register() {
    // SAFETY: static functions with no argument, registered once per backend.
    unsafe {
        pg_sys::RegisterSubXactCallback(Some(on_subtransaction), std::ptr::null_mut());
        pg_sys::RegisterXactCallback(Some(on_transaction), std::ptr::null_mut());
    }
}
