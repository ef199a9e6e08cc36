//! `syncular-client-v3-driver`: one published `syncular-client` 0.49.2 (wire version 3 only, the
//! generation people install today) over its own native HTTP/WebSocket transport, driven by the
//! fleet line protocol on stdin/stdout. The protocol is the tests crate's
//! `src/fleet/protocol.rs`, compiled in here by path: this workspace cannot depend on that crate
//! (its 0.15.48 client links a second `sqlite3`). The harness that spawns it is
//! `syncular_integration_tests::fleet` (binary path from `SYNCULAR_CLIENT_V3_DRIVER`).
//!
//! What 0.49.2 adds over the v2 driver: `patch` is the client's sparse patch (primary key plus
//! the given non-scope columns on the wire); conflict records carry `conflictColumns` (always
//! present in the reply, `[]` when the record has none); a socket that ends on its own arrives
//! as `Inbound::Disconnected`, recorded and handed to `realtime_lost`; `sync_idle` can end
//! `budgetExhausted`, and a round refused for want of a socket `realtimeUnavailable`.
//! `fetch_blob` runs 0.49.2's `fetch_blob_bytes` (raw bytes; 0.15.48's `fetch_blob` answers
//! `{"$bytes": hex}`); `open`'s `signedUrls` is the native transport's `set_signed_urls`.

#[path = "../../src/fleet/protocol.rs"]
#[allow(dead_code)] // the harness half (reply decoding) is not the driver's
mod protocol;

use serde_json::{json, Value};
use syncular_client::native_transport::{HostTransport, Inbound};
use syncular_client::{ClientLimits, Mutation, ResolveCommitOutcomeInput, SyncClient, SyncOutcome};

use protocol::{blob_ref_text, from_hex, scope_list, to_hex, to_json, Command, Driver, Received, SyncResult};

/// An open client and its transport.
struct Session {
    client: SyncClient,
    transport: HostTransport,
    received: Vec<Received>,
}

/// The driver: no session until `open`.
#[derive(Default)]
struct V3 {
    session: Option<Session>,
}

fn sync_result(outcome: SyncOutcome) -> Result<Value, String> {
    let result = match outcome {
        SyncOutcome::Ok(report) => SyncResult::completed("ok", to_json(&report)?),
        SyncOutcome::BudgetExhausted(report) => SyncResult::completed("budgetExhausted", to_json(&report)?),
        SyncOutcome::Failed { error_code, message, details, .. } => {
            SyncResult::failed("failed", &error_code, &message, details)
        }
        SyncOutcome::RealtimeUnavailable { state, reason_code, .. } => SyncResult::failed(
            "realtimeUnavailable",
            syncular_client::REALTIME_UNAVAILABLE_CODE,
            &format!("realtime {state:?}"),
            reason_code.map(|code| json!({ "reasonCode": code })),
        ),
    };
    to_json(&result)
}

fn commit_id(id: String) -> Value {
    json!({ "clientCommitId": id })
}

