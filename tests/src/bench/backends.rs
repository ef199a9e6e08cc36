//! The three write backends the benchmark alternates, each committing one row
//! per transaction from `N` connections:
//!
//! - [`Backend::Plain`]: autocommit `INSERT … ON CONFLICT DO UPDATE` on the
//!   plain table `public.bench_plain` (one statement per commit);
//! - [`Backend::PlainNotify`]: the same upsert and a `pg_notify` on
//!   `syncular_commit` in the same transaction, as one autocommit statement
//!   ([`NOTIFY_UPSERT`]: one round trip, one statement per commit);
//! - [`Backend::Extension`]: one single-row push request per commit through
//!   `syncular.sync` (autocommit), each response checked to hold one
//!   applied commit;
//! - [`Backend::SeedFloor`]: the rows a single-row push must write into the
//!   seed's tables, and nothing else, as one autocommit statement
//!   ([`FLOOR_WRITES`]): the lower bound of any server that keeps those
//!   tables and indexes (no reads, no locks, no checks, no encoding).
//!
//! A run is prepared first ([`prepare`]: connections opened, statements
//! prepared, requests encoded, partition epochs acquired) so the measured
//! part ([`Prepared::execute`]) holds only the commits.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use postgres::{Client, NoTls, Statement};
use serde_json::Value;
use ssp2::model::PushStatus;

use super::pg_err;
use crate::fixtures::allow_all_projects;
use crate::transport::SYNC_SQL;
use crate::wire::{
    commit, decode_response, encode_task, push_outcomes, request, upsert, RawSession, Task,
};

/// The actor of every benchmark push.
pub const ACTOR: &str = "bench";
/// `application_name` of every measured connection (the harness waits for
/// them to be gone before it reads the server's counters).
pub const WORKER_APP: &str = "syncular-bench-worker";

/// The plain table of the two baselines: the typed `tasks` columns plus the
/// encoded row, keyed like the app table.
pub const PLAIN_DDL: &str = "CREATE TABLE IF NOT EXISTS public.bench_plain(
    partition text NOT NULL, id text NOT NULL, project_id text NOT NULL, title text NOT NULL,
    done boolean NOT NULL, priority bigint, version bigint NOT NULL DEFAULT 1, payload bytea,
    PRIMARY KEY (partition, id))";
/// Backend 1: one autocommit upsert (`$1` partition, `$2` id, `$3` project,
/// `$4` title, `$5` encoded row).
pub const PLAIN_UPSERT: &str = "INSERT INTO public.bench_plain AS t (partition, id, project_id, title, done, priority, payload)
    VALUES ($1, $2, $3, $4, false, NULL, $5)
    ON CONFLICT (partition, id) DO UPDATE
       SET title = EXCLUDED.title, payload = EXCLUDED.payload, version = t.version + 1";
/// Backend 2: [`PLAIN_UPSERT`] and `pg_notify('syncular_commit', $6)` as one
/// autocommit statement (one transaction, one round trip).
pub const NOTIFY_UPSERT: &str = "WITH u AS (
    INSERT INTO public.bench_plain AS t (partition, id, project_id, title, done, priority, payload)
    VALUES ($1, $2, $3, $4, false, NULL, $5)
    ON CONFLICT (partition, id) DO UPDATE
       SET title = EXCLUDED.title, payload = EXCLUDED.payload, version = t.version + 1
    RETURNING 1)
    SELECT pg_notify('syncular_commit', $6) FROM u";

/// Backend 4, the seed's floor: what a single-row insert push writes, as one
/// autocommit statement — the partition counter's increment, the
/// `sync_commits`, `sync_changes`, `sync_change_scopes`, `sync_push_results`
/// and `sync_row_scopes` rows (every index of the seed's tables), the row
/// upsert of [`PLAIN_UPSERT`] and the commit's `pg_notify` (`$1` partition,
/// `$2` id and commit id, `$3` project, `$4` title, `$5` encoded row, `$6`
/// base64url partition, `$7` client id, `$8` time in ms). The app row goes to
/// `public.bench_plain` (a write to the app table would be captured as a
/// commit of its own); the stored outcome has the extension's shape.
pub const FLOOR_WRITES: &str = "WITH s AS (
    UPDATE syncular.sync_partitions SET max_commit_seq = max_commit_seq + 1
     WHERE partition = $1 RETURNING max_commit_seq AS seq),
