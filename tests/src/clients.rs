//! Helpers around the real `syncular-client` (=0.15.48): build a client on
//! the sample schema, write `tasks` rows, run rounds through a
//! [`PgTransport`], and read what the client holds.

use serde_json::{json, Map, Value};
use syncular_client::{ClientLimits, Mutation, RowState, SyncClient, SyncOutcome, SyncReport};

use crate::fixtures::{schema_ir, TASKS};
use crate::transport::PgTransport;

/// A fresh in-memory client with id `client_id` on the sample schema.
///
/// Errors: the client's construction error text.
pub fn new_client(client_id: &str) -> Result<SyncClient, String> {
    SyncClient::new(client_id.to_owned(), &schema_ir(), ClientLimits::default())
}

/// Subscribes `client` to `tasks` for the given projects (subscription id
/// `sub_id`, requested scopes `{"project_id": projects}`).
///
/// Errors: the client's subscribe error text.
pub fn subscribe_projects(
    client: &mut SyncClient,
    sub_id: &str,
    projects: &[&str],
) -> Result<(), String> {
    client.subscribe(
        sub_id.to_owned(),
        TASKS.to_owned(),
        vec![(
            "project_id".to_owned(),
            projects.iter().map(|p| (*p).to_owned()).collect(),
        )],
        None,
    )
}

/// The values map of one `tasks` row.
pub fn task_values(
    id: &str,
    project_id: &str,
    title: &str,
    done: bool,
    priority: Option<i64>,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("id".to_owned(), json!(id));
    m.insert("project_id".to_owned(), json!(project_id));
    m.insert("title".to_owned(), json!(title));
    m.insert("done".to_owned(), json!(done));
    m.insert(
        "priority".to_owned(),
        priority.map_or(Value::Null, |p| json!(p)),
    );
    m
}

/// An upsert mutation on `tasks` (last-write-wins, no `baseVersion`).
pub fn upsert_task(values: Map<String, Value>) -> Mutation {
    Mutation::Upsert {
        table: TASKS.to_owned(),
        values,
        base_version: None,
    }
}

/// A delete mutation on `tasks`.
pub fn delete_task(row_id: &str) -> Mutation {
    Mutation::Delete {
        table: TASKS.to_owned(),
        row_id: row_id.to_owned(),
        base_version: None,
    }
}

/// Runs `sync_until_idle` (at most `max_rounds` rounds).
///
/// Errors: `code: message` of a failed round.
pub fn sync_idle(
    client: &mut SyncClient,
    transport: &mut PgTransport,
    max_rounds: u32,
) -> Result<SyncReport, String> {
    match client.sync_until_idle(transport, Some(max_rounds)) {
        SyncOutcome::Ok(report) => Ok(report),
        SyncOutcome::Failed {
            error_code,
            message,
        } => Err(format!("{error_code}: {message}")),
    }
}

/// Runs exactly one round.
///
/// Errors: `code: message` of a failed round.
pub fn sync_once(
    client: &mut SyncClient,
    transport: &mut PgTransport,
) -> Result<SyncReport, String> {
    match client.sync(transport) {
        SyncOutcome::Ok(report) => Ok(report),
        SyncOutcome::Failed {
            error_code,
            message,
        } => Err(format!("{error_code}: {message}")),
    }
}

/// The `tasks` rows a client holds (visible rows, ordered by id).
///
/// Errors: the client's read error text.
pub fn held_rows(client: &SyncClient) -> Result<Vec<RowState>, String> {
    client.read_rows(TASKS)
}

/// One held row: `(row id, server version, values)`.
pub type HeldRow = (String, i64, Map<String, Value>);

/// The rows a client holds as [`HeldRow`]s, for equality checks across clients.
///
/// Errors: the client's read error text.
pub fn held_snapshot(client: &SyncClient) -> Result<Vec<HeldRow>, String> {
    Ok(held_rows(client)?
        .into_iter()
        .map(|r| (r.row_id, r.version, r.values))
        .collect())
}
