//! The merger contract (§5.10.2) on real Yjs updates made with `yrs`.

use yrs::updates::decoder::Decode;
use yrs::{Doc, GetString, ReadTxn, StateVector, Text, Transact, Update};

use super::*;

/// A document authored by `client` with `text` inserted at 0 of the shared
/// text "text", encoded as a full-state update (what `syncular-client`'s
/// `crdt_insert_text` pushes).
fn insert(base: Option<&[u8]>, client: u64, at: u32, text: &str) -> Vec<u8> {
    let doc = Doc::with_client_id(client);
    if let Some(b) = base {
        doc.transact_mut().apply_update(Update::decode_v1(b).unwrap()).unwrap();
    }
    let t = doc.get_or_insert_text("text");
    t.insert(&mut doc.transact_mut(), at, text);
    let state = doc.transact().encode_state_as_update_v1(&StateVector::default());
    state
}

fn text_of(bytes: &[u8]) -> String {
    let doc = Doc::new();
    doc.transact_mut().apply_update(Update::decode_v1(bytes).unwrap()).unwrap();
    let t = doc.get_or_insert_text("text");
    let s = t.get_string(&doc.transact());
    s
}

fn merge(stored: Option<&[u8]>, incoming: &[u8]) -> Vec<u8> {
    Registry::builtin().merge(YJS_DOC, stored, incoming).unwrap()
}

#[test]
fn concurrent_edits_from_one_base_merge_to_both_texts_in_either_order() {
    let base = insert(None, 1, 0, "base ");
    let a = insert(Some(&base), 2, 5, "alpha");
    let b = insert(Some(&base), 3, 5, "beta");
    let stored = merge(None, &base);
    let ab = merge(Some(&merge(Some(&stored), &a)), &b);
    let ba = merge(Some(&merge(Some(&stored), &b)), &a);
    assert_eq!(ab, ba, "commutative: byte-identical whichever push arrives first");
    let text = text_of(&ab);
    assert!(text.starts_with("base "), "{text}");
    assert!(text.contains("alpha") && text.contains("beta"), "{text}");
}

#[test]
fn merge_is_idempotent_and_associative() {
    let a = insert(None, 7, 0, "a");
    let b = insert(None, 8, 0, "b");
    let c = insert(None, 9, 0, "c");
    let once = merge(None, &a);
    assert_eq!(merge(Some(&once), &a), once, "re-merging the same update is a no-op");
    let left = merge(Some(&merge(Some(&merge(None, &a)), &b)), &c);
    let right = merge(Some(&merge(None, &a)), &merge(Some(&merge(None, &b)), &c));
    assert_eq!(left, right);
}

#[test]
fn insert_merges_against_the_empty_document() {
    let a = insert(None, 4, 0, "hello");
    let merged = merge(None, &a);
    assert_eq!(text_of(&merged), "hello");
    // A full state re-encodes to itself.
    assert_eq!(merged, a);
}

#[test]
fn empty_incoming_keeps_the_stored_state() {
    let a = merge(None, &insert(None, 5, 0, "kept"));
    assert_eq!(merge(Some(&a), &[]), a);
    // Against NULL: the empty document's encoding.
    let empty = merge(None, &[]);
    assert_eq!(text_of(&empty), "");
}

#[test]
fn a_delta_whose_base_is_missing_is_kept_pending_not_dropped() {
    let base = insert(None, 1, 0, "x");
    let full = insert(Some(&base), 1, 1, "y");
    // The delta from `base` to `full`, merged without `base`: pending.
    let doc = Doc::new();
    doc.transact_mut().apply_update(Update::decode_v1(&full).unwrap()).unwrap();
    let sv = {
        let d = Doc::new();
        d.transact_mut().apply_update(Update::decode_v1(&base).unwrap()).unwrap();
        let sv = d.transact().state_vector();
        sv
    };
    let delta = doc.transact().encode_state_as_update_v1(&sv);
    drop(doc);
    let pending = merge(None, &delta);
    let completed = merge(Some(&pending), &base);
    assert_eq!(text_of(&completed), "xy");
}

#[test]
fn bytes_that_are_not_an_update_fail_and_name_the_side() {
    let good = insert(None, 6, 0, "ok");
    let e = Registry::builtin().merge(YJS_DOC, Some(&good), &[9, 9, 9]).unwrap_err();
    assert!(e.message.contains("incoming value"), "{e}");
    let e = Registry::builtin().merge(YJS_DOC, Some(&[0xff, 0xff, 0xff]), &good).unwrap_err();
    assert!(e.message.contains("stored value"), "{e}");
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A deterministic spread of short inputs: every outcome is Ok or Err.
    let r = Registry::builtin();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for len in 0..64usize {
        for _ in 0..32 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed & 0xff) as u8
                })
                .collect();
            let _ = r.merge(YJS_DOC, None, &bytes);
        }
    }
}

