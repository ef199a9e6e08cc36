//! The sqlite image lane (SPEC §5.3, `mediaType = sqlite`): whether a
//! subscription's bootstrap takes it, and building the image of one
//! subscription's whole table at the pin.
//!
//! - Eligibility (decided by the bootstrap's image lane,
//!   [`crate::engine::pull::bootstrap::image`], with [`scan_matching`] as its probe): `accept` bit 2, the start of the table (a null row
//!   cursor — never mid-table, a resumed bootstrap with a cursor stays on
//!   rows), and more matching rows than the clamped `limitSnapshotRows` (the
//!   reference server's rule: below that one inline rows page is cheaper).
//!   The row count is a bounded probe that stops at `limitSnapshotRows + 1`
//!   matching rows.
//! - Build ([`build_image`]): exactly the rows a complete sequence of rows
//!   pages would deliver (same keyset walk through
//!   [`crate::store::pull::bootstrap_page::PageReader`], same exact scope
//!   match, rows as they are now — see that module's pinning note), in row-id
//!   order, streamed into the `syncular-sqlite-image` builder: stored
//!   payloads are decoded with the table layout, never re-validated. The
//!   file lives in a private directory under `<data directory>/base/pgsql_tmp`
//!   (Postgres clears `pgsql_tmp*` at startup, so a crash leaves nothing) and
//!   goes when the [`BuiltImage`] is dropped.
//!
//! Intended call sequence in the bootstrap (not wired here): offered →
//! reuse lookup of an unexpired publication for (partition, epoch, table,
//! schemaVersion, mediaType 2, scopeDigest, asOfCommitSeq, from the table
//! start, whole table) → on a miss, [`crate::engine::pull::bootstrap::image::snapshot_exceeds_one_page`] → on
//! `true`, [`build_image`] → store the bytes from [`BuiltImage::reader`]
//! under [`BuiltImage::segment_id`] → publish → `SEGMENT_REF` (mediaType 2,
//! no `rowCursor` / `nextRowCursor`) and the table is done (no token).
//! `build_image` answering `None` (an unrepresentable snapshot) → rows lane.

use std::ffi::CStr;
use std::io::Read;
use std::path::PathBuf;

use syncular_protocol::scopes::ScopeMap;
use syncular_sqlite_image::{ImageBuilder, ImageError, ImageFile, ImageSpec};

use crate::engine::error::{EngineError, EngineResult};
use crate::engine::schema::RegisteredTable;
use crate::engine::scope_match::{candidate_key, ScopeMatcher};
use crate::store::pull::bootstrap_page::{PageQuery, PageReader, PageRowData};

/// Candidates read per store call (bounds SPI memory, as the rows lane).
const IMAGE_BATCH: i64 = 1000;

/// What an image covers: one subscription's table at the bootstrap pin.
#[derive(Debug, Clone, Copy)]
pub struct ImageRequest<'a> {
    /// Host partition.
    pub partition: &'a str,
    /// The subscription's table.
    pub table: &'a RegisteredTable,
    /// Effective scopes of the subscription (§3.2).
    pub effective: &'a ScopeMap,
    /// Registered schema version the rows are encoded for
    /// (`_syncular_segment.schemaVersion`).
    pub schema_version: i32,
    /// The bootstrap pin (§4.7; `_syncular_segment.asOfCommitSeq`).
    pub as_of_commit_seq: i64,
    /// The subscription's scope digest (§3.5; `_syncular_segment.scopeDigest`).
    pub scope_digest: &'a str,
}

/// A finished image on local disk: what `SEGMENT_REF` and the segment store
/// need. Dropping it removes the file.
#[derive(Debug)]
pub struct BuiltImage {
    file: ImageFile,
}

impl BuiltImage {
    /// `segmentId`: `"sha256:"` + lowercase hex SHA-256 of the file (§5.1).
    pub fn segment_id(&self) -> &str {
        self.file.segment_id()
    }

    /// File size in bytes (`SEGMENT_REF.byteLength`).
    pub fn byte_length(&self) -> i64 {
        i64::try_from(self.file.byte_length()).unwrap_or(i64::MAX)
    }

    /// Data rows (`SEGMENT_REF.rowCount`).
    pub fn row_count(&self) -> i64 {
        i64::try_from(self.file.row_count()).unwrap_or(i64::MAX)
    }

