//! Readers of a partition being pruned.
//!
//! - [`Sweeper`]: raw SSP2 incremental pulls of every project, starting at
//!   the current horizon and walking to the head in small windows, then
//!   starting again at the (new) horizon — so its cursor sits exactly where
//!   pruning advances and deletes. Every `active` response must deliver
//!   *every* commit of its window, `cursor + 1 ..= nextCursor` (each commit
//!   of these partitions has a change in a subscribed project): a pull that
//!   missed commits deleted under it shows as a gap. A cursor behind the
//!   horizon must be answered `reset` / `sync.cursor_expired` with no commit
//!   and the cursor echoed (§4.6).
//! - [`RealPuller`]: the real `syncular-client` 0.15.48 over
//!   [`crate::transport::PgTransport`], subscribed to every project; it
//!   bootstraps, then syncs round after round (it can be paused, so that
//!   pruning passes its cursor and its next round is reset and
//!   re-bootstraps), and finally syncs until idle and hands back the rows it
//!   holds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use ssp2::model::{Frame, SubStatus};
use syncular_client::SyncReport;

use super::prefill::{allowed, counters};
use crate::capture::held_tasks;
use crate::clients::{new_client, subscribe_projects, sync_idle, sync_once};
use crate::fixtures::{bound_statements, ServerTask};
use crate::transport::PgTransport;
use crate::wire::{delivered, pull_header, subscription, RawSession};

/// What the sweeper saw.
#[derive(Clone, Debug, Default)]
pub struct SweepReport {
    /// Pull requests made.
    pub pulls: usize,
    /// `active` responses that delivered at least one commit (each checked dense).
    pub windows: usize,
    /// Commits delivered.
    pub commits: usize,
    /// `reset` answers (cursor behind the horizon).
    pub resets: usize,
    /// Times it started again at the horizon.
    pub sweeps: usize,
}

/// A running sweeper.
pub struct Sweeper {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<SweepReport, String>>,
}

impl Sweeper {
    /// Starts a sweeper on its own connection, pulling windows of at most
    /// `limit` changes of the projects `projects`.
    pub fn start(dsn: &str, partition: &str, epoch: &str, projects: Vec<String>, limit: i32) -> Sweeper {
        let stop = Arc::new(AtomicBool::new(false));
        let (dsn, partition, epoch) = (dsn.to_owned(), partition.to_owned(), epoch.to_owned());
        let flag = Arc::clone(&stop);
        let handle = thread::spawn(move || sweep(&dsn, &partition, &epoch, &projects, limit, &flag));
        Sweeper { stop, handle }
    }

    /// Whether it has ended already (it failed: see [`Sweeper::stop`]).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Stops it after its current pull.
    ///
    /// Errors: the violation or failure that ended it.
    pub fn stop(self) -> Result<SweepReport, String> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().map_err(|_| "the sweeper panicked".to_owned())?
    }
}

