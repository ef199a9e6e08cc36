//! A fast, allocation-free check that a text is exactly one RFC 8259 JSON
//! document — the Conventions `json` rule the row codec applies to every
//! tag-5 value at decode (§2.4) and before encode.
//!
//! It accepts precisely what `serde_json::from_str::<serde::de::IgnoredAny>`
//! accepts (the check `primitives::validate_json` makes), which is the RFC
//! 8259 grammar: surrounding whitespace (space, tab, LF, CR) allowed; any
//! `\uXXXX` escape (lone surrogates included — the grammar admits them, as
//! JavaScript's `JSON.parse` does); no nesting limit (nesting depth is
//! tracked in a bit stack, heap-allocated only past 256 levels). The
//! equivalence is property-tested in `tests/props_json_text.rs` and checked
//! again by the `segment_decode` fuzz target.

/// `true` iff `text` is one JSON document (see the module docs).
pub fn is_json_document(text: &str) -> bool {
    let mut p = Parser { b: text.as_bytes(), i: 0, stack: BitStack::default() };
    p.document()
}

/// Container kinds on the nesting stack: `true` = object, `false` = array.
#[derive(Default)]
struct BitStack {
    inline: [u64; 4],
    spill: Vec<u64>,
    depth: usize,
}

impl BitStack {
    fn push(&mut self, object: bool) {
        let (word, bit) = (self.depth / 64, self.depth % 64);
        if word >= self.inline.len() + self.spill.len() {
            self.spill.push(0);
        }
        let w = if word < self.inline.len() { &mut self.inline[word] } else { &mut self.spill[word - 4] };
        if object {
            *w |= 1 << bit;
        } else {
            *w &= !(1 << bit);
        }
        self.depth += 1;
    }

    /// Pops and returns the kind; `None` when empty.
    fn pop(&mut self) -> Option<bool> {
        self.depth = self.depth.checked_sub(1)?;
        Some(self.top_at(self.depth))
    }

    fn top(&self) -> Option<bool> {
        self.depth.checked_sub(1).map(|d| self.top_at(d))
    }

    fn top_at(&self, d: usize) -> bool {
        let (word, bit) = (d / 64, d % 64);
        let w = if word < self.inline.len() { self.inline[word] } else { self.spill[word - 4] };
        w & (1 << bit) != 0
    }
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    stack: BitStack,
}

impl Parser<'_> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn lit(&mut self, word: &[u8]) -> bool {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> bool {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return false,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return false;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return false;
            }
        }
        true
    }

    /// After the opening quote; consumes through the closing quote.
    fn string(&mut self) -> bool {
        loop {
            // Fast skip over plain bytes.
            while let Some(&c) = self.b.get(self.i) {
                if c == b'"' || c == b'\\' || c < 0x20 {
                    break;
                }
                self.i += 1;
            }
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return true;
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            let hex = self.b.get(self.i + 1..self.i + 5);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return false;
                            }
                            self.i += 5;
                        }
                        _ => return false,
                    }
                }
                // A raw control character or end of input.
                _ => return false,
            }
        }
    }

    fn document(&mut self) -> bool {
        self.ws();
        if !self.value() {
            return false;
        }
        self.ws();
        self.i == self.b.len()
    }

    /// One value, iteratively (containers tracked on the bit stack).
    fn value(&mut self) -> bool {
        loop {
            // Parse a value start.
            self.ws();
            match self.peek() {
                Some(b'{') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                    } else {
                        self.stack.push(true);
                        if !self.key() {
                            return false;
                        }
                        continue;
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                    } else {
                        self.stack.push(false);
                        continue;
                    }
                }
                Some(b'"') => {
                    self.i += 1;
                    if !self.string() {
                        return false;
                    }
                }
                Some(b't') => {
                    if !self.lit(b"true") {
                        return false;
                    }
                }
                Some(b'f') => {
                    if !self.lit(b"false") {
                        return false;
                    }
                }
                Some(b'n') => {
                    if !self.lit(b"null") {
                        return false;
                    }
                }
                Some(b'-' | b'0'..=b'9') => {
                    if !self.number() {
                        return false;
                    }
                }
                _ => return false,
            }
            // A value ended: close containers or move to the next element.
            loop {
                let Some(object) = self.stack.top() else { return true };
                self.ws();
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        if object && !self.key() {
                            return false;
                        }
                        break;
                    }
                    Some(b'}') if object => {
                        self.i += 1;
                        self.stack.pop();
                    }
                    Some(b']') if !object => {
                        self.i += 1;
                        self.stack.pop();
                    }
                    _ => return false,
                }
            }
        }
    }

    /// An object member's `"key" :` (the value follows).
    fn key(&mut self) -> bool {
        self.ws();
        if self.peek() != Some(b'"') {
            return false;
        }
        self.i += 1;
        if !self.string() {
            return false;
        }
        self.ws();
        if self.peek() != Some(b':') {
            return false;
        }
        self.i += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::is_json_document;

    #[test]
    fn accepts_rfc_8259_documents() {
        for ok in [
            "0", "-0", "7", "-12.5e+3", "1E5", "true", "false", "null", "\"\"", " \"a\\u00e9\\ud800\\n\" ",
            "[]", "{}", "[1,[2,{\"a\":[]}]]", "{\"a\":{\"b\":null},\"c\":[true]}", "\t\r\n[ 1 , 2 ]\n",
            "\"\u{7f}é𝄞\"",
        ] {
            assert!(is_json_document(ok), "{ok:?}");
        }
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        assert!(is_json_document(&deep));
        let deep_obj = format!("{}1{}", "{\"a\":".repeat(300), "}".repeat(300));
        assert!(is_json_document(&deep_obj));
    }

    #[test]
    fn rejects_everything_else() {
        for bad in [
            "", " ", "01", "-", "1.", ".5", "+1", "1e", "1e+", "tru", "nul", "[1,]", "{\"a\":1,}", "{a:1}",
            "{\"a\"}", "{\"a\" 1}", "[1 2]", "\"\\x\"", "\"\\u12G4\"", "\"\u{1}\"", "\"abc", "[", "]", "{}}",
            "1 2", "[1}", "{\"a\":1]", "NaN", "Infinity", "'a'",
        ] {
            assert!(!is_json_document(bad), "{bad:?}");
        }
        let unbalanced = format!("{}{}", "[".repeat(300), "]".repeat(299));
        assert!(!is_json_document(&unbalanced));
    }
}
