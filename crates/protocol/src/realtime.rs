//! Realtime JSON control messages (§8): parse and render.
//!
//! Server → client events carry `event` + `data`: `hello` (§8.1), `sync`
//! wake-ups (§8.3), `heartbeat` (§8.5), `presence` fanout / publisher error
//! (§8.6.2). Client → server messages carry `type` (the `ack`, §8.2) or are
//! a `presence` publish/leave (§8.6.2).
//!
//! The §8.1 rule: an unknown `event` name (or unknown client `type`) is
//! tolerated and preserved verbatim ([`ControlMessage::Unknown`]); a *known*
//! event whose `data` is missing or of the wrong shape is malformed —
//! `sync.invalid_request`. Every numeric field is an integer within
//! ±(2^53−1); fractional, non-finite or out-of-range numbers are malformed.
//! Closed sets: wake reasons (3), presence kinds (3), presence error codes
//! (2); `requiresPull` must be the literal `true`; presence `doc` is an
//! object (or `null` to leave / on a `leave` fanout).
//!
//! [`render_control`] produces the JSON with keys in the §8 shape order, so
//! parse → render reproduces a canonical message.

use crate::errors::{ProtocolError, Result};
use crate::primitives::MAX_SAFE_INTEGER;
use serde_json::{Map, Value};

/// §8.3 wake-up reason — a closed set of three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WakeReason {
    /// `delta-too-large`: the delta exceeded message limits.
    DeltaTooLarge,
    /// `catchup-required`: a gap the server cannot bridge.
    CatchupRequired,
    /// `reset-required`: server-declared discontinuity.
    ResetRequired,
}

impl WakeReason {
    /// Wire spelling, e.g. `"catchup-required"`.
    pub fn as_str(self) -> &'static str {
        match self {
            WakeReason::DeltaTooLarge => "delta-too-large",
            WakeReason::CatchupRequired => "catchup-required",
            WakeReason::ResetRequired => "reset-required",
        }
    }

    /// Parses a wire spelling; `None` outside the closed set.
    pub fn parse(s: &str) -> Option<WakeReason> {
        [WakeReason::DeltaTooLarge, WakeReason::CatchupRequired, WakeReason::ResetRequired]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// §8.6.2 presence fanout kind — a closed set of three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PresenceKind {
    /// The peer's first document on the key.
    Join,
    /// A subsequent document from a present peer.
    Update,
    /// The peer cleared the key or disconnected.
    Leave,
}

impl PresenceKind {
    /// Wire spelling (`join` / `update` / `leave`).
    pub fn as_str(self) -> &'static str {
        match self {
            PresenceKind::Join => "join",
            PresenceKind::Update => "update",
            PresenceKind::Leave => "leave",
        }
    }

    /// Parses a wire spelling; `None` outside the closed set.
    pub fn parse(s: &str) -> Option<PresenceKind> {
        [PresenceKind::Join, PresenceKind::Update, PresenceKind::Leave]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// §8.6.2 presence error carried in-band to the publisher — closed set of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PresenceError {
    /// `presence.too_large`: the published doc exceeded the host cap.
    TooLarge,
    /// `presence.forbidden`: the connection does not hold the scope key.
    Forbidden,
}

impl PresenceError {
    /// Wire spelling (`presence.too_large` / `presence.forbidden`).
    pub fn as_str(self) -> &'static str {
        match self {
            PresenceError::TooLarge => "presence.too_large",
            PresenceError::Forbidden => "presence.forbidden",
        }
    }

    /// The catalog code (`ErrorCode::PresenceTooLarge` /
    /// `ErrorCode::PresenceForbidden`), for its §10.2 metadata.
    pub fn code(self) -> crate::ErrorCode {
        match self {
            PresenceError::TooLarge => crate::ErrorCode::PresenceTooLarge,
            PresenceError::Forbidden => crate::ErrorCode::PresenceForbidden,
        }
    }

    /// Parses a wire spelling; `None` outside the closed set.
    pub fn parse(s: &str) -> Option<PresenceError> {
        [PresenceError::TooLarge, PresenceError::Forbidden].into_iter().find(|e| e.as_str() == s)
    }
}

/// §8.1 `hello` (server → client on connect). Integers are within ±(2^53−1);
/// `timestamp` is epoch ms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// `protocolVersion`.
    pub protocol_version: i64,
    /// `sessionId`: the connection's session id.
    pub session_id: String,
    /// `actorId`: the authenticated actor.
    pub actor_id: String,
    /// `clientId`: the connecting client.
    pub client_id: String,
    /// The client's last acked cursor.
    pub cursor: i64,
    /// The server's latest commit seq.
    pub latest_cursor: i64,
    /// `requiresSync`: the client must run a sync round first.
    pub requires_sync: bool,
    /// Server clock, epoch ms.
    pub timestamp: i64,
}

