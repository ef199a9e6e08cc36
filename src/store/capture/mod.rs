//! Storage of captured plain SQL writes (issue 9, README "Writing with plain
//! SQL"): the engine-write guard that keeps the engine's own app-table
//! writes from being captured twice, the capture triggers' DDL, and the
//! set-based log statements that read a statement's transition tables.

pub mod guard;
pub mod log;
pub mod triggers;
