//! The reconnect storm (issue 30): `BENCH_RT_STORM_SESSIONS` sessions on a
//! fresh partition, connected and caught up; commits flow at
//! `BENCH_RT_STORM_RATE`/s. First a steady phase (one cell's length, no
//! churn) gives the same sessions' commit → delta latency — the baseline.
//! Then, while the commits keep flowing, `BENCH_RT_STORM_WAVES` waves each
//! close `BENCH_RT_STORM_SHARE` % of the sessions (round-robin groups, normal
//! close), keep them away `BENCH_RT_STORM_PAUSE_MS`, and reopen them all at
//! once. Each reopened session measures **reconnect → caught-up**: from
//! opening its new socket to holding everything committed before that moment
//! (the committers' highest returned `commitSeq` then) — through the deltas
//! the gateway resumes with, or through the `POST /sync` pulls a client runs
//! after a `hello` with `requiresSync` or a wake-up (module `sessions`).
//!
//! Delivery over the storm's commits, per session over all its connections:
//! lost (never received by any connection — must be 0), duplicated (one
//! connection received a commit twice, or a commit at or below its `hello`
//! cursor — must be 0), and re-sent (received again by a later connection
//! because the acked cursor lagged what the previous one received: allowed,
//! a client skips it; counted for information).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::commits::{run_paced_with, Control, Pace};
use super::config::Config;
use super::notify_baseline::signed_ms;
use super::procstat::{CpuProbe, CpuUse};
use super::sessions::{HelloInfo, SessionLog, SessionSpec, Sessions};
use super::setup::{make_client_records, new_partition, session_specs};
use super::tally::{self, Dist};

/// What the storm measured.
#[derive(Clone, Debug, Default)]
pub struct Storm {
    pub sessions: usize,
    pub rate: u32,
    /// Commits/s reached during the storm.
    pub achieved: f64,
    /// Steady state, same sessions and rate, no churn: commit → delta, ms.
    pub steady: Dist,
    /// Every delta received during the storm: commit → delta, ms.
    pub during: Dist,
    /// Reconnect → caught-up, ms, one value per reconnect that caught up.
    pub reconnect: Dist,
    /// The same minus the client's own §8.4 jitter wait before its catch-up pull.
    pub reconnect_no_jitter: Dist,
    pub reconnects: usize,
    /// Reconnects whose `hello` had `requiresSync` (caught up by pull).
    pub by_pull: usize,
    /// Reconnects that had not caught up within `BENCH_RT_DRAIN_SECS`.
    pub not_caught_up: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub resent: usize,
    pub wakes: usize,
    /// Sessions still behind the last commit when the final drain gave up.
    pub behind: usize,
    pub errors: Vec<String>,
    pub error_count: usize,
    /// CPU over the storm phase.
    pub cpu: CpuUse,
}

impl Storm {
    /// True when no delivery was wrong.
    pub fn correct(&self) -> bool {
        self.lost == 0 && self.duplicated == 0
    }
}

