//! What every phase shares: the sample schema, a scope resolver granting every
//! project (the gateway in `--auth dev` passes no allowed map, so both the
//! gateway and the direct-SQL side go through the same resolver), partitions
//! with their `logEpoch`, client records made by one pull per client, and the
//! request shapes (single-row push, incremental pull, push + pull).

use postgres::Client;
use ssp2::model::{Frame, Message, PushStatus};

use crate::fixtures::{partition_name, register_schema, TASKS};
use crate::transport::SYNC_SQL;
use crate::wire::{
    commit, decode_response, pull_header, push_outcomes, request, subscription, upsert, RawSession,
    Task,
};

/// The project every session subscribes to and every commit writes.
pub const PROJECT: &str = "p1";
/// The subscription id of every client.
pub const SUBSCRIPTION_ID: &str = "s1";
/// `accept` of every pull: inline + external rows segments (§4.2).
const ACCEPT: u8 = 0b0011;

const RESOLVER_SQL: &str = "
CREATE OR REPLACE FUNCTION public.rt_bench_allowed(partition text, actor_id text)
  RETURNS jsonb LANGUAGE sql STABLE AS $$ SELECT '{\"project_id\": [\"*\"]}'::jsonb $$;
SELECT syncular.set_scope_resolver('public.rt_bench_allowed(text,text)');";

/// Registers the sample schema and the grant-everything resolver.
///
/// Errors: the Postgres error.
pub fn prepare_database(conn: &mut Client) -> Result<(), String> {
    register_schema(conn).map_err(|e| e.to_string())?;
    conn.batch_execute(RESOLVER_SQL).map_err(|e| e.to_string())
}

/// `(fsync, synchronous_commit, server_version)` of the server.
///
/// Errors: the Postgres error.
pub fn durability(conn: &mut Client) -> Result<(String, String, String), String> {
    let show = |conn: &mut Client, what: &str| -> Result<String, String> {
        conn.query_one(&format!("SHOW {what}"), &[])
            .map(|r| r.get(0))
            .map_err(|e| e.to_string())
    };
    Ok((
        show(conn, "fsync")?,
        show(conn, "synchronous_commit")?,
        show(conn, "server_version")?,
    ))
}

/// A fresh partition (named after `label`) and its `logEpoch`.
///
/// Errors: the epoch acquisition failed.
pub fn new_partition(dsn: &str, label: &str) -> Result<(String, String), String> {
    let partition = partition_name(label);
    let mut s = RawSession::new(
        crate::connect_to(dsn),
        &partition,
        "rt-setup",
        "rt-setup",
        None,
    );
    let epoch = s.acquire_epoch()?;
    Ok((partition, epoch))
}

/// A single-row push (a new `tasks` row in [`PROJECT`]).
pub fn push_request(client_id: &str, epoch: &str, commit_id: &str, row_id: &str) -> Vec<u8> {
    let task = Task::new(row_id, PROJECT, format!("benchmark row {row_id}"));
    request(
        client_id,
        Some(epoch),
        vec![commit(commit_id, vec![upsert(&task, None)])],
    )
}

/// The pull frames of a client subscribed to [`PROJECT`] at `cursor` (−1 bootstraps).
fn pull_frames(cursor: i64) -> Vec<Frame> {
    vec![
        pull_header(1000, 1000, 50, ACCEPT),
        subscription(
            SUBSCRIPTION_ID,
            TASKS,
            &[("project_id", &[PROJECT])],
            cursor,
            None,
        ),
    ]
}

/// An incremental pull from `cursor` (−1: bootstrap).
pub fn pull_request(client_id: &str, epoch: &str, cursor: i64) -> Vec<u8> {
    request(client_id, Some(epoch), pull_frames(cursor))
}

/// A single-row push followed by an incremental pull from `cursor` — the
/// round of the HTTP/SQL comparison.
pub fn push_pull_request(
    client_id: &str,
    epoch: &str,
    commit_id: &str,
    row_id: &str,
    cursor: i64,
) -> Vec<u8> {
    let task = Task::new(row_id, PROJECT, format!("benchmark row {row_id}"));
    let mut frames = vec![commit(commit_id, vec![upsert(&task, None)])];
    frames.extend(pull_frames(cursor));
    request(client_id, Some(epoch), frames)
}

