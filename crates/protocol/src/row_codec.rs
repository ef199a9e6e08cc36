//! The §2.4 row codec: one row of a synced table as a null bitmap followed by
//! the non-null values, positionally in schema-IR declaration order.
//!
//! Shapes:
//! - [`ColumnType`]: the eight wire type tags (1 `string` … 8 `crdt`).
//! - [`TableLayout`]: the ordered column list (name, tag, nullable) a codec
//!   is driven by; built from the schema IR ([`crate::schema_ir`]) or from an
//!   SSG2 column table ([`crate::segment`]).
//! - [`RowValue`] / [`Row`]: a decoded row, `None` = SQL NULL.
//!
//! Every decode failure — truncation, a null bit on a non-nullable column, a
//! set padding bit, a non-bool byte, an `i64` outside ±(2^53−1), malformed
//! UTF-8, a `json` value that does not parse, a `blob_ref` that violates the
//! §5.9.1 shape, trailing bytes — is `sync.invalid_request` (the "row-codec
//! violations" of §5.2's closed list). Decoders never panic on any input.

use crate::bitmap;
use crate::errors::{ErrorCode, ProtocolError, Result};
use crate::json_text::is_json_document;
use crate::primitives::{validate_json, Reader, Writer, MAX_SAFE_INTEGER};
use serde_json::Value;

/// A §2.4 column type; the discriminant is the wire tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ColumnType {
    /// Tag 1: `str`.
    String = 1,
    /// Tag 2: `i64` within ±(2^53−1).
    Integer = 2,
    /// Tag 3: `f64` (any IEEE-754 bit pattern).
    Float = 3,
    /// Tag 4: `bool` byte (0x00 / 0x01).
    Boolean = 4,
    /// Tag 5: `str` holding one JSON document, kept byte-for-byte.
    Json = 5,
    /// Tag 6: `bytes`.
    Bytes = 6,
    /// Tag 7: `str` holding a canonical BlobRef document (§5.9.1).
    BlobRef = 7,
    /// Tag 8: `bytes` holding an opaque CRDT update/state (§5.10).
    Crdt = 8,
}

impl ColumnType {
    /// All eight types in tag order.
    pub const ALL: [ColumnType; 8] = [
        ColumnType::String,
        ColumnType::Integer,
        ColumnType::Float,
        ColumnType::Boolean,
        ColumnType::Json,
        ColumnType::Bytes,
        ColumnType::BlobRef,
        ColumnType::Crdt,
    ];

    /// The wire tag (1–8).
    pub fn tag(self) -> u8 {
        self as u8
    }

    /// The type for a wire tag; `None` for any other byte.
    pub fn from_tag(tag: u8) -> Option<ColumnType> {
        match tag {
            1..=8 => Some(ColumnType::ALL[usize::from(tag) - 1]),
            _ => None,
        }
    }

    /// The IR / §11.1 name (`"string"`, …, `"blob_ref"`, `"crdt"`).
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::String => "string",
            ColumnType::Integer => "integer",
            ColumnType::Float => "float",
            ColumnType::Boolean => "boolean",
            ColumnType::Json => "json",
            ColumnType::Bytes => "bytes",
            ColumnType::BlobRef => "blob_ref",
            ColumnType::Crdt => "crdt",
        }
    }

    /// The type for an IR name; `None` for anything outside the eight names.
    pub fn from_name(name: &str) -> Option<ColumnType> {
        ColumnType::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// One column of a [`TableLayout`]: what the wire carries about it (§5.2
/// column record: name, type tag, nullable flag).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ColumnLayout {
    /// Column name (schema-IR identifier).
    pub name: String,
    /// Wire type tag.
    pub ty: ColumnType,
    /// May the null bitmap mark this column NULL?
    pub nullable: bool,
}

impl ColumnLayout {
    /// A column record.
    pub fn new(name: impl Into<String>, ty: ColumnType, nullable: bool) -> Self {
        ColumnLayout { name: name.into(), ty, nullable }
    }
}

/// The positional column list a row codec is driven by, in schema-IR
/// declaration order (§2.4). Two layouts are equal iff order, names, types
/// and nullability all match — exactly the §5.2 column-table comparison.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TableLayout {
    /// Columns in declaration (wire) order.
    pub columns: Vec<ColumnLayout>,
}

