//! The engine: the sync round's logic (push, pull, bootstrap, schema
//! registration, scope resolution), one module per concern. It never formats
//! SQL — every statement is a `crate::store` function — and reports failures
//! as [`error::EngineError`].

pub mod clock;
pub mod error;
pub mod resolver;
pub mod schema;
