//! The line protocol between the fleet harness ([`crate::fleet`]) and a client driver: one JSON
//! [`Command`] per line on the driver's stdin, one JSON reply per line on its stdout —
//! `{"ok": …}` or `{"error": "…"}` — and logs on stderr. The same command set drives every
//! generation of the published client, so a test is written once.
//!
//! Three programs compile this one file: the harness (as `crate::fleet::protocol`), the
//! `syncular-client-v2-driver` binary of this crate, and `syncular-client-v3-driver` in
//! `tests/client-v3`, which includes it with `#[path]` because it cannot depend on this crate
//! (its client links a second `sqlite3`). So it depends on `serde`, `serde_json` and `std` only.
//!
//! Replies, by command (JSON keys camelCase, as the clients serialize their own records):
//! - `open` → `{"generation": "v2"|"v3"}`; `subscribe`, `unsubscribe`, `connect`,
//!   `disconnect`, `set_presence`, `close` → `null`;
//! - `upsert`, `patch`, `delete` → `{"clientCommitId": …}` (a local authoring failure, e.g. a
//!   patch without a local row, is an `error`);
//! - `sync`, `sync_idle` → a [`SyncResult`] (a failed round is an `ok` reply with status
//!   `failed`: the failure is the client's outcome, not the driver's);
//! - `rows` → `[{"rowId", "version", "values"}]`; `pending` → `[clientCommitId]`;
//!   `conflicts` → the client's conflict records (`clientCommitId`, `opIndex`, `table`,
//!   `rowId`, `code`, `message`, `serverVersion`, `serverRow`, and from v3 on always
//!   `conflictColumns`, column names); `rejections` → its rejection records (`clientCommitId`,
//!   `opIndex`, `code`, `message`, `retryable`, `details`); `outcome` → the commit's durable
//!   outcome (`status`: `applied`|`cached`|`conflict`|`rejected`) or `null`; `resolve` → the
//!   resolved outcome; `subscription` → the subscription's state (`status`, `cursor`,
//!   `hasResumeToken`, `effectiveScopes`) or `null`;
//! - `upload_blob` → the BlobRef the client staged (`blobId`, `byteLength`, `mediaType`?,
//!   `name`?), whose JSON text is the value of a `blob_ref` column; `fetch_blob` →
//!   `{"blobId", "bytesHex"}` (a failure is an `error` reply `code: message`);
//! - `pump` → `{"handled": n}` (socket messages applied by this call); `events` →
//!   `{"received": [Received…]}`, everything the socket delivered so far, in order;
//!   `presence` → the peers on the scope key (`actorId`, `clientId`, `doc`).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One command to a driver.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum Command {
    /// Creates the client (in-memory replica) and its native transport.
    Open {
        /// The native transport's JSON config (`baseUrl`, `headers`, …).
        transport: Value,
        /// The client id.
        client_id: String,
        /// The schema IR the client is built on.
        schema: Value,
        /// Request knobs (§4.2); absent ones are the client's defaults.
        #[serde(default)]
        limits: Limits,
        /// Lets the transport fetch bare signed URLs (§5.4 presigned segment URLs; the client
        /// then advertises `accept` bit 3 unless `limits.accept` says otherwise). Absent: off.
        #[serde(default, skip_serializing_if = "is_false")]
        signed_urls: bool,
    },
    /// Registers a subscription with its requested scopes.
    Subscribe {
        /// Subscription id.
        id: String,
        /// Table.
        table: String,
        /// Requested scopes: scope column → values.
        scopes: BTreeMap<String, Vec<String>>,
    },
    /// Forgets a subscription.
    Unsubscribe {
        /// Subscription id.
        id: String,
    },
    /// One commit of one upsert (the whole row).
    Upsert {
        /// Table.
        table: String,
        /// Column → value.
        values: Map<String, Value>,
        /// §6.2 `baseVersion`; absent is last-write-wins.
        #[serde(default)]
        base_version: Option<i64>,
    },
    /// One commit of the client's own `patch` (a partial update of a held row).
    Patch {
        /// Table.
        table: String,
        /// Primary key of the held row.
        row_id: String,
        /// The changed columns only.
        values: Map<String, Value>,
        /// §6.2 `baseVersion`.
        #[serde(default)]
        base_version: Option<i64>,
    },
    /// One commit of one delete.
    Delete {
        /// Table.
        table: String,
        /// Primary key.
        row_id: String,
        /// §6.2 `baseVersion`.
        #[serde(default)]
        base_version: Option<i64>,
    },
    /// One sync round.
    Sync,
    /// Rounds until idle, at most `max_rounds`.
    SyncIdle {
        /// Round budget.
        max_rounds: u32,
    },
    /// The visible rows of a table.
    Rows {
        /// Table.
        table: String,
    },
    /// The client commit ids still in the outbox.
    Pending,
    /// The conflict records.
    Conflicts,
    /// The rejection records.
    Rejections,
    /// The durable outcome of one commit.
    Outcome {
        /// Client commit id.
        client_commit_id: String,
    },
    /// Resolves a failed commit's outcome.
    Resolve {
        /// Client commit id.
        client_commit_id: String,
        /// `resolved_keep_server` | `dismissed` | `superseded`.
        resolution: String,
        /// The replacing commit (with `superseded`).
        #[serde(default)]
        replacement_client_commit_id: Option<String>,
    },
    /// The state of one subscription.
    Subscription {
        /// Subscription id.
        id: String,
    },
    /// Opens the realtime socket (§8).
    Connect,
    /// Closes the realtime socket.
    Disconnect,
    /// Applies what the socket delivered since the last pump.
    Pump,
    /// Everything the socket delivered so far.
    Events,
    /// Publishes (or, with a `null` doc, leaves) presence on a scope key (§8.6).
    SetPresence {
        /// Scope key, e.g. `project:p1`.
        scope_key: String,
        /// The document; `null` leaves.
        #[serde(default)]
        doc: Option<Value>,
    },
    /// The peers present on a scope key.
    Presence {
        /// Scope key.
        scope_key: String,
    },
    /// Stages a blob (§5.9.7): the client hashes and caches the bytes and queues their upload,
    /// flushed before its next push (grant, presigned PUT or the direct endpoint).
    UploadBlob {
        /// The bytes, lowercase or uppercase hex.
        bytes_hex: String,
        /// The BlobRef's `mediaType`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media_type: Option<String>,
        /// The BlobRef's `name`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Resolves a blob's bytes (§5.9.5): from the client's cache, else downloaded (inline or
    /// through the presigned URL the server issues) and checked against the content address.
    FetchBlob {
        /// A BlobRef (object or its JSON text) or a bare `sha256:…` blob id.
        blob_ref: Value,
    },
    /// Shuts the transport down; the driver exits after replying.
    Close,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// §4.2 request knobs of `open`; `None` keeps the client's default.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// `accept` bitmask (bit 0 inline rows, bit 1 external rows, bit 2 SQLite images, bit 3 signed
    /// URLs); absent, both clients send their default, with bit 3 when `open` had `signedUrls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept: Option<u8>,
    /// `limitCommits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_commits: Option<i32>,
    /// `limitSnapshotRows`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_snapshot_rows: Option<i32>,
    /// `maxSnapshotPages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snapshot_pages: Option<i32>,
}

