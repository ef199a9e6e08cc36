//! INSERT, UPDATE and DELETE: the DML targets, rule 1 for `INSERT … VALUES`, rule 2.

use std::collections::BTreeSet;

use pg_query::protobuf::{DeleteStmt, InsertStmt, Node, RangeVar, SelectStmt, UpdateStmt, WithClause};
use pg_query::NodeEnum;

use super::predicates::{describe, value_key};
use super::scope::Level;
use super::tables::TableKind;
use super::walk::{qualified, Walker};
use super::ViolationKind;

impl Walker<'_> {
    pub(super) fn insert(&mut self, s: &InsertStmt) -> BTreeSet<String> {
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
    pub(super) fn insert_values(&mut self, rel: &RangeVar, cols: &[Node], sel: &SelectStmt, column: &str) {
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

    pub(super) fn update(&mut self, s: &UpdateStmt) -> BTreeSet<String> {
        let returning = s.returning_clause.as_ref().map(|r| r.exprs.as_slice()).unwrap_or_default();
        self.dml(s.with_clause.as_ref(), s.relation.as_ref(), &s.from_clause, s.where_clause.as_deref(), &s.target_list, returning)
    }

    pub(super) fn delete(&mut self, s: &DeleteStmt) -> BTreeSet<String> {
        let returning = s.returning_clause.as_ref().map(|r| r.exprs.as_slice()).unwrap_or_default();
        self.dml(s.with_clause.as_ref(), s.relation.as_ref(), &s.using_clause, s.where_clause.as_deref(), &[], returning)
    }

    /// UPDATE / DELETE: the target and the FROM / USING items form one level.
    pub(super) fn dml(&mut self, with: Option<&WithClause>, rel: Option<&RangeVar>, from: &[Node], wh: Option<&Node>, set: &[Node], returning: &[Node]) -> BTreeSet<String> {
        let mark = self.with(with);
        self.scopes.levels.push(Level::default());
        if let Some(rel) = rel {
            let kind = self.classify(rel);
            self.add_ref(rel, kind, false);
        }
        let mut quals: Vec<&Node> = Vec::new();
        let mut laterals = Vec::new();
        for item in from {
            self.range_item(item, &mut quals, &mut laterals);
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
}
