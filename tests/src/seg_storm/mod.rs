//! The object-store lane of `scripts/bench-segments` (issue 28): a bootstrap storm of
//! `BENCH_SEG_STORM_CLIENTS` clients (default 100), `BENCH_SEG_STORM_PARALLEL` at a time (default
//! 8), each fetching the whole-table SQLite image of `BENCH_SEG_STORM_ROWS` rows (default
//! 1,000,000, one partition, one scope), in two lanes on the same server in the same run:
//!
//! - **Postgres only**: a gateway without the object store; every image is streamed from Postgres
//!   through the direct endpoint `GET /segments/{id}` (`accept` 0b0110);
//! - **object store**: a gateway whose mover copies into a real S3 server (`s3s-fs`); the clients
//!   advertise `accept` bit 3 (0b1110) and fetch the presigned URL from the bucket.
//!
//! In each lane a first client builds the image (a new pin per lane: each lane builds its own) and,
//! in the object-store lane, the storm starts once the mover recorded every live segment in
//! `syncular.sync_segment_objects`. Measured over the storm alone: CPU of every process of the
//! Postgres server (`/proc/<pid>/stat` utime + stime of the postmaster, its live children and its
//! reaped ones), of the gateway, of the S3 server and of this process; the bytes Postgres served
//! (`POST /sync` responses + segment downloads through the gateway, counted by the clients and
//! cross-checked against the gateway's `/segments/{id}` 200 count) and the bytes the bucket
//! served; each bootstrap's wall time. The clients are raw SSP2 requests (module [`client`]): the
//! bench measures the server side, not SQLite applying.

pub mod client;
pub mod setup;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::gateway::Gateway;
use crate::object_store_fixture::segments_all_stored;
use crate::rtbench::procstat::{listener_pid, postmaster_of, CpuProbe, CpuSample};
use crate::s3_fixture::S3Server;
use crate::{connect_to, env_usize};
use client::{agent, bootstrap, Outcome, Target};

const PARTITION: &str = "storm";
/// The image lane, without / with `accept` bit 3 (presigned URLs).
const ACCEPT_PG: u8 = 0b0110;
const ACCEPT_URL: u8 = 0b1110;
/// The goal: Postgres serves at most this share of the bytes once the object is published.
const GOAL_PG_SHARE: f64 = 0.01;

/// The knobs.
pub struct StormConfig {
    pub rows: usize,
    pub clients: usize,
    pub parallel: usize,
}

impl StormConfig {
    /// From `BENCH_SEG_STORM_ROWS`, `BENCH_SEG_STORM_CLIENTS` (0: no storm),
    /// `BENCH_SEG_STORM_PARALLEL`.
    pub fn from_env() -> StormConfig {
        StormConfig {
            rows: env_usize("BENCH_SEG_STORM_ROWS", 1_000_000),
            clients: env_usize("BENCH_SEG_STORM_CLIENTS", 100),
            parallel: env_usize("BENCH_SEG_STORM_PARALLEL", 8).max(1),
        }
    }
}

/// CPU seconds of the parties over a storm.
#[derive(Default)]
struct Cpu {
    postgres: f64,
    gateway: f64,
    s3: f64,
    bench: f64,
}

/// One lane's storm.
struct Lane {
    label: &'static str,
    outcomes: Vec<Outcome>,
    cpu: Cpu,
    wall: Duration,
    /// `/segments/{id}` 200 responses the gateway counted during the storm.
    direct_served: f64,
}

