//! Reading stored scopes back for the pull (SPEC §3.1, §3.2 last rule): the
//! index key a page is selected by, the exact multi-variable match of a
//! stored scope map against the effective scopes, and the stored scopes of a
//! change as the canonical §4.5 `map<str,str>`.

use std::collections::BTreeMap;

use syncular_protocol::frame_fields::{canonical_stored_scopes, StoredScopes};
use syncular_protocol::scopes::{matches_effective, ScopeMap};

use crate::engine::error::{EngineError, EngineResult};

/// The scope variable and values whose inverted-index entries select a
/// page's candidates: the first effective key (canonical order). `None` for
/// an empty effective map.
pub fn candidate_key(effective: &ScopeMap) -> Option<(&str, &[String])> {
    effective.iter().next().map(|(k, v)| (k.as_str(), v.as_slice()))
}

/// Parses a stored scope object (`{"variable":"value",…}`, the JSON text of
/// `sync_changes.scopes` / `_sync_scopes`) into canonical [`StoredScopes`].
/// Errors: `syncular.internal` when the stored value is not a string map.
pub fn parse_stored_scopes(json: &str) -> EngineResult<StoredScopes> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(json)
        .map_err(|e| EngineError::internal(format!("stored scopes are not a JSON object: {e}")))?;
    let mut entries = Vec::with_capacity(map.len());
    for (k, v) in map {
        match v {
            serde_json::Value::String(s) => entries.push((k, s)),
            other => {
                return Err(EngineError::internal(format!(
                    "stored scope {k:?} is not a string: {other}"
                )))
            }
        }
    }
    canonical_stored_scopes(entries).map_err(|e| EngineError::internal(e.message))
}

/// True when, for every effective key, the stored value is one of the
/// effective values (§3.2: "a pull for an active subscription returns
/// exactly the changes whose stored scopes match the effective scopes";
/// the protocol crate's `matches_effective`).
pub fn matches(stored: &StoredScopes, effective: &ScopeMap) -> bool {
    matches_effective(
        |key| stored.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()),
        effective,
    )
}

/// [`parse_stored_scopes`] then [`matches()`].
pub fn stored_scopes_match(json: &str, effective: &ScopeMap) -> EngineResult<bool> {
    Ok(matches(&parse_stored_scopes(json)?, effective))
}

/// [`stored_scopes_match`] for a walk over many rows against one effective
/// map: the verdict of the previous stored scope text is reused when the
/// next row's text is the same — a table's rows repeat the same few scope
/// objects, so a bootstrap page parses each distinct one once per run.
#[derive(Debug, Default)]
pub struct ScopeMatcher {
    last: Option<(String, bool)>,
}

impl ScopeMatcher {
    /// [`stored_scopes_match`] of `json` (errors likewise).
    pub fn matches(&mut self, json: &str, effective: &ScopeMap) -> EngineResult<bool> {
        if let Some((text, verdict)) = &self.last {
            if text == json {
                return Ok(*verdict);
            }
        }
        let verdict = stored_scopes_match(json, effective)?;
        self.last = Some((json.to_owned(), verdict));
        Ok(verdict)
    }
}

/// Parses a stored `_sync_scopes` object for authorization: unlike
/// [`parse_stored_scopes`], never fails — non-string values are dropped (the
/// authorization then denies the missing variable), anything else is empty.
pub fn parse_stored_scopes_lenient(text: &str) -> BTreeMap<String, String> {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(text) else {
        return BTreeMap::new();
    };
    map.into_iter()
        .filter_map(|(k, v)| match v {
            serde_json::Value::String(s) => Some((k, s)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eff(entries: &[(&str, &[&str])]) -> ScopeMap {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn every_effective_key_must_match() {
        let stored = parse_stored_scopes(r#"{"ws":"w1","proj":"p2"}"#).unwrap();
        assert!(matches(&stored, &eff(&[("ws", &["w1", "w2"])])));
        assert!(matches(&stored, &eff(&[("proj", &["p2"]), ("ws", &["w1"])])));
        assert!(!matches(&stored, &eff(&[("proj", &["p1"]), ("ws", &["w1"])])));
        assert!(!matches(&stored, &eff(&[("other", &["x"])])));
    }

    #[test]
    fn the_matcher_agrees_with_a_fresh_match_row_after_row() {
        let effective = eff(&[("ws", &["w1"])]);
        let mut m = ScopeMatcher::default();
        for json in [r#"{"ws":"w1"}"#, r#"{"ws":"w1"}"#, r#"{"ws":"w2"}"#, r#"{"ws":"w2"}"#, r#"{"ws":"w1"}"#] {
            assert_eq!(m.matches(json, &effective).unwrap(), stored_scopes_match(json, &effective).unwrap(), "{json}");
        }
        assert!(m.matches("[]", &effective).is_err());
    }

    #[test]
    fn stored_scopes_come_back_canonical() {
        let stored = parse_stored_scopes(r#"{"b":"2","a":"1"}"#).unwrap();
        assert_eq!(stored, vec![("a".into(), "1".into()), ("b".into(), "2".into())]);
        assert!(parse_stored_scopes(r#"{"a":1}"#).is_err());
        assert!(parse_stored_scopes("[]").is_err());
    }
}
