//! A strict structural check of a Yjs-v1 (lib0) update before `yrs` sees it.
//!
//! `yrs` 0.27 trusts its input more than a server may: it turns every
//! length-prefixed string into a `&str` with `from_utf8_unchecked` (invalid
//! UTF-8 there is undefined behaviour, and in a debug build an abort), and it
//! asserts client ids fit 53 bits. Pushed bytes are untrusted, so the
//! `yjs-doc` merger first walks the update with this checker, which follows
//! the grammar `yrs`'s `Update::decode` (`DecoderV1`) reads — block lists per
//! client (GC, skip, items with origin / right origin / parent / parent-sub
//! and one of the nine content kinds, `Any` values, sub-document options),
//! then the delete set — and accepts only when:
//! - every string is valid UTF-8;
//! - every integer that `yrs` reads into a `u32` fits one (so both readers
//!   see the same value and consume the same bytes), client ids fit 53 bits,
//!   clock ranges do not overflow `u32`;
//! - `Any` values nest at most [`MAX_DEPTH`] deep (no stack exhaustion);
//! - the whole buffer is consumed (a reader that went astray would not end
//!   exactly at the end).
//!
//! Anything else is refused, even where `yrs` would have read it: refusing is
//! always safe, accepting what `yrs` reads differently would not be.

/// Deepest `Any` nesting accepted.
pub const MAX_DEPTH: usize = 64;

struct Reader<'b> {
    buf: &'b [u8],
    at: usize,
}

type Check<T> = Result<T, String>;

impl<'b> Reader<'b> {
    fn u8(&mut self) -> Check<u8> {
        let b = *self.buf.get(self.at).ok_or("truncated")?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: u64) -> Check<&'b [u8]> {
        let n = usize::try_from(n).map_err(|_| "length out of range")?;
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or("truncated")?;
        let out = &self.buf[self.at..end];
        self.at = end;
        Ok(out)
    }

    /// lib0 varuint, at most 10 bytes, no bits past 64.
    fn var_u64(&mut self) -> Check<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            let part = u64::from(b & 0x7f);
            if i == 9 && part > 1 {
                return Err("varint overflows 64 bits".into());
            }
            value |= part << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn var_u32(&mut self) -> Check<u32> {
        u32::try_from(self.var_u64()?).map_err(|_| "value does not fit 32 bits".into())
    }

    /// lib0 signed varint (sign in bit 6 of the first byte), at most 10 bytes.
    fn var_i64(&mut self) -> Check<()> {
        let mut b = self.u8()?;
        let mut shift = 6u32;
        while b & 0x80 != 0 {
            b = self.u8()?;
            shift += 7;
            if shift > 62 {
                return Err("signed varint too long".into());
            }
        }
        Ok(())
    }

    fn client(&mut self) -> Check<u64> {
        let c = self.var_u64()?;
        if c >> 53 != 0 {
            return Err("client id does not fit 53 bits".into());
        }
        Ok(c)
    }

    fn id(&mut self) -> Check<()> {
        self.client()?;
        self.var_u32()?;
        Ok(())
    }

    fn buf(&mut self) -> Check<&'b [u8]> {
        let n = self.var_u32()?;
        self.take(u64::from(n))
    }

    fn string(&mut self) -> Check<&'b str> {
        let bytes = self.buf()?;
        std::str::from_utf8(bytes).map_err(|_| "string is not valid UTF-8".into())
    }

    fn any(&mut self, depth: usize) -> Check<()> {
        if depth > MAX_DEPTH {
            return Err("value nests too deep".into());
        }
        match self.u8()? {
            127 | 126 | 121 | 120 => Ok(()),
            125 => self.var_i64(),
            124 => self.take(4).map(drop),
            123 | 122 => self.take(8).map(drop),
            119 => self.string().map(drop),
            118 => {
                let n = self.var_u32()?;
                for _ in 0..n {
                    self.string()?;
                    self.any(depth + 1)?;
                }
                Ok(())
            }
            117 => {
                let n = self.var_u32()?;
                for _ in 0..n {
                    self.any(depth + 1)?;
                }
                Ok(())
            }
            116 => self.buf().map(drop),
            other => Err(format!("unknown value tag {other}")),
        }
    }

    /// Item content of kind `kind`; returns its length in clock units.
    fn content(&mut self, kind: u8) -> Check<u64> {
        match kind {
            1 => self.var_u32().map(u64::from),
            2 => {
                // yrs reads len + 1 strings (`while remaining >= 0`).
                let n = self.var_u32()?;
                if n >= 1 << 31 {
                    return Err("JSON content count out of range".into());
                }
                for _ in 0..=n {
                    self.string()?;
                }
                Ok(u64::from(n) + 1)
            }
            3 => self.buf().map(|_| 1),
            4 => {
                let s = self.string()?;
                Ok(s.encode_utf16().count() as u64)
            }
            5 => self.string().map(|_| 1),
            6 => {
                self.string()?;
                self.string()?;
                Ok(1)
            }
            7 => {
                match self.u8()? {
                    0 | 1 | 2 | 4 | 5 | 6 | 9 | 15 => {}
                    3 => {
                        self.string()?;
                    }
                    other => return Err(format!("unknown type ref {other}")),
                }
                Ok(1)
            }
            8 => {
                let n = self.var_u32()?;
                for _ in 0..n {
                    self.any(0)?;
                }
                Ok(u64::from(n))
            }
            9 => {
                self.string()?;
                self.any(0)?;
                Ok(1)
            }
            other => Err(format!("unknown content kind {other}")),
        }
    }

    /// One block; returns its length in clock units.
    fn block(&mut self) -> Check<u64> {
        let info = self.u8()?;
        match info {
            10 => self.var_u32().map(u64::from),
            0 => self.var_u32().map(u64::from),
            _ => {
                let has_origin = info & 0x80 != 0;
                let has_right = info & 0x40 != 0;
                if has_origin {
                    self.id()?;
                }
                if has_right {
                    self.id()?;
                }
                if !has_origin && !has_right {
                    if self.var_u32()? == 1 {
                        self.string()?;
                    } else {
                        self.id()?;
                    }
                    if info & 0x20 != 0 {
                        self.string()?;
                    }
                }
                self.content(info & 0x0f)
            }
        }
    }
}

/// Checks that `bytes` is one well-formed Yjs-v1 update (module docs).
pub fn check_update(bytes: &[u8]) -> Result<(), String> {
    let mut r = Reader { buf: bytes, at: 0 };
    let clients = r.var_u32()?;
    for _ in 0..clients {
        let blocks = r.var_u32()?;
        r.client()?;
        let mut clock = u64::from(r.var_u32()?);
        for _ in 0..blocks {
            clock += r.block()?;
            if clock > u64::from(u32::MAX) {
                return Err("block clocks overflow 32 bits".into());
            }
        }
    }
    let clients = r.var_u32()?;
    for _ in 0..clients {
        r.client()?;
        let ranges = r.var_u32()?;
        for _ in 0..ranges {
            let clock = r.var_u32()?;
            let len = r.var_u32()?;
            if clock.checked_add(len).is_none() {
                return Err("deleted range overflows 32 bits".into());
            }
        }
    }
    if r.at != bytes.len() {
        return Err(format!("{} trailing bytes", bytes.len() - r.at));
    }
    Ok(())
}
