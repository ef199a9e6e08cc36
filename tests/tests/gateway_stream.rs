//! `POST /sync` streams the pull half (SPEC §1.4, docs/src/sql/sync.md "Streaming rounds"): a response of
//! tens of MB reaches the client while the backend is still producing it (the gateway holds a
//! chunk or two, never the response); an error after the first bytes ends the body with an
//! in-band `ERROR` frame and `END` and nothing of the pull is committed; the real client
//! bootstraps through the streamed path; a round with pushes is one transaction while its
//! response is small, and a push sent with a large pull is applied once while the pull streams
//! (the one-transaction attempt rolled back). Needs `SYNCULAR_TEST_DSN` and the gateway binary.

use std::io::Read;

use ssp2::model::PushStatus;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::partition_name;
use syncular_integration_tests::stream_fixture::{big_gateway, big_pull, commit_big_rows, open_body, ROWS, ROW_BYTES, SUBS};
use syncular_integration_tests::gateway::{grant, setup, wait_until, Peer};
use syncular_integration_tests::wire::{
    commit, decode_response, delivered, pull_header, push_outcomes, request, subscription, upsert, Task,
};

/// The tests find "the" streaming backend in pg_stat_activity: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `(pid, state)` of the backend running `syncular.pull_stream` for `partition`, if any.
fn stream_backend(conn: &mut postgres::Client) -> Option<(i32, String)> {
    conn.query_opt(
        "SELECT pid, state FROM pg_stat_activity WHERE query LIKE '%syncular.pull_stream(%' AND pid <> pg_backend_pid()",
        &[],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

#[test]
fn a_large_response_streams_while_the_backend_produces_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-stream");
    grant(&mut conn, &partition, "alice", &["p1"]);
    commit_big_rows(&mut conn, &partition);
    let gw = big_gateway(&[]);

    let (mut reader, mut body) = open_body(&gw, &partition, &big_pull(&mut conn, &partition, "big"));
    // The client holds the first bytes of a ~50 MB response while the backend is still
    // running the statement that produces it: neither side built it whole first (the socket
    // buffers and the gateway's two chunks hold far less than the response).
    let (_, state) = stream_backend(&mut conn).expect("the pull_stream statement is still running");
    assert_eq!(state, "active");
    assert!(stored_subscriptions(&mut conn, &partition, "big").is_none(), "the pull is not committed yet");
    reader.read_to_end(&mut body).expect("the rest of the body");
    assert!(body.len() > SUBS * ROWS * ROW_BYTES, "{} bytes", body.len());
    let msg = decode_response(&body).expect("a well-formed response");
    let got = delivered(&msg).expect("rows decode");
    assert_eq!(got.rows.len(), SUBS * ROWS, "every section delivered every row");
    assert!(msg.frames.iter().all(|f| !matches!(f, ssp2::Frame::Error { .. })));
    // The pull committed after the last byte: the client record lists the ten subscriptions.
    wait_until("the streamed pull committed", || stored_subscriptions(&mut conn, &partition, "big") == Some(SUBS));
    assert!(stream_backend(&mut conn).is_none());

    // The real client bootstraps through the streamed path.
    let mut peer = Peer::new(&gw.base_url, &partition, "alice", "alice-real");
    peer.subscribe("mine", &["p1"]);
    peer.sync_idle(8).expect("the real client syncs over the streamed /sync");
    assert_eq!(peer.task_ids().len(), ROWS);
}

#[test]
fn an_error_after_the_first_bytes_ends_the_body_with_error_and_end_and_commits_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-stream-err");
    grant(&mut conn, &partition, "alice", &["p1"]);
    commit_big_rows(&mut conn, &partition);
    let gw = big_gateway(&[]);

    let (mut reader, mut body) = open_body(&gw, &partition, &big_pull(&mut conn, &partition, "err"));
    let (pid, state) = stream_backend(&mut conn).expect("the pull_stream statement is running");
    assert_eq!(state, "active");
    // The backend dies mid-stream.
    let killed: bool = conn.query_one("SELECT pg_terminate_backend($1)", &[&pid]).unwrap().get(0);
    assert!(killed);
    reader.read_to_end(&mut body).expect("the body ends cleanly");
    // Complete frames, then ERROR, then END: the reference codec decodes it.
    let msg = decode_response(&body).expect("a well-formed response ending with ERROR + END");
    let last = msg.frames.last().expect("frames");
    match last {
        ssp2::Frame::Error { code, retryable, .. } => {
            // syncular.unavailable, answered as the code syncular-client 0.49 retries.
            assert_eq!(code, "sync.internal_error", "{last:?}");
            assert!(*retryable);
        }
        other => panic!("the body must end with ERROR (+END), got {other:?}"),
    }
    assert!(body.ends_with(&[0, 0, 0, 0, 0]), "END closes the body");
    let rows = delivered(&msg).expect("rows decode").rows.len();
    assert!(rows < SUBS * ROWS, "the stream was cut ({rows} rows)");
    // Nothing of the pull was committed: no client record for it.
    assert_eq!(stored_subscriptions(&mut conn, &partition, "err"), None);
    // The gateway keeps serving.
    let (mut reader, mut body) = open_body(&gw, &partition, &big_pull(&mut conn, &partition, "err"));
    reader.read_to_end(&mut body).unwrap();
    assert_eq!(delivered(&decode_response(&body).unwrap()).unwrap().rows.len(), SUBS * ROWS);
}

