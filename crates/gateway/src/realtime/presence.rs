//! §8.6 presence: the in-memory registry `(partition, scopeKey) → peer → document` (local
//! sessions and peers relayed from other gateways alike) and the session operations —
//! publish (authorized against the session's scope keys, size cap, optional latest-wins rate
//! cap), leave, snapshot join-burst on connect and on gained keys, leaves on lost keys and
//! on disconnect. A publisher never receives its own fanout; a peer's presence reaches only
//! sessions registered on the key (the privacy floor, §8.6.3). Never persisted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use syncular_protocol::realtime::{ControlMessage, PresenceError, PresenceKind};

use super::hub::Hub;
use super::lock;
use super::session::{now_ms, Session};

/// A presence peer: the gateway holding its connection and that connection's session id.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct PeerId {
    /// Gateway id.
    pub gateway: String,
    /// The session's `sessionId`.
    pub session: String,
}

/// A peer's identity (§8.6.3: actor + client) and document.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerDoc {
    /// The peer's actor.
    pub actor_id: String,
    /// The peer's client.
    pub client_id: String,
    /// The published document (a JSON object).
    pub doc: Map<String, Value>,
}

/// The presence registry (pure in-memory state): `(partition, scopeKey) → peer → document`,
/// peers in order.
#[derive(Debug, Default)]
pub struct PresenceRegistry {
    by_key: Mutex<HashMap<(String, String), BTreeMap<PeerId, PeerDoc>>>,
}

impl PresenceRegistry {
    /// Stores/replaces a peer's document: `Join` for its first document on the key, else
    /// `Update`.
    pub fn set(&self, partition: &str, key: &str, peer: &PeerId, doc: PeerDoc) -> PresenceKind {
        let mut by_key = lock(&self.by_key);
        match by_key.entry((partition.to_owned(), key.to_owned())).or_default().insert(peer.clone(), doc) {
            Some(_) => PresenceKind::Update,
            None => PresenceKind::Join,
        }
    }

    /// A peer's current document on a key.
    pub fn get(&self, partition: &str, key: &str, peer: &PeerId) -> Option<PeerDoc> {
        lock(&self.by_key).get(&(partition.to_owned(), key.to_owned())).and_then(|m| m.get(peer)).cloned()
    }

    /// Removes a peer's document for a key; the removed document, if any.
    pub fn clear(&self, partition: &str, key: &str, peer: &PeerId) -> Option<PeerDoc> {
        let mut by_key = lock(&self.by_key);
        let k = (partition.to_owned(), key.to_owned());
        let peers = by_key.get_mut(&k)?;
        let removed = peers.remove(peer);
        if peers.is_empty() {
            by_key.remove(&k);
        }
        removed
    }

    /// The keys (of `partition`) a peer holds a document on, sorted.
    pub fn keys_of(&self, partition: &str, peer: &PeerId) -> Vec<String> {
        let by_key = lock(&self.by_key);
        let mut keys: Vec<String> =
            by_key.iter().filter(|((p, _), peers)| p == partition && peers.contains_key(peer)).map(|((_, k), _)| k.clone()).collect();
        keys.sort();
        keys
    }

    /// Every document on a key except `exclude`'s (the §8.6.4 snapshot), ordered by peer.
    pub fn snapshot(&self, partition: &str, key: &str, exclude: &PeerId) -> Vec<PeerDoc> {
        let by_key = lock(&self.by_key);
        let peers = by_key.get(&(partition.to_owned(), key.to_owned())).into_iter().flatten();
        peers.filter(|(p, _)| *p != exclude).map(|(_, d)| d.clone()).collect()
    }