/// The outcome of `sync` / `sync_idle`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncResult {
    /// `ok`, `failed`, `budgetExhausted` (v3: the round budget ran out before idle; the report
    /// covers every round) or `realtimeUnavailable` (v3).
    pub status: String,
    /// The client's report (`pushed`, `applied`, `rejected`, `conflicts`, `commitsApplied`,
    /// `segmentRowsApplied`, `bootstrapping`, …) when rounds completed.
    #[serde(default)]
    pub report: Option<Value>,
    /// The failure's code.
    #[serde(default)]
    pub error_code: Option<String>,
    /// The failure's message.
    #[serde(default)]
    pub message: Option<String>,
    /// The failure's details (v3).
    #[serde(default)]
    pub details: Option<Value>,
}

impl SyncResult {
    /// A completed run with the client's report.
    pub fn completed(status: &str, report: Value) -> SyncResult {
        SyncResult { status: status.to_owned(), report: Some(report), error_code: None, message: None, details: None }
    }

    /// A failed run.
    pub fn failed(status: &str, code: &str, message: &str, details: Option<Value>) -> SyncResult {
        SyncResult {
            status: status.to_owned(),
            report: None,
            error_code: Some(code.to_owned()),
            message: Some(message.to_owned()),
            details,
        }
    }
}