fn sweep(
    dsn: &str,
    partition: &str,
    epoch: &str,
    projects: &[String],
    limit: i32,
    stop: &AtomicBool,
) -> Result<SweepReport, String> {
    let mut s = RawSession::new(crate::connect_to(dsn), partition, "sweeper", "sweeper", Some(allowed()));
    s.log_epoch = Some(epoch.to_owned());
    let scopes: Vec<&str> = projects.iter().map(String::as_str).collect();
    let mut report = SweepReport::default();
    let mut cursor: Option<i64> = None;
    while !stop.load(Ordering::SeqCst) {
        let c = match cursor {
            Some(c) => c,
            None => {
                report.sweeps += 1;
                counters(&mut s.conn, partition)?.1
            }
        };
        let msg = s
            .round(vec![
                pull_header(limit, 0, 0, 0b0011),
                subscription("sweep", "tasks", &[("project_id", &scopes)], c, None),
            ])
            .map_err(|e| format!("sweeper pull at cursor {c}: {e}"))?;
        report.pulls += 1;
        let start = msg.frames.iter().find_map(|f| match f {
            Frame::SubStart { status, reason_code, bootstrap, .. } => Some((*status, reason_code.clone(), *bootstrap)),
            _ => None,
        });
        let end = msg.frames.iter().find_map(|f| match f {
            Frame::SubEnd { next_cursor, bootstrap_state } => Some((*next_cursor, bootstrap_state.is_some())),
            _ => None,
        });
        let (Some((status, reason, bootstrap)), Some((next, token))) = (start, end) else {
            return Err(format!("sweeper pull at cursor {c}: no SUB_START/SUB_END: {msg:?}"));
        };
        let seqs = delivered(&msg).map_err(|e| format!("sweeper pull at cursor {c}: {e}"))?.commit_seqs;
        match status {
            SubStatus::Active => {
                if bootstrap || token {
                    return Err(format!("sweeper pull at cursor {c} (≥ horizon) bootstrapped: {msg:?}"));
                }
                let expected: Vec<i64> = (c + 1..=next).collect();
                if seqs != expected {
                    return Err(format!(
                        "sweeper pull at cursor {c}: nextCursor {next} but commits {} (expected every commit of \
                         {}..={next}): a pull missed commits",
                        render(&seqs),
                        c + 1
                    ));
                }
                report.commits += seqs.len();
                if seqs.is_empty() {
                    cursor = None;
                    thread::sleep(Duration::from_millis(2));
                } else {
                    report.windows += 1;
                    cursor = Some(next);
                }
            }
            SubStatus::Reset => {
                if reason != "sync.cursor_expired" || !seqs.is_empty() || next != c {
                    return Err(format!(
                        "sweeper pull at cursor {c}: reset with reason {reason:?}, {} commits, nextCursor {next} \
                         (expected sync.cursor_expired, none, the cursor echoed)",
                        seqs.len()
                    ));
                }
                report.resets += 1;
                cursor = None;
            }
            SubStatus::Revoked => return Err(format!("sweeper pull at cursor {c}: revoked ({reason})")),
        }
    }
    Ok(report)
}

/// `[a..b]` runs of a sorted list, for messages.
fn render(seqs: &[i64]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < seqs.len() {
        let mut j = i;
        while j + 1 < seqs.len() && seqs[j + 1] == seqs[j] + 1 {
            j += 1;
        }
        runs.push(if i == j { seqs[i].to_string() } else { format!("{}..={}", seqs[i], seqs[j]) });
        i = j + 1;
    }
    format!("[{}]", runs.join(", "))
}

/// What the real client did.
#[derive(Clone, Debug, Default)]
pub struct RealReport {
    /// Rounds made (bootstrap and final sync included).
    pub rounds: u64,
    /// Resets after the first bootstrap (§4.6 `sync.cursor_expired`).
    pub resets: usize,
    /// Commits applied from incremental pulls.
    pub commits_applied: u64,
    /// Rows applied from bootstrap segments.
    pub segment_rows_applied: u64,
    /// Per reset: the cursor the reset request carried and the partition's
    /// `(max_commit_seq, horizon_seq)` read right after the round.
    pub reset_at: Vec<(i64, i64, i64)>,
    /// The rows it holds at the end, in the shape of [`crate::fixtures::server_tasks`].
    pub rows: Vec<ServerTask>,
}

impl RealReport {
    fn add(&mut self, r: &SyncReport, transport: &mut PgTransport, partition: &str) {
        self.resets += r.resets.len();
        self.commits_applied += u64::from(r.commits_applied);
        self.segment_rows_applied += u64::from(r.segment_rows_applied);
        if !r.resets.is_empty() {
            let cursor = transport
                .last_exchange
                .as_ref()
                .and_then(|(request, _)| ssp2::decode_message(request).ok())
                .and_then(|m| {
                    m.frames.iter().find_map(|f| match f {
                        Frame::Subscription { cursor, .. } => Some(*cursor),
                        _ => None,
                    })
                })
                .unwrap_or(i64::MIN);
            let (max, horizon) = counters(transport.connection(), partition).unwrap_or((-1, -1));
            self.reset_at.push((cursor, max, horizon));
        }
    }
}

