//! SSG2 rows segments (§5.2): a self-identifying binary file of one table's
//! rows at a snapshot, streamed as row blocks.
//!
//! ```text
//! "SSG2" | formatVersion u16 = 1 | flags u16 = 0
//! table str | schemaVersion i32 | u16 count × (name str, type u8, flags u8)
//! blocks: (rowCount u32 ≥ 1, byteLength u32, rowCount × (serverVersion i64 ≥ 1, row))*
//! end marker: rowCount u32 = 0, nothing after it
//! ```
//!
//! Decoding ([`validate_rows_segment`], [`decode_rows_segment`]) performs
//! structural validation only and fails with `sync.invalid_request` for
//! exactly the closed §5.2 list: bad magic, unsupported `formatVersion`,
//! non-zero flags, reserved column flag bits, an unknown type tag, a block
//! whose rows do not consume exactly `byteLength`, a `serverVersion` < 1,
//! row-codec violations (§2.4), truncation, a missing end marker, trailing
//! bytes after it. The receiver-side column-table comparison
//! ([`check_column_table`]) is the only source of `sync.schema_mismatch`.
//!
//! Encoding: [`SegmentEncoder`] streams header, blocks and end marker into
//! any `std::io::Write`, cutting blocks at [`BLOCK_MAX_ROWS`] rows or
//! [`BLOCK_TARGET_BYTES`] bytes, whichever comes first; a whole decoded
//! [`RowsSegment`] re-encodes byte-identically with [`encode_rows_segment`].

use crate::errors::{ErrorCode, ProtocolError, Result};
use crate::primitives::{Reader, Writer};
use crate::row_codec::{self, ColumnLayout, ColumnType, Row, RowValue, TableLayout, TextCheck};
use serde_json::Value;

/// The four magic bytes `"SSG2"`.
pub const SSG2_MAGIC: [u8; 4] = *b"SSG2";
/// The only `formatVersion` this document specifies.
pub const SSG2_FORMAT_VERSION: u16 = 1;
/// Column-record flag bit 0: nullable. Every other bit is reserved (MUST be 0).
pub const COLUMN_FLAG_NULLABLE: u8 = 0x01;
/// Encoder block cut: at most this many rows per block (§5.2 "~1000 rows").
pub const BLOCK_MAX_ROWS: usize = 1000;
/// Encoder block cut: a block is closed once its rows reach this many bytes
/// (§5.2 "~256 KiB").
pub const BLOCK_TARGET_BYTES: usize = 256 * 1024;

/// The segment header: table, schema version and column table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Table name.
    pub table: String,
    /// Schema version the rows are encoded for.
    pub schema_version: i32,
    /// The column table (order, names, types, nullability).
    pub layout: TableLayout,
}

/// One §5.2 row record: the row's `server_version` (≥ 1) and its values.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentRow {
    /// The row's `server_version` at `asOfCommitSeq` (1..=2^53−1).
    pub server_version: i64,
    /// One slot per column, `None` = NULL.
    pub values: Row,
}

/// A fully decoded rows segment. Block boundaries are part of the canonical
/// bytes and are kept so a re-encode is byte-identical.
#[derive(Debug, Clone, PartialEq)]
pub struct RowsSegment {
    /// Table, schema version and column table.
    pub header: SegmentHeader,
    /// Row blocks in wire order; each holds ≥ 1 row.
    pub blocks: Vec<Vec<SegmentRow>>,
}

