//! Blobs (§5.9): the store (upload, idempotency, limits, chunks), download
//! authorization and the orphan sweep ([`store`]); the push-time existence
//! check and the reference index on every write path ([`writes`]).

pub mod support;
mod store;
mod writes;
