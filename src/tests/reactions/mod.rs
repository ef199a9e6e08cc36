//! `#[pg_test]`s of durable reactions (SPEC §6.9): planning and enqueue in
//! the push ([`planning`]) and the delivery state machine ([`delivery`]).

mod delivery;
mod planning;
