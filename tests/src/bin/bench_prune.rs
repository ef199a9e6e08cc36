//! `bench_prune`: pruning a large log while connections keep pushing
//! (SPEC §4.6; docs/src/sql/lifecycle.md `syncular.prune`), on a durable server.
//!
//! 1. **The log**: one partition filled with `BENCH_PRUNE_COMMITS` (default
//!    1,000,000; 50,000 with `BENCH_QUICK=1`) commits written through the
//!    extension: 200 pushed through `syncular.sync`, the rest plain SQL
//!    statements on `public.tasks` captured as commits (single- and
//!    three-row inserts, updates, deletes; 1,000 statements per
//!    transaction — [`syncular_integration_tests::pruneload::prefill`]).
//!    Then `VACUUM (ANALYZE)` of the log tables and a `CHECKPOINT`: a settled
//!    log, as autovacuum would leave it.
//! 2. **Load**: `BENCH_PRUNE_CONNECTIONS` (default 4) connections push
//!    single-row commits through `syncular.sync`, each at
//!    `BENCH_PRUNE_RATE` (default 50) requests/s — half push-only requests,
//!    half push + incremental pull rounds (a real client's round, which
//!    takes the pruning fence). Every request is timed.
//! 3. **Windows**: `BENCH_PRUNE_BEFORE_S` (default 30 s; 5 with quick) of
//!    load alone (reference); then `CALL syncular.prune(partition)` with the
//!    default batch (10,000 rows; `BENCH_PRUNE_BATCH` to change it) in a
//!    session whose clock runs 15 days ahead (no client record is active, so
//!    the horizon goes to `maxCommitSeq − 1000`); then a window of load alone
//!    **of the same length as the prune**, right after it. The pruning
//!    backend's transactions (one per batch) are sampled every 10 ms in
//!    `pg_stat_activity`.
//! 4. **Report**: time to build the log, commits (and changes) pruned per
//!    second, the batches, push latency p50/p99/max during the prune and in
//!    the same-length window without it, their ratios (overall and per
//!    request kind), and checks: every push applied, nothing left at or below
//!    the horizon, every commit above it present and dense, every pushed
//!    commit above it in the log.
//!
//! `SYNCULAR_PRUNE_DRIVER=batches` drives the same batches from the client
//! instead of `CALL` ([`syncular_integration_tests::pruneload::pruner::Driver`]);
//! `SYNCULAR_PRUNE_SESSION_SQL` (diagnostic) runs SQL in the pruning session
//! first (e.g. `SET jit = off`).
//!
//! Usage: `bench_prune [DSN]` (default `$SYNCULAR_TEST_DSN`);
//! `scripts/bench-prune` builds it in release mode and starts a durable
//! server (fsync=on, synchronous_commit=on, autovacuum=off). Not a test: it
//! fails only when a push is not applied or the log is wrong after pruning.

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;
use syncular_integration_tests::fixtures::{partition_name, register_schema};
use syncular_integration_tests::pruneload::checks;
use syncular_integration_tests::pruneload::prefill::{
    allowed, capture_session, captured_statements, counters, push_commits,
};
use syncular_integration_tests::pruneload::pruner::{prune, prune_session, Driver, Monitor, MonitorReport};
use syncular_integration_tests::pruneload::pushers::{Kind, PushConfig, PushLoad, Sample};
use syncular_integration_tests::pruneload::{pg_text, Latency, PREFILL_PROJECTS};
use syncular_integration_tests::wire::RawSession;
use syncular_integration_tests::{connect_to, env_usize};

const PUSH_REQUESTS: usize = 4;
const PER_REQUEST: usize = 50;
const CHUNK: u64 = 1000;
const MIN_RETAINED: i64 = 1000;

struct Config {
    commits: u64,
    connections: usize,
    rate: f64,
    before: Duration,
    batch: Option<i32>,
    driver: Driver,
    quick: bool,
}

