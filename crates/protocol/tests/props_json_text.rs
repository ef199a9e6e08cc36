//! `json_text::is_json_document` accepts exactly what serde_json's
//! `IgnoredAny` parse accepts (the `primitives::validate_json` rule), on
//! random JSON-alphabet strings and on mutations of valid documents.
//! `PARITY_CASES` sets the case count (default 10,000).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use syncular_protocol::json_text::is_json_document;

fn runner() -> TestRunner {
    let cases = std::env::var("PARITY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

fn serde_ok(s: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok()
}

#[test]
fn random_json_alphabet_strings_agree() {
    let strat = prop::collection::vec(
        prop::sample::select(vec![
            "{", "}", "[", "]", ",", ":", "\"", "\\", "u", "0", "1", "9", "-", "+", ".", "e", "E", " ", "\n",
            "\t", "true", "false", "null", "\"a\"", "\\u00e9", "\\ud800", "é", "\u{1}", "x", "/", "b",
        ]),
        0..24,
    )
    .prop_map(|parts| parts.concat());
    runner()
        .run(&strat, |s| {
            prop_assert_eq!(is_json_document(&s), serde_ok(&s), "{:?}", s);
            Ok(())
        })
        .unwrap();
}

#[test]
fn mutated_documents_agree() {
    let doc = prop::sample::select(vec![
        r#"{"a":[1,-2.5e+3,true,null,"x\"y"],"b":{"c":{}},"d":[]}"#,
        r#"[0,{"k":"\u00e9\n"},[[[]]],-0.0e0]"#,
        r#" "plain" "#,
        r#"{"nested":{"deeper":{"deepest":[1,2,3]}}}"#,
    ]);
    let strat = (doc, prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..4));
    runner()
        .run(&strat, |(doc, muts)| {
            let mut bytes = doc.as_bytes().to_vec();
            for (i, b, kind) in muts {
                let n = bytes.len();
                match kind {
                    0 if n > 0 => bytes[i % n] = b & 0x7f,
                    1 => bytes.insert(i % (n + 1), b & 0x7f),
                    _ if n > 0 => {
                        bytes.remove(i % n);
                    }
                    _ => {}
                }
            }
            let s = String::from_utf8(bytes).expect("ASCII mutations keep UTF-8");
            prop_assert_eq!(is_json_document(&s), serde_ok(&s), "{:?}", s);
            Ok(())
        })
        .unwrap();
}
