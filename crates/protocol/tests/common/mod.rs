//! Shared helpers for the golden-vector tests.
//!
//! The vectors folder comes from `SSP2_VECTORS`; its default is the
//! workspace's `../shared/ssp2-vectors`, resolved from `CARGO_MANIFEST_DIR`
//! (cargo runs each crate's tests from that crate's directory). Where the
//! folder is absent the tests say so loudly and skip, unless
//! `SSP2_VECTORS_REQUIRED=1` (set by `.ci/run`) turns the skip into a failure.
#![allow(dead_code)]

use std::path::PathBuf;

/// The vectors folder, or `None` (after a loud message) when it is absent
/// and not required. Panics when `SSP2_VECTORS_REQUIRED=1` and it is absent.
pub fn vectors_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("SSP2_VECTORS") {
        Some(p) => PathBuf::from(p),
        // crates/protocol -> workspace root -> its sibling shared/
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/ssp2-vectors"),
    };
    if dir.join("request/manifest.json").is_file() {
        return Some(dir);
    }
    let required = std::env::var("SSP2_VECTORS_REQUIRED").map(|v| v == "1").unwrap_or(false);
    let msg = format!(
        "SSP2 golden vectors not found at {} (set SSP2_VECTORS to the ssp2-vectors folder)",
        dir.display()
    );
    if required {
        panic!("{msg}; SSP2_VECTORS_REQUIRED=1 forbids skipping");
    }
    eprintln!("\n!!! SKIPPING golden-vector test: {msg} !!!\n");
    None
}

/// Reads and parses `<kind>/manifest.json`.
pub fn manifest(dir: &std::path::Path, kind: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join(kind).join("manifest.json")).expect("manifest");
    serde_json::from_str(&text).expect("manifest is JSON")
}
