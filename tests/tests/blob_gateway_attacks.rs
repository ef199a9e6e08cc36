//! Attacks on the gateway's blob routes (§5.9) kept as regression tests: slow readers of a large
//! blob hold no pooled connection or open transaction (another request is served, a schema bump is
//! not blocked), slow uploaders hold at most a quarter of the pool; a BlobRef pushed with a JSON escape keeps its reference through a plain SQL update.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use postgres::Client;
use serde_json::{json, Value};
use serde_json::Map;
use syncular_client::native_transport::HostTransport;
use syncular_client::{ClientLimits, Mutation, SyncClient, SyncOutcome};
use syncular_integration_tests::gateway::{http_agent, transport_config, Gateway};
use syncular_integration_tests::blob_fixture::{blob_id, ir, Db, NotesPeer, PARTITION};


fn store_and_reference(c: &mut Client, row: &str, bytes: &[u8]) -> String {
    let id = blob_id(bytes);
    c.execute("SELECT syncular.blob_put($1, $2, $3)", &[&PARTITION, &id, &bytes]).unwrap();
    let ops = json!([{"table": "notes", "row": {"id": row, "ws": "w1", "att": {"blobId": id, "byteLength": bytes.len()}}}]);
    let out: Value = c
        .query_one("SELECT syncular.commit($1, 'svc', $2::text::jsonb, allowed_scopes => '{\"ws\": [\"*\"]}')", &[&PARTITION, &ops.to_string()])
        .unwrap()
        .get(0);
    assert_eq!(out["status"], json!("applied"), "{out}");
    id
}

/// Two GETs whose bodies their clients read a trickle at a time, with a pool of two connections
/// and a 3 s request timeout: each chunk is read with its own short checkout, so another tenant's
/// small download is served, no transaction stays open, and a schema bump is not blocked (a
/// download that held one connection and one REPEATABLE READ transaction for its whole body let
/// two slow readers starve every other request).
#[test]
fn slow_blob_readers_hold_no_pooled_connection() {
    let db = Db::new("slow");
    let mut c = db.connect();
    let big: Vec<u8> = (0..(24 * 1024 * 1024u32)).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let big_id = store_and_reference(&mut c, "big", &big);
    let small_id = store_and_reference(&mut c, "small", b"small one");
    let gw = Gateway::start_with_dsn(
        &format!("{} options='-c syncular.blob_max_bytes={}'", db.dsn, 64 * 1024 * 1024),
        &["--auth", "dev", "--pool-size", "2", "--request-timeout-secs", "3"],
    );
    let addr = gw.base_url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let mut slow = Vec::new();
    for _ in 0..2 {
        let s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut s2 = s.try_clone().unwrap();
        write!(s2, "GET /blobs/{big_id} HTTP/1.1\r\nHost: x\r\nx-syncular-actor: bob\r\nx-syncular-partition: {PARTITION}\r\n\r\n").unwrap();
        let mut buf = [0u8; 256];
        let n = (&s).read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
        slow.push(s);
    }
    // Keep reading a little every second for 12 s (well past the 3 s request timeout).
    let start = Instant::now();
    let handle = std::thread::spawn({
        let slow: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
        move || {
            while start.elapsed() < Duration::from_secs(14) {
                for s in &slow {
                    let mut b = [0u8; 16];
                    let _ = (&*s).read(&mut b);
                }
                std::thread::sleep(Duration::from_millis(1000));
            }
        }
    });
    std::thread::sleep(Duration::from_secs(6));
    // Another tenant's innocent request.
    let t = Instant::now();
    let resp = http_agent()
        .get(format!("{}/blobs/{small_id}", gw.base_url))
        .header("x-syncular-actor", "alice")
        .header("x-syncular-partition", PARTITION)
        .call();
    let status = match &resp { Ok(r) => r.status().as_u16(), Err(e) => { eprintln!("err {e}"); 0 } };
    eprintln!("innocent GET after {:?}: status {status}", t.elapsed());
    let mut admin = db.connect();
    let held: i64 = admin
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction' AND xact_start < now() - interval '5 seconds'", &[])
        .unwrap()
        .get(0);
    eprintln!("idle-in-transaction connections older than 5 s: {held}");
    // A schema bump (add a nullable column) while the slow readers hold their transactions.
    let mut bumped_ir = ir();
    bumped_ir["version"] = json!(2);
    bumped_ir["tables"][0]["columns"].as_array_mut().unwrap().push(json!({"name": "extra", "type": "string", "nullable": true}));
    admin.batch_execute("SET lock_timeout = '3s'").unwrap();
    let t = Instant::now();
    let bump = admin.execute("SELECT syncular.register_schema($1::text::jsonb)", &[&bumped_ir.to_string()]);
    eprintln!("schema bump during slow downloads: {:?} after {:?}", bump.as_ref().map_err(|e| e.as_db_error().map(|d| d.message().to_owned())), t.elapsed());
    handle.join().unwrap();
    assert_eq!(status, 200, "an innocent request was starved by two slow blob readers (pool exhausted; {held} transactions held open)");
    assert_eq!(held, 0, "slow blob readers hold no transaction open");
    assert!(bump.is_ok(), "a schema bump is not blocked by slow blob readers: {bump:?}");
}

