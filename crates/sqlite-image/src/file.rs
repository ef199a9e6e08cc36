//! [`ImageFile`]: a finished image on disk, its content address and a reader
//! over its bytes. The temporary directory goes when the value is dropped.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tempfile::TempDir;

use crate::error::ImageResult;

/// Read size while hashing, bytes.
const HASH_CHUNK: usize = 256 * 1024;

/// A finished §5.3 image file.
#[derive(Debug)]
pub struct ImageFile {
    _dir: TempDir,
    path: PathBuf,
    segment_id: String,
    byte_length: u64,
    row_count: u64,
}

impl ImageFile {
    /// Hashes the closed file at `path` (inside `dir`).
    pub(crate) fn hash(dir: TempDir, path: PathBuf, row_count: u64) -> ImageResult<ImageFile> {
        let mut file = File::open(&path)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; HASH_CHUNK];
        let mut byte_length = 0u64;
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            byte_length += n as u64;
        }
        let segment_id = format!("sha256:{}", hex::encode(hasher.finalize()));
        Ok(ImageFile { _dir: dir, path, segment_id, byte_length, row_count })
    }

    /// `segmentId`: `"sha256:"` + lowercase hex SHA-256 of the file (§5.1).
    pub fn segment_id(&self) -> &str {
        &self.segment_id
    }

    /// File size in bytes (`SEGMENT_REF.byteLength`).
    pub fn byte_length(&self) -> u64 {
        self.byte_length
    }

    /// Data rows (`SEGMENT_REF.rowCount`, `_syncular_segment.rowCount`).
    pub fn row_count(&self) -> u64 {
        self.row_count
    }

    /// Where the file is (valid while `self` lives).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh reader over the file's bytes from the start (read it in
    /// chunks; the bytes are never held in memory as a whole).
    pub fn reader(&self) -> io::Result<File> {
        File::open(&self.path)
    }

    /// The whole file in memory (tests and small images only).
    pub fn to_vec(&self) -> io::Result<Vec<u8>> {
        std::fs::read(&self.path)
    }
}
