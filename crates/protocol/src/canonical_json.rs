//! Canonical JSON (§11.2) — the contractual text digests are computed over:
//! UTF-8, no insignificant whitespace, object keys sorted by UTF-16 code
//! units, numbers in shortest-round-trip form, strings escaped exactly as
//! JavaScript's `JSON.stringify` does (`\"`, `\\`, `\b \f \n \r \t`, other
//! controls below U+0020 as `\u00xx` lowercase; everything else literal).
//!
//! [`canonical_scope_json`] is the §3.5 / §5.5 form for a scope map (value
//! lists additionally sorted by UTF-16 code units and deduplicated); it is
//! byte-identical to the reference `canonicalScopeJson`.

use crate::primitives::cmp_utf16;
use serde_json::Value;

/// Appends `s` as a JSON string literal (JavaScript `JSON.stringify` escaping).
pub fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 0xf)] as char);
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Shortest-round-trip rendering of a finite `f64` in JavaScript
/// `Number.prototype.toString` form (`1e+21`, `1.5e-7`, `0.000001`, `-0` → `0`).
/// Non-finite values render as `null` (what `JSON.stringify` emits).
pub fn js_number(v: f64) -> String {
    if !v.is_finite() {
        return "null".to_owned();
    }
    if v == 0.0 {
        return "0".to_owned();
    }
    // `{:e}` yields the shortest round-trip digits as d[.ddd]e<exp>.
    let sci = format!("{:e}", v.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let n = exp + 1;
    let mut out = String::new();
    if v < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n >= 1 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
    out
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else {
                out.push_str(&js_number(n.as_f64().unwrap_or(f64::NAN)));
            }
        }
        Value::String(s) => write_json_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_by(|a, b| cmp_utf16(a, b));
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(out, k);
                out.push(':');
                write_value(out, &m[k]);
            }
            out.push('}');
        }
    }
}

/// §11.2 canonical text of any JSON value (keys sorted by UTF-16 code
/// units, arrays kept in order, no whitespace, JS number and string forms).
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

/// §11.2 / §3.5 canonical text of a scope map: `{"key":["v1","v2"],…}` with
/// keys sorted and each value list sorted (UTF-16 code units) and
/// deduplicated. Input order and duplicates never change the output.
pub fn canonical_scope_json<K, V, I>(scopes: I) -> String
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: IntoIterator,
    V::Item: AsRef<str>,
{
    let mut entries: Vec<(String, Vec<String>)> = Vec::new();
    for (k, vs) in scopes {
        let vals: Vec<String> = vs.into_iter().map(|v| v.as_ref().to_owned()).collect();
        match entries.iter_mut().find(|(ek, _)| ek == k.as_ref()) {
            // A repeated key (only possible from a list input) merges: the
            // reference's object input cannot hold one, so union is the
            // order-independent choice.
            Some((_, ev)) => ev.extend(vals),
            None => entries.push((k.as_ref().to_owned(), vals)),
        }
    }
    entries.sort_by(|a, b| cmp_utf16(&a.0, &b.0));
    let mut out = String::from("{");
    for (i, (k, mut vals)) in entries.into_iter().enumerate() {
        vals.sort_by(|a, b| cmp_utf16(a, b));
        vals.dedup();
        if i > 0 {
            out.push(',');
        }
        write_json_string(&mut out, &k);
        out.push_str(":[");
        for (j, v) in vals.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            write_json_string(&mut out, v);
        }
        out.push(']');
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_follow_javascript_to_string() {
        let cases = [
            (1.0, "1"),
            (-0.0, "0"),
            (0.1, "0.1"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123.456, "123.456"),
            (-2.5e300, "-2.5e+300"),
            (5e-324, "5e-324"),
        ];
        for (v, want) in cases {
            assert_eq!(js_number(v), want, "{v}");
        }
        assert_eq!(js_number(f64::NAN), "null");
    }

    #[test]
    fn strings_escape_like_json_stringify() {
        let mut s = String::new();
        write_json_string(&mut s, "a\"b\\c\n\u{1}\u{7f}\u{2028}é");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\u0001\u{7f}\u{2028}é\"");
    }

    #[test]
    fn objects_sort_keys_by_utf16_and_drop_whitespace() {
        let v = json!({"b": [1, 2.5, {"z": null, "a": true}], "a": "x", "\u{FF61}": 1, "\u{10000}": 2});
        assert_eq!(
            canonical_json(&v),
            "{\"a\":\"x\",\"b\":[1,2.5,{\"a\":true,\"z\":null}],\"\u{10000}\":2,\"\u{FF61}\":1}"
        );
    }

    #[test]
    fn scope_json_sorts_and_dedups_values() {
        let m = vec![("project_id", vec!["p2", "p1", "p2"]), ("org", vec!["o"])];
        assert_eq!(canonical_scope_json(m), "{\"org\":[\"o\"],\"project_id\":[\"p1\",\"p2\"]}");
        let empty: Vec<(&str, Vec<&str>)> = vec![];
        assert_eq!(canonical_scope_json(empty), "{}");
    }
}
