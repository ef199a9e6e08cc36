//! Stored segments with the real client (issue 12): `syncular-client`
//! 0.15.48 bootstraps a few thousand rows over several pages through
//! `syncular.sync`, downloading every `SEGMENT_REF` through
//! `syncular.segment` (§5.5), with `accept = 0b0010` (every page external)
//! and `0b0011` (small pages inline, large ones by reference), and ends with
//! exactly the server's rows. A second identical bootstrap reuses the stored
//! pages.

use syncular_client::{ClientLimits, SyncClient};
use syncular_integration_tests::clients::{held_snapshot, subscribe_projects, sync_idle, task_values, upsert_task};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema, schema_ir, server_tasks};
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::decode_response;

const ROWS: usize = 3000;
/// Rows `t0000 … t1499` have short titles, the rest long ones.
const SHORT: usize = 1500;

/// A fresh partition holding [`ROWS`] `tasks` rows over p1/p2, written by a real client.
fn seeded(label: &str) -> String {
    let mut conn = connect();
    register_schema(&mut conn).expect("register the sample schema");
    let partition = partition_name(label);
    let mut writer = SyncClient::new("writer".into(), &schema_ir(), ClientLimits::default()).expect("writer");
    subscribe_projects(&mut writer, "w", &["p1", "p2"]).expect("subscribe");
    let mut t = PgTransport::new(connect(), &partition, "alice", Some(allow_projects(&["p1", "p2"])));
    for batch in (0..ROWS).collect::<Vec<_>>().chunks(400) {
        let ops = batch
            .iter()
            .map(|&i| {
                let title = if i < SHORT { format!("s{i}") } else { format!("{i}:{}", "L".repeat(300)) };
                upsert_task(task_values(&format!("t{i:04}"), if i % 2 == 0 { "p1" } else { "p2" }, &title, i % 3 == 0, Some(i as i64)))
            })
            .collect();
        writer.mutate(ops).expect("mutate");
        sync_idle(&mut writer, &mut t, 20).expect("writer syncs");
    }
    assert!(writer.pending_commit_ids().is_empty());
    partition
}

struct Bootstrap {
    inline: usize,
    refs: usize,
    downloads: usize,
}