fn read_header(r: &mut Reader<'_>) -> Result<SegmentHeader> {
    let magic = r.take(4, "SSG2 magic")?;
    if magic != SSG2_MAGIC {
        return Err(ProtocolError::invalid(format!("bad SSG2 magic {magic:02x?}")));
    }
    let version = r.u16("SSG2 formatVersion")?;
    if version != SSG2_FORMAT_VERSION {
        return Err(ProtocolError::invalid(format!(
            "unsupported SSG2 formatVersion {version}"
        )));
    }
    let flags = r.u16("SSG2 flags")?;
    if flags != 0 {
        return Err(ProtocolError::invalid(format!("SSG2 flags must be 0, got {flags:#06x}")));
    }
    let table = r.str("SSG2 table")?.to_owned();
    let schema_version = r.i32("SSG2 schemaVersion")?;
    let count = usize::from(r.u16("SSG2 column count")?);
    if count.saturating_mul(6) > r.remaining() {
        return Err(ProtocolError::invalid(format!(
            "SSG2 column count {count} exceeds the remaining {} byte(s)",
            r.remaining()
        )));
    }
    let mut columns = Vec::with_capacity(count);
    for _ in 0..count {
        let name = r.str("SSG2 column name")?.to_owned();
        let tag = r.u8("SSG2 column type")?;
        let ty = ColumnType::from_tag(tag).ok_or_else(|| {
            ProtocolError::invalid(format!("unknown column type tag {tag} for column {name:?}"))
        })?;
        let cflags = r.u8("SSG2 column flags")?;
        if cflags & !COLUMN_FLAG_NULLABLE != 0 {
            return Err(ProtocolError::invalid(format!(
                "reserved column flag bits set for column {name:?} ({cflags:#04x})"
            )));
        }
        columns.push(ColumnLayout { name, ty, nullable: cflags & COLUMN_FLAG_NULLABLE != 0 });
    }
    Ok(SegmentHeader { table, schema_version, layout: TableLayout::new(columns) })
}

/// What [`walk_blocks`] reports: a new block of `n` rows, or one row record
/// (its `serverVersion` and a reader positioned at its row-codec bytes).
enum Step<'r, 'a> {
    Block(usize),
    Row(i64, &'r mut Reader<'a>),
}

/// Walks every block, enforcing the block / end-marker rules; `visit` must
/// consume exactly one row from the reader of each `Step::Row`.
fn walk_blocks<'a>(
    r: &mut Reader<'a>,
    mut visit: impl FnMut(Step<'_, 'a>) -> Result<()>,
) -> Result<()> {
    loop {
        let row_count = r.u32("SSG2 block rowCount (or end marker)")? as usize;
        if row_count == 0 {
            if !r.is_empty() {
                return Err(ProtocolError::invalid(format!(
                    "{} trailing byte(s) after the SSG2 end marker",
                    r.remaining()
                )));
            }
            return Ok(());
        }
        let len = r.u32("SSG2 block byteLength")? as usize;
        let bytes = r.take(len, "SSG2 block rows")?;
        // Each record needs ≥ 8 bytes (serverVersion), so a hostile rowCount
        // is caught before anything is sized from it.
        if row_count > bytes.len() / 8 {
            return Err(ProtocolError::invalid(format!(
                "SSG2 block rowCount {row_count} cannot fit in byteLength {len}"
            )));
        }
        visit(Step::Block(row_count))?;
        let mut br = Reader::new(bytes);
        for _ in 0..row_count {
            let sv = br.i64("row serverVersion")?;
            if sv < 1 {
                return Err(ProtocolError::invalid(format!(
                    "row serverVersion must be >= 1, got {sv}"
                )));
            }
            visit(Step::Row(sv, &mut br))?;
        }
        if !br.is_empty() {
            return Err(ProtocolError::invalid(format!(
                "SSG2 block rows leave {} of byteLength {len} byte(s) unconsumed",
                br.remaining()
            )));
        }
    }
}

/// Structural validation of a whole SSG2 segment (§5.2) without allocating
/// row values. Accepts exactly what [`decode_rows_segment`] accepts.
/// Errors: `sync.invalid_request` (the closed §5.2 list); never
/// `sync.schema_mismatch`.
pub fn validate_rows_segment(bytes: &[u8]) -> Result<()> {
    validate_rows_segment_header(bytes).map(|_| ())
}

/// Like [`validate_rows_segment`] and returns the header.
pub fn validate_rows_segment_header(bytes: &[u8]) -> Result<SegmentHeader> {
    let mut r = Reader::new(bytes);
    let header = read_header(&mut r)?;
    let layout = &header.layout;
    walk_blocks(&mut r, |step| match step {
        Step::Block(_) => Ok(()),
        Step::Row(_, br) => row_codec::skip_row(br, layout),
    })?;
    Ok(header)
}