/// A real client syncing in a loop on its own thread.
pub struct RealPuller {
    paused: Arc<AtomicBool>,
    finish: Arc<AtomicBool>,
    handle: JoinHandle<Result<RealReport, String>>,
}

impl RealPuller {
    /// Starts client `client_id` (actor `actor`) subscribed to `projects`,
    /// paused or not; returns once its first bootstrap completed.
    ///
    /// Errors: the bootstrap failed.
    pub fn start(
        dsn: &str,
        partition: &str,
        client_id: &str,
        projects: Vec<String>,
        paused: bool,
    ) -> Result<RealPuller, String> {
        let paused = Arc::new(AtomicBool::new(paused));
        let finish = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let (dsn, partition, client_id) = (dsn.to_owned(), partition.to_owned(), client_id.to_owned());
        let (p, f) = (Arc::clone(&paused), Arc::clone(&finish));
        let handle = thread::spawn(move || {
            real_client(&dsn, &partition, &client_id, &projects, &p, &f, &ready_tx)
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(RealPuller { paused, finish, handle }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(match handle.join() {
                Ok(Err(e)) => e,
                _ => "the real client died during its bootstrap".to_owned(),
            }),
        }
    }

    /// Lets a paused client sync again.
    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    /// The pause flag (`false` lets it sync), for another thread to clear.
    pub fn pause_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.paused)
    }

    /// Whether it has ended already (it failed: see [`RealPuller::finish`]).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Syncs until idle (call it once nothing writes any more) and returns
    /// what it did and holds.
    ///
    /// Errors: a failed round.
    pub fn finish(self) -> Result<RealReport, String> {
        self.paused.store(false, Ordering::SeqCst);
        self.finish.store(true, Ordering::SeqCst);
        self.handle.join().map_err(|_| "the real client panicked".to_owned())?
    }
}

fn real_client(
    dsn: &str,
    partition: &str,
    client_id: &str,
    projects: &[String],
    paused: &AtomicBool,
    finish: &AtomicBool,
    ready: &mpsc::Sender<Result<(), String>>,
) -> Result<RealReport, String> {
    let setup = || -> Result<_, String> {
        let mut client = new_client(client_id)?;
        let scopes: Vec<&str> = projects.iter().map(String::as_str).collect();
        subscribe_projects(&mut client, "all", &scopes)?;
        let mut conn = crate::connect_to(dsn);
        bound_statements(&mut conn).map_err(|e| e.to_string())?;
        let mut transport = PgTransport::new(conn, partition, client_id, Some(allowed()));
        let mut report = RealReport::default();
        // The first round is the §2.1 epoch acquisition, which the client reports as a reset: not counted.
        let r = sync_idle(&mut client, &mut transport, 100_000).map_err(|e| format!("{client_id} bootstrap: {e}"))?;
        report.segment_rows_applied += u64::from(r.segment_rows_applied);
        Ok((client, transport, report))
    };
    let (mut client, mut transport, mut report) = match setup() {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    while !finish.load(Ordering::SeqCst) {
        if paused.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        let r = sync_once(&mut client, &mut transport).map_err(|e| format!("{client_id} round: {e}"))?;
        report.add(&r, &mut transport, partition);
        if r.commits_applied == 0 && r.segment_rows_applied == 0 && r.bootstrapping.is_empty() {
            thread::sleep(Duration::from_millis(5));
        }
    }
    let r = sync_idle(&mut client, &mut transport, 100_000).map_err(|e| format!("{client_id} final sync: {e}"))?;
    report.add(&r, &mut transport, partition);
    report.rounds = transport.rounds;
    report.rows = held_tasks(&client)?;
    Ok(report)
}
