//! Per-partition delta delivery (§8.2, §8.3; docs/src/sql/realtime.md "Session rules").
//!
//! Each partition with sessions has one worker task that processes its events strictly in
//! the order the LISTEN connections delivered them (Postgres delivers one connection's
//! `syncular_commit` and `syncular_scopes` in commit order; a partition's are notified on the
//! node its sync calls run on). Consecutive commit notifications coalesce into ONE
//! `syncular.realtime_pass` call with the distinct states of the partition's sessions (equal
//! states share one row and one encoded delta), capped at the highest `commitSeq` notified so
//! far (`through_seq`): a host refresh is applied before any commit notified after it, so a
//! commit made after a membership change is never served under the registrations that change
//! revokes (fail-closed). After a LISTEN reconnect (notifications were lost) every session is
//! refreshed first and the pass is capped at the smallest `latestCursor` those refreshes read
//! (before resolving scopes). A pass returns once its deltas reached the sockets (at most
//! 50 ms), so the commits notified meanwhile coalesce into the next one.
//!
//! What each session gets and keeps is the rules' answer; a session whose state changed while
//! the call ran (a reload, an ack that resumed it, a round begun) is not served it: it is
//! recomputed by the next pass from its state. A failed call is retried when transient;
//! otherwise the partition's sessions are closed (their clients reconnect and pull).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::hub::{Hub, RefreshMode};
use super::session::{FanOut, Session};
use crate::db::session::{self as session_rules, StateText};

/// An event for a partition worker, processed in the order it was scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// A commit notification (`commitSeq`).
    Commit(i64),
    /// Run a pass up to what was already notified (a new session to catch up, a retry).
    Pass,
    /// Host refresh for one actor (`Some`) or every actor (`None`).
    Scopes(Option<String>),
    /// The LISTEN connection (re)connected: refresh every session, then a pass.
    Resync,
}

/// What a worker does for a batch of events, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// One `realtime_deltas` call capped at `through`.
    Pass { through: i64 },
    /// Host-refresh the sessions of one actor (`Some`) or all (`None`).
    Refresh(Option<String>),
    /// Host-refresh every session, then raise `through` to the smallest `latestCursor` read.
    Resync,
}

/// Plans a batch: commits coalesce into one pass capped at the highest `commitSeq` seen so
/// far (`through` starts at what earlier batches reached); every refresh runs after a pass
/// over the commits notified before it, and is followed by a pass. A `Resync` step raises the
/// cap itself (its pass is planned with the cap known before it; the worker substitutes).
pub fn plan(events: &[Work], mut through: i64) -> (Vec<Step>, i64) {
    let mut steps = Vec::new();
    let mut pending = false;
    for event in events {
        match event {
            Work::Commit(seq) => {
                through = through.max(*seq);
                pending = true;
            }
            Work::Pass => pending = true,
            Work::Scopes(actor) => {
                if pending {
                    steps.push(Step::Pass { through });
                }
                steps.push(Step::Refresh(actor.clone()));
                pending = true;
            }
            Work::Resync => {
                if pending {
                    steps.push(Step::Pass { through });
                }
                steps.push(Step::Resync);
                pending = true;
            }
        }
    }
    if pending {
        steps.push(Step::Pass { through });
    }
    (steps, through)
}

/// A partition with sessions on this gateway.
pub struct Partition {
    /// Partition name.
    pub name: String,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    queue: Mutex<VecDeque<Work>>,
    signal: Notify,
    through: AtomicI64,
    stopped: AtomicBool,
    /// Sessions reserved but not yet joined (being opened): the partition stays while > 0.
    pub joining: AtomicUsize,
    /// Bumped (under the hub's partitions lock) by every partition-wide host refresh of this
    /// partition and every LISTEN (re)connect; `actor_epochs` by an actor's refreshes. A
    /// session whose registrations were resolved before a bump that concerns it reloads
    /// before it joins ([`super::hub::Hub::add`]).
    scopes_epoch: AtomicU64,
    actor_epochs: Mutex<HashMap<String, u64>>,
    /// The partition's `logEpoch` as last seen by an open or reload, and how many times a new
    /// one restarted the timeline ([`Partition::restart_timeline`]).
    timeline: Mutex<(String, u64)>,
}

/// What [`Partition::scopes_epoch`] reads: (partition-wide epoch, the actor's epoch).
pub type ScopesEpoch = (u64, u64);

