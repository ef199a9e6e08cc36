//! Property: any layout and any rows round-trip through an image — what
//! SQLite reads back is exactly the §5.3 cell encoding of every row, plus its
//! version, and the metadata row counts them.

mod support;

use std::collections::BTreeMap;

use proptest::prelude::*;
use syncular_protocol::row_codec::{encode_row, ColumnLayout, ColumnType, RowValue, TableLayout};
use syncular_sqlite_image::{ImageBuilder, ImageSpec};

use support::*;

fn value_of(ty: ColumnType) -> BoxedStrategy<RowValue> {
    match ty {
        ColumnType::String => any::<String>().prop_map(RowValue::String).boxed(),
        ColumnType::Integer => (-9_007_199_254_740_991i64..=9_007_199_254_740_991).prop_map(RowValue::Integer).boxed(),
        // Any non-NaN bit pattern except -0.0 (SQLite may store a REAL with
        // no fractional part as an integer, which forgets the sign of zero).
        ColumnType::Float => any::<f64>()
            .prop_filter("NaN is unrepresentable", |f| !f.is_nan())
            .prop_map(|f| RowValue::Float(if f == 0.0 { 0.0 } else { f }))
            .boxed(),
        ColumnType::Boolean => any::<bool>().prop_map(RowValue::Boolean).boxed(),
        ColumnType::Json => prop_oneof![
            Just("null".to_string()),
            any::<i32>().prop_map(|n| format!("[ {n} , \"x\" ]")),
            "[a-zé ]{0,12}".prop_map(|s| format!("{{\"k\" :\"{s}\"}}")),
        ]
        .prop_map(RowValue::Json)
        .boxed(),
        ColumnType::Bytes => proptest::collection::vec(any::<u8>(), 0..300).prop_map(RowValue::Bytes).boxed(),
        ColumnType::BlobRef => (0u32..1000)
            .prop_map(|n| RowValue::BlobRef(format!("{{\"blobId\":\"sha256:{}\",\"byteLength\":{n}}}", "0f".repeat(32))))
            .boxed(),
        ColumnType::Crdt => proptest::collection::vec(any::<u8>(), 0..64).prop_map(RowValue::Crdt).boxed(),
    }
}

/// A layout: a string or integer primary key at a random position among
/// 0..8 other columns of random types and nullability.
fn layout() -> impl Strategy<Value = (TableLayout, usize)> {
    let others = proptest::collection::vec((0usize..8, any::<bool>()), 0..8);
    (others, any::<bool>(), any::<prop::sample::Index>()).prop_map(|(others, int_pk, at)| {
        let mut cols: Vec<ColumnLayout> = others
            .into_iter()
            .enumerate()
            .map(|(i, (t, nullable))| ColumnLayout::new(format!("c{i}"), ColumnType::ALL[t], nullable))
            .collect();
        let pk = at.index(cols.len() + 1);
        let ty = if int_pk { ColumnType::Integer } else { ColumnType::String };
        cols.insert(pk, ColumnLayout::new("pk", ty, false));
        (TableLayout::new(cols), pk)
    })
}

/// A layout, its primary-key position and rows `(serverVersion, values)`.
type Case = (TableLayout, usize, Vec<(i64, Vec<Option<RowValue>>)>);

fn rows(layout: TableLayout, pk: usize) -> impl Strategy<Value = Case> {
    let cells: Vec<BoxedStrategy<Option<RowValue>>> = layout
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i == pk {
                Just(None).boxed() // filled in below with a unique key
            } else if c.nullable {
                proptest::option::of(value_of(c.ty)).boxed()
            } else {
                value_of(c.ty).prop_map(Some).boxed()
            }
        })
        .collect();
    let pk_ty = layout.columns[pk].ty;
    proptest::collection::vec((1i64..=i64::MAX, cells), 0..40).prop_map(move |rs| {
        let rs = rs
            .into_iter()
            .enumerate()
            .map(|(n, (v, mut r))| {
                r[pk] = Some(match pk_ty {
                    ColumnType::Integer => RowValue::Integer(n as i64 * 7 - 50),
                    _ => RowValue::String(format!("k{n}")),
                });
                (v, r)
            })
            .collect();
        (layout.clone(), pk, rs)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_rows_round_trip((layout, pk, rows) in layout().prop_flat_map(|(l, pk)| rows(l, pk)), payloads in any::<bool>()) {
        let spec = ImageSpec {
            table: "t".into(),
            layout: layout.clone(),
            primary_key_index: pk,
            schema_version: 3,
            as_of_commit_seq: 99,
            scope_digest: "d".into(),
        };
        let mut b = ImageBuilder::create(&std::env::temp_dir(), spec).unwrap();
        for (v, r) in &rows {
            if payloads {
                b.push_payload(*v, &encode_row(&layout, r).unwrap()).unwrap();
            } else {
                b.push_row(*v, r).unwrap();
            }
        }
        let image = b.finish().unwrap();
        let conn = open(&image);
        let pk_name = &layout.columns[pk].name;
        let got: BTreeMap<String, Vec<rusqlite::types::Value>> = raw_rows(&conn, "t", "rowid")
            .into_iter()
            .map(|r| (format!("{:?}", r[pk]), r))
            .collect();
        let want: BTreeMap<String, Vec<rusqlite::types::Value>> = rows
            .iter()
            .map(|(v, r)| expected_row(&layout, *v, r))
            .map(|r| (format!("{:?}", r[pk]), r))
            .collect();
        prop_assert_eq!(got, want, "pk column {}", pk_name);
        prop_assert_eq!(metadata(&conn), vec![(1, "t".to_string(), 3, 99, "d".to_string(), rows.len() as i64)]);
        let names: Vec<String> = columns(&conn, "t").into_iter().map(|c| c.name).collect();
        let mut want_names: Vec<String> = layout.columns.iter().map(|c| c.name.clone()).collect();
        want_names.push("_syncular_version".into());
        prop_assert_eq!(names, want_names);
    }
}
