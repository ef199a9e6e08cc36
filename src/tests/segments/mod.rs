//! Segments (issue 12; §5.1–§5.5, §5.7): delivery by `accept` and reuse of
//! publications ([`delivery`]); the re-authorized download ([`download`]);
//! signed URLs, native scheme ([`signed_urls`]); expiry / garbage collection
//! ([`sweep`]).

pub mod support;
pub mod url_support;
mod attacks;
mod delivery;
mod download;
mod signed_urls;
mod sweep;
