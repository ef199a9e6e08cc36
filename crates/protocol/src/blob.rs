//! Blob content addresses and references (SPEC §5.9.1, §5.1): the
//! `"sha256:" + 64 lowercase hex` blob id, an incremental hasher that
//! computes it over streamed bytes, and the blob ids a decoded row
//! references through its `blob_ref` columns.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use crate::row_codec::{Row, RowValue, TableLayout};

/// The prefix of every blob id (and segment id, §5.1).
pub const BLOB_ID_PREFIX: &str = "sha256:";

/// Whether `id` is a well-formed blob id: `"sha256:"` + 64 lowercase hex.
pub fn is_blob_id(id: &str) -> bool {
    id.strip_prefix(BLOB_ID_PREFIX)
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The blob id of `bytes`.
pub fn blob_id_of(bytes: &[u8]) -> String {
    let mut h = BlobHasher::new();
    h.update(bytes);
    h.finish()
}

/// SHA-256 over streamed bytes, rendered as a blob id at the end.
#[derive(Debug, Clone, Default)]
pub struct BlobHasher(Sha256);

impl BlobHasher {
    /// A hasher over no bytes yet.
    pub fn new() -> Self {
        BlobHasher(Sha256::new())
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The blob id of every byte fed.
    pub fn finish(self) -> String {
        format!("{BLOB_ID_PREFIX}{}", hex::encode(self.0.finalize()))
    }
}

/// The `blobId` of a canonical BlobRef text (§5.9.1), `None` when the text
/// is not an object with a well-formed `blobId` string (a decoded row's
/// `blob_ref` values were shape-checked already).
pub fn blob_ref_id(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Ref {
        #[serde(rename = "blobId")]
        blob_id: String,
    }
    serde_json::from_str::<Ref>(text).ok().map(|r| r.blob_id).filter(|id| is_blob_id(id))
}

/// The distinct blob ids `row` references: the `blobId` of every non-NULL
/// `blob_ref` value (an encrypted column is `bytes` on the wire and
/// references nothing the server can see), ascending.
pub fn row_blob_ids(layout: &TableLayout, row: &Row) -> Vec<String> {
    let mut ids = BTreeSet::new();
    for (_, value) in layout.columns.iter().zip(row) {
        if let Some(RowValue::BlobRef(text)) = value {
            if let Some(id) = blob_ref_id(text) {
                ids.insert(id);
            }
        }
    }
    ids.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row_codec::{ColumnLayout, ColumnType};

    #[test]
    fn ids_hash_the_bytes_streamed_in_any_split() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let whole = blob_id_of(&bytes);
        assert!(is_blob_id(&whole));
        let mut h = BlobHasher::new();
        for part in bytes.chunks(777) {
            h.update(part);
        }
        assert_eq!(h.finish(), whole);
        assert_eq!(blob_id_of(b""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn blob_ids_are_strictly_formed() {
        let hex = "ab".repeat(32);
        assert!(is_blob_id(&format!("sha256:{hex}")));
        assert!(!is_blob_id(&format!("sha256:{}", hex.to_uppercase())));
        assert!(!is_blob_id(&format!("sha256:{}", &hex[1..])));
        assert!(!is_blob_id(&hex));
        assert!(!is_blob_id(""));
    }

    #[test]
    fn a_row_references_the_ids_of_its_blob_ref_values() {
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        let layout = TableLayout::new(vec![
            ColumnLayout::new("id", ColumnType::String, false),
            ColumnLayout::new("x", ColumnType::BlobRef, true),
            ColumnLayout::new("y", ColumnType::BlobRef, true),
            ColumnLayout::new("z", ColumnType::BlobRef, true),
        ]);
        let r = |id: &str| Some(RowValue::BlobRef(format!(r#"{{"blobId":"{id}","byteLength":1}}"#)));
        let row = vec![Some(RowValue::String("k".into())), r(&b), r(&a), r(&b)];
        assert_eq!(row_blob_ids(&layout, &row), vec![a.clone(), b]);
        let row = vec![Some(RowValue::String("k".into())), None, None, None];
        assert!(row_blob_ids(&layout, &row).is_empty());
    }
}
