//! The realtime hub: every session of this gateway, grouped by partition, and the operations
//! that touch several of them — admission caps, acks, registration refresh (a scopes change
//! while a session opens, §8.7 round end, host `syncular_scopes`, LISTEN recovery) with its
//! generation guard, notification dispatch to the partition workers ([`super::deltas`]),
//! shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;

use super::acks::AckBuffer;
use super::deltas::{Partition, ScopesEpoch, Work};
use super::keys::NotificationKeys;
use super::limits::{CapSlot, SessionCaps};
use super::lock;
use super::presence::PresenceRegistry;
use super::relay::Relay;
use super::session::{close_code, Session};
use crate::db::session::{reload, Reason};
use crate::db::ApiError;
use crate::metrics::Metrics;

/// Limits and intervals of the realtime hub.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// `--max-delta-bytes`.
    pub max_delta_bytes: i32,
    /// `--max-sessions`.
    pub max_sessions: usize,
    /// `--max-sessions-per-client`.
    pub max_sessions_per_client: usize,
    /// `--session-queue`.
    pub session_queue: usize,
    /// `--max-body-bytes` (socket round request limit).
    pub max_body_bytes: usize,
    /// `--heartbeat-secs`.
    pub heartbeat: Duration,
    /// `--idle-timeout-secs`.
    pub idle_timeout: Duration,
    /// `--presence-max-bytes`.
    pub presence_max_bytes: usize,
    /// `--presence-min-interval-ms` (zero = off).
    pub presence_min_interval: Duration,
    /// `--ws-max-message-bytes`.
    pub ws_max_message_bytes: usize,
    /// `--write-timeout-secs`, `--round-buffer-bytes`, `--max-sessions-per-actor`.
    pub limits: super::limits::Limits,
    /// How many LISTEN connections feed the hub (`--notify-database-url`s, else 1), at least 1.
    pub listen_nodes: usize,
}

/// The hub.
pub struct Hub {
    /// Connection pool (deltas, opens, acks, rounds).
    pub pool: Pool,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Settings.
    pub settings: HubSettings,
    /// This gateway's id (presence relay).
    pub gateway_id: String,
    partitions: Mutex<HashMap<String, Arc<Partition>>>,
    caps: Arc<SessionCaps>,
    next_id: AtomicU64,
    /// Socket rounds in flight (a shutdown lets them finish first).
    pub rounds_in_flight: AtomicUsize,
    /// Per LISTEN connection (node index): up.
    listen_up: Vec<AtomicBool>,
    shutting_down: AtomicBool,
    /// The extension's notification key (read on every LISTEN connection at each connect; every
    /// node answers the same key).
    notification_keys: Mutex<Option<Arc<NotificationKeys>>>,
    /// Cancelled at shutdown (parent of every session token).
    pub shutdown: CancellationToken,
    /// Buffered acks (flushed by [`AckBuffer::run`]).
    pub acks: AckBuffer,
    /// §8.6 presence registry (local and relayed peers).
    pub presence: PresenceRegistry,
    /// Cross-gateway presence relay.
    pub relay: Relay,
}

/// A reserved session: its place under the session caps, given back when the slot is
/// dropped (the session holds it until it ends), and the partition it joins — created (or
/// held) from the reservation on, so the commits notified while the session is being opened
/// are recorded by its worker.
pub struct Slot {
    hub: Arc<Hub>,
    partition: Arc<Partition>,
    actor_id: String,
    /// The partition's scopes epoch for the actor before the registrations were resolved
    /// (read at the reservation, so before `realtime_connect`; again before each reload).
    epoch: ScopesEpoch,
    joined: bool,
    _caps: CapSlot,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.joined {
            // A reservation ended without a session: the partition goes when nothing holds it.
            let mut map = lock(&self.hub.partitions);
            self.partition.joining.fetch_sub(1, Ordering::SeqCst);
            forget_if_unused(&mut map, &self.partition);
        }
    }
}

