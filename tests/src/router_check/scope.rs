//! Query levels: the range references a level introduces, how a column name resolves to one of
//! them (innermost level first, like Postgres), and the fixpoint that decides which
//! distributed references of a level are pinned to one partition.

use std::collections::BTreeSet;

/// What a range reference reads.
#[derive(Clone, Debug)]
pub(super) enum Source {
    /// A distributed table with this distribution column.
    Distributed(String),
    /// A subquery or CTE: the output columns known to carry one pinned partition value.
    Derived(BTreeSet<String>),
    /// A reference, catalog or local table, a function, a VALUES list.
    Other,
}

/// One range reference of a level (FROM item, JOIN side, DML target, USING item).
#[derive(Clone, Debug)]
pub(super) struct Ref {
    /// The name columns qualify it with: its alias, else its relation name.
    pub name: String,
    /// Schema as written (empty when unqualified) and relation name, for `schema.table.col`.
    pub schema: String,
    pub relname: String,
    /// For messages: `syncular.sync_commits AS c`.
    pub label: String,
    pub source: Source,
    pub pinned: bool,
}

/// A resolved column: `(level index in the stack, ref index in that level, column name)`.
pub(super) type ColId = (usize, usize, String);

/// One query level: its references and the column equalities of its predicate set.
#[derive(Debug, Default)]
pub(super) struct Level {
    pub refs: Vec<Ref>,
    pub edges: Vec<(ColId, ColId)>,
}

/// The stack of levels enclosing the point of the walk (last = innermost).
#[derive(Debug, Default)]
pub(super) struct Scopes {
    pub levels: Vec<Level>,
}

impl Scopes {
    pub fn top(&self) -> usize {
        self.levels.len() - 1
    }

    pub fn top_mut(&mut self) -> &mut Level {
        self.levels.last_mut().expect("a level")
    }

    pub fn get(&self, id: &ColId) -> &Ref {
        &self.levels[id.0].refs[id.1]
    }

    /// Resolves a column reference written as `names` (`col`, `alias.col`, `schema.table.col`).
    /// An unqualified name resolves at the innermost level holding exactly one reference known
    /// to have that column (a distributed table's distribution column, a derived pinned column);
    /// `None` when unknown or ambiguous.
    pub fn resolve(&self, names: &[String]) -> Option<ColId> {
        let col = names.last()?.clone();
        for (li, level) in self.levels.iter().enumerate().rev() {
            let hits: Vec<usize> = level
                .refs
                .iter()
                .enumerate()
                .filter(|(_, r)| match names.len() {
                    1 => has_column(r, &col),
                    2 => r.name == names[0],
                    _ => r.relname == names[names.len() - 2] && r.schema == names[names.len() - 3],
                })
                .map(|(i, _)| i)
                .collect();
            match hits.as_slice() {
                [one] => return Some((li, *one, col)),
                [] => continue,
                _ => return None,
            }
        }
        None
    }

    /// Whether `id` carries one pinned partition value: the distribution column of a pinned
    /// distributed reference, or a pinned output column of a subquery/CTE.
    pub fn is_pinned_column(&self, id: &ColId) -> bool {
        let r = self.get(id);
        match &r.source {
            Source::Distributed(column) => r.pinned && *column == id.2,
            Source::Derived(cols) => cols.contains(&id.2),
            Source::Other => false,
        }
    }

    /// Pins the top level's distributed references through its column equalities (join on
    /// the distribution column, transitively, also to pinned columns of enclosing levels).
    pub fn propagate(&mut self) {
        let top = self.top();
        loop {
            let mut newly = Vec::new();
            for (a, b) in &self.levels[top].edges {
                for (x, y) in [(a, b), (b, a)] {
                    if x.0 != top || newly.contains(&x.1) {
                        continue;
                    }
                    let r = self.get(x);
                    let is_dist_col = matches!(&r.source, Source::Distributed(c) if *c == x.2);
                    if is_dist_col && !r.pinned && self.is_pinned_column(y) {
                        newly.push(x.1);
                    }
                }
            }
            if newly.is_empty() {
                return;
            }
            for i in newly {
                self.levels[top].refs[i].pinned = true;
            }
        }
    }
}

/// Whether `r` is known to have column `col` (only distribution columns and derived pinned
/// columns are tracked; other columns never matter to the rules).
pub(super) fn has_column(r: &Ref, col: &str) -> bool {
    match &r.source {
        Source::Distributed(c) => c == col,
        Source::Derived(cols) => cols.contains(col),
        Source::Other => false,
    }
}
