//! `bench_capture`: what capturing plain SQL writes as commits (issue 9)
//! costs, next to the same writes on a plain table of the same shape, on the
//! same server in the same run.
//!
//! 1. `COPY … FROM STDIN` of `BENCH_CAPTURE_ROWS` (default 100,000) rows into
//!    the app table `public.tasks` (`SET syncular.partition`, a fresh
//!    partition each run) next to `COPY` of the same rows into
//!    `public.bench_capture_plain` — the same typed columns (`id`,
//!    `project_id`, `title`, `done`, `priority`), the same primary key
//!    (partition, id), no triggers; the plain rows carry their partition in
//!    the data, the captured ones take it from the setting.
//! 2. single-row autocommit `UPDATE … SET title = $1 WHERE <partition> = $2
//!    AND <row id> = $3` through the capture next to the same UPDATE on the
//!    plain table, from one connection, `BENCH_CAPTURE_UPDATES` (default
//!    2,000) per side per run, the two sides alternated statement by
//!    statement.
//!
//! 3. the seed's floor of a captured `COPY` (issue 29): the plain `COPY` and,
//!    in the same transaction, exactly the log rows the seed's storage keeps
//!    for it — the counter's increment and one `sync_commits` header, one
//!    `sync_changes` row per row (scopes JSON, a payload of the row's text),
//!    the distinct `sync_change_scopes` entries and one `sync_row_scopes`
//!    entry per row, set-based ([`FLOOR_LOG`]) — so capture ÷ floor shows
//!    what the capture adds to what any server keeping those tables and
//!    indexes must write.
//!
//! Each side is measured `BENCH_CAPTURE_RUNS` (default 3) times, sides
//! alternated; the median is reported, and the ratios capture ÷ plain
//! throughput next to issue 29's goals (COPY ≥ 0.30, UPDATE ≥ 0.50), floor ÷
//! plain and capture ÷ floor. `CHECKPOINT` runs before every
//! measured COPY. Usage: `bench_capture [DSN]` (default
//! `$SYNCULAR_TEST_DSN`); `scripts/bench-capture` builds it in release mode
//! and starts a durable server (fsync=on, synchronous_commit=on). Not a
//! test: it fails only when a captured write did not become the expected
//! commits.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use postgres::Client;
use syncular_integration_tests::capture::set_partition;
use syncular_integration_tests::{connect_to, env_usize};
use syncular_integration_tests::fixtures::{partition_name, register_schema};

/// Issue 29: captured COPY ÷ plain COPY, at least.
const GOAL_COPY: f64 = 0.30;
/// Issue 29: captured single-row UPDATE ÷ plain UPDATE, at least.
const GOAL_UPDATE: f64 = 0.50;
/// The floor's log rows for the rows `$1` (partition) of the plain table, in
/// the COPY's transaction: what the seed's tables hold for one captured
/// commit of those rows (every index of theirs maintained).
const FLOOR_LOG: &str = "INSERT INTO syncular.sync_partitions (partition) VALUES ($1);
    WITH s AS (UPDATE syncular.sync_partitions SET max_commit_seq = max_commit_seq + 1
               WHERE partition = $1 RETURNING max_commit_seq AS seq)
    INSERT INTO syncular.sync_commits (partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms)
    SELECT $1, seq, 'sql:bench', pg_catalog.gen_random_uuid()::text, 'bench', 0 FROM s;
    INSERT INTO syncular.sync_changes (partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
    SELECT $1, 1, (row_number() OVER ())::int - 1, 'tasks', id, 1, 1, jsonb_build_object('project_id', project_id),
           convert_to(id || project_id || title, 'UTF8')
      FROM public.bench_capture_plain WHERE partition = $1;
    INSERT INTO syncular.sync_change_scopes (partition, tbl, var, value, commit_seq)
    SELECT DISTINCT $1, 'tasks', 'project_id', project_id, 1 FROM public.bench_capture_plain WHERE partition = $1;
    INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id)
    SELECT $1, 'tasks', 'project_id', project_id, id FROM public.bench_capture_plain WHERE partition = $1";
