//! Scope algebra (§3.2–§3.4) as pure functions the engine calls.
//!
//! Shapes: a [`ScopeMap`] is variable → list of values (wire `map` of
//! `list(str)`); stored scopes are variable → one value (§3.1).
//!
//! - [`validate_requested`]: §3.2 rule 2 — every requested key declared by
//!   the table, no requested value `'*'`; else `sync.invalid_subscription`.
//! - [`validate_allowed`]: §3.2 rule 3 — every allowed key declared by some
//!   table of the schema; else `sync.invalid_subscription`.
//! - [`effective`]: §3.2 rules 4–6 — requested ∩ allowed, or revoked.
//! - [`matches_effective`]: §3.2 — does a change's stored scopes match.
//! - [`authorize_write`]: §3.4 steps 2–4 — all declared keys required;
//!   else `sync.forbidden`.
//! - [`parse_scope_map`]: a JSON object of string → array of strings (e.g.
//!   the `allowed_scopes jsonb` argument or a resolver's result).

use crate::errors::{ErrorCode, ProtocolError, Result};
use crate::schema_ir::{Schema, TableSchema};
use serde_json::Value;
use std::collections::BTreeMap;

/// variable → values (requested, allowed or effective scopes).
pub type ScopeMap = BTreeMap<String, Vec<String>>;

/// The allowed-scope wildcard: "any value for this variable" (§3.2 rule 3).
/// Rejected in requested scopes (§3.2 rule 2).
pub const WILDCARD: &str = "*";

/// Why a subscription revoked (§3.2 rule 5). All three render as
/// `SUB_START.status = revoked`; the reason is for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeReason {
    /// The resolver threw / was unavailable (fail closed).
    ResolverFailed,
    /// A requested key ended up missing from effective (the named key).
    KeyLost(String),
    /// Nothing requested, so effective is empty.
    Empty,
}

/// Result of §3.2 rules 4–6 for one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effective {
    /// Active with the effective scopes (echoed in `SUB_START`).
    Active(ScopeMap),
    /// Revoked: no data; `SUB_START` echoes an empty map.
    Revoked(RevokeReason),
}

impl Effective {
    /// The effective map when active.
    pub fn scopes(&self) -> Option<&ScopeMap> {
        match self {
            Effective::Active(m) => Some(m),
            Effective::Revoked(_) => None,
        }
    }
}

/// §3.2 rule 2 for one subscription on `table`: an undeclared requested key
/// or a requested `'*'` value fails the whole request.
/// Errors: `sync.invalid_subscription` naming the key / value.
pub fn validate_requested(table: &TableSchema, requested: &ScopeMap) -> Result<()> {
    for (key, values) in requested {
        if table.scope(key).is_none() {
            let declared: Vec<&str> = table.variables().into_iter().collect();
            return Err(ProtocolError::new(
                ErrorCode::InvalidSubscription,
                format!(
                    "requested scope key {key:?} is not declared by table {:?} (declared: {declared:?})",
                    table.name
                ),
            ));
        }
        if values.iter().any(|v| v == WILDCARD) {
            return Err(ProtocolError::new(
                ErrorCode::InvalidSubscription,
                format!("requested scope {key:?} contains '*', which is reserved for allowed scopes"),
            ));
        }
    }
    Ok(())
}

/// The keys of `allowed` that no table of the schema declares (sorted).
pub fn undeclared_keys<'m>(schema: &Schema, allowed: &'m ScopeMap) -> Vec<&'m str> {
    let declared = schema.declared_variables();
    allowed.keys().map(String::as_str).filter(|k| !declared.contains(k)).collect()
}

/// §3.2 rule 3: the resolver's result may only name variables some table
/// declares. Errors: `sync.invalid_subscription` listing the unknown keys.
pub fn validate_allowed(schema: &Schema, allowed: &ScopeMap) -> Result<()> {
    let bad = undeclared_keys(schema, allowed);
    if bad.is_empty() {
        Ok(())
    } else {
        Err(ProtocolError::new(
            ErrorCode::InvalidSubscription,
            format!("allowed scopes name variable(s) no table declares: {bad:?}"),
        ))
    }
}

