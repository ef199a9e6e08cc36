//! Per-partition delta delivery (§8.2, §8.3; docs/src/sql/realtime.md "Session rules").
//!
//! Each partition with sessions has one worker task that handles its events strictly in the
//! order the LISTEN connections delivered them (Postgres delivers one connection's
//! `syncular_commit` and `syncular_scopes` in commit order; a partition's are notified on the
//! node its sync calls run on). Consecutive commit notifications coalesce into ONE
//! `syncular.realtime_pass` call with the distinct states of the partition's sessions (equal
//! states share one row and one encoded delta), capped at the highest `commitSeq` notified so
//! far (`through_seq`). A host refresh runs after the commits notified before it and is
//! followed by a pass, so a commit made after a membership change is never served under the
//! registrations that change revokes (fail-closed). After a LISTEN reconnect (notifications
//! were lost) every session is refreshed first and the cap is raised to the smallest
//! `latestCursor` those refreshes read (before resolving scopes). A new `logEpoch` restarts
//! the cap ([`Partition::restart_timeline`]). A pass returns once its deltas reached the
//! sockets (at most 50 ms), so the commits notified meanwhile coalesce into the next one.
//!
//! What each session gets and keeps is the rules' answer; a session whose state changed while
//! the call ran (a reload, an ack that resumed it, a round begun) is not served it: it is
//! recomputed by the next pass from its state. A failed call is retried when transient;
//! otherwise the partition's sessions are closed (their clients reconnect and pull).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::hub::Hub;
use super::lock;
use super::session::{close_code, wake_reason, Session};
use crate::db::session::{self as session_rules, Reason, StateText};

/// An event for a partition worker, handled in the order it was scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// A commit notification (`commitSeq`).
    Commit(i64),
    /// Run a pass up to what was already notified (a new session to catch up, a retry).
    Pass,
    /// Host refresh for one actor (`Some`) or every actor (`None`), then a pass.
    Scopes(Option<String>),
    /// The LISTEN connection (re)connected: refresh every session, then a pass.
    Resync,
}

/// A partition with sessions on this gateway.
pub struct Partition {
    /// Partition name.
    pub name: String,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    queue: Mutex<VecDeque<Work>>,
    signal: Notify,
    /// The cap the passes have reached (highest commitSeq handled in order).
    through: AtomicI64,
    stopped: AtomicBool,
    /// Sessions reserved but not yet joined (being opened): the partition stays while > 0.
    pub joining: AtomicUsize,
    /// (partition-wide epoch, per-actor epochs): bumped (under the hub's partitions lock) by
    /// every host refresh of this partition — of every actor or of one — and every LISTEN
    /// (re)connect. A session whose registrations were resolved before a bump that concerns
    /// it reloads before it joins ([`super::hub::Hub::add`]).
    scopes_epochs: Mutex<(u64, HashMap<String, u64>)>,
    /// The partition's `logEpoch` as last seen by an open or reload.
    log_epoch: Mutex<String>,
}

/// What [`Partition::scopes_epoch`] reads: (partition-wide epoch, the actor's epoch).
pub type ScopesEpoch = (u64, u64);

impl Partition {
    /// Creates the partition and spawns its worker.
    pub fn spawn(hub: Arc<Hub>, name: String) -> Arc<Self> {
        let p = Arc::new(Partition {
            name,
            sessions: Mutex::default(),
            queue: Mutex::default(),
            signal: Notify::new(),
            through: AtomicI64::new(0),
            stopped: AtomicBool::new(false),
            joining: AtomicUsize::new(0),
            scopes_epochs: Mutex::default(),
            log_epoch: Mutex::default(),
        });
        tokio::spawn(run_worker(hub, p.clone()));
        p
    }

    /// Adds a session.
    pub fn insert(&self, s: Arc<Session>) {
        lock(&self.sessions).insert(s.id, s);
    }

    /// Removes a session; true when it was present.
    pub fn remove(&self, id: u64) -> bool {
        lock(&self.sessions).remove(&id).is_some()
    }

    /// No session left.
    pub fn is_empty(&self) -> bool {
        lock(&self.sessions).is_empty()
    }

