//! The engine-write guard: while the engine itself writes an app table (a
//! push, `syncular.commit`, a schema bump's payload rewrite) the capture
//! triggers step aside — those writes already go through the commit writer.
//!
//! A backend-local depth counter, raised by [`EngineWrite::begin`] and
//! lowered when the guard drops (also when a Postgres ERROR unwinds through
//! it: pgrx turns the ERROR into a Rust panic, so `Drop` runs).

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Held while the engine writes app tables; see the module docs.
#[must_use = "the guard covers the writes made while it lives"]
pub struct EngineWrite(());

impl EngineWrite {
    /// Marks the start of an engine write (nestable).
    pub fn begin() -> EngineWrite {
        DEPTH.with(|d| d.set(d.get().saturating_add(1)));
        EngineWrite(())
    }
}

impl Drop for EngineWrite {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// True while an [`EngineWrite`] guard lives in this backend.
pub fn engine_writing() -> bool {
    DEPTH.with(|d| d.get() > 0)
}
