//! What the session rules answer (the extension's `syncular.realtime_connect`,
//! `syncular.realtime_reload` and the `resume` / `overflow` columns of `syncular.realtime_pass`;
//! docs/src/sql/realtime.md "Session rules") — one set of types for the extension, which
//! builds them, and every gateway, which decodes them. A session's `state` is opaque to a
//! gateway: it is kept and handed back verbatim (as JSON), and sessions with equal states share
//! one delta.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Once the client's highest ack is ≥ `cursor`, the session keeps `state` (deltas resume, §8.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resume {
    /// The ack that lifts the pending wake-up.
    pub cursor: i64,
    /// The state to keep then.
    pub state: Value,
}

/// What a session keeps and sends instead of a delta its socket cannot take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Overflow {
    /// The state to keep.
    pub state: Value,
    /// The text message to send (a `catchup-required` wake-up).
    pub control: String,
    /// Its resume rule.
    pub resume: Option<Resume>,
}

/// The answer of `syncular.realtime_connect`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Connected {
    /// The session's first state.
    pub state: Value,
    /// Its resume rule (a client behind the log starts suppressed).
    pub resume: Option<Resume>,
    /// The §8.1 `hello` text message, sent first.
    pub hello: String,
    /// The hello's `sessionId`.
    pub session_id: String,
    /// Presence grant (§8.6.3): sorted `prefix:value` keys.
    pub scope_keys: Vec<String>,
    /// The partition's `max_commit_seq` read before the scopes were resolved.
    pub latest_cursor: i64,
    /// The partition's `logEpoch` (what the session's acks carry).
    pub log_epoch: String,
    /// Set when the registrations came from an auth lease: the session ends then (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at_ms: Option<i64>,
}

/// The answer of `syncular.realtime_reload`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reloaded {
    /// The state to keep.
    pub state: Value,
    /// Its resume rule.
    pub resume: Option<Resume>,
    /// Text messages to send, in order (a wake-up when the client must pull).
    pub send: Vec<String>,
    /// The presence grant now.
    pub scope_keys: Vec<String>,
    /// The partition's `max_commit_seq` read by the reload.
    pub latest_cursor: i64,
    /// The state's `logEpoch`.
    pub log_epoch: String,
    /// The state differs from the one handed in.
    pub changed: bool,
    /// The resolution failed and the registrations were emptied (host refresh, fail-closed).
    pub emptied: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connected_round_trips_and_the_lease_is_optional() {
        let text = r#"{"state":{"cursor":7},"resume":null,"hello":"{}","sessionId":"s","scopeKeys":["p:1"],"latestCursor":7,"logEpoch":"e"}"#;
        let c: Connected = serde_json::from_str(text).unwrap();
        assert_eq!((c.latest_cursor, c.lease_expires_at_ms, c.resume.is_none()), (7, None, true));
        assert_eq!(serde_json::to_string(&c).unwrap(), text);
        let with_lease: Connected =
            serde_json::from_str(&text.replace(r#""logEpoch":"e"}"#, r#""logEpoch":"e","leaseExpiresAtMs":9}"#)).unwrap();
        assert_eq!(with_lease.lease_expires_at_ms, Some(9));
    }

    #[test]
    fn a_resume_rule_decodes_and_a_missing_field_does_not() {
        let r: Reloaded = serde_json::from_str(
            r#"{"state":{},"resume":{"cursor":3,"state":{"s":1}},"send":["w"],"scopeKeys":[],"latestCursor":3,"logEpoch":"e","changed":true,"emptied":false}"#,
        )
        .unwrap();
        assert_eq!(r.resume.map(|r| r.cursor), Some(3));
        assert!(serde_json::from_str::<Reloaded>(r#"{"state":{},"resume":null,"send":[]}"#).is_err());
        let o: Overflow = serde_json::from_str(r#"{"state":{},"control":"c","resume":null}"#).unwrap();
        assert_eq!(o.control, "c");
    }
}
