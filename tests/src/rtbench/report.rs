//! The printed result: one table per measurement (the goals are printed by
//! module `goals`). Never fails on a timing.

use super::notify_baseline::BaselineRun;
use super::procstat::CpuUse;
use super::rounds::{Layout, Path, RoundRun};
use super::storm::Storm;
use super::tally::{Delivery, Dist};

/// One latency cell.
#[derive(Clone, Debug)]
pub struct Cell {
    pub sessions: usize,
    pub rate: u32,
    pub achieved: f64,
    pub max_start_lag_ms: f64,
    pub baseline: BaselineRun,
    pub delivery: Delivery,
    /// Sessions still behind the last commit when the drain gave up.
    pub behind: usize,
    /// CPU while committing.
    pub cpu: CpuUse,
    /// CPU seconds of the gateway process over the whole cell (commits and drain).
    pub gw_cpu_secs: f64,
    /// CPU time per delta received, µs, over the whole cell (commits and
    /// drain): the gateway's (send + its ack) and this process's (receive,
    /// decode, ack).
    pub gw_us_per_delta: f64,
    pub bench_us_per_delta: f64,
    /// `syncular.realtime_deltas` calls during the cell and their mean duration, ms
    /// (from the gateway's `/metrics`).
    pub delta_calls: Option<f64>,
    pub delta_call_ms: Option<f64>,
}

/// Idle-session memory.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub sessions: usize,
    pub before_kib: u64,
    pub after_kib: u64,
}

impl Memory {
    /// KiB per idle session.
    pub fn per_session(&self) -> f64 {
        (self.after_kib as f64 - self.before_kib as f64) / self.sessions.max(1) as f64
    }
}

