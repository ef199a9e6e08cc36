//! Attacks on blobs (§5.9) kept as regression tests: a BlobRef spelled with a JSON escape is
//! checked and indexed by captured plain SQL writes like the canonical spelling; an upload whose
//! savepoint is released (or whose PL/pgSQL block ends without an exception) cannot commit
//! unverified chunks; no cross-partition download or probe; privileges of blob and lease objects.
//! Same fixture as gateway_blobs.rs.
use postgres::Client;
use serde_json::{json, Value};
use syncular_integration_tests::blob_fixture::{blob_id, Db, PARTITION};


fn count(c: &mut Client, sql: &str) -> i64 { c.query_one(sql, &[]).unwrap().get(0) }

/// A plain SQL write whose BlobRef spells the id with a JSON escape (`\u0061` for `a`) is the
/// same BlobRef to every JSON parser, but the extension's regex does not see it: no
/// existence check, no reference recorded.
fn escaped(id: &str) -> String {
    // escape the first hex letter a-f (or the 's' of sha256) as \u00XX
    let mut out = String::new();
    let mut done = false;
    for ch in id.chars() {
        if !done && ch == 's' { out.push_str("\\u0073"); done = true; } else { out.push(ch); }
    }
    out
}

#[test]
fn captured_sql_escaped_blob_id_skips_existence_check() {
    let db = Db::new("esc1");
    let mut c = db.connect();
    let absent = blob_id(b"never uploaded");
    let att = format!("{{\"blobId\":\"{}\",\"byteLength\":14}}", escaped(&absent));
    // sanity: it is the same value for a JSON parser
    let v: Value = serde_json::from_str(&att).unwrap();
    assert_eq!(v["blobId"], json!(absent));
    c.batch_execute("SET syncular.partition = 'blobs'").unwrap();
    let r = c.execute("INSERT INTO public.notes (id, ws, title, att) VALUES ('n1', 'w1', 't', $1)", &[&att]);
    // Expected: blob.not_found (42704), nothing written — as for the canonical spelling.
    let canonical = format!("{{\"blobId\":\"{absent}\",\"byteLength\":14}}");
    let r2 = c.execute("INSERT INTO public.notes (id, ws, title, att) VALUES ('n2', 'w1', 't', $1)", &[&canonical]);
    assert!(r2.is_err(), "canonical spelling is refused");
    assert!(r.is_err(), "escaped spelling of an absent blob was ACCEPTED (referenced => present broken)");
}

#[test]
fn captured_sql_noncanonical_key_order_skips_existence_check() {
    let db = Db::new("esc2");
    let mut c = db.connect();
    let absent = blob_id(b"never uploaded 2");
    let att = format!("{{\"byteLength\":16,\"blobId\":\"{absent}\"}}");
    c.batch_execute("SET syncular.partition = 'blobs'").unwrap();
    let r = c.execute("INSERT INTO public.notes (id, ws, title, att) VALUES ('n1', 'w1', 't', $1)", &[&att]);
    match r {
        Err(e) => eprintln!("refused: {e:?}"),
        Ok(_) => panic!("non-canonical BlobRef naming an absent blob was ACCEPTED by a captured write"),
    }
}

#[test]
fn captured_sql_escaped_ref_lets_the_sweep_delete_a_referenced_blob() {
    let db = Db::new("esc3");
    let mut c = db.connect();
    let bytes = b"precious attachment";
    let id = blob_id(bytes);
    c.execute("SELECT syncular.blob_put($1, $2, $3)", &[&PARTITION, &id, &&bytes[..]]).unwrap();
    let att = format!("{{\"blobId\":\"{}\",\"byteLength\":{}}}", escaped(&id), bytes.len());
    c.batch_execute("SET syncular.partition = 'blobs'").unwrap();
    c.execute("INSERT INTO public.notes (id, ws, title, att) VALUES ('n1', 'w1', 't', $1)", &[&att]).unwrap();
    let refs = count(&mut c, "SELECT count(*) FROM syncular.sync_blob_refs");
    // alice (w1) can see the row: she should be able to download
    let open = c.query_one("SELECT syncular.blob_open('blobs', 'alice', $1)::text", &[&id]);
    eprintln!("refs = {refs}, alice blob_open = {:?}", open.as_ref().map(|r| r.get::<_, String>(0)).map_err(|e| e.to_string()));
    c.batch_execute("RESET syncular.partition; SET syncular.now_ms = '4102444800000'").unwrap();
    let swept: i64 = c.query_one("SELECT syncular.blob_sweep_orphans()", &[]).unwrap().get(0);
    let rows = count(&mut c, "SELECT count(*) FROM public.notes WHERE att IS NOT NULL");
    let blobs = count(&mut c, "SELECT count(*) FROM syncular.sync_blobs");
    eprintln!("swept = {swept}, rows referencing = {rows}, blobs left = {blobs}");
    assert!(refs == 1 && swept == 0 && blobs == 1, "a referenced blob was swept (refs={refs}, swept={swept}, blobs={blobs})");
}