#[test]
fn unknown_type_is_an_error_and_hosts_can_add_mergers() {
    struct Concat;
    impl CrdtMerger for Concat {
        fn merge(&self, stored: Option<&[u8]>, incoming: &[u8]) -> Result<Vec<u8>, MergeError> {
            Ok([stored.unwrap_or_default(), incoming].concat())
        }
    }
    struct Panics;
    impl CrdtMerger for Panics {
        fn merge(&self, _: Option<&[u8]>, _: &[u8]) -> Result<Vec<u8>, MergeError> {
            panic!("boom")
        }
    }
    let e = Registry::builtin().merge("rga-log", None, b"x").unwrap_err();
    assert!(e.message.contains("no merger"), "{e}");
    let r = Registry::builtin().with("concat", &Concat).with("panics", &Panics);
    assert_eq!(r.types(), ["concat", "panics", YJS_DOC]);
    assert_eq!(r.merge("concat", Some(b"a"), b"b").unwrap(), b"ab");
    assert!(r.merge("panics", None, b"").unwrap_err().message.contains("panicked"));
}

#[test]
fn mutated_real_updates_never_abort() {
    // Every single-byte change of a real update (text, map, nested values):
    // merged against a real state, each is Ok or Err, never an abort.
    let doc = Doc::with_client_id(11);
    {
        let t = doc.get_or_insert_text("text");
        let m = doc.get_or_insert_map("map");
        let mut txn = doc.transact_mut();
        t.insert(&mut txn, 0, "héllo wörld");
        t.remove_range(&mut txn, 1, 3);
        yrs::Map::insert(&m, &mut txn, "k", yrs::Any::from(vec![yrs::Any::from(1.5), yrs::Any::from("s")]));
    }
    let update = doc.transact().encode_state_as_update_v1(&StateVector::default());
    drop(doc);
    let base = insert(None, 12, 0, "base");
    let r = Registry::builtin();
    for i in 0..update.len() {
        for v in [0u8, 1, 0x7f, 0x80, 0xc3, 0xff, update[i] ^ 1] {
            let mut m = update.clone();
            m[i] = v;
            let _ = r.merge(YJS_DOC, Some(&base), &m);
            let _ = r.merge(YJS_DOC, None, &m);
        }
    }
}

#[test]
fn invalid_utf8_in_a_string_is_refused_before_yrs() {
    let a = insert(None, 13, 0, "abc");
    let at = a.windows(3).position(|w| w == b"abc").unwrap();
    let mut bad = a.clone();
    bad[at + 1] = 0xff;
    let e = Registry::builtin().merge(YJS_DOC, None, &bad).unwrap_err();
    assert!(e.message.contains("UTF-8"), "{e}");
}

#[test]
fn text_helpers_author_and_read() {
    let a = text::insert(&[], 21, "text", 0, "hi").unwrap();
    let b = text::insert(&a, 22, "text", 2, " there").unwrap();
    assert_eq!(text::read(&b, "text").unwrap(), "hi there");
    assert_eq!(text::read(&[], "text").unwrap(), "");
    assert!(text::insert(&a, 23, "text", 9, "x").is_err());
    assert!(text::read(&[1, 2, 3], "text").is_err());
}

/// A longer mutation run than the default tests (`cargo test -p
/// syncular-crdt -- --ignored`): multi-byte edits, truncations and splices
/// of real updates, each merged against a real state — Ok or Err, never an
/// abort.
#[test]
#[ignore]
fn fuzz_mutated_updates() {
    let mut docs = Vec::new();
    for (client, text) in [(31u64, "one two"), (32, "ünïcödé 😀"), (33, "")] {
        let doc = Doc::with_client_id(client);
        {
            let t = doc.get_or_insert_text("text");
            let m = doc.get_or_insert_map("map");
            let a = doc.get_or_insert_array("arr");
            let mut txn = doc.transact_mut();
            t.insert(&mut txn, 0, text);
            if text.is_ascii() && !text.is_empty() {
                t.remove_range(&mut txn, 0, 1);
            }
            yrs::Map::insert(&m, &mut txn, "k", yrs::Any::from(vec![yrs::Any::from(2.5), yrs::Any::from("v")]));
            yrs::Array::push_back(&a, &mut txn, yrs::Any::from(7.0));
            yrs::Array::insert(&a, &mut txn, 0, yrs::MapPrelim::default());
        }
        let u = doc.transact().encode_state_as_update_v1(&StateVector::default());
        docs.push(u);
    }
    let base = insert(None, 12, 0, "base");
    let r = Registry::builtin();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let iterations: usize = std::env::var("CRDT_FUZZ").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    for _ in 0..iterations {
        let src = &docs[(next() % docs.len() as u64) as usize];
        let mut m = src.clone();
        match next() % 4 {
            0 => {
                for _ in 0..1 + next() % 4 {
                    let i = (next() % m.len() as u64) as usize;
                    m[i] = next() as u8;
                }
            }
            1 => m.truncate((next() % m.len() as u64) as usize),
            2 => {
                let other = &docs[(next() % docs.len() as u64) as usize];
                let cut = (next() % m.len() as u64) as usize;
                let from = (next() % other.len() as u64) as usize;
                m.truncate(cut);
                m.extend_from_slice(&other[from..]);
            }
            _ => {
                let i = (next() % m.len() as u64) as usize;
                m.insert(i, next() as u8);
            }
        }
        let _ = r.merge(YJS_DOC, Some(&base), &m);
        let _ = r.merge(YJS_DOC, Some(&m), &base);
    }
}
