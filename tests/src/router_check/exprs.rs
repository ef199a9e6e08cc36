//! Expressions: the subqueries they hold (EXISTS, IN, scalar, ARRAY(…)), walked as nested levels.

use pg_query::protobuf::Node;
use pg_query::NodeEnum;

use super::predicates::describe;
use super::walk::Walker;
use super::ViolationKind;

impl Walker<'_> {
    pub(super) fn exprs(&mut self, nodes: &[Node]) {
        for n in nodes {
            self.expr(n);
        }
    }

    /// Finds the subqueries of an expression and walks each as a level nested in the current
    /// one (correlated references resolve outward). Unknown node kinds are walked generically
    /// through their serialized form by [`super::contains_key`]: a subquery there is reported
    /// as unsupported rather than skipped.
    pub(super) fn expr(&mut self, node: &Node) {
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
