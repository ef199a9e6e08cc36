//! Segment statements (SPEC §5.1–§5.5; tables `sync_segments`,
//! `sync_segment_chunks`, `sync_segment_publications`,
//! `sync_segment_url_keys` in `sql/tables.sql`).

pub mod signed_open;
pub mod sweep;
pub mod url_keys;
