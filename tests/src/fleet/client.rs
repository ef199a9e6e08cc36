//! [`FleetClient`]: one driver process holding one real published client, and typed helpers
//! over the line protocol. Every reply is awaited for at most [`COMMAND_TIMEOUT`]; a driver
//! that stays silent, dies or answers garbage fails the test with its stderr. The process is
//! killed on drop, and a test that panics prints the driver's stderr.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command as Process, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::protocol::{decode_reply, from_hex, to_hex, Command, Limits, Received};
use super::records::{event_name, event_names, sync_outcome, Completed, Conflict, Rejection, Report, RoundFailure, Row};
use super::Generation;
use crate::fixtures::{schema_ir, TASKS};
use crate::gateway::{transport_config, WAIT};

/// Bound of one command's reply (a `sync_idle` of a segment bootstrap included).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(90);

/// What `open` sets besides the transport and the client id; `Default` is the sample schema,
/// the client's default limits and no signed-URL fetches.
#[derive(Debug, Clone, Default)]
pub struct Open {
    /// The schema IR; `None` is the sample schema ([`schema_ir`]).
    pub schema: Option<Value>,
    /// Request knobs (§4.2).
    pub limits: Limits,
    /// Whether the transport fetches bare signed URLs (§5.4).
    pub signed_urls: bool,
}

/// A running driver with an open client.
pub struct FleetClient {
    /// Its generation.
    pub generation: Generation,
    /// Its client id.
    pub client_id: String,
    child: Child,
    stdin: ChildStdin,
    replies: Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl FleetClient {
    /// A client `client_id` of `actor` in `partition` of the dev-auth gateway at `base_url`, on
    /// the sample schema with the client's default limits.
    pub fn spawn(generation: Generation, base_url: &str, partition: &str, actor: &str, client_id: &str) -> FleetClient {
        FleetClient::spawn_with(generation, base_url, partition, actor, client_id, Limits::default())
    }

    /// [`FleetClient::spawn`] with request knobs.
    pub fn spawn_with(
        generation: Generation,
        base_url: &str,
        partition: &str,
        actor: &str,
        client_id: &str,
        limits: Limits,
    ) -> FleetClient {
        FleetClient::spawn_opts(generation, base_url, partition, actor, client_id, Open { limits, ..Open::default() })
    }

    /// [`FleetClient::spawn`] with everything `open` can set.
    pub fn spawn_opts(
        generation: Generation,
        base_url: &str,
        partition: &str,
        actor: &str,
        client_id: &str,
        open: Open,
    ) -> FleetClient {
        let mut c = FleetClient::start(generation, client_id);
        let opened = c.ok(&Command::Open {
            transport: transport_config(base_url, actor, partition),
            client_id: client_id.to_owned(),
            schema: open.schema.unwrap_or_else(schema_ir),
            limits: open.limits,
            signed_urls: open.signed_urls,
        });
        assert_eq!(opened["generation"], generation.label(), "the driver of {generation:?}");
        c
    }

    /// Starts the driver process (no client yet: send `open`).
    pub fn start(generation: Generation, client_id: &str) -> FleetClient {
        let path = generation.driver_path();
        let mut child = Process::new(&path)
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} ({e}); {}", path.display(), generation.build_hint()));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let stderr_pipe = child.stderr.take().expect("stderr");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let (tx, replies) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        FleetClient { generation, client_id: client_id.to_owned(), child, stdin, replies, stderr }
    }

