//! `bench_segments <dsn>` — bootstrap at scale (issue 12), one run on one durable server: a table of
//! six columns holding `BENCH_SEG_ROWS` rows (default 100,000) in one scope, bootstrapped
//!
//! - by a plain `COPY (SELECT …) TO STDOUT` of the same rows (the baseline),
//! - on the inline rows lane (`accept = 0b0001`, today's path before issue 12),
//! - on the external rows lane (`accept = 0b0010`: every page a `SEGMENT_REF`, downloaded like the
//!   gateway does: `syncular.segment_open`, then `syncular.segment_chunk` per 1 MiB chunk), first
//!   build and reused (a second client, same scopes, same pin),
//! - on the image lane (`accept = 0b0110`: one SQLite image per table), first build and reused,
//! - end to end by the real client (`syncular-client`, default accept, applying into its SQLite),
//!
//! then the peak private memory of the backend serving a `BENCH_SEG_BIG_ROWS`-row bootstrap
//! (default 1,000,000; 0 skips it) on each lane in rounds, and inline in one streamed response
//! (`syncular.pull_stream`, budget 256 MiB), sampled from `/proc/<pid>/status` (`RssAnon`) while it
//! runs.
//! Rows/s are rows delivered to this process ÷ wall time, every segment's bytes checked against
//! its content address. The raw lanes run on one open connection, as a gateway's pooled one, each
//! figure the median of `BENCH_SEG_RUNS` runs (default 5; for first builds and their reuse, each
//! run at a new pin, moved by one row of another scope). Not a test: it fails only when a lane
//! delivers the wrong row count.
//!
//! Last, the object-store lane ([`syncular_integration_tests::seg_storm`]): a storm of
//! `BENCH_SEG_STORM_CLIENTS` bootstraps (default 100; 0 skips it) of one `BENCH_SEG_STORM_ROWS`-row
//! image through a gateway without and with the object store, Postgres's CPU and bytes next to
//! each other. `BENCH_SEG_STORM_ONLY=1` runs only that lane.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use ssp2::model::{Frame, MediaType};
use syncular_client::{ClientLimits, SyncClient};
use syncular_integration_tests::seg_storm;
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::{pull_header, subscription, RawSession};

const TABLE: &str = "bench_items";
const SCOPE_VALUE: &str = "w1";

fn schema_ir() -> Value {
    json!({
        "version": 1,
        "tables": [{
            "name": TABLE,
            "primaryKey": "id",
            "columns": [
                { "name": "id", "type": "string", "nullable": false },
                { "name": "ws", "type": "string", "nullable": false },
                { "name": "title", "type": "string", "nullable": false },
                { "name": "n", "type": "integer", "nullable": false },
                { "name": "x", "type": "float", "nullable": true },
                { "name": "flag", "type": "boolean", "nullable": false }
            ],
            "scopes": [{ "pattern": "ws:{ws}" }]
        }]
    })
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn connect(dsn: &str) -> Client {
    Client::connect(dsn, NoTls).unwrap_or_else(|e| panic!("connect {dsn}: {e}"))
}

/// Writes `rows` rows of scope `w1` into `partition` with plain SQL (captured as commits), in
/// statements of at most 100,000 rows.
fn load(dsn: &str, partition: &str, rows: usize) {
    let mut c = connect(dsn);
    c.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&partition]).unwrap();
    let mut from = 0usize;
    while from < rows {
        let to = (from + 100_000).min(rows);
        c.batch_execute(&format!(
            "INSERT INTO public.{TABLE} (id, ws, title, n, x, flag) \
             SELECT 'row-' || lpad(g::text, 8, '0'), '{SCOPE_VALUE}', 'title of row ' || g, g, g * 0.5, g % 2 = 0 \
               FROM generate_series({from}, {}) g",
            to - 1
        ))
        .unwrap();
        from = to;
    }
}