/// One realtime control message.
#[derive(Debug, Clone, PartialEq)]
pub enum ControlMessage {
    /// §8.1 connect handshake.
    Hello(Hello),
    /// §8.3 wake-up (`event = "sync"`); `requiresPull` is always `true`.
    Wake {
        /// The server's latest commit seq.
        cursor: i64,
        /// Closed set of three.
        reason: WakeReason,
        /// Epoch ms.
        timestamp: i64,
    },
    /// §8.5 heartbeat.
    Heartbeat {
        /// Epoch ms.
        timestamp: i64,
    },
    /// §8.2 client ack of the highest contiguously applied commit seq.
    Ack {
        /// Highest contiguously applied commit seq.
        cursor: i64,
    },
    /// §8.6.2 client → server publish (`doc` object) or leave (`None`).
    PresencePublish {
        /// `scopeKey` (non-empty), e.g. `project:p1`.
        scope_key: String,
        /// The host-shaped document; `None` = leave.
        doc: Option<Map<String, Value>>,
    },
    /// §8.6.2 server → client fanout; `doc` is `Some` iff `kind` ≠ leave.
    PresenceFanout {
        /// `scopeKey` (non-empty).
        scope_key: String,
        /// join / update / leave.
        kind: PresenceKind,
        /// The peer's actor.
        actor_id: String,
        /// The peer's client.
        client_id: String,
        /// The peer's document (`None` exactly for leave).
        doc: Option<Map<String, Value>>,
        /// Fanout time, epoch ms.
        timestamp: i64,
    },
    /// §8.6.2 publisher-directed error.
    PresenceRejected {
        /// `scopeKey` of the rejected publish.
        scope_key: String,
        /// Closed set of two.
        error: PresenceError,
        /// Epoch ms.
        timestamp: i64,
    },
    /// An unknown event name / client type, preserved verbatim (§8.1).
    Unknown(Value),
}

fn malformed(m: impl Into<String>) -> ProtocolError {
    ProtocolError::invalid(m)
}

fn get<'a>(d: &'a Map<String, Value>, ev: &str, key: &str) -> Result<&'a Value> {
    d.get(key).ok_or_else(|| malformed(format!("{ev} control message: data.{key} is missing")))
}

fn int(d: &Map<String, Value>, ev: &str, key: &str) -> Result<i64> {
    let v = get(d, ev, key)?;
    v.as_i64()
        .filter(|n| (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(n))
        .ok_or_else(|| {
            malformed(format!(
                "{ev} control message: data.{key} = {v} is not an integer within ±(2^53−1)"
            ))
        })
}

fn string(d: &Map<String, Value>, ev: &str, key: &str) -> Result<String> {
    let v = get(d, ev, key)?;
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| malformed(format!("{ev} control message: data.{key} = {v} is not a string")))
}

fn boolean(d: &Map<String, Value>, ev: &str, key: &str) -> Result<bool> {
    let v = get(d, ev, key)?;
    v.as_bool()
        .ok_or_else(|| malformed(format!("{ev} control message: data.{key} = {v} is not a boolean")))
}

/// Parses a control message text frame. Errors: `sync.invalid_request`
/// for non-JSON, a non-object, an object with neither `event` nor `type`,
/// or a malformed known event (rules in the module docs).
pub fn parse_control(text: &str) -> Result<ControlMessage> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| malformed(format!("control message is not JSON: {e}")))?;
    parse_control_value(&v)
}

