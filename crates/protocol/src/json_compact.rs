//! Compact JSON text: the insignificant whitespace (space, tab, LF, CR
//! outside strings, RFC 8259 §2) of a JSON document removed, every other byte
//! kept — numbers keep every digit, strings and escapes are untouched, key
//! order is unchanged. Used to turn Postgres' `jsonb` output
//! (`{"a": 1, "b": [1, 2]}`) into the compact text a client pushes
//! (`{"a":1,"b":[1,2]}`) without a lossy round trip through `f64`.

/// `text` without insignificant whitespace. For a text that is not one JSON
/// document the result is unspecified (it is still valid UTF-8).
pub fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::compact;

    #[test]
    fn drops_whitespace_outside_strings_only() {
        assert_eq!(compact(r#"{"a": 1, "b": [1, 2]}"#), r#"{"a":1,"b":[1,2]}"#);
        assert_eq!(compact(r#"{"k y": "a, b: \" c ", "n": 12345678901234567890.50}"#), r#"{"k y":"a, b: \" c ","n":12345678901234567890.50}"#);
        assert_eq!(compact(" \t\r\n\"x\\\\\" "), "\"x\\\\\"");
        assert_eq!(compact("[ ]"), "[]");
    }

    #[test]
    fn equals_serde_for_documents_serde_holds_exactly() {
        for doc in [r#"{"a": [1, {"b": null}], "c": "d e", "f": true}"#, r#"[1.5, -2, "x\ny", {}]"#, "\"s\"", "0"] {
            let v: serde_json::Value = serde_json::from_str(doc).unwrap();
            assert_eq!(compact(doc), v.to_string(), "{doc}");
        }
    }
}
