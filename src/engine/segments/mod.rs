//! Bootstrap segments (SPEC §5): stored, content-addressed segments and the
//! sqlite image lane.

pub mod image;
