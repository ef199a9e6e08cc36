//! A push request's own statements beside its log: its advisory locks
//! ([`locks`]) and the stored outcomes of its commits ([`outcomes`],
//! `sync_push_results`, SPEC §6.3).

pub mod locks;
pub mod outcomes;
