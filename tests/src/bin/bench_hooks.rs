//! `bench_hooks`: what host logic inside the push transaction (issue 13)
//! costs — single-row push requests through `syncular.sync`, with one
//! trivial SQL write validator on `tasks` (§6.7, accepts everything) and one
//! trivial reaction planner (§6.9, plans one reaction per commit)
//! registered, next to the same pushes with neither, on the same server in
//! the same run.
//!
//! The two sides live in two databases of the server (the "plain" one
//! without hooks, `syncular_bench_hooks` with them: a registration is
//! database-wide), one connection each, and are **alternated push by push**
//! (the side going first alternating too), so drifts of the shared machine
//! (disk flushes, other processes) hit both alike. `BENCH_HOOKS_ROUNDS`
//! (default 5) rounds of `BENCH_HOOKS_COMMITS` (default 1,000) pushes per
//! side, fresh rows, a `CHECKPOINT` before each round and a warm-up round
//! first. Prints every round, the per-side totals and the ratio hooks ÷
//! plain throughput next to the goal (≥ 0.8). `BENCH_QUICK=1`: 300 pushes,
//! 3 rounds. Usage: `bench_hooks [DSN]` (default `$SYNCULAR_TEST_DSN`);
//! `scripts/bench-hooks` builds it in release mode and starts a durable
//! server. Not a test: it fails only when a push is not applied or the
//! planner did not enqueue.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use postgres::{Client, Statement};
use serde_json::Value;
use syncular_integration_tests::bench::backends::{check_applied, epoch_for, worker_connection, ACTOR};
use syncular_integration_tests::bench::pg_err;
use syncular_integration_tests::bench::report::show;
use syncular_integration_tests::fixtures::{allow_all_projects, partition_name, register_schema};
use syncular_integration_tests::transport::SYNC_SQL;
use syncular_integration_tests::wire::{commit, request, upsert, Task};
use syncular_integration_tests::{connect_to, dsn_for_db, env_usize};

const GOAL: f64 = 0.8;
const HOOKS_DB: &str = "syncular_bench_hooks";

