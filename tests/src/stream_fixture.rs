//! The big streamed pull shared by `gateway_stream.rs` and `segment_attacks.rs`: a partition
//! holding `ROWS` rows of `ROW_BYTES` incompressible bytes each in project p1, a pull of `SUBS`
//! fresh bootstraps of it (one ~5 MB section each, ~50 MB in all), a gateway whose connections
//! allow such a response, and `POST /sync` opened with its first bytes read; also the
//! incompressible rows other gateway tests commit.

use std::io::Read;

use crate::fixtures::TASKS;
use crate::gateway::{http_agent, sql_commit_task, Gateway};
use crate::wire::{pull_header, request, subscription};

/// SSP2 content type of `POST /sync`.
pub const SSP2: &str = "application/vnd.syncular.sync.v2";
/// Subscriptions of the big pull (each bootstraps every row: one section of ~`ROWS × ROW_BYTES`).
pub const SUBS: usize = 10;
/// Rows committed by [`commit_big_rows`].
pub const ROWS: usize = 20;
/// Bytes of each row's title.
pub const ROW_BYTES: usize = 250_000;

/// Commits `ROWS` rows `big-00`… of `ROW_BYTES` bytes of incompressible text (project p1, as
/// alice) with plain SQL.
pub fn commit_big_rows(conn: &mut postgres::Client, partition: &str) {
    commit_incompressible_rows(conn, partition, ROWS, ROW_BYTES);
}

/// Commits `n` rows `big-00`… of `bytes` bytes of incompressible text each (segments may be
/// compressed, §5.8), in project p1 as alice, one plain SQL commit per row.
pub fn commit_incompressible_rows(conn: &mut postgres::Client, partition: &str, n: usize, bytes: usize) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..n {
        let title: String = (0..bytes)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(x % 62) as usize])
            })
            .collect();
        sql_commit_task(conn, partition, "alice", &format!("big-{i:02}"), "p1", &title);
    }
}

/// A pull request of `SUBS` fresh bootstraps of project p1 (pages of up to 50,000 rows, 50 pages,
/// inline only) for `client` at the partition's live epoch.
pub fn big_pull(conn: &mut postgres::Client, partition: &str, client: &str) -> Vec<u8> {
    let epoch: String = conn
        .query_one("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&partition])
        .unwrap()
        .get(0);
    let mut frames = vec![pull_header(0, 50_000, 50, 1)];
    for i in 0..SUBS {
        frames.push(subscription(&format!("s{i}"), TASKS, &[("project_id", &["p1"])], -1, None));
    }
    request(client, Some(&epoch), frames)
}

/// A dev-auth gateway whose connections allow 64 MiB responses, with `extra` arguments.
pub fn big_gateway(extra: &[&str]) -> Gateway {
    let dsn = crate::dsn();
    assert!(!dsn.contains("://"), "a key=value test DSN is expected");
    let mut args = vec!["--auth", "dev"];
    args.extend_from_slice(extra);
    Gateway::start_with_dsn(&format!("{dsn} options='-c syncular.response_budget_bytes=67108864'"), &args)
}

/// Opens `POST /sync` as alice and reads the first bytes (at least the 8-byte `SSP2` header);
/// returns the body reader and what was read. Asserts a 200 streamed without a length.
pub fn open_body(gw: &Gateway, partition: &str, body: &[u8]) -> (Box<dyn Read + Send>, Vec<u8>) {
    let resp = http_agent()
        .post(format!("{}/sync", gw.base_url))
        .header("x-syncular-actor", "alice")
        .header("x-syncular-partition", partition)
        .header("content-type", SSP2)
        .header("accept-encoding", "identity")
        .send(body)
        .expect("POST /sync");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().get("content-length").is_none(), "a streamed body has no length");
    let mut reader: Box<dyn Read + Send> = Box::new(resp.into_body().into_reader());
    let mut first = vec![0u8; 4096];
    let mut n = 0;
    while n < 8 {
        let got = reader.read(&mut first[n..]).expect("first bytes");
        assert!(got > 0, "the body ended after {n} bytes");
        n += got;
    }
    first.truncate(n);
    assert_eq!(&first[..4], b"SSP2", "the response starts: {:?}", &first[..8]);
    (reader, first)
}
