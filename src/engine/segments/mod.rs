//! Bootstrap segments (SPEC §5.1–§5.5): signed URLs ([`signed_url`]),
//! expiry / garbage collection ([`sweep`]) and the sqlite image lane ([`image`]).

pub mod image;
pub mod signed_url;
pub mod sweep;