impl Hub {
    /// Creates the hub.
    pub fn new(pool: Pool, metrics: Arc<Metrics>, settings: HubSettings, gateway_id: String, shutdown: CancellationToken) -> Arc<Self> {
        let listen_up = (0..settings.listen_nodes.max(1)).map(|_| AtomicBool::new(false)).collect::<Vec<_>>();
        for node in 0..listen_up.len() {
            metrics.listen_up(node, false);
        }
        let caps = SessionCaps::new(settings.max_sessions_per_client, settings.max_sessions, settings.limits.max_sessions_per_actor);
        Arc::new(Hub {
            relay: Relay::new(gateway_id.clone()),
            pool,
            metrics,
            settings,
            gateway_id,
            partitions: Mutex::default(),
            caps,
            next_id: AtomicU64::new(1),
            rounds_in_flight: AtomicUsize::new(0),
            listen_up,
            shutting_down: AtomicBool::new(false),
            notification_keys: Mutex::new(None),
            shutdown,
            acks: AckBuffer::default(),
            presence: PresenceRegistry::default(),
        })
    }

    /// Reserves a session slot for (partition, actor, clientId).
    ///
    /// Errors: `syncular.unavailable` (503) while shutting down;
    /// `sync.websocket_connection_limit` (429) over a session cap ([`SessionCaps`]).
    pub fn reserve(self: &Arc<Self>, partition: &str, actor_id: &str, client_id: &str) -> Result<Slot, ApiError> {
        if self.is_shutting_down() {
            return Err(ApiError::unavailable("the gateway is shutting down"));
        }
        let caps = self.caps.reserve(partition, actor_id, client_id)?;
        let partition = {
            let mut map = lock(&self.partitions);
            let p = map.entry(partition.to_owned()).or_insert_with(|| Partition::spawn(self.clone(), partition.to_owned())).clone();
            p.joining.fetch_add(1, Ordering::SeqCst);
            p
        };
        let epoch = partition.scopes_epoch(actor_id);
        Ok(Slot { hub: self.clone(), partition, actor_id: actor_id.to_owned(), epoch, joined: false, _caps: caps })
    }

    /// A fresh gateway-local session id.
    pub fn next_session_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sessions currently holding a slot.
    pub fn session_count(&self) -> usize {
        self.caps.total()
    }

    /// The notification key material, once a LISTEN connection read it.
    pub fn notification_keys(&self) -> Option<Arc<NotificationKeys>> {
        lock(&self.notification_keys).clone()
    }

    /// Installs the key `syncular.notification_key()` answered on a LISTEN connection. Returns
    /// false when another key was installed before (the nodes disagree: a misconfiguration —
    /// the newest key wins, so payloads signed with the other one will be rejected).
    pub fn set_notification_key(&self, keys: Arc<NotificationKeys>) -> bool {
        let mut slot = lock(&self.notification_keys);
        let same = slot.as_ref().is_none_or(|k| k.hmac_key == keys.hmac_key);
        *slot = Some(keys);
        same
    }

    /// Registers a session whose registrations were resolved after its partition's scopes
    /// epoch was the slot's, at the partition's `latest` cursor (the answer's `latestCursor`).
    /// When a host refresh of that partition or a LISTEN reconnect bumped the epoch since, the
    /// session could hold registrations a refresh has already revoked on the others: nothing
    /// is registered (`false`) and the slot takes the new epoch, so the caller reloads (or, for
    /// scopes frozen in a credential, closes) and tries again. The check and the insert hold
    /// the partitions lock that [`Hub::scopes_changed`] bumps the epoch under, so a refresh
    /// either finds the session or makes it reload.
    pub fn add(&self, session: &Arc<Session>, slot: &mut Slot, latest: i64) -> bool {
        let p = slot.partition.clone();
        p.restart_timeline(&session.state().log_epoch.clone(), latest);
        {
            let _map = lock(&self.partitions);
            let epoch = p.scopes_epoch(&slot.actor_id);
            if epoch != slot.epoch {
                slot.epoch = epoch;
                return false;
            }
            p.insert(session.clone());
            p.joining.fetch_sub(1, Ordering::SeqCst);
            slot.joined = true;
        }
        self.metrics.sessions_open.inc();
        if self.is_shutting_down() {
            // Upgraded while the shutdown began: it gets the same 1001 as the others.
            session.close(close_code::GOING_AWAY, "gateway shutting down");
        }
        // A session added after a burst was served is caught up by a pass (capped at what
        // was already notified and handled, like every pass).
        if p.through() > latest {
            p.schedule(Work::Pass);
        }
        true
    }

