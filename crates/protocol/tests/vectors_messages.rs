//! Golden vectors for the `request/` and `response/` kinds (SPEC.md
//! Appendix A, §11.1): every valid case decodes, renders deep-equal to its
//! `.json`, and re-encodes byte-identical to its `.bin`; every `invalid/`
//! case fails with the code its manifest names.

mod common;

use std::path::Path;
use syncular_protocol::message::{decode_message, encode_message};
use syncular_protocol::render::render_decoded;
use syncular_protocol::request::{carries_push_commit, decode_request};

fn run_kind(dir: &Path, kind: &str) -> (usize, usize) {
    let manifest = common::manifest(dir, kind);
    let mut missing = Vec::new();
    let mut valid = 0;
    for case in manifest["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().unwrap();
        let bin_path = dir.join(kind).join(case["bin"].as_str().unwrap());
        let json_path = dir.join(kind).join(case["json"].as_str().unwrap());
        let (Ok(bin), Ok(json_text)) = (std::fs::read(&bin_path), std::fs::read_to_string(&json_path)) else {
            missing.push(name.to_owned());
            continue;
        };
        let msg = decode_message(&bin).unwrap_or_else(|e| panic!("{kind}/{name}: decode failed: {e}"));
        let rendered = render_decoded(&msg).unwrap();
        let expected: serde_json::Value = serde_json::from_str(&json_text).unwrap();
        assert_eq!(rendered, expected, "{kind}/{name}: rendering differs");
        let re = encode_message(&msg).unwrap_or_else(|e| panic!("{kind}/{name}: encode failed: {e}"));
        assert_eq!(re, bin, "{kind}/{name}: re-encoding is not byte-identical");
        valid += 1;
    }
    let mut invalid = 0;
    for case in manifest["invalid"].as_array().expect("invalid") {
        let name = case["name"].as_str().unwrap();
        let code = case["error"].as_str().unwrap();
        let Ok(bin) = std::fs::read(dir.join(kind).join(case["bin"].as_str().unwrap())) else {
            missing.push(name.to_owned());
            continue;
        };
        let err = decode_message(&bin).expect_err(&format!("{kind}/invalid/{name} must fail"));
        assert_eq!(err.code.as_str(), code, "{kind}/invalid/{name}: {err}");
        invalid += 1;
    }
    if !missing.is_empty() {
        eprintln!("\n!!! {kind}: manifest cases without files in the vectors folder (skipped): {missing:?} !!!\n");
    }
    (valid, invalid)
}

#[test]
fn request_vectors() {
    let Some(dir) = common::vectors_dir() else { return };
    let (valid, invalid) = run_kind(&dir, "request");
    assert!(valid >= 5 && invalid >= 7, "ran {valid} valid / {invalid} invalid request cases");
}

#[test]
fn response_vectors() {
    let Some(dir) = common::vectors_dir() else { return };
    let (valid, invalid) = run_kind(&dir, "response");
    assert!(valid >= 13 && invalid >= 1, "ran {valid} valid / {invalid} invalid response cases");
}

/// `carries_push_commit` (a frame-header scan) agrees with the full decoder on
/// every valid request vector, and says `true` for each of its truncations
/// (not a well-framed request: the durable side).
#[test]
fn carries_push_commit_agrees_with_the_decoder() {
    let Some(dir) = common::vectors_dir() else { return };
    let manifest = common::manifest(&dir, "request");
    let (mut with, mut without) = (0, 0);
    for case in manifest["cases"].as_array().expect("cases") {
        let Ok(bin) = std::fs::read(dir.join("request").join(case["bin"].as_str().unwrap())) else { continue };
        let pushes = !decode_request(&bin).expect("valid vector").commits.is_empty();
        assert_eq!(carries_push_commit(&bin), pushes, "request/{}", case["name"]);
        if pushes { with += 1 } else { without += 1 }
        for cut in 0..bin.len() {
            assert!(carries_push_commit(&bin[..cut]), "request/{} cut at {cut}", case["name"]);
        }
    }
    assert!(with > 0 && without > 0, "vectors with pushes: {with}, without: {without}");
}
