//! Bootstrap segments (SPEC §5.1–§5.5): signed URLs ([`signed_url`]) and
//! expiry / garbage collection ([`sweep`]).

pub mod signed_url;
pub mod sweep;
