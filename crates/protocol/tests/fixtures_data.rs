//! Own fixtures for the data half, independent of the shared vectors folder:
//! every §2.4 row-codec tag (bytes built by hand, not by our encoder), every
//! §2.4 row-codec violation, every §5.2 structural segment error, the
//! receiver-side column-table check, the streaming encoder's block cuts and
//! the server helpers (column extraction, append-NULL migration).

use syncular_protocol::row_codec::{
    append_null_columns, column_value, decode_row, encode_row, render_row, row_from_json,
    validate_row, ColumnLayout, ColumnType, RowValue, TableLayout,
};
use syncular_protocol::segment::{
    check_column_table, decode_rows_segment, encode_rows_segment, validate_rows_segment,
    SegmentEncoder, SegmentHeader, BLOCK_MAX_ROWS,
};
use syncular_protocol::ErrorCode;

// ---- a tiny independent byte builder (LE, as the Conventions table says) ----
#[derive(Default, Clone)]
struct B(Vec<u8>);
impl B {
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn i32(mut self, v: i32) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn i64(mut self, v: i64) -> Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    fn s(self, v: &str) -> Self {
        self.u32(v.len() as u32).raw(v.as_bytes())
    }
}

const BLOB_ID: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn one(ty: ColumnType, nullable: bool) -> TableLayout {
    TableLayout::new(vec![ColumnLayout::new("c", ty, nullable)])
}

fn invalid(r: syncular_protocol::Result<impl std::fmt::Debug>) -> String {
    let e = r.expect_err("must fail");
    assert_eq!(e.code, ErrorCode::InvalidRequest, "{e}");
    e.message
}