const PLAIN_DDL: &str = "DROP TABLE IF EXISTS public.bench_capture_plain;
    CREATE TABLE public.bench_capture_plain(
    partition text NOT NULL, id text NOT NULL, project_id text, title text, done boolean, priority bigint,
    PRIMARY KEY (partition, id))";
const CAPTURE_COPY: &str = "COPY public.tasks (id, project_id, title, done, priority) FROM STDIN";
const PLAIN_COPY: &str =
    "COPY public.bench_capture_plain (partition, id, project_id, title, done, priority) FROM STDIN";
const CAPTURE_UPDATE: &str =
    "UPDATE public.tasks SET title = $1 WHERE _sync_partition = $2 AND _sync_row_id = $3";
const PLAIN_UPDATE: &str =
    "UPDATE public.bench_capture_plain SET title = $1 WHERE partition = $2 AND id = $3";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_capture failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The COPY text of `rows` task rows (`id project_id title done priority`),
/// each line prefixed by `prefix` (the plain table's partition column).
fn copy_data(rows: usize, prefix: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(rows * 64);
    for i in 0..rows {
        if let Some(p) = prefix {
            out.extend_from_slice(p.as_bytes());
            out.push(b'\t');
        }
        let priority = if i % 5 == 0 {
            "\\N".to_owned()
        } else {
            (i % 1000).to_string()
        };
        let line = format!(
            "task-{i:07}\tproject-{}\ttitle of task {i}\t{}\t{priority}\n",
            i % 50,
            i % 2 == 0
        );
        out.extend_from_slice(line.as_bytes());
    }
    out
}

fn copy_in(conn: &mut Client, sql: &str, data: &[u8]) -> Result<u64, String> {
    let mut w = conn.copy_in(sql).map_err(err)?;
    w.write_all(data).map_err(err)?;
    w.finish().map_err(err)
}

/// `(commits, changes)` of `partition`'s log.
fn log_counts(conn: &mut Client, partition: &str) -> Result<(i64, i64), String> {
    let r = conn
        .query_one(
            "SELECT (SELECT count(*) FROM syncular.sync_commits WHERE partition = $1)::int8,
                    (SELECT count(*) FROM syncular.sync_changes WHERE partition = $1)::int8",
            &[&partition],
        )
        .map_err(err)?;
    Ok((r.get(0), r.get(1)))
}

/// One COPY through the capture into a fresh partition; checks that it became
/// one commit of `rows` changes.
fn capture_copy(
    dsn: &str,
    admin: &mut Client,
    rows: usize,
    data: &[u8],
    label: &str,
) -> Result<Duration, String> {
    let partition = partition_name(label);
    let mut conn = connect_to(dsn);
    set_partition(&mut conn, &partition, Some("bench")).map_err(err)?;
    admin.batch_execute("CHECKPOINT").map_err(err)?;
    let began = Instant::now();
    let n = copy_in(&mut conn, CAPTURE_COPY, data)?;
    let elapsed = began.elapsed();
    if n != rows as u64 || log_counts(admin, &partition)? != (1, rows as i64) {
        return Err(format!(
            "the captured COPY into {partition} did not become one commit of {rows} changes"
        ));
    }
    Ok(elapsed)
}

/// One COPY into the plain table, fresh partition.
fn plain_copy(dsn: &str, admin: &mut Client, rows: usize, label: &str) -> Result<Duration, String> {
    let partition = partition_name(label);
    let data = copy_data(rows, Some(&partition));
    let mut conn = connect_to(dsn);
    admin.batch_execute("CHECKPOINT").map_err(err)?;
    let began = Instant::now();
    let n = copy_in(&mut conn, PLAIN_COPY, &data)?;
    let elapsed = began.elapsed();
    if n != rows as u64 {
        return Err(format!("the plain COPY wrote {n} rows, not {rows}"));
    }
    Ok(elapsed)
}

