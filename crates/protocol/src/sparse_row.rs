//! The sparse row codec (§2.4, wire version 3): the payload of a version-3
//! upsert that carries only some columns of a row.
//!
//! Layout, for a [`TableLayout`] of `n` columns:
//! 1. the *presence* bitmap, `ceil(n / 8)` bytes, bit `i` (LSB-first in byte
//!    `i / 8`) set iff column `i` is in the payload; padding bits zero;
//! 2. the *null* bitmap over the present columns only, `ceil(p / 8)` bytes
//!    for `p` present columns, bit `k` set iff the `k`-th present column is
//!    NULL; padding bits zero;
//! 3. the values of the present non-NULL columns in column order, each in its
//!    §2.4 encoding.
//!
//! The primary-key column must be present. [`decode_sparse_row`] checks in
//! the order of the `syncular-ssp2` 0.49 reference — a set presence padding
//! bit, an absent primary key, a set null-bitmap padding bit (a null for an
//! absent column), then column by column a null for a non-nullable column or
//! a value error, then trailing bytes — and makes every value check of the
//! full-row decoder ([`crate::row_codec`]: UTF-8, safe integers, bool bytes,
//! JSON text, §5.9.1 BlobRef shape). Every failure is `sync.invalid_request`
//! with a message naming the fault; no input panics. [`encode_sparse_row`]
//! refuses (encoder error) every row the decoder would reject, so
//! decode → encode is the identity.

use serde_json::{Map, Value};

use crate::bitmap::{bit, padding_set, set_bit};
use crate::errors::{ProtocolError, Result};
use crate::primitives::{Reader, Writer};
use crate::row_codec::{read_value, render_column_table, write_value, RowValue, TableLayout, TextCheck};

/// One column of a sparse row.
#[derive(Debug, Clone, PartialEq)]
pub enum SparseSlot {
    /// Not in the payload: an apply leaves the stored value untouched.
    Absent,
    /// In the payload and NULL (only for a nullable column).
    Null,
    /// In the payload with this value (of the column's type).
    Value(RowValue),
}

impl SparseSlot {
    /// True unless [`SparseSlot::Absent`].
    pub fn is_present(&self) -> bool {
        !matches!(self, SparseSlot::Absent)
    }

    /// The slot as a full-row value: absent and NULL both `None`.
    pub fn into_value(self) -> Option<RowValue> {
        match self {
            SparseSlot::Value(v) => Some(v),
            SparseSlot::Absent | SparseSlot::Null => None,
        }
    }
}

/// A decoded sparse row: one slot per layout column, in declaration order.
pub type SparseRow = Vec<SparseSlot>;

fn missing_pk(layout: &TableLayout, primary_key_index: usize) -> ProtocolError {
    let which = layout
        .columns
        .get(primary_key_index)
        .map_or_else(|| format!("#{primary_key_index} (outside the layout)"), |c| format!("{:?}", c.name));
    ProtocolError::invalid(format!("sparse row is missing the primary-key column {which} (§2.4)"))
}