/// Decodes a whole SSG2 segment (§5.2) into typed rows.
/// Errors: `sync.invalid_request` (the closed §5.2 list).
pub fn decode_rows_segment(bytes: &[u8]) -> Result<RowsSegment> {
    let mut r = Reader::new(bytes);
    let header = read_header(&mut r)?;
    let layout = &header.layout;
    let mut blocks: Vec<Vec<SegmentRow>> = Vec::new();
    walk_blocks(&mut r, |step| {
        match step {
            Step::Block(n) => blocks.push(Vec::with_capacity(n)),
            Step::Row(server_version, br) => {
                let values = row_codec::read_row(br, layout)?;
                if let Some(b) = blocks.last_mut() {
                    b.push(SegmentRow { server_version, values });
                }
            }
        }
        Ok(())
    })?;
    Ok(RowsSegment { header, blocks })
}

/// The receiver-side check of §5.2: the segment's column table must equal
/// the generated schema for (`table`, `schemaVersion`) — order, names, types,
/// nullability. Errors: `sync.schema_mismatch` describing the first
/// difference.
pub fn check_column_table(
    header: &SegmentHeader,
    table: &str,
    schema_version: i32,
    expected: &TableLayout,
) -> Result<()> {
    let mismatch = |m: String| ProtocolError::new(ErrorCode::SchemaMismatch, m);
    if header.table != table {
        return Err(mismatch(format!("segment is for table {:?}, expected {table:?}", header.table)));
    }
    if header.schema_version != schema_version {
        return Err(mismatch(format!(
            "segment is for schemaVersion {}, expected {schema_version}",
            header.schema_version
        )));
    }
    let got = &header.layout.columns;
    let want = &expected.columns;
    for i in 0..got.len().max(want.len()) {
        match (got.get(i), want.get(i)) {
            (Some(g), Some(w)) if g == w => {}
            (g, w) => {
                let show = |c: Option<&ColumnLayout>| {
                    c.map_or("nothing".to_owned(), |c| {
                        format!(
                            "{:?} {}{}",
                            c.name,
                            c.ty.name(),
                            if c.nullable { " nullable" } else { "" }
                        )
                    })
                };
                return Err(mismatch(format!(
                    "column {i} of table {table:?} is {}, generated schema has {}",
                    show(g),
                    show(w)
                )));
            }
        }
    }
    Ok(())
}

fn write_header(w: &mut Writer, header: &SegmentHeader) -> Result<()> {
    w.raw(&SSG2_MAGIC);
    w.u16(SSG2_FORMAT_VERSION);
    w.u16(0);
    w.str(&header.table, "SSG2 table")?;
    w.i32(header.schema_version);
    let n = u16::try_from(header.layout.columns.len())
        .map_err(|_| ProtocolError::invalid("SSG2 column table exceeds 65535 columns"))?;
    w.u16(n);
    for c in &header.layout.columns {
        w.str(&c.name, "SSG2 column name")?;
        w.u8(c.ty.tag());
        w.u8(if c.nullable { COLUMN_FLAG_NULLABLE } else { 0 });
    }
    Ok(())
}

/// Canonically encodes a whole segment, keeping its block boundaries.
/// Errors: `sync.invalid_request` for an empty block (it would read as the
/// end marker), a `serverVersion` outside 1..=2^53−1, or a row that does not
/// fit the layout ([`row_codec::write_row`], including the JSON / BlobRef
/// text checks).
pub fn encode_rows_segment(seg: &RowsSegment) -> Result<Vec<u8>> {
    encode_rows_segment_with(seg, TextCheck::Full)
}

/// [`encode_rows_segment`] without re-parsing `json` / `blob_ref` texts
/// ([`TextCheck::Trusted`]): for segments this crate decoded or built from
/// validated values. Every structural check still applies.
pub fn encode_rows_segment_trusted(seg: &RowsSegment) -> Result<Vec<u8>> {
    encode_rows_segment_with(seg, TextCheck::Trusted)
}

