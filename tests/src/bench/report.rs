//! What the benchmark prints: the server's settings, which tables were ever
//! analyzed, one line per measured run, the per-scenario table (medians over
//! the rounds), the statements of the extension's push with their mean times
//! and the time outside SQL, and the pull timings; the ratios and the goals
//! of issue 29 are in [`super::goals`].

use postgres::Client;

use super::backends::Backend;
use super::median;
use super::pull::{PullCase, PullTimes};
use super::scenarios::{RunResult, PRELOADED, REPORT_ORDER, SCENARIOS};
use super::stats::{OutsideSql, StatementStat};

/// `SHOW name`, or `n/a` when the server has no such setting.
pub fn show(admin: &mut Client, name: &str) -> String {
    admin
        .query_one("SELECT current_setting($1, true)", &[&name])
        .ok()
        .and_then(|r| r.get::<_, Option<String>>(0))
        .unwrap_or_else(|| "n/a".to_owned())
}

/// The machine's CPU count and load averages (1, 5, 15 min) — other jobs on
/// the machine skew every throughput, so the report says how busy it was.
pub fn machine_load() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!("{cpus} CPUs, load average {}", load.join(" "))
}

/// Prints the run's header: server, durability mode, knobs, backends, counters.
pub fn print_header(admin: &mut Client, config: &super::config::Config, notes: &[String]) {
    let fsync = show(admin, "fsync");
    let sync_commit = show(admin, "synchronous_commit");
    println!(
        "syncular bench (issue 29) — PostgreSQL {}; machine: {}",
        show(admin, "server_version"),
        machine_load()
    );
    if fsync == "on" && sync_commit == "on" {
        println!("mode: DURABLE — fsync=on, synchronous_commit=on (Postgres's defaults; the goals' setting)");
    } else {
        println!(
            "mode: DIAGNOSTIC — fsync={fsync}, synchronous_commit={sync_commit}: measures CPU, not the disk; NOT the goals' setting"
        );
    }
    println!(
        "server: full_page_writes={}, wal_level={}, autovacuum={}, shared_preload_libraries='{}', pg_stat_statements.track={}",
        show(admin, "full_page_writes"),
        show(admin, "wal_level"),
        show(admin, "autovacuum"),
        show(admin, "shared_preload_libraries"),
        show(admin, "pg_stat_statements.track"),
    );
    println!(
        "runs: {} single-row commits per connection, {} round(s), median reported; backends alternated (plain, notify, ext, floor, …);",
        config.commits, config.rounds
    );
    println!(
        "      first the never-analyzed lane ({} round(s) of \"1 connection\", before the pulls, nothing analyzed yet), then, after",
        config.rounds
    );
    println!("      preload and ANALYZE, every round runs the four other scenarios; a CHECKPOINT precedes every measured run;");
    println!("      every run inserts fresh rows");
    for b in Backend::ALL {
        println!("backend {:<7} {}", b.key(), b.label());
    }
    println!("counters per commit: stmts = Σ pg_stat_statements.calls (top-level + nested, i.e. the extension's SPI statements);");
    println!("      WAL B = insert-LSN delta (includes full-page images: the first change of each page after the CHECKPOINT");
    println!("      writes the whole 8 kB page, so short runs inflate it); no-FPI B = WAL B − FPI bytes (pg_walinspect);");
    println!("      records and FPIs from pg_walinspect / pg_stat_wal. pg_stat_statements is loaded in every run (a few µs per statement).");
    for n in notes {
        println!("note: {n}");
    }
}

/// Prints one measured run as it finishes.
pub fn print_run(r: &RunResult, rounds: usize) {
    println!(
        "round {}/{rounds}  {:<36} {:<7} {:>6} commits {:>7.2} s {:>8.0} commits/s",
        r.round + 1,
        SCENARIOS[r.scenario].label,
        r.backend.key(),
        r.commits,
        r.elapsed.as_secs_f64(),
        r.per_sec()
    );
}

/// Medians over the rounds of one backend in one scenario (per-commit figures).
#[derive(Clone, Debug)]
pub struct Cell {
    /// Median commits per second.
    pub per_sec: f64,
    /// Commits per second of every round, in round order.
    pub rounds: Vec<f64>,
    /// Statements per commit.
    pub statements: Option<f64>,
    /// WAL bytes per commit (FPIs included).
    pub wal_bytes: f64,
    /// WAL bytes per commit without full-page images.
    pub wal_no_fpi: Option<f64>,
    /// WAL records per commit.
    pub records: Option<f64>,
    /// Full-page images per commit.
    pub fpi: Option<f64>,
}

/// The median of `f` over `runs` when every run has it.
fn median_of(runs: &[&RunResult], f: impl Fn(&RunResult) -> Option<f64>) -> Option<f64> {
    let values: Option<Vec<f64>> = runs.iter().map(|r| f(r)).collect();
    values.filter(|v| !v.is_empty()).map(median)
}

/// The [`Cell`] of `backend` in scenario `scenario` (`None`: no run).
pub fn cell(results: &[RunResult], scenario: usize, backend: Backend) -> Option<Cell> {
    let runs: Vec<&RunResult> = results
        .iter()
        .filter(|r| r.scenario == scenario && r.backend == backend)
        .collect();
    let per = |total: Option<i64>, r: &RunResult| total.map(|t| t as f64 / r.commits as f64);
    Some(Cell {
        per_sec: median_of(&runs, |r| Some(r.per_sec()))?,
        rounds: runs.iter().map(|r| r.per_sec()).collect(),
        statements: median_of(&runs, |r| per(r.cost.statements, r)),
        wal_bytes: median_of(&runs, |r| per(Some(r.cost.wal_bytes), r))?,
        wal_no_fpi: median_of(&runs, |r| {
            per(r.cost.fpi_bytes.map(|f| r.cost.wal_bytes - f), r)
        }),
        records: median_of(&runs, |r| per(r.cost.wal_records, r)),
        fpi: median_of(&runs, |r| per(r.cost.wal_fpi, r)),
    })
}

