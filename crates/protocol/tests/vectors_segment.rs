//! Golden vectors, `segment/` kind (Appendix A): every valid `.bin` decodes,
//! renders (§11.1 rule 8) deep-equal to its `.json` and re-encodes
//! byte-identically; every invalid case fails with the manifest's code.

mod common;

use syncular_protocol::segment::{
    decode_rows_segment, encode_rows_segment, render_rows_segment, validate_rows_segment,
};

/// Deep equality where numbers compare by value (`3.0` == `3`), as JSON
/// parsers in the reference languages do.
fn json_eq(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value::*;
    match (a, b) {
        (Number(x), Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Array(x), Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q)),
        (Object(x), Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn segment_vectors() {
    let Some(dir) = common::vectors_dir() else { return };
    let manifest = common::manifest(&dir, "segment");
    let kind_dir = dir.join("segment");
    let cases = manifest["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let bin = std::fs::read(kind_dir.join(case["bin"].as_str().unwrap())).unwrap();
        let want: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(kind_dir.join(case["json"].as_str().unwrap())).unwrap(),
        )
        .unwrap();
        validate_rows_segment(&bin).unwrap_or_else(|e| panic!("{name}: validate: {e}"));
        let seg = decode_rows_segment(&bin).unwrap_or_else(|e| panic!("{name}: decode: {e}"));
        let got = render_rows_segment(&seg);
        assert!(json_eq(&got, &want), "{name}: rendering differs\n got: {got}\nwant: {want}");
        let again = encode_rows_segment(&seg).unwrap_or_else(|e| panic!("{name}: encode: {e}"));
        assert_eq!(again, bin, "{name}: re-encode is not byte-identical");
    }
    let invalid = manifest["invalid"].as_array().expect("invalid");
    assert!(!invalid.is_empty());
    for case in invalid {
        let name = case["name"].as_str().unwrap();
        let code = case["error"].as_str().unwrap();
        let bin = std::fs::read(kind_dir.join(case["bin"].as_str().unwrap())).unwrap();
        let e = decode_rows_segment(&bin).expect_err(name);
        assert_eq!(e.code.as_str(), code, "{name}: {e}");
        let e = validate_rows_segment(&bin).expect_err(name);
        assert_eq!(e.code.as_str(), code, "{name} (validate): {e}");
    }
}