impl TableLayout {
    /// A layout over `columns` in declaration order.
    pub fn new(columns: Vec<ColumnLayout>) -> Self {
        TableLayout { columns }
    }

    /// Number of columns.
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    /// No columns at all (a zero-byte bitmap).
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Position of the column called `name` (names are unique in a valid IR).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Null-bitmap size in bytes: `ceil(columnCount / 8)`.
    pub fn bitmap_len(&self) -> usize {
        self.columns.len().div_ceil(8)
    }
}

/// A non-NULL column value. `Json` and `BlobRef` hold the raw JSON text
/// exactly as it was on the wire (never re-serialized).
#[derive(Debug, Clone, PartialEq)]
pub enum RowValue {
    /// Tag 1: UTF-8 text.
    String(String),
    /// Tag 2: integer within ±(2^53−1).
    Integer(i64),
    /// Tag 3: any IEEE-754 binary64 (NaN payloads preserved).
    Float(f64),
    /// Tag 4.
    Boolean(bool),
    /// Tag 5: raw JSON document text, byte-for-byte.
    Json(String),
    /// Tag 6: raw bytes (also the ciphertext envelope of an encrypted column).
    Bytes(Vec<u8>),
    /// Tag 7: raw canonical BlobRef JSON text (§5.9.1).
    BlobRef(String),
    /// Tag 8: opaque CRDT update/state bytes (§5.10).
    Crdt(Vec<u8>),
}

/// One decoded row: one slot per layout column, `None` = NULL.
pub type Row = Vec<Option<RowValue>>;

impl RowValue {
    /// Whether `self` and `other` encode to the same row-codec bytes: `==`,
    /// except that floats compare by their bits (a NaN is identical to the
    /// same NaN; `0.0` and `-0.0` differ) — what "the value changed" means
    /// for the per-column versions of a write.
    pub fn identical(&self, other: &RowValue) -> bool {
        match (self, other) {
            (RowValue::Float(a), RowValue::Float(b)) => a.to_bits() == b.to_bits(),
            (a, b) => a == b,
        }
    }

    /// The column type this value encodes as.
    pub fn column_type(&self) -> ColumnType {
        match self {
            RowValue::String(_) => ColumnType::String,
            RowValue::Integer(_) => ColumnType::Integer,
            RowValue::Float(_) => ColumnType::Float,
            RowValue::Boolean(_) => ColumnType::Boolean,
            RowValue::Json(_) => ColumnType::Json,
            RowValue::Bytes(_) => ColumnType::Bytes,
            RowValue::BlobRef(_) => ColumnType::BlobRef,
            RowValue::Crdt(_) => ColumnType::Crdt,
        }
    }

    /// The text of a `string` value (e.g. a primary key or scope column).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            RowValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// §11.1 rendering of one value: strings and numbers as JSON, `bytes` and
    /// `crdt` as standard base64, `json` / `blob_ref` embedded parsed (rule 7),
    /// non-finite floats as `null` (rule 10). A `json` text serde_json cannot
    /// represent (a lone surrogate escape, which RFC 8259 admits) renders as
    /// its raw string.
    pub fn render(&self) -> Value {
        match self {
            RowValue::String(s) => Value::String(s.clone()),
            RowValue::Integer(v) => Value::from(*v),
            RowValue::Float(v) => serde_json::Number::from_f64(*v).map_or(Value::Null, Value::Number),
            RowValue::Boolean(v) => Value::Bool(*v),
            RowValue::Json(j) | RowValue::BlobRef(j) => {
                serde_json::from_str(j).unwrap_or_else(|_| Value::String(j.clone()))
            }
            RowValue::Bytes(b) | RowValue::Crdt(b) => Value::String(base64_encode(b)),
        }
    }

