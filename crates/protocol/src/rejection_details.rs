//! The bounded `detailsJson` shape of a `PUSH_RESULT_DETAILS` entry
//! (§6.3.1): a JSON object with only `fieldPaths`, `reason`,
//! `requiredAction` and `references`, at least one of them, each within its
//! limits, and at most 4,096 bytes once normalized.
//!
//! §6.3.1: "Unknown members, duplicates, empty members, malformed paths or
//! tokens, and over-limit values are decode errors." Wire version 3 adds one
//! rule, from the `syncular-ssp2` 0.49 decoder: the *raw* text is at most
//! 4,096 bytes too ([`validate_details_json_v3`]); in versions 1 and 2 only
//! the normalized object is bounded. Every failure here is
//! `sync.invalid_request` with a message starting
//! [`DETAILS_ERROR_PREFIX`]. The raw text is never rewritten: the codec keeps
//! it byte-for-byte; validation only reads it.

use crate::constants::{
    DETAILS_MAX_ENCODED_BYTES, DETAILS_MAX_FIELD_PATHS, DETAILS_MAX_FIELD_PATH_LEN,
    DETAILS_MAX_REFERENCES, DETAILS_MAX_REFERENCE_KEY_LEN, DETAILS_MAX_REFERENCE_VALUE_BYTES,
    DETAILS_MAX_TOKEN_LEN,
};
use crate::errors::{ProtocolError, Result};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::collections::HashSet;

/// Prefix of every shape error's message (after the code).
pub const DETAILS_ERROR_PREFIX: &str = "PUSH_RESULT_DETAILS.detailsJson";

fn err(msg: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::invalid(format!("{DETAILS_ERROR_PREFIX}: {msg}"))
}

/// [`validate_details_json`] for a wire-version-3 message: first the raw
/// `text` must be at most [`DETAILS_MAX_ENCODED_BYTES`] bytes (the
/// `syncular-ssp2` 0.49 decoder's first check), then the same shape.
/// Errors: `sync.invalid_request`, message prefixed [`DETAILS_ERROR_PREFIX`].
pub fn validate_details_json_v3(text: &str) -> Result<()> {
    if text.len() > DETAILS_MAX_ENCODED_BYTES {
        return Err(err(format_args!(
            "raw text is {} bytes, over {DETAILS_MAX_ENCODED_BYTES} (wire version 3)",
            text.len()
        )));
    }
    validate_details_json(text)
}

/// The §6.3.1 check for a message of `wire_version`:
/// [`validate_details_json_v3`] from version 3 on, [`validate_details_json`]
/// before.
pub fn validate_details_json_for(text: &str, wire_version: u16) -> Result<()> {
    if wire_version >= crate::constants::WIRE_VERSION_3 {
        validate_details_json_v3(text)
    } else {
        validate_details_json(text)
    }
}

/// Validates `text` against the §6.3.1 bounded shape (wire versions 1 and
/// 2). Duplicate object member names (at any depth) are rejected, not
/// collapsed. Errors: `sync.invalid_request`, message prefixed
/// [`DETAILS_ERROR_PREFIX`].
pub fn validate_details_json(text: &str) -> Result<()> {
    let value = serde_json::from_str::<Strict>(text)
        .map_err(|e| err(format_args!("not a JSON document without duplicate members ({e})")))?
        .0;
    let Value::Object(obj) = value else {
        return Err(err("must be a JSON object"));
    };
    let mut normalized = Map::new();
    for key in obj.keys() {
        if !matches!(key.as_str(), "fieldPaths" | "reason" | "requiredAction" | "references") {
            return Err(err(format_args!("unknown member {key:?}")));
        }
    }
    if let Some(paths) = obj.get("fieldPaths") {
        let Value::Array(paths) = paths else {
            return Err(err("fieldPaths must be an array"));
        };
        if paths.is_empty() || paths.len() > DETAILS_MAX_FIELD_PATHS {
            return Err(err(format_args!("fieldPaths must hold 1–{DETAILS_MAX_FIELD_PATHS} paths")));
        }
        let mut seen = HashSet::new();
        for p in paths {
            let Value::String(p) = p else {
                return Err(err("fieldPaths entries must be strings"));
            };
            if p.len() > DETAILS_MAX_FIELD_PATH_LEN || !is_field_path(p) {
                return Err(err(format_args!("malformed field path {p:?}")));
            }
            if !seen.insert(p.as_str()) {
                return Err(err(format_args!("duplicate field path {p:?}")));
            }
        }
        normalized.insert("fieldPaths".into(), Value::Array(paths.clone()));
    }
    for member in ["reason", "requiredAction"] {
        if let Some(v) = obj.get(member) {
            match v {
                Value::String(s) if s.len() <= DETAILS_MAX_TOKEN_LEN && is_token(s) => {
                    normalized.insert(member.into(), v.clone());
                }
                _ => return Err(err(format_args!("{member} must be a stable token of ≤ {DETAILS_MAX_TOKEN_LEN} characters"))),
            }
        }
    }
    if let Some(refs) = obj.get("references") {
        let Value::Object(refs) = refs else {
            return Err(err("references must be an object"));
        };
        if refs.is_empty() || refs.len() > DETAILS_MAX_REFERENCES {
            return Err(err(format_args!("references must hold 1–{DETAILS_MAX_REFERENCES} entries")));
        }
        let mut sorted: Vec<(&String, &Value)> = refs.iter().collect();
        sorted.sort_by(|a, b| crate::primitives::cmp_utf16(a.0, b.0));
        let mut out = Map::new();
        for (k, v) in sorted {
            if k.len() > DETAILS_MAX_REFERENCE_KEY_LEN || !is_token(k) {
                return Err(err(format_args!("malformed reference key {k:?}")));
            }
            let Value::String(s) = v else {
                return Err(err(format_args!("reference {k:?} must be a string")));
            };
            if s.is_empty()
                || s.len() > DETAILS_MAX_REFERENCE_VALUE_BYTES
                || s.trim_matches(is_js_trim_char) != s
                || s.chars().any(is_control)
            {
                return Err(err(format_args!(
                    "reference {k:?} must be a non-empty trimmed string without control characters, ≤ {DETAILS_MAX_REFERENCE_VALUE_BYTES} bytes"
                )));
            }
            out.insert(k.clone(), v.clone());
        }
        normalized.insert("references".into(), Value::Object(out));
    }
    if normalized.is_empty() {
        return Err(err("must contain at least one of fieldPaths, reason, requiredAction, references"));
    }
    let encoded = serde_json::to_string(&Value::Object(normalized)).map_err(err)?;
    if encoded.len() > DETAILS_MAX_ENCODED_BYTES {
        return Err(err(format_args!(
            "normalized object is {} bytes, over {DETAILS_MAX_ENCODED_BYTES}",
            encoded.len()
        )));
    }
    Ok(())
}

