//! Per-column versions of an app row (wire version 3; `_sync_column_versions`,
//! encoded by [`syncular_protocol::column_versions`]): the version at which
//! each column of a row last changed, read by the column-level conflict rule
//! of a sparse upsert and moved by every writer.
//!
//! Stored form: NULL when every column sits at the row's `_sync_version`
//! (a fresh insert, a row written before 0.3.0, or a write that moved every
//! column); otherwise `(ordinal, version)` pairs above 1, an unlisted column
//! at 1 — the seed's and `syncular-authority` 0.49.2's encoding, so either
//! reads the other's rows. The primary key's version is never read (it
//! cannot change and never conflicts): it is left out.
//!
//! Which columns move on a write (docs/src/reference/client-generations.md "Per-column versions"):
//! - a sparse upsert (wire 3, `syncular.commit` `patch`): every present
//!   column but the primary key — the `syncular-authority` 0.49.2 rule;
//! - a full-row upsert (wire 1 and 2, `syncular.commit` `upsert`) and a
//!   captured plain SQL `UPDATE`: every column whose value changed (a full
//!   row names every column, so only the values tell what was edited);
//! - an insert: none (NULL: every column at version 1).

use std::collections::BTreeMap;

use syncular_protocol::bitmap;
use syncular_protocol::column_versions::{column_version, decode_column_versions, encode_column_versions};

/// The column versions of one stored row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnVersions {
    /// `None`: every column at `row_version`.
    explicit: Option<BTreeMap<usize, i64>>,
    row_version: i64,
}

impl ColumnVersions {
    /// Reads the stored `_sync_column_versions` of a row at `row_version`. A
    /// malformed value (written by hand: the column is computed) reads as
    /// NULL — every column at the row's version, the highest any can be, so a
    /// stale `baseVersion` conflicts on every column it carries instead of
    /// merging — with a WARNING naming `what`; the write that follows stores a
    /// well-formed value again.
    pub fn read_or_reset(stored: Option<&[u8]>, row_version: i64, what: impl std::fmt::Display) -> Self {
        let explicit = stored.and_then(|bytes| {
            decode_column_versions(Some(bytes))
                .map_err(|e| {
                    pgrx::warning!(
                        "syncular: _sync_column_versions of {what} is unreadable ({}); read as every column at version {row_version}, rewritten by this write",
                        e.message
                    )
                })
                .ok()
        });
        ColumnVersions { explicit, row_version }
    }

    /// The version at which column `index` (layout position) last changed.
    pub fn of(&self, index: usize) -> i64 {
        column_version(self.explicit.as_ref(), self.row_version, index)
    }

    /// The stored form after a write at `new_version` that moved the columns
    /// `moved` says (`columns` in all, `primary_key` left out): NULL when
    /// every other column ends at `new_version`, else the pairs above 1
    /// (possibly none: an empty value).
    pub fn next(
        &self,
        columns: usize,
        primary_key: usize,
        new_version: i64,
        moved: impl Fn(usize) -> bool,
    ) -> Option<Vec<u8>> {
        let next: BTreeMap<usize, i64> = (0..columns)
            .filter(|i| *i != primary_key)
            .map(|i| (i, if moved(i) { new_version } else { self.of(i) }))
            .collect();
        if next.values().all(|v| *v == new_version) {
            return None;
        }
        // Every column at 1 but the row past it (a primary-key-only update of a fresh row):
        // the empty list, not NULL — NULL would read back as "every column at the new
        // version" (the reference authority stores NULL here and then conflicts on every
        // column; `crates/protocol/WIRE_V3.md` §4.3).
        Some(encode_column_versions(&next).unwrap_or_default())
    }

    /// The column-level conflict rule of a sparse upsert with `baseVersion`
    /// `base` (wire 3, as `syncular-authority` 0.49.2 decides it): the
    /// columns that `comparable` admits (present, not the primary key, not a
    /// crdt column) and whose version is above `base` — every one of them
    /// when `base` is 0 (the writer believed the row absent). `Some(bitmap)`
    /// (LSB-first over all `columns`, byte `i / 8`: the `conflictColumns`
    /// of the conflict record) when the operation conflicts: `base` is 0, or
    /// some column is marked; `None` when it applies.
    pub fn conflict(&self, columns: usize, base: i64, comparable: impl Fn(usize) -> bool) -> Option<Vec<u8>> {
        let marked: Vec<usize> = (0..columns).filter(|i| comparable(*i) && (base == 0 || self.of(*i) > base)).collect();
        if base != 0 && marked.is_empty() {
            return None;
        }
        Some(bitmap::from_bits(columns, marked))
    }
}
