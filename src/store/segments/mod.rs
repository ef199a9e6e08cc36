//! Stored segment statements (SPEC §5.1, §5.4, §5.5): the immutable bytes
//! ([`bytes`]: `sync_segments` + `sync_segment_chunks`, once per
//! `(partition, segment_id)`, chunks of at most 1 MiB) and the mutable
//! publication record ([`publications`]: `sync_segment_publications`, one row
//! per context the bytes were published under, each with its own expiry);
//! signed-URL keys and opens ([`url_keys`], [`signed_open`]) and the sweep
//! ([`sweep`]).
//!
//! Every statement names its partition (the single-shard rule of
//! [`crate::store`]). Writes never fail on a concurrent identical write:
//! bytes are `INSERT … ON CONFLICT DO NOTHING`, publications an upsert.

pub mod bytes;
pub mod publications;
pub mod signed_open;
pub mod sweep;
pub mod url_keys;
