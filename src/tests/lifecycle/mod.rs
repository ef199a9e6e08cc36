//! `#[pg_test]`s of the log's lifecycle (docs/src/sql/lifecycle.md):
//! the §4.6 floors and bounded pruning ([`prune`]), what a pull and a replay
//! see after pruning ([`after_prune`]), epoch rotation ([`rotate`]),
//! partition removal ([`drop`]) and the operator's statistics ([`stats`]).
//! The procedures that COMMIT between batches are exercised by the
//! integration tests (a `#[pg_test]` runs inside one transaction).

pub mod support;
mod after_prune;
mod drop;
mod prune;
mod rotate;
mod stats;