impl Lane {
    fn sum(&self, f: impl Fn(&Outcome) -> u64) -> u64 {
        self.outcomes.iter().map(f).sum()
    }
    fn pg_bytes(&self) -> u64 {
        self.sum(|o| o.sync_bytes + o.pg_segment_bytes)
    }
    fn bucket_bytes(&self) -> u64 {
        self.sum(|o| o.bucket_bytes)
    }
    fn pg_share(&self) -> f64 {
        self.pg_bytes() as f64 / (self.pg_bytes() + self.bucket_bytes()).max(1) as f64
    }
    fn per_client(&self, x: f64) -> f64 {
        x / self.outcomes.len().max(1) as f64
    }
    fn wall_pct(&self, p: f64) -> Duration {
        let mut v: Vec<Duration> = self.outcomes.iter().map(|o| o.wall).collect();
        v.sort();
        v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
    }
}

/// Who is sampled: the postmaster and the gateway, the S3 server (if any).
struct Probes {
    main: CpuProbe,
    s3: Option<CpuProbe>,
}

impl Probes {
    fn new(dsn: &str, gw: &Gateway, s3: Option<&S3Server>) -> Probes {
        let backend: i32 = connect_to(dsn).query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        let postmaster = postmaster_of(backend as u32).expect("the postmaster's pid (/proc/<backend>/stat)");
        let me = std::process::id();
        let gateway_pid = listener_pid(me, setup::port_of(&gw.base_url)).expect("the gateway's pid");
        let s3 = s3.map(|s| CpuProbe { gateway_pid: listener_pid(me, setup::port_of(&s.endpoint())).expect("the S3 server's pid"), postmaster_pid: None });
        Probes { main: CpuProbe { gateway_pid, postmaster_pid: Some(postmaster) }, s3 }
    }

    fn sample(&self) -> (CpuSample, Option<CpuSample>) {
        (self.main.sample(), self.s3.as_ref().map(CpuProbe::sample))
    }

    fn since(&self, before: &(CpuSample, Option<CpuSample>)) -> Cpu {
        let now = self.sample();
        let (gateway, postgres, bench) = now.0.cpu_secs_since(&before.0);
        let s3 = match (&now.1, &before.1) {
            (Some(a), Some(b)) => a.cpu_secs_since(b).0,
            _ => 0.0,
        };
        Cpu { postgres, gateway, s3, bench }
    }
}

fn direct_served(gw: &Gateway) -> f64 {
    gw.metric("syncular_gateway_http_requests_total{route=\"/segments/{id}\",status=\"200\"")
}

/// Moves the partition's pin with one row of another project: the next bootstrap builds a new image.
fn bump_pin(dsn: &str, tag: &str) {
    let mut c = connect_to(dsn);
    c.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&PARTITION]).unwrap();
    c.execute(
        "INSERT INTO public.tasks (id, project_id, title, done, priority) VALUES ($1, 'p2', 'pin bump', false, NULL)",
        &[&format!("bump-{tag}")],
    )
    .unwrap();
}

/// One client, checked: it got every row.
fn one(t: &Target<'_>, client_id: &str, accept: u8, rows: usize) -> Outcome {
    let o = bootstrap(&agent(), t, client_id, accept).unwrap_or_else(|e| panic!("{client_id}: {e}"));
    assert_eq!(o.rows, rows as u64, "{client_id}: rows described by the segments");
    assert!(o.image_id.is_some(), "{client_id}: no SQLite image (the image lane did not serve)");
    o
}

/// `clients` bootstraps, `parallel` at a time.
fn storm(t: &Target<'_>, cfg: &StormConfig, lane: &str, accept: u8) -> (Vec<Outcome>, Duration) {
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(cfg.clients));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..cfg.parallel.min(cfg.clients) {
            scope.spawn(|| {
                let agent = agent();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= cfg.clients {
                        return;
                    }
                    let id = format!("storm-{lane}-{i}");
                    let o = bootstrap(&agent, t, &id, accept).unwrap_or_else(|e| panic!("{id}: {e}"));
                    assert_eq!(o.rows, cfg.rows as u64, "{id}: rows described by the segments");
                    results.lock().unwrap().push(o);
                }
            });
        }
    });
    (results.into_inner().unwrap(), started.elapsed())
}

