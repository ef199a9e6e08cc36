//! SSG2 rows-segment throughput (§5.2): encode and decode of a 100,000-row
//! segment over a 6-column table, ours vs the published reference codec
//! `syncular-ssp2 = "=0.15.48"`, in the same run.
//!
//! `cargo bench -p syncular-protocol --bench segment` runs the criterion
//! groups (MB/s via `Throughput::Bytes`) and then prints a summary table:
//! median-of-N MB/s for each side and the ratio ours / reference (goal ≥ 1.0×).
//! `SEGMENT_BENCH_ROWS` overrides the row count.

use criterion::{black_box, BenchmarkId, Criterion, Throughput};
use std::time::Instant;
use syncular_protocol::row_codec::{ColumnLayout, ColumnType, RowValue, TableLayout};
use syncular_protocol::segment::{
    decode_rows_segment, encode_rows_segment, encode_rows_segment_trusted, validate_rows_segment,
    RowsSegment, SegmentEncoder, SegmentHeader, SegmentRow, BLOCK_MAX_ROWS,
};
use ssp2::primitives::RawJson;
use ssp2::segment as theirs;

fn rows() -> usize {
    std::env::var("SEGMENT_BENCH_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
}

fn layout() -> TableLayout {
    TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("title", ColumnType::String, true),
        ColumnLayout::new("position", ColumnType::Integer, false),
        ColumnLayout::new("score", ColumnType::Float, true),
        ColumnLayout::new("done", ColumnType::Boolean, false),
        ColumnLayout::new("meta", ColumnType::Json, true),
    ])
}