fn encode_rows_segment_with(seg: &RowsSegment, texts: TextCheck) -> Result<Vec<u8>> {
    // Rows are written in place and each block's byteLength back-patched;
    // after the first block the output is reserved for the rest by that
    // block's bytes-per-row, so a large segment reallocates about once.
    let layout = &seg.header.layout;
    let total_rows: usize = seg.blocks.iter().map(Vec::len).sum();
    let mut w = Writer::with_capacity(64 + layout.columns.len() * 16 + total_rows.min(BLOCK_MAX_ROWS) * 64);
    write_header(&mut w, &seg.header)?;
    let mut rows_done = 0usize;
    for rows in &seg.blocks {
        if rows.is_empty() {
            return Err(ProtocolError::invalid("an SSG2 block must hold at least one row"));
        }
        w.len_prefix(rows.len(), "SSG2 block rowCount")?;
        let len_at = w.len();
        w.u32(0);
        let start = w.len();
        for row in rows {
            check_server_version(row.server_version)?;
            row_codec::write_row_after(&mut w, layout, &row.server_version.to_le_bytes(), &row.values, texts)?;
        }
        let block_len = w.len() - start;
        let len = u32::try_from(block_len)
            .map_err(|_| ProtocolError::invalid("SSG2 block exceeds u32 bytes"))?;
        w.patch_u32(len_at, len)?;
        if rows_done == 0 {
            let rest = total_rows - rows.len();
            w.reserve((block_len / rows.len() + 1) * rest + rest / 8 + 64);
        }
        rows_done += rows.len();
    }
    w.u32(0);
    Ok(w.into_vec())
}

fn check_server_version(v: i64) -> Result<()> {
    if !(1..=crate::primitives::MAX_SAFE_INTEGER).contains(&v) {
        return Err(ProtocolError::invalid(format!(
            "row serverVersion must be in 1..=2^53−1, got {v}"
        )));
    }
    Ok(())
}

fn write_server_version(w: &mut Writer, v: i64) -> Result<()> {
    check_server_version(v)?;
    w.i64(v, "row serverVersion")
}

/// §11.1 rule 8 rendering: `{"magic":"SSG2","formatVersion":1,"table",
/// "schemaVersion","columns":[{name,type,nullable}],"blocks":[[{
/// "serverVersion","values":{name→value}}]]}`.
pub fn render_rows_segment(seg: &RowsSegment) -> Value {
    let layout = &seg.header.layout;
    let columns = row_codec::render_column_table(layout);
    let blocks: Vec<Value> = seg
        .blocks
        .iter()
        .map(|b| {
            Value::Array(
                b.iter()
                    .map(|r| {
                        serde_json::json!({
                            "serverVersion": r.server_version,
                            "values": row_codec::render_row(layout, &r.values),
                        })
                    })
                    .collect(),
            )
        })
        .collect();
    serde_json::json!({
        "magic": "SSG2",
        "formatVersion": SSG2_FORMAT_VERSION,
        "table": seg.header.table,
        "schemaVersion": seg.header.schema_version,
        "columns": columns,
        "blocks": blocks,
    })
}

/// Streaming SSG2 encoder (§5.2, §1.4): writes the header on construction,
/// buffers only the current block, flushes it to the sink at
/// [`BLOCK_MAX_ROWS`] rows or once it reaches [`BLOCK_TARGET_BYTES`] bytes,
/// and writes the end marker in [`SegmentEncoder::finish`]. Memory held:
/// one block (≈ 256 KiB plus one row).
///
/// Sink failures surface as [`SegmentWriteError::Io`]; invalid rows as
/// [`SegmentWriteError::Protocol`] (`sync.invalid_request`), leaving the
/// open block unchanged so the caller may skip the row and continue.
pub struct SegmentEncoder<W: std::io::Write> {
    sink: W,
    layout: TableLayout,
    block: Writer,
    block_rows: usize,
    rows_total: u64,
    bytes_total: u64,
    max_rows: usize,
    target_bytes: usize,
}

/// Error of [`SegmentEncoder`]: the sink failed, or a row was invalid.
#[derive(Debug)]
pub enum SegmentWriteError {
    /// The sink's `write_all` / `flush` failed.
    Io(std::io::Error),
    /// An invalid row or header (`sync.invalid_request`).
    Protocol(ProtocolError),
}

