//! The SQL surface: `#[pg_extern]` functions in schema `syncular`. Each one
//! checks its arguments, calls the engine and maps errors through
//! [`errors`] — nothing else.

pub mod errors;
pub mod json_arg;
pub mod schema;
pub mod realtime;
pub mod realtime_session;
pub mod sync;
pub mod sync_stream;
pub mod capture;
pub mod lifecycle;
pub mod distribution;
pub mod drop_guard;
pub mod leases;
pub mod blobs;
pub mod segment_sweep;
pub mod segment_urls;
pub mod segments;
pub mod objects;
pub mod reactions;
pub mod round_failures;
pub mod transaction_events;