/// [`parse_control`] on an already-parsed JSON value.
pub fn parse_control_value(v: &Value) -> Result<ControlMessage> {
    let root = v.as_object().ok_or_else(|| malformed("control message is not a JSON object"))?;
    if let Some(ty) = root.get("type") {
        // Client → server (§8.1 direction rule).
        return match ty.as_str() {
            Some("ack") => Ok(ControlMessage::Ack { cursor: int(root, "ack", "cursor")? }),
            Some(_) => Ok(ControlMessage::Unknown(v.clone())),
            None => Err(malformed("control message: type must be a string")),
        };
    }
    let event = match root.get("event") {
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(malformed("control message: event must be a string")),
        None => return Err(malformed("control message has neither \"event\" nor \"type\"")),
    };
    if !matches!(event, "hello" | "sync" | "heartbeat" | "presence") {
        return Ok(ControlMessage::Unknown(v.clone()));
    }
    let d = root
        .get("data")
        .and_then(Value::as_object)
        .ok_or_else(|| malformed(format!("{event} control message: data missing or not an object")))?;
    match event {
        "hello" => Ok(ControlMessage::Hello(Hello {
            protocol_version: int(d, event, "protocolVersion")?,
            session_id: string(d, event, "sessionId")?,
            actor_id: string(d, event, "actorId")?,
            client_id: string(d, event, "clientId")?,
            cursor: int(d, event, "cursor")?,
            latest_cursor: int(d, event, "latestCursor")?,
            requires_sync: boolean(d, event, "requiresSync")?,
            timestamp: int(d, event, "timestamp")?,
        })),
        "sync" => {
            let cursor = int(d, event, "cursor")?;
            if get(d, event, "requiresPull")? != &Value::Bool(true) {
                return Err(malformed("sync control message: requiresPull must be the literal true (§8.3)"));
            }
            let raw = string(d, event, "reason")?;
            let reason = WakeReason::parse(&raw)
                .ok_or_else(|| malformed(format!("sync control message: unknown reason {raw:?} (§8.3)")))?;
            Ok(ControlMessage::Wake { cursor, reason, timestamp: int(d, event, "timestamp")? })
        }
        "heartbeat" => Ok(ControlMessage::Heartbeat { timestamp: int(d, event, "timestamp")? }),
        _ => parse_presence(d),
    }
}

fn doc_object(d: &Map<String, Value>, what: &str) -> Result<Option<Map<String, Value>>> {
    match d.get("doc") {
        Some(Value::Object(m)) => Ok(Some(m.clone())),
        Some(Value::Null) => Ok(None),
        Some(other) => Err(malformed(format!("presence {what}: doc must be an object or null, got {other}"))),
        None => Err(malformed(format!("presence {what}: doc is missing"))),
    }
}

fn parse_presence(d: &Map<String, Value>) -> Result<ControlMessage> {
    let ev = "presence";
    let scope_key = string(d, ev, "scopeKey")?;
    if scope_key.is_empty() {
        return Err(malformed("presence control message: scopeKey must be non-empty"));
    }
    if d.contains_key("error") {
        let raw = string(d, ev, "error")?;
        let error = PresenceError::parse(&raw)
            .ok_or_else(|| malformed(format!("presence control message: unknown error {raw:?}")))?;
        return Ok(ControlMessage::PresenceRejected { scope_key, error, timestamp: int(d, ev, "timestamp")? });
    }
    if d.contains_key("kind") {
        let raw = string(d, ev, "kind")?;
        let kind = PresenceKind::parse(&raw)
            .ok_or_else(|| malformed(format!("presence control message: unknown kind {raw:?} (§8.6.2)")))?;
        let actor_id = string(d, ev, "actorId")?;
        let client_id = string(d, ev, "clientId")?;
        let doc = doc_object(d, "fanout")?;
        if (kind == PresenceKind::Leave) != doc.is_none() {
            return Err(malformed(format!(
                "presence {} fanout: doc must be {} (§8.6.2)",
                kind.as_str(),
                if kind == PresenceKind::Leave { "null" } else { "an object" }
            )));
        }
        return Ok(ControlMessage::PresenceFanout {
            scope_key,
            kind,
            actor_id,
            client_id,
            doc,
            timestamp: int(d, ev, "timestamp")?,
        });
    }
    Ok(ControlMessage::PresencePublish { scope_key, doc: doc_object(d, "publish")? })
}

fn event(name: &str, data: Map<String, Value>) -> Value {
    let mut root = Map::with_capacity(2);
    root.insert("event".into(), Value::from(name));
    root.insert("data".into(), Value::Object(data));
    Value::Object(root)
}

fn doc_value(doc: &Option<Map<String, Value>>) -> Value {
    doc.clone().map_or(Value::Null, Value::Object)
}