/// Blob uploads whose bodies stall, with a pool of four connections: four small ones (a declared
/// 100 bytes, 10 sent) hold no connection (a body of at most 1 MiB is read first), four large ones
/// trickling a byte every 300 ms hold at most one (a quarter of the pool), so a client's sync round
/// and a whole small upload are served meanwhile. Once the holder stops sending, it fails after the 10 s stall limit with
/// nothing stored. (Each upload took a connection and opened its transaction when its headers
/// arrived: eight stalled uploads starved every sync round until the request timeout.)
#[test]
fn slow_blob_uploaders_hold_no_pooled_connection() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let db = Db::new("slowup");
    let gw = Gateway::start_with_dsn(
        &format!("{} options='-c syncular.blob_max_bytes={}'", db.dsn, 64 * 1024 * 1024),
        &["--auth", "dev", "--pool-size", "4", "--request-timeout-secs", "120"],
    );
    let addr = gw.base_url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let put = |declared: usize, sent: &[u8]| {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "PUT /blobs/{} HTTP/1.1\r\nHost: x\r\nx-syncular-actor: alice\r\nx-syncular-partition: {PARTITION}\r\ncontent-length: {declared}\r\n\r\n",
            blob_id(&vec![1u8; declared])
        )
        .unwrap();
        s.write_all(sent).unwrap();
        s
    };
    let small: Vec<TcpStream> = (0..4).map(|_| put(100, &[1u8; 10])).collect();
    let large: Vec<TcpStream> = (0..4).map(|_| put(4 << 20, &vec![1u8; 2 << 20])).collect();
    let trickle = Arc::new(AtomicBool::new(true));
    let handle = std::thread::spawn({
        let (large, trickle) = (large.iter().map(|s| s.try_clone().unwrap()).collect::<Vec<_>>(), trickle.clone());
        move || {
            while trickle.load(Ordering::SeqCst) {
                for s in &large {
                    let _ = (&*s).write_all(&[1u8]);
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    let mut admin = db.connect();
    let in_tx = |admin: &mut Client| -> i64 {
        admin
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'", &[])
            .unwrap()
            .get(0)
    };
    let held = in_tx(&mut admin);
    // A real client's sync round (push + pull), bounded so a starved one fails the test.
    let (tx, rx) = std::sync::mpsc::channel();
    let base = gw.base_url.clone();
    std::thread::spawn(move || {
        let mut bob = NotesPeer::new(&base, "bob");
        bob.write("n1", "w1", None);
        let _ = tx.send(bob.sync());
    });
    let round = rx.recv_timeout(Duration::from_secs(20));
    assert!(held <= 1, "stalled uploads hold {held} pool connections in open transactions (at most one upload slot of a pool of 4)");
    assert!(matches!(round, Ok(Ok(_))), "a sync round is served while uploads stall: {round:?}");
    // A whole small upload needs no upload slot: stored while the slot's holder trickles.
    let mut small_one = put(3, &[1u8; 3]);
    let mut head = [0u8; 512];
    let n = small_one.read(&mut head).unwrap_or(0);
    let answer = String::from_utf8_lossy(&head[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "a small upload waited for the slot a slow one holds: {answer:?}");
    // The holder stops sending: the stall limit fails it (400), its transaction rolls back.
    trickle.store(false, Ordering::SeqCst);
    handle.join().unwrap();
    let (answers, answer) = std::sync::mpsc::channel();
    for s in &large {
        let (mut s, answers) = (s.try_clone().unwrap(), answers.clone());
        std::thread::spawn(move || {
            let mut head = [0u8; 512];
            let n = s.read(&mut head).unwrap_or(0);
            let _ = answers.send(String::from_utf8_lossy(&head[..n]).into_owned());
        });
    }
    let first = answer.recv_timeout(Duration::from_secs(30)).expect("the holder's upload answers once its body stalls");
    assert!(first.starts_with("HTTP/1.1 400") && first.contains("stalled"), "{first}");
    let stored: i64 = admin.query_one("SELECT count(*) FROM syncular.sync_blobs", &[]).unwrap().get(0);
    assert_eq!(stored, 1, "the small whole upload is stored, no stalled upload is");
    drop((small, large));
}

/// A client pushes a BlobRef whose `blobId` uses a JSON escape (valid JSON, the same id to every
/// parser; the push path checks and indexes it correctly). A later plain SQL UPDATE of another
/// column of that row re-derives the references with the extension's regex, which does not see
/// the escaped id: the reference is dropped, the sweep deletes the blob the row still names,
/// and the row's readers get 403/404.
#[test]
fn escaped_blob_ref_loses_its_reference_on_a_sql_update() {
    let db = Db::new("escpush");
    let mut c = db.connect();
    let bytes = b"client attachment";
    let id = blob_id(bytes);
    c.execute("SELECT syncular.blob_put($1, $2, $3)", &[&PARTITION, &id, &&bytes[..]]).unwrap();
    let gw = Gateway::start_with_dsn(&db.dsn, &["--auth", "dev"]);
    let transport_cfg = transport_config(&gw.base_url, "alice", PARTITION);
    let mut transport = HostTransport::from_config(&transport_cfg).unwrap();
    let mut client = SyncClient::new("alice-1".to_owned(), &ir(), ClientLimits::default()).unwrap();
    client.subscribe("notes".into(), "notes".into(), vec![("ws".into(), vec!["w1".into()])], None).unwrap();
    let escaped = format!("{{\"blobId\":\"\\u0073{}\",\"byteLength\":{}}}", &id[1..], bytes.len());
    eprintln!("att = {escaped}");
    let mut values = Map::new();
    values.insert("id".into(), json!("n1"));
    values.insert("ws".into(), json!("w1"));
    values.insert("title".into(), json!("t"));
    values.insert("att".into(), Value::String(escaped));
    client.mutate(vec![Mutation::Upsert { table: "notes".into(), values, base_version: None }]).unwrap();
    match client.sync_until_idle(&mut transport, Some(6)) {
        SyncOutcome::Ok(r) => eprintln!("sync ok: {r:?}"),
        SyncOutcome::Failed { error_code, message } => panic!("{error_code}: {message}"),
    }
    let count = |c: &mut Client, sql: &str| -> i64 { c.query_one(sql, &[]).unwrap().get(0) };
    let rows = count(&mut c, "SELECT count(*) FROM public.notes");
    let refs_after_push = count(&mut c, "SELECT count(*) FROM syncular.sync_blob_refs");
    c.batch_execute("SET syncular.partition = 'blobs'; UPDATE public.notes SET title = 'edited by a job' WHERE _sync_partition = 'blobs' AND id = 'n1'; RESET syncular.partition").unwrap();
    let refs_after_update = count(&mut c, "SELECT count(*) FROM syncular.sync_blob_refs");
    c.batch_execute("SET syncular.now_ms = '4102444800000'").unwrap();
    let swept: i64 = c.query_one("SELECT syncular.blob_sweep_orphans()", &[]).unwrap().get(0);
    let status = match http_agent().get(format!("{}/blobs/{id}", gw.base_url)).header("x-syncular-actor", "alice").header("x-syncular-partition", PARTITION).call() {
        Ok(r) => r.status().as_u16(),
        Err(ureq::Error::StatusCode(s)) => s,
        Err(e) => panic!("{e}"),
    };
    eprintln!("rows={rows} refs after push={refs_after_push} after SQL update={refs_after_update} swept={swept} alice GET={status}");
    assert!(refs_after_update == 1 && swept == 0 && status == 200, "reference lost: refs {refs_after_push}->{refs_after_update}, swept {swept}, GET {status}");
}