u AS (
    INSERT INTO public.bench_plain AS t (partition, id, project_id, title, done, priority, payload)
    VALUES ($1, $2, $3, $4, false, NULL, $5)
    ON CONFLICT (partition, id) DO UPDATE
       SET title = EXCLUDED.title, payload = EXCLUDED.payload, version = t.version + 1
    RETURNING 1),
c AS (
    INSERT INTO syncular.sync_commits (partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms)
    SELECT $1, s.seq, $7, $2, 'bench', $8 FROM s),
ch AS (
    INSERT INTO syncular.sync_changes (partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
    SELECT $1, s.seq, 0, 'tasks', $2, 1, 1, jsonb_build_object('project_id', $3::text), $5 FROM s),
cs AS (
    INSERT INTO syncular.sync_change_scopes (partition, tbl, var, value, commit_seq)
    SELECT $1, 'tasks', 'project_id', $3, s.seq FROM s),
pr AS (
    INSERT INTO syncular.sync_push_results (partition, client_id, client_commit_id, result)
    SELECT $1, $7, $2, jsonb_build_object('status', 'applied', 'commitSeq', s.seq, 'recordedAtMs', $8,
        'results', jsonb_build_array(jsonb_build_object('status', 'applied', 'opIndex', 0))) FROM s),
rs AS (
    INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id)
    SELECT $1, 'tasks', 'project_id', $3, $2 FROM s)
SELECT pg_notify('syncular_commit', $6 || ':' || s.seq || ':' || repeat('t', 22)) FROM s, u";

/// A write backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Plain,
    PlainNotify,
    Extension,
    SeedFloor,
}

impl Backend {
    /// Every backend, in the order a round runs them.
    pub const ALL: [Backend; 4] = [Backend::Plain, Backend::PlainNotify, Backend::Extension, Backend::SeedFloor];

    /// A short name (row labels, row ids).
    pub fn key(self) -> &'static str {
        match self {
            Backend::Plain => "plain",
            Backend::PlainNotify => "notify",
            Backend::Extension => "ext",
            Backend::SeedFloor => "floor",
        }
    }

    /// What the backend runs per commit, for the report.
    pub fn label(self) -> &'static str {
        match self {
            Backend::Plain => "plain upsert (autocommit INSERT … ON CONFLICT)",
            Backend::PlainNotify => "plain upsert + pg_notify (one statement: WITH u AS (upsert RETURNING 1) SELECT pg_notify(…) FROM u)",
            Backend::Extension => "extension (one single-row push request per commit: SELECT syncular.sync(…))",
            Backend::SeedFloor => "the seed's floor (one statement writing only the rows a push writes into the seed's tables + the upsert + pg_notify)",
        }
    }
}

/// Opens a measured connection (`application_name` = [`WORKER_APP`]).
///
/// Errors: the DSN does not parse or the connection fails.
pub fn worker_connection(dsn: &str) -> Result<Client, String> {
    let mut config: postgres::Config = dsn.parse().map_err(|e| format!("bad DSN: {e}"))?;
    config.application_name(WORKER_APP);
    config
        .connect(NoTls)
        .map_err(|e| format!("cannot connect: {e}"))
}

/// Acquires the `logEpoch` of `partition` (creating the partition).
///
/// Errors: a Postgres error or an unexpected response.
pub fn epoch_for(dsn: &str, partition: &str) -> Result<String, String> {
    let conn = Client::connect(dsn, NoTls).map_err(pg_err)?;
    RawSession::new(
        conn,
        partition,
        ACTOR,
        "bench-epoch",
        Some(allow_all_projects()),
    )
    .acquire_epoch()
}