    /// A snapshot of the sessions of `actor` (of every actor when `None`).
    pub fn sessions(&self, actor: Option<&str>) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().filter(|s| actor.is_none_or(|a| a == s.actor_id)).cloned().collect()
    }

    /// The scopes epoch that concerns `actor` (see the field).
    pub fn scopes_epoch(&self, actor: &str) -> ScopesEpoch {
        let epochs = lock(&self.scopes_epochs);
        (epochs.0, epochs.1.get(actor).copied().unwrap_or(0))
    }

    /// Bumps the epoch of `actor`, or the partition-wide one when `None` (the caller holds the
    /// hub's partitions lock).
    pub fn bump_scopes_epoch(&self, actor: Option<&str>) {
        let mut epochs = lock(&self.scopes_epochs);
        match actor {
            Some(a) => *epochs.1.entry(a.to_owned()).or_default() += 1,
            None => epochs.0 += 1,
        }
    }

    /// Records the `logEpoch` an open or reload read with that read's `latestCursor`. A
    /// different epoch than the one recorded is a new timeline (SPEC §2.1: an epoch rotation
    /// after a restore, a dropped and recreated partition): its log may end below what this
    /// gateway saw on the old one, so the pass cap restarts at `latest` (otherwise the new
    /// timeline's commits up to the old max would never be served).
    pub fn restart_timeline(&self, epoch: &str, latest: i64) {
        let mut current = lock(&self.log_epoch);
        if *current != epoch {
            if !current.is_empty() {
                self.through.store(latest, Ordering::SeqCst);
            }
            *current = epoch.to_owned();
        }
    }

    /// The cap the worker's passes have reached.
    pub fn through(&self) -> i64 {
        self.through.load(Ordering::SeqCst)
    }

    /// Queues work and wakes the worker.
    pub fn schedule(&self, work: Work) {
        lock(&self.queue).push_back(work);
        self.signal.notify_one();
    }

    /// Stops the worker (the partition has no session left).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.signal.notify_one();
    }
}

async fn run_worker(hub: Arc<Hub>, p: Arc<Partition>) {
    loop {
        p.signal.notified().await;
        if p.stopped.load(Ordering::SeqCst) {
            return;
        }
        loop {
            let Some(work) = lock(&p.queue).pop_front() else { break };
            match work {
                Work::Scopes(actor) => {
                    refresh_many(&hub, &p.sessions(actor.as_deref())).await;
                    lock(&p.queue).push_front(Work::Pass);
                }
                Work::Resync => {
                    if let Some(latest) = refresh_many(&hub, &p.sessions(None)).await {
                        p.through.fetch_max(latest, Ordering::SeqCst);
                    }
                    lock(&p.queue).push_front(Work::Pass);
                }
                first => {
                    let through = coalesce(&mut lock(&p.queue), first, p.through());
                    p.through.fetch_max(through, Ordering::SeqCst);
                    // Outside tokio's cooperative budget: a pass writes up to one delta per
                    // session directly, and a spent budget would make every socket after the
                    // 128th answer "not ready" (the writer tasks would then do the writes).
                    tokio::task::unconstrained(pass(&hub, &p, through)).await;
                }
            }
        }
    }
}

/// The cap of the pass `first` (a commit or a pass request) starts: the highest commitSeq of
/// `first` and of the commits and pass requests queued right behind it (taken off the queue),
/// never below `through`. A refresh stays queued: the commits notified after it wait for it.
fn coalesce(queue: &mut VecDeque<Work>, first: Work, through: i64) -> i64 {
    let seq = |w: &Work| if let Work::Commit(seq) = w { *seq } else { through };
    let mut through = through.max(seq(&first));
    while let Some(w @ (Work::Commit(_) | Work::Pass)) = queue.front() {
        through = through.max(seq(w));
        queue.pop_front();
    }
    through
}

/// Host-refreshes sessions, 8 at a time; returns the smallest `latestCursor` the successful
/// reloads read (`None` when none succeeded).
async fn refresh_many(hub: &Arc<Hub>, sessions: &[Arc<Session>]) -> Option<i64> {
    let mut smallest: Option<i64> = None;
    for batch in sessions.chunks(8) {
        let futures = batch.iter().map(|s| hub.refresh(s, Reason::Host));
        for latest in futures_util::future::join_all(futures).await.into_iter().flatten() {
            smallest = Some(smallest.map_or(latest, |m| m.min(latest)));
        }
    }
    smallest
}

