//! Connections that keep pushing single-row commits through `syncular.sync`
//! until told to stop, each request timed from just before the statement is
//! sent to its response.
//!
//! Two kinds, alternated by index:
//! - [`Kind::PushOnly`] (even indexes): a request with one `PUSH_COMMIT` and
//!   no pull — it never takes the pruning fence;
//! - [`Kind::PushPull`] (odd indexes): one `PUSH_COMMIT` and an incremental
//!   pull of the pusher's own project, in one request — a real client's
//!   round, which takes the pruning fence in shared mode at request start
//!   (docs/src/sql/lifecycle.md `syncular.prune_batch`), so it is the one a pruning batch can
//!   make wait.
//!
//! Pusher `i` writes rows `load-<i>-<k>` into project `q<i>` as client
//! `load-<i>`. Pacing: `rate` requests per second per connection (a request
//! is sent as soon as the previous one answered when the connection falls
//! behind; a late connection does not burst to catch up), or as fast as
//! possible when `rate` is 0.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};
use ssp2::model::{Frame, PushStatus, SubStatus};

use super::{pg_text, pusher_project};
use crate::fixtures::allow_all_projects;
use crate::transport::SYNC_SQL;
use crate::wire::{commit, decode_response, pull_header, push_outcomes, request, subscription, upsert, Task};

/// `application_name` of the pushing connections.
pub const PUSHER_APP: &str = "syncular-prune-pusher";
/// The actor of every load push.
pub const ACTOR: &str = "load";

/// What a pusher's requests carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One `PUSH_COMMIT`, no pull.
    PushOnly,
    /// One `PUSH_COMMIT` and an incremental pull of the pusher's project.
    PushPull,
}

impl Kind {
    /// The kind of pusher `index`.
    pub fn of(index: usize) -> Kind {
        if index % 2 == 1 {
            Kind::PushPull
        } else {
            Kind::PushOnly
        }
    }

    /// A short label for reports.
    pub fn label(self) -> &'static str {
        match self {
            Kind::PushOnly => "push-only request",
            Kind::PushPull => "push + pull round (takes the fence)",
        }
    }
}

/// One timed push.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The pusher's index.
    pub pusher: usize,
    /// Its kind.
    pub kind: Kind,
    /// When the request was sent, since the load's start.
    pub sent: Duration,
    /// Request → response.
    pub latency: Duration,
    /// The row the commit wrote.
    pub row_id: String,
    /// Its `commitSeq`.
    pub commit_seq: i64,
}

impl Sample {
    /// When the response arrived, since the load's start.
    pub fn done(&self) -> Duration {
        self.sent + self.latency
    }

    /// Whether the request was in flight at some moment of `[from, to]`.
    pub fn overlaps(&self, from: Duration, to: Duration) -> bool {
        self.sent <= to && self.done() >= from
    }
}

/// What one pusher did.
#[derive(Clone, Debug, Default)]
pub struct PusherReport {
    /// Every push, in order.
    pub samples: Vec<Sample>,
    /// Pulls of a [`Kind::PushPull`] pusher answered `reset`.
    pub pull_resets: usize,
}

/// Running pushers.
pub struct PushLoad {
    /// The common start of every [`Sample::sent`].
    pub t0: Instant,
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<Result<PusherReport, String>>>,
}

/// How pushers run.
#[derive(Clone, Debug)]
pub struct PushConfig {
    /// The server.
    pub dsn: String,
    /// The partition they push into.
    pub partition: String,
    /// Its `logEpoch`.
    pub epoch: String,
    /// How many connections.
    pub connections: usize,
    /// Requests per second per connection (0: as fast as possible).
    pub rate: f64,
    /// `statement_timeout` of each connection (e.g. `"120s"`, `"0"`).
    pub statement_timeout: String,
}