/// The seed's floor: one COPY into the plain table and the log rows of one
/// captured commit of those rows ([`FLOOR_LOG`]), one transaction, fresh
/// partition.
fn floor_copy(dsn: &str, admin: &mut Client, rows: usize, label: &str) -> Result<Duration, String> {
    let partition = partition_name(label);
    let data = copy_data(rows, Some(&partition));
    let log = FLOOR_LOG.replace("$1", &format!("'{partition}'"));
    let mut conn = connect_to(dsn);
    admin.batch_execute("CHECKPOINT").map_err(err)?;
    let began = Instant::now();
    conn.batch_execute("BEGIN").map_err(err)?;
    let n = copy_in(&mut conn, PLAIN_COPY, &data)?;
    conn.batch_execute(&log).map_err(err)?;
    conn.batch_execute("COMMIT").map_err(err)?;
    let elapsed = began.elapsed();
    if n != rows as u64 || log_counts(admin, &partition)? != (1, rows as i64) {
        return Err(format!("the floor's COPY into {partition} did not write {rows} rows and their log"));
    }
    Ok(elapsed)
}

/// `updates` single-row autocommit UPDATEs per side on one connection,
/// alternated statement by statement (the side going first alternates too);
/// returns the summed statement times (capture, plain).
fn update_round(
    conn: &mut Client,
    partition: &str,
    ids: &[String],
    updates: usize,
    round: usize,
) -> Result<(Duration, Duration), String> {
    let capture = conn.prepare(CAPTURE_UPDATE).map_err(err)?;
    let plain = conn.prepare(PLAIN_UPDATE).map_err(err)?;
    let (mut tc, mut tp) = (Duration::ZERO, Duration::ZERO);
    for j in 0..updates {
        let id = &ids[j % ids.len()];
        let title = format!("round {round} update {j}");
        for side in 0..2 {
            let capture_side = (side + j + round).is_multiple_of(2);
            let began = Instant::now();
            let n = if capture_side {
                conn.execute(&capture, &[&title, &partition, id])
                    .map_err(err)?
            } else {
                conn.execute(&plain, &[&title, &partition, id])
                    .map_err(err)?
            };
            let elapsed = began.elapsed();
            if n != 1 {
                return Err(format!("an UPDATE of {id} touched {n} rows"));
            }
            if capture_side {
                tc += elapsed;
            } else {
                tp += elapsed;
            }
        }
    }
    Ok((tc, tp))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn secs(v: &[Duration]) -> String {
    v.iter()
        .map(|d| format!("{:>7.2}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(" ")
}

fn run() -> Result<(), String> {
    let dsn = std::env::args()
        .nth(1)
        .or_else(|| std::env::var(syncular_integration_tests::DSN_ENV).ok())
        .ok_or("usage: bench_capture DSN (or set SYNCULAR_TEST_DSN)")?;
    let rows = env_usize("BENCH_CAPTURE_ROWS", 100_000);
    let updates = env_usize("BENCH_CAPTURE_UPDATES", 2_000);
    let runs = env_usize("BENCH_CAPTURE_RUNS", 3).max(1);
    let mut admin = connect_to(&dsn);
    register_schema(&mut admin).map_err(err)?;
    admin.batch_execute(PLAIN_DDL).map_err(err)?;
    let show = |admin: &mut Client, name: &str| -> Result<String, String> {
        Ok(admin
            .query_one(&format!("SHOW {name}"), &[])
            .map_err(err)?
            .get::<_, String>(0))
    };
    println!(
        "bench_capture: Postgres {}, fsync={}, synchronous_commit={}, wal_sync_method={}",
        show(&mut admin, "server_version")?,
        show(&mut admin, "fsync")?,
        show(&mut admin, "synchronous_commit")?,
        show(&mut admin, "wal_sync_method")?
    );
    println!("  COPY of {rows} rows per run; {updates} single-row autocommit UPDATEs per side per run; {runs} runs, median");

    // Warm-up (not reported): library load, schema cache, plan caches.
    let warm = rows.min(2_000);
    let warm_data = copy_data(warm, None);
    capture_copy(&dsn, &mut admin, warm, &warm_data, "bench-capture-warm")?;
    plain_copy(&dsn, &mut admin, warm, "bench-capture-warm-plain")?;

    // 1. COPY (and 3., the floor), sides rotated run by run.
    let data = copy_data(rows, None);
    let (mut copy_capture, mut copy_plain, mut copy_floor) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..runs {
        for side in 0..3 {
            match (side + r) % 3 {
                0 => copy_capture.push(capture_copy(&dsn, &mut admin, rows, &data, "bench-capture-copy")?),
                1 => copy_plain.push(plain_copy(&dsn, &mut admin, rows, "bench-capture-copy-plain")?),
                _ => copy_floor.push(floor_copy(&dsn, &mut admin, rows, "bench-capture-copy-floor")?),
            }
        }
    }

    // 2. Single-row UPDATEs: one partition, the same rows in both tables.
    let target_rows = updates.clamp(1, 2_000);
    let partition = partition_name("bench-capture-update");
    let mut conn = connect_to(&dsn);
    set_partition(&mut conn, &partition, Some("bench")).map_err(err)?;
    copy_in(&mut conn, CAPTURE_COPY, &copy_data(target_rows, None))?;
    copy_in(
        &mut conn,
        PLAIN_COPY,
        &copy_data(target_rows, Some(&partition)),
    )?;
    admin
        .batch_execute("ANALYZE public.tasks; ANALYZE public.bench_capture_plain")
        .map_err(err)?;
    let ids: Vec<String> = (0..target_rows).map(|i| format!("task-{i:07}")).collect();
    update_round(&mut conn, &partition, &ids, updates.min(200), 1000)?; // warm-up, not reported
    let before = log_counts(&mut admin, &partition)?.0;
    let (mut upd_capture, mut upd_plain) = (Vec::new(), Vec::new());
    for r in 0..runs {
        let (c, p) = update_round(&mut conn, &partition, &ids, updates, r)?;
        upd_capture.push(c);
        upd_plain.push(p);
    }
    let captured = log_counts(&mut admin, &partition)?.0 - before;
    if captured != (runs * updates) as i64 {
        return Err(format!(
            "{} captured UPDATEs became {captured} commits",
            runs * updates
        ));
    }

    let copy_ratio =
        median(copy_plain.clone()).as_secs_f64() / median(copy_capture.clone()).as_secs_f64();
    let floor_ratio =
        median(copy_plain.clone()).as_secs_f64() / median(copy_floor.clone()).as_secs_f64();
    let capture_vs_floor =
        median(copy_floor.clone()).as_secs_f64() / median(copy_capture.clone()).as_secs_f64();
    let upd_ratio =
        median(upd_plain.clone()).as_secs_f64() / median(upd_capture.clone()).as_secs_f64();
    println!();
    let runs_header: String = (1..=runs)
        .map(|r| format!("{:>7}", format!("run{r}")))
        .collect::<Vec<_>>()
        .join(" ");
    println!(
        "{:<48} {runs_header} {:>8} {:>10}",
        "scenario (seconds per run)", "median", "per sec"
    );
    let line = |name: &str, v: &[Duration], ops: usize| {
        let m = median(v.to_vec());
        println!(
            "{name:<48} {} {:>8.2} {:>10.0}",
            secs(v),
            m.as_secs_f64(),
            ops as f64 / m.as_secs_f64()
        );
    };
    line(
        &format!("COPY {rows} rows, public.tasks (capture)"),
        &copy_capture,
        rows,
    );
    line(&format!("COPY {rows} rows, plain table"), &copy_plain, rows);
    line(&format!("COPY {rows} rows, the seed's floor"), &copy_floor, rows);
    line(
        &format!("{updates} single-row UPDATEs, public.tasks (capture)"),
        &upd_capture,
        updates,
    );
    line(
        &format!("{updates} single-row UPDATEs, plain table"),
        &upd_plain,
        updates,
    );
    println!();
    println!(
        "{:<48} {:>8} {:>8}",
        "ratio capture ÷ plain throughput (medians)", "ratio", "goal"
    );
    for (name, ratio, goal) in [
        ("COPY", copy_ratio, GOAL_COPY),
        ("single-row autocommit UPDATE", upd_ratio, GOAL_UPDATE),
    ] {
        let verdict = if ratio >= goal { "met" } else { "NOT met" };
        println!("{name:<48} {ratio:>8.3} {:>8}  {verdict}", format!("≥ {goal:.2}"));
    }
    println!();
    println!("the seed's floor of a captured COPY (plain COPY + the log rows the seed's tables keep for it):");
    println!("{:<48} {floor_ratio:>8.3}   (the bound capture ÷ plain cannot pass)", "floor ÷ plain COPY");
    println!("{:<48} {capture_vs_floor:>8.3}", "capture ÷ floor COPY");
    Ok(())
}
