//! Per-partition delta delivery (§8.2, §8.3; contract §3 and §5).
//!
//! Each partition with sessions has one worker task that processes its events strictly in
//! arrival order: host refreshes (`syncular_scopes`, LISTEN recovery) run before the commits
//! that follow them, and every burst of commit notifications coalesces into ONE
//! `syncular.realtime_deltas` call for all the partition's sessions, grouped by identical
//! (registrations, schemaVersion, logEpoch, wireVersion, cursor, suppressed). Results go
//! out as `0x00` deltas or wake-ups; a session whose registrations changed or that started a
//! round while the call ran is not served the computed result: it keeps its cursor and is
//! recomputed by the next pass (contiguity holds: every window starts at the session's
//! delivered cursor). A failed call is retried when transient; otherwise every session behind
//! the partition's known max is woken (`catchup-required`) so its client pulls.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use syncular_protocol::realtime::WakeReason;
use tokio::sync::Notify;

use super::hub::{Hub, RefreshMode};
use super::session::Session;
use crate::db::realtime::realtime_deltas;

/// An event for a partition worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// New commits were notified (or a session needs catching up).
    Commits,
    /// Host refresh for one actor (`Some`) or every actor (`None`).
    Scopes(Option<String>),
    /// The LISTEN connection (re)connected: refresh every session, then a pass.
    Resync,
}

#[derive(Debug, Default)]
struct Pending {
    commits: bool,
    resync: bool,
    scopes_all: bool,
    scopes_actors: HashSet<String>,
}

/// A partition with sessions on this gateway.
pub struct Partition {
    /// Partition name.
    pub name: String,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    pending: Mutex<Pending>,
    signal: Notify,
    known_max: AtomicI64,
    stopped: AtomicBool,
}

impl Partition {
    /// Creates the partition and spawns its worker.
    pub fn spawn(hub: Arc<Hub>, name: String) -> Arc<Self> {
        let p = Arc::new(Partition {
            name,
            sessions: Mutex::new(HashMap::new()),
            pending: Mutex::new(Pending::default()),
            signal: Notify::new(),
            known_max: AtomicI64::new(0),
            stopped: AtomicBool::new(false),
        });
        tokio::spawn(run_worker(hub, p.clone()));
        p
    }

    /// Adds a session.
    pub fn insert(&self, s: Arc<Session>) {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(s.id, s);
    }

    /// Removes a session; true when it was present.
    pub fn remove(&self, id: u64) -> bool {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(&id).is_some()
    }

    /// No session left.
    pub fn is_empty(&self) -> bool {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// A snapshot of the sessions.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Highest commitSeq seen (notifications and deltas calls).
    pub fn known_max(&self) -> i64 {
        self.known_max.load(Ordering::SeqCst)
    }

    /// Raises the known max.
    pub fn observe(&self, seq: i64) {
        self.known_max.fetch_max(seq, Ordering::SeqCst);
    }

    /// Queues work and wakes the worker.
    pub fn schedule(&self, work: Work) {
        {
            let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            match work {
                Work::Commits => p.commits = true,
                Work::Resync => p.resync = true,
                Work::Scopes(None) => p.scopes_all = true,
                Work::Scopes(Some(a)) => {
                    if !p.scopes_all {
                        p.scopes_actors.insert(a);
                    }
                }
            }
        }
        self.signal.notify_one();
    }

    /// Stops the worker (the partition has no session left).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.signal.notify_one();
    }

    fn take(&self) -> Pending {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

async fn run_worker(hub: Arc<Hub>, p: Arc<Partition>) {
    loop {
        p.signal.notified().await;
        if p.stopped.load(Ordering::SeqCst) {
            return;
        }
        let work = p.take();
        let refresh_all = work.resync || work.scopes_all;
        if refresh_all || !work.scopes_actors.is_empty() {
            let targets: Vec<_> = p
                .sessions()
                .into_iter()
                .filter(|s| refresh_all || work.scopes_actors.contains(&s.actor_id))
                .collect();
            refresh_many(&hub, &targets).await;
        }
        if work.commits || work.resync || refresh_all || !work.scopes_actors.is_empty() {
            pass(&hub, &p).await;
        }
    }
}

/// Host-refreshes sessions, 8 at a time.
async fn refresh_many(hub: &Arc<Hub>, sessions: &[Arc<Session>]) {
    for batch in sessions.chunks(8) {
        let futures = batch.iter().map(|s| hub.refresh(s, RefreshMode::Host));
        futures_util::future::join_all(futures).await;
    }
}

/// What a group member looked like when the call was prepared.
struct Member {
    session: Arc<Session>,
    generation: u64,
    rounds_started: u64,
}

/// One delta pass: one `syncular.realtime_deltas` call for every session of the partition.
pub async fn pass(hub: &Arc<Hub>, p: &Arc<Partition>) {
    let mut groups: Vec<Value> = Vec::new();
    let mut members: Vec<Vec<Member>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for session in p.sessions() {
        if session.is_closing() {
            continue;
        }
        let (group, generation, rounds_started) = {
            let st = session.state();
            (
                json!({
                    "registrations": st.registrations,
                    "schemaVersion": st.schema_version,
                    "logEpoch": st.log_epoch,
                    "wireVersion": st.wire_version,
                    "cursor": st.delivered,
                    "suppressed": st.suppressed || st.round_in_flight,
                }),
                st.generation,
                st.rounds_started,
            )
        };
        let key = group.to_string();
        let i = *index.entry(key).or_insert_with(|| {
            groups.push(group);
            members.push(Vec::new());
            groups.len() - 1
        });
        members[i].push(Member { session, generation, rounds_started });
    }
    if groups.is_empty() {
        return;
    }
    let started = Instant::now();
    hub.metrics.delta_calls.inc();
    let rows = realtime_deltas(&hub.pool, &p.name, &Value::Array(groups), hub.settings.max_delta_bytes).await;
    hub.metrics.delta_call_seconds.observe(started.elapsed().as_secs_f64());
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            hub.metrics.error(e.code_str());
            tracing::error!(partition_len = p.name.len(), code = e.code_str(), message = ?e.body.get("message"), "realtime_deltas failed");
            if e.transient {
                // Try again shortly (the cursors did not move: nothing is lost).
                let p = p.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    p.schedule(Work::Commits);
                });
            } else {
                // Fail safe, never silent: the clients pull what could not be computed.
                let through = p.known_max();
                for m in members.iter().flatten() {
                    let mut st = m.session.state();
                    if st.delivered < through {
                        st.delivered = through;
                        m.session.wake(&mut st, WakeReason::CatchupRequired, through);
                    }
                }
            }
            return;
        }
    };
    let mut rerun = false;
    for row in rows {
        p.observe(row.cursor);
        let Some(group) = members.get(row.group_index) else { continue };
        for m in group {
            let mut st = m.session.state();
            if st.generation != m.generation || st.rounds_started != m.rounds_started {
                // Registrations changed or a round started while the call ran: recompute
                // from the unchanged cursor in the next pass.
                rerun = true;
                continue;
            }
            st.delivered = st.delivered.max(row.cursor);
            match row.kind.as_str() {
                "none" => {}
                "delta" => match &row.delta {
                    Some(delta) => m.session.send_delta(&mut st, delta, row.cursor),
                    None => m.session.wake(&mut st, WakeReason::CatchupRequired, row.cursor),
                },
                other => {
                    let reason = WakeReason::parse(other).unwrap_or(WakeReason::CatchupRequired);
                    m.session.wake(&mut st, reason, row.cursor);
                }
            }
        }
    }
    if rerun {
        p.schedule(Work::Commits);
    }
}