#[test]
fn a_push_with_a_large_pull_is_applied_once_and_the_pull_streams() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut conn = connect();
    setup(&mut conn);
    let partition = partition_name("gw-stream-push");
    grant(&mut conn, &partition, "alice", &["p1"]);
    commit_big_rows(&mut conn, &partition);
    let gw = big_gateway(&[]);
    let epoch: String = conn
        .query_one("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&partition])
        .unwrap()
        .get(0);
    let commits = |conn: &mut postgres::Client| -> i64 {
        conn.query_one("SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &[&partition]).unwrap().get(0)
    };
    let before = commits(&mut conn);
    let head: i64 = conn
        .query_one("SELECT coalesce(max(commit_seq), 0) FROM syncular.sync_commits WHERE partition = $1", &[&partition])
        .unwrap()
        .get(0);

    // Small: one push and an incremental pull of nothing new — one transaction, answered whole.
    let small = request(
        "pusher",
        Some(&epoch),
        vec![
            commit("small-1", vec![upsert(&Task::new("small-1", "p1", "small"), None)]),
            pull_header(100, 100, 1, 1),
            subscription("s", syncular_integration_tests::fixtures::TASKS, &[("project_id", &["p1"])], head, None),
        ],
    );
    let resp = syncular_integration_tests::gateway::http_agent()
        .post(format!("{}/sync", gw.base_url))
        .header("x-syncular-actor", "alice")
        .header("x-syncular-partition", &partition)
        .header("content-type", "application/vnd.syncular.sync.v2")
        .header("accept-encoding", "identity")
        .send(&small[..])
        .expect("POST /sync");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().get("content-length").is_some(), "a small round is answered whole");
    let body = resp.into_body().read_to_vec().expect("the body");
    let outcomes = push_outcomes(&decode_response(&body).unwrap());
    assert_eq!(outcomes.iter().map(|o| o.status).collect::<Vec<_>>(), vec![PushStatus::Applied]);
    assert_eq!(commits(&mut conn), before + 1);

    // Large: a push with ten fresh bootstraps (~50 MB) — the push is applied once, its result
    // leads the streamed body, every row arrives.
    let mut frames = vec![commit("big-push", vec![upsert(&Task::new("pushed", "p1", "with a big pull"), None)])];
    frames.push(pull_header(0, 50_000, 50, 1));
    for i in 0..SUBS {
        frames.push(subscription(&format!("s{i}"), syncular_integration_tests::fixtures::TASKS, &[("project_id", &["p1"])], -1, None));
    }
    let (mut reader, mut body) = open_body(&gw, &partition, &request("pusher", Some(&epoch), frames));
    reader.read_to_end(&mut body).expect("the rest of the body");
    let msg = decode_response(&body).expect("a well-formed response");
    let outcomes = push_outcomes(&msg);
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].status, PushStatus::Applied);
    assert_eq!(commits(&mut conn), before + 2, "the rolled-back attempt left nothing; the push applied once");
    let pushed: i64 = conn
        .query_one("SELECT count(*) FROM public.tasks WHERE _sync_partition = $1 AND id = 'pushed'", &[&partition])
        .unwrap()
        .get(0);
    assert_eq!(pushed, 1);
    assert_eq!(delivered(&msg).expect("rows decode").rows.len(), SUBS * (ROWS + 2), "every row, the pushed ones too");
}

/// Number of subscriptions in the client record, `None` without a record.
fn stored_subscriptions(conn: &mut postgres::Client, partition: &str, client: &str) -> Option<usize> {
    conn.query_opt(
        "SELECT jsonb_array_length(subscriptions) FROM syncular.sync_clients WHERE partition = $1 AND client_id = $2",
        &[&partition, &client],
    )
    .unwrap()
    .map(|r| r.get::<_, i32>(0) as usize)
}
