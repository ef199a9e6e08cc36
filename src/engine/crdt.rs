//! CRDT columns (SPEC §5.10): the merge step of an upsert, shared by pushes,
//! `syncular.commit` (both through [`crate::engine::push::apply`]) and
//! captured plain SQL writes ([`crate::engine::capture::row`]). pgrx-free;
//! the mergers live in the `syncular-crdt` crate.
//!
//! Pinned semantics (§5.10.3, docs/src/guide/crdt.md):
//! - a non-NULL value of a `crdt` column is an update (a full state is a
//!   legal one) merged into the stored value: the column stores, and every
//!   change carries, `merge(stored, incoming)` — the stored value is `None`
//!   for an insert or a NULL column (the empty document);
//! - a NULL value clears the column (a plain write, no merge — the
//!   reference server's rule);
//! - no merger for the column's `crdtType`, or bytes the merger refuses
//!   (not an update of its CRDT), is `sync.crdt_merge_failed`.
//!
//! The registry is the built-in one ([`Registry::builtin`]: `yjs-doc`); a
//! schema naming another `crdtType` is refused at registration (§5.10.1),
//! and a push against one still fails per operation (a schema stored before
//! an upgrade that dropped a merger).

use std::sync::OnceLock;

use syncular_crdt::Registry;
use syncular_protocol::row_codec::{ColumnType, Row, RowValue};
use syncular_protocol::schema_ir::TableSchema;

/// The mergers this server serves with (built once per backend).
pub fn registry() -> &'static Registry<'static> {
    static REGISTRY: OnceLock<Registry<'static>> = OnceLock::new();
    REGISTRY.get_or_init(Registry::builtin)
}

/// The `crdtType` names [`registry`] serves (for the §5.10.1 check).
pub fn known_types() -> Vec<&'static str> {
    registry().types()
}

/// A merge that failed: the column and the reason (`sync.crdt_merge_failed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeFailure {
    /// The `crdt` column.
    pub column: String,
    /// What went wrong (no merger, bytes that are not an update).
    pub message: String,
}

impl MergeFailure {
    /// The `sync.crdt_merge_failed` message for table `table`.
    pub fn describe(&self, table: &str) -> String {
        format!("crdt column {:?} of table {table:?}: {} (§5.10.2)", self.column, self.message)
    }
}

/// Replaces every non-NULL `crdt` value of `row` with `merge(stored,
/// incoming)`, `stored` the same column of `stored` (`None`: an insert).
/// Columns listed in `skip` are left as they are (a captured UPDATE that
/// did not change them). Returns the positions whose value changed (the
/// caller re-encodes the payload then).
pub fn merge_row(
    table: &TableSchema,
    row: &mut Row,
    stored: Option<&Row>,
    skip: &dyn Fn(usize) -> bool,
) -> Result<Vec<usize>, MergeFailure> {
    let mut changed = Vec::new();
    for (i, col) in table.columns.iter().enumerate() {
        if col.ty != ColumnType::Crdt || skip(i) {
            continue;
        }
        let Some(Some(RowValue::Crdt(incoming))) = row.get(i) else { continue };
        let crdt_type = col.crdt_type.as_deref().unwrap_or_default();
        let before = match stored.and_then(|s| s.get(i)) {
            Some(Some(RowValue::Crdt(b))) => Some(b.as_slice()),
            _ => None,
        };
        let merged = registry()
            .merge(crdt_type, before, incoming)
            .map_err(|e| MergeFailure { column: col.name.clone(), message: e.message })?;
        if &merged != incoming {
            changed.push(i);
            row[i] = Some(RowValue::Crdt(merged));
        }
    }
    Ok(changed)
}
