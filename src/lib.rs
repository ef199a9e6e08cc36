//! `syncular`: the server side of the Syncular sync protocol (SSP2, wire
//! versions 1, 2 and 3) as a Postgres extension.
//!
//! Layers (data flows top to bottom): [`api`] (SQL functions, error mapping)
//! → [`engine`] (sync logic) → [`store`] (every SQL statement) →
//! `syncular_protocol` (pgrx-free codec). See docs/src/sql/index.md for the SQL API.

use pgrx::prelude::*;

::pgrx::pg_module_magic!(name, version);

pub mod api;
pub mod engine;
pub mod settings;
pub mod store;

// The sync_* tables and the schema marker, before any function.
extension_sql_file!("../sql/tables.sql", name = "sync_tables", bootstrap);
// REVOKE/GRANT over every function, after all of them exist.
extension_sql_file!("../sql/privileges.sql", name = "privileges", finalize);

/// Backend start-up: registers the GUCs ([`settings`]) and the transaction
/// callbacks ([`api::transaction_events`]).
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    settings::init();
    api::transaction_events::register();
}

// `#[pg_test]`s; each file wraps its tests in `#[pg_schema] mod tests`.
#[cfg(any(test, feature = "pg_test"))]
mod tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    /// One-off set-up when the test framework starts.
    pub fn setup(_options: Vec<&str>) {}

    /// postgresql.conf settings the tests need.
    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
