//! `#[pg_test]`s, one file per concern. pgrx runs every test as
//! `SELECT tests.<fn>()`, and a function's schema comes from the
//! `#[pg_schema]` module that directly contains it — so each file wraps its
//! tests in its own `#[pg_schema] mod tests { … }` (all land in schema
//! `tests`). Shared helpers live in [`support`].

mod catalog;
// A plain #[test] (no Postgres): no import circle between the engine's modules.
#[cfg(test)]
mod engine_circles;
mod clock;
mod hardening;
mod errors;
mod privileges;
mod register;
mod register_versions;
mod register_adopt;
mod resolver;
mod validators;
mod commit_validator;
mod crdt;
mod leases;
mod reactions;
pub mod support;
mod unique_index;
mod sync_pull_incremental;
pub mod sync_pull_support;
mod sync_pull_validate;
mod sync_push_explain;
mod sync_push_idempotency;
mod sync_push_outcomes;
mod sync_request_gates;
pub mod sync_support;
mod sync_pull_bootstrap;
mod bootstrap_page_attacks;
mod sync_pull_budget;
mod sync_pull_explain;
mod sync_pull_window_pages;
mod sync_pull_scopes;
mod sync_push_access;
mod sync_push_model;
mod sync_pull_convergence;
mod sync_stream;
pub mod realtime;
mod capture;
mod lifecycle;
mod citus;
mod blobs;
mod objects;
mod segments;
mod segment_image;
mod wire_v3;
mod direct;