/// Runs the storm against the gateway at `addr`; `say` prints a progress line.
///
/// Errors: a failed commit, session open or setup step.
pub fn run(
    cfg: &Config,
    rt: &tokio::runtime::Handle,
    addr: SocketAddr,
    probe: &CpuProbe,
    say: &dyn Fn(&str),
) -> Result<Storm, String> {
    let n = cfg.storm_sessions;
    let (partition, epoch) = new_partition(&cfg.dsn, "rt-storm")?;
    let specs = session_specs(&partition, &epoch, "rt-storm", n);
    make_client_records(&cfg.dsn, &specs)?;
    let control = Control::default();
    let per_group = (n * cfg.storm_share_pct).div_ceil(100).max(1);
    let groups: Vec<Vec<SessionSpec>> = specs.chunks(per_group).map(<[SessionSpec]>::to_vec).collect();
    let mut open = Vec::with_capacity(groups.len());
    // incarnations[i]: every closed connection of session i, with its hello.
    let mut incarnations: Vec<Vec<(HelloInfo, SessionLog)>> = vec![Vec::new(); n];
    for g in &groups {
        let mut s = Sessions::new(rt.clone(), addr, cfg.wake_jitter_ms).with_committed(control.committed.clone());
        s.open(g)?;
        open.push(s);
    }
    let rate = cfg.storm_rate;
    let commit = |pace_secs: Duration, label: &str| {
        run_paced_with(&cfg.dsn, &partition, &epoch, Pace::Rate(rate), pace_secs, cfg.committers, label, &control)
    };

    say(&format!("reconnect storm: steady state, {n} sessions at {rate} commits/s"));
    let steady = commit(cfg.cell, "storm-steady")?;
    if let Some((_, hi)) = steady.seq_range() {
        for s in &open {
            s.wait_covered(hi, cfg.drain);
        }
    }
    let logs: Vec<SessionLog> = open.iter().flat_map(|s| s.drain_logs()).collect();
    let steady_map: HashMap<i64, Instant> = steady.commits.into_iter().collect();
    let steady_latency = tally::account(&steady_map, &logs).latency;

    say(&format!(
        "reconnect storm: {} waves of {per_group} sessions (pause {} ms) while commits flow",
        cfg.storm_waves,
        cfg.storm_pause.as_millis()
    ));
    let c0 = probe.sample();
    let committer = {
        let (cfg, partition, epoch, control) = (cfg.clone(), partition.clone(), epoch.clone(), control.clone());
        thread::spawn(move || {
            run_paced_with(&cfg.dsn, &partition, &epoch, Pace::Rate(rate), Duration::from_secs(86_400), cfg.committers, "storm", &control)
        })
    };
    thread::sleep(cfg.storm_pause.max(Duration::from_millis(200)));
    let mut out = Storm { sessions: n, rate, steady: steady_latency, ..Storm::default() };
    let (mut reconnect_ms, mut no_jitter_ms) = (Vec::new(), Vec::new());
    let mut failure = None;
    for wave in 0..cfg.storm_waves {
        let g = wave % groups.len();
        let first = g * per_group;
        for (k, closed) in open[g].close_all().into_iter().enumerate() {
            incarnations[first + k].push(closed);
        }
        thread::sleep(cfg.storm_pause);
        match open[g].open(&groups[g]) {
            Ok(hellos) => out.by_pull += hellos.iter().filter(|h| h.requires_sync).count(),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
        out.reconnects += groups[g].len();
        out.not_caught_up += open[g].wait_caught_up(cfg.drain);
        for (total, jitter) in open[g].caught_up().into_iter().flatten() {
            reconnect_ms.push(total.as_secs_f64() * 1e3);
            no_jitter_ms.push(total.saturating_sub(jitter).as_secs_f64() * 1e3);
        }
    }
    control.stop.store(true, Ordering::Relaxed);
    let run = committer.join().map_err(|_| "the storm's committer panicked".to_owned())??;
    if let Some(e) = failure {
        return Err(format!("reconnect storm: {e}"));
    }
    out.achieved = run.achieved();
    if let Some((_, hi)) = run.seq_range() {
        out.behind = open.iter().map(|s| s.wait_covered(hi, cfg.drain)).sum();
    }
    out.cpu = CpuUse::between(&c0, &probe.sample());
    for (g, s) in open.iter_mut().enumerate() {
        for (k, closed) in s.close_all().into_iter().enumerate() {
            incarnations[g * per_group + k].push(closed);
        }
    }
    out.reconnect = Dist::new(reconnect_ms);
    out.reconnect_no_jitter = Dist::new(no_jitter_ms);
    let commits: HashMap<i64, Instant> = run.commits.into_iter().collect();
    account(&mut out, &commits, &incarnations);
    Ok(out)
}

/// Fills the delivery figures of `out` from every connection of every session.
fn account(out: &mut Storm, commits: &HashMap<i64, Instant>, sessions: &[Vec<(HelloInfo, SessionLog)>]) {
    let (Some(&lo), Some(&hi)) = (commits.keys().min(), commits.keys().max()) else {
        return;
    };
    let width = (hi - lo + 1) as usize;
    let mut during = Vec::new();
    for connections in sessions {
        let mut got = vec![false; width];
        for (hello, log) in connections {
            let mut this = vec![false; width];
            for (at, decoded) in &log.deltas {
                for &seq in &decoded.commit_seqs {
                    if seq <= hello.cursor {
                        out.duplicated += 1;
                        continue;
                    }
                    if seq < lo || seq > hi {
                        continue;
                    }
                    let k = (seq - lo) as usize;
                    if this[k] {
                        out.duplicated += 1;
                        continue;
                    }
                    this[k] = true;
                    if got[k] {
                        out.resent += 1;
                    }
                    got[k] = true;
                    if let Some(t) = commits.get(&seq) {
                        during.push(signed_ms(*t, *at));
                    }
                }
            }
            for &seq in log.recovered.iter().filter(|s| (lo..=hi).contains(*s)) {
                got[(seq - lo) as usize] = true;
            }
            out.wakes += log.wakes.len();
            out.error_count += log.errors.len();
            for e in log.errors.iter().take(5usize.saturating_sub(out.errors.len())) {
                out.errors.push(e.clone());
            }
        }
        out.lost += got.iter().filter(|g| !**g).count();
    }
    out.during = Dist::new(during);
}
