//! Throughput per wire version on one connection: single-row pushes that
//! insert a fresh `tasks` row, single-row pushes that update one column of
//! one row (v2: the whole row at its version; v3: the primary key and the
//! column), and the incremental pull of 1,000 one-row commits (client-side
//! round trip, statement sent → whole response received).

use std::time::{Duration, Instant};

use postgres::Client;

use super::requests::{pull_request, push_request, summary, task_slots, Upsert};
use super::Wire;
use crate::connect_to;
use crate::fixtures::{allow_all_projects, partition_name};
use crate::transport::call_sync;
use crate::wire::RawSession;

/// The actor of every benchmark request.
pub const ACTOR: &str = "bench";

/// One connection, one fresh partition, its acquired `logEpoch`.
pub struct Session {
    pub conn: Client,
    pub partition: String,
    pub client_id: String,
    pub epoch: String,
}

impl Session {
    /// A fresh partition `label-…` on a new connection to `dsn`.
    pub fn open(dsn: &str, label: &str, client_id: &str) -> Result<Session, String> {
        let partition = partition_name(label);
        let mut raw = RawSession::new(connect_to(dsn), &partition, ACTOR, client_id, Some(allow_all_projects()));
        let epoch = raw.acquire_epoch()?;
        Ok(Session { conn: raw.conn, partition, client_id: client_id.to_owned(), epoch })
    }

    /// Sends `bytes`; the response summarized by `wire`'s reference codec.
    pub fn send(&mut self, wire: Wire, bytes: &[u8]) -> Result<(Vec<String>, usize, usize), String> {
        let response = call_sync(&mut self.conn, &self.partition, ACTOR, bytes, Some(&allow_all_projects()))
            .map_err(crate::bench::pg_err)?;
        summary(wire, &response)
    }

    /// Pushes one commit of `ops`; errors unless it is applied.
    pub fn push(&mut self, wire: Wire, commit_id: &str, ops: &[Upsert<'_>]) -> Result<(), String> {
        let bytes = push_request(wire, &self.client_id, &self.epoch, commit_id, ops);
        match self.send(wire, &bytes)?.0.as_slice() {
            [s] if s == "Applied" => Ok(()),
            other => Err(format!("{} push {commit_id} not applied: {other:?}", wire.label())),
        }
    }
}

/// `n` single-row pushes inserting fresh rows; the elapsed time.
pub fn push_inserts(dsn: &str, wire: Wire, n: usize) -> Result<Duration, String> {
    let mut s = Session::open(dsn, &format!("bw-ins-{}", wire.label()), "c1")?;
    let started = Instant::now();
    for i in 0..n {
        let id = format!("t{i}");
        s.push(wire, &format!("k{i}"), &[Upsert { table: "tasks", row_id: &id, base_version: None, slots: task_slots(&id, "p1", "new") }])?;
    }
    Ok(started.elapsed())
}

/// `n` single-row pushes each changing the title of one row, with its
/// current version as `baseVersion`; the elapsed time.
pub fn push_updates(dsn: &str, wire: Wire, n: usize) -> Result<Duration, String> {
    let mut s = Session::open(dsn, &format!("bw-upd-{}", wire.label()), "c1")?;
    s.push(wire, "seed", &[Upsert { table: "tasks", row_id: "t", base_version: Some(0), slots: task_slots("t", "p1", "seed") }])?;
    let started = Instant::now();
    for i in 0..n {
        let title = format!("edit {i}");
        let slots = match wire {
            Wire::V2 => task_slots("t", "p1", &title),
            Wire::V3 => vec![Some(Some("t".into())), None, Some(Some(title)), None, None],
        };
        s.push(wire, &format!("k{i}"), &[Upsert { table: "tasks", row_id: "t", base_version: Some(1 + i as i64), slots }])?;
    }
    Ok(started.elapsed())
}

/// The pull case: a partition holding `commits` one-row commits of project `p1`.
pub struct PullFixture {
    session: Session,
    commits: usize,
}

impl PullFixture {
    /// Writes the commits (500 one-row commits per request, wire 2).
    pub fn build(dsn: &str, commits: usize) -> Result<PullFixture, String> {
        let mut session = Session::open(dsn, "bw-pull", "writer")?;
        let mut i = 0;
        while i < commits {
            let take = (commits - i).min(500);
            let frames = (i..i + take)
                .map(|k| crate::wire::commit(format!("k{k}"), vec![crate::wire::upsert(&crate::wire::Task::new(format!("t{k}"), "p1", "x"), None)]))
                .collect();
            let bytes = crate::wire::request(&session.client_id, Some(&session.epoch), frames);
            let statuses = session.send(Wire::V2, &bytes)?.0;
            if statuses.len() != take || statuses.iter().any(|s| s != "Applied") {
                return Err(format!("pull fixture: {statuses:?}"));
            }
            i += take;
        }
        Ok(PullFixture { session, commits })
    }

    /// One incremental pull from cursor 0 in `wire` (a client per wire
    /// version); its round trip. Errors unless it returned every commit.
    pub fn pull(&mut self, wire: Wire) -> Result<Duration, String> {
        let bytes = pull_request(wire, &format!("reader-{}", wire.label()), &self.session.epoch, "p1", 0);
        let started = Instant::now();
        let response = call_sync(&mut self.session.conn, &self.session.partition, ACTOR, &bytes, Some(&allow_all_projects()))
            .map_err(crate::bench::pg_err)?;
        let elapsed = started.elapsed();
        let (_, commits, changes) = summary(wire, &response)?;
        if commits != self.commits || changes != self.commits {
            return Err(format!("{} pull returned {commits} commits / {changes} changes of {}", wire.label(), self.commits));
        }
        Ok(elapsed)
    }
}