impl Partition {
    /// Creates the partition and spawns its worker.
    pub fn spawn(hub: Arc<Hub>, name: String) -> Arc<Self> {
        let p = Arc::new(Partition {
            name,
            sessions: Mutex::new(HashMap::new()),
            queue: Mutex::new(VecDeque::new()),
            signal: Notify::new(),
            through: AtomicI64::new(0),
            stopped: AtomicBool::new(false),
            joining: AtomicUsize::new(0),
            scopes_epoch: AtomicU64::new(0),
            actor_epochs: Mutex::new(HashMap::new()),
            timeline: Mutex::new((String::new(), 0)),
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

    /// The scopes epoch that concerns `actor` (see the field).
    pub fn scopes_epoch(&self, actor: &str) -> ScopesEpoch {
        let actor_epoch = self.actor_epochs.lock().unwrap_or_else(|p| p.into_inner()).get(actor).copied().unwrap_or(0);
        (self.scopes_epoch.load(Ordering::SeqCst), actor_epoch)
    }

    /// Bumps the epoch of `actor`, or the partition-wide one when `None` (the caller holds the
    /// hub's partitions lock).
    pub fn bump_scopes_epoch(&self, actor: Option<&str>) {
        match actor {
            Some(a) => *self.actor_epochs.lock().unwrap_or_else(|p| p.into_inner()).entry(a.to_owned()).or_insert(0) += 1,
            None => {
                self.scopes_epoch.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Records the `logEpoch` an open or reload read with that read's `latestCursor`. A
    /// different epoch than the one recorded is a new timeline (SPEC §2.1: an epoch rotation
    /// after a restore, a dropped and recreated partition): its log may end below what this
    /// gateway saw on the old one, so the pass cap restarts at `latest`
    /// (otherwise the new timeline's commits up to the old max would never be served).
    /// Returns whether the timeline restarted.
    pub fn restart_timeline(&self, epoch: &str, latest: i64) -> bool {
        let mut t = self.timeline.lock().unwrap_or_else(|p| p.into_inner());
        if t.0 == epoch {
            return false;
        }
        let restarted = !t.0.is_empty();
        t.0 = epoch.to_owned();
        if restarted {
            t.1 += 1;
            self.through.store(latest, Ordering::SeqCst);
        }
        restarted
    }

    /// How many times the timeline restarted (see [`Partition::restart_timeline`]).
    pub fn timeline_generation(&self) -> u64 {
        self.timeline.lock().unwrap_or_else(|p| p.into_inner()).1
    }

    /// The cap the worker's passes have reached (highest commitSeq processed in order).
    pub fn through(&self) -> i64 {
        self.through.load(Ordering::SeqCst)
    }

    /// Queues work and wakes the worker.
    pub fn schedule(&self, work: Work) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).push_back(work);
        self.signal.notify_one();
    }

    /// Stops the worker (the partition has no session left).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.signal.notify_one();
    }

    fn take(&self) -> Vec<Work> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect()
    }
}

async fn run_worker(hub: Arc<Hub>, p: Arc<Partition>) {
    loop {
        p.signal.notified().await;
        if p.stopped.load(Ordering::SeqCst) {
            return;
        }
        let events = p.take();
        let (steps, _) = plan(&events, p.through());
        let mut raised = p.through();
        let mut timeline = p.timeline_generation();
        for step in steps {
            match step {
                Step::Pass { through } => {
                    // A refresh of this batch met a new timeline: the caps planned on the old
                    // one no longer apply; the restarted cap covers every commit notified so
                    // far (the reload read it after they committed).
                    let through = if p.timeline_generation() != timeline {
                        timeline = p.timeline_generation();
                        p.through()
                    } else {
                        through.max(raised)
                    };
                    raised = through;
                    p.through.fetch_max(through, Ordering::SeqCst);
                    pass(&hub, &p, through).await;
                }
                Step::Refresh(actor) => {
                    let targets: Vec<_> =
                        p.sessions().into_iter().filter(|s| actor.as_deref().is_none_or(|a| a == s.actor_id)).collect();
                    refresh_many(&hub, &targets).await;
                }
                Step::Resync => {
                    if let Some(latest) = refresh_many(&hub, &p.sessions()).await {
                        raised = raised.max(latest);
                    }
                }
            }
        }
    }
}

/// Host-refreshes sessions, 8 at a time; returns the smallest `latestCursor` the successful
/// reloads read (`None` when none succeeded).
async fn refresh_many(hub: &Arc<Hub>, sessions: &[Arc<Session>]) -> Option<i64> {
    let mut smallest: Option<i64> = None;
    for batch in sessions.chunks(8) {
        let futures = batch.iter().map(|s| hub.refresh(s, RefreshMode::Host));
        for latest in futures_util::future::join_all(futures).await.into_iter().flatten() {
            smallest = Some(smallest.map_or(latest, |m| m.min(latest)));
        }
    }
    smallest
}

/// What a pass member looked like when the call was prepared.
struct Member {
    session: Arc<Session>,
    state: StateText,
    generation: u64,
    rounds_started: u64,
}

impl Member {
    /// Whether the call's answer still describes this session: the same state (no ack resumed
    /// it, no reload or round end replaced it), the same generation, no round begun since.
    fn current(&self, st: &super::session::SessionState) -> bool {
        Arc::ptr_eq(&st.state, &self.state) && st.generation == self.generation && st.rounds_started == self.rounds_started
    }
}

/// One delta pass: one `syncular.realtime_pass` call with the distinct states of the
/// partition's sessions — flagged `in_round` for sessions whose socket round is in flight
/// (§8.7: wake-ups, never a delta) — capped at `through` (the highest commitSeq processed in
/// notification order); every session of a row keeps the row's state and is sent its message
/// (one buffer for all) and text.
pub async fn pass(hub: &Arc<Hub>, p: &Arc<Partition>, through: i64) {
    let mut states: Vec<StateText> = Vec::new();
    let mut in_round: Vec<bool> = Vec::new();
    let mut members: Vec<Vec<Member>> = Vec::new();
    let mut index: HashMap<(StateText, bool), usize> = HashMap::new();
    for session in p.sessions() {
        if session.is_closing() {
            continue;
        }
        let st = session.state();
        let i = *index.entry((st.state.clone(), st.round_in_flight)).or_insert_with(|| {
            states.push(st.state.clone());
            in_round.push(st.round_in_flight);
            members.push(Vec::new());
            states.len() - 1
        });
        let member = Member { state: st.state.clone(), generation: st.generation, rounds_started: st.rounds_started, session: session.clone() };
        drop(st);
        members[i].push(member);
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
                for m in members.iter().flatten() {
                    m.session.close(super::session::close_code::INTERNAL, "realtime deltas could not be computed");
                }
            }
            return;
        }
    };
    let mut rerun = false;
    let fan_out = Arc::new(FanOut::default());
    for row in rows {
        let Some(group) = members.get(row.index) else { continue };
        if let Some(control) = &row.control {
            hub.metrics.wake(super::session::wake_reason(control));
        }
        for m in group {
            let mut st = m.session.state();
            if !m.current(&st) {
                // The state changed while the call ran: recompute from it in the next pass.
                rerun = true;
                continue;
            }
            st.adopt(row.state.clone(), row.resume.clone());
            if let Some(message) = &row.message {
                m.session.send_message(&mut st, message, row.overflow.as_ref(), Some(&fan_out));
            }
            if let Some(control) = &row.control {
                m.session.send_text(control.clone());
            }
        }
    }
    if rerun {
        p.schedule(Work::Pass);
    }
    // The next pass waits for this one's deltas to reach the sockets (bounded): commits that
    // land meanwhile coalesce into one delta per session instead of one each.
    fan_out.drained(FAN_OUT_WAIT).await;
}