    /// Unregisters a session (after its slot was given back): presence leaves (§8.6.1).
    pub fn remove(self: &Arc<Self>, session: &Arc<Session>) {
        let removed = {
            let mut map = lock(&self.partitions);
            map.get(&session.partition).cloned().is_some_and(|p| {
                let removed = p.remove(session.id);
                forget_if_unused(&mut map, &p);
                removed
            })
        };
        if removed {
            self.metrics.sessions_open.dec();
            super::presence::drop_all(self, session);
        }
    }

    /// The partition's live state, if it has sessions.
    pub fn partition(&self, name: &str) -> Option<Arc<Partition>> {
        lock(&self.partitions).get(name).cloned()
    }

    /// §8.2 ack: in-memory MAX and the session's resume rule
    /// ([`SessionState::ack`](super::session::SessionState::ack)), the
    /// write buffered (flushed in batches). Negative cursors are ignored.
    pub fn ack(&self, session: &Session, cursor: i64) {
        self.metrics.acks_received.inc();
        if cursor < 0 {
            return;
        }
        let epoch = {
            let mut st = session.state();
            st.ack(cursor);
            st.log_epoch.clone()
        };
        self.acks.add(&session.partition, &session.client_id, &session.actor_id, cursor, &epoch);
    }

    /// Reloads a session's registrations through `syncular.realtime_reload` (the session
    /// rules), ticket-guarded: the result of an older reload never overwrites a newer one. The
    /// answer's state is kept when it changed — a round end's at the round's `END`
    /// ([`SessionState::finish_round`](super::session::SessionState::finish_round)) — its
    /// messages sent, its scope keys swapped at once (presence follows, §8.6.3: a key the
    /// round granted is usable as soon as the client has `END`; a session still joining gets
    /// its presence snapshot once joined). A round end whose reload fails keeps the previous
    /// state; a connect or host reload that raises ends the session (fail-closed), and so
    /// does one of a session whose scopes came from its credential. Returns the
    /// `latestCursor` the reload read (before resolving scopes) when it succeeded.
    pub async fn refresh(self: &Arc<Self>, session: &Arc<Session>, reason: Reason) -> Option<i64> {
        let (label, round_end) = (reason.as_str(), matches!(reason, Reason::RoundEnd(_)));
        if !round_end && session.allowed_scopes.is_some() {
            // Its allowed scopes came from the credential (a token claim), frozen at the
            // upgrade: re-resolving against them could not reflect the host's change.
            // Fail closed: the client reconnects with a fresh credential.
            self.metrics.refresh(label, "closed");
            session.close(close_code::POLICY, "sync.auth_required: scopes changed; reconnect with a fresh credential");
            return None;
        }
        let (ticket, state) = {
            let mut st = session.state();
            st.refresh_issued += 1;
            (st.refresh_issued, st.state.clone())
        };
        let ids = (session.partition.as_str(), session.actor_id.as_str(), session.client_id.as_str());
        let result = reload(&self.pool, ids, session.allowed_scopes.as_ref(), &state, reason).await;
        let latest = result.as_ref().ok().map(|a| a.answer.latest_cursor);
        if let (Ok(a), Some(p)) = (&result, self.partition(&session.partition)) {
            p.restart_timeline(&a.answer.log_epoch, a.answer.latest_cursor);
        }
        let mut st = session.state();
        if ticket <= st.refresh_applied {
            self.metrics.refresh(label, "stale");
            return latest;
        }
        st.refresh_applied = ticket;
        match result {
            Ok(a) => {
                self.metrics.refresh(label, if a.answer.emptied { "emptied" } else { "applied" });
                if round_end && st.round_in_flight {
                    // Kept at the round's END (SessionState::finish_round), changed or not:
                    // passes during the round may have woken the session since, and the
                    // answer is what the client holds after the round.
                    st.round_end = Some((a.state, a.resume, a.answer.log_epoch));
                } else if a.answer.changed {
                    st.generation += 1;
                    st.adopt_reloaded(a.state, a.resume, a.answer.log_epoch);
                }
                session.send_wakes(a.answer.send);
                st.scope_keys = a.answer.scope_keys.into_iter().collect();
                drop(st);
                if reason != Reason::Connect {
                    super::presence::reconcile(self, session);
                }
            }
            Err(e) if round_end => {
                self.metrics.refresh(label, "kept");
                tracing::debug!(session = session.id, code = e.code_str(), "round-end reload failed: state kept");
            }
            Err(e) => {
                self.metrics.refresh(label, "closed");
                tracing::warn!(session = session.id, code = e.code_str(), "{label} reload failed: closing the session (fail-closed)");
                session.close(close_code::INTERNAL, "registration reload failed");
            }
        }
        latest
    }

