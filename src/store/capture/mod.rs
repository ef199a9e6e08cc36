//! Storage of captured plain SQL writes (issue 9, docs/src/guide/plain-sql.md "Writing with plain
//! SQL"): the capture triggers' DDL and a statement's transition tables.
//! The log rows a captured statement writes: [`crate::store::log::statement`].

pub mod transition;
pub mod triggers;
