//! Measurement (not a test): build an image of N six-column rows from
//! row-codec payloads and report build time, hash time, file size and peak
//! RSS. `cargo run --release -p syncular-sqlite-image --example measure -- 1000000`

use std::time::Instant;

use syncular_protocol::primitives::Writer;
use syncular_protocol::row_codec::{write_row, ColumnLayout, ColumnType, RowValue, TableLayout};
use syncular_sqlite_image::{ImageBuilder, ImageSpec};

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let layout = TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("ws", ColumnType::String, false),
        ColumnLayout::new("title", ColumnType::String, true),
        ColumnLayout::new("n", ColumnType::Integer, false),
        ColumnLayout::new("done", ColumnType::Boolean, false),
        ColumnLayout::new("score", ColumnType::Float, true),
    ]);
    let spec = ImageSpec {
        table: "tasks".into(),
        layout: layout.clone(),
        primary_key_index: 0,
        schema_version: 1,
        as_of_commit_seq: n as i64,
        scope_digest: "sha256:00".into(),
    };
    let rss_start = peak_rss_kib();
    let t0 = Instant::now();
    let mut b = ImageBuilder::create(&std::env::temp_dir(), spec).expect("create");
    let mut w = Writer::new();
    for i in 0..n {
        let row = [
            Some(RowValue::String(format!("task-{i:09}"))),
            Some(RowValue::String("workspace-1".into())),
            Some(RowValue::String(format!("Title of task number {i}"))),
            Some(RowValue::Integer(i as i64)),
            Some(RowValue::Boolean(i % 3 == 0)),
            Some(RowValue::Float(i as f64 * 0.5)),
        ];
        w.clear();
        write_row(&mut w, &layout, &row).expect("encode");
        b.push_payload(1 + (i as i64 % 5), w.as_slice()).expect("push");
    }
    let t_rows = t0.elapsed();
    let image = b.finish().expect("finish");
    let t_total = t0.elapsed();
    println!(
        "rows={n} build={:.3}s (rows {:.3}s, finish+hash {:.3}s) rows/s={:.0} bytes={} ({:.1} MiB) segment={} peakRSS={} KiB (start {} KiB)",
        t_total.as_secs_f64(),
        t_rows.as_secs_f64(),
        (t_total - t_rows).as_secs_f64(),
        n as f64 / t_total.as_secs_f64(),
        image.byte_length(),
        image.byte_length() as f64 / 1048576.0,
        &image.segment_id()[..23],
        peak_rss_kib(),
        rss_start,
    );
}