    /// Removes every peer of gateways matching `pred`; returns `(partition, key, doc)` of each
    /// removed document (for the leaves), sorted by partition and key.
    pub fn remove_gateways(&self, pred: impl Fn(&str) -> bool) -> Vec<(String, String, PeerDoc)> {
        let mut by_key = lock(&self.by_key);
        let mut out = Vec::new();
        for ((partition, key), peers) in by_key.iter_mut() {
            let gone: Vec<PeerId> = peers.keys().filter(|p| pred(&p.gateway)).cloned().collect();
            out.extend(gone.iter().filter_map(|peer| peers.remove(peer)).map(|doc| (partition.clone(), key.clone(), doc)));
        }
        by_key.retain(|_, peers| !peers.is_empty());
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// Every document held by peers of `gateway`: `(partition, key, peer, doc)`.
    pub fn docs_of_gateway(&self, gateway: &str) -> Vec<(String, String, PeerId, PeerDoc)> {
        let mut out = Vec::new();
        for ((partition, key), peers) in lock(&self.by_key).iter() {
            for (peer, doc) in peers.iter().filter(|(peer, _)| peer.gateway == gateway) {
                out.push((partition.clone(), key.clone(), peer.clone(), doc.clone()));
            }
        }
        out
    }
}

/// The registry identity of a local session.
pub fn local_peer(hub: &Hub, session: &Session) -> PeerId {
    PeerId { gateway: hub.gateway_id.clone(), session: session.session_id.clone() }
}

fn fanout_msg(key: &str, kind: PresenceKind, peer: &PeerDoc) -> ControlMessage {
    ControlMessage::PresenceFanout {
        scope_key: key.to_owned(),
        kind,
        actor_id: peer.actor_id.clone(),
        client_id: peer.client_id.clone(),
        doc: (kind != PresenceKind::Leave).then(|| peer.doc.clone()),
        timestamp: now_ms(),
    }
}

/// Delivers a fanout to every local session of `partition` registered on `key`, except
/// `exclude` (the publisher).
pub fn deliver_local(hub: &Hub, partition: &str, key: &str, exclude: Option<u64>, kind: PresenceKind, peer: &PeerDoc) {
    let Some(p) = hub.partition(partition) else { return };
    let msg = fanout_msg(key, kind, peer);
    let to: Vec<_> = p.sessions(None).into_iter().filter(|s| Some(s.id) != exclude && s.state().scope_keys.contains(key)).collect();
    for s in &to {
        s.send_control(&msg);
    }
    if !to.is_empty() {
        hub.metrics.presence(kind.as_str());
    }
}

/// Handles a client's publish (`doc = Some`) or leave (`None`) on `key` (§8.6.2–§8.6.4).
pub fn publish(hub: &Arc<Hub>, session: &Arc<Session>, key: String, doc: Option<Map<String, Value>>) {
    if !session.state().scope_keys.contains(&key) {
        reject(hub, session, key, PresenceError::Forbidden);
        return;
    }
    let Some(doc) = doc else {
        leave(hub, session, &key);
        return;
    };
    if Value::Object(doc.clone()).to_string().len() > hub.settings.presence_max_bytes {
        reject(hub, session, key, PresenceError::TooLarge);
        return;
    }
    // The §8.6.4 rate cap: within the interval after a fanout, the newest document waits for
    // its end (latest wins).
    let mut st = session.state();
    let rate = st.presence_rate.entry(key.clone()).or_default();
    let wait = rate.last_fanout.map_or(Duration::ZERO, |last| hub.settings.presence_min_interval.saturating_sub(last.elapsed()));
    if wait.is_zero() {
        // The window is over: this document goes out now, and supersedes one held for the
        // window's end whose flush has not run yet (a timer fires late) — it must not follow.
        rate.drop_held();
        drop(st);
        return fanout_publish(hub, session, &key, doc);
    }
    if rate.pending.replace(doc).is_some() {
        return; // its flush is scheduled already
    }
    let flush = session.closed.child_token();
    rate.flush = Some(flush.clone());
    drop(st);
    let (hub, session) = (hub.clone(), session.clone());
    tokio::spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = flush.cancelled() => return,
        }
        // Under the state lock, which a leave holds while it cancels: a cancelled flush takes
        // nothing (the key's entry may be a newer one, with its own flush).
        let pending = {
            let mut st = session.state();
            let pending = if flush.is_cancelled() { None } else { st.presence_rate.get_mut(&key).and_then(|rate| rate.pending.take()) };
            pending.filter(|_| st.scope_keys.contains(&key))
        };
        if let Some(doc) = pending {
            fanout_publish(&hub, &session, &key, doc);
        }
    });
}

fn reject(hub: &Hub, session: &Session, key: String, error: PresenceError) {
    hub.metrics.presence("rejected");
    session.send_control(&ControlMessage::PresenceRejected { scope_key: key, error, timestamp: now_ms() });
}

fn fanout_publish(hub: &Arc<Hub>, session: &Arc<Session>, key: &str, doc: Map<String, Value>) {
    let peer = PeerDoc { actor_id: session.actor_id.clone(), client_id: session.client_id.clone(), doc };
    let kind = hub.presence.set(&session.partition, key, &local_peer(hub, session), peer.clone());
    session.state().presence_rate.entry(key.to_owned()).or_default().last_fanout = Some(Instant::now());
    deliver_local(hub, &session.partition, key, Some(session.id), kind, &peer);
    hub.relay.publish(&session.partition, key, &session.session_id, &peer);
}

/// Clears the session's document on `key` and fans out a leave (when it had one).
pub fn leave(hub: &Arc<Hub>, session: &Arc<Session>, key: &str) {
    if let Some(mut rate) = session.state().presence_rate.remove(key) {
        rate.drop_held();
    }
    if let Some(peer) = hub.presence.clear(&session.partition, key, &local_peer(hub, session)) {
        deliver_local(hub, &session.partition, key, Some(session.id), PresenceKind::Leave, &peer);
        hub.relay.leave(&session.partition, key, &session.session_id, &peer);
    }
}

