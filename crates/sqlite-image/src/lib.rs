//! SSP2 §5.3 SQLite image segments (`mediaType = sqlite`, format 1): a
//! complete SQLite database file holding one table's whole snapshot for one
//! subscription, built row by row and read back in chunks. No pgrx: the
//! extension's engine feeds it decoded rows (`src/engine/segments/image.rs`).
//!
//! The file holds exactly two tables (§5.3 "File contents"):
//! - the data table, named as the target table: the schema-IR columns in
//!   declaration order, then `_syncular_version INTEGER NOT NULL`; declared
//!   types `string`/`json`/`blob_ref` → `TEXT`, `integer`/`boolean` →
//!   `INTEGER`, `float` → `REAL`, `bytes`/`crdt` → `BLOB` (`blob_ref` rides
//!   `json` and `crdt` rides `bytes`, §2.4); non-nullable columns `NOT NULL`,
//!   the primary-key column `PRIMARY KEY`. Cells: `boolean` as `0`/`1`,
//!   `json` / `blob_ref` the raw text verbatim, NULL for null, everything
//!   else its natural SQLite type.
//! - `_syncular_segment`, one row: `format` (= [`FORMAT`]), `"table"`,
//!   `schemaVersion`, `asOfCommitSeq`, `scopeDigest`, `rowCount`.
//!
//! Shapes: [`ImageSpec`] describes the image, [`ImageBuilder`] takes rows one
//! at a time (as stored row-codec payloads or as decoded values) into a
//! database file in a private temporary directory, [`ImageFile`] is the
//! finished file: its `segmentId` (`"sha256:"` + lowercase hex of the bytes,
//! §5.1), byte length, row count and a [`std::io::Read`] over the bytes. The
//! directory is removed when the [`ImageFile`] (or an unfinished builder) is
//! dropped.
//!
//! Memory is bounded: rows go straight into SQLite, whose page cache is
//! capped at [`CACHE_KIB`] and spills to the file; the file is a throwaway
//! until finished, so it is written without a rollback journal and without
//! fsync.
//!
//! Images are not byte-deterministic (§5.3 "Determinism and reuse"): the
//! content address pins the bytes built, not a canonical encoding.

mod builder;
mod ddl;
mod error;
mod file;

pub use builder::{ImageBuilder, ImageSpec};
pub use ddl::{data_table_ddl, declared_type, METADATA_DDL, METADATA_TABLE, VERSION_COLUMN};
pub use error::{ImageError, ImageResult};
pub use file::ImageFile;
/// The SQLite binding the images are built with (to open one in tests).
pub use rusqlite;

/// The `_syncular_segment.format` this crate writes (§5.3: format `1`).
pub const FORMAT: i64 = 1;

/// Page size of the image file, bytes.
pub const PAGE_SIZE: u32 = 4096;

/// SQLite page-cache cap while building, KiB (dirty pages beyond it spill to
/// the file, so memory stays bounded whatever the row count).
pub const CACHE_KIB: u32 = 8192;
