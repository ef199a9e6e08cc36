//! A reaction planner's answer (SPEC §6.9 "Planned record"): SQL NULL, JSON
//! `null` or `[]` plan nothing; otherwise a JSON array of at most
//! [`MAX_RECORDS`] objects `{"key", "type", "version", "payload",
//! "maxAttempts"?}` — `key` non-empty, unique in the commit, at most 256
//! UTF-8 bytes; `type` code-like (`^[A-Za-z][A-Za-z0-9._:-]*$`), at most 128
//! bytes; `version` a whole number 1 ..= 2^31−1; `payload` any JSON value at
//! most 16 levels deep (the payload itself is level 1, each nested array or
//! object one more) and at most 65,536 bytes as compact JSON; `maxAttempts`
//! 1 ..= 100, default 10. Unknown members are refused (a typo'd
//! `maxAttempt` must not silently become 10). Anything else is a host bug
//! that fails the request.

use serde_json::{Map, Value};

/// Most records one commit may plan.
pub const MAX_RECORDS: usize = 100;
/// Longest `key`, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Longest `type`, in bytes.
pub const MAX_TYPE_BYTES: usize = 128;
/// Largest payload, compact JSON bytes.
pub const MAX_PAYLOAD_BYTES: usize = 65_536;
/// Deepest payload nesting.
pub const MAX_PAYLOAD_DEPTH: usize = 16;
/// `maxAttempts` when absent.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 10;
/// Largest `maxAttempts`.
pub const MAX_ATTEMPTS: i32 = 100;

/// One checked record.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The planner's key (unique in the commit).
    pub key: String,
    /// Handler type.
    pub kind: String,
    /// Payload version.
    pub version: i32,
    /// Payload.
    pub payload: Value,
    /// Claims allowed.
    pub max_attempts: i32,
}

/// The persisted idempotency key: the stable JSON encoding of
/// `[partition, clientId, clientCommitId, key]` (compact, as
/// `JSON.stringify`), local to the source commit and partition and free of
/// delimiter ambiguity.
pub fn idempotency_key(partition: &str, client_id: &str, client_commit_id: &str, key: &str) -> String {
    Value::from(vec![partition, client_id, client_commit_id, key]).to_string()
}

fn whole(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e15).map(|f| f as i64))
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 1,
    }
}

fn code_like(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}

fn record(i: usize, item: &Value) -> Result<Planned, String> {
    let Value::Object(map) = item else { return Err(format!("record {i} is {item}, not an object")) };
    if let Some(k) = map.keys().find(|k| !matches!(k.as_str(), "key" | "type" | "version" | "payload" | "maxAttempts")) {
        return Err(format!("record {i} has unknown member {k:?}"));
    }
    let text = |map: &Map<String, Value>, name: &str| match map.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(format!("record {i} needs a string {name:?}")),
    };
    let key = text(map, "key")?;
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(format!("record {i}: key must be 1–{MAX_KEY_BYTES} bytes, got {}", key.len()));
    }
    let kind = text(map, "type")?;
    if kind.len() > MAX_TYPE_BYTES || !code_like(&kind) {
        return Err(format!(
            "record {i}: type {kind:?} must be code-like (a letter, then letters, digits, '.', '_', ':', '-') and at most {MAX_TYPE_BYTES} bytes"
        ));
    }
    let version = map
        .get("version")
        .and_then(whole)
        .and_then(|v| i32::try_from(v).ok())
        .filter(|v| *v >= 1)
        .ok_or_else(|| format!("record {i}: version must be a whole number from 1 through 2147483647"))?;
    let max_attempts = match map.get("maxAttempts") {
        None | Some(Value::Null) => DEFAULT_MAX_ATTEMPTS,
        Some(v) => whole(v)
            .and_then(|v| i32::try_from(v).ok())
            .filter(|v| (1..=MAX_ATTEMPTS).contains(v))
            .ok_or_else(|| format!("record {i}: maxAttempts must be a whole number from 1 through {MAX_ATTEMPTS}, got {v}"))?,
    };
    let Some(payload) = map.get("payload") else { return Err(format!("record {i} needs a payload")) };
    if depth(payload) > MAX_PAYLOAD_DEPTH {
        return Err(format!("record {i}: payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels"));
    }
    let bytes = payload.to_string().len();
    if bytes > MAX_PAYLOAD_BYTES {
        return Err(format!("record {i}: payload is {bytes} bytes as JSON; the limit is {MAX_PAYLOAD_BYTES}"));
    }
    Ok(Planned { key, kind, version, payload: payload.clone(), max_attempts })
}

