//! `bench`: the issue-29 benchmark — the commit path of the extension next to
//! plain upserts and the seed's floor on the same server in the same run, on
//! never-analyzed and on analyzed tables (modules in `tests/src/bench/`).
//!
//! 1. Pull, first, on a fresh server (autovacuum off, the log tables never
//!    analyzed — the report prints `last_analyze` / `last_autoanalyze`): an
//!    incremental pull of 1,000 one-row commits and of 10 commits × 100
//!    rows, next to plain `SELECT`s of the same rows.
//! 2. Never-analyzed lane (nothing analyzed yet; the report prints the
//!    status of `public.tasks`, `public.bench_plain` and the log tables): an
//!    unreported warm-up, then `BENCH_ROUNDS` rounds of the "1 connection"
//!    scenario with the backends alternated; then `ANALYZE` of the log tables
//!    and the pulls of 1. again.
//! 3. Preload: 100,000 rows into one extension partition (500-operation
//!    commits) and into one key of the plain table; then `ANALYZE` (all) and
//!    the warm-up again.
//! 4. Push: `BENCH_ROUNDS` rounds; each round runs every scenario of
//!    `EACH_ROUND` (1 connection; 8 connections on one partition; 8
//!    connections on 8 partitions; 1 connection into the preloaded partition)
//!    with the backends alternated (plain upsert, plain upsert + `pg_notify`,
//!    the extension, the seed's floor), reading statements and WAL per run;
//!    after the extension's 1-connection run of the last round, the
//!    `pg_stat_statements` breakdown (calls and mean times), from which the
//!    time outside SQL per push follows.
//! 5. The table of medians, the breakdown, the pulls, the ratios, the goals
//!    of issue 29 (extension ÷ floor ≥ 0.90 on the three layouts; time
//!    outside SQL ≤ 0.05 ms per push; never-analyzed ÷ analyzed within
//!    0.90–1.10; pull of 1,000 one-row commits ≤ 2.5 ms on both) and, as
//!    information, statements and WAL bytes per commit and the preloaded
//!    partition's slowdown.
//!
//! Usage: `bench [DSN]` (default `$SYNCULAR_TEST_DSN`); `scripts/bench`
//! builds it in release mode and starts its own server. Knobs: see
//! `syncular_integration_tests::bench::config`; `BENCH_WITHOUT_CAPTURE=1`
//! (diagnostic) drops the capture triggers of `public.tasks` first, to show
//! their share of a push; `BENCH_PROFILE_SECONDS=N` (diagnostic) skips the
//! never-analyzed lane and the push measurements and only pushes on 1
//! connection for about N seconds after the warm-up, so `perf record -a` sees
//! nothing but the extension's commit path; with `BENCH_PROFILE_SCENARIO=K`
//! (an index into `SCENARIOS` among `EACH_ROUND`, default 0) it pushes that
//! scenario's way instead (1: 8 connections on one partition).
//! `BENCH_PROFILE_FRESH=1` with it runs that loop (1 connection) first, on
//! never-analyzed tables (no preload, no `ANALYZE`).
//! `BENCH_PULL_BREAKDOWN=1` (diagnostic) lists the statements one pull runs;
//! `BENCH_PROFILE_PULL_SECONDS=N` (diagnostic) only repeats the pull of
//! 1,000 one-row commits for about N seconds.

use std::process::ExitCode;
use std::time::Instant;

