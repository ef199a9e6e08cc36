//! Plans that do not depend on table statistics, for the pull path's reads
//! (SPEC §4.5 windows, §4.7 bootstrap pages, the per-request bounds and
//! client record).
//!
//! A pull must cost the same before autovacuum has analyzed the log tables
//! as after, and the same when the statistics describe other partitions than
//! the one being read. Two things make a plan shape independent of the
//! statistics here:
//!
//! 1. **The SQL** (the calling modules' job, see their docs): every statement
//!    names the partition, bounds the key range of the index it must walk
//!    and asks for that index's order, so any other index needs at least a
//!    filter and a sort on top of the same walk and does not win — not even
//!    an exact cost tie, which the planner otherwise resolves towards the
//!    newest index (that is how `sync_commits_by_time` used to win
//!    per-commit equality probes once the statistics knew nothing about the
//!    partition).
//! 2. **The planner settings** ([`execute`], this module): each statement is
//!    run through this backend's kept plan ([`crate::store::spi::plan_cache`]) under
//!    `plan_cache_mode = force_generic_plan`, `enable_seqscan = off`,
//!    `enable_bitmapscan = off` (and `jit = off`), in effect for the one
//!    execution and restored right after it ([`PinnedSettings`]); nothing
//!    leaks into the caller's session. The plan is
//!    built (and rebuilt after an invalidation: DDL, `ANALYZE`, `VACUUM`) only
//!    under these settings, so it is one generic plan per backend whose
//!    estimates never look at the parameters' values (a partition is
//!    estimated as rows ÷ distinct partitions, whichever it is), and it is an
//!    index walk wherever an index applies — never a sequential scan that was
//!    cheapest while a table was still tiny and then kept while the table
//!    grew (a kept plan is not re-planned when rows are only added).
//!
//! [`explain`] shows that same plan (`PREPARE` + `EXPLAIN EXECUTE` under the
//! same settings); `src/tests/sync_pull_explain.rs` asserts its shape on
//! never-analyzed tables, on tables analyzed without the partition, and on
//! analyzed ones.

use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::{Spi, SpiClient, SpiResult, SpiTupleTable};

use crate::store::spi::plan_cache;

/// The planner settings a pinned statement is planned and run under —
/// `plan_cache_mode = force_generic_plan` (skipped under
/// `syncular.router_statements`), `enable_seqscan = off`,
/// `enable_bitmapscan = off`, `jit = off` — written straight into the
/// variables behind those GUCs for one execution (or one [`explain`]), and
/// the values they had, written back when this guard drops: on return and
/// when a Postgres ERROR unwinds through it (pgrx turns it into a Rust
/// panic), before any handler above runs.
///
/// Why not `set_config_option` under a GUC nest level, as a function's `SET`
/// clause does: on the push path that bookkeeping (four settings set, then
/// a walk over every GUC variable to pop them on Postgres 15 and older) cost
/// more than some of the statements it pinned. The effect on the execution is the
/// same: the variables are what the planner and the plan cache read while
/// this statement is planned and its cached plan chosen. Pinned statements
/// read and write `sync_*` tables (no triggers) and read app tables by
/// primary key; should anything else be planned while the guard lives (a
/// function a row-level security policy calls), it is planned under the same
/// settings, which steer plan shapes, never results. `current_setting`
/// inside it would still return the caller's values.
struct PinnedSettings {
    plan_cache_mode: std::os::raw::c_int,
    seqscan: bool,
    bitmapscan: bool,
    jit: bool,
}

impl PinnedSettings {
    fn set() -> PinnedSettings {
        // SAFETY: the backend's own GUC variables, read and written from its
        // main thread; each holds a valid value of its type before and after.
        unsafe {
            let saved = PinnedSettings {
                plan_cache_mode: pg_sys::plan_cache_mode,
                seqscan: pg_sys::enable_seqscan,
                bitmapscan: pg_sys::enable_bitmapscan,
                jit: pg_sys::jit_enabled,
            };
            // Citus cannot plan a routed query with unbound parameters: it answers
            // a generic plan with a costly placeholder so that a custom plan is
            // chosen, and fails when a generic plan is forced. Under
            // `syncular.router_statements` the shard's own planner plans the
            // statement Citus sends it (with the values bound) anyway.
            if !crate::settings::router_statements() {
                pg_sys::plan_cache_mode = pg_sys::PlanCacheMode::PLAN_CACHE_MODE_FORCE_GENERIC_PLAN as std::os::raw::c_int;
            }
            pg_sys::enable_seqscan = false;
            pg_sys::enable_bitmapscan = false;
            // A generic plan's estimates can exceed `jit_above_cost`; compiling
            // one costs far more than any of these index walks runs.
            pg_sys::jit_enabled = false;
            saved
        }
    }
}