/// What one commit sends.
enum Job {
    /// [`PLAIN_UPSERT`] / [`NOTIFY_UPSERT`] parameters; `note` is the
    /// notification payload (`None` for [`Backend::Plain`]).
    Row {
        id: String,
        title: String,
        payload: Vec<u8>,
        note: Option<String>,
    },
    /// An encoded single-commit push request.
    Push(Vec<u8>),
    /// [`FLOOR_WRITES`] parameters (`note`: the base64url partition).
    Floor {
        id: String,
        title: String,
        payload: Vec<u8>,
        note: String,
        client: String,
    },
}

/// One connection of a prepared run: its partition, statement and commits.
struct Worker {
    conn: Client,
    stmt: Statement,
    partition: String,
    allowed: Value,
    jobs: Vec<Job>,
}

impl Worker {
    /// Sends one commit and checks it was applied.
    fn send(&mut self, job: &Job) -> Result<(), String> {
        match job {
            Job::Row {
                id,
                title,
                payload,
                note: None,
            } => {
                let n = self
                    .conn
                    .execute(&self.stmt, &[&self.partition, id, &"p1", title, payload])
                    .map_err(pg_err)?;
                if n != 1 {
                    return Err(format!("upsert affected {n} rows"));
                }
            }
            Job::Row {
                id,
                title,
                payload,
                note: Some(note),
            } => {
                let rows = self
                    .conn
                    .query(
                        &self.stmt,
                        &[&self.partition, id, &"p1", title, payload, note],
                    )
                    .map_err(pg_err)?;
                if rows.len() != 1 {
                    return Err(format!("upsert + notify returned {} rows", rows.len()));
                }
            }
            Job::Push(bytes) => {
                let row = self
                    .conn
                    .query_one(
                        &self.stmt,
                        &[&self.partition, &ACTOR, bytes, &Some(&self.allowed)],
                    )
                    .map_err(pg_err)?;
                check_applied(&row.get::<_, Vec<u8>>(0))?;
            }
            Job::Floor {
                id,
                title,
                payload,
                note,
                client,
            } => {
                let rows = self
                    .conn
                    .query(
                        &self.stmt,
                        &[&self.partition, id, &"p1", title, payload, note, client, &0i64],
                    )
                    .map_err(pg_err)?;
                if rows.len() != 1 {
                    return Err(format!("the floor statement returned {} rows (no counter row?)", rows.len()));
                }
            }
        }
        Ok(())
    }
}

/// Checks that a push response holds exactly one applied commit.
///
/// Errors: the response does not decode, or its outcome is not one `applied`.
pub fn check_applied(response: &[u8]) -> Result<(), String> {
    let outcomes = push_outcomes(&decode_response(response)?);
    match outcomes.as_slice() {
        [o] if o.status == PushStatus::Applied => Ok(()),
        other => Err(format!("expected one applied commit, got {other:?}")),
    }
}

/// A run ready to start: one worker per connection.
pub struct Prepared {
    workers: Vec<Worker>,
}

