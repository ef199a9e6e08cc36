//! Adversarial tests of wire version 3 out of process (a review of what landed): malformed v3
//! requests through the gateway's `POST /sync` and a socket round answer `sync.invalid_request`
//! in bytes the 0.49.2 reference decoder accepts, store nothing, and the gateway keeps serving;
//! invented `ROUND_FAILURE` codes cannot grow the gateway's metric label set; two sparse patches
//! racing from separate connections merge (different columns) or conflict (the same column);
//! an unversioned v3 upsert racing a plain SQL `DELETE` of its row does not resurrect it.
//! Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use ssp2_v3::model::{Frame, Message, MsgKind, OpResult, PushStatus};
use syncular_integration_tests::bench_wire::requests::{push_request, task_slots, Upsert};
use syncular_integration_tests::bench_wire::Wire;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::partition_name;
use syncular_integration_tests::gateway::{grant, post_sync, raw_ws, read_until_hello, setup, Gateway, WAIT};
use tungstenite::Message as WsMessage;

const SSP2: &str = "application/vnd.syncular.sync.v2";

fn pull_header() -> Frame {
    Frame::PullHeader { limit_commits: 0, limit_snapshot_rows: 0, max_snapshot_pages: 0, accept: 0b0011 }
}

/// A v3 request of `frames` after `REQ_HEADER` (the reference encoder: everything it writes is
/// well formed).
fn v3(client: &str, epoch: Option<&str>, frames: Vec<Frame>) -> Vec<u8> {
    let mut all = vec![Frame::ReqHeader { client_id: client.into(), schema_version: 1, log_epoch: epoch.map(str::to_owned) }];
    all.extend(frames);
    ssp2_v3::encode_message(&Message { wire_version: 3, msg_kind: MsgKind::Request, frames: all })
}

/// The byte offset of the `ROUND_FAILURE` code's first byte in a request built by [`v3`] whose
/// second frame is one.
fn code_at(req: &[u8]) -> usize {
    let header_len = 5 + u32::from_le_bytes(req[9..13].try_into().unwrap()) as usize;
    assert_eq!(req[8 + header_len], 0x05);
    8 + header_len + 5 + 4
}

fn decode(bytes: &[u8]) -> Message {
    ssp2_v3::decode_message(bytes).unwrap_or_else(|e| panic!("the 0.49.2 decoder refuses our response: {e}"))
}

fn epoch_of(msg: &Message) -> String {
    match &msg.frames[0] {
        Frame::RespHeader { log_epoch: Some(e), .. } => e.clone(),
        other => panic!("no epoch: {other:?}"),
    }
}

fn push_results(msg: &Message) -> Vec<(PushStatus, Vec<OpResult>)> {
    msg.frames
        .iter()
        .filter_map(|f| match f {
            Frame::PushResult { status, results, .. } => Some((*status, results.clone())),
            _ => None,
        })
        .collect()
}

fn upsert<'a>(row_id: &'a str, base: Option<i64>, slots: Vec<Option<Option<String>>>) -> Upsert<'a> {
    Upsert { table: "tasks", row_id, base_version: base, slots }
}

/// `tasks` slots with only the primary key and `column` (`title` = 2, `priority` = 4) present.
fn patch(id: &str, column: usize, value: &str) -> Vec<Option<Option<String>>> {
    let mut slots = vec![None; 5];
    slots[0] = Some(Some(id.to_owned()));
    slots[column] = Some(Some(value.to_owned()));
    slots
}

