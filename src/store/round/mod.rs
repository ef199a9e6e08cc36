//! The sync round's own statements (engine side: [`crate::engine::round`]):
//! the one context read before anything else ([`context`]) and the wire-3
//! `ROUND_FAILURE` reports ([`failures`]).

pub mod context;
pub mod failures;
