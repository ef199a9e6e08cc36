//! The reaction planner (SPEC §6.9 "Planning order"): one host SQL function
//! `f(commit jsonb) returns jsonb`, registered with
//! `syncular.set_reaction_planner`, called once per new commit of a push or
//! `syncular.commit` after every operation was staged and the §6.8
//! whole-commit validator (if any) accepted — inside the commit's
//! subtransaction, so its queries read the candidate state — and before the
//! commit is logged. Never on a replay (the stored outcome answers), never
//! for a commit an operation or the commit validator rejected (zero
//! reactions then). Captured plain SQL writes do not run it: a statement is
//! not a proposed commit and has no `clientCommitId` to key its reactions
//! (the commit validator skips them for the same reason).
//!
//! Input: exactly the commit validator's (`crate::engine::push::validator`).
//! Output: [`crate::engine::reactions::records`]. A malformed answer or an
//! ERROR the planner raises (the transient classes 40, 53, 54, 57, 58, XX
//! aside, which fail the request unchanged) fails the request with
//! `syncular.reaction_planner_failed` (39000): nothing of the request is
//! persisted, a later delivery runs the planner again. The planner's own
//! error text goes to the server log, not to the caller.

use serde_json::Value;

use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::reactions::records::{self, Planned};
use crate::engine::validators::{call, resolve};
use crate::store::validator_store;

/// `syncular.set_reaction_planner(fn)`: registers `function` as the reaction
/// planner, or removes it (`None`). Same checks and fence as
/// `syncular.set_commit_validator`: a plain non-set function `(commit
/// jsonb) returns jsonb` owned by a superuser; takes the schema fence.
/// Errors: `syncular.no_schema` (55000), `syncular.invalid_validator` (22023).
pub fn set_reaction_planner(function: Option<pgrx::pg_sys::Oid>) -> EngineResult<()> {
    crate::engine::schema::hooks::set_single(validator_store::SingleFunction::ReactionPlanner, function, "a reaction planner")
}

/// The failure of the planner `name` (`schema.function`): `what` went wrong.
pub fn failed(name: &str, what: impl std::fmt::Display) -> EngineError {
    EngineError::host(HostCode::ReactionPlannerFailed, format!("the reaction planner {name} {what}"))
}

/// Runs the planner `oid` on `input` (the commit validator's input) and
/// returns its checked records. Errors: `syncular.reaction_planner_failed`
/// (a malformed answer), `syncular.invalid_validator` (dropped, reshaped,
/// owner no longer a superuser); an ERROR the planner raises unwinds (the
/// push classifies it).
pub fn plan(oid: pgrx::pg_sys::Oid, input: &Value) -> EngineResult<Vec<Planned>> {
    let planner = resolve(oid, "the reaction planner")?;
    let out = call(&planner, input, |problem| failed(&format!("{}.{}", planner.schema, planner.name), problem))?;
    records::parse(out).map_err(|e| failed(&format!("{}.{}", planner.schema, planner.name), e))
}

/// The registered planner's display name for errors (`schema.function`, or
/// the OID when it no longer exists).
pub fn display_name(oid: pgrx::pg_sys::Oid) -> String {
    match validator_store::function_now(oid) {
        Ok(Some(now)) => format!("{}.{}", now.name.schema, now.name.name),
        _ => format!("(function OID {})", u32::from(oid)),
    }
}
