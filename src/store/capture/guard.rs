//! The engine-write guard: while the engine itself writes an app table (a
//! push, `syncular.commit`, a schema bump's payload rewrite) the capture
//! triggers of THAT table step aside — those writes already go through the
//! commit writer. Writes the engine's statement causes on OTHER app tables
//! (a foreign-key cascade, a function called by a constraint) are still
//! captured, in the engine's partition.
//!
//! A backend-local stack of `(IR table, partition)`, pushed by
//! [`EngineWrite::begin`] and popped when the guard drops (also when a
//! Postgres ERROR unwinds through it: pgrx turns the ERROR into a Rust panic,
//! so `Drop` runs).

use std::cell::RefCell;

thread_local! {
    static STACK: RefCell<Vec<(String, Option<String>)>> = const { RefCell::new(Vec::new()) };
}

/// Held while the engine writes an app table; see the module docs.
#[must_use = "the guard covers the writes made while it lives"]
pub struct EngineWrite(());

impl EngineWrite {
    /// Marks the start of an engine write to IR table `table` of `partition`
    /// (`None`: every partition, e.g. a schema rewrite). Nestable.
    pub fn begin(table: &str, partition: Option<&str>) -> EngineWrite {
        STACK.with(|s| s.borrow_mut().push((table.to_owned(), partition.map(str::to_owned))));
        EngineWrite(())
    }
}

impl Drop for EngineWrite {
    fn drop(&mut self) {
        STACK.with(|s| {
            s.borrow_mut().pop();
        });
    }
}

/// True while the engine itself writes IR table `table` in this backend.
pub fn engine_writing(table: &str) -> bool {
    STACK.with(|s| s.borrow().iter().any(|(t, _)| t == table))
}

/// The partition of the innermost engine write in progress, if any: writes
/// it causes on other app tables are captured in it.
pub fn engine_partition() -> Option<String> {
    STACK.with(|s| s.borrow().iter().rev().find_map(|(_, p)| p.clone()))
}
