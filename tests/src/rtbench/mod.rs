//! The realtime benchmark of issue 8 (`scripts/bench-realtime`, binary
//! `realtime_bench`): what the gateway adds on top of the extension, each
//! number next to a baseline measured on the same server in the same run.
//!
//! - [`config`]: the `BENCH_RT_*` knobs
//! - [`gateway`]: the `syncular-gateway` process (start, bound address, RSS, `/metrics`)
//! - [`procstat`]: CPU time of the gateway, the Postgres server and this process
//! - [`setup`]: resolver, partitions, client records, the request shapes
//! - [`commits`]: single-row pushes through `syncular.sync` at a fixed rate
//! - [`notify_baseline`]: bare `pg_notify` → `LISTEN` latency at the same rate
//! - [`sessions`]: raw WebSocket sessions (hello, decode deltas, ack, catch up after a wake);
//!   [`session_io`] their upgrade and catch-up pulls, [`decode`] the shared delta decoding
//! - [`tally`]: per-cell latency percentiles and delivery accounting
//! - [`http`]: a minimal HTTP/1.1 keep-alive client connection
//! - [`rounds`]: `POST /sync` rounds/s next to `SELECT syncular.sync` rounds/s
//! - [`report`]: the final table with the goals
//!
//! Not a test: it never asserts on a timing. It fails only when a delivery is
//! wrong (a delta lost by a session that was never woken, a duplicate, a
//! commit out of order) or a request fails.

pub mod commits;
pub mod decode;
pub mod config;
pub mod gateway;
pub mod http;
pub mod notify_baseline;
pub mod procstat;
pub mod report;
pub mod rounds;
pub mod session_io;
pub mod sessions;
pub mod setup;
pub mod tally;