/// One delta pass: one `syncular.realtime_pass` call with the distinct states of the
/// partition's sessions — flagged `in_round` for sessions whose socket round is in flight
/// (§8.7: wake-ups, never a delta) — capped at `through` (the highest commitSeq handled in
/// notification order); every session of a row keeps the row's state and is sent its message
/// (one buffer for all) and text.
pub async fn pass(hub: &Arc<Hub>, p: &Arc<Partition>, through: i64) {
    let mut states: Vec<StateText> = Vec::new();
    let mut in_round: Vec<bool> = Vec::new();
    // Per row: each session with the state and generation it had when the call was prepared.
    let mut members: Vec<Vec<(Arc<Session>, StateText, u64)>> = Vec::new();
    // Rows by state text; sessions that adopted one row share its text's allocation, so most
    // are found by address without hashing the text.
    let mut index: HashMap<(StateText, bool), usize> = HashMap::new();
    let mut by_address: HashMap<(usize, bool), usize> = HashMap::new();
    for session in p.sessions(None) {
        if session.is_closing() {
            continue;
        }
        let st = session.state();
        let address = (Arc::as_ptr(&st.state).cast::<u8>() as usize, st.round_in_flight);
        let i = *by_address.entry(address).or_insert_with(|| {
            *index.entry((st.state.clone(), st.round_in_flight)).or_insert_with(|| {
                states.push(st.state.clone());
                in_round.push(st.round_in_flight);
                members.push(Vec::new());
                states.len() - 1
            })
        });
        let member = (st.state.clone(), st.generation);
        drop(st);
        members[i].push((session, member.0, member.1));
    }
    if states.is_empty() {
        return;
    }
    let started = Instant::now();
    hub.metrics.delta_calls.inc();
    let rows = session_rules::pass(&hub.pool, &p.name, (&states, &in_round), hub.settings.max_delta_bytes, through).await;
    hub.metrics.delta_call_seconds.observe(started.elapsed().as_secs_f64());
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            hub.metrics.error(e.code_str());
            tracing::error!(partition_len = p.name.len(), code = e.code_str(), message = ?e.body.get("message"), "realtime_pass failed");
            if e.transient {
                // Try again shortly (the states did not move: nothing is lost).
                let p = p.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    p.schedule(Work::Pass);
                });
            } else {
                // Fail safe, never silent: without an answer nothing says what the sessions
                // missed; they are closed and their clients reconnect and pull.
                for (session, ..) in members.iter().flatten() {
                    session.close(close_code::INTERNAL, "realtime deltas could not be computed");
                }
            }
            return;
        }
    };
    let mut rerun = false;
    let (fan_out, mut drained) = tokio::sync::mpsc::channel::<()>(1);
    for row in rows {
        let Some(group) = members.get(row.index) else { continue };
        if let Some(control) = &row.control {
            hub.metrics.wake(wake_reason(control));
        }
        for (session, state, generation) in group {
            let mut st = session.state();
            // The answer describes the session only while it has the same state (no ack resumed
            // it, no reload or round end replaced it) and generation (no round begun, no scopes
            // notification since); otherwise the next pass recomputes it from its state.
            if !Arc::ptr_eq(&st.state, state) || st.generation != *generation {
                rerun = true;
                continue;
            }
            st.adopt(row.state.clone(), row.resume.clone());
            if let Some(message) = &row.message {
                session.send_message(&mut st, message, row.overflow.as_ref(), Some(&fan_out));
            }
            if let Some(control) = &row.control {
                session.send_text(control.clone());
            }
        }
    }
    if rerun {
        p.schedule(Work::Pass);
    }
    // The next pass waits for this one's deltas to reach the sockets (bounded): commits that
    // land meanwhile coalesce into one delta per session instead of one each.
    drop(fan_out);
    let _ = tokio::time::timeout(FAN_OUT_WAIT, drained.recv()).await;
}

/// The longest a pass waits for its deltas to be written before the next pass may start.
const FAN_OUT_WAIT: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_coalesce_up_to_a_refresh_and_never_lower_the_cap() {
        // Consecutive commits coalesce into one pass, the same commit heard twice (two LISTEN
        // nodes, a repeated NOTIFY) too; a refresh notified between two commits: the first is
        // served under the old registrations, the second only after the refresh.
        let bob = Work::Scopes(Some("bob".into()));
        let mut queue = VecDeque::from([Work::Commit(11), Work::Commit(10), bob.clone(), Work::Commit(12)]);
        assert_eq!(coalesce(&mut queue, Work::Commit(10), 9), 11);
        assert_eq!(queue, [bob, Work::Commit(12)]);
        // A catch-up pass never exceeds what was notified.
        assert_eq!(coalesce(&mut VecDeque::new(), Work::Pass, 7), 7);
        // A duplicate of an already handled commit passes at the cap reached so far: it starts
        // at each session's delivered cursor, so nothing is sent twice.
        assert_eq!(coalesce(&mut VecDeque::from([Work::Pass]), Work::Commit(7), 12), 12);
    }
}