/// `775 B`, `12.3 kB`, `54.40 MB`.
fn size(bytes: f64) -> String {
    if bytes < 10e3 {
        format!("{bytes:.0} B")
    } else if bytes < 10e6 {
        format!("{:.1} kB", bytes / 1e3)
    } else {
        format!("{:.2} MB", bytes / 1e6)
    }
}

/// Runs both lanes on the server of `base_dsn` and prints them; returns the verdict lines.
pub fn run(base_dsn: &str, cfg: &StormConfig) -> Vec<String> {
    println!(
        "\nobject store: a bootstrap storm — {} clients, {} at a time, each fetching the SQLite image of {} rows \
         (one partition, one scope) through a release syncular-gateway (--auth dev)",
        cfg.clients, cfg.parallel, cfg.rows
    );
    println!(
        "  clients: raw SSP2 over HTTP (POST /sync, then one GET of the image, SHA-256 and length checked; \
         not applied into SQLite): the server side is measured"
    );
    let dsn = setup::create_db(base_dsn);
    let t = Instant::now();
    setup::seed(&dsn, PARTITION, cfg.rows);
    println!("  loaded {} rows into database {} in {:.1} s (+ VACUUM ANALYZE, CHECKPOINT)", cfg.rows, setup::DB, t.elapsed().as_secs_f64());

    // Lane A: no object store.
    let gw = setup::plain_gateway(&dsn);
    let target = Target { gateway: &gw.base_url, partition: PARTITION, bucket_origin: None };
    let t = Instant::now();
    let first = one(&target, "warm-pg", ACCEPT_PG, cfg.rows);
    let image_bytes = first.pg_segment_bytes;
    println!(
        "  Postgres-only lane: the first client built the image ({}, {} segment(s)) and fetched it in {:.1} s",
        size(image_bytes as f64),
        first.pg_segments,
        t.elapsed().as_secs_f64()
    );
    let probes = Probes::new(&dsn, &gw, None);
    let (before, direct0) = (probes.sample(), direct_served(&gw));
    let (outcomes, wall) = storm(&target, cfg, "pg", ACCEPT_PG);
    let cpu = probes.since(&before);
    let pg_lane = Lane { label: "Postgres only (direct endpoint)", outcomes, cpu, wall, direct_served: direct_served(&gw) - direct0 };
    drop(gw);

    // Lane B: the object store; a new pin, so this lane's first client builds its own image.
    bump_pin(&dsn, "os");
    let s3 = S3Server::start_with_bucket("syncular-storm");
    let gw = setup::tier_gateway(&dsn, &s3);
    let origin = s3.endpoint();
    let target = Target { gateway: &gw.base_url, partition: PARTITION, bucket_origin: Some(&origin) };
    let t = Instant::now();
    let first = one(&target, "warm-os", ACCEPT_URL, cfg.rows);
    let built = t.elapsed();
    let image = first.image_id.clone().unwrap();
    let mut c = connect_to(&dsn);
    let copied = setup::wait_for("the mover to copy the image", Duration::from_secs(300), &gw, || {
        setup::segment_in_bucket(&mut c, &image) && segments_all_stored(&mut c)
    });
    println!(
        "  object-store lane: the first client built the image and fetched it in {:.1} s ({} from Postgres, {} from the bucket); \
         the mover held every live segment in the bucket {:.1} s later",
        built.as_secs_f64(),
        size(first.pg_segment_bytes as f64),
        size(first.bucket_bytes as f64),
        copied.as_secs_f64()
    );
    let probes = Probes::new(&dsn, &gw, Some(&s3));
    let (before, direct0) = (probes.sample(), direct_served(&gw));
    let (outcomes, wall) = storm(&target, cfg, "os", ACCEPT_URL);
    let cpu = probes.since(&before);
    let os_lane = Lane { label: "object store (presigned URLs)", outcomes, cpu, wall, direct_served: direct_served(&gw) - direct0 };
    drop(gw);
    drop(s3);

    // The publication's reads from Postgres: the first client's download (when the bucket did not
    // hold the image yet) and the mover's copy of the image.
    let publish = first.sync_bytes + first.pg_segment_bytes + first.pg_segment_bytes + first.bucket_bytes;
    report(&pg_lane, &os_lane, publish)
}

