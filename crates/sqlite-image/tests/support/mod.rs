//! Reading an image back with rusqlite, for the tests.

#![allow(dead_code)]

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};
use syncular_protocol::row_codec::{ColumnType, RowValue, TableLayout};
use syncular_sqlite_image::ImageFile;

/// One `PRAGMA table_info` row: (name, declared type, notnull, pk position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    pub name: String,
    pub decl: String,
    pub not_null: bool,
    pub pk: i64,
}

/// Opens the finished image read-only.
pub fn open(image: &ImageFile) -> Connection {
    Connection::open_with_flags(image.path(), OpenFlags::SQLITE_OPEN_READ_ONLY).expect("image opens with SQLite")
}

/// Names of the tables (`type = 'table'`), sorted.
pub fn tables(conn: &Connection) -> Vec<String> {
    let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").unwrap();
    stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
}

/// `PRAGMA table_info` of `table`, in column order.
pub fn columns(conn: &Connection, table: &str) -> Vec<ColumnInfo> {
    let mut stmt = conn.prepare("SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1) ORDER BY cid").unwrap();
    stmt.query_map([table], |r| {
        Ok(ColumnInfo { name: r.get(0)?, decl: r.get(1)?, not_null: r.get::<_, i64>(2)? != 0, pk: r.get(3)? })
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Every data row as raw SQLite values (in rowid order of the data table
/// unless `order_by` says otherwise).
pub fn raw_rows(conn: &Connection, table: &str, order_by: &str) -> Vec<Vec<Value>> {
    let n = columns(conn, table).len();
    let sql = format!("SELECT * FROM \"{}\" ORDER BY {order_by}", table.replace('"', "\"\""));
    let mut stmt = conn.prepare(&sql).unwrap();
    stmt.query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect::<Result<Vec<_>, _>>())
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The `_syncular_segment` rows: (format, table, schemaVersion,
/// asOfCommitSeq, scopeDigest, rowCount).
pub fn metadata(conn: &Connection) -> Vec<(i64, String, i64, i64, String, i64)> {
    let mut stmt = conn
        .prepare("SELECT format, \"table\", schemaVersion, asOfCommitSeq, scopeDigest, rowCount FROM _syncular_segment")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The SQLite value a §5.3 image must hold for `value` of column type `ty`.
pub fn expected_cell(ty: ColumnType, value: &Option<RowValue>) -> Value {
    let Some(v) = value else { return Value::Null };
    match (ty, v) {
        (_, RowValue::String(s) | RowValue::Json(s) | RowValue::BlobRef(s)) => Value::Text(s.clone()),
        (_, RowValue::Integer(n)) => Value::Integer(*n),
        (_, RowValue::Float(f)) => Value::Real(*f),
        (_, RowValue::Boolean(b)) => Value::Integer(i64::from(*b)),
        (_, RowValue::Bytes(b) | RowValue::Crdt(b)) => Value::Blob(b.clone()),
    }
}

/// The raw row a §5.3 image must hold for `(server_version, row)`.
pub fn expected_row(layout: &TableLayout, server_version: i64, row: &[Option<RowValue>]) -> Vec<Value> {
    let mut out: Vec<Value> = layout.columns.iter().zip(row).map(|(c, v)| expected_cell(c.ty, v)).collect();
    out.push(Value::Integer(server_version));
    out
}
