//! The allowed map (SPEC §3.2): variable → allowed values, what the
//! gateway's `allowed_scopes` argument, the host resolver
//! ([`super::resolver`]) and a stored auth lease ([`super::leases`]) all
//! answer, its parser, and the §7.3.3 outage signal either source may send
//! instead.

use std::collections::BTreeMap;

use serde_json::Value;

/// The allowed map (§3.2): variable → allowed values, `"*"` = any.
pub type AllowedMap = BTreeMap<String, Vec<String>>;

/// What the resolver step produced for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    /// The resolver returned this map.
    Map(AllowedMap),
    /// No map: no resolver is registered, or it raised. Every subscription
    /// revokes and every write is `sync.forbidden`. `reason` is for logs
    /// (the resolver's error message), never sent to clients.
    Denied { reason: String },
}

impl Allowed {
    /// The map, or `None` when denied (the shape the protocol crate's
    /// `effective` and `authorize_write` take).
    pub fn map(&self) -> Option<&AllowedMap> {
        match self {
            Allowed::Map(map) => Some(map),
            Allowed::Denied { .. } => None,
        }
    }
}

/// The outage signal (§7.3.3): this JSON string, as the `allowed_scopes`
/// argument or as the resolver's return value.
pub const OUTAGE_SIGNAL: &str = "resolver_outage";

/// Whether `value` is the outage signal.
pub fn is_outage_signal(value: &Value) -> bool {
    matches!(value, Value::String(s) if s == OUTAGE_SIGNAL)
}

/// The JSON type name used in error messages.
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Parses an allowed map `{"var": ["v", …]}`. On failure the `Err` text
/// completes the sentence "… returned …", naming the offending key and the
/// JSON type received, e.g. `returned key "project_id" as number; expected
/// an array of strings`. Shared with the gateway's `allowed_scopes`
/// argument, whose caller picks the error code.
pub fn parse_allowed_map(value: &Value) -> Result<AllowedMap, String> {
    let Value::Object(entries) = value else {
        return Err(format!(
            "returned a JSON {}; expected an object mapping each scope variable to an array of strings",
            json_type_name(value)
        ));
    };
    let mut map = AllowedMap::new();
    for (key, values) in entries {
        let Value::Array(items) = values else {
            return Err(format!(
                "returned key {key:?} as {}; expected an array of strings",
                json_type_name(values)
            ));
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item {
                Value::String(s) => out.push(s.clone()),
                other => {
                    return Err(format!(
                        "returned key {key:?} element {i} as {}; expected a string",
                        json_type_name(other)
                    ))
                }
            }
        }
        map.insert(key.clone(), out);
    }
    Ok(map)
}

#[cfg(test)]
mod unit {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_a_map_of_string_lists() {
        let map = parse_allowed_map(&json!({"project_id": ["p1", "*"], "org": []})).unwrap();
        assert_eq!(map["project_id"], vec!["p1".to_string(), "*".to_string()]);
        assert!(map["org"].is_empty());
    }

    #[test]
    fn names_key_and_type_of_a_malformed_value() {
        let err = parse_allowed_map(&json!({"project_id": 7})).unwrap_err();
        assert!(err.contains("\"project_id\"") && err.contains("number"), "{err}");
        let err = parse_allowed_map(&json!({"a": ["x", true]})).unwrap_err();
        assert!(err.contains("\"a\"") && err.contains("element 1") && err.contains("boolean"), "{err}");
        let err = parse_allowed_map(&json!(["x"])).unwrap_err();
        assert!(err.contains("array"), "{err}");
    }
}
