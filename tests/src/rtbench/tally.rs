//! Per-cell accounting of what the sessions received against what was
//! committed: latency percentiles (delta receive time − commit statement
//! return, per session and commit), and the delivery checks — every commit of
//! the cell reached every session exactly once and in order, as a delta or
//! (after a wake-up) through the catch-up pull.

use std::collections::HashMap;
use std::time::Instant;

use super::notify_baseline::signed_ms;
use super::sessions::SessionLog;

/// A sorted sample of milliseconds.
#[derive(Clone, Debug, Default)]
pub struct Dist {
    sorted: Vec<f64>,
}

impl Dist {
    /// Sorts `values` (NaN-free).
    pub fn new(mut values: Vec<f64>) -> Dist {
        values.sort_unstable_by(|a, b| a.total_cmp(b));
        Dist { sorted: values }
    }

    /// Sample size.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The `q` quantile (nearest rank), NaN when empty.
    pub fn p(&self, q: f64) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * self.sorted.len() as f64).ceil() as usize).clamp(1, self.sorted.len());
        self.sorted[rank - 1]
    }

    /// Largest value, NaN when empty.
    pub fn max(&self) -> f64 {
        self.sorted.last().copied().unwrap_or(f64::NAN)
    }

    /// Mean, NaN when empty.
    pub fn mean(&self) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        self.sorted.iter().sum::<f64>() / self.sorted.len() as f64
    }
}

/// The delivery accounting of one cell.
#[derive(Clone, Debug, Default)]
pub struct Delivery {
    /// Commit → delta receive latency over every (session, commit), ms.
    pub latency: Dist,
    /// Per commit: first session's receive − commit return, ms (the gateway's
    /// own path, before fanning out).
    pub first: Dist,
    /// Per commit: last − first receive over the sessions, ms (fanout spread).
    pub spread: Dist,
    /// Binary deltas received (all sessions).
    pub deltas: usize,
    /// Commits carried by those deltas (all sessions).
    pub delta_commits: usize,
    /// Wake-ups received, and sessions that got at least one.
    pub wakes: usize,
    pub woken_sessions: usize,
    /// Commits received through catch-up pulls after a wake-up.
    pub recovered: usize,
    /// Commits of the cell that a never-woken session did not receive.
    pub lost: usize,
    /// Commits of the cell that a woken session received neither as a delta
    /// nor through its catch-up pull by the end of the drain.
    pub lost_woken: usize,
    /// A commit received in two deltas by one session.
    pub duplicated: usize,
    /// A commit received both through a catch-up pull and in a delta — allowed
    /// (§8.2: a client skips or re-applies it), counted for information.
    pub overlap: usize,
    /// A commit received in a delta after a higher one by the same session.
    pub out_of_order: usize,
    /// Commits outside the cell's range received during it (earlier cells' stragglers).
    pub foreign: usize,
    /// Session errors (decode failures, closed sockets), first few kept.
    pub errors: Vec<String>,
    pub error_count: usize,
}

/// Accounts the drained `logs` of the cell's sessions against `commits`
/// (`commitSeq` → statement return; the cell's commits are exactly the
/// `commitSeq`s of this map, a contiguous range).
pub fn account(commits: &HashMap<i64, Instant>, logs: &[SessionLog]) -> Delivery {
    let (lo, hi) = match (commits.keys().min(), commits.keys().max()) {
        (Some(lo), Some(hi)) => (*lo, *hi),
        _ => return Delivery::default(),
    };
    let width = (hi - lo + 1) as usize;
    let mut d = Delivery::default();
    let mut latency = Vec::new();
    let mut first: Vec<Option<Instant>> = vec![None; width];
    let mut last: Vec<Option<Instant>> = vec![None; width];
    for log in logs {
        let mut got = vec![false; width];
        let mut max_seen = i64::MIN;
        for (at, decoded) in &log.deltas {
            d.deltas += 1;
            d.delta_commits += decoded.commit_seqs.len();
            for &seq in &decoded.commit_seqs {
                if seq < lo || seq > hi {
                    d.foreign += 1;
                    continue;
                }
                let k = (seq - lo) as usize;
                if got[k] {
                    d.duplicated += 1;
                    continue;
                }
                got[k] = true;
                if seq < max_seen {
                    d.out_of_order += 1;
                }
                max_seen = max_seen.max(seq);
                if let Some(t) = commits.get(&seq) {
                    latency.push(signed_ms(*t, *at));
                }
                first[k] = Some(first[k].map_or(*at, |f| f.min(*at)));
                last[k] = Some(last[k].map_or(*at, |l| l.max(*at)));
            }
        }
        // Pulled after a wake-up: fills gaps; a commit also delivered as a delta is overlap.
        for &seq in &log.recovered {
            if seq < lo || seq > hi {
                continue;
            }
            d.recovered += 1;
            let k = (seq - lo) as usize;
            if got[k] {
                d.overlap += 1;
            }
            got[k] = true;
        }
        d.wakes += log.wakes.len();
        let woken = !log.wakes.is_empty();
        if woken {
            d.woken_sessions += 1;
        }
        let missing = got.iter().filter(|g| !**g).count();
        if woken {
            d.lost_woken += missing;
        } else {
            d.lost += missing;
        }
        d.error_count += log.errors.len();
        for e in &log.errors {
            if d.errors.len() < 5 {
                d.errors.push(e.clone());
            }
        }
    }
    let mut first_ms = Vec::new();
    let mut spread_ms = Vec::new();
    for seq in lo..=hi {
        let k = (seq - lo) as usize;
        if let (Some(f), Some(l), Some(t)) = (first[k], last[k], commits.get(&seq)) {
            first_ms.push(signed_ms(*t, f));
            spread_ms.push(signed_ms(f, l));
        }
    }
    d.latency = Dist::new(latency);
    d.first = Dist::new(first_ms);
    d.spread = Dist::new(spread_ms);
    d
}
