//! §8.7 socket rounds at the byte level (raw WebSocket against a running gateway): a request
//! cut into arbitrary `0x01` chunks is reassembled; a big response comes back as `0x01`
//! chunks of at most 64 KiB that end exactly at `END`; a request-level failure (a round whose
//! clientId is not the connection's) comes back as `RESP_HEADER`, `ERROR`, `END` and stores
//! nothing. Needs `SYNCULAR_TEST_DSN` and the gateway binary (scripts/test builds it).

use ssp2::model::Frame;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{fingerprint, partition_name, Coverage, TASKS};
use syncular_integration_tests::gateway::{grant, raw_ws, setup, sql_commit_task, stored_cursor, Gateway, WAIT};
use syncular_integration_tests::stream_fixture::commit_incompressible_rows;
use syncular_integration_tests::wire::{decode_response, pull_header, request, subscription};
use tungstenite::Message;

type Ws = tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>;

/// Sends `req` as `0x01` chunks of `chunk` bytes, then collects the response chunks until
/// the response's END (the reassembly a client does). Returns the chunk payloads.
fn round(ws: &mut Ws, req: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    for piece in req.chunks(chunk) {
        let mut m = vec![0x01];
        m.extend_from_slice(piece);
        ws.send(Message::Binary(m.into())).unwrap();
    }
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_mut() {
        s.set_read_timeout(Some(WAIT)).unwrap();
    }
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut scanner = syncular_client::MessageStreamScanner::default();
    loop {
        match ws.read().expect("round response") {
            Message::Binary(b) if b.first() == Some(&0x01) => {
                chunks.push(b[1..].to_vec());
                if scanner.push(&b[1..]).expect("well-framed response stream").is_some() {
                    return chunks;
                }
            }
            Message::Binary(b) => panic!("0x{:02x} message during a round", b[0]),
            _ => {}
        }
    }
}

#[test]
fn requests_in_arbitrary_chunks_and_big_responses_in_64k_chunks_ending_at_end() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-chunks");
    grant(&mut conn, &partition, "alice", &["p1"]);
    // Incompressible titles (segments may be compressed, §5.8): ~300 KB of row data.
    commit_incompressible_rows(&mut conn, &partition, 6, 50_000);
    let gw = Gateway::start(&[]);
    let mut ws = raw_ws(&gw, &partition, "alice", "raw-chunks");
    let epoch: String = conn
        .query_one("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&partition])
        .unwrap()
        .get(0);
    let req = request("raw-chunks", Some(&epoch), vec![pull_header(0, 0, 0, 1), subscription("s", TASKS, &[("project_id", &["p1"])], -1, None)]);
    for chunk in [1, 7, req.len()] {
        let chunks = round(&mut ws, &req, chunk);
        assert!(chunks.len() >= 4, "a ~200 KB response travels in several messages: {:?}", chunks.iter().map(Vec::len).collect::<Vec<_>>());
        assert!(chunks.iter().all(|c| !c.is_empty() && c.len() <= 64 * 1024), "{:?}", chunks.iter().map(Vec::len).collect::<Vec<_>>());
        let whole: Vec<u8> = chunks.concat();
        assert_eq!(&whole[whole.len() - 5..], &[0, 0, 0, 0, 0], "the last chunk ends exactly at END");
        let msg = decode_response(&whole).expect("the reassembled stream decodes");
        let segments = msg.frames.iter().filter(|f| matches!(f, Frame::SegmentInline { .. })).count();
        assert!(segments >= 1, "{:?}", msg.frames.len());
    }
}

#[test]
fn a_round_with_another_clientid_fails_in_band_and_stores_nothing() {
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-foreign");
    grant(&mut conn, &partition, "alice", &["p1"]);
    sql_commit_task(&mut conn, &partition, "alice", "seed", "p1", "x");
    let gw = Gateway::start(&[]);
    let mut ws = raw_ws(&gw, &partition, "alice", "socket-client");
    // Round end reloads registrations (touching the registry's last-seen time): compare the
    // log and the data, and check that no client record appeared.
    let before = fingerprint(&mut conn, &partition, Coverage::LogAndData).unwrap();
    let req = request("someone-else", None, vec![pull_header(0, 0, 0, 1), subscription("s", TASKS, &[("project_id", &["p1"])], -1, None)]);
    let whole = round(&mut ws, &req, 5).concat();
    let msg = decode_response(&whole).expect("an SSP2 failure stream");
    assert!(matches!(msg.frames.first(), Some(Frame::RespHeader { .. })), "{:?}", msg.frames);
    match &msg.frames[1] {
        Frame::Error { code, category, recommended_action, .. } => {
            assert_eq!(code, "sync.invalid_client_id");
            assert_eq!(category, "invalid-request");
            assert_eq!(recommended_action, "resetClientId");
        }
        other => panic!("expected ERROR, got {other:?}"),
    }
    assert_eq!(fingerprint(&mut conn, &partition, Coverage::LogAndData).unwrap(), before, "nothing stored");
    assert_eq!(stored_cursor(&mut conn, &partition, "someone-else"), None, "no client record for the foreign clientId");
    assert_eq!(stored_cursor(&mut conn, &partition, "socket-client"), None, "nor for the connection's");
    // The socket is still usable: a correct round succeeds.
    let ok = request("socket-client", None, vec![pull_header(0, 0, 0, 1), subscription("s", TASKS, &[("project_id", &["p1"])], -1, None)]);
    let msg = decode_response(&round(&mut ws, &ok, ok.len()).concat()).unwrap();
    assert!(!msg.frames.iter().any(|f| matches!(f, Frame::Error { .. })));
    assert!(gw.metric("syncular_gateway_errors_total{code=\"sync.invalid_client_id\"") >= 1.0);
}
