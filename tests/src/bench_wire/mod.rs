//! The wire-version benchmark (`scripts/bench-wire`, binary `bench_wire`):
//! wire version 3 (syncular-client 0.49: sparse payloads, column versions)
//! next to wire version 2 on the same server, in the same run, rounds
//! alternated.
//!
//! - [`requests`]: v2 requests with the 0.15.48 reference codec, v3 requests
//!   with the 0.49.2 one (`syncular-ssp2`), for `tasks` and the 20-column
//!   `wide` table
//! - [`throughput`]: single-row pushes (insert; one-column update) and the
//!   incremental pull of 1,000 one-row commits, per wire version
//! - [`wal`]: WAL bytes of a one-column update of a 20-column row — v3
//!   sparse vs a full row (v2, and v3 with every column present)
//!
//! Not a test: it asserts no timing; it fails only when a push is not
//! applied or a pull does not return the window it wrote.

pub mod requests;
pub mod throughput;
pub mod wal;

use postgres::Client;

/// The wire version a measurement speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Wire version 2: full rows (syncular-client 0.15.48).
    V2,
    /// Wire version 3: sparse rows (syncular-client 0.49).
    V3,
}

impl Wire {
    /// `v2` / `v3`.
    pub fn label(self) -> &'static str {
        match self {
            Wire::V2 => "v2",
            Wire::V3 => "v3",
        }
    }
}

/// `pg_current_wal_insert_lsn()` as bytes.
pub fn wal_lsn(conn: &mut Client) -> Result<i64, String> {
    conn.query_one("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint", &[])
        .map(|r| r.get(0))
        .map_err(crate::bench::pg_err)
}
