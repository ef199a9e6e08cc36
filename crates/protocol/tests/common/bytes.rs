//! Byte builders of the in-test fixtures (`fixtures_messages.rs`,
//! `fixtures_v3.rs`): messages written byte by byte, independent of the
//! encoders under test.
#![allow(dead_code)]

use syncular_protocol::constants::MAGIC;
use syncular_protocol::primitives::Writer;

/// The bytes `f` writes.
pub fn payload(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::new();
    f(&mut w);
    w.into_vec()
}

/// One frame: `frameType`, `u32` length, payload (§1.2).
pub fn frame(ty: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![ty];
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// A message: envelope (`wireVersion` `version`, `msgKind` `kind`, flags
/// 0), `frames` verbatim, then `END`.
pub fn message(version: u16, kind: u8, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(&version.to_le_bytes());
    v.extend([kind, 0]);
    frames.iter().for_each(|f| v.extend_from_slice(f));
    v.extend_from_slice(&[0, 0, 0, 0, 0]);
    v
}
