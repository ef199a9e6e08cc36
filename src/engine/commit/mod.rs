//! The commit writer (SPEC §2.1–§2.3, §6.4; DESIGN §4): the only code that
//! assigns `commitSeq`s, writes the log — `sync_commits`, `sync_changes`,
//! `sync_change_scopes`, `sync_tombstones`, the row-scope index — through
//! [`crate::store::log`], and queues the commit NOTIFY
//! ([`crate::engine::notify`]). Its sources:
//!
//! | source | entry | store statements |
//! |---|---|---|
//! | a push request, `syncular.commit` | [`write_request`] with a [`RequestLogBuilder`] | the counter statement and rows without statements ([`crate::store::log::request`]), or one statement per table under Citus ([`crate::store::log::request_router`], chosen by the store) |
//! | a captured plain SQL statement | [`write_statement`] | set-based from its transition table ([`crate::store::log::statement`]) |
//!
//! Rows an engine write causes without naming them (a foreign-key cascade,
//! an app trigger's write) and values an app's BEFORE ROW trigger rewrites
//! reach the request's log through [`guard`]: what is logged is what the
//! tables hold.

pub mod guard;
mod request;
mod statement;

pub use request::{scopes_json, write_request, RequestLogBuilder, StagedChange};
pub use statement::write_statement;

use std::cell::Cell;

thread_local! {
    static LOG_WRITES: Cell<u64> = const { Cell::new(0) };
}

/// How many times this backend has written the log (never reset): a
/// captured statement compares it at its start and end to learn whether a
/// nested statement or commit logged rows meanwhile
/// ([`write_statement`]'s `current_rows`).
pub fn log_writes() -> u64 {
    LOG_WRITES.with(Cell::get)
}

fn count_log_write() {
    LOG_WRITES.with(|c| c.set(c.get() + 1));
}
