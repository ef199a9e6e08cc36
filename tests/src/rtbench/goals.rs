//! The goals of issue 30 ("Realtime that any backend can host"), measured
//! and printed met / not met for each gateway side by side; issue 8's goals
//! that are no longer goals are kept as information lines. Never fails on a
//! timing.

use super::gateway::Kind;
use super::lane::Lane;
use super::report::{best_rounds, f, overhead, Cell};
use super::rounds::{Layout, Path};
use super::floors::send::SendFloor;

/// Gateway CPU per (delta, session) delivery, µs, in the largest cell.
pub const GOAL_FANOUT_US: f64 = 1.0;
/// Share of the asked commit rate the committers reach in the largest cell.
pub const GOAL_REACHED: f64 = 0.95;
/// Commit → delta p95 in the largest cell, ms.
pub const GOAL_P95_MS: f64 = 20.0;
/// A `POST /sync` round's time ÷ the same round through `SELECT syncular.sync`.
pub const GOAL_ROUND_RATIO: f64 = 1.2;
/// Issue 8's goals, now information.
pub const ISSUE8_P95_MS: f64 = 5.0;
pub const ISSUE8_KIB_PER_SESSION: f64 = 50.0;

/// How one gateway's lane ended.
#[derive(Clone, Debug)]
pub enum Outcome {
    Ran(Box<Lane>),
    Skipped(String),
    Failed(String),
}

/// The cell the goals are judged on: most sessions, then highest rate.
pub fn judged_cell(cells: &[Cell]) -> Option<&Cell> {
    cells.iter().max_by_key(|c| (c.sessions, c.rate))
}

fn yes(met: bool) -> &'static str {
    if met {
        "yes"
    } else {
        "NO"
    }
}

fn info(met: bool) -> &'static str {
    if met {
        "(yes)"
    } else {
        "(no)"
    }
}

