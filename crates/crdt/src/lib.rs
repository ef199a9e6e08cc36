//! CRDT column mergers (SPEC §5.10.2), pgrx-free.
//!
//! A `crdt` column (§2.4 tag 8) holds opaque CRDT bytes that the server
//! **merges** on push instead of overwriting: the stored value becomes
//! `merge(stored, incoming)` (§5.10.3). This crate owns:
//!
//! - [`CrdtMerger`]: the merge function of one `crdtType` — commutative,
//!   associative and idempotent over the updates it consumes (the CRDT
//!   contract that makes arrival order and replays irrelevant);
//! - [`Registry`]: `crdtType` → merger; [`Registry::builtin`] holds the one
//!   type this rung defines, `"yjs-doc"` ([`YjsDocMerger`]);
//! - [`MergeError`]: an update that does not decode (or a merger that
//!   panicked) — the engine turns it into `sync.crdt_merge_failed`;
//! - [`text`]: read / author Yjs text in column bytes (tests, tools).
//!
//! Yjs (the `yrs` crate, the Rust port, Yjs-v1 update encoding) enters the
//! dependency tree here and nowhere else: the protocol crate and the gateway
//! stay CRDT-free (§5.10.2 "the server core MUST NOT hard-depend on any
//! CRDT library").
//!
//! The trait is object-safe and takes plain bytes, so a merger that is not
//! compiled in (for instance a SQL function registered by the host) can be
//! an implementation the extension builds at request time and puts in a
//! [`Registry`] next to the built-in one ([`Registry::with`]).

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub mod text;
mod yjs_v1;

use yrs::updates::decoder::Decode;
use yrs::{Doc, ReadTxn, StateVector, Transact, Update};

/// The one built-in `crdtType` (§5.10.1).
pub const YJS_DOC: &str = "yjs-doc";

/// Why a merge failed: the stored or the incoming bytes are not a value of
/// the merger's CRDT, or the merger broke. The message names which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeError {
    /// Human-readable reason (no bytes echoed).
    pub message: String,
}

impl MergeError {
    fn new(message: impl Into<String>) -> Self {
        MergeError { message: message.into() }
    }
}

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for MergeError {}

/// The merge function of one `crdtType` (§5.10.2):
/// `merge(stored: bytes | null, incoming: bytes) → merged: bytes`.
///
/// `stored` is the column's current value (`None` for a new row or a NULL
/// column, "the empty document"); `incoming` the pushed value. The result is
/// what the column stores and every client receives. An implementation MUST
/// be commutative, associative and idempotent over the updates it consumes,
/// and MUST NOT panic on any input (a panic is caught by [`Registry::merge`]
/// and reported as a [`MergeError`], but it is still a bug).
pub trait CrdtMerger: Send + Sync {
    /// Merges `incoming` into `stored`.
    fn merge(&self, stored: Option<&[u8]>, incoming: &[u8]) -> Result<Vec<u8>, MergeError>;
}

/// The `yjs-doc` merger — byte for byte the reference `yjsDocMerger` of
/// `@syncular/crdt-yjs`: apply `stored` then `incoming` (each a Yjs-v1
/// update; a full state is a legal update; empty bytes are skipped) into a
/// fresh document and encode its whole state as one Yjs-v1 update
/// (`Y.encodeStateAsUpdate`). Updates whose dependencies are missing stay
/// in the encoded state as pending structs (nothing is dropped). Bytes are
/// checked structurally before `yrs` decodes them (`yjs_v1`: `yrs` assumes
/// valid UTF-8 and 53-bit client ids), so no input reaches its unchecked
/// paths; Yjs-v2 updates are refused (the clients push v1).
#[derive(Debug, Clone, Copy, Default)]
pub struct YjsDocMerger;

fn apply(doc: &Doc, bytes: &[u8], what: &str) -> Result<(), MergeError> {
    if bytes.is_empty() {
        return Ok(());
    }
    yjs_v1::check_update(bytes).map_err(|e| MergeError::new(format!("{what} is not a Yjs (v1) update: {e}")))?;
    let update = Update::decode_v1(bytes)
        .map_err(|e| MergeError::new(format!("{what} is not a Yjs (v1) update: {e}")))?;
    doc.transact_mut()
        .apply_update(update)
        .map_err(|e| MergeError::new(format!("{what} cannot be applied as a Yjs update: {e}")))
}

impl CrdtMerger for YjsDocMerger {
    fn merge(&self, stored: Option<&[u8]>, incoming: &[u8]) -> Result<Vec<u8>, MergeError> {
        let doc = Doc::new();
        apply(&doc, stored.unwrap_or_default(), "the stored value")?;
        apply(&doc, incoming, "the incoming value")?;
        let merged = doc.transact().encode_state_as_update_v1(&StateVector::default());
        Ok(merged)
    }
}

static YJS_DOC_MERGER: YjsDocMerger = YjsDocMerger;

/// `crdtType` → merger (§5.10.2). [`Registry::builtin`] is what the server
/// serves with; [`Registry::with`] adds (or replaces) an entry.
#[derive(Clone)]
pub struct Registry<'m> {
    mergers: BTreeMap<String, &'m dyn CrdtMerger>,
}

impl fmt::Debug for Registry<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").field("types", &self.types()).finish()
    }
}

impl Registry<'static> {
    /// The built-in registry: `"yjs-doc"` → [`YjsDocMerger`].
    pub fn builtin() -> Self {
        Registry::empty().with(YJS_DOC, &YJS_DOC_MERGER)
    }
}

impl<'m> Registry<'m> {
    /// A registry without mergers (every `crdtType` is unknown).
    pub fn empty() -> Self {
        Registry { mergers: BTreeMap::new() }
    }

    /// This registry with `crdt_type` served by `merger` (replacing any
    /// earlier entry of that name).
    pub fn with(mut self, crdt_type: &str, merger: &'m dyn CrdtMerger) -> Self {
        self.mergers.insert(crdt_type.to_owned(), merger);
        self
    }

    /// The merger of `crdt_type`, if one is registered.
    pub fn get(&self, crdt_type: &str) -> Option<&'m dyn CrdtMerger> {
        self.mergers.get(crdt_type).copied()
    }

    /// The registered `crdtType` names, sorted.
    pub fn types(&self) -> Vec<&str> {
        self.mergers.keys().map(String::as_str).collect()
    }

    /// `merge(stored, incoming)` with the merger of `crdt_type`. Errors: no
    /// merger for `crdt_type`; the merger's own error; a panicking merger
    /// (caught here, so no input can take the caller down).
    pub fn merge(&self, crdt_type: &str, stored: Option<&[u8]>, incoming: &[u8]) -> Result<Vec<u8>, MergeError> {
        let merger = self
            .get(crdt_type)
            .ok_or_else(|| MergeError::new(format!("no merger is registered for crdtType {crdt_type:?}")))?;
        catch_unwind(AssertUnwindSafe(|| merger.merge(stored, incoming)))
            .unwrap_or_else(|_| Err(MergeError::new(format!("the {crdt_type:?} merger panicked"))))
    }
}

#[cfg(test)]
mod tests;