    /// Marks the sessions of `actor` (every actor when `None`) in `partition` stale (a deltas
    /// call in flight for them is discarded) and queues their host refresh, after the commits
    /// notified before it. Bumps the partition's scopes epoch so a session being opened there
    /// reloads.
    pub fn scopes_changed(&self, partition: &str, actor: Option<String>) {
        let p = lock(&self.partitions).get(partition).inspect(|p| p.bump_scopes_epoch(actor.as_deref())).cloned();
        let Some(p) = p else { return };
        for s in p.sessions(actor.as_deref()) {
            s.state().generation += 1;
        }
        p.schedule(Work::Scopes(actor));
    }

    /// Records whether LISTEN connection `node` is up (`/healthz` answers 503 while one is
    /// down). Once it is up again — whichever node: notifications it carries may have been
    /// lost meanwhile — every partition refreshes every session (fail-closed) and runs a delta
    /// pass (cursor-based: nothing lost, nothing duplicated), and sessions being opened reload
    /// (the scopes epoch is bumped).
    pub fn set_listening(&self, node: usize, up: bool) {
        if let Some(flag) = self.listen_up.get(node) {
            flag.store(up, Ordering::SeqCst);
            self.metrics.listen_up(node, up);
        }
        if up {
            let partitions: Vec<_> = lock(&self.partitions).values().inspect(|p| p.bump_scopes_epoch(None)).cloned().collect();
            for p in partitions {
                p.schedule(Work::Resync);
            }
        }
    }

    /// The indexes of the LISTEN connections that are down.
    pub fn listen_down(&self) -> Vec<usize> {
        self.listen_up.iter().enumerate().filter(|(_, up)| !up.load(Ordering::SeqCst)).map(|(i, _)| i).collect()
    }

    /// Every LISTEN connection is up (a node not heard means commits not heard).
    pub fn is_listening(&self) -> bool {
        self.listen_down().is_empty()
    }

    /// At least one LISTEN connection is up (the notification key is known).
    pub fn is_listening_somewhere(&self) -> bool {
        self.listen_down().len() < self.listen_up.len()
    }

    /// True once shutdown began.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Graceful shutdown of the realtime side: refuse new sessions, let in-flight rounds
    /// finish (up to `grace`), close every socket with 1001, wait for the sessions to end.
    pub async fn shutdown_sessions(&self, grace: Duration) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + grace;
        while self.rounds_in_flight.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                tracing::warn!("shutdown: rounds still in flight after the grace period");
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let partitions: Vec<_> = lock(&self.partitions).values().cloned().collect();
        for s in partitions.iter().flat_map(|p| p.sessions(None)) {
            s.close(close_code::GOING_AWAY, "gateway shutting down");
        }
        let until = Instant::now() + Duration::from_secs(3);
        while self.session_count() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.shutdown.cancel();
    }
}

/// Removes `p` from the partition map (and stops its worker) once it has neither sessions nor
/// reservations; the caller holds the map lock.
fn forget_if_unused(map: &mut HashMap<String, Arc<Partition>>, p: &Arc<Partition>) {
    if p.is_empty() && p.joining.load(Ordering::SeqCst) == 0 && map.get(&p.name).is_some_and(|q| Arc::ptr_eq(q, p)) {
        map.remove(&p.name);
        p.stop();
    }
}
