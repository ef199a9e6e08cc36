//! Typed forms of the driver replies the fleet tests read ([`super::protocol`] documents the
//! JSON): held rows, sync reports and failures, conflict and rejection records, and what a
//! realtime socket delivered. Generation-neutral: a field only one generation sends is an
//! `Option` (`conflictColumns`: `None` from v2, which has none).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::protocol::{Received, SyncResult};

/// One visible row of a client.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// Primary key.
    pub row_id: String,
    /// The server version (`-1` while only optimistic).
    pub version: i64,
    /// Column → value.
    pub values: Map<String, Value>,
}

/// A client's report of completed rounds (the fields both generations send).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Report {
    /// Commits pushed.
    pub pushed: u32,
    /// Client commit ids answered `applied` or `cached`.
    pub applied: Vec<String>,
    /// Client commit ids rejected (conflict or error).
    pub rejected: Vec<String>,
    /// Client commit ids kept for a retry.
    pub retryable: Vec<String>,
    /// Conflict records received.
    pub conflicts: u32,
    /// Pulled `COMMIT`s applied.
    pub commits_applied: u32,
    /// Rows applied from snapshot segments (inline or downloaded).
    pub segment_rows_applied: u32,
    /// Subscriptions still bootstrapping.
    pub bootstrapping: Vec<String>,
    /// Subscriptions reset.
    pub resets: Vec<String>,
    /// Subscriptions revoked.
    pub revoked: Vec<String>,
    /// Subscriptions failed.
    pub failed: Vec<String>,
}

/// A `sync` / `sync_idle` that did not complete.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundFailure {
    /// `failed` or `realtimeUnavailable`.
    pub status: String,
    /// The client's error code.
    pub code: String,
    /// Its message.
    pub message: String,
    /// Its details (v3).
    pub details: Option<Value>,
}

impl std::fmt::Display for RoundFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(d) = &self.details {
            write!(f, " {d}")?;
        }
        Ok(())
    }
}

/// A completed run: its report, and whether it ended idle (v3's `budgetExhausted` is not).
#[derive(Debug, Clone, PartialEq)]
pub struct Completed {
    /// The aggregate report.
    pub report: Report,
    /// False when the round budget ran out first (v3 says so; v2 never does).
    pub idle: bool,
}

/// Reads a [`SyncResult`] reply.
///
/// Errors: a reply that is not a [`SyncResult`] (a driver bug), as a failure with code
/// `driver.bad_reply`.
pub fn sync_outcome(reply: Value) -> Result<Completed, RoundFailure> {
    let bad = |e: String| RoundFailure { status: "failed".into(), code: "driver.bad_reply".into(), message: e, details: None };
    let result: SyncResult = serde_json::from_value(reply).map_err(|e| bad(e.to_string()))?;
    match result.status.as_str() {
        "ok" | "budgetExhausted" => {
            let report = serde_json::from_value(result.report.unwrap_or(Value::Null)).map_err(|e| bad(e.to_string()))?;
            Ok(Completed { report, idle: result.status == "ok" })
        }
        _ => Err(RoundFailure {
            status: result.status,
            code: result.error_code.unwrap_or_default(),
            message: result.message.unwrap_or_default(),
            details: result.details,
        }),
    }
}

/// One conflict record (§6.3).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    /// The rejected commit.
    pub client_commit_id: String,
    /// The operation.
    pub op_index: i32,
    /// Table.
    pub table: String,
    /// Row.
    pub row_id: String,
    /// E.g. `sync.version_conflict`.
    pub code: String,
    /// Message.
    pub message: String,
    /// The server's version of the row.
    pub server_version: i64,
    /// The server's row.
    pub server_row: Map<String, Value>,
    /// Column names whose version passed `baseVersion` (v3; `None` from v2).
    #[serde(default)]
    pub conflict_columns: Option<Vec<String>>,
}

/// One rejection record (§6.3 error results).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejection {
    /// The rejected commit.
    pub client_commit_id: String,
    /// The operation.
    pub op_index: i32,
    /// E.g. `sync.forbidden`.
    pub code: String,
    /// Message.
    pub message: String,
    /// Whether the client keeps it for a retry.
    pub retryable: bool,
}

/// The control event's name (`event`, else `type`) of a text message.
pub fn event_name(text: &Value) -> &str {
    text["event"].as_str().or(text["type"].as_str()).unwrap_or("?")
}

/// Names of what a socket delivered, in order: the event of a text message, `delta`, or
/// `disconnected`.
pub fn event_names(received: &[Received]) -> Vec<String> {
    received
        .iter()
        .map(|r| match r {
            Received::Text(v) => event_name(v).to_owned(),
            Received::Delta { .. } => "delta".to_owned(),
            Received::Disconnected { .. } => "disconnected".to_owned(),
        })
        .collect()
}
