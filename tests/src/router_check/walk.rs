//! The parse walk: statements, WITH, SELECT and its query levels (predicates, the pinning
//! fixpoint, unpinned references reported when a level closes), applying the rules of
//! [`super`] as it goes. DML targets are in `dml`, FROM items in `from`, expressions in
//! `exprs`.

use std::collections::{BTreeSet, HashSet};

use pg_query::protobuf::{Node, RangeVar, SelectStmt, SetOperation, WithClause};
use pg_query::NodeEnum;

use super::predicates::{conjuncts, equality, term, Term};
use super::scope::{ColId, Level, Scopes, Source};
use super::tables::{Layout, TableKind};
use super::{Violation, ViolationKind};

/// Walks one statement, collecting violations and the relations it names.
pub(super) struct Walker<'a> {
    pub(super) layout: &'a Layout,
    pub(super) scopes: Scopes,
    /// Visible CTEs: name and pinned output columns (last = innermost).
    pub(super) ctes: Vec<(String, BTreeSet<String>)>,
    /// Locations of the `RangeVar`s the walk understood (the safety net reports the others).
    pub visited: HashSet<i32>,
    pub violations: Vec<Violation>,
    /// Every relation named: `(schema.table as written, kind)`.
    pub relations: Vec<(String, TableKind)>,
    /// The `$n` / constants distributed references are pinned to directly (`= value`, INSERT
    /// rows).
    pub pinned_values: BTreeSet<String>,
}

impl<'a> Walker<'a> {
    pub fn new(layout: &'a Layout) -> Self {
        Walker { layout, scopes: Scopes::default(), ctes: Vec::new(), visited: HashSet::new(), violations: Vec::new(), relations: Vec::new(), pinned_values: BTreeSet::new() }
    }

    pub(super) fn violation(&mut self, kind: ViolationKind, detail: String) {
        self.violations.push(Violation { kind, detail });
    }

    /// A statement (top level or data-modifying CTE). Returns the pinned output columns.
    pub fn statement(&mut self, node: &Node) -> BTreeSet<String> {
        match &node.node {
            Some(NodeEnum::SelectStmt(s)) => self.select(s),
            Some(NodeEnum::InsertStmt(s)) => self.insert(s),
            Some(NodeEnum::UpdateStmt(s)) => self.update(s),
            Some(NodeEnum::DeleteStmt(s)) => self.delete(s),
            _ => BTreeSet::new(), // utility statements: the safety net checks their relations
        }
    }

    pub(super) fn with(&mut self, with: Option<&WithClause>) -> usize {
        let mark = self.ctes.len();
        for cte in with.map(|w| w.ctes.as_slice()).unwrap_or_default() {
            let Some(NodeEnum::CommonTableExpr(c)) = &cte.node else { continue };
            let Some(query) = c.ctequery.as_deref() else { continue };
            if let Some(NodeEnum::InsertStmt(i)) = &query.node {
                let target = i.relation.as_ref().map(qualified).unwrap_or_default();
                self.violation(ViolationKind::InsertCte, format!("WITH {} AS (INSERT INTO {target} …)", c.ctename));
            }
            let outs = self.statement(query);
            self.ctes.push((c.ctename.clone(), outs));
        }
        mark
    }

    pub(super) fn select(&mut self, s: &SelectStmt) -> BTreeSet<String> {
        let mark = self.with(s.with_clause.as_ref());
        let outs = if s.op != SetOperation::SetopNone as i32 && s.op != SetOperation::Undefined as i32 {
            let l = s.larg.as_deref().map(|l| self.select(l)).unwrap_or_default();
            let r = s.rarg.as_deref().map(|r| self.select(r)).unwrap_or_default();
            self.level(|w| w.exprs(&s.sort_clause));
            l.intersection(&r).cloned().collect()
        } else {
            self.scopes.levels.push(Level::default());
            let mut quals: Vec<&Node> = Vec::new();
            let mut laterals: Vec<(usize, &Node)> = Vec::new();
            for item in &s.from_clause {
                self.range_item(item, &mut quals, &mut laterals);
            }
            for lc in &s.locking_clause {
                if let Some(NodeEnum::LockingClause(l)) = &lc.node {
                    self.mark_visited(&l.locked_rels);
                }
            }
            if let Some(w) = s.where_clause.as_deref() {
                quals.push(w);
            }
            self.level_predicates(&quals, &laterals);
            for v in &s.values_lists {
                self.expr(v);
            }
            for q in &quals {
                self.expr(q);
            }
            self.exprs(&s.target_list);
            self.exprs(&s.group_clause);
            self.exprs(&s.sort_clause);
            self.exprs(&s.distinct_clause);
            for e in [&s.having_clause, &s.limit_count, &s.limit_offset].into_iter().flatten() {
                self.expr(e);
            }
            let outs = self.outputs(&s.target_list);
            self.close_level();
            outs
        };
        self.ctes.truncate(mark);
        outs
    }