impl Config {
    fn from_env() -> Config {
        let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
        Config {
            commits: env_usize("BENCH_PRUNE_COMMITS", if quick { 50_000 } else { 1_000_000 }).max(5_000) as u64,
            connections: env_usize("BENCH_PRUNE_CONNECTIONS", 4).max(1),
            rate: env_usize("BENCH_PRUNE_RATE", 50) as f64,
            before: Duration::from_secs(env_usize("BENCH_PRUNE_BEFORE_S", if quick { 5 } else { 30 }) as u64),
            batch: std::env::var("BENCH_PRUNE_BATCH").ok().and_then(|v| v.parse().ok()),
            driver: Driver::from_env(),
            quick,
        }
    }
}

fn main() -> ExitCode {
    let dsn = std::env::args()
        .nth(1)
        .or_else(|| std::env::var(syncular_integration_tests::DSN_ENV).ok())
        .unwrap_or_default();
    if dsn.is_empty() {
        eprintln!("usage: bench_prune DSN (or set SYNCULAR_TEST_DSN); scripts/bench-prune runs it on a durable server");
        return ExitCode::from(2);
    }
    match run(&dsn, &Config::from_env()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_prune FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn q(conn: &mut Client, sql: &str) -> Result<String, String> {
    let row = conn.query_one(sql, &[]).map_err(|e| pg_text(&e))?;
    Ok(row.get::<_, Option<String>>(0).unwrap_or_default())
}

fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut groups = Vec::new();
    let mut end = digits.len();
    while end > 3 {
        groups.push(&digits[end - 3..end]);
        end -= 3;
    }
    groups.push(&digits[..end]);
    groups.reverse();
    format!("{}{}", if n < 0 { "-" } else { "" }, groups.join(","))
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        "n/a".to_owned()
    } else {
        format!("{:.2}", a.as_secs_f64() / b.as_secs_f64())
    }
}

