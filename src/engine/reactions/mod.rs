//! Durable server reactions (SPEC §6.9; docs/src/sql/reactions.md):
//! application work that must follow an accepted commit, planned inside the
//! commit's transaction and delivered at least once by workers afterwards.
//!
//! - [`planner`]: `syncular.set_reaction_planner` and the call of the
//!   registered planner for each new commit of a push or `syncular.commit`
//!   (after the §6.8 whole-commit validator accepted, inside the commit's
//!   subtransaction; never on a replay, never for a rejected commit).
//! - [`records`]: the planner's answer checked (§6.9 "Planned record") and
//!   the stable idempotency key.
//! - [`worker`]: claim, lease extension, completion, failure with bounded
//!   exponential backoff, the operator's dead-letter reset, bounded cleanup
//!   and the admin listing — every "now" from [`crate::engine::clock`].

pub mod planner;
pub mod records;
pub mod worker;

/// The NOTIFY channel a commit that enqueued reactions signals (payload:
/// the partition), delivered at COMMIT, so workers need not poll.
pub const CHANNEL: &str = "syncular_reaction";
