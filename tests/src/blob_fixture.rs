//! The blob tests' database (SPEC §5.9): schema `notes(id, ws, title, att blob_ref)` scoped by
//! `ws:{ws}`, a resolver granting alice and bob `w1`, anyone else `w2`; shared by
//! `gateway_blobs.rs`, `blob_attacks.rs` and `blob_gateway_attacks.rs`.

use postgres::Client;
use serde_json::{json, Map, Value};
use syncular_client::native_transport::HostTransport;
use syncular_client::{ClientLimits, Mutation, SyncClient, SyncOutcome, SyncReport};
use sha2::{Digest, Sha256};

use crate::{connect_to, dsn, dsn_for_db};

/// The partition every blob test writes.
pub const PARTITION: &str = "blobs";

/// Schema version 1 of the blob tests.
pub fn ir() -> Value {
    json!({"version": 1, "tables": [{
        "name": "notes", "primaryKey": "id",
        "columns": [
            {"name": "id", "type": "string", "nullable": false},
            {"name": "ws", "type": "string", "nullable": false},
            {"name": "title", "type": "string", "nullable": true},
            {"name": "att", "type": "blob_ref", "nullable": true}
        ],
        "scopes": [{"pattern": "ws:{ws}"}]
    }]})
}

/// A database of its own, dropped with the value.
pub struct Db {
    name: String,
    /// Its connection string.
    pub dsn: String,
}

impl Db {
    /// Creates `syncular_blobs_<label>_<pid>` with the extension, the schema and the resolver.
    pub fn new(label: &str) -> Db {
        let name = format!("syncular_blobs_{label}_{}", std::process::id());
        let mut admin = connect_to(&dsn());
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let db = Db { dsn: dsn_for_db(&dsn(), &name), name };
        let mut c = db.connect();
        c.batch_execute("CREATE EXTENSION syncular").unwrap();
        c.execute("SELECT syncular.register_schema($1::text::jsonb)", &[&ir().to_string()]).unwrap();
        c.batch_execute(
            "CREATE FUNCTION public.blob_allowed(partition text, actor_id text) RETURNS jsonb LANGUAGE sql AS $$
               SELECT CASE WHEN actor_id IN ('alice', 'bob') THEN '{\"ws\": [\"w1\"]}'::jsonb ELSE '{\"ws\": [\"w2\"]}'::jsonb END $$;
             SELECT syncular.set_scope_resolver('public.blob_allowed(text,text)');",
        )
        .unwrap();
        db
    }

    /// A new connection (statement_timeout 60 s).
    pub fn connect(&self) -> Client {
        let mut c = connect_to(&self.dsn);
        c.batch_execute("SET statement_timeout = '60s'").unwrap();
        c
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&dsn(), postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// `"sha256:" + hex` of `bytes` (§5.9.1).
pub fn blob_id(bytes: &[u8]) -> String {
    format!("sha256:{}", Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A real `syncular-client` 0.15.48 of `actor` on the blob schema over its native HTTP transport,
/// subscribed to its workspace (`w1` for alice and bob, `w2` for anyone else).
pub struct NotesPeer {
    /// The client.
    pub client: SyncClient,
    /// Its transport (gateway at `base_url`, dev auth headers).
    pub transport: HostTransport,
}

impl NotesPeer {
    /// Client `<actor>-1` of the gateway at `base_url`.
    pub fn new(base_url: &str, actor: &str) -> NotesPeer {
        let transport = HostTransport::from_config(&crate::gateway::transport_config(base_url, actor, PARTITION)).unwrap();
        let mut client = SyncClient::new(format!("{actor}-1"), &ir(), ClientLimits::default()).unwrap();
        let ws = if actor == "alice" || actor == "bob" { "w1" } else { "w2" };
        client.subscribe("notes".into(), "notes".into(), vec![("ws".into(), vec![ws.into()])], None).unwrap();
        NotesPeer { client, transport }
    }

    /// Upserts note `id` of workspace `ws` (title = id) with attachment `att`; the commit id.
    pub fn write(&mut self, id: &str, ws: &str, att: Option<String>) -> String {
        let mut values = Map::new();
        values.insert("id".into(), json!(id));
        values.insert("ws".into(), json!(ws));
        values.insert("title".into(), json!(id));
        values.insert("att".into(), att.map_or(Value::Null, Value::String));
        self.client.mutate(vec![Mutation::Upsert { table: "notes".into(), values, base_version: None }]).unwrap()
    }

    /// Syncs until idle (at most 8 rounds); the report, or the failure as `code: message`.
    pub fn sync(&mut self) -> Result<SyncReport, String> {
        match self.client.sync_until_idle(&mut self.transport, Some(8)) {
            SyncOutcome::Ok(r) => Ok(r),
            SyncOutcome::Failed { error_code, message } => Err(format!("{error_code}: {message}")),
        }
    }
}