/// A fresh client with `accept` bootstraps; asserts it ends with exactly the server's rows.
fn bootstrap(partition: &str, accept: u8, label: &str, inline_max: Option<i32>) -> Bootstrap {
    let limits = ClientLimits {
        accept: Some(accept),
        limit_snapshot_rows: Some(500),
        max_snapshot_pages: Some(2),
        ..ClientLimits::default()
    };
    let mut client = SyncClient::new(format!("boot-{label}"), &schema_ir(), limits).expect("client");
    subscribe_projects(&mut client, "b", &["p1", "p2"]).expect("subscribe");
    let mut conn = connect();
    if let Some(max) = inline_max {
        conn.execute(&format!("SET syncular.segment_inline_max_bytes = {max}"), &[]).expect("set threshold");
    }
    let mut t = PgTransport::new(conn, partition, "bob", Some(allow_projects(&["p1", "p2"])));
    let report = sync_idle(&mut client, &mut t, 40).expect("bootstrap");
    assert_eq!(report.segment_rows_applied as usize, ROWS, "{label}: every row from segments: {report:?}");
    let state = client.subscription_state("b").expect("subscription");
    assert!(!state.has_resume_token, "{label}: bootstrap complete");
    let server: Vec<(String, i64, String)> = server_tasks(&mut connect(), partition)
        .expect("server rows")
        .into_iter()
        .map(|r| (r.0, r.5, r.2))
        .collect();
    let held: Vec<(String, i64, String)> = held_snapshot(&client)
        .expect("held rows")
        .into_iter()
        .map(|(id, version, values)| (id, version, values["title"].as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(held.len(), ROWS);
    assert!(held == server, "{label}: the client holds exactly the server's rows (ids, versions, titles)");
    let (mut inline, mut refs) = (0, 0);
    for response in &t.responses {
        for frame in decode_response(response).expect("decodes").frames {
            match frame {
                ssp2::Frame::SegmentInline { .. } => inline += 1,
                ssp2::Frame::SegmentRef { .. } => refs += 1,
                _ => {}
            }
        }
    }
    Bootstrap { inline, refs, downloads: t.downloads.len() }
}

fn stored_segments(partition: &str) -> i64 {
    connect()
        .query_one("SELECT count(*) FROM syncular.sync_segments WHERE partition = $1", &[&partition])
        .expect("count")
        .get(0)
}

#[test]
fn external_only_bootstrap_downloads_every_page_and_ends_with_the_server_rows() {
    let partition = seeded("seg-external");
    // The writer's own first round (default accept 0b0111) stored its empty bootstrap page.
    let before = stored_segments(&partition);
    let first = bootstrap(&partition, 0b0010, "ext-1", None);
    assert_eq!(first.inline, 0, "bit 1 only: never inline");
    assert_eq!(first.refs, ROWS / 500, "one descriptor per 500-row page");
    assert_eq!(first.downloads, first.refs, "every descriptor downloaded through syncular.segment");
    let stored = stored_segments(&partition);
    assert_eq!(stored - before, (ROWS / 500) as i64, "each page stored once");
    // The same bootstrap again: the stored pages, reused — nothing new stored.
    let second = bootstrap(&partition, 0b0010, "ext-2", None);
    assert_eq!((second.inline, second.refs), (0, first.refs));
    assert_eq!(stored_segments(&partition), stored);
}

#[test]
fn mixed_bootstrap_inlines_small_pages_references_large_ones_and_ends_with_the_server_rows() {
    let partition = seeded("seg-mixed");
    // Short-title pages are ≈ 25 KB, long-title pages ≈ 170 KB.
    let run = bootstrap(&partition, 0b0011, "mixed", Some(64 * 1024));
    assert_eq!(run.inline, SHORT / 500, "the small pages inline");
    assert_eq!(run.refs, (ROWS - SHORT) / 500, "the large pages by reference");
    assert_eq!(run.downloads, run.refs);
    // With the default threshold (256 KiB) every page here is inline.
    let all_inline = bootstrap(&partition, 0b0011, "mixed-default", None);
    assert_eq!((all_inline.inline, all_inline.refs), (ROWS / 500, 0));
}

/// The `SEGMENT_REF`s of a decoded response: `(segmentId, scopeDigest, byteLength)`.
fn refs_of(msg: &ssp2::Message) -> Vec<(String, String, i64)> {
    msg.frames
        .iter()
        .filter_map(|f| match f {
            ssp2::Frame::SegmentRef { segment_id, scope_digest, byte_length, .. } => {
                Some((segment_id.clone(), scope_digest.clone(), *byte_length))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn two_simultaneous_first_builds_store_one_segment_and_serve_identical_references() {
    use syncular_integration_tests::wire::{commit, pull_header, subscription, upsert, RawSession, Task};
    let mut conn = connect();
    register_schema(&mut conn).expect("register the sample schema");
    let partition = partition_name("seg-race");
    let allowed = || Some(allow_projects(&["p1"]));
    let mut a = RawSession::new(connect(), &partition, "ann", "race-a", allowed());
    a.acquire_epoch().expect("epoch");
    let ops = (0..50).map(|i| upsert(&Task::new(format!("t{i:02}"), "p1", "x"), None)).collect();
    a.push(vec![commit("seed", ops)]).expect("seed");
    let mut b = RawSession::new(connect(), &partition, "ben", "race-b", allowed());
    b.acquire_epoch().expect("epoch");
    let frames = || vec![pull_header(0, 0, 0, 0b0010), subscription("s", "tasks", &[("project_id", &["p1"])], -1, None)];

    // A builds and stores its page, uncommitted; B's identical first build
    // then waits on A's segment row; A commits; B completes.
    a.conn.batch_execute("BEGIN").unwrap();
    let from_a = a.round(frames()).expect("A's pull");
    let b_pid: i32 = b.conn.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let racer = std::thread::spawn(move || {
        b.conn.batch_execute("BEGIN").unwrap();
        let r = b.round(frames());
        b.conn.batch_execute("COMMIT").unwrap();
        r
    });
    let mut watcher = connect();
    let mut waited = false;
    for _ in 0..6000 {
        let row = watcher
            .query_one(
                "SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1), false)",
                &[&b_pid],
            )
            .unwrap();
        if row.get::<_, bool>(0) {
            waited = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(waited, "B's build waits for A's uncommitted segment row");
    a.conn.batch_execute("COMMIT").unwrap();
    let from_b = racer.join().expect("B's thread").expect("B's pull");
    let (ra, rb) = (refs_of(&from_a), refs_of(&from_b));
    assert_eq!(ra.len(), 1);
    assert_eq!(ra, rb, "both serve the same segment, same digest, same size");
    let count = |table: &str| -> i64 {
        connect()
            .query_one(&format!("SELECT count(*) FROM syncular.{table} WHERE partition = $1"), &[&partition])
            .unwrap()
            .get(0)
    };
    assert_eq!(count("sync_segments"), 1, "stored once");
    assert_eq!(count("sync_segment_chunks"), 1);
    assert_eq!(count("sync_segment_publications"), 1, "one context, one publication");
    // And both download the same bytes.
    let bytes: Vec<u8> = connect()
        .query_one(
            "SELECT syncular.segment($1, 'ben', $2, '{\"project_id\":[\"p1\"]}', '{\"project_id\":[\"p1\"]}')",
            &[&partition, &ra[0].0],
        )
        .unwrap()
        .get(0);
    assert_eq!(bytes.len() as i64, ra[0].2);
}