impl Drop for PinnedSettings {
    fn drop(&mut self) {
        // SAFETY: as in `set`: the values saved there.
        unsafe {
            pg_sys::plan_cache_mode = self.plan_cache_mode;
            pg_sys::enable_seqscan = self.seqscan;
            pg_sys::enable_bitmapscan = self.bitmapscan;
            pg_sys::jit_enabled = self.jit;
        }
    }
}

/// Runs `sql` with `args` (read-write mode, see [`crate::store`]) through this
/// backend's kept generic plan for it, planned under the pinned settings
/// ([`PinnedSettings`]). `limit` as in `SpiClient::update`. Errors: SPI
/// failures; Postgres ERRORs unwind.
pub fn execute<'conn>(
    client: &mut SpiClient<'conn>,
    sql: &str,
    limit: Option<std::os::raw::c_long>,
    args: &[DatumWithOid<'_>],
) -> SpiResult<SpiTupleTable<'conn>> {
    let _pinned = PinnedSettings::set();
    plan_cache::execute(client, sql, limit, args)
}

/// `args` as SQL literals with explicit casts (`'…'::type`, `NULL::type`),
/// through each type's output function.
fn literal_args(args: &[DatumWithOid<'_>]) -> Vec<(String, String)> {
    args.iter()
        .map(|a| {
            // SAFETY: `format_type_be` returns a palloc'd C string for any
            // type Oid (or raises an ERROR for an unknown one).
            let type_name = unsafe { CStr::from_ptr(pg_sys::format_type_be(a.oid())) }
                .to_string_lossy()
                .into_owned();
            let value = match a.datum() {
                None => "NULL".to_owned(),
                Some(datum) => {
                    let mut output = pg_sys::Oid::INVALID;
                    let mut varlena = false;
                    // SAFETY: the datum is of type `a.oid()` (DatumWithOid's
                    // contract); its output function returns a palloc'd C string.
                    let text = unsafe {
                        pg_sys::getTypeOutputInfo(a.oid(), &mut output, &mut varlena);
                        CStr::from_ptr(pg_sys::OidOutputFunctionCall(output, datum.sans_lifetime()))
                    };
                    pgrx::spi::quote_literal(text.to_string_lossy())
                }
            };
            (value, type_name)
        })
        .collect()
}

/// `EXPLAIN ([ANALYZE,] FORMAT JSON)` of the plan [`execute`] runs for `sql`:
/// the statement is `PREPARE`d with `args`' types and explained through
/// `EXECUTE` with `args` as literals, under the pinned settings (so the
/// generic plan). For the plan tests. Errors: SPI failures.
pub fn explain(
    sql: &str,
    args: &[DatumWithOid<'_>],
    analyze: bool,
) -> Result<String, pgrx::spi::Error> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "syncular_pinned_explain_{}",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let literals = literal_args(args);
    let types = literals
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let values = literals
        .iter()
        .map(|(v, t)| format!("{v}::{t}"))
        .collect::<Vec<_>>()
        .join(", ");
    let (prepare, execute) = if args.is_empty() {
        (
            format!("PREPARE {name} AS {sql}"),
            format!("EXECUTE {name}"),
        )
    } else {
        (
            format!("PREPARE {name}({types}) AS {sql}"),
            format!("EXECUTE {name}({values})"),
        )
    };
    let _pinned = PinnedSettings::set();
    Spi::connect_mut(|client| {
        client.update(prepare.as_str(), None, &[])?;
        let statement = format!("EXPLAIN (ANALYZE {analyze}, FORMAT JSON) {execute}");
        let plan = client
            .update(statement.as_str(), None, &[])?
            .first()
            .get_one::<pgrx::Json>()?;
        client.update(format!("DEALLOCATE {name}").as_str(), None, &[])?;
        Ok(plan.map(|p| p.0.to_string()).unwrap_or_default())
    })
}