    /// Runs `f` inside a fresh level (ORDER BY of a set operation).
    pub(super) fn level(&mut self, f: impl FnOnce(&mut Self)) {
        self.scopes.levels.push(Level::default());
        f(self);
        self.scopes.levels.pop();
    }

    /// Equalities of the level's predicate set, direct pins, LATERAL subqueries (they see the
    /// level), then the join fixpoint again.
    pub(super) fn level_predicates(&mut self, quals: &[&Node], laterals: &[(usize, &Node)]) {
        let top = self.scopes.top();
        let mut all = Vec::new();
        for q in quals {
            conjuncts(q, &mut all);
        }
        for c in all {
            let Some((l, r)) = equality(c) else { continue };
            let (lc, rc) = (self.column(&l), self.column(&r));
            match (lc, rc, &l, &r) {
                (Some(a), Some(b), _, _) => self.scopes.top_mut().edges.push((a, b)),
                (Some(a), None, _, Term::Value(key)) | (None, Some(a), Term::Value(key), _) => {
                    let r = &mut self.scopes.levels[a.0].refs[a.1];
                    if a.0 == top && matches!(&r.source, Source::Distributed(col) if *col == a.2) {
                        r.pinned = true;
                        self.pinned_values.insert(key.clone());
                    }
                }
                _ => {}
            }
        }
        self.scopes.propagate();
        for (at, sub) in laterals {
            let outs = self.subquery_or_function(sub);
            self.scopes.levels[top].refs[*at].source = Source::Derived(outs);
        }
        if !laterals.is_empty() {
            self.scopes.propagate();
        }
    }

    pub(super) fn column(&self, t: &Term) -> Option<ColId> {
        match t {
            Term::Column(names) => self.scopes.resolve(names),
            _ => None,
        }
    }

    /// Reports the level's unpinned distributed references and pops it.
    pub(super) fn close_level(&mut self) {
        let level = self.scopes.levels.pop().expect("a level");
        for r in level.refs {
            if let (Source::Distributed(col), false) = (&r.source, r.pinned) {
                self.violation(ViolationKind::UnpinnedReference, format!("{} has no {col} = $n/constant (nor a join on {col} to a pinned reference)", r.label));
            }
        }
    }

    /// The pinned output columns of a target list (or RETURNING list) at the top level.
    pub(super) fn outputs(&self, targets: &[Node]) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for t in targets {
            let Some(NodeEnum::ResTarget(rt)) = &t.node else { continue };
            let Some(val) = rt.val.as_deref() else { continue };
            if let Some(NodeEnum::ColumnRef(c)) = &val.node {
                if matches!(c.fields.last().and_then(|f| f.node.as_ref()), Some(NodeEnum::AStar(_))) {
                    for r in &self.scopes.levels[self.scopes.top()].refs {
                        match &r.source {
                            Source::Distributed(col) if r.pinned => {
                                out.insert(col.clone());
                            }
                            Source::Derived(cols) => out.extend(cols.iter().cloned()),
                            _ => {}
                        }
                    }
                    continue;
                }
            }
            let pinned = match term(val) {
                Term::Column(names) => {
                    let id = self.scopes.resolve(&names);
                    let name = names.last().cloned().unwrap_or_default();
                    id.filter(|id| self.scopes.is_pinned_column(id)).map(|_| name)
                }
                Term::Value(_) => Some(String::new()),
                Term::Other(_) => None,
            };
            if let Some(name) = pinned {
                let name = if rt.name.is_empty() { name } else { rt.name.clone() };
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        }
        out
    }

}

/// `schema.table` as written (just `table` when unqualified).
pub(super) fn qualified(rv: &RangeVar) -> String {
    if rv.schemaname.is_empty() {
        rv.relname.clone()
    } else {
        format!("{}.{}", rv.schemaname, rv.relname)
    }
}