#[test]
fn breaker_post_sync_refuses_malformed_v3_requests_and_keeps_serving() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("v3-bad-http");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let gw = Gateway::start(&[]);
    let headers = [("x-syncular-actor", "alice"), ("x-syncular-partition", partition.as_str()), ("content-type", SSP2)];
    let post = |body: &[u8]| post_sync(&gw.base_url, &headers, body);
    let (status, _, body) = post(&v3("h1", None, vec![pull_header()]));
    assert_eq!(status, 200);
    let epoch = epoch_of(&decode(&body));
    let (status, _, body) = post(&v3("h1", Some(&epoch), vec![pull_header()]));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));

    let with_report = v3("h1", Some(&epoch), vec![Frame::RoundFailure { code: "transport.failed".into() }, pull_header()]);
    let at = code_at(&with_report);
    let mut bad_code = with_report.clone();
    bad_code[at] = b'T';
    let mut twice = with_report.clone();
    let rf_end = at + "transport.failed".len();
    let rf = with_report[at - 9..rf_end].to_vec();
    twice.splice(rf_end..rf_end, rf);
    let mut cases: Vec<(&str, Vec<u8>, &str)> =
        vec![("bad code", bad_code, "ROUND_FAILURE.code"), ("twice", twice, "duplicate ROUND_FAILURE")];
    for version in [0u16, 4, 65535] {
        let mut b = with_report.clone();
        b[4..6].copy_from_slice(&version.to_le_bytes());
        cases.push(("wire version", b, "wireVersion"));
    }
    // A ROUND_FAILURE alone is not a request (no push, no pull).
    cases.push(("report only", v3("h1", Some(&epoch), vec![Frame::RoundFailure { code: "transport.failed".into() }]), "neither"));
    for (name, bytes, fragment) in cases {
        let (status, _, body) = post(&bytes);
        let v: Value = serde_json::from_slice(&body).unwrap_or_else(|_| panic!("{name}: {status} not JSON"));
        assert_eq!((status, v["code"].as_str()), (400, Some("sync.invalid_request")), "{name}: {v}");
        assert!(v["message"].as_str().unwrap_or("").contains(fragment), "{name}: {v}");
    }
    // A sparse row without its primary key (presence bit 0 clear) rejects its commit only.
    let mut req = push_request(Wire::V3, "h1", &epoch, "nopk", &[upsert("r1", None, task_slots("r1", "p1", "x"))]);
    let tail = req.len() - 5; // END
    let payload_end = tail;
    // The payload is the last field of the only operation: find its presence byte (the
    // sparse row is `presence(1) nulls(1) values…`; the row's id "r1" follows them).
    let needle = [2u8, 0, 0, 0, b'r', b'1'];
    let id_at = req[..payload_end].windows(needle.len()).rposition(|w| w == needle).expect("payload");
    req[id_at - 2] &= !1;
    let (status, _, body) = post(&req);
    assert_eq!(status, 200);
    let results = push_results(&decode(&body));
    assert!(matches!(&results[..], [(PushStatus::Rejected, r)] if matches!(&r[..], [OpResult::Error { code, .. }] if code == "sync.invalid_request")), "{results:?}");
    let stored: i64 = conn
        .query_one("SELECT count(*) FROM public.tasks WHERE _sync_partition = $1", &[&partition])
        .unwrap()
        .get(0);
    assert_eq!(stored, 0, "nothing of a refused request or commit is stored");

    // Invented codes (valid grammar, up to 64 bytes) do not grow the label set.
    let labels_before = round_failure_labels(&gw);
    for i in 0..25 {
        let code = format!("made.up_{i:02}_{}", "x".repeat(64 - 11));
        assert_eq!(code.len(), 64);
        let (status, _, _) = post(&v3("h1", Some(&epoch), vec![Frame::RoundFailure { code }, pull_header()]));
        assert_eq!(status, 200);
    }
    let labels = round_failure_labels(&gw);
    let grown: Vec<&String> = labels.iter().filter(|l| !labels_before.contains(l)).collect();
    assert!(grown.iter().all(|l| *l == "other"), "new labels {grown:?}");
    assert!(gw.metric("syncular_gateway_round_failures_total{code=\"other\"") >= 25.0);

    // Still serving: a valid push applies.
    let (status, _, body) = post(&push_request(Wire::V3, "h1", &epoch, "ok", &[upsert("r1", Some(0), task_slots("r1", "p1", "x"))]));
    assert_eq!(status, 200);
    assert!(matches!(&push_results(&decode(&body))[..], [(PushStatus::Applied, _)]));
}

fn round_failure_labels(gw: &Gateway) -> Vec<String> {
    let (_, text) = gw.get("/metrics");
    text.lines()
        .filter_map(|l| l.strip_prefix("syncular_gateway_round_failures_total{code=\""))
        .filter_map(|l| l.split('"').next().map(str::to_owned))
        .collect()
}

type Ws = tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>;

