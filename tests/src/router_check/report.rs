//! Choosing which recorded statement texts to check, checking them, and the failure report
//! of `tests/tests/router_statements.rs`.

use std::fmt::Write as _;

use pg_query::NodeEnum;

use super::{check, Analysis, Layout};

/// Comment the harness puts inside its own SQL (`SELECT /* router-check-harness */ …`) so its
/// statements are told apart from the extension's in `pg_stat_statements`.
pub const HARNESS_TAG: &str = "/* router-check-harness */";

/// One checked statement text.
#[derive(Clone, Debug)]
pub struct Checked {
    pub sql: String,
    pub analysis: Analysis,
}

/// Why a recorded text is not checked (`None`: it is).
pub fn skip_reason(sql: &str, layout: &Layout) -> Option<&'static str> {
    if sql.contains(HARNESS_TAG) {
        return Some("the harness's own statement");
    }
    if !mentions_synced_table(sql, layout) {
        return Some("names no sync_ or app table");
    }
    if is_entry_call(sql) {
        return Some("a top-level call of an extension function");
    }
    None
}

/// Whether the text mentions a `sync_` table or an app table name (case-insensitive).
pub fn mentions_synced_table(sql: &str, layout: &Layout) -> bool {
    let lower = sql.to_lowercase();
    lower.contains("sync_") || layout.app_tables.iter().any(|(_, t)| lower.contains(&t.to_lowercase()))
}

/// Whether the text is a call of the extension's own functions with no table of its own:
/// `SELECT syncular.sync($1, …)`, `SELECT … FROM syncular.prune_batch($1, $2)`,
/// `CALL syncular.prune(…)`.
pub fn is_entry_call(sql: &str) -> bool {
    let Ok(parsed) = pg_query::parse(sql, pg_query::ParserOptions::DEFAULT) else { return false };
    !parsed.protobuf.stmts.is_empty()
        && parsed.protobuf.stmts.iter().all(|raw| {
            let Some(stmt) = raw.stmt.as_deref().and_then(|s| s.node.as_ref()) else { return false };
            let from_ok = match stmt {
                NodeEnum::CallStmt(c) => {
                    let name = c.funccall.as_ref().and_then(|f| f.funcname.first()).and_then(|n| n.node.as_ref());
                    return matches!(name, Some(NodeEnum::String(s)) if s.sval == "syncular");
                }
                NodeEnum::SelectStmt(s) => s.from_clause.iter().all(|f| matches!(f.node, Some(NodeEnum::RangeFunction(_)))),
                _ => false,
            };
            let Ok(json) = serde_json::to_value(stmt) else { return false };
            from_ok && calls_syncular(&json)
        })
}

/// Whether a serialized tree holds a `FuncCall` whose name starts with schema `syncular`.
fn calls_syncular(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(map) => map.iter().any(|(k, c)| {
            let named = k == "FuncCall"
                && c.pointer("/funcname/0/node/String/sval").and_then(|s| s.as_str()) == Some("syncular");
            named || calls_syncular(c)
        }),
        serde_json::Value::Array(items) => items.iter().any(calls_syncular),
        _ => false,
    }
}

/// Checks every text that [`skip_reason`] keeps.
pub fn check_all<'a>(texts: impl IntoIterator<Item = &'a str>, layout: &Layout) -> Vec<Checked> {
    texts
        .into_iter()
        .filter(|sql| skip_reason(sql, layout).is_none())
        .map(|sql| Checked { sql: sql.to_owned(), analysis: check(sql, layout) })
        .collect()
}

/// The failure report: every violating statement (one line of SQL, whitespace collapsed)
/// with its violations.
pub fn format_violations(checked: &[Checked]) -> String {
    let mut out = String::new();
    let bad: Vec<&Checked> = checked.iter().filter(|c| !c.analysis.violations.is_empty()).collect();
    let _ = writeln!(out, "{} of {} checked statements are not router-shaped:", bad.len(), checked.len());
    for (i, c) in bad.iter().enumerate() {
        let _ = writeln!(out, "\n[{}] {}", i + 1, one_line(&c.sql));
        for v in &c.analysis.violations {
            let _ = writeln!(out, "    - {v}");
        }
        for n in &c.analysis.notes {
            let _ = writeln!(out, "    (note: {n})");
        }
    }
    out
}

/// `sql` on one line, runs of whitespace collapsed.
pub fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every recorded text with its verdict — `skip (why)`, `ok`, or its violations — for a
/// diagnostic listing (`SYNCULAR_ROUTER_CHECK_VERBOSE=1` in `router_statements.rs`).
pub fn format_verdicts<'a>(texts: impl IntoIterator<Item = &'a str>, layout: &Layout) -> String {
    let mut out = String::new();
    for sql in texts {
        let verdict = match skip_reason(sql, layout) {
            Some(why) => format!("skip ({why})"),
            None => {
                let a = check(sql, layout);
                let mut v: Vec<String> = a.violations.iter().map(|v| format!("{:?}", v.kind)).collect();
                if v.is_empty() {
                    v.push("ok".to_owned());
                }
                v.extend(a.notes.iter().map(|n| format!("note: {n}")));
                v.join("; ")
            }
        };
        let _ = writeln!(out, "{verdict} | {}", one_line(sql));
    }
    out
}

/// How a statement reads the catalogs, if it does: catalog relations it names, `to_reg*` /
/// `has_*_privilege` lookups, casts to `reg*` types (allowed by the rules — coordinator-local
/// metadata — but worth knowing on a hot path).
pub fn catalog_use(sql: &str, layout: &Layout) -> Vec<String> {
    let mut out: Vec<String> = check(sql, layout)
        .relations
        .into_iter()
        .filter(|(_, k)| *k == super::TableKind::Catalog)
        .map(|(n, _)| n)
        .collect();
    if let Ok(parsed) = pg_query::parse(sql, pg_query::ParserOptions::DEFAULT) {
        if let Ok(json) = serde_json::to_value(&parsed.protobuf) {
            lookups(&json, &mut out);
        }
    }
    out.sort();
    out.dedup();
    out
}

fn lookups(v: &serde_json::Value, out: &mut Vec<String>) {
    let last_name = |list: Option<&serde_json::Value>| -> Option<String> {
        let items = list?.as_array()?;
        items.last()?.pointer("/node/String/sval")?.as_str().map(str::to_owned)
    };
    match v {
        serde_json::Value::Object(map) => {
            for (k, c) in map {
                if k == "FuncCall" {
                    if let Some(f) = last_name(c.get("funcname")) {
                        if f.starts_with("to_reg") || (f.starts_with("has_") && f.ends_with("_privilege")) {
                            out.push(format!("{f}()"));
                        }
                    }
                }
                if k == "TypeCast" {
                    if let Some(t) = last_name(c.pointer("/type_name/names")) {
                        if t.starts_with("reg") {
                            out.push(format!("::{t}"));
                        }
                    }
                }
                lookups(c, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| lookups(i, out)),
        _ => {}
    }
}