use syncular_integration_tests::bench::backends::Backend;
use syncular_integration_tests::bench::config::Config;
use syncular_integration_tests::bench::goals;
use syncular_integration_tests::bench::pg_err;
use syncular_integration_tests::bench::pull::{self, PullCase, PullTimes};
use syncular_integration_tests::bench::report::{self, show};
use syncular_integration_tests::bench::scenarios::{Bench, RunResult, EACH_ROUND, NEVER_ANALYZED, ONE, SCENARIOS};
use syncular_integration_tests::bench::stats::{self, Probe};
use syncular_integration_tests::connect_to;
use syncular_integration_tests::fixtures::register_schema;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let dsn = std::env::args()
        .nth(1)
        .or_else(|| std::env::var(syncular_integration_tests::DSN_ENV).ok())
        .ok_or("usage: bench DSN (or set SYNCULAR_TEST_DSN)")?;
    let config = Config::from_env();
    let mut admin = connect_to(&dsn);
    register_schema(&mut admin).map_err(pg_err)?;
    if std::env::var("BENCH_WITHOUT_CAPTURE").is_ok_and(|v| v == "1") {
        // Diagnostic: the share of the capture triggers in a push (the engine's own app-row
        // writes fire them and are skipped inside). Plain SQL writes are not captured then.
        // The extension's triggers on the table: those whose function lives in schema syncular.
        let triggers = admin
            .query(
                "SELECT t.tgname::text FROM pg_catalog.pg_trigger t \
                   JOIN pg_catalog.pg_proc f ON f.oid = t.tgfoid \
                  WHERE t.tgrelid = 'public.tasks'::regclass AND NOT t.tgisinternal \
                    AND f.pronamespace = 'syncular'::regnamespace",
                &[],
            )
            .map_err(pg_err)?;
        for row in &triggers {
            let name: String = row.get(0);
            admin.batch_execute(&format!("DROP TRIGGER \"{name}\" ON public.tasks")).map_err(pg_err)?;
        }
        println!("DIAGNOSTIC: {} capture triggers dropped from public.tasks (BENCH_WITHOUT_CAPTURE=1)", triggers.len());
    }
    let probe = Probe::install(&mut admin);
    report::print_header(&mut admin, &config, &probe.notes);
    let durable =
        show(&mut admin, "fsync") == "on" && show(&mut admin, "synchronous_commit") == "on";

    if let Some(seconds) = std::env::var("BENCH_PROFILE_PULL_SECONDS").ok().and_then(|v| v.parse::<u64>().ok()) {
        let mut fixture = pull::setup(&dsn, pull::CASES[0])?;
        println!("PROFILE: the pull of {} one-row commits for {seconds} s", pull::CASES[0].commits);
        let pulls = fixture.pull_for(seconds)?;
        println!("PROFILE: {pulls} pulls, {:.3} ms each", seconds as f64 * 1000.0 / pulls.max(1) as f64);
        return Ok(());
    }
    let profile_seconds = std::env::var("BENCH_PROFILE_SECONDS").ok().and_then(|v| v.parse::<u64>().ok());

    let mut bench = Bench::new(&dsn, config, probe, admin)?;
    if let (Some(seconds), true) = (profile_seconds, std::env::var("BENCH_PROFILE_FRESH").is_ok_and(|v| v == "1")) {
        // Diagnostic: the profile loop on never-analyzed tables (no preload, no ANALYZE).
        bench.warm_up()?;
        return profile_loop(&mut bench, ONE, seconds);
    }
    // Pulls on never-analyzed log tables first (a fresh server), then the push lane on
    // never-analyzed tables, then the same pulls after ANALYZE of the log tables.
    let mut fixtures = pull_fixtures(&dsn, &mut bench.admin)?;
    let before = measure_pulls(&mut fixtures, &mut bench.admin, &bench.probe, bench.config.pull_reps)?;
    let mut results = if profile_seconds.is_none() {
        never_analyzed_lane(&mut bench)?
    } else {
        Vec::new()
    };
    let tables = pull::log_tables(&mut bench.admin)?;
    bench.admin.batch_execute(&format!("ANALYZE {}", tables.join(", "))).map_err(pg_err)?;
    report::print_analyze_status("after ANALYZE", &pull::analyze_status(&mut bench.admin, &tables)?);
    let after = measure_pulls(&mut fixtures, &mut bench.admin, &bench.probe, bench.config.pull_reps)?;
    let pulls: Vec<(PullCase, PullTimes, PullTimes)> =
        fixtures.iter().zip(before).zip(after).map(|((f, b), a)| (f.case, b, a)).collect();

    let began = Instant::now();
    bench.preload()?;
    bench.admin.batch_execute("ANALYZE").map_err(pg_err)?;
    println!();
    println!(
        "preloaded {} rows (extension and plain table) in {:.1} s, then ANALYZE (all tables) before the push scenarios",
        bench.config.preload,
        began.elapsed().as_secs_f64()
    );
    bench.warm_up()?;
    if let Some(seconds) = profile_seconds {
        let scenario = std::env::var("BENCH_PROFILE_SCENARIO").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(ONE);
        if !EACH_ROUND.contains(&scenario) {
            return Err(format!("BENCH_PROFILE_SCENARIO: {scenario} is not a scenario index of a round ({EACH_ROUND:?})"));
        }
        return profile_loop(&mut bench, scenario, seconds);
    }

    let rounds = bench.config.rounds;
    let mut breakdown = Vec::new();
    for round in 0..rounds {
        for scenario in EACH_ROUND {
            for backend in Backend::ALL {
                let r = bench.run(scenario, backend, round)?;
                report::print_run(&r, rounds);
                if scenario == ONE && backend == Backend::Extension && round + 1 == rounds {
                    breakdown = bench
                        .probe
                        .statement_breakdown(&mut bench.admin, None)
                        .unwrap_or_else(|e| {
                            println!("note: no statement breakdown ({e})");
                            Vec::new()
                        });
                }
                results.push(r);
            }
        }
    }

    let preload = bench.config.preload;
    report::print_table(&results, preload);
    let outside = stats::outside_sql(&breakdown);
    if !breakdown.is_empty() {
        report::print_breakdown(&breakdown, bench.config.commits, &outside);
    }
    report::print_pulls(&pulls, bench.config.pull_reps);
    goals::print_ratios(&results, preload);
    goals::print_goals(&results, preload, &pulls, &outside, durable);
    println!();
    println!("machine at the end: {}", report::machine_load());
    Ok(())
}

