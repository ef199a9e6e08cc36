//! Yjs text helpers over column bytes, for tests and tools (the same
//! operations `syncular-client`'s `crdt-yjs` feature performs app-side,
//! §5.10.5): read the shared text of a state, and author an insert as a
//! full-state update. Not used by the merge path.

use yrs::{Doc, GetString, ReadTxn, StateVector, Text, Transact};

use crate::MergeError;

fn load(doc: &Doc, bytes: &[u8]) -> Result<(), MergeError> {
    crate::apply(doc, bytes, "the document")
}

/// The shared text `name` of the document `bytes` holds (empty for empty
/// bytes, the empty document).
pub fn read(bytes: &[u8], name: &str) -> Result<String, MergeError> {
    let doc = Doc::new();
    load(&doc, bytes)?;
    let text = doc.get_or_insert_text(name);
    let out = text.get_string(&doc.transact());
    Ok(out)
}

/// Loads `base` (empty: the empty document) into a document whose Yjs
/// client id is `client` (< 2^53), inserts `value` at offset `at` of the
/// shared text `name` (a UTF-8 byte offset on a char boundary: `yrs`' default
/// `OffsetKind::Bytes`), and returns the whole state as one Yjs-v1 update.
/// Errors: `base` is not an update, `at` is past the end.
pub fn insert(base: &[u8], client: u64, name: &str, at: u32, value: &str) -> Result<Vec<u8>, MergeError> {
    let doc = Doc::with_client_id(client);
    load(&doc, base)?;
    let text = doc.get_or_insert_text(name);
    {
        let mut txn = doc.transact_mut();
        if at > text.len(&txn) {
            return Err(MergeError { message: format!("offset {at} is past the end of the text") });
        }
        text.insert(&mut txn, at, value);
    }
    let state = doc.transact().encode_state_as_update_v1(&StateVector::default());
    Ok(state)
}
