//! Cross-gateway presence relay through `pg_notify('syncular_presence', json)` (contract §7),
//! so gateways behind one load balancer behave as one (§8.6).
//!
//! Messages: `{"v":1,"g":<gateway>,"q":<counter>,"ts":<ms>,"t":<type>,…}` with `t` = `pub`
//! (`p` partition, `k` scopeKey, `s` peer session, `a` actor, `c` client, `d` doc), `leave`
//! (same without `d`), `hello` (a gateway started or reconnected: every other gateway
//! re-announces its local documents), `hb` (heartbeat), `bye` (graceful shutdown: drop my
//! peers). A message over [`MAX_PAYLOAD`] bytes travels as `part`s (`m` message id, `i`
//! index, `n` count, `x` a slice of the base64 of the message). Every payload is sealed with
//! the notification key ([`super::keys`]): any database role can LISTEN and NOTIFY, none but
//! a gateway can read or forge the relay. A message is accepted once — its per-gateway
//! counter `q` must grow and its `ts` be within a minute — so a captured payload cannot be
//! replayed. A gateway ignores its own messages; a gateway silent for three heartbeats is
//! dead and its peers leave.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};
use syncular_protocol::realtime::PresenceKind;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::hub::Hub;
use super::keys::NotificationKeys;
use super::lock;
use super::presence::{deliver_local, PeerDoc, PeerId};
use super::session::now_ms;
use crate::db::realtime::notify;

/// The notification channel of the relay.
pub const CHANNEL: &str = "syncular_presence";
/// Largest message sent whole (before sealing), bytes: its sealed payload stays under
/// Postgres' 8000-byte limit.
pub const MAX_PAYLOAD: usize = 5_900;
const PART_BYTES: usize = 5_600;
const MAX_PARTIALS: usize = 256;
/// How far a message's `ts` may be from this gateway's clock, milliseconds.
const FRESH_MS: i64 = 60_000;

struct Partial {
    parts: Vec<Option<String>>,
    started: Instant,
}

/// The relay's state.
pub struct Relay {
    gateway_id: String,
    tx: Mutex<Option<mpsc::Sender<String>>>,
    /// Other gateways: when last heard, and the highest message counter accepted.
    seen: Mutex<HashMap<String, (Instant, u64)>>,
    partials: Mutex<HashMap<(String, String), Partial>>,
    counter: AtomicU64,
}

impl Relay {
    /// A relay for `gateway_id` (not sending until [`Relay::start`]).
    pub fn new(gateway_id: String) -> Self {
        Relay {
            gateway_id,
            tx: Mutex::new(None),
            seen: Mutex::new(HashMap::new()),
            partials: Mutex::new(HashMap::new()),
            counter: AtomicU64::new(0),
        }
    }

    /// `body` + version, gateway, counter and timestamp, as JSON text.
    fn stamp(&self, body: &Value) -> String {
        let mut msg = body.clone();
        msg["v"] = json!(1);
        msg["g"] = json!(self.gateway_id);
        msg["q"] = json!(self.counter.fetch_add(1, Ordering::SeqCst) + 1);
        msg["ts"] = json!(now_ms());
        msg.to_string()
    }