/// `BENCH_PROFILE_SECONDS`: extension pushes of `scenario`, run after run,
/// for about `seconds` seconds (no report; a target for `perf record -a`).
fn profile_loop(bench: &mut Bench, scenario: usize, seconds: u64) -> Result<(), String> {
    println!("PROFILE: extension pushes, {}, for {seconds} s", SCENARIOS[scenario].label);
    let began = Instant::now();
    let mut round = 0;
    let mut commits = 0;
    while began.elapsed().as_secs() < seconds {
        let r = bench.run(scenario, Backend::Extension, 1000 + round)?;
        commits += r.commits;
        round += 1;
    }
    println!("PROFILE: {commits} commits in {:.1} s", began.elapsed().as_secs_f64());
    Ok(())
}

/// The never-analyzed lane: prints which tables were ever analyzed, warms up
/// (no `ANALYZE`), then runs `rounds` rounds of the "1 connection" layout
/// with the backends alternated, as scenario [`NEVER_ANALYZED`].
fn never_analyzed_lane(bench: &mut Bench) -> Result<Vec<RunResult>, String> {
    let mut tables = vec!["public.tasks".to_owned(), "public.bench_plain".to_owned()];
    tables.extend(pull::log_tables(&mut bench.admin)?);
    println!();
    report::print_analyze_status(
        "tables before the never-analyzed lane (fresh server, autovacuum off)",
        &pull::analyze_status(&mut bench.admin, &tables)?,
    );
    bench.warm_up()?;
    let rounds = bench.config.rounds;
    println!("never-analyzed lane: warm-up done; {rounds} round(s) of \"1 connection\", backends alternated");
    let mut results = Vec::new();
    for round in 0..rounds {
        for backend in Backend::ALL {
            let r = bench.run(NEVER_ANALYZED, backend, round)?;
            report::print_run(&r, rounds);
            results.push(r);
        }
    }
    Ok(results)
}

/// Pull timings before and after `ANALYZE` of the log tables; the log tables
/// must never have been analyzed before (printed; only the never-analyzed
/// push lane has written to them since the server started).
/// The pull fixtures (each case's partition and client, written now),
/// with the log tables' analyze status printed: never analyzed yet.
fn pull_fixtures(dsn: &str, admin: &mut postgres::Client) -> Result<Vec<pull::PullFixture>, String> {
    println!();
    let mut fixtures = Vec::new();
    for case in pull::CASES {
        fixtures.push(pull::setup(dsn, case)?);
    }
    let tables = pull::log_tables(admin)?;
    report::print_analyze_status(
        "log tables before the first pull measurement (fresh server, autovacuum off)",
        &pull::analyze_status(admin, &tables)?,
    );
    Ok(fixtures)
}

/// One measurement of every pull fixture (`reps` pulls each).
fn measure_pulls(
    fixtures: &mut [pull::PullFixture],
    admin: &mut postgres::Client,
    probe: &Probe,
    reps: usize,
) -> Result<Vec<PullTimes>, String> {
    fixtures.iter_mut().map(|f| f.measure(reps, probe, admin)).collect()
}
