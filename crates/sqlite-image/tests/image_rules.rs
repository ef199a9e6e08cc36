//! Every §5.3 "File contents" rule, checked by opening the built file with
//! SQLite (rusqlite, the reference client's binding).

mod support;

use rusqlite::types::Value;
use sha2::{Digest, Sha256};
use syncular_protocol::row_codec::{encode_row, ColumnLayout, ColumnType, RowValue, TableLayout};
use syncular_sqlite_image::{ImageBuilder, ImageError, ImageFile, ImageSpec};

use support::*;

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// One column of every §2.4 type, each non-nullable, plus a nullable twin.
fn all_types() -> TableLayout {
    let mut cols = vec![ColumnLayout::new("id", ColumnType::String, false)];
    for ty in ColumnType::ALL {
        cols.push(ColumnLayout::new(format!("{}_v", ty.name()), ty, false));
        cols.push(ColumnLayout::new(format!("{}_n", ty.name()), ty, true));
    }
    TableLayout::new(cols)
}

fn spec(table: &str, layout: TableLayout, pk: usize) -> ImageSpec {
    ImageSpec {
        table: table.into(),
        layout,
        primary_key_index: pk,
        schema_version: 7,
        as_of_commit_seq: 42,
        scope_digest: DIGEST.into(),
    }
}

fn value(ty: ColumnType, seed: u8) -> RowValue {
    match ty {
        ColumnType::String => RowValue::String(format!("s{seed} ünïcødé ✓ 𝄞 日本")),
        ColumnType::Integer => RowValue::Integer(if seed & 1 == 0 { 9_007_199_254_740_991 } else { -9_007_199_254_740_991 }),
        ColumnType::Float => RowValue::Float(if seed & 1 == 0 { 1.5e300 } else { f64::NEG_INFINITY }),
        ColumnType::Boolean => RowValue::Boolean(seed & 1 == 0),
        // Non-canonical spacing and key order: must stay verbatim.
        ColumnType::Json => RowValue::Json(format!("{{ \"b\" : [1, 2.50, \"\\u00e9\"], \"a\":{seed} }}")),
        ColumnType::Bytes => RowValue::Bytes(vec![0, seed, 255, 0]),
        ColumnType::BlobRef => RowValue::BlobRef(format!(
            "{{\"blobId\":\"sha256:{}\",\"byteLength\":{seed}}}",
            "ab".repeat(32)
        )),
        ColumnType::Crdt => RowValue::Crdt(vec![seed; 5]),
    }
}

/// Row `i`: every non-nullable column set; nullable twins alternate NULL / set.
fn row(layout: &TableLayout, i: u8) -> Vec<Option<RowValue>> {
    layout
        .columns
        .iter()
        .enumerate()
        .map(|(c, col)| {
            if c == 0 {
                Some(RowValue::String(format!("row-{i:03}")))
            } else if col.nullable && i & 1 == 0 {
                None
            } else {
                Some(value(col.ty, i))
            }
        })
        .collect()
}

fn build(spec: ImageSpec, rows: &[(i64, Vec<Option<RowValue>>)]) -> ImageFile {
    let dir = std::env::temp_dir();
    let layout = spec.layout.clone();
    let mut b = ImageBuilder::create(&dir, spec).unwrap();
    for (i, (v, r)) in rows.iter().enumerate() {
        // Alternate both entry points: stored payloads and decoded rows.
        if i % 2 == 0 {
            b.push_payload(*v, &encode_row(&layout, r).unwrap()).unwrap();
        } else {
            b.push_row(*v, r).unwrap();
        }
    }
    b.finish().unwrap()
}

#[test]
fn exactly_two_tables_with_the_declared_columns() {
    let layout = all_types();
    let image = build(spec("items", layout.clone(), 0), &[(1, row(&layout, 1))]);
    let conn = open(&image);
    assert_eq!(tables(&conn), ["_syncular_segment", "items"]);
    let cols = columns(&conn, "items");
    let mut expected = vec![ColumnInfo { name: "id".into(), decl: "TEXT".into(), not_null: true, pk: 1 }];
    for ty in ColumnType::ALL {
        let decl = match ty.name() {
            "string" | "json" | "blob_ref" => "TEXT",
            "integer" | "boolean" => "INTEGER",
            "float" => "REAL",
            _ => "BLOB",
        };
        expected.push(ColumnInfo { name: format!("{}_v", ty.name()), decl: decl.into(), not_null: true, pk: 0 });
        expected.push(ColumnInfo { name: format!("{}_n", ty.name()), decl: decl.into(), not_null: false, pk: 0 });
    }
    expected.push(ColumnInfo { name: "_syncular_version".into(), decl: "INTEGER".into(), not_null: true, pk: 0 });
    assert_eq!(cols, expected);
    let meta = columns(&conn, "_syncular_segment");
    let want = [
        ("format", "INTEGER"),
        ("table", "TEXT"),
        ("schemaVersion", "INTEGER"),
        ("asOfCommitSeq", "INTEGER"),
        ("scopeDigest", "TEXT"),
        ("rowCount", "INTEGER"),
    ];
    assert_eq!(
        meta,
        want.iter()
            .map(|(n, d)| ColumnInfo { name: n.to_string(), decl: d.to_string(), not_null: true, pk: 0 })
            .collect::<Vec<_>>()
    );
    // Nothing but the two tables and the primary key's own index.
    let mut stmt = conn.prepare("SELECT type, name FROM sqlite_master ORDER BY name").unwrap();
    let objects: Vec<(String, String)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
    assert_eq!(
        objects,
        [
            ("table".to_string(), "_syncular_segment".to_string()),
            ("table".into(), "items".into()),
            ("index".into(), "sqlite_autoindex_items_1".into())
        ]
    );
}

