//! Column bitmaps (§2.4): bit `i` is bit `i % 8` (LSB first) of byte
//! `i / 8`, `ceil(n / 8)` bytes for `n` bits, padding bits zero — the row
//! codec's null bitmap, the sparse row's presence and null bitmaps, and a
//! wire-version-3 conflict record's `conflictColumns`.

/// Whether bit `i` is set; a bit past the end of `bitmap` reads as unset.
#[inline]
pub fn bit(bitmap: &[u8], i: usize) -> bool {
    bitmap.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

/// Sets bit `i`. Panics when `bitmap` is shorter than `i / 8 + 1` bytes
/// (callers size it for their column count).
#[inline]
pub fn set_bit(bitmap: &mut [u8], i: usize) {
    bitmap[i / 8] |= 1 << (i % 8);
}

/// True when a padding bit (at or past `used`) is set in the last byte of
/// `bitmap`, a bitmap of `ceil(used / 8)` bytes.
pub fn padding_set(bitmap: &[u8], used: usize) -> bool {
    !used.is_multiple_of(8) && bitmap.last().is_some_and(|last| last >> (used % 8) != 0)
}

/// The bitmap of `n` bits with exactly the bits `set` (each below `n`).
pub fn from_bits(n: usize, set: impl IntoIterator<Item = usize>) -> Vec<u8> {
    let mut out = vec![0u8; n.div_ceil(8)];
    for i in set {
        set_bit(&mut out, i);
    }
    out
}

/// The set bits of `bitmap` below `n`, ascending.
pub fn set_bits(bitmap: &[u8], n: usize) -> impl Iterator<Item = usize> + '_ {
    (0..n).filter(move |&i| bit(bitmap, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_lsb_first_per_byte() {
        let b = from_bits(10, [0, 3, 9]);
        assert_eq!(b, [0b0000_1001, 0b0000_0010]);
        assert_eq!(set_bits(&b, 10).collect::<Vec<_>>(), [0, 3, 9]);
        assert!(bit(&b, 9) && !bit(&b, 8) && !bit(&b, 100), "past the end reads unset");
        assert!(!padding_set(&b, 10));
        assert!(padding_set(&b, 9), "bit 9 is padding of a 9-bit bitmap");
        assert!(!padding_set(&[0xff], 8), "no padding in a whole byte");
    }
}
