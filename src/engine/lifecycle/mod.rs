//! The log's lifecycle (SPEC §4.6, §2.1; docs/src/sql/lifecycle.md):
//! what an operator or a scheduler (pg_cron) runs so that a partition's log
//! does not grow forever, a restored database can rotate its log epoch, a
//! tenant can be removed, and the horizon's position can be explained.
//!
//! - [`horizon`] — the §4.6 floors and the horizon's advance;
//! - [`prune`] — one bounded deletion batch (log, tombstones, push outcomes,
//!   client records);
//! - [`rotate`] — epoch rotation;
//! - [`drop`](mod@drop) — removing a partition in bounded batches;
//! - [`distribute`] — scaling out with Citus (`syncular.distribute`);
//! - [`stats`] — `syncular.partition_stats`.
//!
//! Every "now" is [`crate::engine::clock::now_ms`].

pub mod distribute;
pub mod drop;
pub mod horizon;
pub mod prune;
pub mod rotate;
pub mod stats;