    /// Inverse of [`RowValue::render`] for a column of type `ty`: JSON
    /// strings for `string`, integers within ±(2^53−1) for `integer`, any
    /// number for `float`, base64 for `bytes`/`crdt`, any JSON (serialized
    /// compactly) for `json`, a §5.9.1 object for `blob_ref`.
    /// Errors: `sync.invalid_request` naming the column.
    pub fn from_json(ty: ColumnType, v: &Value, column: &str) -> Result<RowValue> {
        let bad = |want: &str| {
            ProtocolError::invalid(format!("column {column:?}: expected {want}, got {v}"))
        };
        Ok(match ty {
            ColumnType::String => RowValue::String(v.as_str().ok_or_else(|| bad("a string"))?.to_owned()),
            ColumnType::Integer => {
                let n = v.as_i64().ok_or_else(|| bad("an integer"))?;
                if !(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&n) {
                    return Err(bad("an integer within ±(2^53−1)"));
                }
                RowValue::Integer(n)
            }
            ColumnType::Float => RowValue::Float(v.as_f64().ok_or_else(|| bad("a number"))?),
            ColumnType::Boolean => RowValue::Boolean(v.as_bool().ok_or_else(|| bad("a boolean"))?),
            ColumnType::Json => RowValue::Json(v.to_string()),
            ColumnType::BlobRef => {
                let text = v.to_string();
                validate_blob_ref(&text, column)?;
                RowValue::BlobRef(text)
            }
            ColumnType::Bytes | ColumnType::Crdt => {
                let s = v.as_str().ok_or_else(|| bad("a base64 string"))?;
                let b = base64_decode(s).ok_or_else(|| bad("standard base64"))?;
                if ty == ColumnType::Bytes {
                    RowValue::Bytes(b)
                } else {
                    RowValue::Crdt(b)
                }
            }
        })
    }
}

/// Standard (padded) base64, the §11.1 rule-4 form.
pub fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes standard padded base64; `None` on any malformed input.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// Checks a `blob_ref` text against the canonical BlobRef shape (§5.9.1):
/// a JSON object whose keys are a subset of `blobId`, `byteLength`,
/// `mediaType`, `name` in exactly that order, each at most once; `blobId` =
/// `"sha256:"` + 64 lowercase hex (required); `byteLength` an integer in
/// 0..=2^53−1 (required); `mediaType` / `name` strings when present.
/// Errors: `sync.invalid_request`.
pub fn validate_blob_ref(text: &str, what: &str) -> Result<()> {
    const KEYS: [&str; 4] = ["blobId", "byteLength", "mediaType", "name"];
    let bad = |why: &str| ProtocolError::invalid(format!("{what}: blob_ref {why} (§5.9.1)"));
    // Walk the raw object entry by entry so duplicate keys are seen (a map
    // would silently collapse them).
    struct Entries(Vec<(String, Value)>);
    impl<'de> serde::Deserialize<'de> for Entries {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Entries;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut m: A,
                ) -> std::result::Result<Entries, A::Error> {
                    let mut out = Vec::new();
                    while let Some((k, v)) = m.next_entry::<String, Value>()? {
                        if out.len() >= 4 {
                            return Err(serde::de::Error::custom("too many keys"));
                        }
                        out.push((k, v));
                    }
                    Ok(Entries(out))
                }
            }
            d.deserialize_any(V)
        }
    }
    let Entries(entries) = match serde_json::from_str::<Entries>(text) {
        Ok(e) => e,
        Err(_) => {
            validate_json(text, what)?;
            return Err(bad("is not a JSON object with at most the four known keys"));
        }
    };
    let mut next = 0usize;
    let (mut has_id, mut has_len) = (false, false);
    for (k, v) in &entries {
        let pos = KEYS
            .iter()
            .position(|c| c == k)
            .ok_or_else(|| bad(&format!("has unknown key {k:?}")))?;
        if pos < next {
            return Err(bad("keys are duplicated or not in canonical order"));
        }
        next = pos + 1;
        match pos {
            0 => {
                let ok = v.as_str().is_some_and(|s| {
                    s.strip_prefix("sha256:").is_some_and(|h| {
                        h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                    })
                });
                if !ok {
                    return Err(bad("blobId must be \"sha256:<64 lowercase hex>\""));
                }
                has_id = true;
            }
            1 => {
                let ok = match v {
                    Value::Number(n) => n.as_u64().is_some_and(|n| n <= MAX_SAFE_INTEGER as u64)
                        || n.as_i64() == Some(0),
                    _ => false,
                };
                if !ok {
                    return Err(bad("byteLength must be an integer in 0..=2^53−1"));
                }
                has_len = true;
            }
            _ => {
                if !v.is_string() {
                    return Err(bad(&format!("{k} must be a string")));
                }
            }
        }
    }
    if !has_id {
        return Err(bad("is missing blobId"));
    }
    if !has_len {
        return Err(bad("is missing byteLength"));
    }
    Ok(())
}