/// Sleeps until `until` (since the load's start), failing early when a pusher ended.
fn hold(load: &PushLoad, until: Duration) -> Result<(), String> {
    while load.now() < until {
        if load.any_finished() {
            return Err("a pusher stopped early".to_owned());
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn log_sizes(conn: &mut Client, partition: &str) -> Result<(i64, i64, i64, i64), String> {
    let r = conn
        .query_one(
            "SELECT (SELECT count(*) FROM syncular.sync_commits WHERE partition = $1),
                    (SELECT count(*) FROM syncular.sync_changes WHERE partition = $1),
                    (SELECT count(*) FROM syncular.sync_change_scopes WHERE partition = $1),
                    (SELECT count(*) FROM syncular.sync_tombstones WHERE partition = $1)",
            &[&partition],
        )
        .map_err(|e| pg_text(&e))?;
    Ok((r.get(0), r.get(1), r.get(2), r.get(3)))
}

fn run(dsn: &str, cfg: &Config) -> Result<(), String> {
    let mut admin = connect_to(dsn);
    let version = q(&mut admin, "SELECT current_setting('server_version')")?;
    let fsync = q(&mut admin, "SELECT current_setting('fsync')")?;
    let sync_commit = q(&mut admin, "SELECT current_setting('synchronous_commit')")?;
    let autovacuum = q(&mut admin, "SELECT current_setting('autovacuum')")?;
    let ext = q(&mut admin, "SELECT extversion FROM pg_extension WHERE extname = 'syncular'")?;
    println!("bench-prune: CALL syncular.prune on a large log while connections keep pushing");
    println!(
        "server: Postgres {version}, syncular {ext}; fsync={fsync}, synchronous_commit={sync_commit}, autovacuum={autovacuum}{}",
        if fsync == "on" && sync_commit == "on" { " (durable)" } else { " (NOT the default durability: diagnostic)" }
    );
    if cfg.quick {
        println!("mode: BENCH_QUICK=1 (reduced sizes)");
    }
    register_schema(&mut admin).map_err(|e| pg_text(&e))?;
    let partition = partition_name("bench-prune");
    if cfg.driver == Driver::Call {
        // Fail before building the log when the procedure cannot run at all.
        let (mut probe, _) = prune_session(dsn)?;
        prune(&mut probe, "bench-prune-preflight (no such partition)", cfg.batch, Driver::Call).map_err(|e| {
            format!("{e} (preflight on a partition that does not exist); SYNCULAR_PRUNE_DRIVER=batches runs the same batches from the client")
        })?;
    }

    // 1. The log, through the extension.
    let pushed_prefill = (PUSH_REQUESTS * PER_REQUEST) as u64;
    let captured = cfg.commits - pushed_prefill;
    println!();
    println!(
        "== log: {} commits through the extension: {pushed_prefill} pushed (syncular.sync, {PUSH_REQUESTS} requests), \
         {} captured plain SQL statements on public.tasks ({CHUNK} per transaction: 1- and 3-row INSERTs, UPDATEs, DELETEs)",
        thousands(cfg.commits as i64),
        thousands(captured as i64)
    );
    let t = Instant::now();
    let mut prefiller = RawSession::new(connect_to(dsn), &partition, "prefill", "prefill", Some(allowed()));
    let epoch = prefiller.acquire_epoch()?;
    push_commits(&mut prefiller, PUSH_REQUESTS, PER_REQUEST, PREFILL_PROJECTS[3])?;
    let mut writer = connect_to(dsn);
    capture_session(&mut writer, &partition, "batch-job")?;
    let step = (captured / 10).max(CHUNK);
    let mut next_report = step;
    captured_statements(&mut writer, 0, captured, CHUNK, |done| {
        if done >= next_report || done == captured {
            println!(
                "   {:>9} statements  {:>6.1} s  ({:.0} commits/s)",
                thousands(done as i64),
                t.elapsed().as_secs_f64(),
                done as f64 / t.elapsed().as_secs_f64()
            );
            next_report += step;
        }
    })?;
    let built = t.elapsed();
    let (max0, _) = counters(&mut admin, &partition)?;
    if max0 != cfg.commits as i64 {
        return Err(format!("the log holds {max0} commits, expected {}", cfg.commits));
    }
    let (n_commits, n_changes, n_scopes, n_tombstones) = log_sizes(&mut admin, &partition)?;
    let t = Instant::now();
    for sql in [
        "VACUUM (ANALYZE) syncular.sync_commits, syncular.sync_changes, syncular.sync_change_scopes, \
         syncular.sync_tombstones, syncular.sync_row_scopes, syncular.sync_partitions, public.tasks",
        "CHECKPOINT",
    ] {
        admin.batch_execute(sql).map_err(|e| pg_text(&e))?;
    }
    let settled = t.elapsed();
    let log_bytes = q(
        &mut admin,
        "SELECT pg_size_pretty(pg_total_relation_size('syncular.sync_commits') + pg_total_relation_size('syncular.sync_changes')
                               + pg_total_relation_size('syncular.sync_change_scopes'))",
    )?;
    println!(
        "built in {:.1} s = {:.0} commits/s; {} commits, {} changes, {} change-scope entries, {} tombstones ({log_bytes} \
         with indexes); VACUUM (ANALYZE) + CHECKPOINT {:.1} s",
        built.as_secs_f64(),
        cfg.commits as f64 / built.as_secs_f64(),
        thousands(n_commits),
        thousands(n_changes),
        thousands(n_scopes),
        thousands(n_tombstones),
        settled.as_secs_f64()
    );

    // 2. Load.
    let load = PushLoad::start(&PushConfig {
        dsn: dsn.to_owned(),
        partition: partition.clone(),
        epoch,
        connections: cfg.connections,
        rate: cfg.rate,
        statement_timeout: "0".to_owned(),
    })?;
    let push_only = (0..cfg.connections).filter(|i| Kind::of(*i) == Kind::PushOnly).count();
    println!();
    println!(
        "== load: {} connections × {} requests/s, one single-row commit per request ({push_only} push-only requests, {} push + \
         incremental pull rounds, which take the pruning fence)",
        cfg.connections,
        if cfg.rate > 0.0 { format!("{}", cfg.rate) } else { "as many".to_owned() },
        cfg.connections - push_only
    );
    let warmup = Duration::from_secs(2);
    hold(&load, warmup)?;
    let before_from = load.now();
    hold(&load, before_from + cfg.before)?;
    let before_to = load.now();

    // 3. The prune.
    let (mut pruner, pid) = prune_session(dsn)?;
    let monitor = Monitor::start(dsn, pid, Duration::from_millis(10));
    let (max_before, _) = counters(&mut admin, &partition)?;
    let prune_from = load.now();
    let outcome = prune(&mut pruner, &partition, cfg.batch, cfg.driver);
    let prune_to = load.now();
    let watched = monitor.stop()?;
    let call = match outcome {
        Ok(call) => call,
        Err(e) => {
            let _ = load.stop();
            return Err(e);
        }
    };
    let elapsed = call.elapsed;
    let (max_after, horizon) = counters(&mut admin, &partition)?;
    let (pruned, pruned_results, pruned_clients) = (call.commits, call.push_results, call.clients);

    // The same length without pruning, right after.
    let after_from = load.now();
    hold(&load, after_from + (prune_to - prune_from))?;
    let after_to = load.now();
    let reports = load.stop()?;

    // 4. Checks and report.
    let end = checks::after(&mut admin, &partition)?;
    let (_, changes_left, _, _) = log_sizes(&mut admin, &partition)?;
    let samples: Vec<&Sample> = reports.iter().flat_map(|r| r.samples.iter()).collect();
    let mut problems = Vec::new();
    if !(max_before - MIN_RETAINED <= horizon && horizon <= max_after - MIN_RETAINED) {
        problems.push(format!("horizon {horizon} outside [{max_before} − 1000, {max_after} − 1000]"));
    }
    if pruned != horizon {
        problems.push(format!("pruned {pruned} commits, expected 1..={horizon}"));
    }
    if (end.commits_below, end.changes_below, end.change_scopes_below, end.tombstones_below) != (0, 0, 0, 0) {
        problems.push(format!("rows left at or below the horizon: {end:?}"));
    }
    if !end.dense_above() || end.orphan_changes != 0 || end.orphan_change_scopes != 0 {
        problems.push(format!("log above the horizon not dense and whole: {end:?}"));
    }
    if end.max_commit_seq != cfg.commits as i64 + samples.len() as i64 {
        problems.push(format!("{} commits for {} prefill + {} pushes", end.max_commit_seq, cfg.commits, samples.len()));
    }
    let changes = checks::changed_rows(&mut admin, &partition, horizon)?;
    let missing = samples
        .iter()
        .filter(|s| s.commit_seq > horizon && changes.get(&s.commit_seq) != Some(&vec![s.row_id.clone()]))
        .count();
    if missing > 0 {
        problems.push(format!("{missing} pushed commits above the horizon are not in the log"));
    }
    // Every change ever written (prefill + one per load push) minus those left.
    let changes_pruned = n_changes + samples.len() as i64 - changes_left;

    println!();
    let secs = elapsed.as_secs_f64();
    println!("== prune: {}; the pruning session's clock runs 15 days ahead", cfg.driver.label(cfg.batch));
    if let Some(sql) = syncular_integration_tests::pruneload::pruner::session_sql() {
        println!("DIAGNOSTIC: the pruning session ran SYNCULAR_PRUNE_SESSION_SQL = {sql:?}");
    }
    println!(
        "pruned {} commits ({} changes) in {:.1} s = {} commits/s ({} changes/s); horizon {} = max {} − 1000 at the advance; \
         push outcomes pruned {pruned_results}, client records pruned {pruned_clients}",
        thousands(pruned),
        thousands(changes_pruned),
        secs,
        thousands((pruned as f64 / secs) as i64),
        thousands((changes_pruned as f64 / secs) as i64),
        thousands(horizon),
        thousands(horizon + MIN_RETAINED)
    );
    report_batches(&watched);

    let window = |from: Duration, to: Duration| -> Vec<&Sample> {
        samples.iter().copied().filter(|s| s.sent >= from && s.sent < to).collect()
    };
    let during: Vec<&Sample> = samples.iter().copied().filter(|s| s.overlaps(prune_from, prune_to)).collect();
    let after = window(after_from, after_to);
    let before = window(before_from, before_to);
    println!();
    println!("== push latency, ms (request sent → response), {} pushes, all applied", thousands(samples.len() as i64));
    println!("{:<58} {:>7} {:>9} {:>9} {:>9}", "", "n", "p50", "p99", "max");
    let kinds: [(&str, Option<Kind>); 3] =
        [("all requests", None), ("push-only", Some(Kind::PushOnly)), ("push + pull round", Some(Kind::PushPull))];
    for (label, kind) in kinds {
        let pick = |set: &[&Sample]| -> Latency {
            Latency::of(set.iter().filter(|s| kind.is_none_or(|k| s.kind == k)).map(|s| s.latency).collect())
        };
        let (w, d, b) = (pick(&after), pick(&during), pick(&before));
        let row = |name: String, l: &Latency| {
            println!("{name:<58} {:>7} {:>9} {:>9} {:>9}", l.count, ms(l.p50), ms(l.p99), ms(l.max));
        };
        println!("{label}:");
        row(format!("  without pruning (the {:.1} s right after the prune)", (after_to - after_from).as_secs_f64()), &w);
        row(format!("  during pruning ({:.1} s)", (prune_to - prune_from).as_secs_f64()), &d);
        println!(
            "{:<58} {:>7} {:>9} {:>9} {:>9}",
            "  ratio during ÷ without",
            "",
            ratio(d.p50, w.p50),
            ratio(d.p99, w.p99),
            ratio(d.max, w.max)
        );
        row(format!("  reference: before the prune ({:.0} s)", (before_to - before_from).as_secs_f64()), &b);
    }
    let rate = |set: &[&Sample], kind: Kind, secs: f64| {
        let connections = (0..cfg.connections).filter(|i| Kind::of(*i) == kind).count().max(1);
        set.iter().filter(|s| s.kind == kind).count() as f64 / secs / connections as f64
    };
    let (d_secs, a_secs) = ((prune_to - prune_from).as_secs_f64(), (after_to - after_from).as_secs_f64());
    println!(
        "requests completed per connection per second, during ÷ without: push-only {:.1} ÷ {:.1}, push + pull rounds \
         {:.1} ÷ {:.1} (a pulling request waits for the batch holding the fence)",
        rate(&during, Kind::PushOnly, d_secs),
        rate(&after, Kind::PushOnly, a_secs),
        rate(&during, Kind::PushPull, d_secs),
        rate(&after, Kind::PushPull, a_secs)
    );
    let d_all = Latency::of(during.iter().map(|s| s.latency).collect());
    println!(
        "longest push during the prune {} ms vs longest pruning transaction (the advance or a batch) {} ms (a request that pulls \
         waits for at most one batch)",
        ms(d_all.max),
        ms(watched.longest())
    );

    println!();
    println!(
        "checks: horizon {}, nothing at or below it ({} changes, {} change-scope entries, {} tombstones left), commits {}..={} \
         dense, every pushed commit above it in the log, push+pull resets {}: {}",
        thousands(end.horizon_seq),
        end.changes_below,
        end.change_scopes_below,
        end.tombstones_below,
        thousands(end.horizon_seq + 1),
        thousands(end.max_commit_seq),
        reports.iter().map(|r| r.pull_resets).sum::<usize>(),
        if problems.is_empty() { "ok".to_owned() } else { format!("FAILED: {}", problems.join("; ")) }
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn report_batches(m: &MonitorReport) {
    // The first transaction advances the horizon; the rest are batches.
    let mut batches: Vec<Duration> = m.xacts.iter().skip(1).map(|x| x.observed).collect();
    if batches.is_empty() {
        println!("batches: none observed ({} samples)", m.samples);
        return;
    }
    let n = batches.len();
    let tenth = (n / 10).max(1);
    let mean = |s: &[Duration]| s.iter().sum::<Duration>() / s.len().max(1) as u32;
    let (first, last) = (mean(&batches[..tenth]), mean(&batches[n - tenth..]));
    let waits: usize = m.xacts.iter().map(|x| x.lock_waits).sum();
    batches.sort();
    println!(
        "batches: {n} transactions observed after the advance (sampled every 10 ms): p50 {} ms, max {} ms; mean of the first \
         tenth {} ms, of the last tenth {} ms; {waits} samples waiting for a lock (the fence)",
        ms(batches[n / 2]),
        ms(batches[n - 1]),
        ms(first),
        ms(last)
    );
}
