//! Stored segments (issue 12; §5.1, §5.4, §5.5, §5.7): delivery by `accept`
//! and reuse of publications ([`delivery`]); the re-authorized download
//! ([`download`]).

pub mod support;
mod delivery;
mod download;