/// `identifier(.identifier)*`, identifier = `[A-Za-z_][A-Za-z0-9_]*`.
fn is_field_path(p: &str) -> bool {
    !p.is_empty()
        && p.split('.').all(|id| {
            let mut chars = id.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// `[a-z][a-z0-9]*([._-][a-z0-9]+)*`.
fn is_token(t: &str) -> bool {
    let b = t.as_bytes();
    if b.is_empty() || !b[0].is_ascii_lowercase() {
        return false;
    }
    let mut prev_sep = false;
    for &c in &b[1..] {
        match c {
            b'a'..=b'z' | b'0'..=b'9' => prev_sep = false,
            b'.' | b'_' | b'-' if !prev_sep => prev_sep = true,
            _ => return false,
        }
    }
    !prev_sep
}

/// C0, DEL and C1 controls.
fn is_control(c: char) -> bool {
    (c as u32) <= 0x1f || (0x7f..=0x9f).contains(&(c as u32))
}

/// The characters JavaScript's `String.prototype.trim` removes: Unicode
/// white space, line terminators and U+FEFF.
fn is_js_trim_char(c: char) -> bool {
    c.is_whitespace() || c == '\u{FEFF}'
}

/// A `serde_json::Value` that refuses duplicate object member names.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> std::result::Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> std::result::Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> std::result::Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            if out.insert(key.clone(), v).is_some() {
                return Err(de::Error::custom(format!("duplicate member {key:?}")));
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_member_within_limits() {
        let ok = r#"{"fieldPaths":["title","meta.due_at"],"reason":"outside_schedule.day","requiredAction":"edit-fields","references":{"b":"x y","a":"Ω"}}"#;
        validate_details_json(ok).unwrap();
        validate_details_json(r#"{"reason":"r"}"#).unwrap();
    }

    #[test]
    fn rejects_each_shape_violation_with_the_prefix() {
        let long_token = format!(r#"{{"reason":"{}"}}"#, "a".repeat(97));
        let too_many: Vec<String> = (0..33).map(|i| format!("\"f{i}\"")).collect();
        let too_many = format!(r#"{{"fieldPaths":[{}]}}"#, too_many.join(","));
        let cases = [
            "[]",
            "{}",
            r#"{"reason":"ok","extra":1}"#,
            r#"{"reason":"ok","reason":"ok"}"#,
            r#"{"fieldPaths":[]}"#,
            r#"{"fieldPaths":["a","a"]}"#,
            r#"{"fieldPaths":["1a"]}"#,
            r#"{"fieldPaths":["a..b"]}"#,
            r#"{"reason":"Upper"}"#,
            r#"{"reason":"a__b"}"#,
            r#"{"reason":"a-"}"#,
            r#"{"requiredAction":7}"#,
            r#"{"references":{}}"#,
            r#"{"references":{"k":" padded"}}"#,
            r#"{"references":{"k":"a\u0007b"}}"#,
            r#"{"references":{"k":""}}"#,
            r#"{"references":{"K":"v"}}"#,
            "not json",
            long_token.as_str(),
            too_many.as_str(),
        ];
        for c in cases {
            let e = validate_details_json(c).expect_err(c);
            assert_eq!(e.code, crate::ErrorCode::InvalidRequest, "{c}");
            assert!(e.message.starts_with(DETAILS_ERROR_PREFIX), "{c}: {}", e.message);
        }
    }

    #[test]
    fn version_3_also_bounds_the_raw_text() {
        // Normalized it is small; raw, padded with white space, it is not.
        let padded = format!("{{\"reason\":\"r\"{}}}", " ".repeat(DETAILS_MAX_ENCODED_BYTES));
        validate_details_json(&padded).unwrap();
        validate_details_json_for(&padded, 2).unwrap();
        let e = validate_details_json_v3(&padded).unwrap_err();
        assert!(e.message.starts_with(DETAILS_ERROR_PREFIX), "{}", e.message);
        assert!(validate_details_json_for(&padded, 3).is_err());
        validate_details_json_v3(r#"{"reason":"r"}"#).unwrap();
    }

    #[test]
    fn normalized_size_limit_is_enforced() {
        let refs: Vec<String> = (0..16)
            .map(|i| format!("\"k{i}\":\"{}\"", "v".repeat(256)))
            .collect();
        let big = format!(r#"{{"references":{{{}}}}}"#, refs.join(","));
        assert!(big.len() > DETAILS_MAX_ENCODED_BYTES);
        assert!(validate_details_json(&big).is_err());
    }
}
