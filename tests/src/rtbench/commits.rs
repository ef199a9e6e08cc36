//! Single-row pushes through `SELECT syncular.sync(...)` at a fixed rate:
//! commit `i` is due at `t0 + i / rate` (open loop — a late commit starts at
//! once, it is not skipped), taken by whichever of the committing connections
//! is free; no commit starts after `t0 + duration`, so a rate the server cannot
//! reach shows as a lower achieved rate, not as a longer run. Each commit is
//! timestamped when its autocommit statement returns (the commit is durable
//! then), on the same monotonic clock as the delta receive times.
//! [`Pace::ClosedLoop`] instead commits as fast as the connections can (the
//! server's commit capacity). [`run_paced_with`] also publishes the highest
//! `commitSeq` returned so far and can be stopped early (the reconnect storm).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::transport::SYNC_SQL;
use crate::wire::decode_response;

use super::setup::{applied_seq, push_request};

/// The actor of the committing connections.
pub const WRITER: &str = "rt-writer";

/// How commits are driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// `rate` commits/s, open loop.
    Rate(u32),
    /// Each connection commits again as soon as its previous commit returned.
    ClosedLoop,
}

/// What a paced run did.
#[derive(Clone, Debug)]
pub struct CommitRun {
    /// `(commitSeq, statement returned)`, in no particular order.
    pub commits: Vec<(i64, Instant)>,
    /// When commit 0 was due.
    pub t0: Instant,
    /// When the last statement returned.
    pub finished: Instant,
    /// How the commits were driven.
    pub pace: Pace,
    /// Largest delay between a commit's due time and its start.
    pub max_start_lag: Duration,
}

impl CommitRun {
    /// Commits per second actually reached (first due time to last return).
    pub fn achieved(&self) -> f64 {
        self.commits.len() as f64 / self.finished.duration_since(self.t0).as_secs_f64().max(1e-9)
    }

    /// Lowest and highest `commitSeq`.
    pub fn seq_range(&self) -> Option<(i64, i64)> {
        let min = self.commits.iter().map(|c| c.0).min()?;
        let max = self.commits.iter().map(|c| c.0).max()?;
        Some((min, max))
    }
}

/// Shared with the caller of [`run_paced_with`] while it runs.
#[derive(Clone, Debug)]
pub struct Control {
    /// Set by the caller: no commit starts after it is set.
    pub stop: Arc<AtomicBool>,
    /// The highest `commitSeq` whose statement returned (every lower one is
    /// committed too: commits of a partition queue on its counter row).
    pub committed: Arc<AtomicI64>,
}

impl Default for Control {
    fn default() -> Control {
        Control {
            stop: Arc::new(AtomicBool::new(false)),
            committed: Arc::new(AtomicI64::new(-1)),
        }
    }
}

/// Pushes single-row commits into `partition` for `duration` over
/// `connections` connections (row ids `label-i`), paced by `pace`.
///
/// Errors: a connection or statement error, or a commit that was not applied.
pub fn run_paced(
    dsn: &str,
    partition: &str,
    epoch: &str,
    pace: Pace,
    duration: Duration,
    connections: usize,
    label: &str,
) -> Result<CommitRun, String> {
    run_paced_with(dsn, partition, epoch, pace, duration, connections, label, &Control::default())
}

/// [`run_paced`], stopping early once `control.stop` is set and publishing
/// every returned `commitSeq` to `control.committed`.
#[allow(clippy::too_many_arguments)]
pub fn run_paced_with(
    dsn: &str,
    partition: &str,
    epoch: &str,
    pace: Pace,
    duration: Duration,
    connections: usize,
    label: &str,
    control: &Control,
) -> Result<CommitRun, String> {
    let (total, period) = match pace {
        Pace::Rate(rate) => (
            ((rate as f64) * duration.as_secs_f64()).round().max(1.0) as u64,
            Duration::from_secs_f64(1.0 / rate.max(1) as f64),
        ),
        Pace::ClosedLoop => (u64::MAX, Duration::ZERO),
    };
    let next = Arc::new(AtomicU64::new(0));
    let start: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let ready = Arc::new(Barrier::new(connections + 1));
    let go = Arc::new(Barrier::new(connections + 1));
    let max_lag = Arc::new(Mutex::new(Duration::ZERO));
    let handles: Vec<_> = (0..connections)
        .map(|c| {
            let (dsn, partition, epoch, label) = (
                dsn.to_owned(),
                partition.to_owned(),
                epoch.to_owned(),
                label.to_owned(),
            );
            let (next, start, ready, go, max_lag, control) = (
                next.clone(),
                start.clone(),
                ready.clone(),
                go.clone(),
                max_lag.clone(),
                control.clone(),
            );
            thread::spawn(move || -> Result<Vec<(i64, Instant)>, String> {
                let conn = postgres::Client::connect(&dsn, postgres::NoTls);
                let prepared = conn.and_then(|mut conn| {
                    let stmt = conn.prepare(SYNC_SQL)?;
                    Ok((conn, stmt))
                });
                ready.wait();
                go.wait();
                let (mut conn, stmt) = prepared.map_err(|e| e.to_string())?;
                let t0 = *start.get().ok_or("no start time")?;
                let client_id = format!("{WRITER}-{c}");
                let mut out = Vec::new();
                let mut lag = Duration::ZERO;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let bytes = push_request(
                        &client_id,
                        &epoch,
                        &format!("{label}-{i}"),
                        &format!("{label}-{i}"),
                    );
                    let due = t0 + period.mul_f64(i.min(1 << 40) as f64);
                    let now = Instant::now();
                    if now >= t0 + duration || control.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if due > now {
                        thread::sleep(due - now);
                        if control.stop.load(Ordering::Relaxed) {
                            break;
                        }
                    } else {
                        lag = lag.max(now - due);
                    }
                    let row = conn
                        .query_one(
                            &stmt,
                            &[&partition, &WRITER, &bytes, &None::<serde_json::Value>],
                        )
                        .map_err(|e| crate::wire::db_message(&e))?;
                    let returned = Instant::now();
                    let seq = applied_seq(&decode_response(&row.get::<_, Vec<u8>>(0))?)?;
                    control.committed.fetch_max(seq, Ordering::AcqRel);
                    out.push((seq, returned));
                }
                let mut m = max_lag.lock().unwrap_or_else(|p| p.into_inner());
                *m = (*m).max(lag);
                Ok(out)
            })
        })
        .collect();
    ready.wait();
    let t0 = Instant::now() + Duration::from_millis(20);
    let _ = start.set(t0);
    go.wait();
    let mut commits = Vec::with_capacity(total.min(1 << 20) as usize);
    let mut first_error = None;
    for h in handles {
        match h.join() {
            Ok(Ok(v)) => commits.extend(v),
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(_) => first_error = first_error.or(Some("a committer panicked".to_owned())),
        }
    }
    if let Some(e) = first_error {
        return Err(format!("committing ({pace:?}): {e}"));
    }
    let finished = commits.iter().map(|c| c.1).max().unwrap_or(t0);
    let max_start_lag = *max_lag.lock().unwrap_or_else(|p| p.into_inner());
    Ok(CommitRun {
        commits,
        t0,
        finished,
        pace,
        max_start_lag,
    })
}