/// An upload begun in a savepoint that is RELEASEd: the backend forgets the upload (its
/// subtransaction is no longer "active"), so COMMIT is not refused and the unverified chunks
/// are stored without a blob record (nothing ever sweeps them).
#[test]
fn released_savepoint_commits_unverified_unrecorded_chunks() {
    let db = Db::new("sp");
    let mut c = db.connect();
    let id = blob_id(b"claimed content");
    let junk = vec![0x41u8; 200_000];
    c.batch_execute("BEGIN; SAVEPOINT s").unwrap();
    c.query_one("SELECT syncular.blob_upload_begin('blobs', $1, NULL)", &[&id]).unwrap();
    c.query_one("SELECT syncular.blob_upload_append('blobs', $1, $2)", &[&id, &junk]).unwrap();
    c.batch_execute("RELEASE SAVEPOINT s").unwrap();
    let committed = c.batch_execute("COMMIT");
    let chunks = count(&mut c, "SELECT count(*) FROM syncular.sync_blob_chunks");
    let bytes = count(&mut c, "SELECT coalesce(sum(octet_length(bytes)),0)::int8 FROM syncular.sync_blob_chunks");
    let records = count(&mut c, "SELECT count(*) FROM syncular.sync_blobs");
    eprintln!("commit = {committed:?}; chunk rows = {chunks} ({bytes} bytes), blob records = {records}");
    c.batch_execute("SET syncular.now_ms = '4102444800000'").unwrap();
    let swept: i64 = c.query_one("SELECT syncular.blob_sweep_orphans()", &[]).unwrap().get(0);
    let chunks_after = count(&mut c, "SELECT count(*) FROM syncular.sync_blob_chunks");
    eprintln!("sweep deleted {swept}; chunk rows after sweep = {chunks_after}");
    assert!(committed.is_err() || chunks == 0, "unverified chunks without a blob record were committed ({chunks} rows, {bytes} bytes)");
}

/// Same via a function: an upload whose append runs in a PL/pgSQL EXCEPTION block (a subtransaction
/// that is released on success).
#[test]
fn plpgsql_exception_block_commits_unrecorded_chunks() {
    let db = Db::new("spx");
    let mut c = db.connect();
    let id = blob_id(b"claimed content 2");
    let r = c.batch_execute(&format!(
        "DO $$ BEGIN
           BEGIN
             PERFORM syncular.blob_upload_begin('blobs', '{id}', NULL);
             PERFORM syncular.blob_upload_append('blobs', '{id}', '\\x4242424242'::bytea);
           EXCEPTION WHEN others THEN RAISE;
           END;
         END $$"
    ));
    let chunks = count(&mut c, "SELECT count(*) FROM syncular.sync_blob_chunks");
    let records = count(&mut c, "SELECT count(*) FROM syncular.sync_blobs");
    eprintln!("DO = {r:?}; chunk rows = {chunks}, records = {records}");
    assert!(r.is_err() || chunks == 0, "unverified chunks without a record were committed");
}

/// Download from another partition, and probes with malformed ids.
#[test]
fn cross_partition_download_and_probe() {
    let db = Db::new("xp");
    let mut c = db.connect();
    let bytes = b"tenant one secret";
    let id = blob_id(bytes);
    c.execute("SELECT syncular.blob_put('blobs', $1, $2)", &[&id, &&bytes[..]]).unwrap();
    let ops = json!([{"table": "notes", "row": {"id": "n1", "ws": "w1", "att": {"blobId": id, "byteLength": bytes.len()}}}]);
    let out: Value = c.query_one("SELECT syncular.commit('blobs', 'svc', $1::text::jsonb, allowed_scopes => '{\"ws\": [\"*\"]}')", &[&ops.to_string()]).unwrap().get(0);
    eprintln!("commit: {out}");
    // another partition with the same row id and scope, no blob
    let out2: Value = c.query_one("SELECT syncular.commit('other', 'svc', $1::text::jsonb, allowed_scopes => '{\"ws\": [\"*\"]}')", &[&ops.to_string()]).unwrap().get(0);
    eprintln!("commit in other partition: {out2}");
    assert_ne!(out2["status"], json!("applied"), "a push in partition 'other' referenced partition 'blobs' blob");
    let r = c.query_one("SELECT syncular.blob_open('other', 'alice', $1)::text", &[&id]);
    assert!(r.is_err());
    let grant: Value = c.query_one("SELECT syncular.blob_upload_grant('other', $1, 17)", &[&id]).unwrap().get(0);
    assert_eq!(grant["present"], json!(false), "grant leaks presence across partitions");
}

/// Which syncular functions / tables can a plain role or syncular_gateway use directly?
#[test]
fn privileges_of_blob_and_lease_objects() {
    let db = Db::new("priv");
    let mut c = db.connect();
    c.batch_execute("DO $$ BEGIN CREATE ROLE brk_nobody; EXCEPTION WHEN duplicate_object THEN NULL; END $$").unwrap();
    for role in ["brk_nobody", "syncular_gateway"] {
        let rows = c.query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'syncular'::regnamespace
               AND has_function_privilege($1, p.oid, 'EXECUTE') AND (p.proname LIKE '%blob%' OR p.proname LIKE '%lease%') ORDER BY 1",
            &[&role],
        ).unwrap();
        let f: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let t = c.query(
            "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'syncular'::regnamespace AND c.relkind = 'r'
               AND (c.relname LIKE '%blob%' OR c.relname LIKE '%lease%')
               AND (has_table_privilege($1, c.oid, 'SELECT') OR has_table_privilege($1, c.oid, 'INSERT,UPDATE,DELETE'))", &[&role]).unwrap();
        let t: Vec<String> = t.iter().map(|r| r.get(0)).collect();
        eprintln!("{role}: functions {f:?}; tables {t:?}");
    }
}
