//! The realtime benchmark of issues 8 and 30 (`scripts/bench-realtime`, binary
//! `realtime_bench`): what a gateway adds on top of the extension, each
//! number next to a baseline measured on the same server in the same run, for
//! the Rust gateway and (`BENCH_RT_GATEWAYS="rust node"`) the Node one.
//!
//! - [`config`]: the `BENCH_RT_*` knobs
//! - [`gateway`]: a gateway process, Rust or Node (start, bound address, listener pid, RSS, `/metrics`)
//! - [`lane`]: every gateway-dependent part, once per gateway
//! - [`procstat`]: CPU time of the gateway, the Postgres server and this process
//! - [`setup`]: resolver, partitions, client records, the request shapes
//! - [`commits`]: single-row pushes through `syncular.sync` at a fixed rate
//! - [`notify_baseline`]: bare `pg_notify` → `LISTEN` latency at the same rate
//! - [`floors`]: what any gateway pays on this machine — one bare write per (message, socket) to
//!   loopback sockets (under the fan-out goal), a bare blocking HTTP relay (under the round goal)
//! - [`sessions`]: raw WebSocket sessions (hello, decode deltas, ack, catch up after a wake);
//!   [`session_io`] their upgrade and catch-up pulls, [`decode`] the shared delta decoding
//! - [`storm`]: the reconnect storm (reconnect → caught-up latency, lost / duplicated deliveries)
//! - [`tally`]: per-cell latency percentiles and delivery accounting
//! - [`http`]: a minimal HTTP/1.1 keep-alive client connection
//! - [`rounds`]: `POST /sync` rounds/s next to `SELECT syncular.sync` rounds/s and the bare relay's
//! - [`report`]: the per-lane tables; [`goals`]: issue 30's goals, one column per gateway
//!
//! Not a test: it never asserts on a timing. It fails only when a delivery is
//! wrong (a delta lost by a session that was never woken, a duplicate, a
//! commit out of order) or a request fails.

pub mod commits;
pub mod decode;
pub mod floors;
pub mod config;
pub mod gateway;
pub mod goals;
pub mod http;
pub mod lane;
pub mod notify_baseline;
pub mod procstat;
pub mod report;
pub mod rounds;
pub mod session_io;
pub mod sessions;
pub mod setup;
pub mod storm;
pub mod tally;
