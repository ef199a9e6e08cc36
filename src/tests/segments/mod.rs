//! Segments (§5.1–§5.5): signed URLs, native scheme ([`signed_urls`]) and
//! expiry / garbage collection ([`sweep`]). Rows are written straight into
//! the segment tables (the publisher is another seam).

mod support;
mod signed_urls;
mod sweep;
