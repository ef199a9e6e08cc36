//! Field encodings shared by several SSP2 frames (Conventions, §3.1, §4.3,
//! §4.4, §4.5): the two scope maps, owned `str` / `json` / `opt` helpers,
//! and the `op` enum used by push operations and commit changes.
//!
//! Maps are kept as `Vec<(key, value)>` in wire order. Decoders accept only
//! canonical maps (keys unique, ascending UTF-16 code units); encoders refuse
//! a non-canonical map with an encoder error rather than emit bytes no
//! decoder accepts. [`canonical_scope_map`] and [`canonical_stored_scopes`]
//! build canonical maps from any iterator.

use crate::constants::{OP_DELETE, OP_UPSERT};
use crate::errors::{ProtocolError, Result};
use crate::primitives::{cmp_utf16, validate_json, Reader, Writer};
use std::cmp::Ordering;

/// A `map` of `str` → `list(str)`: requested scopes (`SUBSCRIPTION.scopes`,
/// §4.3) and effective scopes (`SUB_START.effectiveScopes`, §4.4). Keys in
/// canonical (UTF-16) order; value lists are carried as given.
pub type ScopeMap = Vec<(String, Vec<String>)>;

/// A `map` of `str` → `str`: the stored scopes of a change (§3.1, §4.5).
/// Keys in canonical (UTF-16) order.
pub type StoredScopes = Vec<(String, String)>;

/// Builds a canonical [`ScopeMap`]: sorts keys by UTF-16 code units; a
/// duplicated key is an error (`sync.invalid_request`).
pub fn canonical_scope_map(
    entries: impl IntoIterator<Item = (String, Vec<String>)>,
) -> Result<ScopeMap> {
    sorted_unique(entries.into_iter().collect())
}

/// Builds canonical [`StoredScopes`]: sorts keys by UTF-16 code units; a
/// duplicated key is an error (`sync.invalid_request`).
pub fn canonical_stored_scopes(
    entries: impl IntoIterator<Item = (String, String)>,
) -> Result<StoredScopes> {
    sorted_unique(entries.into_iter().collect())
}

fn sorted_unique<T>(mut v: Vec<(String, T)>) -> Result<Vec<(String, T)>> {
    v.sort_by(|(a, _), (b, _)| cmp_utf16(a, b));
    if let Some(w) = v.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(ProtocolError::invalid(format!("duplicate map key {:?}", w[0].0)));
    }
    Ok(v)
}

/// `op` of a push operation (§6.1) or commit change (§4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `1`: insert or replace the whole row; carries a row payload.
    Upsert,
    /// `2`: delete the row; carries no row payload.
    Delete,
}

impl Op {
    /// The wire byte.
    pub fn byte(self) -> u8 {
        match self {
            Op::Upsert => OP_UPSERT,
            Op::Delete => OP_DELETE,
        }
    }

    /// The §11.1 rendering (`"upsert"` / `"delete"`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Upsert => "upsert",
            Op::Delete => "delete",
        }
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Op> {
        match r.u8("op")? {
            OP_UPSERT => Ok(Op::Upsert),
            OP_DELETE => Ok(Op::Delete),
            b => Err(ProtocolError::invalid(format!("op: unknown enum byte {b}"))),
        }
    }
}

#[inline]
pub(crate) fn read_string(r: &mut Reader<'_>, what: &str) -> Result<String> {
    Ok(r.str(what)?.to_owned())
}

#[inline]
pub(crate) fn read_json(r: &mut Reader<'_>, what: &str) -> Result<String> {
    Ok(r.json(what)?.to_owned())
}

#[inline]
pub(crate) fn read_opt_string(r: &mut Reader<'_>, what: &str) -> Result<Option<String>> {
    r.opt(what, |r| read_string(r, what))
}

#[inline]
pub(crate) fn read_opt_json(r: &mut Reader<'_>, what: &str) -> Result<Option<String>> {
    r.opt(what, |r| read_json(r, what))
}

#[inline]
pub(crate) fn read_opt_i64(r: &mut Reader<'_>, what: &str) -> Result<Option<i64>> {
    r.opt(what, |r| r.i64(what))
}

#[inline]
pub(crate) fn read_opt_bytes(r: &mut Reader<'_>, what: &str) -> Result<Option<Vec<u8>>> {
    r.opt(what, |r| Ok(r.bytes(what)?.to_vec()))
}

pub(crate) fn read_scope_map(r: &mut Reader<'_>, what: &str) -> Result<ScopeMap> {
    // Smallest entry: empty key (4) + empty list count (4).
    let n = r.count(what, 8)?;
    let mut out: ScopeMap = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.str(what)?;
        check_next_key(out.last().map(|(k, _)| k.as_str()), key, what)?;
        let m = r.count(what, 4)?;
        let mut values = Vec::with_capacity(m);
        for _ in 0..m {
            values.push(read_string(r, what)?);
        }
        out.push((key.to_owned(), values));
    }
    Ok(out)
}

pub(crate) fn read_stored_scopes(r: &mut Reader<'_>, what: &str) -> Result<StoredScopes> {
    let n = r.count(what, 8)?;
    let mut out: StoredScopes = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.str(what)?;
        check_next_key(out.last().map(|(k, _)| k.as_str()), key, what)?;
        out.push((key.to_owned(), read_string(r, what)?));
    }
    Ok(out)
}

