//! Response codec throughput: encode and decode of a ~1 MB SSP2 response
//! (10,000 COMMIT changes over a 6-column table) with this crate and with
//! the reference codec `syncular-ssp2` in the same run.
//!
//! Run: `cargo bench -p syncular-protocol --bench response`. Criterion
//! reports each function's throughput; afterwards the bench prints one
//! `RATIO` line per direction: MB/s for ours and the reference (median of
//! timed rounds over the same bytes) and ours ÷ reference (goal ≥ 1.0×).

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, Criterion, Throughput};
use syncular_protocol::frame_fields::Op;
use syncular_protocol::response::{
    decode_response, Change, Commit, RespHeader, ResponseWriter, SubEnd, SubStart, SubStatus,
};
use syncular_protocol::row_codec::{encode_row, ColumnLayout, ColumnType, RowValue, TableLayout};

const CHANGES: usize = 10_000;
const CHANGES_PER_COMMIT: usize = 10;

/// One subscription with 1,000 COMMIT frames of 10 upserts each.
fn commits() -> Vec<Commit> {
    let layout = TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("title", ColumnType::String, false),
        ColumnLayout::new("count", ColumnType::Integer, true),
        ColumnLayout::new("score", ColumnType::Float, true),
        ColumnLayout::new("done", ColumnType::Boolean, false),
        ColumnLayout::new("meta", ColumnType::Json, true),
    ]);
    (0..CHANGES / CHANGES_PER_COMMIT)
        .map(|c| Commit {
            commit_seq: 1_000 + c as i64,
            created_at_ms: 1_782_993_600_000 + c as i64,
            actor_id: format!("actor-{}", c % 7),
            tables: vec!["notes".into()],
            changes: (0..CHANGES_PER_COMMIT)
                .map(|i| {
                    let n = c * CHANGES_PER_COMMIT + i;
                    let row = encode_row(
                        &layout,
                        &[
                            Some(RowValue::String(format!("n{n:05}"))),
                            Some(RowValue::String(format!("Title {n}"))),
                            Some(RowValue::Integer(n as i64)),
                            Some(RowValue::Float(n as f64 * 0.5)),
                            Some(RowValue::Boolean(n & 1 == 0)),
                            Some(RowValue::Json(format!(r#"{{"t":{}}}"#, n % 13))),
                        ],
                    )
                    .expect("row encodes");
                    Change {
                        table_index: 0,
                        row_id: format!("n{n:05}"),
                        op: Op::Upsert,
                        row_version: Some(1 + (n % 5) as i64),
                        scopes: vec![("project".into(), format!("p{}", n % 3))],
                        row: Some(row),
                    }
                })
                .collect(),
        })
        .collect()
}

fn sub_start() -> SubStart {
    SubStart {
        id: "sub-notes".into(),
        status: SubStatus::Active,
        reason_code: String::new(),
        effective_scopes: vec![("project".into(), vec!["p0".into(), "p1".into(), "p2".into()])],
        bootstrap: false,
    }
}

fn encode_ours(commits: &[Commit]) -> Vec<u8> {
    let mut w = ResponseWriter::new(Vec::with_capacity(1 << 20), 1, &RespHeader::default())
        .expect("header");
    w.sub_start(&sub_start()).expect("sub_start");
    for c in commits {
        w.commit(c).expect("commit");
    }
    w.sub_end(&SubEnd { next_cursor: 2_000, bootstrap_state: None }).expect("sub_end");
    w.finish().expect("finish")
}

fn to_reference(commits: &[Commit]) -> ssp2::Message {
    use ssp2::model::{Change as RChange, Op as ROp, SubStatus as RSubStatus};
    let mut frames = vec![ssp2::Frame::RespHeader {
        required_schema_version: None,
        latest_schema_version: None,
        log_epoch: None,
        reset_required: None,
    }];
    let s = sub_start();
    frames.push(ssp2::Frame::SubStart {
        id: s.id,
        status: RSubStatus::Active,
        reason_code: s.reason_code,
        effective_scopes: s.effective_scopes,
        bootstrap: s.bootstrap,
    });
    for c in commits {
        frames.push(ssp2::Frame::Commit {
            commit_seq: c.commit_seq,
            created_at_ms: c.created_at_ms,
            actor_id: c.actor_id.clone(),
            tables: c.tables.clone(),
            changes: c
                .changes
                .iter()
                .map(|ch| RChange {
                    table_index: ch.table_index,
                    row_id: ch.row_id.clone(),
                    op: ROp::Upsert,
                    row_version: ch.row_version,
                    scopes: ch.scopes.clone(),
                    row: ch.row.clone(),
                })
                .collect(),
        });
    }
    frames.push(ssp2::Frame::SubEnd { next_cursor: 2_000, bootstrap_state: None });
    ssp2::Message { wire_version: 1, msg_kind: ssp2::MsgKind::Response, frames }
}

fn bench(c: &mut Criterion) {
    let commits = commits();
    let reference_msg = to_reference(&commits);
    let bytes = encode_ours(&commits);
    assert_eq!(bytes, ssp2::encode_message(&reference_msg), "both encoders agree");
    let mut g = c.benchmark_group("response_1mb");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.sample_size(20).measurement_time(Duration::from_secs(4));
    g.bench_function("encode/ours", |b| b.iter(|| encode_ours(black_box(&commits))));
    g.bench_function("encode/syncular-ssp2", |b| {
        b.iter(|| ssp2::encode_message(black_box(&reference_msg)))
    });
    g.bench_function("decode/ours", |b| b.iter(|| decode_response(black_box(&bytes)).unwrap()));
    g.bench_function("decode/syncular-ssp2", |b| {
        b.iter(|| ssp2::decode_message(black_box(&bytes)).unwrap())
    });
    g.finish();
}

/// Median seconds per call of `ours` and `theirs` over `rounds` rounds,
/// interleaved so machine load drifts affect both alike.
fn median_pair(rounds: usize, mut ours: impl FnMut(), mut theirs: impl FnMut()) -> (f64, f64) {
    ours();
    theirs();
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64()
    };
    // Alternate which side runs first, so allocator state left by one side
    // does not systematically favour the other.
    let (mut a, mut b): (Vec<f64>, Vec<f64>) = (0..rounds)
        .map(|i| {
            if i % 2 == 0 {
                let x = time(&mut ours);
                (x, time(&mut theirs))
            } else {
                let y = time(&mut theirs);
                (time(&mut ours), y)
            }
        })
        .unzip();
    a.sort_by(|x, y| x.total_cmp(y));
    b.sort_by(|x, y| x.total_cmp(y));
    (a[rounds / 2], b[rounds / 2])
}

fn print_ratios() {
    let commits = commits();
    let reference_msg = to_reference(&commits);
    let bytes = encode_ours(&commits);
    let mb = bytes.len() as f64 / 1e6;
    let rounds = 61;
    println!("\nresponse size: {} bytes, {CHANGES} COMMIT changes, 6-column rows", bytes.len());
    let encode = median_pair(
        rounds,
        || drop(black_box(encode_ours(&commits))),
        || drop(black_box(ssp2::encode_message(&reference_msg))),
    );
    let decode = median_pair(
        rounds,
        || drop(black_box(decode_response(&bytes).unwrap())),
        || drop(black_box(ssp2::decode_message(&bytes).unwrap())),
    );
    for (what, (ours, theirs)) in [("encode", encode), ("decode", decode)] {
        println!(
            "RATIO response {what}: ours {:.1} MB/s, syncular-ssp2 {:.1} MB/s, ours/reference = {:.2}x",
            mb / ours,
            mb / theirs,
            theirs / ours
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    print_ratios();
}
