//! The parse walk: statements, query levels, range references and the subqueries in
//! expressions, applying the rules of [`super`] as it goes.

use std::collections::{BTreeSet, HashSet};

use pg_query::protobuf::{
    DeleteStmt, InsertStmt, Node, RangeVar, SelectStmt, SetOperation, UpdateStmt, WithClause,
};
use pg_query::NodeEnum;

use super::predicates::{conjuncts, equality, describe, term, value_key, Term};
use super::scope::{ColId, Level, Ref, Scopes, Source};
use super::tables::{Layout, TableKind};
use super::{Violation, ViolationKind};

/// Walks one statement, collecting violations and the relations it names.
pub(super) struct Walker<'a> {
    layout: &'a Layout,
    scopes: Scopes,
    /// Visible CTEs: name and pinned output columns (last = innermost).
    ctes: Vec<(String, BTreeSet<String>)>,
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

    fn violation(&mut self, kind: ViolationKind, detail: String) {
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

    fn with(&mut self, with: Option<&WithClause>) -> usize {
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

    fn select(&mut self, s: &SelectStmt) -> BTreeSet<String> {
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
                self.from_item(item, &mut quals, &mut laterals);
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

    fn insert(&mut self, s: &InsertStmt) -> BTreeSet<String> {
        let mark = self.with(s.with_clause.as_ref());
        let Some(rel) = s.relation.as_ref() else { return BTreeSet::new() };
        let kind = self.classify(rel);
        let citus = matches!(kind, TableKind::Distributed { .. } | TableKind::Reference);
        let source = s.select_stmt.as_deref().and_then(|n| match &n.node {
            Some(NodeEnum::SelectStmt(sel)) => Some(sel.as_ref()),
            _ => None,
        });
        let values = source.filter(|sel| !sel.values_lists.is_empty() && sel.from_clause.is_empty());
        match (source, values) {
            (Some(sel), None) => {
                if citus {
                    let from = if sel.from_clause.is_empty() { "SELECT without FROM" } else { "SELECT … FROM" };
                    self.violation(ViolationKind::InsertSelect, format!("INSERT INTO {} {from}", qualified(rel)));
                }
                self.select(sel);
            }
            (_, Some(sel)) => {
                if let TableKind::Distributed { column } = &kind {
                    self.insert_values(rel, &s.cols, sel, column);
                }
                self.select(sel);
            }
            (None, None) => {
                if let TableKind::Distributed { column } = &kind {
                    self.violation(ViolationKind::InsertPartitionValue, format!("INSERT INTO {} DEFAULT VALUES: no value for {column}", qualified(rel)));
                }
            }
        }
        // ON CONFLICT and RETURNING see the target (pinned by its VALUES) and `excluded`.
        self.scopes.levels.push(Level::default());
        self.add_ref(rel, kind, true);
        if let Some(oc) = s.on_conflict_clause.as_deref() {
            self.exprs(&oc.target_list);
            if let Some(w) = oc.where_clause.as_deref() {
                self.expr(w);
            }
        }
        let returning = s.returning_clause.as_ref().map(|r| r.exprs.as_slice()).unwrap_or_default();
        self.exprs(returning);
        let outs = self.outputs(returning);
        self.scopes.levels.pop();
        self.ctes.truncate(mark);
        outs
    }

    /// Rule 1 for `INSERT … VALUES`: every row's partition value is a `$n` or constant, the
    /// same one in every row.
    fn insert_values(&mut self, rel: &RangeVar, cols: &[Node], sel: &SelectStmt, column: &str) {
        let target = qualified(rel);
        let Some(at) = cols.iter().position(|c| matches!(&c.node, Some(NodeEnum::ResTarget(r)) if r.name == column)) else {
            let why = if cols.is_empty() { "no column list" } else { "the column list lacks it" };
            self.violation(ViolationKind::InsertPartitionValue, format!("INSERT INTO {target}: {why} for {column}"));
            return;
        };
        let mut keys = BTreeSet::new();
        for (i, row) in sel.values_lists.iter().enumerate() {
            let Some(NodeEnum::List(list)) = &row.node else { continue };
            match list.items.get(at).map(|v| (v, value_key(v))) {
                Some((_, Some(key))) => {
                    keys.insert(key);
                }
                Some((v, None)) => {
                    let d = describe(v);
                    self.violation(ViolationKind::InsertPartitionValue, format!("INSERT INTO {target}: row {} sets {column} to {d}, not a $n or constant", i + 1));
                }
                None => self.violation(ViolationKind::InsertPartitionValue, format!("INSERT INTO {target}: row {} has no value for {column}", i + 1)),
            }
        }
        self.pinned_values.extend(keys.iter().cloned());
        if keys.len() > 1 {
            let keys: Vec<String> = keys.into_iter().collect();
            self.violation(ViolationKind::InsertPartitionValue, format!("INSERT INTO {target}: rows set {column} to different values ({})", keys.join(", ")));
        }
    }

    fn update(&mut self, s: &UpdateStmt) -> BTreeSet<String> {
        let returning = s.returning_clause.as_ref().map(|r| r.exprs.as_slice()).unwrap_or_default();
        self.dml(s.with_clause.as_ref(), s.relation.as_ref(), &s.from_clause, s.where_clause.as_deref(), &s.target_list, returning)
    }

    fn delete(&mut self, s: &DeleteStmt) -> BTreeSet<String> {
        let returning = s.returning_clause.as_ref().map(|r| r.exprs.as_slice()).unwrap_or_default();
        self.dml(s.with_clause.as_ref(), s.relation.as_ref(), &s.using_clause, s.where_clause.as_deref(), &[], returning)
    }

    /// UPDATE / DELETE: the target and the FROM / USING items form one level.
    fn dml(&mut self, with: Option<&WithClause>, rel: Option<&RangeVar>, from: &[Node], wh: Option<&Node>, set: &[Node], returning: &[Node]) -> BTreeSet<String> {
        let mark = self.with(with);
        self.scopes.levels.push(Level::default());
        if let Some(rel) = rel {
            let kind = self.classify(rel);
            self.add_ref(rel, kind, false);
        }
        let mut quals: Vec<&Node> = Vec::new();
        let mut laterals = Vec::new();
        for item in from {
            self.from_item(item, &mut quals, &mut laterals);
        }
        quals.extend(wh);
        self.level_predicates(&quals, &laterals);
        for q in &quals {
            self.expr(q);
        }
        self.exprs(set);
        self.exprs(returning);
        let outs = self.outputs(returning);
        self.close_level();
        self.ctes.truncate(mark);
        outs
    }

    /// Runs `f` inside a fresh level (ORDER BY of a set operation).
    fn level(&mut self, f: impl FnOnce(&mut Self)) {
        self.scopes.levels.push(Level::default());
        f(self);
        self.scopes.levels.pop();
    }

    /// Equalities of the level's predicate set, direct pins, LATERAL subqueries (they see the
    /// level), then the join fixpoint again.
    fn level_predicates(&mut self, quals: &[&Node], laterals: &[(usize, &Node)]) {
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

    fn column(&self, t: &Term) -> Option<ColId> {
        match t {
            Term::Column(names) => self.scopes.resolve(names),
            _ => None,
        }
    }

    /// Reports the level's unpinned distributed references and pops it.
    fn close_level(&mut self) {
        let level = self.scopes.levels.pop().expect("a level");
        for r in level.refs {
            if let (Source::Distributed(col), false) = (&r.source, r.pinned) {
                self.violation(ViolationKind::UnpinnedReference, format!("{} has no {col} = $n/constant (nor a join on {col} to a pinned reference)", r.label));
            }
        }
    }

    /// The pinned output columns of a target list (or RETURNING list) at the top level.
    fn outputs(&self, targets: &[Node]) -> BTreeSet<String> {
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

    /// One FROM / USING item: adds its references to the top level, its ON clauses to `quals`,
    /// its USING equalities to the level, and LATERAL items to `laterals` (walked after the
    /// level's predicates are known).
    fn from_item<'n>(&mut self, node: &'n Node, quals: &mut Vec<&'n Node>, laterals: &mut Vec<(usize, &'n Node)>) {
        match &node.node {
            Some(NodeEnum::RangeVar(rv)) => {
                let cte = if rv.schemaname.is_empty() { self.ctes.iter().rev().find(|(n, _)| *n == rv.relname) } else { None };
                match cte {
                    Some((_, outs)) => {
                        let source = Source::Derived(outs.clone());
                        self.visited.insert(rv.location);
                        self.push_ref(rv, source, false);
                    }
                    None => {
                        let kind = self.classify(rv);
                        self.add_ref(rv, kind, false);
                    }
                }
            }
            Some(NodeEnum::JoinExpr(j)) => {
                let left_start = self.scopes.top_mut().refs.len();
                if let Some(l) = j.larg.as_deref() {
                    self.from_item(l, quals, laterals);
                }
                let right_start = self.scopes.top_mut().refs.len();
                if let Some(r) = j.rarg.as_deref() {
                    self.from_item(r, quals, laterals);
                }
                let end = self.scopes.top_mut().refs.len();
                if let Some(q) = j.quals.as_deref() {
                    quals.push(q);
                }
                self.using_equalities(&j.using_clause, left_start..right_start, right_start..end);
            }
            Some(NodeEnum::RangeSubselect(rs)) => {
                let name = rs.alias.as_ref().map(|a| a.aliasname.clone()).unwrap_or_default();
                let at = self.push_named(&name, "a subquery", Source::Derived(BTreeSet::new()));
                if rs.lateral {
                    laterals.push((at, node));
                } else {
                    let outs = self.subquery_or_function(node);
                    self.scopes.top_mut().refs[at].source = Source::Derived(outs);
                }
            }
            Some(NodeEnum::RangeFunction(rf)) => {
                let name = rf.alias.as_ref().map(|a| a.aliasname.clone()).unwrap_or_default();
                let at = self.push_named(&name, "a function", Source::Other);
                if rf.lateral {
                    laterals.push((at, node));
                } else {
                    self.subquery_or_function(node);
                }
            }
            Some(_) => self.expr(node), // other range items: only their subqueries matter
            None => {}
        }
    }

    /// Walks a RangeSubselect's query or a RangeFunction's arguments; the subquery's pinned
    /// output columns (none for a function).
    fn subquery_or_function(&mut self, node: &Node) -> BTreeSet<String> {
        match &node.node {
            Some(NodeEnum::RangeSubselect(rs)) => rs.subquery.as_deref().map(|q| self.statement(q)).unwrap_or_default(),
            Some(NodeEnum::RangeFunction(rf)) => {
                self.exprs(&rf.functions);
                BTreeSet::new()
            }
            _ => BTreeSet::new(),
        }
    }

    fn using_equalities(&mut self, using: &[Node], left: std::ops::Range<usize>, right: std::ops::Range<usize>) {
        let top = self.scopes.top();
        for u in using {
            let Some(NodeEnum::String(s)) = &u.node else { continue };
            let has = |i: usize| super::scope::has_column(&self.scopes.levels[top].refs[i], &s.sval);
            let ls: Vec<usize> = left.clone().filter(|i| has(*i)).collect();
            let rs: Vec<usize> = right.clone().filter(|i| has(*i)).collect();
            for l in &ls {
                for r in &rs {
                    self.scopes.top_mut().edges.push(((top, *l, s.sval.clone()), (top, *r, s.sval.clone())));
                }
            }
        }
    }

    fn classify(&mut self, rv: &RangeVar) -> TableKind {
        let kind = self.layout.classify(&rv.schemaname, &rv.relname);
        self.relations.push((qualified(rv), kind.clone()));
        if kind == TableKind::UnknownSync {
            self.violation(ViolationKind::UnknownTable, format!("{} is not in the layout (distributed or reference?)", qualified(rv)));
        }
        kind
    }

    fn add_ref(&mut self, rv: &RangeVar, kind: TableKind, pinned: bool) {
        self.visited.insert(rv.location);
        let source = match kind {
            TableKind::Distributed { column } => Source::Distributed(column),
            _ => Source::Other,
        };
        self.push_ref(rv, source, pinned);
    }

    fn push_ref(&mut self, rv: &RangeVar, source: Source, pinned: bool) {
        let alias = rv.alias.as_ref().map(|a| a.aliasname.clone());
        let label = match &alias {
            Some(a) => format!("{} AS {a}", qualified(rv)),
            None => qualified(rv),
        };
        let name = alias.unwrap_or_else(|| rv.relname.clone());
        let r = Ref { name, schema: rv.schemaname.clone(), relname: rv.relname.clone(), label, source, pinned };
        self.scopes.top_mut().refs.push(r);
    }

    fn push_named(&mut self, name: &str, what: &str, source: Source) -> usize {
        let label = format!("{what} {name}");
        let r = Ref { name: name.to_owned(), schema: String::new(), relname: name.to_owned(), label, source, pinned: false };
        self.scopes.top_mut().refs.push(r);
        self.scopes.top_mut().refs.len() - 1
    }

    fn mark_visited(&mut self, rels: &[Node]) {
        for n in rels {
            if let Some(NodeEnum::RangeVar(rv)) = &n.node {
                self.visited.insert(rv.location);
            }
        }
    }

    fn exprs(&mut self, nodes: &[Node]) {
        for n in nodes {
            self.expr(n);
        }
    }

    /// Finds the subqueries of an expression and walks each as a level nested in the current
    /// one (correlated references resolve outward). Unknown node kinds are walked generically
    /// through their serialized form by [`super::contains_key`]: a subquery there is reported
    /// as unsupported rather than skipped.
    fn expr(&mut self, node: &Node) {
        let Some(n) = &node.node else { return };
        let one = |w: &mut Self, n: &Option<Box<Node>>| {
            if let Some(n) = n.as_deref() {
                w.expr(n);
            }
        };
        match n {
            NodeEnum::SubLink(s) => {
                one(self, &s.testexpr);
                if let Some(q) = s.subselect.as_deref() {
                    self.statement(q);
                }
            }
            NodeEnum::AExpr(e) => {
                one(self, &e.lexpr);
                one(self, &e.rexpr);
            }
            NodeEnum::BoolExpr(b) => self.exprs(&b.args),
            NodeEnum::FuncCall(f) => {
                self.exprs(&f.args);
                self.exprs(&f.agg_order);
                one(self, &f.agg_filter);
                if let Some(over) = f.over.as_deref() {
                    self.exprs(&over.partition_clause);
                    self.exprs(&over.order_clause);
                }
            }
            NodeEnum::TypeCast(t) => one(self, &t.arg),
            NodeEnum::CollateClause(c) => one(self, &c.arg),
            NodeEnum::CaseExpr(c) => {
                one(self, &c.arg);
                self.exprs(&c.args);
                one(self, &c.defresult);
            }
            NodeEnum::CaseWhen(c) => {
                one(self, &c.expr);
                one(self, &c.result);
            }
            NodeEnum::CoalesceExpr(c) => self.exprs(&c.args),
            NodeEnum::MinMaxExpr(m) => self.exprs(&m.args),
            NodeEnum::NullTest(t) => one(self, &t.arg),
            NodeEnum::BooleanTest(t) => one(self, &t.arg),
            NodeEnum::RowExpr(r) => self.exprs(&r.args),
            NodeEnum::AArrayExpr(a) => self.exprs(&a.elements),
            NodeEnum::AIndirection(a) => one(self, &a.arg),
            NodeEnum::List(l) => self.exprs(&l.items),
            NodeEnum::ResTarget(r) => one(self, &r.val),
            NodeEnum::MultiAssignRef(m) => one(self, &m.source),
            NodeEnum::SortBy(s) => one(self, &s.node),
            NodeEnum::ColumnRef(_) | NodeEnum::ParamRef(_) | NodeEnum::AConst(_) | NodeEnum::SqlvalueFunction(_) | NodeEnum::SetToDefault(_) => {}
            other => {
                if super::contains_key(other, "SubLink") || super::contains_key(other, "RangeVar") {
                    self.violation(ViolationKind::Unsupported, format!("a subquery inside {} (not understood by the checker)", describe(node)));
                }
            }
        }
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
