//! The engine-write guard: which app-table rows the engine writes itself,
//! so the capture triggers (docs/src/guide/plain-sql.md "Writing with plain SQL") neither log
//! them a second time nor miss anything else the engine's statement causes.
//!
//! While the engine runs one app-row statement it holds an [`EngineWrite`]
//! naming that statement's row ([`EngineWrite::row`]: a push operation,
//! `syncular.commit`) or a whole table ([`EngineWrite::table`]: a schema
//! bump's payload rewrite, a partition drop). The capture's row trigger asks
//! [`claim`] for every row it sees:
//! - [`Claim::Engine`]: the engine's own row, at its first firing. The engine
//!   logs it; the trigger only makes sure the log shows what the table
//!   holds (a user BEFORE ROW trigger may have rewritten a value: the trigger
//!   re-encodes and [`restamp`]s it).
//! - [`Claim::SideEffect`]: any other row written while the engine's
//!   statement runs — a foreign-key cascade (also onto the same table), a
//!   user trigger's own write, a second write of the engine's row. The
//!   trigger computes it as it would for plain SQL and records it with
//!   [`record_side_effect`]; the engine logs it as a further change of the
//!   commit being applied.
//! - [`Claim::None`]: no engine write in progress: a plain SQL write, logged
//!   by the statement triggers as its own commit.
//!
//! What the triggers record lives in the guard's frame and is taken by
//! [`EngineWrite::finish`]; what a rolled-back subtransaction recorded (an
//! app trigger's `EXCEPTION` block) is dropped when it aborts
//! ([`subtransaction_aborted`]); a Postgres ERROR unwinds through the guard
//! (pgrx turns it into a Rust panic, so `Drop` runs) and the frame — with
//! whatever it recorded for the failed statement — goes with it.

use std::cell::RefCell;
use std::collections::BTreeMap;

use syncular_protocol::frame_fields::Op;

/// A row the engine's statement caused without naming it (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideEffect {
    /// IR table name.
    pub table: String,
    /// Row id.
    pub row_id: String,
    /// Upsert (insert or update) or delete.
    pub op: Op,
    /// The row was absent before (an insert).
    pub inserted: bool,
    /// `_sync_version` after the write (upserts).
    pub row_version: Option<i64>,
    /// The row's stored scopes.
    pub scopes: BTreeMap<String, String>,
    /// `_sync_payload` after the write (upserts).
    pub payload: Option<Vec<u8>>,
    /// The blob ids the row referenced before and after the write (§5.9.4).
    pub blob_ids: (Vec<String>, Vec<String>),
}

/// What the table holds for one of the engine's own rows after a user
/// BEFORE ROW trigger rewrote it (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restamp {
    /// IR table name.
    pub table: String,
    /// Row id.
    pub row_id: String,
    /// The stored scopes.
    pub scopes: BTreeMap<String, String>,
    /// The stored payload.
    pub payload: Vec<u8>,
}

/// Everything the triggers recorded during one engine statement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// Rewrites of the engine's own rows, in firing order.
    pub restamped: Vec<Restamp>,
    /// Other rows the statement wrote, in firing order.
    pub side_effects: Vec<SideEffect>,
}

/// How the row trigger treats a row (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The engine's own row: it logs it.
    Engine,
    /// A row of a table the engine rewrites or drops as a whole: nothing to do.
    EngineTable,
    /// Written while the engine's statement runs, not by it: the trigger records it.
    SideEffect,
    /// No engine write in progress.
    None,
}

/// What one frame covers.
#[derive(Debug)]
enum Covers {
    /// Every row of the table.
    Table,
    /// One row, until its first firing claims it (`claimed`: in which
    /// subtransaction).
    Row { row_id: String, claimed: Option<Subtransaction> },
}

/// A subtransaction id of the current transaction (Postgres assigns them in
/// increasing order: a subtransaction's descendants have larger ids).
type Subtransaction = u32;

#[derive(Debug)]
struct Frame {
    table: String,
    partition: Option<String>,
    covers: Covers,
    /// What the triggers recorded, each with the subtransaction it was
    /// recorded in: a rolled-back subtransaction takes its records with it
    /// ([`subtransaction_aborted`]).
    restamped: Vec<(Subtransaction, Restamp)>,
    side_effects: Vec<(Subtransaction, SideEffect)>,
}

impl Frame {
    fn new(table: &str, partition: Option<&str>, covers: Covers) -> Frame {
        Frame { table: table.to_owned(), partition: partition.map(str::to_owned), covers, restamped: Vec::new(), side_effects: Vec::new() }
    }
}

/// The subtransaction the backend runs in.
pub fn current_subtransaction() -> Subtransaction {
    // SAFETY: reads the transaction state of this backend; any time inside a transaction.
    unsafe { pgrx::pg_sys::GetCurrentSubTransactionId() }
}

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Held while the engine runs one app-row statement; see the module docs.
#[must_use = "the guard covers the writes made while it lives"]
pub struct EngineWrite {
    depth: usize,
}