fn not_json(what: &str) -> ProtocolError {
    ProtocolError::invalid(format!("{what}: not a JSON document (§2.4 tag 5)"))
}

/// A tag-5 value: a `str` that is one JSON document ([`is_json_document`],
/// the same acceptance as `primitives::validate_json`, without allocating).
fn json_str<'a>(r: &mut Reader<'a>, what: &str) -> Result<&'a str> {
    let s = r.str(what)?;
    if is_json_document(s) {
        Ok(s)
    } else {
        Err(not_json(what))
    }
}

fn read_bitmap<'a>(r: &mut Reader<'a>, layout: &TableLayout) -> Result<&'a [u8]> {
    let n = layout.columns.len();
    let bitmap = r.take(layout.bitmap_len(), "row null bitmap")?;
    if bitmap::padding_set(bitmap, n) {
        return Err(ProtocolError::invalid(
            "row null bitmap has a set padding bit (§2.4)",
        ));
    }
    Ok(bitmap)
}

#[inline]
fn is_null(bitmap: &[u8], i: usize, col: &ColumnLayout) -> Result<bool> {
    if !bitmap::bit(bitmap, i) {
        return Ok(false);
    }
    if !col.nullable {
        return Err(ProtocolError::invalid(format!(
            "null bit set for non-nullable column {:?} (§2.4)",
            col.name
        )));
    }
    Ok(true)
}

/// Reads one non-NULL value of `col` with every §2.4 check (UTF-8, safe
/// integer, bool byte, JSON text, §5.9.1 BlobRef shape).
pub(crate) fn read_value(r: &mut Reader<'_>, col: &ColumnLayout) -> Result<RowValue> {
    let what = col.name.as_str();
    Ok(match col.ty {
        ColumnType::String => RowValue::String(r.str(what)?.to_owned()),
        ColumnType::Integer => RowValue::Integer(r.i64(what)?),
        ColumnType::Float => RowValue::Float(r.f64(what)?),
        ColumnType::Boolean => RowValue::Boolean(r.bool(what)?),
        ColumnType::Json => RowValue::Json(json_str(r, what)?.to_owned()),
        ColumnType::Bytes => RowValue::Bytes(r.bytes(what)?.to_vec()),
        ColumnType::BlobRef => {
            let s = r.str(what)?;
            validate_blob_ref(s, what)?;
            RowValue::BlobRef(s.to_owned())
        }
        ColumnType::Crdt => RowValue::Crdt(r.bytes(what)?.to_vec()),
    })
}

fn skip_value(r: &mut Reader<'_>, col: &ColumnLayout) -> Result<()> {
    let what = col.name.as_str();
    match col.ty {
        ColumnType::String => {
            r.str(what)?;
        }
        ColumnType::Integer => {
            r.i64(what)?;
        }
        ColumnType::Float => {
            r.take(8, what)?;
        }
        ColumnType::Boolean => {
            r.bool(what)?;
        }
        ColumnType::Json => {
            json_str(r, what)?;
        }
        ColumnType::Bytes | ColumnType::Crdt => {
            r.bytes(what)?;
        }
        ColumnType::BlobRef => validate_blob_ref(r.str(what)?, what)?,
    }
    Ok(())
}

/// Reads one row at the reader's position (a row record inside a segment
/// block or a frame). Errors: `sync.invalid_request` (§2.4).
pub fn read_row(r: &mut Reader<'_>, layout: &TableLayout) -> Result<Row> {
    let bitmap = read_bitmap(r, layout)?;
    let mut row = Vec::with_capacity(layout.columns.len());
    for (i, col) in layout.columns.iter().enumerate() {
        if is_null(bitmap, i, col)? {
            row.push(None);
        } else {
            row.push(Some(read_value(r, col)?));
        }
    }
    Ok(row)
}