impl Session {
    fn handle(&mut self, command: Command) -> Result<Value, String> {
        let client = &mut self.client;
        match command {
            Command::Open { .. } => Err("driver.already_open: the client is open".to_owned()),
            Command::Subscribe { id, table, scopes } => {
                client.subscribe(id, table, scope_list(scopes), None)?;
                Ok(Value::Null)
            }
            Command::Unsubscribe { id } => {
                client.unsubscribe(&id);
                Ok(Value::Null)
            }
            Command::Upsert { table, values, base_version } => client
                .mutate(vec![Mutation::Upsert { table, values, base_version }])
                .map(commit_id)
                .map_err(|e| e.to_string()),
            Command::Patch { table, row_id, values, base_version } => {
                client.patch(&table, &row_id, values, base_version).map(commit_id).map_err(|e| e.to_string())
            }
            Command::Delete { table, row_id, base_version } => client
                .mutate(vec![Mutation::Delete { table, row_id, base_version }])
                .map(commit_id)
                .map_err(|e| e.to_string()),
            Command::Sync => sync_result(client.sync(&mut self.transport)),
            Command::SyncIdle { max_rounds } => sync_result(client.sync_until_idle(&mut self.transport, Some(max_rounds))),
            Command::Rows { table } => to_json(&client.read_rows(&table)?),
            Command::Pending => to_json(&client.pending_commit_ids()),
            Command::Conflicts => {
                let mut out = Vec::new();
                for record in client.conflicts() {
                    let mut v = to_json(record)?;
                    v["conflictColumns"] = to_json(&record.conflict_columns)?;
                    out.push(v);
                }
                Ok(Value::Array(out))
            }
            Command::Rejections => to_json(&client.rejections()),
            Command::Outcome { client_commit_id } => to_json(&client.commit_outcome(&client_commit_id)?),
            Command::Resolve { client_commit_id, resolution, replacement_client_commit_id } => {
                let input: ResolveCommitOutcomeInput = serde_json::from_value(json!({
                    "clientCommitId": client_commit_id,
                    "resolution": resolution,
                    "replacementClientCommitId": replacement_client_commit_id,
                }))
                .map_err(|e| format!("driver.bad_command: {e}"))?;
                to_json(&client.resolve_commit_outcome(input)?)
            }
            Command::Subscription { id } => to_json(&client.subscription_state(&id)),
            Command::Connect => client.connect_realtime(&mut self.transport).map(|()| Value::Null),
            Command::Disconnect => {
                client.disconnect_realtime(&mut self.transport);
                Ok(Value::Null)
            }
            Command::Pump => {
                let inbound = self.transport.take_inbound();
                let handled = inbound.len();
                for frame in inbound {
                    match frame {
                        Inbound::Text(text) => {
                            let parsed = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
                            self.received.push(Received::Text(parsed));
                            client.on_realtime_text(&text);
                        }
                        Inbound::Binary(bytes) => {
                            self.received.push(Received::Delta { bytes: bytes.len() });
                            client.on_realtime_binary(&mut self.transport, &bytes);
                        }
                        Inbound::Disconnected(error) => {
                            eprintln!("driver: realtime lost: {}: {}", error.code, error.message);
                            self.received
                                .push(Received::Disconnected { code: error.code.clone(), message: error.message.clone() });
                            client.realtime_lost(&mut self.transport, &error);
                        }
                    }
                }
                Ok(json!({ "handled": handled }))
            }
            Command::Events => Ok(json!({ "received": to_json(&self.received)? })),
            Command::SetPresence { scope_key, doc } => {
                client.set_presence(&mut self.transport, &scope_key, doc.as_ref()).map(|()| Value::Null)
            }
            Command::Presence { scope_key } => to_json(&client.presence(&scope_key)),
            Command::UploadBlob { bytes_hex, media_type, name } => client.upload_blob(&from_hex(&bytes_hex)?, media_type, name),
            Command::FetchBlob { blob_ref } => client
                .fetch_blob_bytes(&mut self.transport, &blob_ref_text(&blob_ref))
                .map(|blob| json!({ "blobId": blob.blob_id, "bytesHex": to_hex(&blob.bytes) }))
                .map_err(|(code, message)| format!("{code}: {message}")),
            Command::Close => {
                self.transport.shutdown();
                Ok(Value::Null)
            }
        }
    }
}

impl Driver for V3 {
    fn handle(&mut self, command: Command) -> Result<Value, String> {
        if let Command::Open { transport, client_id, schema, limits, signed_urls } = command {
            if self.session.is_some() {
                return Err("driver.already_open: the client is open".to_owned());
            }
            let limits = ClientLimits {
                accept: limits.accept,
                limit_commits: limits.limit_commits,
                limit_snapshot_rows: limits.limit_snapshot_rows,
                max_snapshot_pages: limits.max_snapshot_pages,
                ..ClientLimits::default()
            };
            let client = SyncClient::new(client_id, &schema, limits)?;
            let mut transport = HostTransport::from_config(&transport)?;
            transport.set_signed_urls(signed_urls);
            self.session = Some(Session { client, transport, received: Vec::new() });
            return Ok(json!({ "generation": "v3" }));
        }
        let close = matches!(command, Command::Close);
        let session = self.session.as_mut().ok_or("driver.not_open: send open first")?;
        let reply = session.handle(command);
        if close {
            self.session = None;
        }
        reply
    }
}

fn main() {
    protocol::serve(&mut V3::default());
}
