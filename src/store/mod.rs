//! The store: the only code that issues SQL (through SPI). One function per
//! statement, named for what it does. Identifiers that come from the
//! registered schema IR are always quoted (`quote_identifier`); values are
//! always bound parameters. Every sync_* table lives in schema `syncular`;
//! statements name it explicitly (`syncular.sync_commits`), so they do not
//! depend on the caller's `search_path`.
//!
//! **The single-shard rule** (docs/src/operate/citus.md): every
//! statement a sync round, the realtime calls or a per-partition
//! maintenance batch issues names the partition — each reference to a
//! `partition`-keyed table (and `_sync_partition` of an app table) is
//! pinned by `partition = $n`, directly or through a join on that column —
//! so Citus's router planner sends it to one shard. Under
//! `syncular.router_statements` there is moreover no `INSERT … SELECT`
//! (multi-row `INSERT … VALUES` instead: [`values_insert`]) and no `INSERT`
//! inside a CTE. Whole-database maintenance (`rotate_log_epoch(NULL)`,
//! `partition_stats(NULL)`) lists the partitions, then runs the
//! per-partition statements. `tests/tests/router_statements.rs` checks the
//! rule on every statement a set of sync rounds records in
//! `pg_stat_statements`; the capture triggers' statements
//! ([`capture`]) are exempt: they do not run on Citus.
//!
//! Reads use `Spi::connect_mut` + `update` (SPI read-write mode) on purpose:
//! a read-only SPI query reuses the statement's snapshot and does not see
//! rows written earlier in the same function call (e.g. inside a
//! subtransaction after a write), while read-write mode takes a fresh
//! command id for every statement.

pub mod app_table_ddl;
pub mod error;
pub mod validator_store;
pub mod schema_store;

pub use error::{StoreError, StoreResult};
pub mod app_rows;
pub mod auth;
pub mod clients;
pub mod round;
pub mod spi;
pub mod notifications;
pub mod log;
pub mod partitions;
pub mod push;
pub mod pull;
pub mod realtime;
pub mod capture;
pub mod lifecycle;
pub mod values_insert;
pub mod citus;
pub mod direct;
pub mod blobs;
pub mod segments;
pub mod objects;
pub mod reactions;
