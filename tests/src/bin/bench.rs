//! `bench`: commits per second for single-row commits through
//! `syncular.sync`, next to plain `INSERT … ON CONFLICT` autocommit TPS on
//! the same server in the same run, with the ratios.
//!
//! Scenarios (each sync scenario has its baseline measured right after it):
//! 1. one connection, empty partition;
//! 2. eight connections, one shared partition;
//!    (diagnostic: eight connections on eight partitions — no shared counter row);
//! 3. one connection into a partition already holding 100,000 rows
//!    (baseline: a plain table already holding 100,000 rows for that key).
//!
//! Usage: `bench [DSN]` (default `$SYNCULAR_TEST_DSN`). Environment:
//! `BENCH_COMMITS` (per connection, default 2000), `BENCH_PRELOAD` (default
//! 100000). `scripts/bench` builds this in release mode and starts its own
//! server. Not a test: it asserts only that every commit applied.

use std::process::ExitCode;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use postgres::Client;
use ssp2::model::PushStatus;
use syncular_integration_tests::{connect_to, env_usize};
use syncular_integration_tests::fixtures::{allow_all_projects, partition_name, register_schema};
use syncular_integration_tests::transport::SYNC_SQL;
use syncular_integration_tests::wire::{
    commit, decode_response, push_outcomes, request, upsert, RawSession, Task,
};

const ACTOR: &str = "bench";
const PLAIN_DDL: &str = "CREATE TABLE IF NOT EXISTS public.bench_plain(
    partition text NOT NULL, id text NOT NULL, project_id text NOT NULL, title text NOT NULL,
    done boolean NOT NULL, priority bigint, version bigint NOT NULL DEFAULT 1, payload bytea,
    PRIMARY KEY (partition, id))";
const PLAIN_UPSERT: &str = "INSERT INTO public.bench_plain AS t (partition, id, project_id, title, done, priority, payload)
    VALUES ($1, $2, $3, $4, false, NULL, $5)
    ON CONFLICT (partition, id) DO UPDATE
       SET title = EXCLUDED.title, payload = EXCLUDED.payload, version = t.version + 1";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One measured scenario.
struct Measure {
    name: String,
    ops: usize,
    elapsed: Duration,
}

impl Measure {
    fn per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }
}