/// The longest a pass waits for its deltas to be written before the next pass may start.
const FAN_OUT_WAIT: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_coalesce_and_refreshes_split_them_in_notification_order() {
        let (steps, through) = plan(&[Work::Commit(10), Work::Commit(11)], 9);
        assert_eq!((steps, through), (vec![Step::Pass { through: 11 }], 11));
        // A refresh notified between two commits: the first commit is served under the old
        // registrations, the second only after the refresh.
        let (steps, _) = plan(&[Work::Commit(10), Work::Scopes(Some("bob".into())), Work::Commit(11)], 9);
        assert_eq!(
            steps,
            vec![Step::Pass { through: 10 }, Step::Refresh(Some("bob".into())), Step::Pass { through: 11 }]
        );
        // A refresh first: no pass before it, one after.
        let (steps, _) = plan(&[Work::Scopes(None), Work::Commit(12)], 11);
        assert_eq!(steps, vec![Step::Refresh(None), Step::Pass { through: 12 }]);
        // A catch-up pass never exceeds what was notified.
        assert_eq!(plan(&[Work::Pass], 7).0, vec![Step::Pass { through: 7 }]);
        // Resync: pass what was notified before it, then refresh all, then pass.
        let (steps, _) = plan(&[Work::Commit(5), Work::Resync], 4);
        assert_eq!(steps, vec![Step::Pass { through: 5 }, Step::Resync, Step::Pass { through: 5 }]);
        assert!(plan(&[], 3).0.is_empty());
    }

    #[test]
    fn duplicate_and_late_commit_notifications_never_lower_the_cap() {
        // The same commit heard twice (two LISTEN nodes, a repeated NOTIFY) coalesces.
        let (steps, through) = plan(&[Work::Commit(10), Work::Commit(10)], 9);
        assert_eq!((steps, through), (vec![Step::Pass { through: 10 }], 10));
        // A duplicate of an already processed commit plans a pass at the cap reached so far:
        // it starts at each session's delivered cursor, so nothing is sent twice.
        let (steps, through) = plan(&[Work::Commit(7)], 12);
        assert_eq!((steps, through), (vec![Step::Pass { through: 12 }], 12));
        // Two nodes' orders interleaved: a scopes refresh still precedes the later commit.
        let (steps, _) = plan(&[Work::Commit(11), Work::Scopes(None), Work::Commit(11), Work::Commit(12)], 10);
        assert_eq!(steps, vec![Step::Pass { through: 11 }, Step::Refresh(None), Step::Pass { through: 12 }]);
    }
}