#[test]
fn the_metadata_row_describes_the_image() {
    let layout = all_types();
    let rows: Vec<_> = (0..5u8).map(|i| (i64::from(i) + 1, row(&layout, i))).collect();
    let image = build(spec("items", layout, 0), &rows);
    let conn = open(&image);
    assert_eq!(metadata(&conn), [(1, "items".to_string(), 7, 42, DIGEST.to_string(), 5)]);
    assert_eq!(image.row_count(), 5);
    // An empty snapshot is still a complete image.
    let empty = build(spec("items", all_types(), 0), &[]);
    assert_eq!(metadata(&open(&empty)), [(1, "items".to_string(), 7, 42, DIGEST.to_string(), 0)]);
    assert_eq!(raw_rows(&open(&empty), "items", "rowid").len(), 0);
}

#[test]
fn cells_hold_the_rows_exactly() {
    let layout = all_types();
    let rows: Vec<_> = (0..6u8).map(|i| (i64::from(i) * 3 + 1, row(&layout, i))).collect();
    let image = build(spec("items", layout.clone(), 0), &rows);
    let conn = open(&image);
    let got = raw_rows(&conn, "items", "id");
    let want: Vec<_> = rows.iter().map(|(v, r)| expected_row(&layout, *v, r)).collect();
    assert_eq!(got, want);
    // Storage classes: booleans are integers 0/1, json text verbatim, NULLs NULL.
    let mut stmt = conn
        .prepare("SELECT typeof(boolean_v), boolean_v, typeof(json_v), json_v, typeof(json_n), typeof(bytes_v), typeof(float_v) FROM items WHERE id = 'row-001'")
        .unwrap();
    let (tb, b, tj, j, tjn, tby, tf): (String, i64, String, String, String, String, String) = stmt
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)))
        .unwrap();
    assert_eq!((tb.as_str(), b, tj.as_str(), tjn.as_str(), tby.as_str(), tf.as_str()), ("integer", 0, "text", "text", "blob", "real"));
    assert_eq!(j, "{ \"b\" : [1, 2.50, \"\\u00e9\"], \"a\":1 }");
    let nulls: i64 = conn
        .query_row("SELECT count(*) FROM items WHERE string_n IS NULL AND json_n IS NULL AND bytes_n IS NULL AND crdt_n IS NULL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(nulls, 3, "even rows have NULL twins");
}

#[test]
fn integer_primary_keys_and_large_blobs() {
    let layout = TableLayout::new(vec![
        ColumnLayout::new("n", ColumnType::Integer, false),
        ColumnLayout::new("data", ColumnType::Bytes, true),
        ColumnLayout::new("z", ColumnType::Float, false),
    ]);
    let big: Vec<u8> = (0..5_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let rows = vec![
        (1, vec![Some(RowValue::Integer(10)), Some(RowValue::Bytes(big.clone())), Some(RowValue::Float(-0.25))]),
        (2, vec![Some(RowValue::Integer(9)), Some(RowValue::Bytes(vec![])), Some(RowValue::Float(f64::INFINITY))]),
        (3, vec![Some(RowValue::Integer(-3)), None, Some(RowValue::Float(0.1))]),
    ];
    let image = build(spec("big", layout.clone(), 0), &rows);
    let conn = open(&image);
    assert_eq!(columns(&conn, "big")[0], ColumnInfo { name: "n".into(), decl: "INTEGER".into(), not_null: true, pk: 1 });
    let got = raw_rows(&conn, "big", "n DESC");
    assert_eq!(got, rows.iter().map(|(v, r)| expected_row(&layout, *v, r)).collect::<Vec<_>>());
    assert!(image.byte_length() > 5_000_000);
}

#[test]
fn primary_key_and_not_null_are_enforced_by_the_file() {
    let layout = all_types();
    let image = build(spec("items", layout.clone(), 0), &[(1, row(&layout, 1))]);
    let copy = std::env::temp_dir().join(format!("image-copy-{}.sqlite", std::process::id()));
    std::fs::write(&copy, image.to_vec().unwrap()).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    let dup = conn.execute("INSERT INTO items SELECT * FROM items", []);
    assert!(dup.is_err(), "PRIMARY KEY rejects a duplicate id");
    let null = conn.execute("UPDATE items SET string_v = NULL", []);
    assert!(null.is_err(), "NOT NULL holds");
    let null_version = conn.execute("UPDATE items SET _syncular_version = NULL", []);
    assert!(null_version.is_err(), "_syncular_version is NOT NULL");
    drop(conn);
    std::fs::remove_file(copy).unwrap();
}

#[test]
fn segment_id_is_the_sha256_of_the_bytes_the_reader_yields() {
    let layout = all_types();
    let image = build(spec("items", layout.clone(), 0), &[(1, row(&layout, 1)), (2, row(&layout, 2))]);
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut image.reader().unwrap(), &mut bytes).unwrap();
    assert_eq!(bytes.len() as u64, image.byte_length());
    assert_eq!(&bytes[..16], b"SQLite format 3\0");
    assert_eq!(image.segment_id(), format!("sha256:{}", hex::encode(Sha256::digest(&bytes))));
    // The file is a plain rollback-journal database (header bytes 18/19 = 1):
    // nothing beside it is needed to open it.
    assert_eq!((bytes[18], bytes[19]), (1, 1));
    let dir = image.path().parent().unwrap().to_path_buf();
    drop(image);
    assert!(!dir.exists(), "dropping the image removes its directory");
}