/// Renders a message as JSON with keys in the §8 shape order.
pub fn render_control(msg: &ControlMessage) -> Value {
    let mut d = Map::new();
    match msg {
        ControlMessage::Hello(h) => {
            d.insert("protocolVersion".into(), h.protocol_version.into());
            d.insert("sessionId".into(), h.session_id.clone().into());
            d.insert("actorId".into(), h.actor_id.clone().into());
            d.insert("clientId".into(), h.client_id.clone().into());
            d.insert("cursor".into(), h.cursor.into());
            d.insert("latestCursor".into(), h.latest_cursor.into());
            d.insert("requiresSync".into(), h.requires_sync.into());
            d.insert("timestamp".into(), h.timestamp.into());
            event("hello", d)
        }
        ControlMessage::Wake { cursor, reason, timestamp } => {
            d.insert("cursor".into(), (*cursor).into());
            d.insert("requiresPull".into(), true.into());
            d.insert("reason".into(), reason.as_str().into());
            d.insert("timestamp".into(), (*timestamp).into());
            event("sync", d)
        }
        ControlMessage::Heartbeat { timestamp } => {
            d.insert("timestamp".into(), (*timestamp).into());
            event("heartbeat", d)
        }
        ControlMessage::Ack { cursor } => {
            d.insert("type".into(), "ack".into());
            d.insert("cursor".into(), (*cursor).into());
            Value::Object(d)
        }
        ControlMessage::PresencePublish { scope_key, doc } => {
            d.insert("scopeKey".into(), scope_key.clone().into());
            d.insert("doc".into(), doc_value(doc));
            event("presence", d)
        }
        ControlMessage::PresenceFanout { scope_key, kind, actor_id, client_id, doc, timestamp } => {
            d.insert("scopeKey".into(), scope_key.clone().into());
            d.insert("kind".into(), kind.as_str().into());
            d.insert("actorId".into(), actor_id.clone().into());
            d.insert("clientId".into(), client_id.clone().into());
            d.insert("doc".into(), doc_value(doc));
            d.insert("timestamp".into(), (*timestamp).into());
            event("presence", d)
        }
        ControlMessage::PresenceRejected { scope_key, error, timestamp } => {
            d.insert("scopeKey".into(), scope_key.clone().into());
            d.insert("error".into(), error.as_str().into());
            d.insert("timestamp".into(), (*timestamp).into());
            event("presence", d)
        }
        ControlMessage::Unknown(v) => v.clone(),
    }
}

/// The compact text frame for a message (what a gateway sends).
pub fn control_text(msg: &ControlMessage) -> String {
    render_control(msg).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_events_round_trip() {
        let msgs = [
            json!({"event":"hello","data":{"protocolVersion":1,"sessionId":"s","actorId":"a","clientId":"c","cursor":-1,"latestCursor":9,"requiresSync":false,"timestamp":5}}),
            json!({"event":"sync","data":{"cursor":9,"requiresPull":true,"reason":"reset-required","timestamp":5}}),
            json!({"event":"heartbeat","data":{"timestamp":5}}),
            json!({"type":"ack","cursor":9}),
            json!({"event":"presence","data":{"scopeKey":"p:1","doc":null}}),
            json!({"event":"presence","data":{"scopeKey":"p:1","kind":"leave","actorId":"a","clientId":"c","doc":null,"timestamp":5}}),
            json!({"event":"presence","data":{"scopeKey":"p:1","error":"presence.too_large","timestamp":5}}),
            json!({"event":"future-thing","data":[1,2]}),
            json!({"type":"future-type"}),
        ];
        for m in msgs {
            let parsed = parse_control_value(&m).unwrap();
            assert_eq!(render_control(&parsed), m);
            assert_eq!(parse_control(&control_text(&parsed)).unwrap(), parsed);
        }
    }

    #[test]
    fn malformed_known_events_are_invalid_request() {
        let bad = [
            json!({"event":"sync","data":{"cursor":9,"requiresPull":1,"reason":"reset-required","timestamp":5}}),
            json!({"event":"sync","data":{"cursor":9,"requiresPull":true,"reason":"nap","timestamp":5}}),
            json!({"event":"heartbeat","data":{"timestamp":1.5}}),
            json!({"event":"heartbeat","data":{"timestamp":9007199254740992u64}}),
            json!({"event":"heartbeat"}),
            json!({"type":"ack","cursor":"9"}),
            json!({"event":"presence","data":{"scopeKey":"","doc":null}}),
            json!({"event":"presence","data":{"scopeKey":"k","doc":[1]}}),
            json!({"event":"presence","data":{"scopeKey":"k"}}),
            json!({"event":"presence","data":{"scopeKey":"k","kind":"leave","actorId":"a","clientId":"c","doc":{},"timestamp":1}}),
            json!({"event":"presence","data":{"scopeKey":"k","kind":"join","actorId":"a","clientId":"c","doc":null,"timestamp":1}}),
            json!({"event":"presence","data":{"scopeKey":"k","error":"presence.other","timestamp":1}}),
            json!({"data":{}}),
            json!([1]),
        ];
        for m in bad {
            let e = parse_control_value(&m).unwrap_err();
            assert_eq!(e.code, crate::ErrorCode::InvalidRequest, "{m}");
        }
        assert!(parse_control("{nope").is_err());
    }
}
