//! HTTP sync round throughput through the gateway's `POST /sync`, next to the
//! same requests through `SELECT syncular.sync(...)` directly, with the same
//! number of concurrent connections. Every round is one request: a single-row
//! push followed by an incremental pull from the worker's cursor (the next
//! round pulls from the returned `nextCursor`), closed loop, after a warm-up of
//! a quarter of the measured duration. Two layouts: every connection on its own
//! fresh partition ([`Layout::Own`]: the per-round cost, no lock queue — the
//! goal is about this one), and all connections on one fresh partition
//! ([`Layout::Shared`]: pushes queue on the partition's counter row, and each
//! pull returns the other connections' commits). A third layout,
//! [`Layout::PullOnly`], is the commonest round of all: an incremental pull
//! without a push that finds nothing new (own partition per connection).
//!
//! A third side is the floor of the hop: the same rounds through a bare blocking
//! HTTP relay ([`super::floors::relay`]: a thread and a `syncular.sync`
//! statement per request, nothing else), which splits the gateway's overhead
//! into "any process in between, on this machine" and "this gateway's own".

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::http::HttpConn;
use super::setup::{applied_seq, new_partition, pull_outcome, pull_request, push_pull_request};
use super::tally::Dist;
use crate::transport::SYNC_SQL;
use crate::wire::decode_response;

/// The actor of every round worker.
const ACTOR: &str = "rt-rounds";

/// How a round reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `SELECT syncular.sync(...)`, one autocommit statement.
    Sql,
    /// `POST /sync` through the gateway.
    Http,
    /// `POST /sync` through the bare relay (the floor of the hop).
    Relay,
}

impl Path {
    /// Row label.
    pub fn label(self) -> &'static str {
        match self {
            Path::Sql => "direct SQL: SELECT syncular.sync",
            Path::Http => "gateway: POST /sync",
            Path::Relay => "floor: POST /sync to a bare relay (thread + SQL)",
        }
    }
}

/// Which partitions the connections use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One fresh partition per connection.
    Own,
    /// One fresh partition for all connections.
    Shared,
    /// One fresh partition per connection; every round an incremental pull without a push,
    /// nothing new to pull.
    PullOnly,
}

impl Layout {
    /// Table label.
    pub fn label(self) -> &'static str {
        match self {
            Layout::Own => "own partition per connection",
            Layout::Shared => "one shared partition",
            Layout::PullOnly => "own partition per connection, pull only (nothing new)",
        }
    }
}

/// One side's measurement.
#[derive(Clone, Debug)]
pub struct RoundRun {
    pub path: Path,
    pub layout: Layout,
    pub connections: usize,
    /// Rounds completed in the measured window.
    pub rounds: usize,
    pub elapsed: Duration,
    /// Per-round latency, ms.
    pub latency: Dist,
    /// CPU during the run (set by the caller).
    pub cpu: Option<super::procstat::CpuUse>,
}