/// Decodes one standalone sparse row for `layout` whose primary key is
/// column `primary_key_index`; the bytes must hold exactly one row.
///
/// Errors (`sync.invalid_request`), in this order: a truncated presence
/// bitmap, a set presence padding bit, a primary key that is absent (or an
/// index outside the layout), a truncated null bitmap, a set null-bitmap
/// padding bit (a null bit for an absent column); then per present column in
/// order a null bit on a non-nullable column or any full-row value error;
/// finally trailing bytes.
pub fn decode_sparse_row(layout: &TableLayout, primary_key_index: usize, bytes: &[u8]) -> Result<SparseRow> {
    let n = layout.columns.len();
    let mut r = Reader::new(bytes);
    let presence = r.take(layout.bitmap_len(), "sparse row presence bitmap")?;
    if padding_set(presence, n) {
        return Err(ProtocolError::invalid(
            "sparse row presence bitmap has a set padding bit (a column past the column count)",
        ));
    }
    if primary_key_index >= n || !bit(presence, primary_key_index) {
        return Err(missing_pk(layout, primary_key_index));
    }
    let present = presence.iter().map(|b| b.count_ones() as usize).sum::<usize>();
    let nulls = r.take(present.div_ceil(8), "sparse row null bitmap")?;
    if padding_set(nulls, present) {
        return Err(ProtocolError::invalid(
            "sparse row null bitmap sets a null bit for an absent column",
        ));
    }
    let mut row = Vec::with_capacity(n);
    let mut k = 0usize;
    for (i, col) in layout.columns.iter().enumerate() {
        if !bit(presence, i) {
            row.push(SparseSlot::Absent);
            continue;
        }
        let is_null = bit(nulls, k);
        k += 1;
        if !is_null {
            row.push(SparseSlot::Value(read_value(&mut r, col)?));
        } else if col.nullable {
            row.push(SparseSlot::Null);
        } else {
            return Err(ProtocolError::invalid(format!(
                "sparse row: null bit set for non-nullable column {:?} (§2.4)",
                col.name
            )));
        }
    }
    if !r.is_empty() {
        return Err(ProtocolError::invalid(format!(
            "sparse row: {} trailing byte(s) after the row",
            r.remaining()
        )));
    }
    Ok(row)
}

/// Encodes one sparse row canonically (the layout above).
///
/// Encoder errors (`sync.invalid_request`, message `encoder: …`), each a row
/// [`decode_sparse_row`] would reject: a slot count other than the layout's
/// column count, an absent primary key (or an index outside the layout),
/// [`SparseSlot::Null`] for a non-nullable column, a value of the wrong type,
/// an integer outside ±(2^53−1), invalid `json` / `blob_ref` text, a length
/// over `u32`.
pub fn encode_sparse_row(layout: &TableLayout, primary_key_index: usize, row: &SparseRow) -> Result<Vec<u8>> {
    encode_unchecked(layout, primary_key_index, row).map_err(crate::frame_fields::as_encoder_error)
}

fn encode_unchecked(layout: &TableLayout, primary_key_index: usize, row: &[SparseSlot]) -> Result<Vec<u8>> {
    let n = layout.columns.len();
    if row.len() != n {
        return Err(ProtocolError::invalid(format!(
            "sparse row has {} slot(s), layout has {n} column(s)",
            row.len()
        )));
    }
    if !row.get(primary_key_index).is_some_and(SparseSlot::is_present) {
        return Err(missing_pk(layout, primary_key_index));
    }
    let present = row.iter().filter(|s| s.is_present()).count();
    let (plen, nlen) = (layout.bitmap_len(), present.div_ceil(8));
    let mut w = Writer::with_capacity(plen + nlen + 8 * present);
    for _ in 0..plen + nlen {
        w.u8(0);
    }
    let mut k = 0usize;
    for (i, (slot, col)) in row.iter().zip(&layout.columns).enumerate() {
        match slot {
            SparseSlot::Absent => continue,
            SparseSlot::Null if !col.nullable => {
                return Err(ProtocolError::invalid(format!(
                    "sparse row: NULL for non-nullable column {:?}",
                    col.name
                )))
            }
            SparseSlot::Null => set_bit(&mut w.as_mut_slice()[plen..], k),
            SparseSlot::Value(v) => write_value(&mut w, col, v, TextCheck::Full)?,
        }
        set_bit(w.as_mut_slice(), i);
        k += 1;
    }
    Ok(w.into_vec())
}

