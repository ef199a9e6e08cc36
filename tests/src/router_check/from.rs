//! FROM / USING items: range references, JOIN … ON / USING, subqueries, functions, LATERAL.

use std::collections::BTreeSet;

use pg_query::protobuf::{Node, RangeVar};
use pg_query::NodeEnum;

use super::scope::{Ref, Source};
use super::tables::TableKind;
use super::walk::{qualified, Walker};
use super::ViolationKind;

impl Walker<'_> {
    /// One FROM / USING item: adds its references to the top level, its ON clauses to `quals`,
    /// its USING equalities to the level, and LATERAL items to `laterals` (walked after the
    /// level's predicates are known).
    pub(super) fn range_item<'n>(&mut self, node: &'n Node, quals: &mut Vec<&'n Node>, laterals: &mut Vec<(usize, &'n Node)>) {
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
                    self.range_item(l, quals, laterals);
                }
                let right_start = self.scopes.top_mut().refs.len();
                if let Some(r) = j.rarg.as_deref() {
                    self.range_item(r, quals, laterals);
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
    pub(super) fn subquery_or_function(&mut self, node: &Node) -> BTreeSet<String> {
        match &node.node {
            Some(NodeEnum::RangeSubselect(rs)) => rs.subquery.as_deref().map(|q| self.statement(q)).unwrap_or_default(),
            Some(NodeEnum::RangeFunction(rf)) => {
                self.exprs(&rf.functions);
                BTreeSet::new()
            }
            _ => BTreeSet::new(),
        }
    }

    pub(super) fn using_equalities(&mut self, using: &[Node], left: std::ops::Range<usize>, right: std::ops::Range<usize>) {
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

    pub(super) fn classify(&mut self, rv: &RangeVar) -> TableKind {
        let kind = self.layout.classify(&rv.schemaname, &rv.relname);
        self.relations.push((qualified(rv), kind.clone()));
        if kind == TableKind::UnknownSync {
            self.violation(ViolationKind::UnknownTable, format!("{} is not in the layout (distributed or reference?)", qualified(rv)));
        }
        kind
    }

    pub(super) fn add_ref(&mut self, rv: &RangeVar, kind: TableKind, pinned: bool) {
        self.visited.insert(rv.location);
        let source = match kind {
            TableKind::Distributed { column } => Source::Distributed(column),
            _ => Source::Other,
        };
        self.push_ref(rv, source, pinned);
    }

    pub(super) fn push_ref(&mut self, rv: &RangeVar, source: Source, pinned: bool) {
        let alias = rv.alias.as_ref().map(|a| a.aliasname.clone());
        let label = match &alias {
            Some(a) => format!("{} AS {a}", qualified(rv)),
            None => qualified(rv),
        };
        let name = alias.unwrap_or_else(|| rv.relname.clone());
        let r = Ref { name, schema: rv.schemaname.clone(), relname: rv.relname.clone(), label, source, pinned };
        self.scopes.top_mut().refs.push(r);
    }

    pub(super) fn push_named(&mut self, name: &str, what: &str, source: Source) -> usize {
        let label = format!("{what} {name}");
        let r = Ref { name: name.to_owned(), schema: String::new(), relname: name.to_owned(), label, source, pinned: false };
        self.scopes.top_mut().refs.push(r);
        self.scopes.top_mut().refs.len() - 1
    }

    pub(super) fn mark_visited(&mut self, rels: &[Node]) {
        for n in rels {
            if let Some(NodeEnum::RangeVar(rv)) = &n.node {
                self.visited.insert(rv.location);
            }
        }
    }
}
