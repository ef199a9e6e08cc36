//! `#[pg_test]`s of plain SQL writes becoming commits (docs/src/guide/plain-sql.md "Writing with
//! plain SQL"): what is captured ([`writes`]) and what is refused
//! ([`refusals`]); shared helpers in [`support`].

pub mod support;
mod refusals;
mod engine_writes;
mod engine_attack;
mod guards;
mod writes;