/// Validates one row at the reader's position without allocating values.
/// Accepts exactly what [`read_row`] accepts.
pub fn skip_row(r: &mut Reader<'_>, layout: &TableLayout) -> Result<()> {
    let bitmap = read_bitmap(r, layout)?;
    for (i, col) in layout.columns.iter().enumerate() {
        if !is_null(bitmap, i, col)? {
            skip_value(r, col)?;
        }
    }
    Ok(())
}

/// [`RowValue::identical`] over nullable slots (NULL is identical to NULL only).
pub fn identical(a: &Option<RowValue>, b: &Option<RowValue>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.identical(b),
        _ => false,
    }
}

/// Decodes a whole row payload (a `COMMIT` change `row`, a push `payload`, a
/// conflict `serverRow`): the row must consume every byte.
/// Errors: `sync.invalid_request` (§2.4).
pub fn decode_row(layout: &TableLayout, payload: &[u8]) -> Result<Row> {
    let mut r = Reader::new(payload);
    let row = read_row(&mut r, layout)?;
    r.finish("row payload")?;
    Ok(row)
}

/// Fast check that `payload` is exactly one canonical row for `layout`
/// (same acceptance as [`decode_row`], no value allocations).
/// Errors: `sync.invalid_request` (§2.4).
pub fn validate_row(layout: &TableLayout, payload: &[u8]) -> Result<()> {
    let mut r = Reader::new(payload);
    skip_row(&mut r, layout)?;
    r.finish("row payload")
}

/// How much an encoder re-checks `json` / `blob_ref` texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextCheck {
    /// Parse every `json` text and shape-check every `blob_ref` (the default).
    Full,
    /// Skip the JSON parse / BlobRef shape check: only for texts this crate
    /// decoded (already validated) or serde_json produced. Types, nullability,
    /// integer range and lengths are still checked.
    Trusted,
}

