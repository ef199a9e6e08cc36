//! The log (SPEC §2.1–§2.3; DESIGN §4): the only SQL that writes
//! `sync_commits`, `sync_changes`, `sync_change_scopes`, `sync_tombstones`
//! and `sync_row_scopes`, one file per source shape — called only by the
//! commit writer ([`crate::engine::commit`]):
//!
//! | file | source |
//! |---|---|
//! | [`request`] | a push request or `syncular.commit`: the counter statement, then the rows inserted directly (`crate::store::direct`) |
//! | [`request_router`] | the same rows under `syncular.router_statements` (Citus): one single-shard statement per table |
//! | [`statement`] | a captured plain SQL statement: set-based from its transition table |
//! | [`row_scopes`] | a deleted row's `sync_row_scopes` entries; an adopted table's entries rebuilt from its rows |
//! | [`tombstones`] | the tombstone probe of a sparse insert under router statements (a read) |

pub mod request;
pub mod request_router;
pub mod row_scopes;
pub mod statement;
pub mod tombstones;

use pgrx::spi::Spi;

use crate::store::{StoreError, StoreResult};

/// One change row: `commit` is the 1-based position of its commit among the
/// request's applied commits (its `commitSeq` is the allocated base + `commit`).
#[derive(Debug, Clone)]
pub struct LogChange {
    /// Position of the commit among the applied commits (1-based).
    pub commit: i32,
    /// Position of the change inside its commit (0-based).
    pub idx: i32,
    /// IR table name.
    pub table: String,
    /// Row id.
    pub row_id: String,
    /// `1` upsert, `2` delete.
    pub op: i16,
    /// `server_version` after the write (upserts).
    pub row_version: Option<i64>,
    /// Stored scopes as JSON text.
    pub scopes_json: String,
    /// Row-codec payload (upserts).
    pub payload: Option<Vec<u8>>,
}

/// Everything one request logs.
#[derive(Debug, Clone, Default)]
pub struct RequestLog {
    /// `clientCommitId` of each applied commit, in order (position + 1 = `commit`).
    pub applied: Vec<String>,
    /// Their changes.
    pub changes: Vec<LogChange>,
    /// `(commit, table, variable, value)` scope-index entries, de-duplicated.
    pub change_scopes: Vec<(i32, String, String, String)>,
    /// `(commit, table, row_id)`: rows whose last change in the request deletes them.
    pub tombstones: Vec<(i32, String, String)>,
    /// `(table, row_id)`: rows the request inserted (absent before): their tombstone goes.
    pub cleared_tombstones: Vec<(String, String)>,
    /// `(clientCommitId, commit or 0 for a rejection, outcome JSON)`; an applied
    /// outcome's `commitSeq` is set from the allocation.
    pub outcomes: Vec<(String, i32, String)>,
    /// `(table, variable, value, row_id)`: the `sync_row_scopes` entries of the
    /// rows the request inserted (absent before) and did not delete again.
    pub row_scopes: Vec<(String, String, String, String)>,
}

/// The error message of a write whose partition has no counter row
/// ([`StoreError::is_missing_counter`]).
pub const MISSING_COUNTER: &str = "partition counter row missing";

/// Who wrote the request's commits.
#[derive(Debug, Clone, Copy)]
pub struct LogAuthor<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// `REQ_HEADER.clientId` (`sync_commits.client_id`, outcome key).
    pub client_id: &'a str,
    /// The authenticated actor.
    pub actor_id: &'a str,
    /// Commit time, Unix ms.
    pub created_at_ms: i64,
}

/// A fresh unpredictable commit id (`gen_random_uuid()`), for a
/// server-authored commit whose caller supplied none. Errors: SPI failures.
pub fn generate_commit_id() -> StoreResult<String> {
    Spi::get_one::<String>("SELECT pg_catalog.gen_random_uuid()::text")
        .map_err(StoreError::spi("generate_commit_id"))?
        .ok_or_else(|| StoreError::new("generate_commit_id", "gen_random_uuid() returned NULL"))
}
