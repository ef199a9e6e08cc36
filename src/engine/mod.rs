//! The engine: the sync round's logic (push, pull, bootstrap, schema
//! registration, scope resolution), one module per concern. It never formats
//! SQL — every statement is a `crate::store` function — and reports failures
//! as [`error::EngineError`].

pub mod auth;
pub mod clock;
pub mod round;
pub mod column_versions;
pub mod error;
pub mod validators;
pub mod crdt;
pub mod reactions;
pub mod schema;
pub mod context;
pub mod notify;
pub mod partition;
pub mod commit;
pub mod push;
pub mod budget;
pub mod pull;
pub mod scope_match;
pub mod storable;
pub mod realtime;
pub mod capture;
pub mod lifecycle;
pub mod distribution;
pub mod blobs;
pub mod segments;
pub mod objects;
