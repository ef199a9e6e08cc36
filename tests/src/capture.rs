//! Helpers of the capture tests and benchmark (issue 9: plain SQL writes to
//! app tables become commits): a connection that writes `public.tasks` with
//! plain SQL for one partition, the rows a real client holds in the shape of
//! [`crate::fixtures::server_tasks`], and the shape of a partition's log.

use postgres::Client;
use serde_json::Value;
use syncular_client::SyncClient;

use crate::clients::held_rows;
use crate::fixtures::{bound_statements, ServerTask};

/// Sets the session's `syncular.partition` (and `syncular.actor_id` when
/// given) on `conn` with `set_config`, so the values are bound parameters.
///
/// Errors: the Postgres error of `set_config`.
pub fn set_partition(
    conn: &mut Client,
    partition: &str,
    actor: Option<&str>,
) -> Result<(), postgres::Error> {
    conn.execute(
        "SELECT pg_catalog.set_config('syncular.partition', $1, false)",
        &[&partition],
    )?;
    if let Some(actor) = actor {
        conn.execute(
            "SELECT pg_catalog.set_config('syncular.actor_id', $1, false)",
            &[&actor],
        )?;
    }
    Ok(())
}

/// A new connection whose plain SQL writes to app tables are commits of
/// `partition` (session setting), by `actor` when given (else the role).
/// Statements are bounded ([`crate::fixtures::STATEMENT_TIMEOUT`]).
///
/// Panics when the connection or a setting fails.
pub fn sql_writer(partition: &str, actor: Option<&str>) -> Client {
    let mut conn = crate::connect();
    bound_statements(&mut conn).expect("statement timeout");
    set_partition(&mut conn, partition, actor).expect("SET syncular.partition / actor_id");
    conn
}

/// The `tasks` rows `client` holds, as `(id, project_id, title, done,
/// priority, server version)` ordered by id — comparable with
/// [`crate::fixtures::server_tasks`].
///
/// Errors: the client's read error, or a held row whose values do not have
/// the `tasks` shape.
pub fn held_tasks(client: &SyncClient) -> Result<Vec<ServerTask>, String> {
    let mut out = Vec::new();
    for row in held_rows(client)? {
        let text = |name: &str| -> Result<String, String> {
            row.values
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    format!(
                        "held row {:?}: {name} is not a string: {:?}",
                        row.row_id, row.values
                    )
                })
        };
        let done = row
            .values
            .get("done")
            .and_then(Value::as_bool)
            .ok_or_else(|| {
                format!(
                    "held row {:?}: done is not a boolean: {:?}",
                    row.row_id, row.values
                )
            })?;
        let priority = match row.values.get("priority") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_i64().ok_or_else(|| {
                format!(
                    "held row {:?}: priority is not an integer: {v:?}",
                    row.row_id
                )
            })?),
        };
        let id = text("id")?;
        if id != row.row_id {
            return Err(format!(
                "held row id {:?} differs from its id column {id:?}",
                row.row_id
            ));
        }
        out.push((
            id,
            text("project_id")?,
            text("title")?,
            done,
            priority,
            row.version,
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The shape of a partition's commit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogShape {
    /// Rows of `sync_commits`.
    pub commits: i64,
    /// Distinct `commit_seq` values.
    pub distinct_seqs: i64,
    /// Smallest `commit_seq` (0 when empty).
    pub min_seq: i64,
    /// Largest `commit_seq` (0 when empty).
    pub max_seq: i64,
    /// `sync_partitions.max_commit_seq` (0 when absent).
    pub counter: i64,
    /// Commits without any change row.
    pub empty_commits: i64,
}

impl LogShape {
    /// A dense log of `n` commits: `commit_seq` exactly 1..=n, the counter
    /// at n, every commit with at least one change.
    pub fn dense(n: i64) -> LogShape {
        LogShape {
            commits: n,
            distinct_seqs: n,
            min_seq: i64::from(n > 0),
            max_seq: n,
            counter: n,
            empty_commits: 0,
        }
    }
}

/// Reads the [`LogShape`] of `partition`.
///
/// Errors: any Postgres error.
pub fn log_shape(conn: &mut Client, partition: &str) -> Result<LogShape, postgres::Error> {
    let r = conn.query_one(
        "SELECT count(*)::int8, count(DISTINCT commit_seq)::int8,
                coalesce(min(commit_seq), 0)::int8, coalesce(max(commit_seq), 0)::int8
           FROM syncular.sync_commits WHERE partition = $1",
        &[&partition],
    )?;
    let counter: i64 = conn
        .query_one(
            "SELECT coalesce((SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1), 0)::int8",
            &[&partition],
        )?
        .get(0);
    let empty_commits: i64 = conn
        .query_one(
            "SELECT count(*)::int8 FROM syncular.sync_commits c
              WHERE c.partition = $1 AND NOT EXISTS (
                    SELECT 1 FROM syncular.sync_changes x WHERE x.partition = c.partition AND x.commit_seq = c.commit_seq)",
            &[&partition],
        )?
        .get(0);
    Ok(LogShape {
        commits: r.get(0),
        distinct_seqs: r.get(1),
        min_seq: r.get(2),
        max_seq: r.get(3),
        counter,
        empty_commits,
    })
}

/// `(commit_seq, client_id, actor_id, number of changes)` of every commit of
/// `partition`, in `commit_seq` order.
///
/// Errors: any Postgres error.
pub fn commits(
    conn: &mut Client,
    partition: &str,
) -> Result<Vec<(i64, String, String, i64)>, postgres::Error> {
    Ok(conn
        .query(
            "SELECT c.commit_seq, c.client_id, c.actor_id,
                    (SELECT count(*) FROM syncular.sync_changes x
                      WHERE x.partition = c.partition AND x.commit_seq = c.commit_seq)::int8
               FROM syncular.sync_commits c WHERE c.partition = $1 ORDER BY c.commit_seq",
            &[&partition],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect())
}