fn run() -> Result<(), String> {
    let dsn = std::env::args()
        .nth(1)
        .or_else(|| std::env::var(syncular_integration_tests::DSN_ENV).ok())
        .ok_or("usage: bench DSN (or set SYNCULAR_TEST_DSN)")?;
    let commits = env_usize("BENCH_COMMITS", 2000);
    let preload = env_usize("BENCH_PRELOAD", 100_000);
    let mut admin = connect_to(&dsn);
    register_schema(&mut admin).map_err(|e| e.to_string())?;
    admin.batch_execute(PLAIN_DDL).map_err(|e| e.to_string())?;
    println!(
        "bench: {commits} single-row commits per connection; preload {preload} rows; server {}",
        admin
            .query_one("SHOW server_version", &[])
            .map_err(|e| e.to_string())?
            .get::<_, String>(0)
    );

    // Warm-up (not reported): backend caches, schema load, plan caches.
    let warm = partition_name("bench-warmup");
    sync_run(&dsn, &warm, 2, commits.min(200), "warm-up: sync")?;
    plain_run(
        &dsn,
        &warm,
        2,
        commits.min(200),
        "warm-up: INSERT … ON CONFLICT",
    )?;

    let mut pairs: Vec<(Measure, Measure)> = Vec::new();

    // 1. One connection, fresh partition.
    let p1 = partition_name("bench-1");
    let sync1 = sync_run(&dsn, &p1, 1, commits, "sync, 1 connection")?;
    let plain1 = plain_run(&dsn, &p1, 1, commits, "INSERT … ON CONFLICT, 1 connection")?;
    pairs.push((sync1, plain1));

    // 2. Eight connections, one partition.
    let p8 = partition_name("bench-8");
    let sync8 = sync_run(&dsn, &p8, 8, commits, "sync, 8 connections")?;
    let plain8 = plain_run(&dsn, &p8, 8, commits, "INSERT … ON CONFLICT, 8 connections")?;
    pairs.push((sync8, plain8));
    // Diagnostic: the same 8 connections, each on its own partition (no
    // shared counter row), separates partition serialization from CPU load.
    let spread: Vec<String> = (0..8)
        .map(|i| partition_name(&format!("bench-8x{i}")))
        .collect();
    let sync8x = sync_run_on(&dsn, &spread, commits, "sync, 8 connections, 8 partitions")?;
    let plain8x = plain_run(
        &dsn,
        &partition_name("bench-8x-plain"),
        8,
        commits,
        "INSERT … ON CONFLICT, 8 connections (again)",
    )?;
    pairs.push((sync8x, plain8x));

    // 3. Into a partition already holding `preload` rows.
    let big = partition_name("bench-100k");
    let began = Instant::now();
    preload_sync(&dsn, &big, preload)?;
    preload_plain(&mut admin, &big, preload)?;
    println!(
        "preloaded {preload} rows into {big} (sync and plain) in {:.1}s",
        began.elapsed().as_secs_f64()
    );
    admin.batch_execute("ANALYZE").map_err(|e| e.to_string())?;
    let sync_big = sync_run(
        &dsn,
        &big,
        1,
        commits,
        &format!("sync, 1 connection, {preload} rows present"),
    )?;
    let plain_big = plain_run(
        &dsn,
        &big,
        1,
        commits,
        &format!("INSERT … ON CONFLICT, 1 connection, {preload} rows present"),
    )?;
    pairs.push((sync_big, plain_big));

    println!();
    println!(
        "{:<56} {:>8} {:>9} {:>12}",
        "scenario", "commits", "seconds", "commits/s"
    );
    for (s, p) in &pairs {
        for m in [s, p] {
            println!(
                "{:<56} {:>8} {:>9.2} {:>12.0}",
                m.name,
                m.ops,
                m.elapsed.as_secs_f64(),
                m.per_sec()
            );
        }
    }
    println!();
    println!(
        "{:<56} {:>12}",
        "ratio sync ÷ plain INSERT … ON CONFLICT", "ratio"
    );
    for (s, p) in &pairs {
        println!("{:<56} {:>12.3}", s.name, s.per_sec() / p.per_sec());
    }
    Ok(())
}

fn epoch_for(dsn: &str, partition: &str) -> Result<String, String> {
    let mut s = RawSession::new(
        connect_to(dsn),
        partition,
        ACTOR,
        "bench-epoch",
        Some(allow_all_projects()),
    );
    s.acquire_epoch()
}

/// `connections` threads, each pushing `per_conn` single-row commits (one
/// request per commit, autocommit) as fast as they can.
fn sync_run(
    dsn: &str,
    partition: &str,
    connections: usize,
    per_conn: usize,
    name: &str,
) -> Result<Measure, String> {
    sync_run_on(
        dsn,
        &vec![partition.to_owned(); connections],
        per_conn,
        name,
    )
}

/// [`sync_run`] with one connection per entry of `partitions` (connection
/// `c` pushes into `partitions[c]`).
fn sync_run_on(
    dsn: &str,
    partitions: &[String],
    per_conn: usize,
    name: &str,
) -> Result<Measure, String> {
    let connections = partitions.len();
    let mut epochs = Vec::with_capacity(connections);
    for p in partitions {
        epochs.push(epoch_for(dsn, p)?);
    }
    let allowed = allow_all_projects();
    let barrier = Arc::new(Barrier::new(connections + 1));
    let handles: Vec<_> = (0..connections)
        .map(|c| {
            let (dsn, partition, epoch, allowed, barrier) = (
                dsn.to_owned(),
                partitions[c].clone(),
                epochs[c].clone(),
                allowed.clone(),
                Arc::clone(&barrier),
            );
            thread::spawn(move || -> Result<(), String> {
                let mut conn = connect_to(&dsn);
                let stmt = conn.prepare(SYNC_SQL).map_err(|e| e.to_string())?;
                let client_id = format!("bench-{c}");
                let requests: Vec<Vec<u8>> = (0..per_conn)
                    .map(|k| {
                        let task = Task::new(
                            format!("r-{c}-{k}"),
                            "p1",
                            format!("task {k} of connection {c}"),
                        );
                        request(
                            &client_id,
                            Some(&epoch),
                            vec![commit(format!("k{k}"), vec![upsert(&task, None)])],
                        )
                    })
                    .collect();
                barrier.wait();
                for bytes in &requests {
                    let row = conn
                        .query_one(&stmt, &[&partition, &ACTOR, bytes, &Some(&allowed)])
                        .map_err(|e| e.to_string())?;
                    let response: Vec<u8> = row.get(0);
                    check_applied(&response)?;
                }
                Ok(())
            })
        })
        .collect();
    barrier.wait();
    let began = Instant::now();
    for h in handles {
        h.join()
            .map_err(|_| "a sync thread panicked".to_owned())??;
    }
    let m = Measure {
        name: name.to_owned(),
        ops: connections * per_conn,
        elapsed: began.elapsed(),
    };
    println!("{:<56} {:>10.0} commits/s", m.name, m.per_sec());
    Ok(m)
}