/// The §8.6.4 snapshot of `key` to this session only: one join per present peer.
pub fn snapshot(hub: &Hub, session: &Session, key: &str) {
    for peer in hub.presence.snapshot(&session.partition, key, &local_peer(hub, session)) {
        session.send_control(&fanout_msg(key, PresenceKind::Join, &peer));
    }
}

/// §8.6.3 once the session joined (a snapshot of every key it holds) and after a registration
/// change: leave the keys lost, snapshot the keys gained — from the keys presence was last
/// reconciled to, to the session's current ones. Serialized per session: reloads that overlap
/// (a round end and a host refresh) reconcile one at a time, each against the keys the session
/// holds then, so a late reconciliation never takes away a key a newer reload granted
/// (clearing the session's document there) nor snapshots a key it no longer holds.
pub fn reconcile(hub: &Arc<Hub>, session: &Arc<Session>) {
    let mut grant = lock(&session.presence_grant);
    let current = session.state().scope_keys.clone();
    for key in grant.difference(&current) {
        leave(hub, session, key);
    }
    for key in current.difference(&grant) {
        snapshot(hub, session, key);
    }
    *grant = current;
}

/// §8.6.1 disconnect ⇒ leave on every key the session was present on.
pub fn drop_all(hub: &Arc<Hub>, session: &Arc<Session>) {
    for key in hub.presence.keys_of(&session.partition, &local_peer(hub, session)) {
        leave(hub, session, &key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn peer(g: &str, s: &str) -> PeerId {
        PeerId { gateway: g.into(), session: s.into() }
    }

    fn doc(actor: &str, v: i64) -> PeerDoc {
        PeerDoc { actor_id: actor.into(), client_id: format!("{actor}-c"), doc: json!({"v": v}).as_object().unwrap().clone() }
    }

    #[test]
    fn join_update_leave_per_peer_and_key() {
        let r = PresenceRegistry::default();
        let a = peer("g1", "a");
        assert_eq!(r.set("p", "project:1", &a, doc("u1", 1)), PresenceKind::Join);
        assert_eq!(r.set("p", "project:1", &a, doc("u1", 2)), PresenceKind::Update);
        assert_eq!(r.set("p", "project:2", &a, doc("u1", 3)), PresenceKind::Join);
        // Same key in another partition is a different key.
        assert_eq!(r.set("q", "project:1", &a, doc("u1", 4)), PresenceKind::Join);
        assert_eq!(r.keys_of("p", &a), vec!["project:1", "project:2"]);
        assert_eq!(r.clear("p", "project:1", &a).unwrap().doc["v"], 2);
        assert!(r.clear("p", "project:1", &a).is_none());
        assert_eq!(r.keys_of("p", &a), vec!["project:2"]);
        assert_eq!(r.keys_of("q", &a), vec!["project:1"]);
    }

    #[test]
    fn snapshot_excludes_the_asker_and_is_scoped_to_the_key() {
        let r = PresenceRegistry::default();
        let (a, b, c) = (peer("g1", "a"), peer("g1", "b"), peer("g2", "c"));
        r.set("p", "k1", &a, doc("u1", 1));
        r.set("p", "k1", &b, doc("u2", 1));
        r.set("p", "k2", &c, doc("u3", 1));
        let snap = r.snapshot("p", "k1", &a);
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[0].actor_id, "u2");
        assert_eq!(r.snapshot("p", "k1", &c).len(), 2);
        assert!(r.snapshot("p", "k3", &a).is_empty());
        assert!(r.snapshot("other", "k1", &c).is_empty());
    }

    #[test]
    fn removing_a_gateway_returns_its_documents() {
        let r = PresenceRegistry::default();
        r.set("p", "k1", &peer("g1", "a"), doc("u1", 1));
        r.set("p", "k1", &peer("g2", "b"), doc("u2", 1));
        r.set("p", "k2", &peer("g2", "b"), doc("u2", 2));
        assert_eq!(r.docs_of_gateway("g2").len(), 2);
        let gone = r.remove_gateways(|g| g == "g2");
        assert_eq!(gone.iter().map(|(_, k, _)| k.as_str()).collect::<Vec<_>>(), vec!["k1", "k2"]);
        assert!(r.docs_of_gateway("g2").is_empty());
        assert_eq!(r.snapshot("p", "k1", &peer("x", "y")).len(), 1);
        assert!(r.keys_of("p", &peer("g2", "b")).is_empty());
    }
}