/// `v` with `decimals` decimals, or `n/a`.
pub fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.decimals$}"))
}

/// Prints the per-scenario table.
pub fn print_table(results: &[RunResult], preload: usize) {
    println!();
    println!("push: commits/s = median over the rounds (then each round's); stmts, WAL B, no-FPI B, records, FPIs = per commit, median");
    println!(
        "{:<12} {:>10}  {:<26} {:>6} {:>7} {:>8} {:>8} {:>6}",
        "backend", "commits/s", "each round", "stmts", "WAL B", "no-FPI B", "records", "FPIs"
    );
    for s in REPORT_ORDER {
        println!("{}", scenario_label(s, preload));
        for b in Backend::ALL {
            let Some(c) = cell(results, s, b) else {
                continue;
            };
            let rounds: Vec<String> = c.rounds.iter().map(|v| format!("{v:.0}")).collect();
            println!(
                "  {:<10} {:>10.0}  {:<26} {:>6} {:>7.0} {:>8} {:>8} {:>6}",
                b.key(),
                c.per_sec,
                rounds.join(" "),
                opt(c.statements, 2),
                c.wal_bytes,
                opt(c.wal_no_fpi, 0),
                opt(c.records, 2),
                opt(c.fpi, 2)
            );
        }
    }
}

/// The label of scenario `s` (the preloaded one with its row count).
pub fn scenario_label(s: usize, preload: usize) -> String {
    if s == PRELOADED {
        format!("1 connection, partition already holding {preload} rows")
    } else {
        SCENARIOS[s].label.to_owned()
    }
}

/// Statements of the breakdown printed (the time outside SQL sums them all).
pub const BREAKDOWN_SHOWN: usize = 20;

/// Prints the statements of the extension's single-row commit (the
/// [`BREAKDOWN_SHOWN`] most called), per commit, with their mean times, then
/// the time outside SQL per push.
pub fn print_breakdown(breakdown: &[StatementStat], commits: usize, outside: &Result<OutsideSql, String>) {
    println!();
    println!(
        "statements of the extension run (1 connection, last round, {commits} commits): calls per commit, calls, mean ms"
    );
    for s in breakdown.iter().take(BREAKDOWN_SHOWN) {
        let text: String = s.query.chars().take(100).collect();
        println!(
            "  {:>6.2} {:>6} {:>9}  {:<9} {text}",
            s.calls as f64 / commits as f64,
            s.calls,
            opt(s.mean_ms, 4),
            match s.nested {
                Some(true) => "nested",
                Some(false) => "top-level",
                None => "",
            }
        );
    }
    if breakdown.len() > BREAKDOWN_SHOWN {
        println!("  … and {} more statements", breakdown.len() - BREAKDOWN_SHOWN);
    }
    match outside {
        Ok(o) => {
            println!(
                "time outside SQL per push: {:.4} ms (mean of the top-level SELECT syncular.sync(…), {} calls) − {:.4} ms",
                o.push_ms, o.pushes, o.nested_ms
            );
            println!(
                "      (Σ over all {} nested statements of calls ÷ {} × mean) = {:.4} ms",
                breakdown.iter().filter(|s| s.nested == Some(true)).count(),
                o.pushes,
                o.outside_ms
            );
            println!("      (one level of nesting assumed: a statement nested in a nested one would count twice)");
        }
        Err(why) => println!("time outside SQL per push: n/a ({why})"),
    }
}

/// Prints the pull timings, before and after `ANALYZE`.
pub fn print_pulls(pulls: &[(PullCase, PullTimes, PullTimes)], reps: usize) {
    println!();
    println!(
        "pull (median of {reps}, ms; client round trip)   {:<16} {:>8} {:>16} {:>16} {:>11} {:>6}",
        "log tables", "pull", "SELECT app rows", "SELECT log rows", "response B", "stmts"
    );
    for (case, before, after) in pulls {
        for (state, t) in [("never analyzed", before), ("after ANALYZE", after)] {
            println!(
                "  {:<43} {:<16} {:>8.3} {:>16.3} {:>16.3} {:>11} {:>6}",
                case.label(),
                state,
                t.pull.as_secs_f64() * 1000.0,
                t.select_app.as_secs_f64() * 1000.0,
                t.select_log.as_secs_f64() * 1000.0,
                t.response_bytes,
                t.statements
                    .map_or_else(|| "n/a".to_owned(), |n| n.to_string())
            );
        }
    }
    println!("  SELECT app rows = SELECT … FROM public.tasks WHERE _sync_partition = $1 (the window's rows);");
    println!("  SELECT log rows = SELECT … FROM syncular.sync_changes WHERE partition = $1 AND commit_seq > cursor ORDER BY commit_seq, idx;");
    println!("  stmts = statements one pull runs (pg_stat_statements, top-level + nested)");
}

/// Prints whether each table was ever analyzed.
pub fn print_analyze_status(when: &str, status: &[(String, String, String, i64)]) {
    println!("{when}:");
    for (table, manual, auto, stats) in status {
        println!("  {table:<30} last_analyze {manual:<32} last_autoanalyze {auto:<10} pg_statistic rows {stats}");
    }
}