const HOOK_DDL: &str = "CREATE SCHEMA IF NOT EXISTS bench_hooks;
    CREATE OR REPLACE FUNCTION bench_hooks.accept(write jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb';
    CREATE OR REPLACE FUNCTION bench_hooks.plan(commit jsonb) RETURNS jsonb LANGUAGE sql AS $$
      SELECT jsonb_build_array(jsonb_build_object('key', 'k', 'type', 'bench.noop', 'version', 1,
        'payload', jsonb_build_object('rowId', commit->'operations'->0->>'rowId'))) $$;
    SELECT syncular.set_write_validator('tasks', 'bench_hooks.accept(jsonb)');
    SELECT syncular.set_reaction_planner('bench_hooks.plan(jsonb)');";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_hooks failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One side: its database's connection, statement, partition and epoch.
struct Side {
    name: &'static str,
    dsn: String,
    conn: Client,
    stmt: Statement,
    partition: String,
    epoch: String,
    allowed: Value,
}

impl Side {
    fn open(name: &'static str, dsn: &str) -> Result<Side, String> {
        let mut conn = worker_connection(dsn)?;
        let stmt = conn.prepare(SYNC_SQL).map_err(pg_err)?;
        let partition = partition_name(name);
        let epoch = epoch_for(dsn, &partition)?;
        Ok(Side { name, dsn: dsn.to_owned(), conn, stmt, partition, epoch, allowed: allow_all_projects() })
    }

    /// One single-row push of a fresh row; its wall time.
    fn push(&mut self, id: String) -> Result<Duration, String> {
        let task = Task::new(id.clone(), "p1", format!("task {id}"));
        let bytes = request("bench-hooks", Some(&self.epoch), vec![commit(id, vec![upsert(&task, None)])]);
        let began = Instant::now();
        let row = self
            .conn
            .query_one(&self.stmt, &[&self.partition, &ACTOR, &bytes, &Some(&self.allowed)])
            .map_err(pg_err)?;
        let elapsed = began.elapsed();
        check_applied(&row.get::<_, Vec<u8>>(0))?;
        Ok(elapsed)
    }

    fn reactions(&self) -> Result<i64, String> {
        let mut c = connect_to(&self.dsn);
        Ok(c.query_one("SELECT count(*) FROM syncular.sync_reactions WHERE partition = $1", &[&self.partition])
            .map_err(pg_err)?
            .get(0))
    }
}

/// `commits` pushes per side, alternated push by push; the summed times.
fn round(sides: &mut [Side; 2], admin: &mut Client, commits: usize, round: usize) -> Result<[Duration; 2], String> {
    admin.batch_execute("CHECKPOINT").map_err(pg_err)?;
    let mut total = [Duration::ZERO; 2];
    for j in 0..commits {
        for k in 0..2 {
            let s = (k + j + round) % 2;
            let id = format!("{}-r{round}-{j}", sides[s].name);
            total[s] += sides[s].push(id)?;
        }
    }
    Ok(total)
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
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {HOOKS_DB}")).map_err(pg_err)?;
    admin.batch_execute(&format!("CREATE DATABASE {HOOKS_DB}")).map_err(pg_err)?;
    let hooks_dsn = dsn_for_db(&dsn, HOOKS_DB);
    let mut hooks_admin = connect_to(&hooks_dsn);
    hooks_admin.batch_execute("CREATE EXTENSION syncular").map_err(pg_err)?;
    register_schema(&mut hooks_admin).map_err(pg_err)?;
    hooks_admin.batch_execute(HOOK_DDL).map_err(pg_err)?;
    let durable = show(&mut admin, "fsync") == "on" && show(&mut admin, "synchronous_commit") == "on";
    println!("syncular bench-hooks (issue 13) — PostgreSQL {}", show(&mut admin, "server_version"));
    println!(
        "mode: {}",
        if durable { "DURABLE — fsync=on, synchronous_commit=on" } else { "DIAGNOSTIC — not durable: NOT the goal's setting" }
    );
    println!("runs: {rounds} round(s) of {commits} single-row pushes (syncular.sync) per side, one connection per side, alternated push by push");
    println!("side plain: no validator, no planner; side hooks (database {HOOKS_DB}): a trivial SQL write validator on tasks + a trivial reaction planner (1 reaction per commit)");
    let mut sides = [Side::open("plain", &dsn)?, Side::open("hooks", &hooks_dsn)?];
    round(&mut sides, &mut admin, commits.min(200), usize::MAX / 2)?;
    let mut totals = [Duration::ZERO; 2];
    for r in 0..rounds {
        let t = round(&mut sides, &mut admin, commits, r)?;
        println!(
            "round {r}: plain {:>8.1} pushes/s, hooks {:>8.1} pushes/s, ratio {:.3}",
            per_sec(commits, t[0]),
            per_sec(commits, t[1]),
            t[0].as_secs_f64() / t[1].as_secs_f64()
        );
        totals[0] += t[0];
        totals[1] += t[1];
    }
    let want = (commits.min(200) + rounds * commits) as i64;
    let (plain_rx, hooks_rx) = (sides[0].reactions()?, sides[1].reactions()?);
    if (plain_rx, hooks_rx) != (0, want) {
        return Err(format!("reactions enqueued: plain {plain_rx} (expected 0), hooks {hooks_rx} (expected {want})"));
    }
    let n = rounds * commits;
    let ratio = totals[0].as_secs_f64() / totals[1].as_secs_f64();
    println!(
        "total: plain {:.1} pushes/s ({:.3} ms each), hooks {:.1} pushes/s ({:.3} ms each)",
        per_sec(n, totals[0]),
        totals[0].as_secs_f64() * 1000.0 / n as f64,
        per_sec(n, totals[1]),
        totals[1].as_secs_f64() * 1000.0 / n as f64
    );
    println!("ratio hooks ÷ plain = {ratio:.3} (goal ≥ {GOAL}: {})", if ratio >= GOAL { "met" } else { "NOT met" });
    drop(sides);
    drop(hooks_admin);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {HOOKS_DB} WITH (FORCE)")).map_err(pg_err)?;
    Ok(())
}
