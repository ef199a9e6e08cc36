//! Primitive encodings (SPEC.md "Conventions and primitive encodings").
//!
//! [`Reader`] decodes from a borrowed byte slice and never panics: every
//! length prefix is checked against the remaining input *before* anything is
//! allocated, so a hostile prefix costs nothing. [`Writer`] produces the one
//! canonical encoding of each value. All integers are little-endian and
//! fixed-width; `i64` values are limited to ±(2^53−1) both ways.

use crate::errors::{ProtocolError, Result};

/// Largest magnitude an `i64` field may carry (JS safe-integer contract).
pub const MAX_SAFE_INTEGER: i64 = (1i64 << 53) - 1;

/// A bounds-checked cursor over an input slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Byte offset of the next unread byte.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left to read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when every byte was consumed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Fails with `sync.invalid_request` unless every byte was consumed
    /// (§1.2 rule 3: no trailing bytes inside a known frame).
    pub fn finish(&self, what: &str) -> Result<()> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(ProtocolError::invalid(format!(
                "{what}: {} trailing byte(s)",
                self.remaining()
            )))
        }
    }

    /// Takes `n` raw bytes; an `n` past the end is an error, not a panic.
    #[inline]
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(ProtocolError::invalid(format!(
                "{what}: needs {n} byte(s), {} left",
                self.remaining()
            )));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    /// A `u8`; `sync.invalid_request` at end of input. `what` names the field in error messages.
    #[inline]
    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    /// A little-endian `u16`.
    #[inline]
    pub fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    /// A little-endian `u32`.
    #[inline]
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// A little-endian two's-complement `i32`.
    #[inline]
    pub fn i32(&mut self, what: &str) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array(what)?))
    }

    /// An `i64` within ±(2^53−1); anything outside is a decode error.
    #[inline]
    pub fn i64(&mut self, what: &str) -> Result<i64> {
        let v = i64::from_le_bytes(self.array(what)?);
        if !(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&v) {
            return Err(ProtocolError::invalid(format!(
                "{what}: {v} is outside ±(2^53−1)"
            )));
        }
        Ok(v)
    }

    /// A little-endian IEEE-754 `f64` (any bit pattern, NaN included).
    #[inline]
    pub fn f64(&mut self, what: &str) -> Result<f64> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// `0x00` / `0x01`; any other byte is a decode error.
    #[inline]
    pub fn bool(&mut self, what: &str) -> Result<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(ProtocolError::invalid(format!("{what}: bool byte {b:#04x}"))),
        }
    }

    /// An `opt()` presence byte: `0x00` absent, `0x01` present.
    #[inline]
    pub fn presence(&mut self, what: &str) -> Result<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(ProtocolError::invalid(format!(
                "{what}: presence byte {b:#04x}"
            ))),
        }
    }

    /// `opt(T)`: reads the presence byte, then `T` iff present.
    #[inline]
    pub fn opt<T>(
        &mut self,
        what: &str,
        read: impl FnOnce(&mut Self) -> Result<T>,
    ) -> Result<Option<T>> {
        if self.presence(what)? {
            read(self).map(Some)
        } else {
            Ok(None)
        }
    }

    /// `bytes`: `u32` length + raw bytes, borrowed from the input.
    #[inline]
    pub fn bytes(&mut self, what: &str) -> Result<&'a [u8]> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }

    /// `str`: `u32` length + well-formed UTF-8, borrowed from the input.
    #[inline]
    pub fn str(&mut self, what: &str) -> Result<&'a str> {
        let raw = self.bytes(what)?;
        std::str::from_utf8(raw)
            .map_err(|_| ProtocolError::invalid(format!("{what}: not well-formed UTF-8")))
    }

    /// `json`: a `str` that must parse as one RFC 8259 JSON document. The
    /// raw text is returned unchanged (never re-serialized).
    pub fn json(&mut self, what: &str) -> Result<&'a str> {
        let s = self.str(what)?;
        validate_json(s, what)?;
        Ok(s)
    }

    /// A `list`/`map` count, checked against the remaining input assuming
    /// each element needs at least `min_element_size` bytes, so a hostile
    /// count cannot trigger a large allocation.
    pub fn count(&mut self, what: &str, min_element_size: usize) -> Result<usize> {
        let n = self.u32(what)? as usize;
        let need = n.saturating_mul(min_element_size.max(1));
        if need > self.remaining() {
            return Err(ProtocolError::invalid(format!(
                "{what}: count {n} exceeds the remaining {} byte(s)",
                self.remaining()
            )));
        }
        Ok(n)
    }

    /// `map`: count + (`str` key, value) pairs. Keys must be unique and in
    /// ascending UTF-16 code-unit order; anything else is a decode error.
    pub fn map<T>(
        &mut self,
        what: &str,
        min_value_size: usize,
        mut read_value: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<(&'a str, T)>> {
        let n = self.count(what, 4 + min_value_size)?;
        let mut out: Vec<(&'a str, T)> = Vec::with_capacity(n);
        for _ in 0..n {
            let key = self.str(what)?;
            if let Some((prev, _)) = out.last() {
                if cmp_utf16(prev, key) != std::cmp::Ordering::Less {
                    return Err(ProtocolError::invalid(format!(
                        "{what}: map keys duplicate or out of UTF-16 order ({prev:?} then {key:?})"
                    )));
                }
            }
            let value = read_value(self)?;
            out.push((key, value));
        }
        Ok(out)
    }
}

/// Validates that `s` is one JSON document (any RFC 8259 value, top-level
/// scalars included); `sync.invalid_request` otherwise.
pub fn validate_json(s: &str, what: &str) -> Result<()> {
    serde_json::from_str::<serde::de::IgnoredAny>(s)
        .map(|_| ())
        .map_err(|e| ProtocolError::invalid(format!("{what}: not a JSON document ({e})")))
}

/// Compares two strings by UTF-16 code units — the order JavaScript string
/// comparison yields and the one canonical `map` keys use.
pub fn cmp_utf16(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Sorts map entries into canonical (UTF-16 code-unit) key order.
pub fn sort_map_keys<T>(entries: &mut [(String, T)]) {
    entries.sort_by(|(a, _), (b, _)| cmp_utf16(a, b));
}

/// An append-only canonical encoder over a growable buffer.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Writer { buf: Vec::new() }
    }

    /// An empty writer with `n` bytes preallocated.
    pub fn with_capacity(n: usize) -> Self {
        Writer { buf: Vec::with_capacity(n) }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes written so far.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// The written bytes, consuming the writer.
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    /// Empties the buffer, keeping its allocation (streaming encoders reuse
    /// one scratch writer per frame).
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// Drops everything after the first `len` bytes (no-op when `len` ≥
    /// [`Writer::len`]) — lets an encoder undo a partly written value.
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    /// Reserves room for at least `additional` more bytes.
    pub fn reserve(&mut self, additional: usize) {
        self.buf.reserve(additional);
    }

    /// Mutable view of the bytes written so far (for back-patching fixed-size
    /// fields such as a null bitmap).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Overwrites the 4 bytes at `at` with `v` (LE) — used to back-patch a
    /// frame length after its payload was written. `at + 4` must not exceed
    /// [`Writer::len`]; an offset past the end is an encoder error.
    pub fn patch_u32(&mut self, at: usize, v: u32) -> Result<()> {
        match self.buf.get_mut(at..at.saturating_add(4)) {
            Some(slot) if at.checked_add(4).is_some() => {
                slot.copy_from_slice(&v.to_le_bytes());
                Ok(())
            }
            _ => Err(ProtocolError::invalid(format!(
                "encoder: patch offset {at} outside the {} byte buffer",
                self.buf.len()
            ))),
        }
    }

    /// Appends raw bytes (no length prefix).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Writes a `u8`.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Writes a little-endian `u16`.
    pub fn u16(&mut self, v: u16) {
        self.raw(&v.to_le_bytes());
    }

    /// Writes a little-endian `u32`.
    pub fn u32(&mut self, v: u32) {
        self.raw(&v.to_le_bytes());
    }

    /// Writes a little-endian two's-complement `i32`.
    pub fn i32(&mut self, v: i32) {
        self.raw(&v.to_le_bytes());
    }

    /// Writes an `i64`; values outside ±(2^53−1) are an encoder error.
    pub fn i64(&mut self, v: i64, what: &str) -> Result<()> {
        if !(-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&v) {
            return Err(ProtocolError::invalid(format!(
                "{what}: {v} is outside ±(2^53−1)"
            )));
        }
        self.raw(&v.to_le_bytes());
        Ok(())
    }

    /// Writes a little-endian IEEE-754 `f64` (bit pattern preserved).
    pub fn f64(&mut self, v: f64) {
        self.raw(&v.to_le_bytes());
    }

    /// Writes a `bool` as `0x00` / `0x01`.
    pub fn bool(&mut self, v: bool) {
        self.u8(v as u8);
    }

    /// Writes a `u32` length; lengths above `u32::MAX` are an encoder error.
    pub fn len_prefix(&mut self, n: usize, what: &str) -> Result<()> {
        let n = u32::try_from(n)
            .map_err(|_| ProtocolError::invalid(format!("{what}: length {n} exceeds u32")))?;
        self.u32(n);
        Ok(())
    }

    /// Writes `bytes`: `u32` length + raw bytes; lengths above `u32::MAX` are an encoder error.
    pub fn bytes(&mut self, v: &[u8], what: &str) -> Result<()> {
        self.len_prefix(v.len(), what)?;
        self.raw(v);
        Ok(())
    }

    /// Writes `str`: `u32` byte length + UTF-8 bytes.
    pub fn str(&mut self, v: &str, what: &str) -> Result<()> {
        self.bytes(v.as_bytes(), what)
    }

    /// Writes the presence byte of an `opt()`; the caller writes the value.
    pub fn presence(&mut self, present: bool) {
        self.u8(present as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i64_outside_safe_range_is_rejected_both_ways() {
        let mut w = Writer::new();
        assert!(w.i64(MAX_SAFE_INTEGER + 1, "x").is_err());
        w.i64(-MAX_SAFE_INTEGER, "x").unwrap();
        let bytes = (MAX_SAFE_INTEGER + 1).to_le_bytes();
        assert!(Reader::new(&bytes).i64("x").is_err());
        assert_eq!(Reader::new(w.as_slice()).i64("x").unwrap(), -MAX_SAFE_INTEGER);
    }

    #[test]
    fn hostile_length_prefix_fails_before_allocation() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 1, 2];
        assert!(Reader::new(&bytes).bytes("b").is_err());
        assert!(Reader::new(&bytes).count("c", 1).is_err());
    }

    #[test]
    fn bool_and_presence_reject_other_bytes() {
        assert!(Reader::new(&[2]).bool("b").is_err());
        assert!(Reader::new(&[2]).presence("p").is_err());
        assert!(Reader::new(&[1]).bool("b").unwrap());
    }

    #[test]
    fn utf16_order_differs_from_utf8_for_supplementary_planes() {
        // U+FF61 (BMP, above the surrogates) vs U+10000 (surrogate pair D800…).
        let bmp = "\u{FF61}";
        let astral = "\u{10000}";
        assert_eq!(cmp_utf16(astral, bmp), std::cmp::Ordering::Less);
        assert_eq!(astral.as_bytes().cmp(bmp.as_bytes()), std::cmp::Ordering::Greater);
    }

    #[test]
    fn map_rejects_duplicate_and_unordered_keys() {
        let mut w = Writer::new();
        w.u32(2);
        w.str("b", "k").unwrap();
        w.u8(1);
        w.str("a", "k").unwrap();
        w.u8(2);
        assert!(Reader::new(w.as_slice()).map("m", 1, |r| r.u8("v")).is_err());
    }

    #[test]
    fn json_keeps_text_and_rejects_non_json() {
        let mut w = Writer::new();
        w.str(" {\"a\": 1} ", "j").unwrap();
        assert_eq!(Reader::new(w.as_slice()).json("j").unwrap(), " {\"a\": 1} ");
        let mut w = Writer::new();
        w.str("{nope", "j").unwrap();
        assert!(Reader::new(w.as_slice()).json("j").is_err());
        let mut w = Writer::new();
        w.str("7", "j").unwrap();
        assert!(Reader::new(w.as_slice()).json("j").is_ok());
    }
}