/// One thing the realtime socket delivered.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Received {
    /// A text control message (parsed JSON; a string when it was not JSON).
    Text(Value),
    /// A binary `0x00` delta of `bytes` bytes.
    Delta {
        /// Its length.
        bytes: usize,
    },
    /// The socket ended without the host closing it (v3 reports this).
    Disconnected {
        /// The transport's code.
        code: String,
        /// Its message.
        message: String,
    },
}

/// What a driver implements: one reply per command.
pub trait Driver {
    /// Runs `command`; `Err` is the text of the `{"error": …}` reply.
    fn handle(&mut self, command: Command) -> Result<Value, String>;
}

/// The reply line (without the newline) of a command's result.
pub fn encode_reply(reply: &Result<Value, String>) -> String {
    let v = match reply {
        Ok(v) => serde_json::json!({ "ok": v }),
        Err(e) => serde_json::json!({ "error": e }),
    };
    v.to_string()
}

/// Parses a reply line.
///
/// Errors: the line is neither `{"ok": …}` nor `{"error": "…"}`.
pub fn decode_reply(line: &str) -> Result<Result<Value, String>, String> {
    let mut v: Value = serde_json::from_str(line).map_err(|e| format!("reply is not JSON ({e}): {line}"))?;
    if let Some(ok) = v.get_mut("ok") {
        return Ok(Ok(ok.take()));
    }
    match v.get("error").and_then(Value::as_str) {
        Some(e) => Ok(Err(e.to_owned())),
        None => Err(format!("reply is neither ok nor error: {line}")),
    }
}

/// The driver loop: reads commands from stdin until `close` or end of input, writes one reply
/// line per command (flushed), and returns.
pub fn serve(driver: &mut impl Driver) {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                eprintln!("driver: stdin: {e}");
                return;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let (reply, close) = match serde_json::from_str::<Command>(&line) {
            Ok(command) => {
                let close = matches!(command, Command::Close);
                (driver.handle(command), close)
            }
            Err(e) => (Err(format!("driver.bad_command: {e}")), false),
        };
        if writeln!(out, "{}", encode_reply(&reply)).and_then(|()| out.flush()).is_err() {
            return;
        }
        if close {
            return;
        }
    }
}

/// The text a client's `fetch_blob` takes: a bare blob id as is, a BlobRef as its JSON text.
pub fn blob_ref_text(blob_ref: &Value) -> String {
    match blob_ref {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Lowercase hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// The bytes of a hex string.
///
/// Errors: an odd length or a non-hex digit (`driver.bad_command: …`).
pub fn from_hex(text: &str) -> Result<Vec<u8>, String> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(format!("driver.bad_command: not a hex digit: {:?}", c as char)),
    };
    let pairs = text.as_bytes().chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return Err("driver.bad_command: hex of odd length".to_owned());
    }
    pairs.map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

/// The (column, values) list a client's `subscribe` takes.
pub fn scope_list(scopes: BTreeMap<String, Vec<String>>) -> Vec<(String, Vec<String>)> {
    scopes.into_iter().collect()
}

/// A serializable value as JSON (the clients' records all serialize).
///
/// Errors: the serializer's text.
pub fn to_json(value: &impl Serialize) -> Result<Value, String> {
    serde_json::to_value(value).map_err(|e| format!("driver.serialize: {e}"))
}