impl EngineWrite {
    fn push(frame: Frame) -> EngineWrite {
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.push(frame);
            EngineWrite { depth: s.len() }
        })
    }

    /// The engine writes row `row_id` of IR table `table` in `partition`
    /// (one statement, one row).
    pub fn row(table: &str, partition: &str, row_id: &str) -> EngineWrite {
        EngineWrite::push(Frame::new(table, Some(partition), Covers::Row { row_id: row_id.to_owned(), claimed: None }))
    }

    /// The engine writes any rows of IR table `table` of `partition`
    /// (`None`: every partition, e.g. a schema rewrite). Nothing is recorded
    /// for them.
    pub fn table(table: &str, partition: Option<&str>) -> EngineWrite {
        EngineWrite::push(Frame::new(table, partition, Covers::Table))
    }

    /// Ends the write and returns what the triggers recorded during it (and
    /// kept: nothing of a rolled-back subtransaction).
    pub fn finish(self) -> Effects {
        let effects = STACK.with(|s| {
            let mut s = s.borrow_mut();
            s.get_mut(self.depth - 1)
                .map(|f| Effects {
                    restamped: std::mem::take(&mut f.restamped).into_iter().map(|(_, r)| r).collect(),
                    side_effects: std::mem::take(&mut f.side_effects).into_iter().map(|(_, e)| e).collect(),
                })
                .unwrap_or_default()
        });
        drop(self);
        effects
    }
}

impl Drop for EngineWrite {
    fn drop(&mut self) {
        STACK.with(|s| s.borrow_mut().truncate(self.depth - 1));
    }
}

/// How the row trigger treats row `row_id` of IR table `table` stored in
/// `partition` (module docs). The first firing of a guarded row claims it: a
/// second write of the same row during the statement, and a row of the same
/// id in another partition, are side effects.
pub fn claim(table: &str, partition: Option<&str>, row_id: Option<&str>) -> Claim {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if s.is_empty() {
            return Claim::None;
        }
        for frame in s.iter_mut().rev() {
            if frame.table != table {
                continue;
            }
            let same_partition = frame.partition.as_deref() == partition;
            match &mut frame.covers {
                Covers::Table => return Claim::EngineTable,
                Covers::Row { row_id: own, claimed } => {
                    if claimed.is_none() && same_partition && row_id == Some(own.as_str()) {
                        *claimed = Some(current_subtransaction());
                        return Claim::Engine;
                    }
                }
            }
        }
        Claim::SideEffect
    })
}

/// True while any engine write is in progress in this backend: the
/// statement-level capture steps aside (rows are handled per row).
pub fn engine_writing() -> bool {
    STACK.with(|s| !s.borrow().is_empty())
}

/// True while the engine writes every row of IR table `table` (a rewrite or
/// a drop): no row of it is the app's.
pub fn table_write(table: &str) -> bool {
    STACK.with(|s| s.borrow().iter().any(|f| f.table == table && matches!(f.covers, Covers::Table)))
}

/// The partition of the innermost engine write in progress, if any: the
/// rows it causes are in it.
pub fn engine_partition() -> Option<String> {
    STACK.with(|s| s.borrow().iter().rev().find_map(|f| f.partition.clone()))
}

/// Records a side effect in the innermost row write (ignored under a
/// table write: nothing is logged there).
pub fn record_side_effect(effect: SideEffect) {
    let at = current_subtransaction();
    STACK.with(|s| {
        if let Some(f) = s.borrow_mut().iter_mut().rev().find(|f| matches!(f.covers, Covers::Row { .. })) {
            f.side_effects.push((at, effect));
        }
    });
}

/// Records a rewrite of the engine's own row.
pub fn restamp(r: Restamp) {
    let at = current_subtransaction();
    STACK.with(|s| {
        if let Some(f) = s.borrow_mut().iter_mut().rev().find(|f| matches!(f.covers, Covers::Row { .. })) {
            f.restamped.push((at, r));
        }
    });
}

/// Subtransaction `aborted` rolled back (an app trigger's `EXCEPTION` block,
/// a savepoint): what was recorded in it or its descendants (ids at least
/// `aborted`) never happened, and a row it claimed is unclaimed. Never
/// fails (it runs while Postgres aborts).
pub fn subtransaction_aborted(aborted: Subtransaction) {
    let _ = STACK.try_with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else { return };
        for f in s.iter_mut() {
            f.restamped.retain(|(at, _)| *at < aborted);
            f.side_effects.retain(|(at, _)| *at < aborted);
            if let Covers::Row { claimed, .. } = &mut f.covers {
                if claimed.is_some_and(|at| at >= aborted) {
                    *claimed = None;
                }
            }
        }
    });
}