/// Decode-side canonical map rule: `key` must sort strictly after `prev` in
/// UTF-16 code-unit order (`sync.invalid_request` otherwise).
fn check_next_key(prev: Option<&str>, key: &str, what: &str) -> Result<()> {
    match prev {
        Some(p) if cmp_utf16_fast(p, key) != Ordering::Less => Err(ProtocolError::invalid(format!(
            "{what}: map keys duplicate or out of UTF-16 order ({p:?} then {key:?})"
        ))),
        _ => Ok(()),
    }
}

/// [`cmp_utf16`] without transcoding in the common case. UTF-8 byte order is
/// code-point order, which equals UTF-16 order except between a U+E000–U+FFFF
/// character (lead byte 0xEE/0xEF) and a supplementary one (lead byte ≥ 0xF0);
/// only when the first differing bytes are such a pair does it fall back.
pub(crate) fn cmp_utf16_fast(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match x.iter().zip(y).position(|(p, q)| p != q) {
        None => x.len().cmp(&y.len()),
        Some(i) => {
            let (p, q) = (x[i], y[i]);
            let high_bmp = |c: u8| (0xEE..=0xEF).contains(&c);
            if (p >= 0xF0 && high_bmp(q)) || (q >= 0xF0 && high_bmp(p)) {
                cmp_utf16(a, b)
            } else {
                p.cmp(&q)
            }
        }
    }
}

fn check_canonical_keys<'a>(keys: impl Iterator<Item = &'a str>, what: &str) -> Result<()> {
    let mut prev: Option<&str> = None;
    for key in keys {
        check_next_key(prev, key, what).map_err(as_encoder_error)?;
        prev = Some(key);
    }
    Ok(())
}

pub(crate) fn write_scope_map(w: &mut Writer, map: &[(String, Vec<String>)], what: &str) -> Result<()> {
    check_canonical_keys(map.iter().map(|(k, _)| k.as_str()), what)?;
    w.len_prefix(map.len(), what)?;
    for (k, values) in map {
        w.str(k, what)?;
        w.len_prefix(values.len(), what)?;
        for v in values {
            w.str(v, what)?;
        }
    }
    Ok(())
}

pub(crate) fn write_stored_scopes(w: &mut Writer, map: &[(String, String)], what: &str) -> Result<()> {
    check_canonical_keys(map.iter().map(|(k, _)| k.as_str()), what)?;
    w.len_prefix(map.len(), what)?;
    for (k, v) in map {
        w.str(k, what)?;
        w.str(v, what)?;
    }
    Ok(())
}

/// Writes a `json` field: the text must be one JSON document (encoder error
/// otherwise) and is written byte-for-byte.
pub(crate) fn write_json(w: &mut Writer, text: &str, what: &str) -> Result<()> {
    validate_json(text, what).map_err(as_encoder_error)?;
    w.str(text, what)
}

pub(crate) fn write_opt_json(w: &mut Writer, v: Option<&str>, what: &str) -> Result<()> {
    w.presence(v.is_some());
    match v {
        Some(t) => write_json(w, t, what),
        None => Ok(()),
    }
}

pub(crate) fn write_opt_str(w: &mut Writer, v: Option<&str>, what: &str) -> Result<()> {
    w.presence(v.is_some());
    match v {
        Some(s) => w.str(s, what),
        None => Ok(()),
    }
}

pub(crate) fn write_opt_i64(w: &mut Writer, v: Option<i64>, what: &str) -> Result<()> {
    w.presence(v.is_some());
    match v {
        Some(x) => w.i64(x, what),
        None => Ok(()),
    }
}

pub(crate) fn write_opt_i32(w: &mut Writer, v: Option<i32>) {
    w.presence(v.is_some());
    if let Some(x) = v {
        w.i32(x);
    }
}

pub(crate) fn write_opt_bytes(w: &mut Writer, v: Option<&[u8]>, what: &str) -> Result<()> {
    w.presence(v.is_some());
    match v {
        Some(b) => w.bytes(b, what),
        None => Ok(()),
    }
}

/// Encoder-side guard for a field the decoder would reject.
pub(crate) fn encoder_check(ok: bool, msg: impl FnOnce() -> String) -> Result<()> {
    if ok {
        Ok(())
    } else {
        Err(ProtocolError::invalid(format!("encoder: {}", msg())))
    }
}

/// Marks an error raised while encoding as an encoder error (message
/// prefixed `encoder:`), keeping its code.
pub(crate) fn as_encoder_error(e: ProtocolError) -> ProtocolError {
    if e.message.starts_with("encoder:") {
        e
    } else {
        ProtocolError::new(e.code, format!("encoder: {}", e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_utf16_order_agrees_with_transcoding() {
        let samples = [
            "", "a", "ab", "b", "\u{7f}", "\u{80}", "\u{7ff}", "\u{800}", "\u{d7ff}", "\u{e000}",
            "\u{ff61}", "\u{ffff}", "\u{10000}", "\u{10ffff}", "a\u{10000}", "a\u{ff61}", "\u{e000}x",
        ];
        for a in samples {
            for b in samples {
                assert_eq!(cmp_utf16_fast(a, b), cmp_utf16(a, b), "{a:?} vs {b:?}");
            }
        }
    }
}
