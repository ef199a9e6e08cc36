//! Out-of-process integration harness for the syncular extension: a real
//! Postgres server (started by `scripts/test`, DSN in `SYNCULAR_TEST_DSN`),
//! several connections, the real `syncular-client` over a SQL transport.
//! pgrx-free: it talks to the server only through the `postgres` crate.

use postgres::{Client, NoTls};

/// Environment variable holding the libpq-style DSN of the test server.
pub const DSN_ENV: &str = "SYNCULAR_TEST_DSN";

/// The test server's DSN from `SYNCULAR_TEST_DSN`.
///
/// Panics with a pointer to `scripts/test` when the variable is unset (the
/// integration tests need a running server with the extension installed).
pub fn dsn() -> String {
    std::env::var(DSN_ENV).unwrap_or_else(|_| {
        panic!("{DSN_ENV} is not set: run the integration tests through scripts/test (it starts a server)")
    })
}

/// Opens a new connection to the test server (no TLS: loopback only).
///
/// Panics when the connection fails (a test without a server cannot proceed).
pub fn connect() -> Client {
    connect_to(&dsn())
}

/// Opens a new connection to `dsn` (no TLS: loopback only).
///
/// Panics when the connection fails.
pub fn connect_to(dsn: &str) -> Client {
    Client::connect(dsn, NoTls).unwrap_or_else(|e| panic!("cannot connect to {dsn}: {e}"))
}

/// `dsn` with its `dbname=` replaced (the DSN is libpq key=value form): for
/// tests that need a database of their own (a schema bump, DROP EXTENSION).
pub fn dsn_for_db(dsn: &str, db: &str) -> String {
    let mut parts: Vec<String> = dsn.split_whitespace().filter(|p| !p.starts_with("dbname=")).map(str::to_string).collect();
    parts.push(format!("dbname={db}"));
    parts.join(" ")
}

pub mod bench;
pub mod bench_wire;
pub mod blob_fixture;
pub mod segment_fixture;
pub mod bump;
pub mod capture;
/// The environment variable `name` as a number, `default` when unset or unparsable
/// (benchmark knobs).
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub mod clients;
pub mod fixtures;
pub mod fleet;
pub mod gateway;
pub mod lifecycle;
pub mod notify;
pub mod pruneload;
pub mod raw_session;
pub mod router_check;
pub mod object_store_fixture;
pub mod s3_fixture;
pub mod seg_storm;
pub mod statement_log;
pub mod stream_fixture;
pub mod rtbench;
pub mod transport;
pub mod wire;
