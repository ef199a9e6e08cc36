//! What Postgres can store and index of a client-chosen string. `text` holds no NUL, and a
//! btree entry holds at most 2704 bytes (an 8 KiB page); a `clientId`, `clientCommitId`,
//! `rowId` or scope value is a part of such keys, next to the partition and a table name
//! (`sync_push_results`, `sync_row_scopes`, `sync_change_scopes`, `sync_blob_refs`, the app
//! tables; a reaction's idempotency key holds the partition twice). Capping each part at
//! [`MAX_KEY_PART_BYTES`], and partitions at as many
//! ([`crate::engine::auth::caller::MAX_PARTITION_BYTES`]), keeps every key under that limit, so
//! an over-long id is a clear protocol error instead of Postgres's `54000 index row size …
//! exceeds maximum` from deep inside a write.

/// Longest `clientId`, `clientCommitId`, `rowId` or scope value accepted, in UTF-8 bytes.
pub const MAX_KEY_PART_BYTES: usize = 512;

/// Why `value` cannot be stored as a key part (a phrase that follows its name), or `None`.
pub fn unstorable(value: &str) -> Option<String> {
    if value.contains('\0') {
        return Some("contains a NUL character, which this server cannot store".into());
    }
    (value.len() > MAX_KEY_PART_BYTES).then(|| {
        format!("is {} bytes long; at most {MAX_KEY_PART_BYTES} bytes are accepted", value.len())
    })
}

/// `value` for an error message: its first 40 characters, `…` when cut, debug-quoted.
pub fn preview(value: &str) -> String {
    match value.char_indices().nth(40) {
        Some((end, _)) => format!("{:?}…", &value[..end]),
        None => format!("{value:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_and_length_are_refused_at_the_byte_limit() {
        assert_eq!(unstorable(&"é".repeat(MAX_KEY_PART_BYTES / 2)), None, "512 bytes of 2-byte characters fit");
        assert!(unstorable(&format!("{}x", "é".repeat(MAX_KEY_PART_BYTES / 2))).unwrap().contains("513 bytes long"));
        assert!(unstorable("a\0b").unwrap().contains("NUL"));
        assert_eq!(preview("short"), "\"short\"");
        assert_eq!(preview(&"ü".repeat(100)), format!("{:?}…", "ü".repeat(40)));
    }
}