fn copy_rows_per_s(dsn: &str, partition: &str, rows: usize) -> f64 {
    use std::io::Read;
    let mut c = connect(dsn);
    let mut times = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut reader = c
            .copy_out(&format!(
                "COPY (SELECT id, ws, title, n, x, flag FROM public.{TABLE} \
                  WHERE _sync_partition = '{partition}' AND ws = '{SCOPE_VALUE}' ORDER BY id) TO STDOUT"
            ))
            .unwrap();
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        let lines = out.iter().filter(|b| **b == b'\n').count();
        assert_eq!(lines, rows, "COPY returned {lines} rows");
        times.push(t.elapsed());
    }
    rows as f64 / median(times).as_secs_f64()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One lane's bootstrap through raw SSP2 rounds on an open session (segments are downloaded on
/// the session's connection): follows the resume token until the table is done, downloads every
/// `SEGMENT_REF` like the gateway does and checks its content address. Returns (rows delivered,
/// segments by reference, bytes downloaded).
fn bootstrap_session(s: &mut RawSession, accept: u8) -> (u64, usize, usize) {
    let allowed = json!({ "ws": ["*"] });
    let partition = s.partition.clone();
    s.acquire_epoch().unwrap();
    let requested = format!("{{\"ws\":[\"{SCOPE_VALUE}\"]}}");
    let mut token: Option<String> = None;
    let (mut rows, mut refs, mut bytes) = (0u64, 0usize, 0usize);
    for _round in 0..10_000 {
        let cursor = if token.is_some() { 0 } else { -1 };
        let msg = s
            .round(vec![
                pull_header(0, 50_000, 50, accept),
                subscription("s", TABLE, &[("ws", &[SCOPE_VALUE])], cursor, token.clone()),
            ])
            .unwrap();
        token = None;
        for frame in &msg.frames {
            match frame {
                Frame::SegmentInline { payload } => {
                    let seg = ssp2::decode_rows_segment(payload).unwrap();
                    rows += seg.blocks.iter().map(|b| b.len() as u64).sum::<u64>();
                    bytes += payload.len();
                }
                Frame::SegmentRef { segment_id, row_count, media_type, byte_length, .. } => {
                    // Streamed like the gateway: open (re-authorized), then chunk by chunk.
                    let open: Value = s
                        .conn
                        .query_one(
                            "SELECT syncular.segment_open($1, 'bench', $2, $3, $4::jsonb)",
                            &[&partition, segment_id, &requested, &allowed],
                        )
                        .unwrap()
                        .get(0);
                    let mut got = Vec::new();
                    for idx in 0..open["chunkCount"].as_i64().unwrap() as i32 {
                        let chunk: Vec<u8> = s
                            .conn
                            .query_one("SELECT syncular.segment_chunk($1, $2, $3)", &[&partition, segment_id, &idx])
                            .unwrap()
                            .get(0);
                        got.extend_from_slice(&chunk);
                    }
                    let hex: String = Sha256::digest(&got).iter().map(|b| format!("{b:02x}")).collect();
                    assert_eq!(format!("sha256:{hex}"), *segment_id, "content address");
                    assert_eq!(got.len() as i64, *byte_length);
                    if *media_type == MediaType::Rows {
                        let seg = ssp2::decode_rows_segment(&got).unwrap();
                        assert_eq!(seg.blocks.iter().map(|b| b.len() as i64).sum::<i64>(), *row_count);
                    }
                    rows += *row_count as u64;
                    refs += 1;
                    bytes += got.len();
                }
                Frame::SubEnd { bootstrap_state, .. } => {
                    token = bootstrap_state.as_ref().map(|t| t.0.clone());
                }
                _ => {}
            }
        }
        if token.is_none() {
            return (rows, refs, bytes);
        }
    }
    panic!("bootstrap did not finish in 10,000 rounds");
}

struct Lane {
    label: &'static str,
    accept: u8,
}

/// One timed bootstrap by a new client (`client_id`) on `conn`, an open connection that earlier
/// runs used too — as a gateway's pooled connection would be. Returns rows/s, segments by
/// reference and bytes downloaded.
fn timed_raw(conn: &mut Option<Client>, partition: &str, client_id: &str, lane: &Lane, rows: usize) -> (f64, usize, usize) {
    let mut s = RawSession::new(conn.take().expect("connection"), partition, "bench", client_id, Some(json!({ "ws": ["*"] })));
    let t = Instant::now();
    let (got, refs, bytes) = bootstrap_session(&mut s, lane.accept);
    let elapsed = t.elapsed();
    *conn = Some(s.conn);
    assert_eq!(got, rows as u64, "{}: rows delivered", lane.label);
    (rows as f64 / elapsed.as_secs_f64(), refs, bytes)
}

fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Moves the partition's pin (`maxCommitSeq`) with one row of another scope: the next bootstrap of
/// scope `w1` has a new publication context, so it builds again — over the same 100,000 rows.
fn bump_pin(admin: &mut Client, partition: &str, run: usize) {
    admin.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&partition]).unwrap();
    admin
        .execute(
            &format!("INSERT INTO public.{TABLE} (id, ws, title, n, x, flag) VALUES ($1, 'other', 'pin bump', 0, 0, false)"),
            &[&format!("bump-{run}")],
        )
        .unwrap();
}

fn real_client_rows_per_s(dsn: &str, partition: &str, client_id: &str, accept: Option<u8>, rows: usize) -> f64 {
    let limits = ClientLimits { accept, ..ClientLimits::default() };
    let mut client = SyncClient::new(client_id.to_owned(), &schema_ir(), limits).unwrap();
    client
        .subscribe("s".to_owned(), TABLE.to_owned(), vec![("ws".to_owned(), vec![SCOPE_VALUE.to_owned()])], None)
        .unwrap();
    let mut transport = PgTransport::new(connect(dsn), partition, "bench", Some(json!({ "ws": ["*"] })));
    let t = Instant::now();
    match client.sync_until_idle(&mut transport, Some(1000)) {
        syncular_client::SyncOutcome::Ok(_) => {}
        syncular_client::SyncOutcome::Failed { error_code, message } => panic!("{error_code}: {message}"),
    }
    let elapsed = t.elapsed();
    let held = client.read_rows(TABLE).unwrap().len();
    assert_eq!(held, rows, "real client holds every row");
    rows as f64 / elapsed.as_secs_f64()
}

/// A whole bootstrap in ONE streamed response (§1.4): `syncular.pull_stream` read row by row, as the
/// gateway reads it, with the response budget at its maximum (256 MiB) and 50 pages of 50,000
/// rows inline, so the table arrives in one round. Returns (rows, response bytes).
fn streamed_bootstrap(s: &mut RawSession) -> (u64, usize) {
    s.acquire_epoch().unwrap();
    s.conn.batch_execute("SET syncular.response_budget_bytes = 268435456").unwrap();
    let request = s.encode(vec![pull_header(0, 50_000, 50, 0b0001), subscription("s", TABLE, &[("ws", &[SCOPE_VALUE])], -1, None)]);
    let allowed = json!({ "ws": ["*"] });
    let partition = s.partition.clone();
    let params: [&(dyn postgres::types::ToSql + Sync); 4] = [&partition, &"bench", &request, &allowed];
    let mut body = Vec::new();
    {
        use postgres::fallible_iterator::FallibleIterator;
        let mut rows = s
            .conn
            .query_raw("SELECT syncular.pull_stream($1::text, $2::text, $3::bytea, $4::jsonb)", params)
            .unwrap();
        while let Some(row) = rows.next().unwrap() {
            body.extend_from_slice(row.get::<_, &[u8]>(0));
        }
    }
    s.conn.batch_execute("RESET syncular.response_budget_bytes").unwrap();
    let msg = syncular_integration_tests::wire::decode_response(&body).unwrap();
    let mut rows = 0u64;
    for frame in &msg.frames {
        if let Frame::SegmentInline { payload } = frame {
            rows += ssp2::decode_rows_segment(payload).unwrap().blocks.iter().map(|b| b.len() as u64).sum::<u64>();
        }
    }
    (rows, body.len())
}

/// Runs `bootstrap` (of `rows` rows) on a fresh backend (its peak is this bootstrap's alone) of `partition` as client
/// `client_id`, prints its peak private memory next to the idle one and the goal (< 64 MiB) with
/// the note `bootstrap` returns, and returns the verdict line.
fn peak_memory(
    dsn: &str,
    partition: &str,
    rows: usize,
    client_id: &str,
    label: &str,
    bootstrap: impl FnOnce(&mut RawSession) -> String,
) -> String {
    let mut s = RawSession::new(connect(dsn), partition, "bench", client_id, Some(json!({ "ws": ["*"] })));
    let pid: i32 = s.conn.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let baseline = peak_private_kib(pid, || std::thread::sleep(Duration::from_millis(20)));
    let t = Instant::now();
    let mut note = String::new();
    let peak = peak_private_kib(pid, || note = bootstrap(&mut s));
    let verdict = if peak < 64 * 1024 { "met" } else { "NOT met" };
    println!(
        "peak backend private memory, {rows}-row bootstrap, {label}: {} MiB (idle {} MiB, {:.1} s{note}); goal < 64 MiB: {verdict}",
        peak / 1024,
        baseline / 1024,
        t.elapsed().as_secs_f64()
    );
    format!("peak memory {label}: {} MiB, goal < 64 MiB: {verdict}", peak / 1024)
}

