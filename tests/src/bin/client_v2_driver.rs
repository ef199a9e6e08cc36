//! `syncular-client-v2-driver`: one published `syncular-client` 0.15.48 (wire versions 1/2, the
//! generation apps already ship) over its own native HTTP/WebSocket transport, driven by the
//! fleet line protocol ([`syncular_integration_tests::fleet::protocol`]) on stdin/stdout.
//! The fleet harness (`syncular_integration_tests::fleet`) spawns it; its v3 twin lives in
//! `tests/client-v3`. 0.15.48 has no sparse patch: its `patch` merges the held row and pushes
//! the whole row, which is what this driver's `patch` runs.

use serde_json::{json, Value};
use syncular_client::native_transport::{HostTransport, Inbound};
use syncular_client::{ClientLimits, Mutation, ResolveCommitOutcomeInput, SyncClient, SyncOutcome};
use syncular_integration_tests::fleet::protocol::{
    self, blob_ref_text, from_hex, scope_list, to_json, Command, Driver, Received, SyncResult,
};

/// An open client and its transport.
struct Session {
    client: SyncClient,
    transport: HostTransport,
    received: Vec<Received>,
}

/// The driver: no session until `open`.
#[derive(Default)]
struct V2 {
    session: Option<Session>,
}

fn sync_result(outcome: SyncOutcome) -> Result<Value, String> {
    let result = match outcome {
        SyncOutcome::Ok(report) => SyncResult::completed("ok", to_json(&report)?),
        SyncOutcome::Failed { error_code, message } => SyncResult::failed("failed", &error_code, &message, None),
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
            Command::Upsert { table, values, base_version } => {
                client.mutate(vec![Mutation::Upsert { table, values, base_version }]).map(commit_id)
            }
            Command::Patch { table, row_id, values, base_version } => {
                client.patch(&table, &row_id, values, base_version).map(commit_id)
            }
            Command::Delete { table, row_id, base_version } => {
                client.mutate(vec![Mutation::Delete { table, row_id, base_version }]).map(commit_id)
            }
            Command::Sync => sync_result(client.sync(&mut self.transport)),
            Command::SyncIdle { max_rounds } => sync_result(client.sync_until_idle(&mut self.transport, Some(max_rounds))),
            Command::Rows { table } => to_json(&client.read_rows(&table)?),
            Command::Pending => to_json(&client.pending_commit_ids()),
            Command::Conflicts => to_json(&client.conflicts()),
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
            Command::FetchBlob { blob_ref } => {
                let blob = client
                    .fetch_blob(&mut self.transport, &blob_ref_text(&blob_ref))
                    .map_err(|(code, message)| format!("{code}: {message}"))?;
                // 0.15.48 answers `{blobId, byteLength, bytes: {"$bytes": hex}, …}`.
                let hex = blob["bytes"]["$bytes"].as_str().ok_or_else(|| format!("driver.bad_reply: no $bytes in {blob}"))?;
                Ok(json!({ "blobId": blob["blobId"], "bytesHex": hex }))
            }
            Command::Close => {
                self.transport.shutdown();
                Ok(Value::Null)
            }
        }
    }
}

impl Driver for V2 {
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
            return Ok(json!({ "generation": "v2" }));
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
    protocol::serve(&mut V2::default());
}
