//! A realtime connection's registrations (SPEC §8.1, §8.7): the client's
//! last pull's subscriptions re-resolved to their effective scopes, and the
//! JSON form a gateway holds and hands back to `realtime_deltas`.
//!
//! JSON shape (what `syncular.realtime_open` returns and
//! `syncular.realtime_deltas` accepts):
//! `[{"id": "<subscription id>", "table": "<table>", "effective": {"<variable>": ["<value>", …]}}]`.
//! Scope keys (§3.1 `prefix:value`) are the presence grant (§8.6.3).

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};
use syncular_protocol::scopes::{effective, validate_requested, Effective, ScopeMap};

use crate::engine::auth::allowed::{json_type_name, parse_allowed_map, Allowed};
use crate::engine::schema::RegisteredSchema;

/// One registration: an active subscription with its effective scopes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The client's subscription id (§4.1).
    pub id: String,
    /// Its table (registered in the served schema).
    pub table: String,
    /// Effective scopes (§3.2): non-empty, every key declared by `table`.
    pub effective: ScopeMap,
}

/// Re-resolves a client record's subscription list (`[{"id","table","scopes"}]`,
/// as the pull half persisted it) against `allowed`: subscriptions whose
/// table is no longer registered, whose requested keys are no longer
/// declared, or whose effective scopes are revoked are left out; order kept.
/// A list that is not valid JSON of that shape yields no registrations
/// (nothing is registered from a record this code cannot read).
pub fn resolve(subscriptions_json: &str, schema: &RegisteredSchema, allowed: &Allowed) -> Vec<Registration> {
    let Ok(Value::Array(subs)) = serde_json::from_str::<Value>(subscriptions_json) else {
        return Vec::new();
    };
    subs.iter()
        .filter_map(|sub| {
            let id = sub.get("id")?.as_str()?;
            let table_name = sub.get("table")?.as_str()?;
            let table = schema.table(table_name)?;
            let requested: ScopeMap = parse_allowed_map(sub.get("scopes")?).ok()?;
            validate_requested(&table.table, &requested).ok()?;
            match effective(&requested, allowed.map()) {
                Effective::Active(effective) => Some(Registration {
                    id: id.to_owned(),
                    table: table_name.to_owned(),
                    effective,
                }),
                Effective::Revoked(_) => None,
            }
        })
        .collect()
}

/// The §3.1 scope keys (`prefix:value`) the registrations cover, sorted and
/// distinct: the connection's presence grant (§8.6.3).
pub fn scope_keys(registrations: &[Registration], schema: &RegisteredSchema) -> Vec<String> {
    let mut keys = BTreeSet::new();
    for reg in registrations {
        let Some(table) = schema.table(&reg.table) else { continue };
        for (variable, values) in &reg.effective {
            if let Some(pattern) = table.table.scope(variable) {
                keys.extend(values.iter().map(|v| pattern.scope_key(v)));
            }
        }
    }
    keys.into_iter().collect()
}

/// Renders registrations as the JSON a gateway holds.
pub fn to_json(registrations: &[Registration]) -> Value {
    Value::Array(
        registrations
            .iter()
            .map(|r| json!({"id": r.id, "table": r.table, "effective": r.effective}))
            .collect(),
    )
}

/// Parses registrations handed back by a gateway and checks them against the
/// served schema: each an object with a string `id`, a registered `table`,
/// and a non-empty `effective` map of declared variables to non-empty string
/// arrays without `'*'`. Errors: a message naming the offending entry
/// (the caller reports `syncular.invalid_argument`).
pub fn from_json(value: &Value, schema: &RegisteredSchema) -> Result<Vec<Registration>, String> {
    let Value::Array(items) = value else {
        return Err(format!("registrations must be a JSON array, got {}", json_type_name(value)));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let obj: &Map<String, Value> =
                item.as_object().ok_or_else(|| format!("registration {i} must be an object"))?;
            let text = |key: &str| {
                obj.get(key)
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("registration {i}: {key:?} must be a string"))
            };
            let id = text("id")?;
            let table_name = text("table")?;
            let table = schema
                .table(table_name)
                .ok_or_else(|| format!("registration {i}: table {table_name:?} is not registered"))?;
            let effective = parse_allowed_map(obj.get("effective").unwrap_or(&Value::Null))
                .map_err(|e| format!("registration {i}: effective {e}"))?;
            if effective.is_empty() || effective.values().any(Vec::is_empty) {
                return Err(format!("registration {i}: effective scopes must be non-empty"));
            }
            validate_requested(&table.table, &effective)
                .map_err(|e| format!("registration {i}: {}", e.message))?;
            Ok(Registration { id: id.to_owned(), table: table_name.to_owned(), effective })
        })
        .collect()
}
