//! The store: the only code that issues SQL (through SPI). One function per
//! statement, named for what it does. Identifiers that come from the
//! registered schema IR are always quoted (`quote_identifier`); values are
//! always bound parameters. Every sync_* table lives in schema `syncular`;
//! statements name it explicitly (`syncular.sync_commits`), so they do not
//! depend on the caller's `search_path`.
//!
//! Reads use `Spi::connect_mut` + `update` (SPI read-write mode) on purpose:
//! a read-only SPI query reuses the statement's snapshot and does not see
//! rows written earlier in the same function call (e.g. inside a
//! subtransaction after a write), while read-write mode takes a fresh
//! command id for every statement.

pub mod app_table_ddl;
pub mod error;
pub mod resolver_store;
pub mod schema_store;
pub mod subtransaction;

pub use error::{StoreError, StoreResult};
pub mod app_rows;
pub mod clients_write;
pub mod commits;
pub mod notifications;
pub mod partitions;
pub mod push_locks;
pub mod push_log;
pub mod push_log_router;
pub mod push_results;
pub mod request_context;
pub mod row_scopes;
pub mod bootstrap_page;
pub mod clients;
pub mod pull_window;
pub mod plan_cache;
pub mod pinned_plan;
pub mod spi_rows;
pub mod realtime;
pub mod capture;
pub mod lifecycle;
pub mod values_insert;
pub mod citus;