impl std::fmt::Display for SegmentWriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SegmentWriteError::Io(e) => write!(f, "segment sink: {e}"),
            SegmentWriteError::Protocol(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SegmentWriteError {}

impl From<std::io::Error> for SegmentWriteError {
    fn from(e: std::io::Error) -> Self {
        SegmentWriteError::Io(e)
    }
}

impl From<ProtocolError> for SegmentWriteError {
    fn from(e: ProtocolError) -> Self {
        SegmentWriteError::Protocol(e)
    }
}

impl<W: std::io::Write> SegmentEncoder<W> {
    /// Writes the magic, version, flags and column table of `header` to
    /// `sink` and returns an encoder ready for rows.
    pub fn new(mut sink: W, header: &SegmentHeader) -> std::result::Result<Self, SegmentWriteError> {
        let mut w = Writer::with_capacity(64 + header.layout.columns.len() * 16);
        write_header(&mut w, header)?;
        sink.write_all(w.as_slice())?;
        Ok(SegmentEncoder {
            sink,
            layout: header.layout.clone(),
            block: Writer::with_capacity(BLOCK_TARGET_BYTES + 4096),
            block_rows: 0,
            rows_total: 0,
            bytes_total: w.len() as u64,
            max_rows: BLOCK_MAX_ROWS,
            target_bytes: BLOCK_TARGET_BYTES,
        })
    }

    /// Overrides the block-cut thresholds (rows ≥ 1, bytes ≥ 1); for tests
    /// and tuning. Takes effect from the next row.
    pub fn with_block_limits(mut self, max_rows: usize, target_bytes: usize) -> Self {
        self.max_rows = max_rows.max(1);
        self.target_bytes = target_bytes.max(1);
        self
    }

    /// Appends a row given as typed values (validated by
    /// [`row_codec::write_row`]).
    pub fn push_values(
        &mut self,
        server_version: i64,
        values: &[Option<RowValue>],
    ) -> std::result::Result<(), SegmentWriteError> {
        self.push_values_with(server_version, values, TextCheck::Full)
    }

    /// [`SegmentEncoder::push_values`] with [`TextCheck::Trusted`] (no JSON
    /// re-parse of `json` / `blob_ref` texts).
    pub fn push_values_trusted(
        &mut self,
        server_version: i64,
        values: &[Option<RowValue>],
    ) -> std::result::Result<(), SegmentWriteError> {
        self.push_values_with(server_version, values, TextCheck::Trusted)
    }

    fn push_values_with(
        &mut self,
        server_version: i64,
        values: &[Option<RowValue>],
        texts: TextCheck,
    ) -> std::result::Result<(), SegmentWriteError> {
        check_server_version(server_version)?;
        // Nothing is appended unless the whole row is valid.
        row_codec::write_row_after(
            &mut self.block,
            &self.layout,
            &server_version.to_le_bytes(),
            values,
            texts,
        )?;
        self.row_done()
    }

    /// Appends a row given as an already-encoded row-codec payload (the
    /// verbatim payload the server stores). The payload is validated against
    /// the layout with [`row_codec::validate_row`] first.
    pub fn push_payload(
        &mut self,
        server_version: i64,
        payload: &[u8],
    ) -> std::result::Result<(), SegmentWriteError> {
        row_codec::validate_row(&self.layout, payload)?;
        self.push_payload_trusted(server_version, payload)
    }

    /// Like [`SegmentEncoder::push_payload`] without re-validating the
    /// payload: for payloads this crate encoded or validated before storage.
    pub fn push_payload_trusted(
        &mut self,
        server_version: i64,
        payload: &[u8],
    ) -> std::result::Result<(), SegmentWriteError> {
        write_server_version(&mut self.block, server_version)?;
        self.block.raw(payload);
        self.row_done()
    }

    fn row_done(&mut self) -> std::result::Result<(), SegmentWriteError> {
        self.block_rows += 1;
        self.rows_total += 1;
        if self.block_rows >= self.max_rows || self.block.len() >= self.target_bytes {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> std::result::Result<(), SegmentWriteError> {
        if self.block_rows == 0 {
            return Ok(());
        }
        let len = u32::try_from(self.block.len())
            .map_err(|_| ProtocolError::invalid("SSG2 block exceeds u32 bytes"))?;
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&(self.block_rows as u32).to_le_bytes());
        head[4..].copy_from_slice(&len.to_le_bytes());
        self.sink.write_all(&head)?;
        self.sink.write_all(self.block.as_slice())?;
        self.block.clear();
        self.bytes_total += 8 + u64::from(len);
        self.block_rows = 0;
        Ok(())
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.rows_total
    }

    /// Bytes written to the sink so far (excluding the open block).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_total
    }

    /// Flushes the open block, writes the end marker and returns the sink.
    pub fn finish(mut self) -> std::result::Result<W, SegmentWriteError> {
        self.flush_block()?;
        self.sink.write_all(&0u32.to_le_bytes())?;
        self.sink.flush()?;
        Ok(self.sink)
    }
}