/// The planner's answer checked (module docs). `Err` says what is wrong.
pub fn parse(out: Option<Value>) -> Result<Vec<Planned>, String> {
    let items = match out {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(format!("returned {other}: expected NULL or a JSON array of reaction records")),
    };
    if items.len() > MAX_RECORDS {
        return Err(format!("planned {} reactions; a commit may plan at most {MAX_RECORDS}", items.len()));
    }
    let mut out: Vec<Planned> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let planned = record(i, item)?;
        if out.iter().any(|p| p.key == planned.key) {
            return Err(format!("record {i}: key {:?} is planned twice in the commit", planned.key));
        }
        out.push(planned);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(v: Value) -> Vec<Planned> {
        parse(Some(v)).unwrap()
    }

    #[test]
    fn nothing_and_defaults() {
        assert!(parse(None).unwrap().is_empty());
        assert!(ok(json!(null)).is_empty());
        assert!(ok(json!([])).is_empty());
        let p = ok(json!([{"key": "k", "type": "mail.send", "version": 1, "payload": {"a": [1, 2]}}]));
        assert_eq!(p[0].max_attempts, 10);
        assert_eq!(p[0].payload, json!({"a": [1, 2]}));
        let p = ok(json!([{"key": "k", "type": "t", "version": 2.0, "payload": null, "maxAttempts": 100}]));
        assert_eq!((p[0].version, p[0].max_attempts), (2, 100));
    }

    #[test]
    fn every_bound_is_checked() {
        let r = |extra: Value| {
            let mut base = json!({"key": "k", "type": "t", "version": 1, "payload": 1});
            for (k, v) in extra.as_object().unwrap() {
                base[k] = v.clone();
            }
            parse(Some(json!([base])))
        };
        let mut deep = json!(1);
        for _ in 0..16 {
            deep = json!([deep]);
        }
        assert!(r(json!({"payload": deep.clone()})).is_err(), "17 levels");
        assert!(r(json!({"payload": deep[0].clone()})).is_ok(), "16 levels");
        assert!(r(json!({"payload": "x".repeat(MAX_PAYLOAD_BYTES)})).is_err());
        assert!(r(json!({"payload": "x".repeat(MAX_PAYLOAD_BYTES - 2)})).is_ok());
        for bad in [
            json!({"key": ""}),
            json!({"key": "k".repeat(257)}),
            json!({"key": 5}),
            json!({"type": "1abc"}),
            json!({"type": "a b"}),
            json!({"type": "t".repeat(129)}),
            json!({"version": 0}),
            json!({"version": 2147483648i64}),
            json!({"version": 1.5}),
            json!({"version": "1"}),
            json!({"maxAttempts": 0}),
            json!({"maxAttempts": 101}),
            json!({"maxAttempt": 3}),
        ] {
            assert!(r(bad.clone()).is_err(), "{bad}");
        }
        assert!(r(json!({"key": "k".repeat(256), "type": "t".repeat(128)})).is_ok());
        assert!(parse(Some(json!({"key": "k"}))).is_err(), "an object, not an array");
        assert!(parse(Some(json!([{"key": "k", "type": "t", "version": 1}]))).is_err(), "no payload");
    }

    #[test]
    fn keys_are_unique_and_at_most_100_records() {
        let rec = |k: &str| json!({"key": k, "type": "t", "version": 1, "payload": {}});
        assert!(parse(Some(json!([rec("a"), rec("a")]))).unwrap_err().contains("twice"));
        let many: Vec<Value> = (0..101).map(|i| rec(&i.to_string())).collect();
        assert!(parse(Some(Value::from(many.clone()))).is_err());
        assert_eq!(ok(Value::from(many[..100].to_vec())).len(), 100);
    }

    #[test]
    fn idempotency_key_is_a_compact_json_tuple() {
        assert_eq!(idempotency_key("p", "c", "cc", "k"), r#"["p","c","cc","k"]"#);
        assert_eq!(idempotency_key("a\"b", "c:d", "", "é"), r#"["a\"b","c:d","","é"]"#);
    }
}