#[test]
fn bad_rows_are_refused() {
    let layout = TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("f", ColumnType::Float, true),
    ]);
    let mk = || ImageBuilder::create(&std::env::temp_dir(), spec("t", layout.clone(), 0)).unwrap();
    let id = || Some(RowValue::String("a".into()));
    assert!(matches!(mk().push_row(0, &[id(), None]), Err(ImageError::Row(_))), "serverVersion < 1");
    assert!(matches!(mk().push_row(1, &[None, None]), Err(ImageError::Row(_))), "NULL in non-nullable");
    assert!(matches!(mk().push_row(1, &[id()]), Err(ImageError::Row(_))), "arity");
    assert!(matches!(mk().push_row(1, &[id(), Some(RowValue::Integer(1))]), Err(ImageError::Row(_))), "type");
    assert!(matches!(mk().push_payload(1, &[0x01]), Err(ImageError::Row(_))), "null bit on the id");
    assert!(matches!(mk().push_payload(1, &[0x06]), Err(ImageError::Row(_))), "truncated / padding");
    let good = encode_row(&layout, &[id(), None]).unwrap();
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(matches!(mk().push_payload(1, &trailing), Err(ImageError::Row(_))), "trailing bytes");
    let nan = encode_row(&layout, &[id(), Some(RowValue::Float(f64::NAN))]).unwrap();
    assert!(matches!(mk().push_payload(1, &nan), Err(ImageError::Unrepresentable(_))), "NaN");
    let mut b = mk();
    b.push_payload(1, &good).unwrap();
    assert!(matches!(b.push_payload(2, &good), Err(ImageError::Sqlite(_))), "duplicate primary key");
    let bad_name = ImageBuilder::create(&std::env::temp_dir(), spec("sqlite_master", layout.clone(), 0));
    assert!(matches!(bad_name, Err(ImageError::Unrepresentable(_))));
}

#[test]
fn unicode_and_quoted_names_survive() {
    let layout = TableLayout::new(vec![
        ColumnLayout::new("clé \"primaire\"", ColumnType::String, false),
        ColumnLayout::new("table", ColumnType::String, true),
    ]);
    let rows = vec![(5, vec![Some(RowValue::String("ключ 🔑".into())), Some(RowValue::String("with\0nul".into()))])];
    let image = build(spec("tâches \"x\"", layout.clone(), 0), &rows);
    let conn = open(&image);
    assert_eq!(tables(&conn), ["_syncular_segment", "tâches \"x\""]);
    assert_eq!(columns(&conn, "tâches \"x\"")[0].name, "clé \"primaire\"");
    assert_eq!(raw_rows(&conn, "tâches \"x\"", "rowid"), vec![expected_row(&layout, 5, &rows[0].1)]);
    assert_eq!(metadata(&conn)[0].1, "tâches \"x\"");
    let _ = Value::Null;
}

#[test]
fn negative_zero_reads_back_as_zero() {
    // SQLite keeps a REAL without a fractional part as an integer on disk, so
    // -0.0 reads back as 0.0 (equal as numbers) — documented, not refused.
    let layout = TableLayout::new(vec![
        ColumnLayout::new("id", ColumnType::String, false),
        ColumnLayout::new("f", ColumnType::Float, false),
    ]);
    let rows = vec![(1, vec![Some(RowValue::String("a".into())), Some(RowValue::Float(-0.0))])];
    let image = build(spec("t", layout, 0), &rows);
    let f: f64 = open(&image).query_row("SELECT f FROM t", [], |r| r.get(0)).unwrap();
    assert_eq!(f, 0.0);
    println!("-0.0 reads back with sign bit {}", f.is_sign_negative());
}