/// Prepares `backend` to commit `per_conn` single-row commits on each of
/// `partitions.len()` connections (connection `c` writes into
/// `partitions[c]`), row ids `<backend>-<tag>-c<c>-<k>` (so every run
/// inserts fresh rows).
///
/// Errors: a connection, statement preparation or epoch acquisition failed.
pub fn prepare(
    dsn: &str,
    backend: Backend,
    partitions: &[String],
    per_conn: usize,
    tag: &str,
) -> Result<Prepared, String> {
    let mut epochs: Vec<(String, String)> = Vec::new();
    if backend == Backend::Extension {
        for p in partitions {
            if !epochs.iter().any(|(q, _)| q == p) {
                epochs.push((p.clone(), epoch_for(dsn, p)?));
            }
        }
    }
    let sql = match backend {
        Backend::Plain => PLAIN_UPSERT,
        Backend::PlainNotify => NOTIFY_UPSERT,
        Backend::Extension => SYNC_SQL,
        Backend::SeedFloor => FLOOR_WRITES,
    };
    if backend == Backend::SeedFloor {
        // The counter rows the floor increments (a push's request creates its own).
        let mut conn = Client::connect(dsn, NoTls).map_err(pg_err)?;
        for p in partitions {
            conn.execute(
                "INSERT INTO syncular.sync_partitions (partition) VALUES ($1) ON CONFLICT DO NOTHING",
                &[p],
            )
            .map_err(pg_err)?;
        }
    }
    let mut workers = Vec::with_capacity(partitions.len());
    for (c, partition) in partitions.iter().enumerate() {
        let mut conn = worker_connection(dsn)?;
        let stmt = conn.prepare(sql).map_err(pg_err)?;
        let epoch = epochs
            .iter()
            .find(|(q, _)| q == partition)
            .map(|(_, e)| e.as_str());
        let jobs = (0..per_conn)
            .map(|k| {
                let id = format!("{}-{tag}-c{c}-{k}", backend.key());
                let task = Task::new(id, "p1", format!("task {k} of connection {c}"));
                job(backend, &task, partition, k, epoch, c)
            })
            .collect();
        workers.push(Worker {
            conn,
            stmt,
            partition: partition.clone(),
            allowed: allow_all_projects(),
            jobs,
        });
    }
    Ok(Prepared { workers })
}

/// The commit of `task` as `backend` sends it (`k`: its index on the connection).
fn job(
    backend: Backend,
    task: &Task,
    partition: &str,
    k: usize,
    epoch: Option<&str>,
    c: usize,
) -> Job {
    match backend {
        Backend::Extension => Job::Push(request(
            &format!("bench-{c}"),
            epoch,
            vec![commit(task.id.clone(), vec![upsert(task, None)])],
        )),
        Backend::SeedFloor => Job::Floor {
            id: task.id.clone(),
            title: task.title.clone(),
            payload: encode_task(task),
            note: URL_SAFE_NO_PAD.encode(partition),
            client: format!("bench-{c}"),
        },
        Backend::Plain | Backend::PlainNotify => Job::Row {
            id: task.id.clone(),
            title: task.title.clone(),
            payload: encode_task(task),
            // The extension's payload shape: base64url(partition):seq:22-char tag.
            note: (backend == Backend::PlainNotify).then(|| {
                format!(
                    "{}:{}:{}",
                    URL_SAFE_NO_PAD.encode(partition),
                    k + 1,
                    "t".repeat(22)
                )
            }),
        },
    }
}

impl Prepared {
    /// Total commits this run makes.
    pub fn commits(&self) -> usize {
        self.workers.iter().map(|w| w.jobs.len()).sum()
    }

    /// Runs every connection's commits at once (as fast as each connection
    /// can) and returns the wall time from the common start to the last
    /// connection's last commit. Every connection is closed afterwards.
    ///
    /// Errors: the first failed or unapplied commit, or a panicked thread.
    pub fn execute(self) -> Result<Duration, String> {
        let barrier = Arc::new(Barrier::new(self.workers.len() + 1));
        let handles: Vec<_> = self
            .workers
            .into_iter()
            .map(|mut w| {
                let barrier = Arc::clone(&barrier);
                thread::spawn(move || -> Result<Instant, String> {
                    let jobs = std::mem::take(&mut w.jobs);
                    barrier.wait();
                    for job in &jobs {
                        w.send(job)?;
                    }
                    Ok(Instant::now())
                })
            })
            .collect();
        barrier.wait();
        let began = Instant::now();
        let mut last = began;
        for h in handles {
            let done = h
                .join()
                .map_err(|_| "a benchmark connection panicked".to_owned())??;
            last = last.max(done);
        }
        Ok(last - began)
    }
}