    /// A reader over the file's bytes from the start, to be consumed in
    /// chunks (e.g. by the segment store). Errors: `syncular.internal` when
    /// the file cannot be opened.
    pub fn reader(&self) -> EngineResult<impl Read> {
        self.file
            .reader()
            .map_err(|e| EngineError::internal(format!("sqlite image file cannot be opened: {e}")))
    }
}

/// Builds the §5.3 image of `req`: every matching row of the table in row-id
/// order with its `_sync_version`, and the `_syncular_segment` row. Memory
/// stays bounded (one batch of stored rows plus SQLite's capped page cache);
/// the bytes land in a temporary file. `Ok(None)` when the snapshot cannot
/// be an image without changing data (a NaN float, a table or column name
/// SQLite reserves or folds together): serve the rows lane instead.
/// Errors: store failures; a stored payload that does not decode with the
/// layout, disk or SQLite failures (`syncular.internal`, SQLSTATE XX000).
pub fn build_image(req: &ImageRequest<'_>) -> EngineResult<Option<BuiltImage>> {
    let spec = ImageSpec {
        table: req.table.name().to_owned(),
        layout: req.table.layout().clone(),
        primary_key_index: req.table.table.primary_key_index,
        schema_version: req.schema_version,
        as_of_commit_seq: req.as_of_commit_seq,
        scope_digest: req.scope_digest.to_owned(),
    };
    let name = req.table.name();
    let failed = |e: ImageError| match e {
        ImageError::Unrepresentable(_) => None,
        other => Some(EngineError::internal(format!("sqlite image of table {name:?}: {other}"))),
    };
    let parent = temp_parent()?;
    let mut builder = match ImageBuilder::create(&parent, spec) {
        Ok(b) => b,
        Err(e) => return failed(e).map_or(Ok(None), Err),
    };
    let mut refused: Option<ImageError> = None;
    scan_matching(req.partition, req.table, req.effective, None, |data| {
        match builder.push_payload(data.server_version, &data.payload) {
            Ok(()) => true,
            Err(e) => {
                refused = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = refused {
        return failed(e).map_or(Ok(None), Err);
    }
    match builder.finish() {
        Ok(file) => Ok(Some(BuiltImage { file })),
        Err(e) => failed(e).map_or(Ok(None), Err),
    }
}

/// Walks the matching rows of `table` from the table start in row-id order
/// (the rows lane's keyset walk and exact scope match), calling `visit` per
/// row, until the table ends, `max` matching rows were visited, or `visit`
/// answers `false`. Checks for query cancel between batches.
pub fn scan_matching(
    partition: &str,
    table: &RegisteredTable,
    effective: &ScopeMap,
    max: Option<u64>,
    mut visit: impl FnMut(&PageRowData) -> bool,
) -> EngineResult<()> {
    let Some((variable, values)) = candidate_key(effective) else { return Ok(()) };
    let mut cursor: Option<String> = None;
    let mut visited = 0u64;
    let mut reader = PageReader::new();
    let mut scopes = ScopeMatcher::default();
    loop {
        pgrx::check_for_interrupts!();
        let batch = match max {
            Some(m) => i64::try_from(m - visited).unwrap_or(IMAGE_BATCH).clamp(1, IMAGE_BATCH),
            None => IMAGE_BATCH,
        };
        let candidates = reader.read(&PageQuery {
            partition,
            app_table: &table.qualified_name,
            table: table.name(),
            variable,
            values,
            after_row_id: cursor.as_deref(),
            candidate_limit: batch,
        })?;
        let exhausted = (candidates.len() as i64) < batch;
        for candidate in candidates {
            cursor = Some(candidate.row_id);
            let Some(data) = candidate.data else { continue };
            if !scopes.matches(&data.scopes_json, effective)? {
                continue;
            }
            if !visit(&data) {
                return Ok(());
            }
            visited += 1;
            if max.is_some_and(|m| visited >= m) {
                return Ok(());
            }
        }
        if exhausted {
            return Ok(());
        }
    }
}

/// `<data directory>/base/pgsql_tmp`, created when missing (Postgres creates
/// it lazily for its own temp files).
fn temp_parent() -> EngineResult<PathBuf> {
    // SAFETY: `DataDir` is set once at backend start and never freed.
    let data_dir = unsafe {
        let p = pgrx::pg_sys::DataDir;
        if p.is_null() {
            return Err(EngineError::internal("the data directory is unknown"));
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    let dir = PathBuf::from(data_dir).join("base").join("pgsql_tmp");
    std::fs::create_dir_all(&dir)
        .map_err(|e| EngineError::internal(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}