/// §3.2 rules 4–6: effective = requested ∩ allowed, per requested key.
/// `allowed = None` means the resolver threw (revoked). Keys only in allowed
/// never enter effective; `'*'` passes the requested values through; an empty
/// intersection drops the key, which revokes. Requested values keep their
/// order (and duplicates) in the echo. Inputs are assumed validated by
/// [`validate_requested`] / [`validate_allowed`].
pub fn effective(requested: &ScopeMap, allowed: Option<&ScopeMap>) -> Effective {
    let Some(allowed) = allowed else {
        return Effective::Revoked(RevokeReason::ResolverFailed);
    };
    let mut out = ScopeMap::new();
    for (key, req) in requested {
        let Some(allow) = allowed.get(key) else {
            return Effective::Revoked(RevokeReason::KeyLost(key.clone()));
        };
        let values: Vec<String> = if allow.iter().any(|a| a == WILDCARD) {
            req.clone()
        } else {
            req.iter().filter(|v| allow.contains(v)).cloned().collect()
        };
        if values.is_empty() {
            return Effective::Revoked(RevokeReason::KeyLost(key.clone()));
        }
        out.insert(key.clone(), values);
    }
    if out.is_empty() {
        return Effective::Revoked(RevokeReason::Empty);
    }
    Effective::Active(out)
}

/// §3.2: a change matches when, for every effective key, its stored value
/// for that key is in the effective list. `stored` looks a variable up.
pub fn matches_effective<'s>(
    stored: impl Fn(&str) -> Option<&'s str>,
    effective: &ScopeMap,
) -> bool {
    effective
        .iter()
        .all(|(k, vals)| stored(k).is_some_and(|s| vals.iter().any(|v| v == s)))
}

/// §3.4 steps 2–4 on the authorization row's stored scopes (from
/// [`TableSchema::stored_scopes`]): every declared variable must have a
/// non-empty value that the actor's allowed list contains (or `'*'`).
/// `allowed = None` (resolver threw) denies.
/// Errors: `sync.forbidden` naming the first failing variable.
pub fn authorize_write(
    table: &TableSchema,
    row_scopes: &BTreeMap<&str, Option<&str>>,
    allowed: Option<&ScopeMap>,
) -> Result<()> {
    let forbid = |m: String| ProtocolError::new(ErrorCode::Forbidden, m);
    let allowed = allowed.ok_or_else(|| forbid("scope resolver failed".into()))?;
    for s in &table.scopes {
        let v = row_scopes.get(s.variable.as_str()).copied().flatten();
        let Some(v) = v.filter(|v| !v.is_empty()) else {
            return Err(forbid(format!(
                "row of table {:?} has no value for scope {:?}",
                table.name, s.variable
            )));
        };
        let ok = allowed
            .get(&s.variable)
            .is_some_and(|a| a.iter().any(|x| x == WILDCARD || x == v));
        if !ok {
            return Err(forbid(format!(
                "actor may not write this value of scope {:?} in table {:?}",
                s.variable, table.name
            )));
        }
    }
    Ok(())
}

/// Parses a scope map from JSON: an object whose values are arrays of
/// strings. Errors: `sync.invalid_request` describing the offending entry.
pub fn parse_scope_map(v: &Value) -> Result<ScopeMap> {
    let obj = v
        .as_object()
        .ok_or_else(|| ProtocolError::invalid(format!("scope map must be a JSON object, got {v}")))?;
    let mut out = ScopeMap::new();
    for (k, vals) in obj {
        let arr = vals.as_array().ok_or_else(|| {
            ProtocolError::invalid(format!("scope {k:?} must map to an array of strings"))
        })?;
        let mut list = Vec::with_capacity(arr.len());
        for x in arr {
            list.push(
                x.as_str()
                    .ok_or_else(|| ProtocolError::invalid(format!("scope {k:?} has a non-string value {x}")))?
                    .to_owned(),
            );
        }
        out.insert(k.clone(), list);
    }
    Ok(out)
}

