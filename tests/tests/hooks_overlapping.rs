//! Every host hook of issue 13 at once, under overlapping deliveries: the
//! same commits (same client id and commit ids) are delivered on four
//! connections at the same moment. Each commit upserts a row whose `crdt`
//! column is merged (§5.10) and whose `blob_ref` column names an uploaded
//! blob (§5.9), through a write validator (§6.7), the whole-commit validator
//! (§6.8) and the reaction planner (§6.9). Per idempotency key: one
//! delivery applies, the others replay its outcome; every hook ran once
//! (sequences count the calls, rolled back or not); one commit, one
//! reaction, one blob reference; the merged document holds its edit once.

use std::sync::{Arc, Barrier};
use std::thread;

use base64::Engine as _;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use syncular_integration_tests::bump::{Scratch, PARTITION};

const KEYS: usize = 15;
const CONNECTIONS: usize = 4;

fn ir() -> Value {
    json!({"version": 2, "tables": [{
        "name": "cards", "primaryKey": "id",
        "columns": [
            {"name": "id", "type": "string", "nullable": false},
            {"name": "ws", "type": "string", "nullable": false},
            {"name": "title", "type": "string", "nullable": true},
            {"name": "doc", "type": "crdt", "nullable": true, "crdtType": "yjs-doc"},
            {"name": "att", "type": "blob_ref", "nullable": true}
        ],
        "scopes": ["ws:{ws}"]
    }]})
}

const BLOB: &[u8] = b"an attachment shared by every card";

fn blob_id() -> String {
    format!("sha256:{}", Sha256::digest(BLOB).iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// One upsert of card `k` (its own edit in `doc`, the shared blob in `att`)
/// under the fixed client id and commit id `commit-k`.
fn deliver(c: &mut postgres::Client, k: usize) -> Value {
    let doc = syncular_client::crdt::insert_text(&[], "text", 0, &format!("<edit-{k}>")).unwrap();
    let ops = json!([{"table": "cards", "op": "upsert", "row": {
        "id": format!("k{k}"), "ws": "w1", "title": format!("card {k}"),
        "doc": base64::engine::general_purpose::STANDARD.encode(doc),
        "att": {"blobId": blob_id(), "byteLength": BLOB.len()}}}]);
    c.query_one(
        "SELECT syncular.commit($1, 'alice', $2::text::jsonb, client_id => 'dup-client', client_commit_id => $3, \
                                allowed_scopes => '{\"ws\": [\"*\"]}')",
        &[&PARTITION, &ops.to_string(), &format!("commit-{k}")],
    )
    .unwrap_or_else(|e| panic!("{e:?}"))
    .get(0)
}

/// Calls of the hook counted by `sequence` so far.
fn calls(c: &mut postgres::Client, sequence: &str) -> i64 {
    let r = c.query_one(&format!("SELECT last_value, is_called FROM public.{sequence}"), &[]).unwrap();
    if r.get::<_, bool>(1) {
        r.get(0)
    } else {
        0
    }
}

fn count(c: &mut postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[&PARTITION]).unwrap().get(0)
}

#[test]
fn overlapping_deliveries_run_every_hook_once_per_idempotency_key() {
    let db = Scratch::new("hookdup");
    let mut admin = db.connect();
    admin.execute("SELECT syncular.register_schema($1::jsonb)", &[&ir()]).unwrap();
    admin
        .batch_execute(
            "CREATE SEQUENCE public.write_calls; CREATE SEQUENCE public.commit_calls; CREATE SEQUENCE public.plan_calls; \
             CREATE FUNCTION public.count_writes(w jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$ BEGIN \
               PERFORM nextval('public.write_calls'); RETURN NULL; END $$; \
             CREATE FUNCTION public.count_commits(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$ BEGIN \
               PERFORM nextval('public.commit_calls'); RETURN NULL; END $$; \
             CREATE FUNCTION public.plan_one(c jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$ BEGIN \
               PERFORM nextval('public.plan_calls'); \
               RETURN jsonb_build_array(jsonb_build_object('key', 'notify', 'type', 'card.created', 'version', 1, \
                        'payload', jsonb_build_object('rowId', c->'operations'->0->>'rowId'))); END $$; \
             SELECT syncular.set_write_validator('cards', 'public.count_writes(jsonb)'); \
             SELECT syncular.set_commit_validator('public.count_commits(jsonb)'); \
             SELECT syncular.set_reaction_planner('public.plan_one(jsonb)');",
        )
        .unwrap();
    let hex_blob: String = BLOB.iter().map(|b| format!("{b:02x}")).collect();
    admin
        .execute(
            &format!("SELECT syncular.blob_put($1, $2, '\\x{hex_blob}'::bytea)"),
            &[&PARTITION, &blob_id()],
        )
        .unwrap_or_else(|e| panic!("{e:?}"));

    let start = Arc::new(Barrier::new(CONNECTIONS));
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (mut c, start) = (db.connect(), Arc::clone(&start));
            thread::spawn(move || -> Vec<String> {
                start.wait();
                (0..KEYS).map(|k| deliver(&mut c, k)["status"].as_str().unwrap_or("?").to_owned()).collect()
            })
        })
        .collect();
    let statuses: Vec<Vec<String>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    for k in 0..KEYS {
        let of_key: Vec<&str> = statuses.iter().map(|s| s[k].as_str()).collect();
        assert_eq!(of_key.iter().filter(|s| **s == "applied").count(), 1, "key {k}: {of_key:?}");
        assert!(of_key.iter().all(|s| *s == "applied" || *s == "cached"), "key {k}: {of_key:?}");
    }

    let keys = KEYS as i64;
    assert_eq!(calls(&mut admin, "write_calls"), keys, "one write-validator call per key");
    assert_eq!(calls(&mut admin, "commit_calls"), keys, "one commit-validator call per key");
    assert_eq!(calls(&mut admin, "plan_calls"), keys, "one planner call per key");
    assert_eq!(count(&mut admin, "SELECT count(*) FROM syncular.sync_commits WHERE partition = $1"), keys);
    assert_eq!(count(&mut admin, "SELECT count(*) FROM syncular.sync_reactions WHERE partition = $1"), keys);
    assert_eq!(
        count(&mut admin, "SELECT count(DISTINCT source_commit_seq) FROM syncular.sync_reactions WHERE partition = $1"),
        keys,
        "each reaction carries its own commit's seq"
    );
    assert_eq!(count(&mut admin, "SELECT count(*) FROM syncular.sync_blob_refs WHERE partition = $1"), keys);
    for k in 0..KEYS {
        let doc: Vec<u8> = admin
            .query_one("SELECT doc FROM public.cards WHERE _sync_partition = $1 AND id = $2", &[&PARTITION, &format!("k{k}")])
            .unwrap()
            .get(0);
        assert_eq!(syncular_client::crdt::text(&doc, "text").unwrap(), format!("<edit-{k}>"), "card k{k}");
    }
}