fn row(i: usize) -> Vec<Option<RowValue>> {
    vec![
        Some(RowValue::String(format!("task-{i:08}"))),
        (!i.is_multiple_of(7)).then(|| RowValue::String(format!("Write the quarterly report, part {i}"))),
        Some(RowValue::Integer(i as i64 * 3)),
        (!i.is_multiple_of(5)).then_some(RowValue::Float(i as f64 / 7.0)),
        Some(RowValue::Boolean(i & 1 == 0)),
        (!i.is_multiple_of(3)).then(|| RowValue::Json(format!(r#"{{"tags":["a","b"],"n":{i},"ok":true}}"#))),
    ]
}

fn ours_segment(n: usize) -> RowsSegment {
    let header = SegmentHeader { table: "tasks".into(), schema_version: 1, layout: layout() };
    let all: Vec<SegmentRow> =
        (0..n).map(|i| SegmentRow { server_version: i as i64 + 1, values: row(i) }).collect();
    let blocks = all.chunks(BLOCK_MAX_ROWS).map(<[SegmentRow]>::to_vec).collect();
    RowsSegment { header, blocks }
}

fn to_theirs(seg: &RowsSegment) -> theirs::RowsSegment {
    let conv_ty = |t: ColumnType| theirs::ColumnType::from_tag(t.tag()).expect("tag");
    let conv = |v: &RowValue| match v {
        RowValue::String(s) => theirs::ColumnValue::String(s.clone()),
        RowValue::Integer(n) => theirs::ColumnValue::Integer(*n),
        RowValue::Float(f) => theirs::ColumnValue::Float(*f),
        RowValue::Boolean(b) => theirs::ColumnValue::Boolean(*b),
        RowValue::Json(j) => theirs::ColumnValue::Json(RawJson(j.clone())),
        RowValue::Bytes(b) => theirs::ColumnValue::Bytes(b.clone()),
        RowValue::BlobRef(j) => theirs::ColumnValue::BlobRef(RawJson(j.clone())),
        RowValue::Crdt(b) => theirs::ColumnValue::Crdt(b.clone()),
    };
    theirs::RowsSegment {
        table: seg.header.table.clone(),
        schema_version: seg.header.schema_version,
        columns: seg
            .header
            .layout
            .columns
            .iter()
            .map(|c| theirs::Column { name: c.name.clone(), ty: conv_ty(c.ty), nullable: c.nullable })
            .collect(),
        blocks: seg
            .blocks
            .iter()
            .map(|b| {
                b.iter()
                    .map(|r| theirs::SegmentRow {
                        server_version: r.server_version,
                        values: r.values.iter().map(|v| v.as_ref().map(conv)).collect(),
                    })
                    .collect()
            })
            .collect(),
    }
}

fn stream_encode(seg: &RowsSegment) -> Vec<u8> {
    let mut enc = SegmentEncoder::new(Vec::with_capacity(1 << 20), &seg.header).expect("header");
    for r in seg.blocks.iter().flatten() {
        enc.push_values(r.server_version, &r.values).expect("row");
    }
    enc.finish().expect("finish")
}

/// The server's bootstrap path: rows arrive as stored row-codec payloads
/// (validated when they were pushed) plus their server_version.
fn stream_payloads(header: &SegmentHeader, payloads: &[(i64, Vec<u8>)]) -> Vec<u8> {
    let mut enc = SegmentEncoder::new(Vec::with_capacity(1 << 20), header).expect("header");
    for (sv, p) in payloads {
        enc.push_payload_trusted(*sv, p).expect("row");
    }
    enc.finish().expect("finish")
}

/// Median wall time (seconds) of each job, measured round-robin over
/// `runs` rounds so every job sees the same machine load.
fn round_robin(runs: usize, jobs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(runs); jobs.len()];
    for _ in 0..runs {
        for (j, job) in jobs.iter_mut().enumerate() {
            let s = Instant::now();
            job();
            times[j].push(s.elapsed().as_secs_f64());
        }
    }
    times
        .into_iter()
        .map(|mut t| {
            t.sort_by(|a, b| a.total_cmp(b));
            t[t.len() / 2]
        })
        .collect()
}

fn main() {
    let n = rows();
    let ours = ours_segment(n);
    let ref_seg = to_theirs(&ours);
    let bytes = encode_rows_segment(&ours).expect("encode");
    assert_eq!(theirs::encode_rows_segment(&ref_seg), bytes, "encoders disagree");
    assert_eq!(stream_encode(&ours), bytes, "streaming encoder disagrees");
    assert_eq!(encode_rows_segment_trusted(&ours).unwrap(), bytes, "trusted encoder disagrees");
    let payloads: Vec<(i64, Vec<u8>)> = ours
        .blocks
        .iter()
        .flatten()
        .map(|r| (r.server_version, syncular_protocol::row_codec::encode_row(&ours.header.layout, &r.values).unwrap()))
        .collect();
    assert_eq!(stream_payloads(&ours.header, &payloads), bytes, "payload streaming disagrees");
    let len = bytes.len() as u64;

    let mut c = Criterion::default().sample_size(10).configure_from_args();
    {
        let mut g = c.benchmark_group(format!("ssg2_{n}_rows"));
        g.throughput(Throughput::Bytes(len));
        g.bench_function(BenchmarkId::new("encode", "ours"), |b| b.iter(|| encode_rows_segment(black_box(&ours))));
        g.bench_function(BenchmarkId::new("encode", "ours_trusted"), |b| {
            b.iter(|| encode_rows_segment_trusted(black_box(&ours)))
        });
        g.bench_function(BenchmarkId::new("encode", "ours_streaming"), |b| b.iter(|| stream_encode(black_box(&ours))));
        g.bench_function(BenchmarkId::new("encode", "ours_stored_payloads"), |b| {
            b.iter(|| stream_payloads(black_box(&ours.header), black_box(&payloads)))
        });
        g.bench_function(BenchmarkId::new("encode", "syncular_ssp2"), |b| {
            b.iter(|| theirs::encode_rows_segment(black_box(&ref_seg)))
        });
        g.bench_function(BenchmarkId::new("decode", "ours"), |b| b.iter(|| decode_rows_segment(black_box(&bytes))));
        g.bench_function(BenchmarkId::new("decode", "syncular_ssp2"), |b| {
            b.iter(|| theirs::decode_rows_segment(black_box(&bytes)))
        });
        g.bench_function(BenchmarkId::new("validate", "ours"), |b| b.iter(|| validate_rows_segment(black_box(&bytes))));
        g.finish();
    }
    c.final_summary();

    // Same-run summary with explicit ratios (round-robin, median of 15).
    let runs = 15;
    let mbps = |secs: f64| len as f64 / secs / 1e6;
    let t = round_robin(
        runs,
        &mut [
            &mut || drop(black_box(encode_rows_segment(&ours))),
            &mut || drop(black_box(encode_rows_segment_trusted(&ours))),
            &mut || drop(black_box(stream_encode(&ours))),
            &mut || drop(black_box(stream_payloads(&ours.header, &payloads))),
            &mut || drop(black_box(theirs::encode_rows_segment(&ref_seg))),
            &mut || drop(black_box(decode_rows_segment(&bytes))),
            &mut || drop(black_box(theirs::decode_rows_segment(&bytes))),
            &mut || drop(black_box(validate_rows_segment(&bytes))),
        ],
    );
    let [enc_ours, enc_trusted, enc_stream, enc_payloads, enc_ref, dec_ours, dec_ref, val_ours] =
        [t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]].map(mbps);
    println!("\nSSG2 segment, {n} rows, {:.2} MB ({len} bytes), median of {runs}:", len as f64 / 1e6);
    println!(
        "  encode  ours trusted (same work as the reference: no JSON re-parse) {enc_trusted:8.1} MB/s | syncular-ssp2 {enc_ref:8.1} MB/s | ratio {:.2}x",
        enc_trusted / enc_ref
    );
    println!(
        "  encode  ours checked (re-parses every json text) {enc_ours:8.1} MB/s | ratio {:.2}x",
        enc_ours / enc_ref
    );
    println!("  encode  ours streaming, checked {enc_stream:8.1} MB/s | ratio {:.2}x", enc_stream / enc_ref);
    println!(
        "  encode  ours streaming from stored payloads (server bootstrap path) {enc_payloads:8.1} MB/s | ratio {:.2}x",
        enc_payloads / enc_ref
    );
    println!("  decode  ours {dec_ours:8.1} MB/s | syncular-ssp2 {dec_ref:8.1} MB/s | ratio {:.2}x", dec_ours / dec_ref);
    println!("  validate (no allocation) ours {val_ours:8.1} MB/s | ratio vs syncular-ssp2 decode {:.2}x", val_ours / dec_ref);
}
