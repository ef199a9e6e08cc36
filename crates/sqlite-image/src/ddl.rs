//! The two `CREATE TABLE` statements of a §5.3 image.

use std::collections::HashSet;

use syncular_protocol::row_codec::{ColumnType, TableLayout};

use crate::error::{ImageError, ImageResult};

/// Name of the metadata table (§5.3).
pub const METADATA_TABLE: &str = "_syncular_segment";

/// Name of the trailing per-row version column of the data table (§5.3).
pub const VERSION_COLUMN: &str = "_syncular_version";

/// The metadata table, exactly the §5.3 columns in the §5.3 order.
pub const METADATA_DDL: &str = "CREATE TABLE \"_syncular_segment\" (\
     format INTEGER NOT NULL, \
     \"table\" TEXT NOT NULL, \
     schemaVersion INTEGER NOT NULL, \
     asOfCommitSeq INTEGER NOT NULL, \
     scopeDigest TEXT NOT NULL, \
     rowCount INTEGER NOT NULL)";

/// The declared type (and so the affinity) of a §2.4 column type in an
/// image: `string`/`json`/`blob_ref` → `TEXT`, `integer`/`boolean` →
/// `INTEGER`, `float` → `REAL`, `bytes`/`crdt` → `BLOB`.
pub fn declared_type(ty: ColumnType) -> &'static str {
    match ty {
        ColumnType::String | ColumnType::Json | ColumnType::BlobRef => "TEXT",
        ColumnType::Integer | ColumnType::Boolean => "INTEGER",
        ColumnType::Float => "REAL",
        ColumnType::Bytes | ColumnType::Crdt => "BLOB",
    }
}

/// An SQLite identifier in double quotes (embedded quotes doubled).
pub(crate) fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// `CREATE TABLE "<table>" (<columns>, "_syncular_version" INTEGER NOT NULL)`
/// for `layout` with the primary key at `primary_key_index`.
/// Errors: [`ImageError::Unrepresentable`] for a name SQLite or §5.3 reserves
/// (`sqlite_*`, `_syncular_segment`, a `_syncular_version` column), names
/// equal up to ASCII case (SQLite identifiers are case-insensitive), a NUL
/// in a name; [`ImageError::Row`] for an empty layout or a primary-key index
/// outside it.
pub fn data_table_ddl(table: &str, layout: &TableLayout, primary_key_index: usize) -> ImageResult<String> {
    let unrepresentable = |m: String| Err(ImageError::Unrepresentable(m));
    if layout.is_empty() || primary_key_index >= layout.len() {
        return Err(ImageError::Row(format!(
            "primary key index {primary_key_index} outside a layout of {} column(s)",
            layout.len()
        )));
    }
    let lower = table.to_ascii_lowercase();
    if lower.starts_with("sqlite_") || lower == METADATA_TABLE || table.contains('\0') {
        return unrepresentable(format!("table name {table:?} is reserved in a sqlite image"));
    }
    let mut seen = HashSet::new();
    let mut defs = Vec::with_capacity(layout.len() + 1);
    for (i, col) in layout.columns.iter().enumerate() {
        let folded = col.name.to_ascii_lowercase();
        if folded == VERSION_COLUMN || col.name.contains('\0') {
            return unrepresentable(format!("column name {:?} is reserved in a sqlite image", col.name));
        }
        if !seen.insert(folded) {
            return unrepresentable(format!(
                "column names of table {table:?} collide in SQLite (case-insensitive): {:?}",
                col.name
            ));
        }
        let mut def = format!("{} {}", quote(&col.name), declared_type(col.ty));
        if !col.nullable {
            def.push_str(" NOT NULL");
        }
        if i == primary_key_index {
            def.push_str(" PRIMARY KEY");
        }
        defs.push(def);
    }
    defs.push(format!("{} INTEGER NOT NULL", quote(VERSION_COLUMN)));
    Ok(format!("CREATE TABLE {} ({})", quote(table), defs.join(", ")))
}

/// `INSERT INTO "<table>" VALUES (?1, …, ?n+1)` for a layout of `columns`.
pub(crate) fn insert_sql(table: &str, columns: usize) -> String {
    let params: Vec<String> = (1..=columns + 1).map(|i| format!("?{i}")).collect();
    format!("INSERT INTO {} VALUES ({})", quote(table), params.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncular_protocol::row_codec::ColumnLayout;

    fn layout(cols: &[(&str, ColumnType, bool)]) -> TableLayout {
        TableLayout::new(cols.iter().map(|(n, t, null)| ColumnLayout::new(*n, *t, *null)).collect())
    }

    #[test]
    fn ddl_lists_columns_in_order_with_types_not_null_and_pk() {
        let l = layout(&[("id", ColumnType::String, false), ("n", ColumnType::Integer, true), ("we\"ird", ColumnType::Crdt, false)]);
        assert_eq!(
            data_table_ddl("t", &l, 0).unwrap(),
            "CREATE TABLE \"t\" (\"id\" TEXT NOT NULL PRIMARY KEY, \"n\" INTEGER, \"we\"\"ird\" BLOB NOT NULL, \
             \"_syncular_version\" INTEGER NOT NULL)"
        );
    }

    #[test]
    fn reserved_and_colliding_names_are_unrepresentable() {
        let ok = layout(&[("id", ColumnType::String, false)]);
        for t in ["sqlite_x", "SQLite_master", "_syncular_segment", "_SYNCULAR_SEGMENT", "a\0b"] {
            assert!(matches!(data_table_ddl(t, &ok, 0), Err(ImageError::Unrepresentable(_))), "{t:?}");
        }
        let clash = layout(&[("id", ColumnType::String, false), ("ID", ColumnType::String, true)]);
        assert!(matches!(data_table_ddl("t", &clash, 0), Err(ImageError::Unrepresentable(_))));
        let version = layout(&[("id", ColumnType::String, false), ("_Syncular_Version", ColumnType::Integer, true)]);
        assert!(matches!(data_table_ddl("t", &version, 0), Err(ImageError::Unrepresentable(_))));
        assert!(matches!(data_table_ddl("t", &ok, 1), Err(ImageError::Row(_))));
    }
}
