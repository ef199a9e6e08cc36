//! Per-backend cache of prepared SPI plans for the sync round's hot
//! statements (DESIGN §4: a push is ~15 statements; parsing and planning
//! each one per call would dominate a single-row commit).
//!
//! [`execute`] prepares `sql` once per backend (`SPI_prepare` +
//! `SPI_keepplan`, keyed by the SQL text) and runs it in read-write mode
//! (a fresh snapshot and command id per statement, so it sees this call's
//! own writes). Kept plans are Postgres cached plans: DDL on a referenced
//! table invalidates and re-plans them automatically. A plan is only reused
//! when every non-NULL argument has the Oid it was prepared with; anything
//! else runs unprepared, so a caller can never bind a datum of the wrong
//! type into a kept plan.

use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::rc::Rc;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiResult, SpiTupleTable};
use pgrx::PgOid;

struct Kept {
    /// Never dropped: a kept plan lives as long as the backend, and running
    /// `SPI_freeplan` from a thread-local destructor during process exit
    /// (after Postgres tore its state down) would be unsafe.
    plan: ManuallyDrop<OwnedPreparedStatement>,
    arg_types: Vec<pg_sys::Oid>,
}

thread_local! {
    static PLANS: RefCell<HashMap<String, Rc<Kept>>> = RefCell::new(HashMap::new());
}

fn compatible(kept: &Kept, args: &[DatumWithOid<'_>]) -> bool {
    kept.arg_types.len() == args.len()
        && args
            .iter()
            .zip(&kept.arg_types)
            .all(|(a, t)| a.datum().is_none() || a.oid() == *t)
}

/// Runs `sql` with `args` (read-write mode) through this backend's kept
/// plan for it, preparing and keeping the plan on first use. `limit` as in
/// `SpiClient::update`. Errors: SPI failures; Postgres ERRORs unwind.
pub fn execute<'conn>(
    client: &mut SpiClient<'conn>,
    sql: &str,
    limit: Option<std::os::raw::c_long>,
    args: &[DatumWithOid<'_>],
) -> SpiResult<SpiTupleTable<'conn>> {
    let cached = PLANS.with(|p| p.borrow().get(sql).cloned());
    let kept = match cached {
        Some(kept) if compatible(&kept, args) => kept,
        Some(_) => return client.update(sql, limit, args),
        None => {
            let arg_types: Vec<pg_sys::Oid> = args.iter().map(DatumWithOid::oid).collect();
            let oids: Vec<PgOid> = arg_types.iter().map(|o| PgOid::from(*o)).collect();
            let plan = client.prepare_mut(sql, &oids)?.keep();
            let kept = Rc::new(Kept {
                plan: ManuallyDrop::new(plan),
                arg_types,
            });
            PLANS.with(|p| p.borrow_mut().insert(sql.to_owned(), Rc::clone(&kept)));
            kept
        }
    };
    client.update(&*kept.plan, limit, args)
}

/// Number of plans this backend keeps (for tests).
pub fn kept_plans() -> usize {
    PLANS.with(|p| p.borrow().len())
}