/// One row: label, and per lane `(measured, met)` (None: lane did not run).
type Row = (String, Vec<Option<(String, &'static str)>>);

/// Prints the goals table (one column per gateway), the definitions, and the
/// machine's commit capacity (`(connections, commits/s)`).
pub fn print_goals(lanes: &[(Kind, Outcome)], capacity: &[(usize, f64)], floor: &SendFloor) {
    let ran: Vec<Option<&Lane>> = lanes
        .iter()
        .map(|(_, o)| match o {
            Outcome::Ran(l) => Some(&**l),
            _ => None,
        })
        .collect();
    let cell_of = |l: &Lane| judged_cell(&l.cells).cloned();
    let judged = ran.iter().flatten().find_map(|l| cell_of(l));
    let what = judged
        .as_ref()
        .map(|c| format!("{} sessions × {} commits/s", c.sessions, c.rate))
        .unwrap_or_else(|| "no cell ran".to_owned());
    let per_lane = |g: &dyn Fn(&Lane) -> Option<(String, &'static str)>| -> Vec<Option<(String, &'static str)>> {
        ran.iter().map(|l| l.map(|l| g(l).unwrap_or(("not run".to_owned(), "n/a")))).collect()
    };
    let mut rows: Vec<Row> = Vec::new();
    rows.push((
        format!("fan-out CPU ≤ {GOAL_FANOUT_US} µs per (delta, session) delivery"),
        per_lane(&|l| cell_of(l).map(|c| (format!("{} µs", f(c.gw_us_per_delta)), yes(c.gw_us_per_delta <= GOAL_FANOUT_US)))),
    ));
    rows.push((
        format!("committers reach ≥ {:.0} % of the asked rate", GOAL_REACHED * 100.0),
        per_lane(&|l| {
            cell_of(l).map(|c| {
                let share = c.achieved / c.rate as f64;
                (format!("{}/s ({:.0} %)", f(c.achieved), share * 100.0), yes(share >= GOAL_REACHED))
            })
        }),
    ));
    rows.push((
        format!("commit → delta p95 ≤ {GOAL_P95_MS} ms (bare NOTIFY p95)"),
        per_lane(&|l| {
            cell_of(l).map(|c| {
                let p95 = c.delivery.latency.p(0.95);
                (format!("{} ms ({} ms)", f(p95), f(c.baseline.latency.p(0.95))), yes(p95 <= GOAL_P95_MS))
            })
        }),
    ));
    rows.push((
        format!("POST /sync round ≤ {GOAL_ROUND_RATIO}× SELECT syncular.sync"),
        per_lane(&|l| {
            let best = best_rounds(&l.rounds);
            let http = best
                .iter()
                .filter(|r| r.path == Path::Http && r.layout == Layout::Own)
                .max_by_key(|r| r.connections)?;
            let ratio = 1.0 + overhead(&best, http)?;
            let floor = best
                .iter()
                .find(|r| r.path == Path::Relay && r.layout == Layout::Own && r.connections == http.connections)
                .and_then(|relay| overhead(&best, relay))
                .map_or(String::new(), |o| format!("; bare relay {}×", f(1.0 + o)));
            Some((format!("{}× ({} conns, own{floor})", f(ratio), http.connections), yes(ratio <= GOAL_ROUND_RATIO)))
        }),
    ));
    rows.push((
        "reconnect storm: lost / duplicated deliveries = 0".to_owned(),
        per_lane(&|l| l.storm.as_ref().map(|s| (format!("{} / {}", s.lost, s.duplicated), yes(s.correct())))),
    ));
    let info_rows: Vec<Row> = vec![
        (
            "reconnect → caught up p95 (steady commit → delta p95)".to_owned(),
            per_lane(&|l| {
                l.storm.as_ref().map(|s| {
                    (format!("{} ms ({} ms)", f(s.reconnect.p(0.95)), f(s.steady.p(0.95))), "")
                })
            }),
        ),
        (
            "  the same without the client's §8.4 jitter wait".to_owned(),
            per_lane(&|l| l.storm.as_ref().map(|s| (format!("{} ms", f(s.reconnect_no_jitter.p(0.95))), ""))),
        ),
        (
            format!("issue 8: commit → delta p95 ≤ {ISSUE8_P95_MS} ms, same cell"),
            per_lane(&|l| {
                cell_of(l).map(|c| {
                    let p95 = c.delivery.latency.p(0.95);
                    (format!("{} ms", f(p95)), info(p95 <= ISSUE8_P95_MS))
                })
            }),
        ),
        (
            format!("issue 8: gateway memory ≤ {ISSUE8_KIB_PER_SESSION} KiB per idle session"),
            per_lane(&|l| {
                let per = l.memory.per_session();
                Some((format!("{} KiB ({} sessions)", f(per), l.memory.sessions), info(per <= ISSUE8_KIB_PER_SESSION)))
            }),
        ),
    ];

    println!();
    for (kind, o) in lanes {
        match o {
            Outcome::Skipped(why) => println!("{} gateway: skipped: {why}", kind.name()),
            Outcome::Failed(why) => println!("{} gateway: FAILED: {why}", kind.name()),
            Outcome::Ran(_) => {}
        }
    }
    let head: Vec<String> = lanes.iter().map(|(k, _)| format!("{:>32} {:>5}", k.name(), "met")).collect();
    println!("{:<58} {}", format!("goal (issue 30), at {what}"), head.join("  "));
    let print = |rows: &[Row]| {
        for (label, cols) in rows {
            let cols: Vec<String> = cols
                .iter()
                .zip(lanes)
                .map(|(c, (_, o))| match (c, o) {
                    (Some((m, met)), _) => format!("{m:>32} {met:>5}"),
                    (None, Outcome::Skipped(_)) => format!("{:>32} {:>5}", "skipped", ""),
                    (None, _) => format!("{:>32} {:>5}", "failed", ""),
                })
                .collect();
            println!("{label:<58} {}", cols.join("  "));
        }
    };
    print(&rows);
    println!("information:");
    print(&info_rows);
    for l in ran.iter().flatten() {
        if let Some(c) = cell_of(l) {
            println!(
                "  {}: fan-out CPU = {:.2} s of gateway CPU over the cell (first commit → last delivery) ÷ {} (delta, session) deliveries; per (commit, session) {} µs",
                l.kind.name(),
                c.gw_cpu_secs,
                c.delivery.deltas,
                f(c.gw_cpu_secs * 1e6 / c.delivery.delta_commits.max(1) as f64)
            );
        }
    }
    println!(
        "  (gateway CPU: utime + stime of the process holding the gateway's listening socket and its children; a delivery is one binary delta message received by one session)"
    );
    println!(
        "  send floor on this machine: {} µs CPU per bare write of a {}-byte frame to one of {} loopback sockets (system {} µs) — a delivery costs at least one such write, so the fan-out goal of {GOAL_FANOUT_US} µs is {} here",
        f(floor.us_per_write()),
        floor.bytes,
        floor.sockets,
        f(floor.sys_us),
        if floor.us_per_write() > GOAL_FANOUT_US { "BELOW the floor (unreachable by any gateway)" } else { "above the floor" }
    );
    let parts: Vec<String> = capacity
        .iter()
        .map(|(n, r)| format!("{} on {n} connection{}", f(*r), if *n == 1 { "" } else { "s" }))
        .collect();
    let best = capacity.iter().map(|c| c.1).fold(0.0, f64::max);
    let reachable = judged.as_ref().map(|c| {
        if best >= c.rate as f64 {
            format!(" — {}/s was reachable on this machine", c.rate)
        } else {
            format!(" — {}/s was NOT reachable at all on this machine", c.rate)
        }
    });
    println!(
        "  commit capacity (single-row syncular.sync, closed loop, no sessions): {} commits/s{}",
        parts.join(", "),
        reachable.unwrap_or_default()
    );
    for l in ran.iter().flatten() {
        if let Some(c) = cell_of(l).filter(|c| c.achieved < GOAL_REACHED * c.rate as f64) {
            println!(
                "  {}: the judged cell reached {}/s of {}/s: its latency and CPU figures were measured at that rate",
                l.kind.name(),
                f(c.achieved),
                c.rate
            );
        }
    }
}