/// One socket round: the request as one `0x01` message, the response reassembled (`None` when
/// the gateway closed the socket instead).
fn socket_round(ws: &mut Ws, req: &[u8]) -> Option<Vec<u8>> {
    let mut m = vec![0x01];
    m.extend_from_slice(req);
    ws.send(WsMessage::Binary(m.into())).ok()?;
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
        s.set_read_timeout(Some(WAIT)).unwrap();
    }
    let mut out = Vec::new();
    loop {
        match ws.read() {
            Ok(WsMessage::Binary(b)) if b.first() == Some(&0x01) => {
                out.extend_from_slice(&b[1..]);
                if out.len() >= 13 && out[out.len() - 5..] == [0, 0, 0, 0, 0] && ssp2_v3::decode_message(&out).is_ok() {
                    return Some(out);
                }
            }
            Ok(WsMessage::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

#[test]
fn breaker_socket_rounds_refuse_malformed_v3_requests_in_v3() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("v3-bad-ws");
    grant(&mut conn, &partition, "alice", &["p1"]);
    let gw = Gateway::start(&[]);
    let headers = [("x-syncular-actor", "alice"), ("x-syncular-partition", partition.as_str()), ("content-type", SSP2)];
    let (_, _, body) = post_sync(&gw.base_url, &headers, &v3("w1", None, vec![pull_header()]));
    let epoch = epoch_of(&decode(&body));
    let mut ws = raw_ws(&gw, &partition, "alice", "w1");
    read_until_hello(&mut ws);
    let good = v3("w1", Some(&epoch), vec![Frame::RoundFailure { code: "sync.transport_failed".into() }, pull_header()]);
    let mut bad = good.clone();
    let at = code_at(&bad);
    bad[at + 4] = b'-';
    let resp = socket_round(&mut ws, &bad).expect("a request-level failure is answered, not a close");
    let msg = decode(&resp);
    assert_eq!(msg.wire_version, 3);
    assert!(
        msg.frames.iter().any(|f| matches!(f, Frame::Error { code, .. } if code == "sync.invalid_request")),
        "{:?}",
        msg.frames
    );
    // The same socket serves the next round, in v3.
    let resp = socket_round(&mut ws, &good).expect("next round");
    assert_eq!(decode(&resp).wire_version, 3);
    // An envelope the gateway cannot frame (wire version 4) closes this socket only.
    let mut v4 = good.clone();
    v4[4] = 4;
    assert!(socket_round(&mut ws, &v4).is_none(), "an unframable request closes the socket");
    let mut ws = raw_ws(&gw, &partition, "alice", "w1");
    read_until_hello(&mut ws);
    assert_eq!(decode(&socket_round(&mut ws, &good).expect("a new socket serves")).wire_version, 3);
    let reports: i64 = conn
        .query_one("SELECT coalesce(sum(reports), 0)::bigint FROM syncular.round_failures($1)", &[&partition])
        .unwrap()
        .get(0);
    assert_eq!(reports, 2, "the two good rounds reported; the refused ones recorded nothing");
}

/// `syncular.sync` on `conn` (or a transaction) with alice's allowed map.
fn sync_sql(conn: &mut impl postgres::GenericClient, partition: &str, req: &[u8]) -> Message {
    let allowed = json!({"project_id": ["p1"]});
    let row = conn
        .query_one("SELECT syncular.sync($1, 'alice', $2, $3::jsonb)", &[&partition, &req, &allowed])
        .unwrap_or_else(|e| panic!("syncular.sync: {e}"));
    decode(&row.get::<_, Vec<u8>>(0))
}

/// A connection named after `partition` (its `application_name`, so [`wait_for_lock_waiter`]
/// finds it among the parallel tests' sessions).
fn tagged(partition: &str) -> postgres::Client {
    let mut c = connect();
    c.execute("SELECT set_config('application_name', $1, false)", &[&tag(partition)]).unwrap();
    c
}

fn tag(partition: &str) -> String {
    partition.chars().rev().take(40).collect::<String>()
}

fn wait_for_lock_waiter(admin: &mut postgres::Client, partition: &str) {
    let began = Instant::now();
    loop {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = $1",
                &[&tag(partition)],
            )
            .unwrap()
            .get(0);
        if waiting >= 1 {
            return;
        }
        assert!(began.elapsed() < WAIT, "the second writer never waited ({partition})");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn breaker_sparse_patches_racing_from_two_connections_merge_or_conflict_per_column() {
    let mut admin = connect();
    setup(&mut admin);
    let partition = partition_name("v3-race");
    let epoch = epoch_of(&sync_sql(&mut admin, &partition, &v3("a", None, vec![pull_header()])));
    let seed = push_request(Wire::V3, "a", &epoch, "seed", &[upsert("r", Some(0), task_slots("r", "p1", "first"))]);
    assert!(matches!(&push_results(&sync_sql(&mut admin, &partition, &seed))[..], [(PushStatus::Applied, _)]));

    for (round, (col_a, col_b, base)) in [(2usize, 4usize, 1i64), (2, 2, 3)].into_iter().enumerate() {
        let mut a = connect();
        let mut tx = a.transaction().unwrap();
        let req_a = push_request(Wire::V3, "a", &epoch, &format!("a{round}"), &[upsert("r", Some(base), patch("r", col_a, "A"))]);
        assert!(matches!(&push_results(&sync_sql(&mut tx, &partition, &req_a))[..], [(PushStatus::Applied, _)]));
        let p = partition.clone();
        let e = epoch.clone();
        let b = thread::spawn(move || {
            let mut b = tagged(&p);
            let value = if col_b == 4 { "7" } else { "B" };
            let req_b = push_request(Wire::V3, "b", &e, &format!("b{round}"), &[upsert("r", Some(base), patch("r", col_b, value))]);
            push_results(&sync_sql(&mut b, &p, &req_b))
        });
        wait_for_lock_waiter(&mut admin, &partition);
        tx.commit().unwrap();
        let results = b.join().unwrap();
        if col_a != col_b {
            assert!(matches!(&results[..], [(PushStatus::Applied, _)]), "different columns both apply: {results:?}");
        } else {
            match &results[..] {
                [(PushStatus::Rejected, r)] => match &r[..] {
                    [OpResult::Conflict { conflict_columns, server_version, .. }] => {
                        assert_eq!((conflict_columns.as_slice(), *server_version), (&[0b0000_0100u8][..], 4), "title only");
                    }
                    other => panic!("{other:?}"),
                },
                other => panic!("the same column conflicts: {other:?}"),
            }
        }
    }
    let row = admin
        .query_one("SELECT title, priority, _sync_version FROM public.tasks WHERE _sync_partition = $1 AND id = 'r'", &[&partition])
        .unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, Option<i64>>(1), row.get::<_, i64>(2)), ("A".into(), Some(7), 4));
}

#[test]
fn breaker_an_unversioned_v3_upsert_racing_a_plain_sql_delete_does_not_resurrect_the_row() {
    let mut admin = connect();
    setup(&mut admin);
    let partition = partition_name("v3-del-race");
    let epoch = epoch_of(&sync_sql(&mut admin, &partition, &v3("a", None, vec![pull_header()])));
    let seed = push_request(Wire::V3, "a", &epoch, "seed", &[upsert("r", Some(0), task_slots("r", "p1", "first"))]);
    assert!(matches!(&push_results(&sync_sql(&mut admin, &partition, &seed))[..], [(PushStatus::Applied, _)]));

    let mut host = connect();
    host.execute("SELECT set_config('syncular.partition', $1, false)", &[&partition]).unwrap();
    let mut tx = host.transaction().unwrap();
    // This partition's row only (other tests' partitions hold rows with the same id).
    assert_eq!(
        tx.execute("DELETE FROM public.tasks WHERE _sync_partition = current_setting('syncular.partition') AND id = 'r'", &[])
            .unwrap(),
        1
    );
    let p = partition.clone();
    let e = epoch.clone();
    let pusher = thread::spawn(move || {
        let mut c = tagged(&p);
        let req = push_request(Wire::V3, "a", &e, "again", &[upsert("r", None, task_slots("r", "p1", "again"))]);
        push_results(&sync_sql(&mut c, &p, &req))
    });
    wait_for_lock_waiter(&mut admin, &partition);
    tx.commit().unwrap();
    let results = pusher.join().unwrap();
    assert!(
        matches!(&results[..], [(PushStatus::Rejected, r)] if matches!(&r[..], [OpResult::Error { code, .. }] if code == "sync.row_deleted")),
        "{results:?}"
    );
    let n: i64 = admin
        .query_one("SELECT count(*) FROM public.tasks WHERE _sync_partition = $1 AND id = 'r'", &[&partition])
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
}
