//! Citus router-shape checker (issue 14, "Scale out on Citus") — the rule of `store/`.
//!
//! Citus's router planner sends a statement to ONE shard only when every distributed table
//! in it is filtered by equality on its distribution column and the statement has none of
//! the shapes Citus cannot route. This module checks a statement's text against that, with
//! the real Postgres parser (`pg_query`, libpg_query) and without Citus, so CI can prove that
//! every statement the extension issues during sync rounds is router-shaped
//! (`tests/tests/router_statements.rs` feeds it the texts of `pg_stat_statements`).
//!
//! # Layout ([`tables`])
//!
//! - distributed on `partition`: `sync_partitions`, `sync_partition_registry`,
//!   `sync_row_scopes`, `sync_commits`, `sync_changes`, `sync_change_scopes`,
//!   `sync_push_results`, `sync_reactions`, `sync_clients`, `sync_blob_refs`,
//!   `sync_tombstones`, `sync_blobs`, `sync_blob_chunks` (schema `syncular`);
//! - reference tables (no predicate needed): `sync_schema_versions`, `sync_schema_tables`,
//!   `sync_scope_resolver`, `sync_notification_key`;
//! - app tables (the registered `app_schema.app_table`s) distributed on `_sync_partition`;
//! - catalogs (`pg_catalog.*`, `information_schema.*`) allowed anywhere (coordinator-local
//!   metadata); [`Analysis::reads_catalog`] says when a statement reads one;
//! - an unknown `sync_*` name in `syncular` is a violation ([`ViolationKind::UnknownTable`]).
//!
//! # Rules
//!
//! 1. **Every reference to a distributed table is pinned to one partition**
//!    ([`ViolationKind::UnpinnedReference`]). This holds for every range reference — FROM,
//!    JOIN, UPDATE target and FROM, DELETE target and USING, subqueries in FROM and in
//!    expressions (`EXISTS`, `IN`, scalar), LATERAL, CTEs. A reference is pinned when the
//!    predicate set of its query level (the AND-conjuncts of WHERE and of every JOIN … ON;
//!    an OR, a NOT or `= ANY` pins nothing) contains
//!    - `<ref>.<dist col> = <$n or constant>` (casts and COLLATE on the value side allowed;
//!      a function call such as `current_setting(…)` is not a constant), or
//!    - `<ref>.<dist col> = <col>` where `<col>` is the distribution column of a reference
//!      that is itself pinned — at the same level (join on the distribution column,
//!      transitively; `JOIN … USING (partition)` counts) or at an enclosing level
//!      (correlated subquery) — or an output column of a FROM subquery / CTE that carries
//!      a pinned partition value (`SELECT c.partition … WHERE c.partition = $1`, `SELECT $1
//!      AS partition`).
//!
//!    For `INSERT … VALUES` into a distributed table the target is pinned by its rows
//!    ([`ViolationKind::InsertPartitionValue`]): the column list names the distribution
//!    column and every row's value for it is a `$n` or constant, the same one in every row.
//!    `ON CONFLICT … DO UPDATE` is fine.
//! 2. **No `INSERT … SELECT`** into a distributed or reference table
//!    ([`ViolationKind::InsertSelect`]): Citus evaluates it on the coordinator and forces
//!    2PC. Only `INSERT … VALUES` (one or more rows). A `SELECT` without FROM
//!    (`INSERT … SELECT $1, $2`) is reported too: Postgres plans it as a subquery, which
//!    sends Citus down the same INSERT … SELECT path.
//! 3. **No data-modifying CTE that is an INSERT** ([`ViolationKind::InsertCte`]; Citus: "only
//!    SELECT, UPDATE, or DELETE common table expressions may be router planned"). UPDATE and
//!    DELETE CTEs are allowed when pinned (rule 1).
//! 4. Statements that touch no distributed table (`SELECT pg_advisory_xact_lock(…)`,
//!    `set_config`, `NOTIFY`) pass.
//!
//! The walk understands SELECT (with set operations, VALUES, locking clauses), INSERT,
//! UPDATE, DELETE and the expression nodes that can hold a subquery. As a safety net, any
//! distributed-table reference the walk did not reach (a MERGE, a utility statement such as
//! `LOCK TABLE` or `COPY`, an expression kind it does not know) is reported as
//! [`ViolationKind::Unsupported`], so nothing passes unseen; a text the parser refuses is
//! [`ViolationKind::ParseError`].
//!
//! Files: [`tables`] (layout), `predicates` (conjuncts, equalities, values), `scope`
//! (levels, column resolution, the pinning fixpoint), the parse walk — `walk` (statements,
//! WITH, SELECT levels), `dml` (INSERT/UPDATE/DELETE), `from` (FROM items), `exprs`
//! (subqueries in expressions) — and [`report`] (choosing the statements to check,
//! formatting failures, catalog use); unit tests in `tests`.

mod predicates;
pub mod report;
mod scope;
pub mod tables;
#[cfg(test)]
mod tests;
mod dml;
mod exprs;
mod from;
mod walk;

use std::fmt;

pub use tables::{Layout, TableKind};