fn report(pg: &Lane, os: &Lane, publish_pg_bytes: u64) -> Vec<String> {
    println!(
        "\n  {:<34} {:>10} {:>11} {:>13} {:>10} {:>10} {:>8} {:>15} {:>10} {:>15}",
        "storm lane (per client)", "PG CPU ms", "PG bytes", "bucket bytes", "wall p50", "wall p95", "storm s", "gateway CPU ms", "S3 CPU ms", "clients CPU ms"
    );
    for lane in [pg, os] {
        let ms = |s: f64| lane.per_client(s * 1000.0);
        println!(
            "  {:<34} {:>10.1} {:>11} {:>13} {:>8.0}ms {:>8.0}ms {:>8.1} {:>15.1} {:>10.1} {:>15.1}",
            lane.label,
            ms(lane.cpu.postgres),
            size(lane.per_client(lane.pg_bytes() as f64)),
            size(lane.per_client(lane.bucket_bytes() as f64)),
            lane.wall_pct(0.50).as_secs_f64() * 1000.0,
            lane.wall_pct(0.95).as_secs_f64() * 1000.0,
            lane.wall.as_secs_f64(),
            ms(lane.cpu.gateway),
            ms(lane.cpu.s3),
            ms(lane.cpu.bench),
        );
    }
    for lane in [pg, os] {
        let segs = lane.sum(|o| u64::from(o.pg_segments));
        println!(
            "  {}: {} clients in {:.1} s; images from Postgres {} (gateway counted {} /segments 200s), from the bucket {}; \
             POST /sync bytes {:.0}/client; Postgres served {:.3} % of the bytes",
            lane.label,
            lane.outcomes.len(),
            lane.wall.as_secs_f64(),
            segs,
            lane.direct_served,
            lane.sum(|o| u64::from(o.bucket_segments)),
            lane.per_client(lane.sum(|o| o.sync_bytes) as f64),
            lane.pg_share() * 100.0
        );
        assert_eq!(segs as f64, lane.direct_served, "{}: the clients' and the gateway's count of downloads from Postgres", lane.label);
    }
    let ratio = |a: f64, b: f64| if b > 0.0 { format!("{:.3}", a / b) } else { "n/a".into() };
    println!(
        "  object store ÷ Postgres only, per client: PG CPU {}, PG bytes {}, wall p50 {}, wall p95 {}",
        ratio(os.cpu.postgres, pg.cpu.postgres),
        ratio(os.pg_bytes() as f64, pg.pg_bytes() as f64),
        ratio(os.wall_pct(0.5).as_secs_f64(), pg.wall_pct(0.5).as_secs_f64()),
        ratio(os.wall_pct(0.95).as_secs_f64(), pg.wall_pct(0.95).as_secs_f64()),
    );
    let n = os.outcomes.len() as f64;
    let with_publish = (os.pg_bytes() + publish_pg_bytes) as f64 / (os.pg_bytes() + os.bucket_bytes() + publish_pg_bytes) as f64;
    println!(
        "  with the publication counted (the first client's image from Postgres and the mover's copy, read from Postgres): \
         {:.2} % over {} bootstraps",
        with_publish * 100.0,
        n + 1.0
    );
    let share = os.pg_share();
    let verdict = if share <= GOAL_PG_SHARE { "met" } else { "not met" };
    let line = format!("object-store lane: Postgres served {:.3} % of the bytes (goal ≤ 1 %): {verdict}", share * 100.0);
    println!("  {line}");
    vec![line]
}
