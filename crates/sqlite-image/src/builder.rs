//! [`ImageBuilder`]: rows in, one at a time, into an SQLite file in a
//! private temporary directory; [`ImageBuilder::finish`] writes the metadata
//! row and hands back the [`ImageFile`].

use std::path::{Path, PathBuf};

use rusqlite::types::{Null, ToSqlOutput, ValueRef};
use rusqlite::Connection;
use syncular_protocol::primitives::Reader;
use syncular_protocol::row_codec::{ColumnType, RowValue, TableLayout};
use tempfile::TempDir;

use crate::ddl::{data_table_ddl, insert_sql, METADATA_DDL};
use crate::error::{ImageError, ImageResult};
use crate::file::ImageFile;
use crate::{CACHE_KIB, FORMAT, PAGE_SIZE};

/// File name of the database inside the builder's temporary directory.
const FILE_NAME: &str = "image.sqlite";

/// Prefix of the temporary directory. Postgres removes `pgsql_tmp*` entries
/// of its temp directories at startup, so a build cut short by a crash inside
/// `base/pgsql_tmp` leaves nothing behind after a restart.
const DIR_PREFIX: &str = "pgsql_tmp_syncular_image_";

/// What an image describes: the data table and the `_syncular_segment` row.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    /// Target table name (IR name): the data table's name and `"table"`.
    pub table: String,
    /// Codec layout (schema-IR declaration order) of the rows.
    pub layout: TableLayout,
    /// Position of the primary-key column in `layout`.
    pub primary_key_index: usize,
    /// `schemaVersion` the rows are encoded for.
    pub schema_version: i32,
    /// The bootstrap pin (§4.7).
    pub as_of_commit_seq: i64,
    /// The subscription's scope digest (§3.5).
    pub scope_digest: String,
}

/// Streams rows into a §5.3 image. Rows are inserted inside one SQLite
/// transaction into a file whose page cache is capped, so memory stays
/// bounded; dropping an unfinished builder deletes its directory.
pub struct ImageBuilder {
    conn: Connection,
    dir: TempDir,
    path: PathBuf,
    spec: ImageSpec,
    insert: String,
    rows: u64,
}

impl ImageBuilder {
    /// Creates the image file in a new temporary directory under `parent`
    /// (which must exist), creates both tables and opens the transaction.
    /// Errors: [`ImageError::Unrepresentable`] for names SQLite or §5.3
    /// reserves (see [`crate::data_table_ddl`]), [`ImageError::Row`] for a
    /// primary-key index outside the layout, I/O and SQLite failures.
    pub fn create(parent: &Path, spec: ImageSpec) -> ImageResult<ImageBuilder> {
        let ddl = data_table_ddl(&spec.table, &spec.layout, spec.primary_key_index)?;
        let dir = tempfile::Builder::new().prefix(DIR_PREFIX).tempdir_in(parent)?;
        let path = dir.path().join(FILE_NAME);
        let conn = Connection::open(&path)?;
        // A throwaway file until finished: no journal, no fsync, one writer.
        conn.execute_batch(&format!(
            "PRAGMA page_size = {PAGE_SIZE}; \
             PRAGMA journal_mode = OFF; \
             PRAGMA synchronous = OFF; \
             PRAGMA locking_mode = EXCLUSIVE; \
             PRAGMA temp_store = FILE; \
             PRAGMA cache_size = -{CACHE_KIB};"
        ))?;
        conn.execute_batch(&format!("BEGIN; {ddl}; {METADATA_DDL};"))?;
        let insert = insert_sql(&spec.table, spec.layout.len());
        Ok(ImageBuilder { conn, dir, path, spec, insert, rows: 0 })
    }

    /// Rows added so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The image's description.
    pub fn spec(&self) -> &ImageSpec {
        &self.spec
    }