/// Every check [`write_row`] makes on one value before anything is written.
fn check_value(v: &RowValue, what: &str, texts: TextCheck) -> Result<()> {
    let len_ok = |n: usize| {
        if u32::try_from(n).is_ok() {
            Ok(())
        } else {
            Err(ProtocolError::invalid(format!("{what}: length {n} exceeds u32")))
        }
    };
    match v {
        RowValue::String(s) => len_ok(s.len()),
        RowValue::Integer(n) if !(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(n) => Err(
            ProtocolError::invalid(format!("{what}: {n} is outside ±(2^53−1)")),
        ),
        RowValue::Json(j) => {
            len_ok(j.len())?;
            match texts {
                TextCheck::Full if !is_json_document(j) => Err(not_json(what)),
                _ => Ok(()),
            }
        }
        RowValue::BlobRef(j) => {
            len_ok(j.len())?;
            match texts {
                TextCheck::Full => validate_blob_ref(j, what),
                TextCheck::Trusted => Ok(()),
            }
        }
        RowValue::Bytes(b) | RowValue::Crdt(b) => len_ok(b.len()),
        _ => Ok(()),
    }
}

/// Appends one canonical row to `w`; on error nothing is appended. `row` must have one slot per layout
/// column, each `None` (only for nullable columns) or a value of the column's
/// type; `json` / `blob_ref` texts are validated so the encoder never emits
/// bytes its decoder rejects; integers must be within ±(2^53−1).
/// Errors: `sync.invalid_request` naming the offending column.
pub fn write_row(w: &mut Writer, layout: &TableLayout, row: &[Option<RowValue>]) -> Result<()> {
    write_row_after(w, layout, &[], row, TextCheck::Full)
}

/// [`write_row`] with [`TextCheck::Trusted`]: `json` / `blob_ref` texts are
/// not re-parsed (use for values this crate decoded or serde_json produced).
pub fn write_row_trusted(w: &mut Writer, layout: &TableLayout, row: &[Option<RowValue>]) -> Result<()> {
    write_row_after(w, layout, &[], row, TextCheck::Trusted)
}

/// [`write_row`] that, once every check passed, first appends `lead` (e.g. a
/// segment record's `serverVersion`), so a failed row leaves `w` untouched.
pub(crate) fn write_row_after(
    w: &mut Writer,
    layout: &TableLayout,
    lead: &[u8],
    row: &[Option<RowValue>],
    texts: TextCheck,
) -> Result<()> {
    if row.len() != layout.columns.len() {
        return Err(ProtocolError::invalid(format!(
            "row has {} value(s), layout has {} column(s)",
            row.len(),
            layout.columns.len()
        )));
    }
    // One pass: bitmap placeholder, then each value checked and written; any
    // failure truncates back to `mark`, so nothing is left appended.
    let mark = w.len();
    w.raw(lead);
    let bitmap_at = w.len();
    let blen = layout.bitmap_len();
    for _ in 0..blen {
        w.u8(0);
    }
    let res = write_values(w, layout, row, bitmap_at, texts);
    if res.is_err() {
        w.truncate(mark);
    }
    res
}

fn write_values(
    w: &mut Writer,
    layout: &TableLayout,
    row: &[Option<RowValue>],
    bitmap_at: usize,
    texts: TextCheck,
) -> Result<()> {
    for (i, (v, col)) in row.iter().zip(&layout.columns).enumerate() {
        let what = col.name.as_str();
        let Some(v) = v else {
            if !col.nullable {
                return Err(ProtocolError::invalid(format!("NULL for non-nullable column {what:?}")));
            }
            bitmap::set_bit(&mut w.as_mut_slice()[bitmap_at..], i);
            continue;
        };
        write_value(w, col, v, texts)?;
    }
    Ok(())
}

/// Writes one non-NULL value of `col` after every check the decoder makes
/// (type match, safe integer, lengths, JSON text / BlobRef shape per
/// `texts`). On error the writer may hold a partial value (callers
/// truncate).
pub(crate) fn write_value(w: &mut Writer, col: &ColumnLayout, v: &RowValue, texts: TextCheck) -> Result<()> {
    let what = col.name.as_str();
    if v.column_type() != col.ty {
        return Err(ProtocolError::invalid(format!(
            "column {what:?} is {}, value is {}",
            col.ty.name(),
            v.column_type().name()
        )));
    }
    check_value(v, what, texts)?;
    match v {
        RowValue::String(s) => w.str(s, what)?,
        RowValue::Integer(n) => w.i64(*n, what)?,
        RowValue::Float(f) => w.f64(*f),
        RowValue::Boolean(b) => w.bool(*b),
        RowValue::Json(j) | RowValue::BlobRef(j) => w.str(j, what)?,
        RowValue::Bytes(b) | RowValue::Crdt(b) => w.bytes(b, what)?,
    }
    Ok(())
}

/// Bytes [`write_row`] appends for `row` (bitmap + non-NULL values); a
/// size hint only — it does not validate the row.
pub fn encoded_len(layout: &TableLayout, row: &[Option<RowValue>]) -> usize {
    layout.bitmap_len()
        + row
            .iter()
            .flatten()
            .map(|v| match v {
                RowValue::String(s) | RowValue::Json(s) | RowValue::BlobRef(s) => 4 + s.len(),
                RowValue::Bytes(b) | RowValue::Crdt(b) => 4 + b.len(),
                RowValue::Integer(_) | RowValue::Float(_) => 8,
                RowValue::Boolean(_) => 1,
            })
            .sum::<usize>()
}

/// Encodes one row as a standalone payload. See [`write_row`].
pub fn encode_row(layout: &TableLayout, row: &[Option<RowValue>]) -> Result<Vec<u8>> {
    let mut w = Writer::with_capacity(encoded_len(layout, row));
    write_row(&mut w, layout, row)?;
    Ok(w.into_vec())
}

/// Extracts the value of column `index` from a row payload, validating the
/// columns before it and the whole payload (so a malformed row never yields
/// a value). `None` = NULL. Errors: `sync.invalid_request`; an index past the
/// layout is `sync.invalid_request` too.
pub fn column_value_at(layout: &TableLayout, payload: &[u8], index: usize) -> Result<Option<RowValue>> {
    if index >= layout.columns.len() {
        return Err(ProtocolError::invalid(format!(
            "column index {index} outside a {}-column layout",
            layout.columns.len()
        )));
    }
    let mut r = Reader::new(payload);
    let bitmap = read_bitmap(&mut r, layout)?;
    let mut out = None;
    for (i, col) in layout.columns.iter().enumerate() {
        if is_null(bitmap, i, col)? {
            continue;
        }
        if i == index {
            out = Some(read_value(&mut r, col)?);
        } else {
            skip_value(&mut r, col)?;
        }
    }
    r.finish("row payload")?;
    Ok(out)
}

/// Extracts the value of the column called `name` (primary key, scope
/// columns) from a row payload. `None` = NULL. Errors: `sync.invalid_request`
/// for a malformed payload or a name not in the layout.
pub fn column_value(layout: &TableLayout, payload: &[u8], name: &str) -> Result<Option<RowValue>> {
    let index = layout
        .index_of(name)
        .ok_or_else(|| ProtocolError::invalid(format!("no column {name:?} in the layout")))?;
    column_value_at(layout, payload, index)
}

/// Re-encodes a payload written for `old` as one for `new`, where `new` is
/// `old` plus appended nullable columns (the only schema migration that keeps
/// existing payloads meaningful): the appended columns become NULL. Values
/// are copied byte-for-byte after validation; only the bitmap is rebuilt.
/// Errors: `sync.schema_mismatch` when `new` is not an append-only nullable
/// extension of `old`; `sync.invalid_request` for a malformed payload.
pub fn append_null_columns(old: &TableLayout, new: &TableLayout, payload: &[u8]) -> Result<Vec<u8>> {
    let n_old = old.columns.len();
    if new.columns.len() < n_old
        || new.columns[..n_old] != old.columns[..]
        || new.columns[n_old..].iter().any(|c| !c.nullable)
    {
        return Err(ProtocolError::new(
            ErrorCode::SchemaMismatch,
            "new layout is not the old one plus appended nullable columns",
        ));
    }
    validate_row(old, payload)?;
    let (old_bitmap, values) = payload.split_at(old.bitmap_len());
    let mut out = vec![0u8; new.bitmap_len()];
    out[..old_bitmap.len()].copy_from_slice(old_bitmap);
    for i in n_old..new.columns.len() {
        bitmap::set_bit(&mut out, i);
    }
    out.extend_from_slice(values);
    Ok(out)
}

/// §11.1 rendering of a layout's column table: `[{"name","type","nullable"}]`
/// in layout order (the `columns` member of a rendered segment or sparse row).
pub fn render_column_table(layout: &TableLayout) -> Value {
    Value::Array(
        layout
            .columns
            .iter()
            .map(|c| serde_json::json!({"name": c.name, "type": c.ty.name(), "nullable": c.nullable}))
            .collect(),
    )
}

/// §11.1 rendering of a row as a `{name: value}` object in layout order
/// (NULL → `null`).
pub fn render_row(layout: &TableLayout, row: &[Option<RowValue>]) -> Value {
    let mut m = serde_json::Map::with_capacity(row.len());
    for (col, v) in layout.columns.iter().zip(row) {
        m.insert(col.name.clone(), v.as_ref().map_or(Value::Null, RowValue::render));
    }
    Value::Object(m)
}

/// Builds a row from a `{name: value}` JSON object (the inverse of
/// [`render_row`]); a missing key or JSON `null` is NULL, unknown keys are
/// rejected. Errors: `sync.invalid_request` naming the column.
pub fn row_from_json(layout: &TableLayout, obj: &Value) -> Result<Row> {
    Ok(crate::sparse_row::sparse_row_from_json(layout, obj)?.into_iter().map(crate::sparse_row::SparseSlot::into_value).collect())
}

#[cfg(test)]
mod identical_tests {
    use super::*;

    #[test]
    fn identical_compares_floats_by_bits() {
        let nan = Some(RowValue::Float(f64::NAN));
        assert!(identical(&nan, &nan.clone()), "a NaN is the same NaN");
        assert!(!identical(&Some(RowValue::Float(0.0)), &Some(RowValue::Float(-0.0))), "0.0 and -0.0 encode differently");
        assert!(identical(&Some(RowValue::String("a".into())), &Some(RowValue::String("a".into()))));
        assert!(!identical(&None, &Some(RowValue::Integer(0))));
        assert!(identical(&None, &None));
    }
}