/// Peak `RssAnon` (KiB) of backend `pid` while `work` runs, sampled every 2 ms.
fn peak_private_kib(pid: i32, work: impl FnOnce()) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let sampler = std::thread::spawn(move || {
        let mut peak = 0u64;
        while !flag.load(Ordering::Relaxed) {
            if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                for line in s.lines() {
                    if let Some(v) = line.strip_prefix("RssAnon:") {
                        let kib: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                        peak = peak.max(kib);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        peak
    });
    work();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap()
}

/// Profiling aid (`BENCH_SEG_PROFILE=inline|ref|image`): one session bootstraps `loops` times on
/// that lane (the first run builds, the rest reuse, except inline which always builds), after
/// printing its backend pid and pausing 3 s so a profiler can attach (`perf record -p`).
fn profile_loop(dsn: &str, partition: &str, lane: &str, loops: usize, rows: usize) {
    let accept = match lane {
        "inline" => 0b0001,
        "ref" => 0b0010,
        "image" => 0b0110,
        other => panic!("BENCH_SEG_PROFILE={other}: inline, ref or image"),
    };
    let mut s = RawSession::new(connect(dsn), partition, "bench", "profile", Some(json!({ "ws": ["*"] })));
    let pid: i32 = s.conn.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    println!("profile: backend pid {pid}");
    std::thread::sleep(Duration::from_secs(3));
    for i in 0..loops {
        let t = Instant::now();
        let (got, _, _) = bootstrap_session(&mut s, accept);
        assert_eq!(got, rows as u64);
        println!("profile: run {i}: {:.0} rows/s", rows as f64 / t.elapsed().as_secs_f64());
    }
}

fn main() {
    let dsn = std::env::args().nth(1).expect("usage: bench_segments <dsn>");
    let storm = seg_storm::StormConfig::from_env();
    if std::env::var("BENCH_SEG_STORM_ONLY").is_ok_and(|v| v == "1") {
        print_verdicts(seg_storm::run(&dsn, &storm));
        return;
    }
    let rows = env_usize("BENCH_SEG_ROWS", 100_000);
    let big_rows = env_usize("BENCH_SEG_BIG_ROWS", 1_000_000);
    let mut admin = connect(&dsn);
    admin.execute("SELECT syncular.register_schema($1::jsonb)", &[&schema_ir()]).unwrap();
    let partition = "bench-seg";
    let t = Instant::now();
    load(&dsn, partition, rows);
    println!("loaded {rows} rows (6 columns, one scope) in {:.1} s", t.elapsed().as_secs_f64());
    admin.batch_execute("CHECKPOINT").unwrap();

    if let Ok(lane) = std::env::var("BENCH_SEG_PROFILE") {
        profile_loop(&dsn, partition, &lane, env_usize("BENCH_SEG_PROFILE_LOOPS", 20), rows);
        return;
    }
    let copy = copy_rows_per_s(&dsn, partition, rows);
    println!("\n{:<44} {:>12} {:>9} {:>9}  notes", "path", "rows/s", "÷ COPY", "÷ inline");
    println!("{:<44} {:>12.0} {:>9.2} {:>9}", "COPY (SELECT …) TO STDOUT (median of 3)", copy, 1.0, "");
    let runs = env_usize("BENCH_SEG_RUNS", 5).max(1);
    let mut pool = Some(connect(&dsn));
    let inline = Lane { label: "inline rows lane (accept 0b0001)", accept: 0b0001 };
    let mut inline_runs = Vec::new();
    let mut inline_bytes = 0;
    for run in 0..runs {
        let (rps, _, bytes) = timed_raw(&mut pool, partition, &format!("c-inline-{run}"), &inline, rows);
        inline_runs.push(rps);
        inline_bytes = bytes;
    }
    let inline_rps = median_f64(inline_runs);
    println!("{:<44} {:>12.0} {:>9.2} {:>9.2}  {} bytes inline", inline.label, inline_rps, inline_rps / copy, 1.0, inline_bytes);
    let mut verdicts = Vec::new();
    for (lane, first_goal, reused_goal) in [
        (Lane { label: "rows lane by reference (accept 0b0010)", accept: 0b0010 }, Some(300_000.0), Some(1_000_000.0)),
        (Lane { label: "image lane (accept 0b0110)", accept: 0b0110 }, None, Some(3_000_000.0)),
    ] {
        // Per run: a new pin, one client that builds, one that reuses what it built.
        let (mut first, mut reused, mut refs, mut bytes) = (Vec::new(), Vec::new(), 0, 0);
        for run in 0..runs {
            bump_pin(&mut admin, partition, usize::from(lane.accept) * 1000 + run);
            first.push(timed_raw(&mut pool, partition, &format!("c-{}-a{run}", lane.accept), &lane, rows).0);
            let (rps, r, b) = timed_raw(&mut pool, partition, &format!("c-{}-b{run}", lane.accept), &lane, rows);
            reused.push(rps);
            (refs, bytes) = (r, b);
        }
        for (run, samples, goal) in [("first build", first, first_goal), ("reused", reused, reused_goal)] {
            let rps = median_f64(samples);
            let label = format!("{}: {run}", lane.label);
            println!(
                "{:<44} {:>12.0} {:>9.2} {:>9.2}  {refs} segment(s), {bytes} bytes downloaded",
                label, rps, rps / copy, rps / inline_rps
            );
            if let Some(goal) = goal {
                verdicts.push(format!("{label}: {rps:.0} rows/s, goal ≥ {goal:.0}: {}", if rps >= goal { "met" } else { "NOT met" }));
            }
        }
    }
    let stored: i64 = admin
        .query_one("SELECT count(*) FROM syncular.sync_segments WHERE partition = $1", &[&partition])
        .unwrap()
        .get(0);
    println!("stored segments after both lanes ({runs} pins, each built once per pin): {stored}");
    for (label, accept) in [("real client, accept 0b0011 (rows)", Some(0b0011u8)), ("real client, default accept 0b0111 (image)", None)] {
        // Twice: the second client reuses what the first built.
        for run in ["first", "reused"] {
            let rps = real_client_rows_per_s(&dsn, partition, &format!("rc-{label}-{run}"), accept, rows);
            println!("{:<44} {:>12.0} {:>9.2} {:>9.2}  end to end, applied", format!("{label}: {run}"), rps, rps / copy, rps / inline_rps);
        }
    }

    if big_rows > 0 {
        let big = "bench-seg-big";
        let t = Instant::now();
        load(&dsn, big, big_rows);
        println!("\nloaded {big_rows} rows into {big} in {:.1} s", t.elapsed().as_secs_f64());
        for (label, accept) in [("inline rows lane", 0b0001u8), ("rows lane by reference", 0b0010), ("image lane", 0b0110)] {
            verdicts.push(peak_memory(&dsn, big, big_rows, &format!("big-{accept}"), label, |s| {
                let (got, _, _) = bootstrap_session(s, accept);
                assert_eq!(got, big_rows as u64, "{label}: rows delivered");
                String::new()
            }));
        }
        // The same rows in one streamed response (what `POST /sync` reads through the gateway).
        let label = "inline, one streamed response";
        verdicts.push(peak_memory(&dsn, big, big_rows, "big-streamed", label, |s| {
            let (got, bytes) = streamed_bootstrap(s);
            assert_eq!(got, big_rows as u64, "{label}: rows delivered");
            format!(", {} MB response", bytes / 1_000_000)
        }));
    }
    if storm.clients > 0 {
        verdicts.extend(seg_storm::run(&dsn, &storm));
    }
    print_verdicts(verdicts);
}

fn print_verdicts(verdicts: Vec<String>) {
    println!("\nverdicts:");
    for v in verdicts {
        println!("  {v}");
    }
}
