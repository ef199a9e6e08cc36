//! WAL bytes of a one-column update of a 20-column row (`wide`: primary key,
//! scope column, 18 text columns), per way of sending it:
//! - `v3 sparse`: the primary key and the changed column (syncular-client
//!   0.49 `patch`);
//! - `v3 full`: every column present (0.49 `mutate`);
//! - `v2 full`: the whole row (0.15.48, the only way it has).
//!
//! Two row shapes: 18 short values (~24 bytes each), and the same with one
//! 4 KiB value (stored out of line: TOAST). Measured as the insert-LSN
//! delta over `n` updates on one connection after a warm-up, so the
//! per-update figure includes the log rows, the stored outcome and any
//! full-page image the updates cause.

use super::requests::{Slot, Upsert, WIDE_TEXT_COLUMNS};
use super::throughput::Session;
use super::{wal_lsn, Wire};

/// How an update is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// v3, primary key + the changed column.
    SparseV3,
    /// v3, every column present.
    FullV3,
    /// v2, the whole row.
    FullV2,
}

impl Shape {
    /// Report label.
    pub fn label(self) -> &'static str {
        match self {
            Shape::SparseV3 => "v3 sparse (1 column)",
            Shape::FullV3 => "v3 full row",
            Shape::FullV2 => "v2 full row",
        }
    }

    fn wire(self) -> Wire {
        match self {
            Shape::FullV2 => Wire::V2,
            _ => Wire::V3,
        }
    }
}

/// A deterministic incompressible-looking text of `len` bytes (so a long
/// value is stored out of line rather than compressed inline).
fn noise(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"0123456789abcdefghijklmnopqrstuvwxyz"[(x % 36) as usize])
        })
        .collect()
}

/// The `wide` row's column values: `c05` = `edit`, the last one 4 KiB when `long`.
fn values(edit: &str, long: bool) -> Vec<String> {
    (1..=WIDE_TEXT_COLUMNS)
        .map(|i| match i {
            5 => edit.to_owned(),
            i if long && i == WIDE_TEXT_COLUMNS => noise(i as u64, 4096),
            i => format!("value of column {i:02} ·· {}", noise(i as u64, 6)),
        })
        .collect()
}

fn slots(shape: Shape, edit: &str, long: bool) -> Vec<Slot> {
    let mut out: Vec<Slot> = vec![Some(Some("w1".into())), Some(Some("p1".into()))];
    match shape {
        Shape::SparseV3 => {
            out[1] = None;
            out.extend((1..=WIDE_TEXT_COLUMNS).map(|i| (i == 5).then(|| Some(edit.to_owned()))));
        }
        Shape::FullV3 | Shape::FullV2 => out.extend(values(edit, long).into_iter().map(|v| Some(Some(v)))),
    }
    out
}

/// Mean WAL bytes of one update sent as `shape` (`n` measured after `warmup`).
pub fn update_bytes(dsn: &str, shape: Shape, long: bool, warmup: usize, n: usize) -> Result<f64, String> {
    let wire = shape.wire();
    let mut s = Session::open(dsn, "bw-wal", "c1")?;
    let insert: Vec<Slot> = slots(Shape::FullV2, "start", long);
    s.push(wire, "seed", &[Upsert { table: "wide", row_id: "w1", base_version: Some(0), slots: insert }])?;
    let mut version = 1i64;
    let mut update = |s: &mut Session, i: usize| -> Result<(), String> {
        let edit = format!("edit {i}");
        s.push(wire, &format!("k{i}"), &[Upsert { table: "wide", row_id: "w1", base_version: Some(version), slots: slots(shape, &edit, long) }])?;
        version += 1;
        Ok(())
    };
    for i in 0..warmup {
        update(&mut s, i)?;
    }
    let before = wal_lsn(&mut s.conn)?;
    for i in warmup..warmup + n {
        update(&mut s, i)?;
    }
    let after = wal_lsn(&mut s.conn)?;
    Ok((after - before) as f64 / n as f64)
}