    /// Adds one stored row: `server_version` (≥ 1) and its row-codec payload
    /// (§2.4) for the spec's layout. The payload is trusted the way stored
    /// payloads are (validated when they entered the log): its structure,
    /// nullability and integer range are checked, `json` / `blob_ref` texts
    /// are copied verbatim without re-parsing.
    /// Errors: [`ImageError::Row`] (payload does not decode, version < 1),
    /// [`ImageError::Unrepresentable`] (a NaN float), SQLite failures
    /// (a duplicate primary key). After an error the builder must be dropped.
    pub fn push_payload(&mut self, server_version: i64, payload: &[u8]) -> ImageResult<()> {
        check_version(server_version)?;
        let layout = &self.spec.layout;
        let mut stmt = self.conn.prepare_cached(&self.insert)?;
        let mut r = Reader::new(payload);
        let bitmap = r.take(layout.bitmap_len(), "row null bitmap")?;
        let n = layout.len();
        if n & 7 != 0 && bitmap[bitmap.len() - 1] >> (n % 8) != 0 {
            return Err(ImageError::Row("row null bitmap has a set padding bit (§2.4)".into()));
        }
        for (i, col) in layout.columns.iter().enumerate() {
            let what = col.name.as_str();
            if bitmap[i / 8] & (1 << (i % 8)) != 0 {
                if !col.nullable {
                    return Err(ImageError::Row(format!("null bit set for non-nullable column {what:?}")));
                }
                stmt.raw_bind_parameter(i + 1, Null)?;
                continue;
            }
            let cell = match col.ty {
                ColumnType::String | ColumnType::Json | ColumnType::BlobRef => {
                    ValueRef::Text(r.str(what)?.as_bytes())
                }
                ColumnType::Integer => ValueRef::Integer(r.i64(what)?),
                ColumnType::Float => ValueRef::Real(real(r.f64(what)?, what)?),
                ColumnType::Boolean => ValueRef::Integer(i64::from(r.bool(what)?)),
                ColumnType::Bytes | ColumnType::Crdt => ValueRef::Blob(r.bytes(what)?),
            };
            stmt.raw_bind_parameter(i + 1, ToSqlOutput::Borrowed(cell))?;
        }
        r.finish("row payload")?;
        stmt.raw_bind_parameter(n + 1, server_version)?;
        stmt.raw_execute()?;
        self.rows += 1;
        Ok(())
    }

    /// Adds one decoded row: `server_version` (≥ 1) and one slot per layout
    /// column (`None` = NULL, only for nullable columns), each of the
    /// column's type. Errors as [`ImageBuilder::push_payload`].
    pub fn push_row(&mut self, server_version: i64, row: &[Option<RowValue>]) -> ImageResult<()> {
        check_version(server_version)?;
        let layout = &self.spec.layout;
        if row.len() != layout.len() {
            return Err(ImageError::Row(format!("row has {} value(s), layout has {} column(s)", row.len(), layout.len())));
        }
        let mut stmt = self.conn.prepare_cached(&self.insert)?;
        for (i, (col, value)) in layout.columns.iter().zip(row).enumerate() {
            let what = col.name.as_str();
            let Some(value) = value else {
                if !col.nullable {
                    return Err(ImageError::Row(format!("NULL in non-nullable column {what:?}")));
                }
                stmt.raw_bind_parameter(i + 1, Null)?;
                continue;
            };
            if value.column_type() != col.ty {
                return Err(ImageError::Row(format!(
                    "column {what:?} is {}, got a {} value",
                    col.ty.name(),
                    value.column_type().name()
                )));
            }
            let cell = match value {
                RowValue::String(s) | RowValue::Json(s) | RowValue::BlobRef(s) => ValueRef::Text(s.as_bytes()),
                RowValue::Integer(v) => ValueRef::Integer(*v),
                RowValue::Float(v) => ValueRef::Real(real(*v, what)?),
                RowValue::Boolean(b) => ValueRef::Integer(i64::from(*b)),
                RowValue::Bytes(b) | RowValue::Crdt(b) => ValueRef::Blob(b),
            };
            stmt.raw_bind_parameter(i + 1, ToSqlOutput::Borrowed(cell))?;
        }
        stmt.raw_bind_parameter(layout.len() + 1, server_version)?;
        stmt.raw_execute()?;
        self.rows += 1;
        Ok(())
    }

    /// Writes the `_syncular_segment` row (`rowCount` = rows added), commits,
    /// closes the database and hashes the file (§5.1 `segmentId`).
    /// Errors: SQLite and I/O failures.
    pub fn finish(self) -> ImageResult<ImageFile> {
        let ImageBuilder { conn, dir, path, spec, rows, .. } = self;
        let row_count = i64::try_from(rows).map_err(|_| ImageError::Row("row count exceeds i64".into()))?;
        conn.execute(
            "INSERT INTO \"_syncular_segment\" VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            rusqlite::params![FORMAT, spec.table, spec.schema_version, spec.as_of_commit_seq, spec.scope_digest, row_count],
        )?;
        conn.execute_batch("COMMIT")?;
        conn.close().map_err(|(_, e)| e)?;
        ImageFile::hash(dir, path, rows)
    }
}

fn check_version(server_version: i64) -> ImageResult<()> {
    if server_version < 1 {
        return Err(ImageError::Row(format!("serverVersion {server_version} < 1 (§5.2)")));
    }
    Ok(())
}

/// SQLite stores a NaN as NULL; refusing it keeps an image exactly the rows.
fn real(v: f64, what: &str) -> ImageResult<f64> {
    if v.is_nan() {
        return Err(ImageError::Unrepresentable(format!("column {what:?} holds a NaN float (SQLite stores NaN as NULL)")));
    }
    Ok(v)
}