    /// Starts the sender (ordered `pg_notify`s) and the heartbeat/expiry loop.
    pub fn start(hub: &Arc<Hub>, heartbeat: Duration, stop: CancellationToken) {
        let (tx, mut rx) = mpsc::channel::<String>(4096);
        *lock(&hub.relay.tx) = Some(tx);
        let sender_hub = hub.clone();
        tokio::spawn(async move {
            while let Some(payload) = rx.recv().await {
                // Sealed when sent: the key is read on the LISTEN connections; none yet means
                // no other gateway can be heard either.
                let Some(keys) = sender_hub.notification_keys() else { continue };
                if let Err(e) = notify(&sender_hub.pool, CHANNEL, &keys.seal(CHANNEL, &payload)).await {
                    tracing::warn!(code = e.code_str(), "presence relay: pg_notify failed");
                }
            }
        });
        let hub = hub.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(heartbeat);
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = stop.cancelled() => return,
                }
                if hub.is_listening() {
                    hub.relay.send(&json!({"t": "hb"}));
                }
                hub.relay.expire(&hub, heartbeat * 3);
            }
        });
    }

    fn send(&self, body: &Value) {
        let text = self.stamp(body);
        let Some(tx) = lock(&self.tx).clone() else { return };
        for payload in split(&self.gateway_id, &text) {
            if tx.try_send(payload).is_err() {
                tracing::warn!("presence relay queue full: message dropped");
                return;
            }
        }
    }

    /// Relays a local publish.
    pub fn publish(&self, partition: &str, key: &str, session: &str, peer: &PeerDoc) {
        self.send(&json!({"t": "pub", "p": partition, "k": key, "s": session, "a": peer.actor_id, "c": peer.client_id, "d": peer.doc}));
    }

    /// Relays a local leave.
    pub fn leave(&self, partition: &str, key: &str, session: &str, peer: &PeerDoc) {
        self.send(&json!({"t": "leave", "p": partition, "k": key, "s": session, "a": peer.actor_id, "c": peer.client_id}));
    }

    /// After (re)connecting the LISTEN connection: forget what other gateways told us (their
    /// peers leave locally), ask them to re-announce, and re-announce ours (they may have
    /// expired us while we were deaf).
    pub fn connected(&self, hub: &Hub) {
        drop_gateways(hub, |g| g != self.gateway_id);
        lock(&self.seen).clear();
        self.send(&json!({"t": "hello"}));
        self.announce(hub);
    }

    fn announce(&self, hub: &Hub) {
        for (partition, key, peer, doc) in hub.presence.docs_of_gateway(&self.gateway_id) {
            self.publish(&partition, &key, &peer.session, &doc);
        }
    }

    /// Graceful shutdown: tell the others our peers are gone (sent directly, awaited).
    pub async fn bye(&self, hub: &Hub) {
        let Some(keys) = hub.notification_keys() else { return };
        let text = keys.seal(CHANNEL, &self.stamp(&json!({"t": "bye"})));
        if let Err(e) = notify(&hub.pool, CHANNEL, &text).await {
            tracing::warn!(code = e.code_str(), "presence relay: bye failed");
        }
    }

    fn expire(&self, hub: &Hub, after: Duration) {
        let dead: Vec<String> = lock(&self.seen).extract_if(|_, (t, _)| t.elapsed() > after).map(|(g, _)| g).collect();
        for g in dead {
            tracing::info!(gateway = %g, "presence relay: gateway silent, dropping its peers");
            drop_gateways(hub, |other| other == g);
        }
        lock(&self.partials).retain(|_, p| p.started.elapsed() < Duration::from_secs(30));
    }

    /// Handles one `syncular_presence` notification: opened with the notification key;
    /// anything else (unsealed, forged, another install's) is dropped and counted.
    pub fn handle(&self, hub: &Arc<Hub>, keys: &NotificationKeys, payload: &str) {
        let opened = keys.open(CHANNEL, payload);
        let Some(text) = opened else {
            hub.metrics.notification_rejected(CHANNEL);
            tracing::debug!("presence relay: dropping a payload that is not sealed with the notification key");
            return;
        };
        self.handle_opened(hub, &text);
    }

    fn handle_opened(&self, hub: &Arc<Hub>, text: &str) {
        let Ok(Value::Object(msg)) = serde_json::from_str::<Value>(text) else {
            tracing::debug!("presence relay: ignoring a malformed message");
            return;
        };
        let Some(g) = msg.get("g").and_then(Value::as_str) else { return };
        if g == self.gateway_id {
            return;
        }
        let s = |k: &str| msg.get(k).and_then(Value::as_str).map(str::to_owned);
        let t = s("t").unwrap_or_default();
        if t != "part" {
            // Whole messages are accepted once, in order, while fresh (no replay).
            let q = msg.get("q").and_then(Value::as_u64).unwrap_or(0);
            let ts = msg.get("ts").and_then(Value::as_i64).unwrap_or(0);
            let mut seen = lock(&self.seen);
            let last = seen.get(g).map_or(0, |(_, q)| *q);
            if q <= last || (ts - now_ms()).abs() > FRESH_MS {
                tracing::debug!(gateway = %g, "presence relay: dropping a stale or replayed message");
                return;
            }
            seen.insert(g.to_owned(), (Instant::now(), q));
        }
        match t.as_str() {
            "bye" => {
                lock(&self.seen).remove(g);
                drop_gateways(hub, |other| other == g);
            }
            "pub" | "leave" => {
                let (Some(p), Some(k), Some(sess), Some(a), Some(c)) = (s("p"), s("k"), s("s"), s("a"), s("c")) else { return };
                let peer = PeerId { gateway: g.to_owned(), session: sess };
                if t == "pub" {
                    let Some(Value::Object(doc)) = msg.get("d").cloned() else { return };
                    let doc = PeerDoc { actor_id: a, client_id: c, doc };
                    if hub.presence.get(&p, &k, &peer).as_ref() == Some(&doc) {
                        return; // a re-announce of what we hold
                    }
                    let kind = hub.presence.set(&p, &k, &peer, doc.clone());
                    deliver_local(hub, &p, &k, None, kind, &doc);
                } else if let Some(doc) = hub.presence.clear(&p, &k, &peer) {
                    deliver_local(hub, &p, &k, None, PresenceKind::Leave, &doc);
                }
            }
            "hello" => self.announce(hub),
            "part" => {
                let (Some(m), Some(x)) = (s("m"), s("x")) else { return };
                let (Some(i), Some(n)) = (msg.get("i").and_then(Value::as_u64), msg.get("n").and_then(Value::as_u64)) else { return };
                let whole = self.assemble(g, m, i as usize, n as usize, x).and_then(|whole| STANDARD.decode(whole).ok());
                if let Some(text) = whole.and_then(|bytes| String::from_utf8(bytes).ok()) {
                    self.handle_opened(hub, &text);
                }
            }
            _ => {}
        }
    }

    fn assemble(&self, g: &str, m: String, i: usize, n: usize, x: String) -> Option<String> {
        if n == 0 || n > 64 || i >= n {
            return None;
        }
        let key = (g.to_owned(), m);
        let mut partials = lock(&self.partials);
        if partials.len() >= MAX_PARTIALS && !partials.contains_key(&key) {
            return None;
        }
        let entry = partials.entry(key.clone()).or_insert_with(|| Partial { parts: vec![None; n], started: Instant::now() });
        if entry.parts.len() != n {
            return None;
        }
        entry.parts[i] = Some(x);
        if !entry.parts.iter().all(Option::is_some) {
            return None;
        }
        Some(partials.remove(&key)?.parts.into_iter().flatten().collect())
    }
}