/// What a pull response says about the subscription: the `commitSeq` of every
/// `COMMIT`, the `SUB_END.nextCursor`, and whether a bootstrap is unfinished.
#[derive(Clone, Debug, Default)]
pub struct PullOutcome {
    pub commit_seqs: Vec<i64>,
    pub next_cursor: Option<i64>,
    pub bootstrap_pending: bool,
}

/// Reads a decoded response's pull half.
pub fn pull_outcome(msg: &Message) -> PullOutcome {
    let mut out = PullOutcome::default();
    for f in &msg.frames {
        match f {
            Frame::Commit { commit_seq, .. } => out.commit_seqs.push(*commit_seq),
            Frame::SubEnd {
                next_cursor,
                bootstrap_state,
            } => {
                out.next_cursor = Some(out.next_cursor.map_or(*next_cursor, |c| c.max(*next_cursor)));
                out.bootstrap_pending |= bootstrap_state.is_some();
            }
            _ => {}
        }
    }
    out
}

/// Checks a push(+pull) response: exactly one `PUSH_RESULT`, applied; returns its `commitSeq`.
///
/// Errors: a decode error or any other outcome.
pub fn applied_seq(msg: &Message) -> Result<i64, String> {
    match push_outcomes(msg).as_slice() {
        [o] if o.status == PushStatus::Applied => o
            .commit_seq
            .ok_or_else(|| "applied commit without commitSeq".to_owned()),
        other => Err(format!("expected one applied commit, got {other:?}")),
    }
}

/// Makes (or refreshes) the client record of `client_id`: one bootstrap pull
/// through `syncular.sync` (resolver scopes), so the record's last pull
/// subscribed to [`PROJECT`] and its cursor is the partition's latest.
/// Returns that cursor. The partitions of the benchmark are small when their
/// clients are made: one response (≤ 50 pages of 1,000 rows) completes it.
///
/// Errors: a Postgres error, an undecodable response, a response without
/// `SUB_END`, or an unfinished bootstrap.
pub fn pull_client_record(
    conn: &mut Client,
    partition: &str,
    epoch: &str,
    actor: &str,
    client_id: &str,
) -> Result<i64, String> {
    let bytes = pull_request(client_id, epoch, -1);
    let row = conn
        .query_one(
            SYNC_SQL,
            &[&partition, &actor, &bytes, &None::<serde_json::Value>],
        )
        .map_err(|e| crate::wire::db_message(&e))?;
    let msg = decode_response(&row.get::<_, Vec<u8>>(0))?;
    let out = pull_outcome(&msg);
    match out.next_cursor {
        Some(c) if !out.bootstrap_pending => Ok(c),
        _ => Err(format!("client {client_id}: bootstrap not complete in one pull: {msg:?}")),
    }
}

/// Session `i`: actor `<prefix>-u<i>`, clientId `<prefix>-c<i>`.
pub fn session_specs(partition: &str, epoch: &str, prefix: &str, n: usize) -> Vec<super::sessions::SessionSpec> {
    (0..n)
        .map(|i| super::sessions::SessionSpec {
            partition: partition.to_owned(),
            epoch: epoch.to_owned(),
            actor: format!("{prefix}-u{i}"),
            client_id: format!("{prefix}-c{i}"),
        })
        .collect()
}

/// One bootstrap pull per session (4 connections), so each has a client
/// record subscribed to the written scope at the latest cursor.
///
/// Errors: the first failed pull.
pub fn make_client_records(dsn: &str, specs: &[super::sessions::SessionSpec]) -> Result<(), String> {
    let chunk = specs.len().div_ceil(4).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = specs
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || -> Result<(), String> {
                    let mut conn = crate::connect_to(dsn);
                    for spec in part {
                        pull_client_record(&mut conn, &spec.partition, &spec.epoch, &spec.actor, &spec.client_id)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| Err("client record thread panicked".to_owned())))
    })
}
