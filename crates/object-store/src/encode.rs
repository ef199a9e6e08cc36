//! SigV4 URI encoding: every byte but the RFC 3986 unreserved characters
//! (`A-Z a-z 0-9 - . _ ~`) becomes `%XX` with uppercase hex; UTF-8 text is
//! encoded byte by byte.

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Whether `b` is an RFC 3986 unreserved character.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Appends `text` to `out`, percent-encoded; `/` is kept as it is when
/// `keep_slash` (an object key in a path), encoded otherwise (a query value).
pub(crate) fn uri_encode_into(out: &mut String, text: &str, keep_slash: bool) {
    for &b in text.as_bytes() {
        if is_unreserved(b) || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX_UPPER[usize::from(b >> 4)]));
            out.push(char::from(HEX_UPPER[usize::from(b & 0x0f)]));
        }
    }
}

/// `text` percent-encoded, `/` included (a query parameter value).
pub(crate) fn uri_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    uri_encode_into(&mut out, text, false);
    out
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(HEX_LOWER[usize::from(b >> 4)]));
        out.push(char::from(HEX_LOWER[usize::from(b & 0x0f)]));
    }
    out
}

/// Whether `text` is exactly `len` lowercase hex digits.
pub(crate) fn is_lower_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> String {
        let mut out = String::new();
        uri_encode_into(&mut out, text, true);
        out
    }

    #[test]
    fn unreserved_are_kept() {
        let all = "ABCXYZabcxyz0189-._~";
        assert_eq!(uri_encode(all), all);
        assert_eq!(path(all), all);
    }

    #[test]
    fn everything_else_is_encoded() {
        assert_eq!(uri_encode("a b"), "a%20b");
        assert_eq!(uri_encode("a/b"), "a%2Fb");
        assert_eq!(path("a/b c"), "a/b%20c");
        assert_eq!(uri_encode("+=:;,&?#%"), "%2B%3D%3A%3B%2C%26%3F%23%25");
        assert_eq!(uri_encode("!*'()"), "%21%2A%27%28%29");
        assert_eq!(uri_encode("é"), "%C3%A9");
        assert_eq!(uri_encode("\u{0}\u{7f}"), "%00%7F");
        assert_eq!(uri_encode("😀"), "%F0%9F%98%80");
    }

    #[test]
    fn hex_helpers() {
        assert_eq!(hex_lower(&[0x00, 0x9f, 0xff]), "009fff");
        assert!(is_lower_hex("009fff", 6));
        assert!(!is_lower_hex("009FFF", 6));
        assert!(!is_lower_hex("009ff", 6));
        assert!(!is_lower_hex("", 6));
    }
}