/// Which rule a statement breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    /// Rule 1: a distributed reference without a partition pin.
    UnpinnedReference,
    /// Rule 1, `INSERT … VALUES`: a row whose partition value is missing, not a `$n` or
    /// constant, or different from another row's.
    InsertPartitionValue,
    /// Rule 2: `INSERT … SELECT` into a distributed or reference table.
    InsertSelect,
    /// Rule 3: an INSERT in a WITH clause.
    InsertCte,
    /// A `sync_*` table of schema `syncular` the layout does not classify.
    UnknownTable,
    /// A distributed reference in a shape the checker does not understand.
    Unsupported,
    /// The text does not parse.
    ParseError,
}

/// One broken rule with what broke it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub kind: ViolationKind,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.detail)
    }
}

/// The verdict on one statement text.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    /// Empty when the statement is router-shaped.
    pub violations: Vec<Violation>,
    /// Every relation the statement names, as written, with its kind.
    pub relations: Vec<(String, TableKind)>,
    /// Shapes the rules let pass but Citus may not route (see [`Analysis::notes`]).
    pub notes: Vec<String>,
}

impl Analysis {
    /// The violation kinds, in order of discovery.
    pub fn kinds(&self) -> Vec<ViolationKind> {
        self.violations.iter().map(|v| v.kind).collect()
    }

    /// Whether the statement reads a catalog table (`pg_catalog.*`, `information_schema.*`).
    pub fn reads_catalog(&self) -> bool {
        self.relations.iter().any(|(_, k)| *k == TableKind::Catalog)
    }

    /// Observations outside the rules, for a human: a statement whose distributed references
    /// are pinned to different `$n`/constants (one shard only if the caller binds one
    /// partition to all of them), and a distributed table next to a local relation (a
    /// transition table, a temp or plain table: Citus cannot route a distributed/local join).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether the statement names a distributed table.
    pub fn touches_distributed(&self) -> bool {
        self.relations.iter().any(|(_, k)| matches!(k, TableKind::Distributed { .. }))
    }
}

/// Checks every statement of `sql` against the rules, classifying relations with `layout`.
pub fn check(sql: &str, layout: &Layout) -> Analysis {
    let parsed = match pg_query::parse(sql, pg_query::ParserOptions::DEFAULT) {
        Ok(p) => p,
        Err(e) => {
            let violation = Violation { kind: ViolationKind::ParseError, detail: e.to_string() };
            return Analysis { violations: vec![violation], ..Analysis::default() };
        }
    };
    let mut walker = walk::Walker::new(layout);
    for raw in &parsed.protobuf.stmts {
        let Some(stmt) = raw.stmt.as_deref() else { continue };
        walker.statement(stmt);
        // Safety net: every distributed RangeVar must have been reached by the walk.
        let mut all = Vec::new();
        if let Ok(json) = serde_json::to_value(stmt) {
            range_vars(&json, &mut all);
        }
        for (schema, relname, location) in all {
            let kind = layout.classify(&schema, &relname);
            if walker.visited.contains(&location) {
                continue;
            }
            let name = if schema.is_empty() { relname } else { format!("{schema}.{relname}") };
            walker.relations.push((name.clone(), kind.clone()));
            if matches!(kind, TableKind::Distributed { .. } | TableKind::UnknownSync) {
                let detail = format!("{name} is named where the checker cannot tell how it is filtered (MERGE, utility statement or unknown expression)");
                walker.violations.push(Violation { kind: ViolationKind::Unsupported, detail });
            }
        }
    }
    let mut analysis = Analysis { violations: walker.violations, relations: walker.relations, notes: Vec::new() };
    if analysis.touches_distributed() {
        if walker.pinned_values.len() > 1 {
            let values: Vec<String> = walker.pinned_values.into_iter().collect();
            analysis.notes.push(format!("pinned to different values ({}): one shard only if they carry the same partition", values.join(", ")));
        }
        let mut local: Vec<&str> = analysis.relations.iter().filter(|(_, k)| *k == TableKind::Other).map(|(n, _)| n.as_str()).collect();
        local.dedup();
        if !local.is_empty() {
            analysis.notes.push(format!("distributed tables next to local relation(s) {}: Citus cannot route a distributed/local join", local.join(", ")));
        }
    }
    analysis
}

/// Every `RangeVar` in a serialized parse tree, tagged (`{"RangeVar": …}` in node lists) or
/// not (the typed `relation` field of INSERT/UPDATE/DELETE/MERGE/COPY): `(schema, relname,
/// location)`.
fn range_vars(v: &serde_json::Value, out: &mut Vec<(String, String, i32)>) {
    match v {
        serde_json::Value::Object(map) => {
            if map.contains_key("relname") && map.contains_key("relpersistence") {
                let s = |f: &str| map.get(f).and_then(|x| x.as_str()).unwrap_or_default().to_owned();
                let loc = map.get("location").and_then(|x| x.as_i64()).unwrap_or(-1) as i32;
                out.push((s("schemaname"), s("relname"), loc));
            }
            for child in map.values() {
                range_vars(child, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| range_vars(i, out)),
        _ => {}
    }
}

/// Whether the serialized form of `node` contains an object key `key` (a node kind).
fn contains_key(node: &pg_query::NodeEnum, key: &str) -> bool {
    fn walk(v: &serde_json::Value, key: &str) -> bool {
        match v {
            serde_json::Value::Object(map) => map.iter().any(|(k, c)| k == key || walk(c, key)),
            serde_json::Value::Array(items) => items.iter().any(|i| walk(i, key)),
            _ => false,
        }
    }
    serde_json::to_value(node).map(|v| walk(&v, key)).unwrap_or(false)
}
