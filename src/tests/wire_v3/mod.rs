//! `#[pg_test]`s of wire version 3 (syncular-client 0.49; facts in
//! `crates/protocol/WIRE_V3.md`) beside 1 and 2: sparse pushes
//! ([`sparse_push`]), column-level conflicts ([`column_conflicts`]), the
//! column versions every writer keeps ([`column_writers`]) and
//! `ROUND_FAILURE` reports ([`round_failures`]); shared helpers in
//! [`support`].

pub mod support;
mod column_conflicts;
mod column_writers;
mod round_failures;
mod sparse_push;
mod breaker;
