//! Building a partition's log through the extension itself, so the rows the
//! prune deletes have exactly the shape the extension writes.
//!
//! - [`push_commits`]: commits pushed through `syncular.sync` (their
//!   `PUSH_RESULT`s are stored as §2.3 outcomes, which pruning keeps);
//! - [`captured_statements`]: plain SQL writes to `public.tasks` captured
//!   as commits (docs/src/guide/plain-sql.md "Writing with plain SQL": one statement = one
//!   commit). Statement `i` (a global index, so chunks continue each other):
//!   `i % 10 == 3` inserts three rows (projects p0, p1, p2: one commit, three
//!   changes, three scopes), `== 7` updates row `r<i-1>`, `== 9` deletes row
//!   `r<i-1>` (a tombstone), anything else inserts row `r<i>` in project
//!   `p<i % 4>`. Every statement touches at least one row, so it writes
//!   exactly one commit. A chunk is one transaction (a `DO` block looping
//!   over its statements), like a batch job writing with plain SQL. The
//!   tables it writes are `ANALYZE`d whenever the count written doubles, as
//!   autovacuum's autoanalyze would: on never-analyzed tables the capture's
//!   statements that clear tombstones and replace row-scope entries
//!   (`DELETE … USING` the transition table) are planned as sequential
//!   scans, and each captured statement then costs time proportional to the
//!   partition's size.

use postgres::Client;
use serde_json::Value;
use ssp2::model::PushStatus;

use super::pg_text;
use crate::wire::{commit, upsert, RawSession, Task};

/// The `DO` block writing captured statements `first ..= last` (global
/// indexes, see the module docs) into the partition of the session's
/// `syncular.partition` setting.
pub fn captured_chunk_sql(first: u64, last: u64) -> String {
    format!(
        "DO $syncular_prefill$
DECLARE
  i bigint;
  p text := pg_catalog.current_setting('syncular.partition');
BEGIN
  FOR i IN {first} .. {last} LOOP
    IF i % 10 = 3 THEN
      INSERT INTO public.tasks (id, project_id, title, done, priority)
      VALUES ('r' || i || 'a', 'p0', 'task ' || i || ' a', false, i % 100),
             ('r' || i || 'b', 'p1', 'task ' || i || ' b', false, NULL),
             ('r' || i || 'c', 'p2', 'task ' || i || ' c', true, 7);
    ELSIF i % 10 = 7 THEN
      UPDATE public.tasks SET title = 'edited ' || i, done = true
       WHERE _sync_partition = p AND _sync_row_id = 'r' || (i - 1);
    ELSIF i % 10 = 9 THEN
      DELETE FROM public.tasks WHERE _sync_partition = p AND _sync_row_id = 'r' || (i - 1);
    ELSE
      INSERT INTO public.tasks (id, project_id, title, done, priority)
      VALUES ('r' || i, 'p' || (i % 4), 'task ' || i, false,
              CASE WHEN i % 3 = 0 THEN NULL ELSE i END);
    END IF;
  END LOOP;
END
$syncular_prefill$"
    )
}

/// What the prefill analyzes when its count doubles (module docs).
pub const ANALYZE_SQL: &str = "ANALYZE public.tasks, syncular.sync_row_scopes, syncular.sync_tombstones, \
    syncular.sync_commits, syncular.sync_changes, syncular.sync_change_scopes";

/// Writes captured statements `first .. first + count` (global indexes) on
/// `conn`, whose session has `syncular.partition` set, `chunk` statements
/// per transaction. `progress` is called after every chunk with the number
/// written so far.
///
/// Errors: the Postgres error of a chunk.
pub fn captured_statements(
    conn: &mut Client,
    first: u64,
    count: u64,
    chunk: u64,
    mut progress: impl FnMut(u64),
) -> Result<(), String> {
    let chunk = chunk.max(1);
    let mut done = 0;
    let mut analyze_at = chunk;
    while done < count {
        let n = chunk.min(count - done);
        let a = first + done;
        conn.batch_execute(&captured_chunk_sql(a, a + n - 1))
            .map_err(|e| format!("captured statements {a}..{}: {}", a + n - 1, pg_text(&e)))?;
        done += n;
        if done >= analyze_at && done < count {
            conn.batch_execute(ANALYZE_SQL).map_err(|e| format!("ANALYZE: {}", pg_text(&e)))?;
            analyze_at = done * 2;
        }
        progress(done);
    }
    Ok(())
}

/// One pushed prefill request: its bytes and what the server answered
/// (`(clientCommitId, commitSeq)` per commit), for a replay after pruning.
#[derive(Clone, Debug)]
pub struct PushedRequest {
    pub bytes: Vec<u8>,
    pub outcomes: Vec<(String, i64)>,
}

/// Pushes `requests` requests of `per_request` single-row commits through
/// `session` (rows `push-<r>-<k>` in `project`), each checked `applied`.
///
/// Errors: a failed request, or an outcome other than `applied`.
pub fn push_commits(
    session: &mut RawSession,
    requests: usize,
    per_request: usize,
    project: &str,
) -> Result<Vec<PushedRequest>, String> {
    let mut out = Vec::with_capacity(requests);
    for r in 0..requests {
        let frames = (0..per_request)
            .map(|k| {
                let task = Task::new(format!("push-{r}-{k}"), project, format!("pushed {r}/{k}"));
                commit(format!("prefill-{r}-{k}"), vec![upsert(&task, None)])
            })
            .collect();
        let bytes = session.encode(frames);
        let response = session
            .send_bytes(&bytes)
            .map_err(|e| format!("prefill push {r}: {}", pg_text(&e)))?;
        let msg = crate::wire::decode_response(&response)?;
        let outcomes = crate::wire::push_outcomes(&msg);
        if outcomes.len() != per_request {
            return Err(format!("prefill push {r}: {} outcomes for {per_request} commits", outcomes.len()));
        }
        let mut seqs = Vec::with_capacity(per_request);
        for o in outcomes {
            match (o.status, o.commit_seq) {
                (PushStatus::Applied, Some(seq)) => seqs.push((o.client_commit_id, seq)),
                other => return Err(format!("prefill push {r}: {} not applied: {other:?}", o.client_commit_id)),
            }
        }
        out.push(PushedRequest { bytes, outcomes: seqs });
    }
    Ok(out)
}

/// Sets `syncular.partition` (and the actor) on `conn` for captured writes.
///
/// Errors: the Postgres error.
pub fn capture_session(conn: &mut Client, partition: &str, actor: &str) -> Result<(), String> {
    crate::capture::set_partition(conn, partition, Some(actor)).map_err(|e| pg_text(&e))
}

/// `max_commit_seq` and `horizon_seq` of `partition` (`(0, 0)` when it has
/// no counter row yet).
///
/// Errors: the Postgres error.
pub fn counters(conn: &mut Client, partition: &str) -> Result<(i64, i64), String> {
    let rows = conn
        .query(
            "SELECT max_commit_seq, horizon_seq FROM syncular.sync_partitions WHERE partition = $1",
            &[&partition],
        )
        .map_err(|e| pg_text(&e))?;
    Ok(rows.first().map_or((0, 0), |r| (r.get(0), r.get(1))))
}

/// The allowed map of every reader and pusher: any project.
pub fn allowed() -> Value {
    crate::fixtures::allow_all_projects()
}
