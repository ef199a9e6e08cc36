//! CRDT columns (SPEC §5.10, Appendix B.14 (a)/(b)) with two real clients:
//! `syncular-client` 0.15.48 with its `crdt-yjs` feature edits one `yjs-doc`
//! column on both sides while offline, from the same base, then both sync
//! (baseVersion-less pushes of full Yjs states): the server merges, neither
//! push conflicts, and both clients and the server end with the same merged
//! bytes, whose text holds both edits. And (c): a `baseVersion` conflict on
//! another column still fires, its `serverRow` carries the merged crdt state,
//! and the rebased push converges. And (d): offline edits replayed after a
//! lost acknowledgement are answered from the idempotency record (no new
//! commit, no second merge) and still converge. Concurrent merges on one row
//! from two connections lose no update (the push row locks serialize them).

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

/// Values of card `d1` with `title` and `doc` (bytes) for a mutation.
fn card(title: &str, doc: &[u8]) -> Map<String, Value> {
    let mut values = Map::new();
    values.insert("id".into(), json!("d1"));
    values.insert("ws".into(), json!("w1"));
    values.insert("title".into(), json!(title));
    values.insert("doc".into(), json!({"$bytes": hex(doc)}));
    values
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn a_base_version_conflict_on_another_column_carries_the_merged_crdt_state_and_the_rebase_converges() {
    let db = Scratch::new("crdtconflict");
    db.connect().execute("SELECT syncular.register_schema($1::jsonb)", &[&ir()]).expect("register v2");
    let (mut a, mut ta) = client(&db, "client-a");
    let (mut b, mut tb) = client(&db, "client-b");
    let base = syncular_client::crdt::insert_text(&[], "text", 0, "base").unwrap();
    a.mutate(vec![Mutation::Upsert { table: "cards".into(), values: card("t0", &base), base_version: None }]).unwrap();
    sync(&mut a, &mut ta);
    sync(&mut b, &mut tb);
    let v = b.read_rows("cards").unwrap()[0].version;
    assert_eq!(v, 1);

    // Both edit the title (optimistic, baseVersion 1) and the document.
    let doc_a = syncular_client::crdt::insert_text(&base, "text", 4, " A").unwrap();
    let doc_b = syncular_client::crdt::insert_text(&base, "text", 4, " B").unwrap();
    a.mutate(vec![Mutation::Upsert { table: "cards".into(), values: card("from A", &doc_a), base_version: Some(v) }]).unwrap();
    b.mutate(vec![Mutation::Upsert { table: "cards".into(), values: card("from B", &doc_b), base_version: Some(v) }]).unwrap();
    sync(&mut a, &mut ta);
    let report = match b.sync_until_idle(&mut tb, Some(12)) {
        SyncOutcome::Ok(r) => r,
        SyncOutcome::Failed { error_code, message } => panic!("{error_code}: {message}"),
    };
    assert_eq!(report.conflicts, 1, "{report:?}");
    let conflict = b.conflicts().last().expect("B's conflict").clone();
    assert_eq!(conflict.code, "sync.version_conflict");
    assert_eq!(conflict.server_version, 2);
    // serverRow carries the winner's merged crdt state (A's edit merged in), B's edit not.
    let server: Vec<u8> = db
        .connect()
        .query_one("SELECT doc FROM public.cards WHERE _sync_partition = $1 AND id = 'd1'", &[&PARTITION])
        .unwrap()
        .get(0);
    let server_row_doc = conflict.server_row["doc"]["$bytes"].as_str().expect("serverRow doc").to_lowercase();
    assert_eq!(server_row_doc, hex(&server));
    assert_eq!(syncular_client::crdt::text(&server, "text").unwrap(), "base A");
    assert_eq!(conflict.server_row["title"], json!("from A"));

    // B rebases on the serverRow (§6.5): its document edit applied on top, its title kept.
    let rebased = syncular_client::crdt::apply_update(&unhex(&server_row_doc), &doc_b).unwrap();
    b.mutate(vec![Mutation::Upsert {
        table: "cards".into(),
        values: card("from B", &rebased),
        base_version: Some(conflict.server_version),
    }])
    .unwrap();
    sync(&mut b, &mut tb);
    sync(&mut a, &mut ta);
    let text = a.crdt_text("cards", "d1", "doc", "text").unwrap();
    assert!(text.starts_with("base") && text.contains(" A") && text.contains(" B"), "{text}");
    assert_eq!(held_doc(&a), held_doc(&b));
    let rows = a.read_rows("cards").unwrap();
    assert_eq!(rows[0].values["title"], json!("from B"));
    assert_eq!(rows[0].version, 3);
}

/// A transport that loses the response of its next round after the server
/// answered it (a dropped acknowledgement, §7.2).
struct DropNextAck {
    inner: PgTransport,
    drop_next: bool,
}

impl syncular_client::Transport for DropNextAck {
    fn sync(&mut self, request: &[u8]) -> Result<Vec<u8>, syncular_client::TransportError> {
        let response = self.inner.sync(request)?;
        if std::mem::take(&mut self.drop_next) {
            return Err(syncular_client::TransportError::new("transport.network", "the response was lost"));
        }
        Ok(response)
    }

    fn realtime_sync(&mut self, request: &[u8]) -> Result<Vec<u8>, syncular_client::TransportError> {
        self.sync(request)
    }

    fn download_segment(
        &mut self,
        request: &syncular_client::SegmentRequest,
    ) -> Result<Vec<u8>, syncular_client::TransportError> {
        self.inner.download_segment(request)
    }

    fn realtime_connect(&mut self) -> Result<(), syncular_client::TransportError> {
        self.inner.realtime_connect()
    }

    fn realtime_send(&mut self, text: &str) -> Result<(), syncular_client::TransportError> {
        self.inner.realtime_send(text)
    }

    fn realtime_close(&mut self) -> Result<(), syncular_client::TransportError> {
        self.inner.realtime_close()
    }
}

#[test]
fn offline_crdt_edits_replay_after_a_lost_ack_without_applying_twice() {
    let db = Scratch::new("crdtreplay");
    db.connect().execute("SELECT syncular.register_schema($1::jsonb)", &[&ir()]).expect("register v2");
    let (mut a, ta) = client(&db, "client-a");
    let (mut b, mut tb) = client(&db, "client-b");
    let mut ta = DropNextAck { inner: ta, drop_next: false };
    let base = syncular_client::crdt::insert_text(&[], "text", 0, "x").unwrap();
    a.mutate(vec![Mutation::Upsert { table: "cards".into(), values: card("t", &base), base_version: None }]).unwrap();
    assert!(matches!(a.sync_until_idle(&mut ta, Some(12)), SyncOutcome::Ok(_)));

    // Three offline edits, FIFO; the round that pushes them loses its response.
    for s in ["1", "2", "3"] {
        let at = a.crdt_text("cards", "d1", "doc", "text").unwrap().encode_utf16().count() as u32;
        a.crdt_insert_text("cards", "d1", "doc", "text", at, s).unwrap();
    }
    ta.drop_next = true;
    assert!(matches!(a.sync(&mut ta), SyncOutcome::Failed { .. }), "the lost response fails the round");
    assert_eq!(a.pending_commit_ids().len(), 3, "the client still holds its outbox");
    let seq_after_apply: i64 = db
        .connect()
        .query_one("SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1", &[&PARTITION])
        .unwrap()
        .get(0);
    // The retry delivers the same commits again: replayed (cached), not merged again.
    let r = match a.sync_until_idle(&mut ta, Some(12)) {
        SyncOutcome::Ok(r) => r,
        SyncOutcome::Failed { error_code, message } => panic!("{error_code}: {message}"),
    };
    assert!(r.rejected.is_empty() && r.conflicts == 0, "{r:?}");
    assert!(a.pending_commit_ids().is_empty());
    let mut c = db.connect();
    let seq: i64 = c
        .query_one("SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1", &[&PARTITION])
        .unwrap()
        .get(0);
    assert_eq!(seq, seq_after_apply, "the replay appended no commit");
    let server: Vec<u8> = c
        .query_one("SELECT doc FROM public.cards WHERE _sync_partition = $1 AND id = 'd1'", &[&PARTITION])
        .unwrap()
        .get(0);
    assert_eq!(syncular_client::crdt::text(&server, "text").unwrap(), "x123");
    sync(&mut b, &mut tb);
    assert_eq!(held_doc(&a), hex(&server));
    assert_eq!(held_doc(&b), hex(&server));
}

/// `syncular.commit` of an upsert of card `d1` whose `doc` is `doc`; the commit's result.
fn commit_doc(c: &mut postgres::Client, doc: &[u8]) -> Value {
    use base64::Engine as _;
    let ops = json!([{"table": "cards", "op": "upsert", "row": {
        "id": "d1", "ws": "w1", "title": "t", "doc": base64::engine::general_purpose::STANDARD.encode(doc)}}]);
    c.query_one(
        "SELECT syncular.commit($1, 'alice', $2::text::jsonb, allowed_scopes => '{\"ws\": [\"w1\"]}')",
        &[&PARTITION, &ops.to_string()],
    )
    .expect("commit")
    .get(0)
}

#[test]
fn concurrent_crdt_merges_on_one_row_from_two_connections_lose_no_update() {
    use std::sync::{Arc, Barrier};
    let db = Scratch::new("crdtconc");
    db.connect().execute("SELECT syncular.register_schema($1::jsonb)", &[&ir()]).expect("register v2");
    let base = syncular_client::crdt::insert_text(&[], "text", 0, "|").unwrap();
    assert_eq!(commit_doc(&mut db.connect(), &base)["status"], "applied");
    let per_thread = 20;
    let start = Arc::new(Barrier::new(2));
    let workers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let (mut c, start, base) = (db.connect(), Arc::clone(&start), base.clone());
            std::thread::spawn(move || {
                start.wait();
                for i in 0..per_thread {
                    // Each edit is made on the original base only (a client that never pulled).
                    let doc = syncular_client::crdt::insert_text(&base, "text", 1, &format!("<{who}{i}>")).unwrap();
                    assert_eq!(commit_doc(&mut c, &doc)["status"], "applied");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let server: Vec<u8> = db
        .connect()
        .query_one("SELECT doc FROM public.cards WHERE _sync_partition = $1 AND id = 'd1'", &[&PARTITION])
        .unwrap()
        .get(0);
    let text = syncular_client::crdt::text(&server, "text").unwrap();
    for who in ["a", "b"] {
        for i in 0..per_thread {
            let marker = format!("<{who}{i}>");
            assert_eq!(text.matches(&marker).count(), 1, "{marker} in {text}");
        }
    }
    assert_eq!(text.matches('|').count(), 1, "{text}");
}

/// A captured plain SQL `UPDATE` and `syncular.commit` writing one row at
/// once: the commit reads the stored row locked (`FOR NO KEY UPDATE`), so it
/// waits for the plain write and merges into what that write committed —
/// no edit of either side is lost, and every write gets its own version
/// (a commit merging a stale copy lost 6–8 of 15 plain edits before).
#[test]
fn a_plain_sql_update_racing_a_commit_on_one_crdt_row_loses_no_edit() {
    use std::sync::{Arc, Barrier};
    let db = Scratch::new("crdtsqlrace");
    db.connect().execute("SELECT syncular.register_schema($1::jsonb)", &[&ir()]).expect("register v2");
    let base = syncular_client::crdt::insert_text(&[], "text", 0, "|").unwrap();
    assert_eq!(commit_doc(&mut db.connect(), &base)["status"], "applied");
    let per_side = 15;
    let start = Arc::new(Barrier::new(2));
    let sql_side = {
        let (mut c, start, base) = (db.connect(), Arc::clone(&start), base.clone());
        std::thread::spawn(move || {
            c.batch_execute(&format!("SET syncular.partition = '{PARTITION}'")).unwrap();
            start.wait();
            for i in 0..per_side {
                let doc = syncular_client::crdt::insert_text(&base, "text", 1, &format!("<s{i}>")).unwrap();
                let n = c
                    .execute("UPDATE public.cards SET doc = $1, title = $2 WHERE id = 'd1'", &[&doc, &format!("s{i}")])
                    .unwrap_or_else(|e| panic!("{e:?}"));
                assert_eq!(n, 1);
            }
        })
    };
    let commit_side = {
        let (mut c, start, base) = (db.connect(), Arc::clone(&start), base.clone());
        std::thread::spawn(move || {
            start.wait();
            for i in 0..per_side {
                let doc = syncular_client::crdt::insert_text(&base, "text", 1, &format!("<c{i}>")).unwrap();
                assert_eq!(commit_doc(&mut c, &doc)["status"], "applied");
            }
        })
    };
    sql_side.join().unwrap();
    commit_side.join().unwrap();
    let mut c = db.connect();
    let row = c
        .query_one("SELECT doc, _sync_version FROM public.cards WHERE _sync_partition = $1 AND id = 'd1'", &[&PARTITION])
        .unwrap();
    let (doc, version): (Vec<u8>, i64) = (row.get(0), row.get(1));
    let text = syncular_client::crdt::text(&doc, "text").unwrap();
    for side in ["s", "c"] {
        for i in 0..per_side {
            let marker = format!("<{side}{i}>");
            assert_eq!(text.matches(&marker).count(), 1, "{marker} in {text}");
        }
    }
    assert_eq!(version, 1 + 2 * per_side as i64, "one version per write");
    let changes: i64 = c
        .query_one("SELECT count(DISTINCT row_version) FROM syncular.sync_changes WHERE partition = $1 AND row_id = 'd1'", &[&PARTITION])
        .unwrap()
        .get(0);
    assert_eq!(changes, 1 + 2 * per_side as i64, "every logged change has its own version");
}
