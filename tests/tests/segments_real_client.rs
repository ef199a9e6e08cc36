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
    let first = bootstrap(&partition, 0b0010, "ext-1", None);
    assert_eq!(first.inline, 0, "bit 1 only: never inline");
    assert_eq!(first.refs, ROWS / 500, "one descriptor per 500-row page");
    assert_eq!(first.downloads, first.refs, "every descriptor downloaded through syncular.segment");
    let stored = stored_segments(&partition);
    assert_eq!(stored, (ROWS / 500) as i64);
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