/// §11.1 rendering of a sparse row (rule 11, as `syncular-ssp2` 0.49 renders
/// it): `{"columns": [{"name","type","nullable"}…], "values": {…}}` where
/// `values` holds only the present columns in layout order — an absent
/// column has no key, a present NULL is `null`, a value renders as in a row
/// ([`RowValue::render`]).
pub fn render_sparse_row(layout: &TableLayout, row: &[SparseSlot]) -> Value {
    let mut values = Map::new();
    for (col, slot) in layout.columns.iter().zip(row) {
        match slot {
            SparseSlot::Absent => {}
            SparseSlot::Null => {
                values.insert(col.name.clone(), Value::Null);
            }
            SparseSlot::Value(v) => {
                values.insert(col.name.clone(), v.render());
            }
        }
    }
    let mut out = Map::new();
    out.insert("columns".into(), render_column_table(layout));
    out.insert("values".into(), Value::Object(values));
    Value::Object(out)
}

/// Builds a sparse row from its rendered `values` object (the inverse of
/// [`render_sparse_row`]'s `values`): a missing key is absent, JSON `null` is
/// NULL, anything else a value of the column's type
/// ([`RowValue::from_json`]). Unknown keys are rejected. Errors:
/// `sync.invalid_request` naming the column.
pub fn sparse_row_from_json(layout: &TableLayout, values: &Value) -> Result<SparseRow> {
    let map = values
        .as_object()
        .ok_or_else(|| ProtocolError::invalid("sparse row values must be a JSON object"))?;
    if let Some(k) = map.keys().find(|k| layout.index_of(k).is_none()) {
        return Err(ProtocolError::invalid(format!("unknown column {k:?}")));
    }
    layout
        .columns
        .iter()
        .map(|col| match map.get(&col.name) {
            None => Ok(SparseSlot::Absent),
            Some(Value::Null) => Ok(SparseSlot::Null),
            Some(v) => RowValue::from_json(col.ty, v, &col.name).map(SparseSlot::Value),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row_codec::{ColumnLayout, ColumnType};

    fn layout() -> TableLayout {
        TableLayout::new(vec![
            ColumnLayout::new("id", ColumnType::String, false),
            ColumnLayout::new("title", ColumnType::String, true),
            ColumnLayout::new("n", ColumnType::Integer, false),
        ])
    }

    #[test]
    fn partial_row_bytes_are_the_documented_layout() {
        let row = vec![
            SparseSlot::Value(RowValue::String("a".into())),
            SparseSlot::Null,
            SparseSlot::Absent,
        ];
        let bytes = encode_sparse_row(&layout(), 0, &row).unwrap();
        // presence 0b011, nulls over 2 present columns 0b10, then "a".
        assert_eq!(bytes, [0b011, 0b10, 1, 0, 0, 0, b'a']);
        assert_eq!(decode_sparse_row(&layout(), 0, &bytes).unwrap(), row);
        let rendered = render_sparse_row(&layout(), &row);
        assert_eq!(rendered["values"], serde_json::json!({"id": "a", "title": null}));
        assert_eq!(sparse_row_from_json(&layout(), &rendered["values"]).unwrap(), row);
    }

    #[test]
    fn encoder_refuses_what_the_decoder_rejects() {
        let l = layout();
        let pk = SparseSlot::Value(RowValue::String("a".into()));
        let bad: Vec<(usize, SparseRow)> = vec![
            (0, vec![SparseSlot::Absent, SparseSlot::Null, SparseSlot::Absent]),
            (0, vec![pk.clone(), SparseSlot::Absent, SparseSlot::Null]),
            (0, vec![pk.clone(), SparseSlot::Value(RowValue::Integer(1)), SparseSlot::Absent]),
            (0, vec![pk.clone(), SparseSlot::Absent, SparseSlot::Value(RowValue::Integer(1 << 53))]),
            (0, vec![pk.clone(), SparseSlot::Absent]),
            (3, vec![pk.clone(), SparseSlot::Absent, SparseSlot::Absent]),
        ];
        for (pk_index, row) in bad {
            let e = encode_sparse_row(&l, pk_index, &row).unwrap_err();
            assert_eq!(e.code, crate::ErrorCode::InvalidRequest);
            assert!(e.message.starts_with("encoder:"), "{}", e.message);
        }
    }
}
