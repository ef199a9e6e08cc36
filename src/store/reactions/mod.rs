//! Statements behind durable reactions (SPEC §6.9; docs/src/sql/reactions.md "Durable
//! reactions"): the enqueue of a push's planned rows into `sync_reactions`
//! (the planner's registration is a [`crate::store::validator_store::SingleFunction`]), and the worker
//! and operator statements over that table. Every statement on
//! `sync_reactions` names exactly one partition (`partition = $1`).

pub mod enqueue;
pub mod worker;