    /// Sends one command and waits (bounded) for its reply: `Ok` value or the `error` text.
    pub fn call(&mut self, command: &Command) -> Result<Value, String> {
        let line = serde_json::to_string(command).expect("commands serialize");
        if let Err(e) = writeln!(self.stdin, "{line}").and_then(|()| self.stdin.flush()) {
            self.fail(&format!("cannot send {line}: {e}"));
        }
        match self.replies.recv_timeout(COMMAND_TIMEOUT) {
            Ok(reply) => decode_reply(&reply).unwrap_or_else(|e| self.fail(&e)),
            Err(RecvTimeoutError::Timeout) => self.fail(&format!("no reply to {line} within {COMMAND_TIMEOUT:?}")),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.exit_status(Duration::from_secs(2)).unwrap_or_else(|| "still running".to_owned());
                self.fail(&format!("the driver closed its stdout ({status}) on {line}"))
            }
        }
    }

    /// [`FleetClient::call`] that must succeed.
    pub fn ok(&mut self, command: &Command) -> Value {
        match self.call(command) {
            Ok(v) => v,
            Err(e) => panic!("{}: {command:?} failed: {e}", self.name()),
        }
    }

    fn typed<T: DeserializeOwned>(&mut self, command: &Command) -> T {
        let v = self.ok(command);
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{}: unexpected reply to {command:?} ({e}): {v}", self.name()))
    }

    /// `v2 alice-1` — for messages.
    pub fn name(&self) -> String {
        format!("{} {}", self.generation.label(), self.client_id)
    }

    /// The driver's stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// The driver's exit status once it exited, polled for at most `within`; `None` while it
    /// still runs.
    fn exit_status(&mut self, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status.to_string()),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) => return None,
                Err(e) => return Some(e.to_string()),
            }
        }
    }

    fn fail(&mut self, what: &str) -> ! {
        let _ = self.child.kill();
        // Give the stderr reader a moment to drain what the process wrote before it died.
        std::thread::sleep(Duration::from_millis(50));
        panic!("{}: {what}\ndriver stderr:\n{}", self.name(), self.stderr())
    }

    // -- subscriptions and writes --------------------------------------------------------

    /// Subscribes `id` to `table` with requested `scopes` (column → values).
    pub fn subscribe(&mut self, id: &str, table: &str, scopes: &[(&str, &[&str])]) {
        let scopes: BTreeMap<String, Vec<String>> =
            scopes.iter().map(|(k, vs)| ((*k).to_owned(), vs.iter().map(|v| (*v).to_owned()).collect())).collect();
        self.ok(&Command::Subscribe { id: id.to_owned(), table: table.to_owned(), scopes });
    }

    /// Subscribes `id` to `tasks` of `projects`.
    pub fn subscribe_projects(&mut self, id: &str, projects: &[&str]) {
        self.subscribe(id, TASKS, &[("project_id", projects)]);
    }

    /// Forgets subscription `id`.
    pub fn unsubscribe(&mut self, id: &str) {
        self.ok(&Command::Unsubscribe { id: id.to_owned() });
    }

    /// One commit upserting `values` into `tasks`; returns its client commit id.
    pub fn upsert(&mut self, values: Map<String, Value>, base_version: Option<i64>) -> String {
        self.upsert_into(TASKS, values, base_version)
    }

    /// One commit upserting `values` into `table`; returns its client commit id.
    pub fn upsert_into(&mut self, table: &str, values: Map<String, Value>, base_version: Option<i64>) -> String {
        commit_id(self.ok(&Command::Upsert { table: table.to_owned(), values, base_version }))
    }

    /// One commit writing task `id` (`done` false, no priority); returns its client commit id.
    pub fn write_task(&mut self, id: &str, project: &str, title: &str) -> String {
        self.upsert(crate::clients::task_values(id, project, title, false, None), None)
    }

    /// One commit of the client's `patch` of task `row_id`: `Ok(client commit id)`, or the
    /// local refusal.
    pub fn patch(&mut self, row_id: &str, values: Map<String, Value>, base_version: Option<i64>) -> Result<String, String> {
        self.call(&Command::Patch { table: TASKS.to_owned(), row_id: row_id.to_owned(), values, base_version }).map(commit_id)
    }

    /// One commit deleting task `row_id`; returns its client commit id.
    pub fn delete(&mut self, row_id: &str, base_version: Option<i64>) -> String {
        commit_id(self.ok(&Command::Delete { table: TASKS.to_owned(), row_id: row_id.to_owned(), base_version }))
    }

    // -- blobs (§5.9) ----------------------------------------------------------------------

    /// Stages `bytes` as a blob (uploaded before the client's next push); returns the BlobRef
    /// (`blobId`, `byteLength`, `mediaType`?, `name`?).
    pub fn upload_blob(&mut self, bytes: &[u8], media_type: Option<&str>, name: Option<&str>) -> Value {
        self.ok(&Command::UploadBlob {
            bytes_hex: to_hex(bytes),
            media_type: media_type.map(str::to_owned),
            name: name.map(str::to_owned),
        })
    }

    /// The bytes of a blob (a BlobRef or a `sha256:…` id), from the client's cache or downloaded;
    /// `Err` is the client's `code: message`.
    pub fn fetch_blob(&mut self, blob_ref: &Value) -> Result<Vec<u8>, String> {
        let reply = self.call(&Command::FetchBlob { blob_ref: blob_ref.clone() })?;
        let hex = reply["bytesHex"].as_str().unwrap_or_else(|| panic!("{}: no bytesHex in {reply}", self.name()));
        Ok(from_hex(hex).expect("the driver answers hex"))
    }

    // -- rounds ------------------------------------------------------------------------------

    /// One round.
    pub fn sync(&mut self) -> Result<Completed, RoundFailure> {
        let reply = self.ok(&Command::Sync);
        sync_outcome(reply)
    }

    /// Rounds until idle, at most `max_rounds`.
    pub fn sync_idle(&mut self, max_rounds: u32) -> Result<Completed, RoundFailure> {
        let reply = self.ok(&Command::SyncIdle { max_rounds });
        sync_outcome(reply)
    }

    /// Rounds until idle that must complete; returns the report.
    pub fn synced(&mut self, max_rounds: u32) -> Report {
        match self.sync_idle(max_rounds) {
            Ok(done) => done.report,
            Err(failure) => panic!("{}: sync failed: {failure}", self.name()),
        }
    }

    // -- what the client holds ---------------------------------------------------------------

    /// The visible rows of `table`, by primary key.
    pub fn rows(&mut self, table: &str) -> Vec<Row> {
        self.typed(&Command::Rows { table: table.to_owned() })
    }

    /// The visible rows of `tasks`, by primary key.
    pub fn tasks(&mut self) -> Vec<Row> {
        self.rows(TASKS)
    }

    /// Task `id`, when held.
    pub fn task(&mut self, id: &str) -> Option<Row> {
        self.tasks().into_iter().find(|r| r.row_id == id)
    }

    /// True when task `id` is held.
    pub fn holds(&mut self, id: &str) -> bool {
        self.task(id).is_some()
    }

    /// Client commit ids still in the outbox.
    pub fn pending(&mut self) -> Vec<String> {
        self.typed(&Command::Pending)
    }

    /// The conflict records.
    pub fn conflicts(&mut self) -> Vec<Conflict> {
        self.typed(&Command::Conflicts)
    }

    /// The rejection records.
    pub fn rejections(&mut self) -> Vec<Rejection> {
        self.typed(&Command::Rejections)
    }

    /// The durable outcome of a commit (`status`: `applied`, `cached`, `conflict`, `rejected`),
    /// `Null` when unknown.
    pub fn outcome(&mut self, client_commit_id: &str) -> Value {
        self.ok(&Command::Outcome { client_commit_id: client_commit_id.to_owned() })
    }

    /// Resolves a failed commit's outcome (`resolved_keep_server`, `dismissed`).
    pub fn resolve(&mut self, client_commit_id: &str, resolution: &str) -> Value {
        self.ok(&Command::Resolve {
            client_commit_id: client_commit_id.to_owned(),
            resolution: resolution.to_owned(),
            replacement_client_commit_id: None,
        })
    }

    /// The state of subscription `id` (`status`, `cursor`, `hasResumeToken`,
    /// `effectiveScopes`), `Null` when unknown.
    pub fn subscription(&mut self, id: &str) -> Value {
        self.ok(&Command::Subscription { id: id.to_owned() })
    }

    // -- realtime ----------------------------------------------------------------------------

    /// Opens the realtime socket.
    pub fn connect(&mut self) {
        self.ok(&Command::Connect);
    }

    /// Closes the realtime socket.
    pub fn disconnect(&mut self) {
        self.ok(&Command::Disconnect);
    }

    /// Applies what the socket delivered since the last pump; returns how many messages.
    pub fn pump(&mut self) -> u64 {
        self.ok(&Command::Pump)["handled"].as_u64().unwrap_or(0)
    }

    /// Everything the socket delivered so far, in order.
    pub fn received(&mut self) -> Vec<Received> {
        self.typed::<Value>(&Command::Events)
            .get("received")
            .cloned()
            .map(|v| serde_json::from_value(v).expect("received entries"))
            .unwrap_or_default()
    }

    /// Names of what the socket delivered (`hello`, `sync`, `heartbeat`, `delta`, …).
    pub fn events(&mut self) -> Vec<String> {
        event_names(&self.received())
    }

    /// Deltas received.
    pub fn delta_count(&mut self) -> usize {
        self.received().iter().filter(|r| matches!(r, Received::Delta { .. })).count()
    }

    /// The wake-up reasons received (`sync` events), in order.
    pub fn wakes(&mut self) -> Vec<String> {
        self.received()
            .iter()
            .filter_map(|r| match r {
                Received::Text(v) if event_name(v) == "sync" => v["data"]["reason"].as_str().map(str::to_owned),
                _ => None,
            })
            .collect()
    }

    /// The first `hello`'s data.
    pub fn hello(&mut self) -> Option<Value> {
        self.received().into_iter().find_map(|r| match r {
            Received::Text(v) if event_name(&v) == "hello" => Some(v["data"].clone()),
            _ => None,
        })
    }

    /// Pumps until `cond` holds (bounded by [`WAIT`]).
    pub fn pump_until(&mut self, what: &str, mut cond: impl FnMut(&mut FleetClient) -> bool) {
        let deadline = Instant::now() + WAIT;
        loop {
            self.pump();
            if cond(self) {
                return;
            }
            if Instant::now() > deadline {
                let events = self.events();
                panic!("{}: timed out waiting for: {what}; received: {events:?}", self.name());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Synced over HTTP once (a client record with its subscriptions), then connected: the
    /// `hello` is in.
    pub fn connect_after_sync(&mut self) {
        self.synced(6);
        self.connect();
        self.pump_until("hello", |c| c.hello().is_some());
    }

    /// Publishes (`Some`) or leaves (`None`) presence on `scope_key`.
    pub fn set_presence(&mut self, scope_key: &str, doc: Option<Value>) {
        self.ok(&Command::SetPresence { scope_key: scope_key.to_owned(), doc });
    }

    /// The peers present on `scope_key` (`actorId`, `clientId`, `doc`).
    pub fn presence(&mut self, scope_key: &str) -> Vec<Value> {
        self.typed(&Command::Presence { scope_key: scope_key.to_owned() })
    }

    /// Closes the client and waits (bounded) for the driver to exit.
    pub fn close(mut self) {
        self.ok(&Command::Close);
        if self.exit_status(WAIT).is_none() {
            self.fail("the driver did not exit after close");
        }
    }
}

fn commit_id(reply: Value) -> String {
    reply["clientCommitId"].as_str().unwrap_or_else(|| panic!("no clientCommitId in {reply}")).to_owned()
}

/// `{"title": …}`-style partial values for [`FleetClient::patch`].
pub fn values(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

impl Drop for FleetClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- driver stderr of {} ---\n{}", self.name(), self.stderr());
        }
    }
}