/// Removes the peers of the gateways matching `pred`; their leaves reach the local sessions.
fn drop_gateways(hub: &Hub, pred: impl Fn(&str) -> bool) {
    for (partition, key, doc) in hub.presence.remove_gateways(pred) {
        deliver_local(hub, &partition, &key, None, PresenceKind::Leave, &doc);
    }
}

/// The payloads carrying `text`: itself when ≤ [`MAX_PAYLOAD`] bytes, else `part`s.
pub fn split(gateway_id: &str, text: &str) -> Vec<String> {
    if text.len() <= MAX_PAYLOAD {
        return vec![text.to_owned()];
    }
    let encoded = STANDARD.encode(text.as_bytes());
    let id = uuid::Uuid::new_v4().to_string();
    let pieces: Vec<&str> = encoded.as_bytes().chunks(PART_BYTES).map(|c| std::str::from_utf8(c).unwrap_or("")).collect();
    let n = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, x)| json!({"v": 1, "g": gateway_id, "t": "part", "m": id, "i": i, "n": n, "x": x}).to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_messages_go_whole_and_big_ones_in_parts_that_reassemble() {
        assert_eq!(split("g", "{\"t\":\"hb\"}"), vec!["{\"t\":\"hb\"}".to_string()]);
        let big = json!({"t": "pub", "d": {"text": "é\"x".repeat(5000)}}).to_string();
        let parts = split("g1", &big);
        assert!(parts.len() > 1);
        assert!(parts.iter().all(|p| p.len() <= MAX_PAYLOAD));
        let keys = super::super::keys::NotificationKeys::new(vec![1; 32]);
        assert!(parts.iter().all(|p| keys.seal(CHANNEL, p).len() <= 7999), "sealed parts fit a NOTIFY");
        let relay = Relay::new("g2".into());
        let mut whole = None;
        // Reverse order: reassembly does not depend on arrival order.
        for p in parts.iter().rev() {
            let v: Value = serde_json::from_str(p).unwrap();
            let got = relay.assemble(
                "g1",
                v["m"].as_str().unwrap().into(),
                v["i"].as_u64().unwrap() as usize,
                v["n"].as_u64().unwrap() as usize,
                v["x"].as_str().unwrap().into(),
            );
            if got.is_some() {
                whole = got;
            }
        }
        let decoded = String::from_utf8(STANDARD.decode(whole.unwrap()).unwrap()).unwrap();
        assert_eq!(decoded, big);
        assert!(relay.partials.lock().unwrap().is_empty());
    }

    #[test]
    fn bad_part_indices_are_ignored() {
        let relay = Relay::new("g".into());
        assert!(relay.assemble("x", "m".into(), 3, 2, "a".into()).is_none());
        assert!(relay.assemble("x", "m".into(), 0, 0, "a".into()).is_none());
        assert!(relay.assemble("x", "m".into(), 0, 1000, "a".into()).is_none());
    }
}
