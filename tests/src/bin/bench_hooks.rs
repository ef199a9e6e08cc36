//! `bench_hooks`: what host logic inside the push transaction (issue 13)
//! costs — single-row push requests through `syncular.sync` on one
//! connection, with one trivial SQL write validator on `tasks` (§6.7,
//! accepts everything) and one trivial reaction planner (§6.9, plans one
//! reaction per commit) registered, next to the same pushes with neither,
//! on the same server in the same run.
//!
//! `BENCH_HOOKS_ROUNDS` (default 5) rounds; each round measures both sides,
//! the side going first alternating, `BENCH_HOOKS_COMMITS` (default 1,000)
//! fresh rows per run, every run into a fresh partition after a
//! `CHECKPOINT`; a warm-up run of each side first. Prints every run, the
//! medians and the ratio hooks ÷ plain throughput next to the goal (≥ 0.8).
//! `BENCH_QUICK=1`: 300 commits, 3 rounds. Usage: `bench_hooks [DSN]`
//! (default `$SYNCULAR_TEST_DSN`); `scripts/bench-hooks` builds it in
//! release mode and starts a durable server. Not a test: it fails only when
//! a commit is not applied or the planner did not enqueue.

use std::process::ExitCode;
use std::time::Duration;

use postgres::Client;
use syncular_integration_tests::bench::backends::{prepare, Backend};
use syncular_integration_tests::bench::{median, pg_err};
use syncular_integration_tests::bench::report::show;
use syncular_integration_tests::fixtures::{partition_name, register_schema};
use syncular_integration_tests::{connect_to, env_usize};

const GOAL: f64 = 0.8;

const HOOK_DDL: &str = "CREATE SCHEMA IF NOT EXISTS bench_hooks;
    CREATE OR REPLACE FUNCTION bench_hooks.accept(write jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb';
    CREATE OR REPLACE FUNCTION bench_hooks.plan(commit jsonb) RETURNS jsonb LANGUAGE sql AS $$
      SELECT jsonb_build_array(jsonb_build_object('key', 'k', 'type', 'bench.noop', 'version', 1,
        'payload', jsonb_build_object('rowId', commit->'operations'->0->>'rowId'))) $$;";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_hooks failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn set_hooks(admin: &mut Client, on: bool) -> Result<(), String> {
    let sql = if on {
        "SELECT syncular.set_write_validator('tasks', 'bench_hooks.accept(jsonb)'); \
         SELECT syncular.set_reaction_planner('bench_hooks.plan(jsonb)');"
    } else {
        "SELECT syncular.set_write_validator('tasks', NULL); SELECT syncular.set_reaction_planner(NULL);"
    };
    admin.batch_execute(sql).map_err(pg_err)
}

/// One measured run of `commits` single-row pushes on one connection into a
/// fresh partition; checks the reactions the side should have enqueued.
fn measure(dsn: &str, admin: &mut Client, hooks: bool, commits: usize, tag: &str) -> Result<Duration, String> {
    set_hooks(admin, hooks)?;
    let partition = partition_name(if hooks { "hooks" } else { "plain" });
    let run = prepare(dsn, Backend::Extension, std::slice::from_ref(&partition), commits, tag)?;
    admin.batch_execute("CHECKPOINT").map_err(pg_err)?;
    let elapsed = run.execute()?;
    let enqueued: i64 = admin
        .query_one("SELECT count(*) FROM syncular.sync_reactions WHERE partition = $1", &[&partition])
        .map_err(pg_err)?
        .get(0);
    let want = if hooks { commits as i64 } else { 0 };
    if enqueued != want {
        return Err(format!("{partition}: {enqueued} reactions enqueued, expected {want}"));
    }
    Ok(elapsed)
}

fn per_sec(commits: usize, d: Duration) -> f64 {
    commits as f64 / d.as_secs_f64()
}

fn run() -> Result<(), String> {
    let dsn = std::env::args()
        .nth(1)
        .or_else(|| std::env::var(syncular_integration_tests::DSN_ENV).ok())
        .ok_or("usage: bench_hooks DSN (or set SYNCULAR_TEST_DSN)")?;
    let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
    let commits = env_usize("BENCH_HOOKS_COMMITS", if quick { 300 } else { 1000 });
    let rounds = env_usize("BENCH_HOOKS_ROUNDS", if quick { 3 } else { 5 });
    let mut admin = connect_to(&dsn);
    register_schema(&mut admin).map_err(pg_err)?;
    admin.batch_execute(HOOK_DDL).map_err(pg_err)?;
    let durable = show(&mut admin, "fsync") == "on" && show(&mut admin, "synchronous_commit") == "on";
    println!("syncular bench-hooks (issue 13) — PostgreSQL {}", show(&mut admin, "server_version"));
    println!(
        "mode: {}",
        if durable { "DURABLE — fsync=on, synchronous_commit=on" } else { "DIAGNOSTIC — not durable: NOT the goal's setting" }
    );
    println!("runs: {commits} single-row pushes (syncular.sync) on 1 connection, {rounds} round(s), sides alternated, median reported");
    println!("side plain: no validator, no planner; side hooks: a trivial SQL write validator on tasks + a trivial reaction planner (1 reaction per commit)");
    measure(&dsn, &mut admin, false, commits.min(100), "warm-plain")?;
    measure(&dsn, &mut admin, true, commits.min(100), "warm-hooks")?;
    let (mut plain, mut hooks) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for side in 0..2 {
            let hooked = (side + round) % 2 == 1;
            let d = measure(&dsn, &mut admin, hooked, commits, &format!("r{round}"))?;
            println!("round {round} {:<5} {:>8.1} commits/s", if hooked { "hooks" } else { "plain" }, per_sec(commits, d));
            if hooked { hooks.push(d) } else { plain.push(d) }
        }
    }
    set_hooks(&mut admin, false)?;
    let (p, h) = (per_sec(commits, median(plain)), per_sec(commits, median(hooks)));
    let ratio = h / p;
    println!("median: plain {p:.1} commits/s, hooks {h:.1} commits/s");
    println!(
        "ratio hooks ÷ plain = {ratio:.3} (goal ≥ {GOAL}: {})",
        if ratio >= GOAL { "met" } else { "NOT met" }
    );
    Ok(())
}