#[test]
fn every_tag_encodes_to_hand_built_bytes_and_back() {
    let blob = format!(r#"{{"blobId":"{BLOB_ID}","byteLength":3,"mediaType":"text/plain","name":"a.txt"}}"#);
    let cases: Vec<(ColumnType, RowValue, Vec<u8>)> = vec![
        (ColumnType::String, RowValue::String("héllo".into()), B::default().u8(0).s("héllo").0),
        (ColumnType::Integer, RowValue::Integer(-(1 << 53) + 1), B::default().u8(0).i64(-(1 << 53) + 1).0),
        (ColumnType::Float, RowValue::Float(-0.5), B::default().u8(0).raw(&(-0.5f64).to_le_bytes()).0),
        (ColumnType::Boolean, RowValue::Boolean(true), B::default().u8(0).u8(1).0),
        (ColumnType::Json, RowValue::Json(" {\"a\": [1, 2]} ".into()), B::default().u8(0).s(" {\"a\": [1, 2]} ").0),
        (ColumnType::Bytes, RowValue::Bytes(vec![0, 255, 7]), B::default().u8(0).u32(3).raw(&[0, 255, 7]).0),
        (ColumnType::BlobRef, RowValue::BlobRef(blob.clone()), B::default().u8(0).s(&blob).0),
        (ColumnType::Crdt, RowValue::Crdt(vec![1, 2, 0xfe]), B::default().u8(0).u32(3).raw(&[1, 2, 0xfe]).0),
    ];
    for (ty, value, bytes) in cases {
        let layout = one(ty, true);
        let row = vec![Some(value.clone())];
        assert_eq!(encode_row(&layout, &row).unwrap(), bytes, "{ty:?}");
        assert_eq!(decode_row(&layout, &bytes).unwrap(), row, "{ty:?}");
        validate_row(&layout, &bytes).unwrap();
        // NULL is one set bitmap bit and nothing else.
        assert_eq!(encode_row(&layout, &[None]).unwrap(), vec![1]);
        assert_eq!(decode_row(&layout, &[1]).unwrap(), vec![None]);
        // §11.1 rendering and its inverse agree.
        let rendered = render_row(&layout, &row);
        assert_eq!(row_from_json(&layout, &rendered).unwrap(), match value {
            // json re-serializes compactly through the rendering.
            RowValue::Json(_) => vec![Some(RowValue::Json("{\"a\":[1,2]}".into()))],
            v => vec![Some(v)],
        });
    }
    // Tags and names are the §2.4 table.
    for (i, t) in ColumnType::ALL.iter().enumerate() {
        assert_eq!(t.tag() as usize, i + 1);
        assert_eq!(ColumnType::from_name(t.name()), Some(*t));
    }
    assert_eq!(ColumnType::from_tag(0), None);
    assert_eq!(ColumnType::from_tag(9), None);
}

#[test]
fn bitmap_spans_bytes_lsb_first() {
    let cols: Vec<ColumnLayout> =
        (0..9).map(|i| ColumnLayout::new(format!("c{i}"), ColumnType::Boolean, true)).collect();
    let layout = TableLayout::new(cols);
    let mut row = vec![Some(RowValue::Boolean(false)); 9];
    row[1] = None;
    row[8] = None;
    // bit 1 of byte 0, bit 0 of byte 1; then 7 bool bytes.
    let want = B::default().u8(0b0000_0010).u8(0b0000_0001).raw(&[0; 7]).0;
    assert_eq!(encode_row(&layout, &row).unwrap(), want);
    assert_eq!(decode_row(&layout, &want).unwrap(), row);
    // Padding bit 1 of the second byte (column index 9 does not exist).
    let pad = B::default().u8(0b10).u8(0b11).raw(&[0; 7]).0;
    assert!(invalid(decode_row(&layout, &pad)).contains("padding"));
    assert!(invalid(validate_row(&layout, &pad)).contains("padding"));
}

#[test]
fn every_row_codec_violation_is_invalid_request() {
    let s = |ty| one(ty, false);
    // null bit on a non-nullable column
    assert!(invalid(decode_row(&s(ColumnType::String), &[1])).contains("non-nullable"));
    // bool byte other than 0/1
    invalid(decode_row(&s(ColumnType::Boolean), &[0, 2]));
    // i64 beyond ±(2^53−1)
    invalid(decode_row(&s(ColumnType::Integer), &B::default().u8(0).i64(1 << 53).0));
    // malformed UTF-8
    invalid(decode_row(&s(ColumnType::String), &B::default().u8(0).u32(1).u8(0xff).0));
    // json that does not parse
    invalid(decode_row(&s(ColumnType::Json), &B::default().u8(0).s("{nope").0));
    // truncations
    invalid(decode_row(&s(ColumnType::Float), &[0, 1, 2, 3]));
    invalid(decode_row(&s(ColumnType::Bytes), &B::default().u8(0).u32(10).raw(&[1]).0));
    invalid(decode_row(&s(ColumnType::String), &[]));
    // trailing bytes after the row
    invalid(decode_row(&s(ColumnType::Boolean), &[0, 1, 9]));
    // blob_ref shape (§5.9.1)
    let bad_blobs = [
        "[1]".to_owned(),
        "7".to_owned(),
        r#"{"byteLength":1}"#.to_owned(),
        format!(r#"{{"blobId":"{BLOB_ID}"}}"#),
        format!(r#"{{"blobId":"{}","byteLength":1}}"#, BLOB_ID.to_uppercase().replace("SHA256", "sha256")),
        r#"{"blobId":"sha256:abc","byteLength":1}"#.to_owned(),
        format!(r#"{{"blobId":"{BLOB_ID}","byteLength":-1}}"#),
        format!(r#"{{"blobId":"{BLOB_ID}","byteLength":1.5}}"#),
        format!(r#"{{"blobId":"{BLOB_ID}","byteLength":9007199254740992}}"#),
        format!(r#"{{"byteLength":1,"blobId":"{BLOB_ID}"}}"#),
        format!(r#"{{"blobId":"{BLOB_ID}","byteLength":1,"extra":1}}"#),
        format!(r#"{{"blobId":"{BLOB_ID}","byteLength":1,"name":5}}"#),
        format!(r#"{{"blobId":"{BLOB_ID}","byteLength":1,"mediaType":null}}"#),
        format!(r#"{{"blobId":"{BLOB_ID}","blobId":"{BLOB_ID}","byteLength":1}}"#),
        "{nope".to_owned(),
    ];
    for b in bad_blobs {
        let bytes = B::default().u8(0).s(&b).0;
        invalid(decode_row(&s(ColumnType::BlobRef), &bytes));
        invalid(validate_row(&s(ColumnType::BlobRef), &bytes));
    }
    // crdt bytes are never inspected
    let crdt = B::default().u8(0).u32(4).raw(b"{no}").0;
    assert_eq!(decode_row(&s(ColumnType::Crdt), &crdt).unwrap(), vec![Some(RowValue::Crdt(b"{no}".to_vec()))]);
}

#[test]
fn encoder_refuses_what_the_decoder_would_reject() {
    let l = one(ColumnType::String, false);
    invalid(encode_row(&l, &[None]));
    invalid(encode_row(&l, &[Some(RowValue::Integer(1))]));
    invalid(encode_row(&l, &[]));
    invalid(encode_row(&one(ColumnType::Json, true), &[Some(RowValue::Json("{x".into()))]));
    invalid(encode_row(&one(ColumnType::BlobRef, true), &[Some(RowValue::BlobRef("{}".into()))]));
    invalid(encode_row(&one(ColumnType::Integer, true), &[Some(RowValue::Integer(i64::MAX))]));
}

fn layout3() -> TableLayout {
    TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("n", ColumnType::Integer, true),
        ColumnLayout::new("ok", ColumnType::Boolean, false),
    ])
}

/// SSG2 preamble + header for `layout3` with the given column flags / tags.
fn header_bytes(tags: [u8; 3], flags: [u8; 3]) -> B {
    let mut b = B::default().raw(b"SSG2").u16(1).u16(0).s("t").i32(4).u16(3);
    for ((name, tag), f) in ["id", "n", "ok"].iter().zip(tags).zip(flags) {
        b = b.s(name).u8(tag).u8(f);
    }
    b
}

fn record(sv: i64, id: &str, n: Option<i64>, ok: bool) -> B {
    let b = B::default().i64(sv).u8(if n.is_none() { 0b10 } else { 0 }).s(id);
    let b = match n {
        Some(n) => b.i64(n),
        None => b,
    };
    b.u8(ok as u8)
}

fn good_segment() -> Vec<u8> {
    let rows = B::default().raw(&record(1, "a", Some(5), true).0).raw(&record(2, "b", None, false).0).0;
    header_bytes([1, 2, 4], [0, 1, 0]).u32(2).u32(rows.len() as u32).raw(&rows).u32(0).0
}

#[test]
fn hand_built_segment_decodes_and_reencodes() {
    let bytes = good_segment();
    validate_rows_segment(&bytes).unwrap();
    let seg = decode_rows_segment(&bytes).unwrap();
    assert_eq!(seg.header.table, "t");
    assert_eq!(seg.header.schema_version, 4);
    assert_eq!(seg.header.layout, layout3());
    assert_eq!(seg.blocks.len(), 1);
    assert_eq!(seg.blocks[0][1].server_version, 2);
    assert_eq!(seg.blocks[0][1].values[1], None);
    assert_eq!(encode_rows_segment(&seg).unwrap(), bytes);
    // A segment with no blocks at all is legal: header + end marker.
    let empty = header_bytes([1, 2, 4], [0, 1, 0]).u32(0).0;
    assert!(decode_rows_segment(&empty).unwrap().blocks.is_empty());
}

#[test]
fn every_structural_segment_error_is_invalid_request() {
    let good = good_segment();
    let rows = B::default().raw(&record(1, "a", Some(5), true).0).0;
    let hdr = || header_bytes([1, 2, 4], [0, 1, 0]);
    let mut bad_magic = good.clone();
    bad_magic[3] = b'1';
    let mut bad_version = good.clone();
    bad_version[4] = 2;
    let mut bad_flags = good.clone();
    bad_flags[6] = 1;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("bad magic", bad_magic, "magic"),
        ("formatVersion 2", bad_version, "formatVersion"),
        ("non-zero flags", bad_flags, "flags"),
        ("reserved column flag bit", header_bytes([1, 2, 4], [0, 3, 0]).u32(0).0, "reserved column flag"),
        ("type tag 0", header_bytes([1, 0, 4], [0, 1, 0]).u32(0).0, "unknown column type tag 0"),
        ("type tag 9", header_bytes([1, 9, 4], [0, 1, 0]).u32(0).0, "unknown column type tag 9"),
        (
            "rows shorter than byteLength",
            hdr().u32(1).u32(rows.len() as u32 + 1).raw(&rows).u8(0).u32(0).0,
            "unconsumed",
        ),
        (
            "rows longer than byteLength",
            hdr().u32(1).u32(rows.len() as u32 - 1).raw(&rows).u32(0).0,
            "",
        ),
        (
            "rowCount larger than the block can hold",
            hdr().u32(1_000_000).u32(rows.len() as u32).raw(&rows).u32(0).0,
            "rowCount",
        ),
        ("serverVersion 0", {
            let r = record(0, "a", Some(5), true).0;
            hdr().u32(1).u32(r.len() as u32).raw(&r).u32(0).0
        }, "serverVersion"),
        ("serverVersion negative", {
            let r = record(-3, "a", Some(5), true).0;
            hdr().u32(1).u32(r.len() as u32).raw(&r).u32(0).0
        }, "serverVersion"),
        ("row-codec violation (null on non-nullable)", {
            let r = B::default().i64(1).u8(0b01).i64(5).u8(1).0;
            hdr().u32(1).u32(r.len() as u32).raw(&r).u32(0).0
        }, "non-nullable"),
        ("row-codec violation (bool byte)", {
            let r = B::default().i64(1).u8(0).s("a").i64(5).u8(7).0;
            hdr().u32(1).u32(r.len() as u32).raw(&r).u32(0).0
        }, "bool"),
        ("truncated header", good[..12].to_vec(), ""),
        ("truncated block", good[..good.len() - 6].to_vec(), ""),
        ("missing end marker", good[..good.len() - 4].to_vec(), ""),
        ("trailing bytes after end marker", B::default().raw(&good).u8(0).0, "trailing"),
        ("empty input", vec![], ""),
    ];
    for (name, bytes, needle) in cases {
        for r in [decode_rows_segment(&bytes).map(|_| ()), validate_rows_segment(&bytes)] {
            let e = r.expect_err(name);
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{name}: {e}");
            assert!(e.message.contains(needle), "{name}: {e}");
        }
    }
}

#[test]
fn column_table_check_is_the_only_schema_mismatch() {
    let seg = decode_rows_segment(&good_segment()).unwrap();
    check_column_table(&seg.header, "t", 4, &layout3()).unwrap();
    let mut other = layout3();
    other.columns[1].nullable = false;
    let mut renamed = layout3();
    renamed.columns[0].name = "pk".into();
    let mut retyped = layout3();
    retyped.columns[2].ty = ColumnType::Integer;
    let mut extra = layout3();
    extra.columns.push(ColumnLayout::new("z", ColumnType::Json, true));
    for (table, v, l) in [("t", 4, other), ("t", 4, renamed), ("t", 4, retyped), ("t", 4, extra), ("u", 4, layout3()), ("t", 5, layout3())] {
        let e = check_column_table(&seg.header, table, v, &l).unwrap_err();
        assert_eq!(e.code, ErrorCode::SchemaMismatch, "{e}");
    }
}

#[test]
fn streaming_encoder_cuts_blocks_and_matches_decoder() {
    let header = SegmentHeader { table: "t".into(), schema_version: 1, layout: layout3() };
    let n = BLOCK_MAX_ROWS * 2 + 5;
    let mut enc = SegmentEncoder::new(Vec::new(), &header).unwrap();
    for i in 0..n {
        let row = vec![
            Some(RowValue::String(format!("r{i}"))),
            (i % 3 == 0).then_some(RowValue::Integer(i as i64)),
            Some(RowValue::Boolean(i % 2 == 0)),
        ];
        if i % 2 == 0 {
            enc.push_values(i as i64 + 1, &row).unwrap();
        } else {
            enc.push_payload(i as i64 + 1, &encode_row(&layout3(), &row).unwrap()).unwrap();
        }
    }
    // A bad row is refused and leaves the open block intact.
    assert!(enc.push_values(0, &[None, None, None]).is_err());
    assert!(enc.push_values(1, &[None, None, None]).is_err());
    assert!(enc.push_payload(1, &[0xff]).is_err());
    assert_eq!(enc.rows(), n as u64);
    let bytes = enc.finish().unwrap();
    let seg = decode_rows_segment(&bytes).unwrap();
    let sizes: Vec<usize> = seg.blocks.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![BLOCK_MAX_ROWS, BLOCK_MAX_ROWS, 5]);
    assert_eq!(encode_rows_segment(&seg).unwrap(), bytes);
    assert_eq!(seg.blocks[2][4].server_version, n as i64);

    // The byte threshold cuts first for wide rows (~100 KiB each → 3 per block).
    let wide = SegmentHeader {
        table: "w".into(),
        schema_version: 1,
        layout: TableLayout::new(vec![ColumnLayout::new("b", ColumnType::Bytes, false)]),
    };
    let mut enc = SegmentEncoder::new(Vec::new(), &wide).unwrap();
    for i in 0..7 {
        enc.push_values(i + 1, &[Some(RowValue::Bytes(vec![7; 100 * 1024]))]).unwrap();
    }
    let seg = decode_rows_segment(&enc.finish().unwrap()).unwrap();
    assert_eq!(seg.blocks.iter().map(Vec::len).collect::<Vec<_>>(), vec![3, 3, 1]);
}

#[test]
fn server_helpers_extract_columns_and_append_nulls() {
    let l = layout3();
    let payload = encode_row(&l, &[Some(RowValue::String("k".into())), None, Some(RowValue::Boolean(true))]).unwrap();
    assert_eq!(column_value(&l, &payload, "id").unwrap(), Some(RowValue::String("k".into())));
    assert_eq!(column_value(&l, &payload, "n").unwrap(), None);
    assert_eq!(column_value(&l, &payload, "ok").unwrap(), Some(RowValue::Boolean(true)));
    invalid(column_value(&l, &payload, "zzz"));
    invalid(column_value(&l, &payload[..payload.len() - 1], "id"));

    let mut wider = l.clone();
    for i in 0..7 {
        wider.columns.push(ColumnLayout::new(format!("x{i}"), ColumnType::Json, true));
    }
    let migrated = append_null_columns(&l, &wider, &payload).unwrap();
    let row = decode_row(&wider, &migrated).unwrap();
    assert_eq!(row.len(), 10);
    assert_eq!(&row[..3], &decode_row(&l, &payload).unwrap()[..]);
    assert!(row[3..].iter().all(Option::is_none));
    let mut bad = wider.clone();
    bad.columns[5].nullable = false;
    assert_eq!(append_null_columns(&l, &bad, &payload).unwrap_err().code, ErrorCode::SchemaMismatch);
    let mut reordered = wider.clone();
    reordered.columns.swap(0, 1);
    assert_eq!(append_null_columns(&l, &reordered, &payload).unwrap_err().code, ErrorCode::SchemaMismatch);
    invalid(append_null_columns(&l, &wider, &[0xff]));
}