fn check_applied(response: &[u8]) -> Result<(), String> {
    let outcomes = push_outcomes(&decode_response(response)?);
    match outcomes.as_slice() {
        [o] if o.status == PushStatus::Applied => Ok(()),
        other => Err(format!("expected one applied commit, got {other:?}")),
    }
}

/// The same shape of work as [`sync_run`] as plain autocommit upserts.
fn plain_run(
    dsn: &str,
    partition: &str,
    connections: usize,
    per_conn: usize,
    name: &str,
) -> Result<Measure, String> {
    let barrier = Arc::new(Barrier::new(connections + 1));
    let handles: Vec<_> = (0..connections)
        .map(|c| {
            let (dsn, partition, barrier) =
                (dsn.to_owned(), partition.to_owned(), Arc::clone(&barrier));
            thread::spawn(move || -> Result<(), String> {
                let mut conn = connect_to(&dsn);
                let stmt = conn.prepare(PLAIN_UPSERT).map_err(|e| e.to_string())?;
                let rows: Vec<(String, String, Vec<u8>)> = (0..per_conn)
                    .map(|k| {
                        let task = Task::new(
                            format!("r-{c}-{k}"),
                            "p1",
                            format!("task {k} of connection {c}"),
                        );
                        let payload = syncular_integration_tests::wire::encode_task(&task);
                        (task.id, task.title, payload)
                    })
                    .collect();
                barrier.wait();
                for (id, title, payload) in &rows {
                    let n = conn
                        .execute(&stmt, &[&partition, id, &"p1", title, payload])
                        .map_err(|e| e.to_string())?;
                    if n != 1 {
                        return Err(format!("upsert affected {n} rows"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    barrier.wait();
    let began = Instant::now();
    for h in handles {
        h.join()
            .map_err(|_| "a plain thread panicked".to_owned())??;
    }
    let m = Measure {
        name: name.to_owned(),
        ops: connections * per_conn,
        elapsed: began.elapsed(),
    };
    println!("{:<56} {:>10.0} commits/s", m.name, m.per_sec());
    Ok(m)
}

/// Loads `rows` rows into `partition` through `syncular.sync` (500-op
/// commits, so the log, scope index and app table are all realistic).
fn preload_sync(dsn: &str, partition: &str, rows: usize) -> Result<(), String> {
    let mut s = RawSession::new(
        connect_to(dsn),
        partition,
        ACTOR,
        "bench-preload",
        Some(allow_all_projects()),
    );
    s.acquire_epoch()?;
    let per_commit = 500;
    for (c, start) in (0..rows).step_by(per_commit).enumerate() {
        let ops = (start..(start + per_commit).min(rows))
            .map(|n| {
                upsert(
                    &Task::new(format!("pre-{n:06}"), "p1", format!("preloaded row {n}")),
                    None,
                )
            })
            .collect();
        let out = s.push(vec![commit(format!("pre-{c}"), ops)])?;
        if out[0].status != PushStatus::Applied {
            return Err(format!("preload commit {c} not applied: {:?}", out[0]));
        }
    }
    Ok(())
}

fn preload_plain(conn: &mut Client, partition: &str, rows: usize) -> Result<(), String> {
    conn.execute(
        "INSERT INTO public.bench_plain (partition, id, project_id, title, done, payload)
         SELECT $1, 'pre-' || lpad(n::text, 6, '0'), 'p1', 'preloaded row ' || n, false, '\\x00'::bytea
           FROM generate_series(0, $2::bigint - 1) AS n
         ON CONFLICT DO NOTHING",
        &[&partition, &(rows as i64)],
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}