/// A scope map as a JSON object (values in map order, as stored).
pub fn scope_map_to_json(m: &ScopeMap) -> Value {
    Value::Object(m.iter().map(|(k, v)| (k.clone(), Value::from(v.clone()))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_value(&json!({"version": 1, "tables": [
            {"name": "tasks", "primaryKey": "id",
             "columns": [{"name": "id", "type": "string", "nullable": false},
                         {"name": "project_id", "type": "string", "nullable": false},
                         {"name": "org_id", "type": "string", "nullable": true}],
             "scopes": ["project:{project_id}", "org:{org_id}"]},
            {"name": "users", "primaryKey": "id",
             "columns": [{"name": "id", "type": "string", "nullable": false},
                         {"name": "team_id", "type": "string", "nullable": false}],
             "scopes": ["team:{team_id}"]}]}))
        .unwrap()
    }

    fn m(pairs: &[(&str, &[&str])]) -> ScopeMap {
        pairs.iter().map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn requested_keys_and_wildcard_are_validated() {
        let s = schema();
        let t = s.table("tasks").unwrap();
        assert!(validate_requested(t, &m(&[("project_id", &["p1"])])).is_ok());
        let e = validate_requested(t, &m(&[("team_id", &["x"])])).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidSubscription);
        let e = validate_requested(t, &m(&[("project_id", &["*"])])).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidSubscription);
    }

    #[test]
    fn allowed_keys_checked_against_union_of_tables() {
        let s = schema();
        assert!(validate_allowed(&s, &m(&[("team_id", &["t"]), ("project_id", &["*"])])).is_ok());
        let e = validate_allowed(&s, &m(&[("projectid", &["p"])])).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidSubscription);
        assert!(e.message.contains("projectid"));
    }

    #[test]
    fn effective_follows_rules_4_to_6() {
        let req = m(&[("project_id", &["p1", "p2"])]);
        assert_eq!(
            effective(&req, Some(&m(&[("project_id", &["p2", "p3"]), ("team_id", &["t"])]))),
            Effective::Active(m(&[("project_id", &["p2"])]))
        );
        assert_eq!(effective(&req, Some(&m(&[("project_id", &["*"])]))), Effective::Active(req.clone()));
        assert_eq!(
            effective(&req, Some(&m(&[("project_id", &["p9"])]))),
            Effective::Revoked(RevokeReason::KeyLost("project_id".into()))
        );
        assert_eq!(
            effective(&req, Some(&m(&[("team_id", &["*"])]))),
            Effective::Revoked(RevokeReason::KeyLost("project_id".into()))
        );
        assert_eq!(effective(&req, None), Effective::Revoked(RevokeReason::ResolverFailed));
        assert_eq!(effective(&ScopeMap::new(), Some(&m(&[]))), Effective::Revoked(RevokeReason::Empty));
        // Partial loss of one key among two revokes the whole subscription.
        let req2 = m(&[("project_id", &["p1"]), ("org_id", &["o1"])]);
        assert!(matches!(
            effective(&req2, Some(&m(&[("project_id", &["p1"]), ("org_id", &["o2"])]))),
            Effective::Revoked(_)
        ));
    }

    #[test]
    fn write_authorization_requires_every_declared_key() {
        let s = schema();
        let t = s.table("tasks").unwrap();
        let row: BTreeMap<&str, Option<&str>> = [("project_id", Some("p1")), ("org_id", Some("o1"))].into();
        let allowed = m(&[("project_id", &["p1"]), ("org_id", &["*"])]);
        assert!(authorize_write(t, &row, Some(&allowed)).is_ok());
        let only_project = m(&[("project_id", &["p1"])]);
        let denied = authorize_write(t, &row, Some(&only_project)).unwrap_err();
        assert_eq!(denied.code, ErrorCode::Forbidden);
        // The message names the variable, never the stored row's value (§3.4).
        for value in row.values().flatten() {
            assert!(!denied.message.contains(value), "{} leaks {value}", denied.message);
        }
        let null_org: BTreeMap<&str, Option<&str>> = [("project_id", Some("p1")), ("org_id", None)].into();
        assert!(authorize_write(t, &null_org, Some(&allowed)).is_err());
        let empty_org: BTreeMap<&str, Option<&str>> = [("project_id", Some("p1")), ("org_id", Some(""))].into();
        assert!(authorize_write(t, &empty_org, Some(&allowed)).is_err());
        assert!(authorize_write(t, &row, None).is_err());
    }

    #[test]
    fn matching_and_json_parsing() {
        let eff = m(&[("project_id", &["p1", "p2"])]);
        assert!(matches_effective(|k| (k == "project_id").then_some("p2"), &eff));
        assert!(!matches_effective(|k| (k == "project_id").then_some("p3"), &eff));
        assert!(!matches_effective(|_| None, &eff));
        let parsed = parse_scope_map(&json!({"a": ["x", "y"]})).unwrap();
        assert_eq!(parsed, m(&[("a", &["x", "y"])]));
        assert_eq!(scope_map_to_json(&parsed), json!({"a": ["x", "y"]}));
        assert!(parse_scope_map(&json!({"a": "x"})).is_err());
        assert!(parse_scope_map(&json!({"a": [1]})).is_err());
        assert!(parse_scope_map(&json!([])).is_err());
    }
}
