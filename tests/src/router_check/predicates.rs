//! The predicate side of the rules: a level's AND-conjunction, the equalities in it, and what
//! each side of an equality is (a column, a pinned value, or something else).

use pg_query::protobuf::{a_const, AExprKind, BoolExprType, Node};
use pg_query::NodeEnum;

/// One side of an equality.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Term {
    /// A column reference, its name parts as written (`["c", "partition"]`).
    Column(Vec<String>),
    /// A `$n` parameter or a non-NULL constant (casts and COLLATE stripped); the key identifies
    /// the value (`$1`, `'tenant'`), so two rows carrying the same one compare equal.
    Value(String),
    /// Anything else: a function call, an expression, NULL.
    Other(String),
}

/// Pushes the AND-conjuncts of `node` (a WHERE or ON clause) onto `out`.
pub(super) fn conjuncts<'a>(node: &'a Node, out: &mut Vec<&'a Node>) {
    if let Some(NodeEnum::BoolExpr(b)) = &node.node {
        if b.boolop == BoolExprType::AndExpr as i32 {
            for arg in &b.args {
                conjuncts(arg, out);
            }
            return;
        }
    }
    out.push(node);
}

/// `(left, right)` when `node` is `left = right` (operator `=`, possibly `OPERATOR(pg_catalog.=)`).
pub(super) fn equality(node: &Node) -> Option<(Term, Term)> {
    let Some(NodeEnum::AExpr(e)) = &node.node else { return None };
    if e.kind != AExprKind::AexprOp as i32 {
        return None;
    }
    let op = e.name.last().and_then(|n| match &n.node {
        Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
        _ => None,
    })?;
    if op != "=" {
        return None;
    }
    Some((term(e.lexpr.as_deref()?), term(e.rexpr.as_deref()?)))
}

/// What `node` is as one side of an equality. A cast on a column is not stripped (a cast
/// column is not the distribution column for shard pruning); a cast on a value is.
pub(super) fn term(node: &Node) -> Term {
    if let Some(NodeEnum::ColumnRef(c)) = &node.node {
        let names: Option<Vec<String>> = c
            .fields
            .iter()
            .map(|f| match &f.node {
                Some(NodeEnum::String(s)) => Some(s.sval.clone()),
                _ => None,
            })
            .collect();
        return match names {
            Some(names) => Term::Column(names),
            None => Term::Other("a * column reference".to_owned()),
        };
    }
    match value_key(node) {
        Some(key) => Term::Value(key),
        None => Term::Other(describe(node)),
    }
}

/// The key of a `$n` parameter or non-NULL constant, through casts and COLLATE.
pub(super) fn value_key(node: &Node) -> Option<String> {
    match node.node.as_ref()? {
        NodeEnum::ParamRef(p) => Some(format!("${}", p.number)),
        NodeEnum::AConst(c) if !c.isnull => Some(match c.val.as_ref()? {
            a_const::Val::Ival(i) => i.ival.to_string(),
            a_const::Val::Fval(f) => f.fval.clone(),
            a_const::Val::Boolval(b) => b.boolval.to_string(),
            a_const::Val::Sval(s) => format!("'{}'", s.sval),
            a_const::Val::Bsval(b) => b.bsval.clone(),
        }),
        NodeEnum::TypeCast(t) => value_key(t.arg.as_deref()?),
        NodeEnum::CollateClause(c) => value_key(c.arg.as_deref()?),
        _ => None,
    }
}

/// A short description of an expression for messages (its deparsed text when possible).
pub(super) fn describe(node: &Node) -> String {
    match &node.node {
        Some(NodeEnum::FuncCall(f)) => {
            let name: Vec<&str> = f
                .funcname
                .iter()
                .filter_map(|n| match &n.node {
                    Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
                    _ => None,
                })
                .collect();
            format!("{}(…)", name.join("."))
        }
        Some(NodeEnum::AConst(c)) if c.isnull => "NULL".to_owned(),
        Some(NodeEnum::SubLink(_)) => "a subquery".to_owned(),
        Some(NodeEnum::ColumnRef(_)) => match term(node) {
            Term::Column(names) => names.join("."),
            other => format!("{other:?}"),
        },
        Some(other) => {
            let debug = format!("{other:?}");
            debug.split(['(', ' ']).next().unwrap_or("expression").to_owned()
        }
        None => "nothing".to_owned(),
    }
}
