//! The end of the report: the ratios of every scenario, the goals of issue 29
//! (met / not met) and the figures kept as information (statements and WAL
//! per commit, the preloaded partition's slowdown, the floor's own
//! never-analyzed ratio).

use super::backends::Backend;
use super::pull::{PullCase, PullTimes};
use super::report::{cell, opt, scenario_label};
use super::scenarios::{RunResult, EIGHT_SHARED, EIGHT_SPREAD, NEVER_ANALYZED, ONE, PRELOADED, REPORT_ORDER};
use super::stats::OutsideSql;

/// Extension ÷ seed's floor median commits/s, at least (each of the three layouts).
pub const GOAL_EXT_VS_FLOOR: f64 = 0.90;
/// Time outside SQL per push, milliseconds, at most.
pub const GOAL_OUTSIDE_SQL_MS: f64 = 0.05;
/// Never-analyzed ÷ analyzed "1 connection" commits/s of the extension: within these bounds.
pub const GOAL_NEVER_ANALYZED_BAND: (f64, f64) = (0.90, 1.10);
/// Pull of 1,000 one-row commits, milliseconds, at most.
pub const GOAL_PULL_MS: f64 = 2.5;

/// One goal of the issue and its verdict.
struct Goal {
    what: String,
    value: String,
    bound: String,
    met: Option<bool>,
}

/// `v` rounded to `decimals`: goals are judged as printed (per-connection
/// one-offs — a backend's first request loads the schema and binds its
/// client — amortize below the printed precision).
fn as_printed(v: f64, decimals: usize) -> f64 {
    let scale = 10f64.powi(decimals as i32);
    (v * scale).round() / scale
}

impl Goal {
    fn at_least(what: impl Into<String>, value: Option<f64>, bound: f64, decimals: usize) -> Goal {
        Goal {
            what: what.into(),
            value: opt(value, decimals),
            bound: format!("≥ {bound:.2}"),
            met: value.map(|v| as_printed(v, decimals) >= bound),
        }
    }

    fn at_most(what: impl Into<String>, value: Option<f64>, bound: f64, decimals: usize) -> Goal {
        Goal {
            what: what.into(),
            value: opt(value, decimals),
            bound: format!("≤ {bound}"),
            met: value.map(|v| as_printed(v, decimals) <= bound),
        }
    }

    fn within(what: impl Into<String>, value: Option<f64>, (low, high): (f64, f64), decimals: usize) -> Goal {
        Goal {
            what: what.into(),
            value: opt(value, decimals),
            bound: format!("{low:.2}–{high:.2}"),
            met: value.map(|v| {
                let v = as_printed(v, decimals);
                low <= v && v <= high
            }),
        }
    }
}

/// Prints the ratios of every scenario (extension and floor against the baselines).
pub fn print_ratios(results: &[RunResult], preload: usize) {
    let rate = |s: usize, b: Backend| cell(results, s, b).map(|c| c.per_sec);
    let ratio = |s: usize, top: Backend, base: Backend| Some(rate(s, top)? / rate(s, base)?);
    println!();
    println!(
        "{:<52} {:>10} {:>18} {:>10} {:>12} {:>20}",
        "ratios of median commits/s", "ext÷plain", "ext÷(plain+notify)", "ext÷floor", "floor÷plain", "floor÷(plain+notify)"
    );
    for s in REPORT_ORDER {
        println!(
            "{:<52} {:>10} {:>18} {:>10} {:>12} {:>20}",
            scenario_label(s, preload),
            opt(ratio(s, Backend::Extension, Backend::Plain), 3),
            opt(ratio(s, Backend::Extension, Backend::PlainNotify), 3),
            opt(ratio(s, Backend::Extension, Backend::SeedFloor), 3),
            opt(ratio(s, Backend::SeedFloor, Backend::Plain), 3),
            opt(ratio(s, Backend::SeedFloor, Backend::PlainNotify), 3)
        );
    }
    println!("  floor = the rows a push writes into the seed's tables, one statement, nothing else: no server keeping");
    println!("  those tables and indexes can beat it, so floor÷plain bounds what ext÷plain can reach on this machine.");
}