impl PushLoad {
    /// Starts `config.connections` pushers; every one has connected and
    /// read its starting cursor before this returns.
    ///
    /// Errors: a connection could not be opened.
    pub fn start(config: &PushConfig) -> Result<PushLoad, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let t0 = Instant::now();
        let mut handles = Vec::with_capacity(config.connections);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        for index in 0..config.connections {
            let config = config.clone();
            let stop = Arc::clone(&stop);
            let ready = ready_tx.clone();
            handles.push(thread::spawn(move || run(index, &config, t0, &stop, &ready)));
        }
        for _ in 0..config.connections {
            ready_rx
                .recv()
                .map_err(|_| "a pusher died before it was ready".to_owned())??;
        }
        Ok(PushLoad { t0, stop, handles })
    }

    /// Time since the load's start.
    pub fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Stops every pusher after its current request and returns their
    /// reports, by index.
    ///
    /// Errors: the first pusher that failed (a failed request, a commit not
    /// `applied`, a response that does not decode).
    pub fn stop(self) -> Result<Vec<PusherReport>, String> {
        self.stop.store(true, Ordering::SeqCst);
        let mut out = Vec::with_capacity(self.handles.len());
        let mut first_error = None;
        for h in self.handles {
            match h.join() {
                Ok(Ok(r)) => out.push(r),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(_) => {
                    first_error.get_or_insert_with(|| "a pusher panicked".to_owned());
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Whether any pusher has already ended (it failed: see [`PushLoad::stop`]).
    pub fn any_finished(&self) -> bool {
        self.handles.iter().any(JoinHandle::is_finished)
    }
}

fn connect(config: &PushConfig) -> Result<Client, String> {
    let mut pg: postgres::Config = config.dsn.parse().map_err(|e| format!("bad DSN: {e}"))?;
    pg.application_name(PUSHER_APP);
    let mut conn = pg.connect(NoTls).map_err(|e| format!("pusher cannot connect: {e}"))?;
    conn.batch_execute(&format!("SET statement_timeout = '{}'", config.statement_timeout))
        .map_err(|e| pg_text(&e))?;
    Ok(conn)
}

fn run(
    index: usize,
    config: &PushConfig,
    t0: Instant,
    stop: &AtomicBool,
    ready: &std::sync::mpsc::Sender<Result<(), String>>,
) -> Result<PusherReport, String> {
    let kind = Kind::of(index);
    let prepared = connect(config).and_then(|mut conn| {
        let stmt = conn.prepare(SYNC_SQL).map_err(|e| pg_text(&e))?;
        let (max, _) = super::prefill::counters(&mut conn, &config.partition)?;
        Ok((conn, stmt, max))
    });
    let (mut conn, stmt, mut cursor) = match prepared {
        Ok(p) => {
            let _ = ready.send(Ok(()));
            p
        }
        Err(e) => {
            let _ = ready.send(Err(e.clone()));
            return Err(e);
        }
    };
    let client_id = format!("load-{index}");
    let project = pusher_project(index);
    let allowed = allow_all_projects();
    let mut token: Option<String> = None;
    let mut report = PusherReport::default();
    let interval = (config.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / config.rate));
    let mut next_at = Instant::now();
    let mut k = 0usize;
    while !stop.load(Ordering::SeqCst) {
        if let Some(interval) = interval {
            let now = Instant::now();
            if next_at > now {
                thread::sleep(next_at - now);
            } else if now - next_at > interval {
                next_at = now;
            }
            next_at += interval;
        }
        let row_id = format!("load-{index}-{k}");
        let task = Task::new(row_id.clone(), project.clone(), format!("load {index}/{k}"));
        let mut frames = vec![commit(format!("c{k}"), vec![upsert(&task, None)])];
        if kind == Kind::PushPull {
            frames.push(pull_header(0, 0, 0, 0b0011));
            frames.push(subscription("own", "tasks", &[("project_id", &[project.as_str()])], cursor, token.clone()));
        }
        let bytes = request(&client_id, Some(&config.epoch), frames);
        let sent = t0.elapsed();
        let began = Instant::now();
        let response = conn
            .query_one(&stmt, &[&config.partition, &ACTOR, &bytes, &Some(&allowed)])
            .map_err(|e| format!("pusher {index}, push {k}: {}", pg_text(&e)))?;
        let latency = began.elapsed();
        let msg = decode_response(&response.get::<_, Vec<u8>>(0))
            .map_err(|e| format!("pusher {index}, push {k}: {e}"))?;
        let outcomes = push_outcomes(&msg);
        let commit_seq = match outcomes.as_slice() {
            [o] if o.status == PushStatus::Applied && o.commit_seq.is_some() => o.commit_seq.unwrap_or(0),
            other => return Err(format!("pusher {index}, push {k}: not applied: {other:?}")),
        };
        if kind == Kind::PushPull {
            for frame in &msg.frames {
                match frame {
                    Frame::SubStart { status: SubStatus::Reset, .. } => report.pull_resets += 1,
                    Frame::SubStart { status: SubStatus::Revoked, reason_code, .. } => {
                        return Err(format!("pusher {index}: subscription revoked ({reason_code})"))
                    }
                    Frame::SubEnd { next_cursor, bootstrap_state } => {
                        cursor = *next_cursor;
                        token = bootstrap_state.as_ref().map(|t| t.0.clone());
                    }
                    _ => {}
                }
            }
            if msg.frames.iter().any(|f| matches!(f, Frame::SubStart { status: SubStatus::Reset, .. })) {
                // §4.6: discard the cursor and bootstrap the subscription afresh.
                cursor = -1;
                token = None;
            }
        }
        report.samples.push(Sample { pusher: index, kind, sent, latency, row_id, commit_seq });
        k += 1;
    }
    Ok(report)
}
