//! What `syncular.realtime_open` answers (the gateway contract §2: session
//! open and registration reload) — one type for the extension, which builds
//! it, and every gateway, which decodes it. The JSON field names are the
//! contract's (camelCase); `leaseExpiresAtMs` is absent unless the
//! registrations came from an auth lease.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Contract §2: the answer of `syncular.realtime_open(partition, actor_id,
/// client_id, allowed_scopes)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Opened {
    /// Fresh per call (used in `hello`).
    pub session_id: String,
    /// The actor.
    pub actor_id: String,
    /// The client.
    pub client_id: String,
    /// `sync_clients.cursor`, −1 without a record.
    pub cursor: i64,
    /// The partition's `max_commit_seq`, read before the scopes were resolved.
    pub latest_cursor: i64,
    /// No record, or `cursor < latestCursor`.
    pub requires_sync: bool,
    /// The record's accepted wire version (2 without a record).
    pub wire_version: i64,
    /// The partition's current `logEpoch`.
    pub log_epoch: String,
    /// The registered schema version served.
    pub schema_version: i64,
    /// `[{"id","table","effective"}]`, kept verbatim for `realtime_deltas`.
    pub registrations: Value,
    /// Sorted distinct `prefix:value` keys of every effective value (presence grant, §8.6.3).
    pub scope_keys: Vec<String>,
    /// Present when the registrations came from the client's auth lease (the §7.3.3 outage
    /// signal): the lease's expiry, Unix ms — the session ends then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASED: &str = r#"{"sessionId":"s-1","actorId":"alice","clientId":"c1","cursor":-1,"latestCursor":7,"requiresSync":true,"wireVersion":2,"logEpoch":"e1","schemaVersion":3,"registrations":[{"id":"sub1","table":"tasks","effective":{"project_id":["p1"]}}],"scopeKeys":["project_id:p1"],"leaseExpiresAtMs":1700000000000}"#;

    #[test]
    fn round_trips_byte_for_byte() {
        let opened: Opened = serde_json::from_str(LEASED).unwrap();
        assert_eq!(opened.lease_expires_at_ms, Some(1_700_000_000_000));
        assert_eq!(opened.scope_keys, vec!["project_id:p1".to_owned()]);
        assert_eq!(serde_json::to_string(&opened).unwrap(), LEASED);
    }

    #[test]
    fn no_lease_means_no_field() {
        let text = LEASED.replace(r#","leaseExpiresAtMs":1700000000000"#, "");
        let opened: Opened = serde_json::from_str(&text).unwrap();
        assert_eq!(opened.lease_expires_at_ms, None);
        assert_eq!(serde_json::to_string(&opened).unwrap(), text);
    }

    #[test]
    fn a_missing_field_does_not_decode() {
        assert!(serde_json::from_str::<Opened>(&LEASED.replace(r#""cursor":-1,"#, "")).is_err());
    }
}
