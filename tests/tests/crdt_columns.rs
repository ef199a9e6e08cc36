//! CRDT columns (SPEC §5.10, Appendix B.14 (a)/(b)) with two real clients:
//! `syncular-client` 0.15.48 with its `crdt-yjs` feature edits one `yjs-doc`
//! column on both sides while offline, from the same base, then both sync
//! (baseVersion-less pushes of full Yjs states): the server merges, neither
//! push conflicts, and both clients and the server end with the same merged
//! bytes, whose text holds both edits.

use serde_json::{json, Map, Value};
use syncular_client::{ClientLimits, Mutation, SyncClient, SyncOutcome, SyncReport};
use syncular_integration_tests::bump::{Scratch, PARTITION};
use syncular_integration_tests::transport::PgTransport;

/// `cards` v1 plus an appended `doc` crdt column (version 2).
fn ir() -> Value {
    json!({"version": 2, "tables": [{
        "name": "cards",
        "primaryKey": "id",
        "columns": [
            {"name": "id", "type": "string", "nullable": false},
            {"name": "ws", "type": "string", "nullable": false},
            {"name": "title", "type": "string", "nullable": true},
            {"name": "doc", "type": "crdt", "nullable": true, "crdtType": "yjs-doc"}
        ],
        "scopes": [{"pattern": "ws:{ws}"}]
    }]})
}

fn client(db: &Scratch, id: &str) -> (SyncClient, PgTransport) {
    let mut c = SyncClient::new(id.to_owned(), &ir(), ClientLimits::default()).expect("client");
    c.subscribe(format!("{id}-cards"), "cards".into(), vec![("ws".into(), vec!["w1".into()])], None)
        .expect("subscribe");
    let t = PgTransport::new(db.connect(), PARTITION, id, Some(json!({"ws": ["w1"]})));
    (c, t)
}

fn sync(c: &mut SyncClient, t: &mut PgTransport) -> SyncReport {
    match c.sync_until_idle(t, Some(12)) {
        SyncOutcome::Ok(r) => {
            assert!(r.rejected.is_empty() && r.failed.is_empty() && r.conflicts == 0, "{r:?}");
            r
        }
        SyncOutcome::Failed { error_code, message } => panic!("{error_code}: {message}"),
    }
}

/// The `doc` bytes a client holds for `d1`, as lowercase hex.
fn held_doc(c: &SyncClient) -> String {
    let rows = c.read_rows("cards").expect("rows");
    let row = rows.iter().find(|r| r.row_id == "d1").expect("d1 held");
    row.values["doc"]["$bytes"].as_str().expect("doc bytes").to_lowercase()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn two_clients_edit_one_crdt_column_offline_and_converge_on_the_merged_document() {
    let db = Scratch::new("crdt");
    db.connect().execute("SELECT syncular.register_schema($1::jsonb)", &[&ir()]).expect("register v2");
    let (mut a, mut ta) = client(&db, "client-a");
    let (mut b, mut tb) = client(&db, "client-b");

    // A creates the card and types the base text; both clients sync it.
    let mut values = Map::new();
    values.insert("id".into(), json!("d1"));
    values.insert("ws".into(), json!("w1"));
    values.insert("title".into(), json!("notes"));
    values.insert("doc".into(), Value::Null);
    a.mutate(vec![Mutation::Upsert { table: "cards".into(), values, base_version: None }]).expect("A inserts");
    a.crdt_insert_text("cards", "d1", "doc", "text", 0, "base ").expect("A types the base");
    sync(&mut a, &mut ta);
    sync(&mut b, &mut tb);
    assert_eq!(b.crdt_text("cards", "d1", "doc", "text").unwrap(), "base ");

    // Offline, from the same base: A appends "alpha", B appends "beta".
    a.crdt_insert_text("cards", "d1", "doc", "text", 5, "alpha").expect("A edits");
    b.crdt_insert_text("cards", "d1", "doc", "text", 5, "beta").expect("B edits");
    assert_eq!(a.crdt_text("cards", "d1", "doc", "text").unwrap(), "base alpha");
    assert_eq!(b.crdt_text("cards", "d1", "doc", "text").unwrap(), "base beta");

    // Both sync (A first, then B, then A again to receive B's merge): no
    // conflict, no rejection — a crdt column never conflicts on its own.
    let ra = sync(&mut a, &mut ta);
    assert_eq!(ra.applied.len(), 1, "{ra:?}");
    let rb = sync(&mut b, &mut tb);
    assert_eq!(rb.applied.len(), 1, "{rb:?}");
    sync(&mut a, &mut ta);
    assert!(a.pending_commit_ids().is_empty() && b.pending_commit_ids().is_empty());

    // The server stores the merged state: both edits, the base once.
    let mut c = db.connect();
    let row = c
        .query_one("SELECT doc, _sync_version FROM public.cards WHERE _sync_partition = $1 AND id = 'd1'", &[&PARTITION])
        .expect("server row");
    let server: Vec<u8> = row.get(0);
    let version: i64 = row.get(1);
    let text = syncular_client::crdt::text(&server, "text").expect("server doc is a Yjs state");
    assert!(text.starts_with("base "), "{text}");
    assert!(text.contains("alpha") && text.contains("beta"), "{text}");
    assert_eq!(text.len(), "base alphabeta".len(), "{text}");
    assert_eq!(version, 4, "insert, base text, two merges");

    // Both clients hold exactly the server's merged bytes and see the same text.
    assert_eq!(held_doc(&a), hex(&server), "A converged byte for byte");
    assert_eq!(held_doc(&b), hex(&server), "B converged byte for byte");
    assert_eq!(a.crdt_text("cards", "d1", "doc", "text").unwrap(), text);
    assert_eq!(b.crdt_text("cards", "d1", "doc", "text").unwrap(), text);

    // The log carried the merged state, not B's raw update: the last change
    // of d1 is the stored payload.
    let (payload, logged): (Vec<u8>, Vec<u8>) = {
        let r = c
            .query_one(
                "SELECT t._sync_payload, ch.payload FROM public.cards t, syncular.sync_changes ch \
                  WHERE t._sync_partition = $1 AND t.id = 'd1' AND ch.partition = $1 AND ch.row_id = 'd1' \
                  ORDER BY ch.commit_seq DESC LIMIT 1",
                &[&PARTITION],
            )
            .expect("log");
        (r.get(0), r.get(1))
    };
    assert_eq!(payload, logged);

    // A further edit on top converges too (the merged state is a valid base).
    b.crdt_insert_text("cards", "d1", "doc", "text", 0, "> ").expect("B edits again");
    sync(&mut b, &mut tb);
    sync(&mut a, &mut ta);
    let final_text = a.crdt_text("cards", "d1", "doc", "text").unwrap();
    assert_eq!(final_text, format!("> {text}"));
    assert_eq!(held_doc(&a), held_doc(&b));
}