impl RoundRun {
    /// Rounds per second.
    pub fn per_sec(&self) -> f64 {
        self.rounds as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Measures `path` with `connections` workers for `duration` (after a warm-up).
///
/// Errors: a failed round (request error, unapplied push, undecodable response).
pub fn run(
    dsn: &str,
    rt: &tokio::runtime::Handle,
    gateway: SocketAddr,
    path: Path,
    layout: Layout,
    connections: usize,
    duration: Duration,
) -> Result<RoundRun, String> {
    let mut partitions = Vec::with_capacity(connections);
    for w in 0..connections {
        if w == 0 || layout != Layout::Shared {
            partitions.push(new_partition(dsn, "rt-rounds")?);
        } else {
            partitions.push(partitions[0].clone());
        }
    }
    let tag = format!("{path:?}").to_lowercase();
    // Client records first (not timed): each worker's cursor starts at its bootstrap.
    let mut setup = crate::connect_to(dsn);
    let mut cursors = Vec::with_capacity(connections);
    for (w, (partition, epoch)) in partitions.iter().enumerate() {
        cursors.push(super::setup::pull_client_record(
            &mut setup,
            partition,
            epoch,
            ACTOR,
            &client_id(&tag, w),
        )?);
    }
    let start = Instant::now() + Duration::from_millis(300);
    let measure_from = start + duration / 4;
    let plan = Arc::new(Plan {
        partitions,
        start,
        measure_from,
        stop_at: measure_from + duration,
        tag,
        pull_only: layout == Layout::PullOnly,
    });
    let relay = match path {
        Path::Relay => Some(super::floors::relay::Relay::start(dsn)?),
        _ => None,
    };
    let target = relay.as_ref().map_or(gateway, |r| r.addr);
    let results: Vec<Result<Vec<f64>, String>> = match path {
        Path::Http | Path::Relay => {
            let futures: Vec<_> = cursors
                .into_iter()
                .enumerate()
                .map(|(w, cursor)| rt.spawn(http_worker(target, plan.clone(), w, cursor)))
                .collect();
            rt.block_on(async {
                let mut out = Vec::new();
                for f in futures {
                    out.push(f.await.unwrap_or_else(|e| Err(format!("HTTP worker: {e}"))));
                }
                out
            })
        }
        Path::Sql => {
            let handles: Vec<_> = cursors
                .into_iter()
                .enumerate()
                .map(|(w, cursor)| {
                    let (dsn, plan) = (dsn.to_owned(), plan.clone());
                    thread::spawn(move || sql_worker(&dsn, &plan, w, cursor))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("SQL worker panicked".to_owned())))
                .collect()
        }
    };
    let mut latency = Vec::new();
    for r in results {
        latency.extend(r.map_err(|e| format!("{}: {e}", path.label()))?);
    }
    Ok(RoundRun {
        path,
        layout,
        connections,
        rounds: latency.len(),
        elapsed: duration,
        latency: Dist::new(latency),
        cpu: None,
    })
}

/// The client id of `worker` on the side tagged `tag`.
fn client_id(tag: &str, worker: usize) -> String {
    format!("rt-{tag}-{worker}")
}

/// What every worker of one side shares.
struct Plan {
    /// `(partition, logEpoch)` of each worker.
    partitions: Vec<(String, String)>,
    /// Workers start (warm-up), then are measured from `measure_from` to `stop_at`.
    start: Instant,
    measure_from: Instant,
    stop_at: Instant,
    tag: String,
    /// Rounds without a push ([`Layout::PullOnly`]).
    pull_only: bool,
}

impl Plan {
    /// The round request of `worker`'s `k`-th round.
    fn request(&self, worker: usize, k: usize, cursor: i64) -> Vec<u8> {
        let id = format!("{}-{worker}-{k}", self.tag);
        let epoch = &self.partitions[worker].1;
        if self.pull_only {
            return pull_request(&client_id(&self.tag, worker), epoch, cursor);
        }
        push_pull_request(&client_id(&self.tag, worker), epoch, &id, &id, cursor)
    }

    /// Checks a round response; returns the next cursor.
    fn check(&self, response: &[u8]) -> Result<i64, String> {
        let msg = decode_response(response)?;
        if !self.pull_only {
            applied_seq(&msg)?;
        }
        pull_outcome(&msg)
            .next_cursor
            .ok_or_else(|| format!("round response without SUB_END: {msg:?}"))
    }

    /// Sleeps until the common start.
    fn wait_start(&self) {
        let now = Instant::now();
        if self.start > now {
            thread::sleep(self.start - now);
        }
    }
}

async fn http_worker(addr: SocketAddr, plan: Arc<Plan>, w: usize, mut cursor: i64) -> Result<Vec<f64>, String> {
    let mut conn = HttpConn::connect(addr).await?;
    tokio::time::sleep_until(plan.start.into()).await;
    let mut latency = Vec::new();
    let mut k = 0;
    loop {
        let began = Instant::now();
        if began >= plan.stop_at {
            return Ok(latency);
        }
        let body = conn.sync(ACTOR, &plan.partitions[w].0, plan.request(w, k, cursor)).await?;
        let done = Instant::now();
        cursor = plan.check(&body)?;
        if began >= plan.measure_from && done <= plan.stop_at {
            latency.push(done.duration_since(began).as_secs_f64() * 1e3);
        }
        k += 1;
    }
}

fn sql_worker(dsn: &str, plan: &Plan, w: usize, mut cursor: i64) -> Result<Vec<f64>, String> {
    let mut conn = crate::connect_to(dsn);
    let db = |e: postgres::Error| crate::wire::db_message(&e);
    let sync = conn.prepare(SYNC_SQL).map_err(db)?;
    plan.wait_start();
    let none = None::<serde_json::Value>;
    let mut latency = Vec::new();
    let mut k = 0;
    loop {
        let began = Instant::now();
        if began >= plan.stop_at {
            return Ok(latency);
        }
        let request = plan.request(w, k, cursor);
        let args: [&(dyn postgres::types::ToSql + Sync); 4] = [&plan.partitions[w].0, &ACTOR, &request, &none];
        let response = conn.query_one(&sync, &args).map_err(db)?.get::<_, Vec<u8>>(0);
        let done = Instant::now();
        cursor = plan.check(&response)?;
        if began >= plan.measure_from && done <= plan.stop_at {
            latency.push(done.duration_since(began).as_secs_f64() * 1e3);
        }
        k += 1;
    }
}