/// A figure with 2–3 significant digits, `—` for NaN.
pub fn f(v: f64) -> String {
    if v.is_nan() {
        "—".to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// `p50 / p95 / p99`.
pub fn pct3(d: &Dist) -> String {
    format!("{} / {} / {}", f(d.p(0.50)), f(d.p(0.95)), f(d.p(0.99)))
}

fn opt(v: Option<f64>) -> String {
    v.map(f).unwrap_or_else(|| "—".to_owned())
}

/// Prints the three latency tables.
pub fn print_cells(cells: &[Cell]) {
    println!();
    println!("commit → delta latency, ms (delta receive − commit statement return, every session × commit)");
    println!("next to bare NOTIFY → LISTEN on the same server at the same rate");
    println!(
        "{:<20} {:>16} {:>24} {:>8} {:>24} {:>10}",
        "sessions @ rate/s", "reached/s", "delta p50 / p95 / p99", "max", "NOTIFY p50 / p95 / p99", "p95 ratio"
    );
    for c in cells {
        let ratio = c.delivery.latency.p(0.95) / c.baseline.latency.p(0.95);
        println!(
            "{:<20} {:>16} {:>24} {:>8} {:>24} {:>10}",
            format!("{} @ {}", c.sessions, c.rate),
            format!("{} (N {})", f(c.achieved), f(c.baseline.achieved)),
            pct3(&c.delivery.latency),
            f(c.delivery.latency.max()),
            pct3(&c.baseline.latency),
            format!("{}×", f(ratio)),
        );
    }
    println!();
    println!("delivery (a correct run: lost, dup, out-of-order all 0; woken sessions catch up by pull)");
    println!(
        "{:<20} {:>9} {:>8} {:>7} {:>7} {:>9} {:>5} {:>10} {:>5} {:>5} {:>8} {:>7} {:>6}",
        "sessions @ rate/s", "deltas", "c/delta", "wakes", "woken", "recovered", "lost", "lost-woken",
        "dup", "ooo", "overlap", "behind", "errors"
    );
    for c in cells {
        let d = &c.delivery;
        println!(
            "{:<20} {:>9} {:>8} {:>7} {:>7} {:>9} {:>5} {:>10} {:>5} {:>5} {:>8} {:>7} {:>6}",
            format!("{} @ {}", c.sessions, c.rate),
            d.deltas,
            f(d.delta_commits as f64 / d.deltas.max(1) as f64),
            d.wakes,
            d.woken_sessions,
            d.recovered,
            d.lost,
            d.lost_woken,
            d.duplicated,
            d.out_of_order,
            d.overlap,
            c.behind,
            d.error_count,
        );
        for e in &d.errors {
            println!("    session error: {e}");
        }
        if c.baseline.lost > 0 {
            println!("    NOTIFY baseline: {} notifications never arrived", c.baseline.lost);
        }
    }
    println!();
    println!("where the time goes (first = fastest session's latency per commit; spread = last − first session)");
    println!(
        "{:<20} {:>16} {:>16} {:>11} {:>8} {:>16} {:>30}",
        "sessions @ rate/s", "first p50 / p95", "spread p50/p95", "delta calls", "call ms", "µs/delta gw / us", "CPU while committing (1 core = 100%)"
    );
    for c in cells {
        let d = &c.delivery;
        println!(
            "{:<20} {:>16} {:>16} {:>11} {:>8} {:>16} {:>30}",
            format!("{} @ {}", c.sessions, c.rate),
            format!("{} / {}", f(d.first.p(0.5)), f(d.first.p(0.95))),
            format!("{} / {}", f(d.spread.p(0.5)), f(d.spread.p(0.95))),
            opt(c.delta_calls),
            opt(c.delta_call_ms),
            format!("{} / {}", f(c.gw_us_per_delta), f(c.bench_us_per_delta)),
            c.cpu.render(),
        );
    }
    println!("(call ms = mean syncular.realtime_deltas call; µs/delta = CPU time per delta received, gateway / this process)");
}

/// The best (most rounds/s) run of each (layout, path), in first-run order.
pub fn best_rounds(runs: &[RoundRun]) -> Vec<RoundRun> {
    let mut best: Vec<RoundRun> = Vec::new();
    for r in runs {
        match best
            .iter_mut()
            .find(|b| b.layout == r.layout && b.path == r.path && b.connections == r.connections)
        {
            Some(b) if b.per_sec() < r.per_sec() => *b = r.clone(),
            Some(_) => {}
            None => best.push(r.clone()),
        }
    }
    best
}

/// Per-round time of `r` relative to the direct `syncular.sync` run of the same layout, − 1.
pub fn overhead(runs: &[RoundRun], r: &RoundRun) -> Option<f64> {
    let sql = runs
        .iter()
        .find(|s| s.path == Path::Sql && s.layout == r.layout && s.connections == r.connections)?;
    Some(sql.per_sec() / r.per_sec() - 1.0)
}

/// Prints the round comparison: every run, then the best of each side.
pub fn print_rounds(all: &[RoundRun]) {
    let runs = best_rounds(all);
    let repeats = all.len() / runs.len().max(1);
    let mut groups: Vec<(usize, Layout)> = Vec::new();
    for r in &runs {
        if !groups.contains(&(r.connections, r.layout)) {
            groups.push((r.connections, r.layout));
        }
    }
    println!();
    println!(
        "sync rounds (1-row push + incremental pull; pull only where said), closed loop, same number of connections; best of {repeats} interleaved runs"
    );
    println!(
        "{:<54} {:>5} {:>8} {:>9} {:>20} {:>11}  CPU (every run's rounds/s)",
        "path", "conns", "rounds", "rounds/s", "ms p50 / p95 / p99", "vs SQL sync"
    );
    for (connections, layout) in groups {
        println!("  {connections} connection(s), {}", layout.label());
        for r in runs
            .iter()
            .filter(|r| r.layout == layout && r.connections == connections)
        {
            let every: Vec<String> = all
                .iter()
                .filter(|x| x.layout == r.layout && x.path == r.path && x.connections == r.connections)
                .map(|x| f(x.per_sec()))
                .collect();
            println!(
                "{:<54} {:>5} {:>8} {:>9} {:>20} {:>11}  {} ({})",
                r.path.label(),
                r.connections,
                r.rounds,
                f(r.per_sec()),
                pct3(&r.latency),
                overhead(&runs, r).map(|o| format!("{:+.0}%", o * 100.0)).unwrap_or_default(),
                r.cpu.map(|c| c.render()).unwrap_or_default(),
                every.join(", "),
            );
        }
    }
    println!("(vs SQL sync: per-round time relative to SELECT syncular.sync in the same layout; + = slower)");
}

/// Prints the commit capacity probe: `(connections, CommitRun achieved/s)`.
pub fn print_capacity(capacity: &[(usize, f64)]) {
    let parts: Vec<String> = capacity
        .iter()
        .map(|(n, r)| format!("{} on {n} connection{}", f(*r), if *n == 1 { "" } else { "s" }))
        .collect();
    println!(
        "commit capacity (single-row syncular.sync, closed loop, one partition without sessions): {} commits/s",
        parts.join(", ")
    );
}

/// Prints the send floor.
pub fn print_send_floor(fl: &super::floors::send::SendFloor) {
    println!(
        "send floor (one thread writing a {}-byte frame to each of {} loopback sockets, {} writes): {} µs CPU per write (user {} + system {})",
        fl.bytes,
        fl.sockets,
        fl.writes,
        f(fl.us_per_write()),
        f(fl.user_us),
        f(fl.sys_us)
    );
}

/// Prints the memory sample.
pub fn print_memory(m: &Memory) {
    println!();
    println!(
        "gateway memory: VmRSS {} KiB before, {} KiB after opening {} idle sessions → {} KiB per session",
        m.before_kib,
        m.after_kib,
        m.sessions,
        f(m.per_session())
    );
}

/// Prints the reconnect storm's figures next to the same sessions' steady state.
pub fn print_storm(s: &Storm) {
    println!();
    println!(
        "reconnect storm: {} sessions, commits at {}/s (reached {}/s), {} reconnects",
        s.sessions,
        s.rate,
        f(s.achieved),
        s.reconnects
    );
    println!("  {:<64} {:>24}", "ms", "p50 / p95 / p99");
    println!("  {:<64} {:>24}", "reconnect → caught up (socket opened → holds every earlier commit)", pct3(&s.reconnect));
    println!("  {:<64} {:>24}", "  the same without the client's jitter wait (BENCH_RT_WAKE_JITTER_MS)", pct3(&s.reconnect_no_jitter));
    println!("  {:<64} {:>24}", "baseline: commit → delta, same sessions, steady state", pct3(&s.steady));
    println!("  {:<64} {:>24}", "commit → delta during the storm (every delta)", pct3(&s.during));
    println!(
        "  caught up by pull (hello requiresSync) {}; not caught up within the drain {}; wakes {}; behind at the end {}",
        s.by_pull, s.not_caught_up, s.wakes, s.behind
    );
    println!(
        "  deliveries: lost {}, duplicated {} (both must be 0); re-sent after a reconnect {} (allowed: the acked cursor lagged)",
        s.lost, s.duplicated, s.resent
    );
    println!("  errors {}; CPU {}", s.error_count, s.cpu.render());
    for e in &s.errors {
        println!("    session error: {e}");
    }
}