/// Prints the goals of issue 29 with verdicts, then the information lines.
/// `outside`: the time outside SQL of the extension's 1-connection run of the
/// last round (`Err`: why there is none).
pub fn print_goals(
    results: &[RunResult],
    preload: usize,
    pulls: &[(PullCase, PullTimes, PullTimes)],
    outside: &Result<OutsideSql, String>,
    durable: bool,
) {
    let rate = |s: usize, b: Backend| cell(results, s, b).map(|c| c.per_sec);
    let ext_vs_floor = |s: usize| Some(rate(s, Backend::Extension)? / rate(s, Backend::SeedFloor)?);
    let never_vs_analyzed = |b: Backend| Some(rate(NEVER_ANALYZED, b)? / rate(ONE, b)?);
    let mut goals = Vec::new();
    for s in [ONE, EIGHT_SHARED, EIGHT_SPREAD] {
        goals.push(Goal::at_least(
            format!("{}: ext ÷ floor", scenario_label(s, preload)),
            ext_vs_floor(s),
            GOAL_EXT_VS_FLOOR,
            3,
        ));
    }
    goals.push(Goal::at_most(
        "time outside SQL per push (ext, 1 connection, last round), ms",
        outside.as_ref().ok().map(|o| o.outside_ms),
        GOAL_OUTSIDE_SQL_MS,
        3,
    ));
    goals.push(Goal::within(
        "1 connection: ext never-analyzed ÷ ext analyzed commits/s",
        never_vs_analyzed(Backend::Extension),
        GOAL_NEVER_ANALYZED_BAND,
        3,
    ));
    for (case, before, after) in pulls
        .iter()
        .filter(|(c, ..)| c.commits == 1000 && c.rows_per_commit == 1)
    {
        for (state, t) in [("never-analyzed tables", before), ("after ANALYZE", after)] {
            goals.push(Goal::at_most(
                format!("pull of {} ({state}), ms", case.label()),
                Some(t.pull.as_secs_f64() * 1000.0),
                GOAL_PULL_MS,
                3,
            ));
        }
    }
    println!();
    let setting = if durable {
        "durable server"
    } else {
        "DIAGNOSTIC fsync=off server — verdicts do not count"
    };
    println!("goals of issue 29 (one run, {setting}):");
    for g in &goals {
        let verdict = match g.met {
            Some(true) => "met",
            Some(false) => "NOT MET",
            None => "n/a",
        };
        println!("  {:<84} {:>9}  goal {:<9} {verdict}", g.what, g.value, g.bound);
    }
    if let Err(why) = outside {
        println!("  (time outside SQL: n/a — {why})");
    }

    let ext_one = cell(results, ONE, Backend::Extension);
    let info = [
        (
            "1 connection: floor never-analyzed ÷ floor analyzed commits/s (reference)".to_owned(),
            opt(never_vs_analyzed(Backend::SeedFloor), 3),
        ),
        (
            "statements per single-row commit (ext, 1 connection)".to_owned(),
            opt(ext_one.as_ref().and_then(|c| c.statements), 2),
        ),
        (
            "WAL bytes per single-row commit (ext, 1 connection, FPIs included)".to_owned(),
            opt(ext_one.as_ref().map(|c| c.wal_bytes), 0),
        ),
        (
            "WAL bytes per single-row commit (ext, 1 connection, without FPIs)".to_owned(),
            opt(ext_one.as_ref().and_then(|c| c.wal_no_fpi), 0),
        ),
        (
            format!("slowdown into a {preload}-row partition (ext empty ÷ ext preloaded commits/s)"),
            opt(
                rate(ONE, Backend::Extension)
                    .zip(rate(PRELOADED, Backend::Extension))
                    .map(|(e, p)| e / p),
                3,
            ),
        ),
    ];
    println!("information (not goals):");
    for (what, value) in &info {
        println!("  {what:<84} {value:>9}");
    }
}
