//! Properties of the `_sync_column_versions` encoding (`column_versions`):
//! maps round-trip (versions ≤ 1 dropped, an all-dropped map is SQL NULL),
//! the decoder accepts exactly the encoder's outputs (any byte string it
//! accepts re-encodes to itself), rejections are `sync.internal_error`, and
//! the column-version rule reads what the authority wrote.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use syncular_protocol::column_versions::{column_version, decode_column_versions, encode_column_versions};
use syncular_protocol::ErrorCode;

fn runner() -> TestRunner {
    let cases = std::env::var("PARITY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

fn version() -> impl Strategy<Value = i64> {
    prop_oneof![Just(i64::MIN), -3i64..=3, 2i64..1 << 20, Just(i64::MAX), any::<i64>()]
}

fn versions() -> impl Strategy<Value = BTreeMap<usize, i64>> {
    prop::collection::btree_map(prop_oneof![0usize..40, any::<usize>()], version(), 0..12)
}

#[test]
fn maps_round_trip_without_versions_up_to_one() {
    runner()
        .run(&versions(), |m| {
            let kept: BTreeMap<usize, i64> = m.iter().filter(|(_, v)| **v > 1).map(|(k, v)| (*k, *v)).collect();
            let blob = encode_column_versions(&m);
            prop_assert_eq!(blob.is_none(), kept.is_empty());
            let back = decode_column_versions(blob.as_deref()).expect("the encoder's output decodes");
            prop_assert_eq!(&back, &kept);
            prop_assert_eq!(encode_column_versions(&back), blob);
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_decoder_accepts_exactly_canonical_blobs() {
    let bytes = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..24),
        // Mostly-canonical blobs with one byte changed.
        (versions(), any::<prop::sample::Index>(), any::<u8>()).prop_map(|(m, i, b)| {
            let mut v = encode_column_versions(&m).unwrap_or_default();
            if !v.is_empty() {
                let at = i.index(v.len());
                v[at] = b;
            }
            v
        }),
    ];
    runner()
        .run(&bytes, |b| {
            match decode_column_versions(Some(&b)) {
                Ok(m) => prop_assert_eq!(encode_column_versions(&m).unwrap_or_default(), b),
                Err(e) => prop_assert_eq!(e.code, ErrorCode::InternalError),
            }
            Ok(())
        })
        .unwrap();
}

/// The authority's update rule (`syncular-authority` 0.49 `push.rs`): a
/// write at `row_version + 1` moves the written columns to the new version
/// and keeps every other column's version; reading the stored blob back
/// gives each column that version — except that a map with no version above
/// 1 is stored as NULL and then reads as the row version (the reference's
/// behaviour, documented in the module).
#[test]
fn column_version_reads_back_what_an_update_wrote() {
    let case = (prop::collection::vec(1i64..6, 1..10), 1i64..8, prop::collection::vec(any::<bool>(), 10));
    runner()
        .run(&case, |(before, row_version, written)| {
            let row_version = row_version.max(before.iter().copied().max().unwrap_or(1));
            let stored: BTreeMap<usize, i64> = before.iter().enumerate().map(|(i, v)| (i, *v)).collect();
            let blob = encode_column_versions(&stored);
            let read = decode_column_versions(blob.as_deref()).unwrap();
            let next = row_version + 1;
            let after: BTreeMap<usize, i64> = (0..before.len())
                .map(|i| (i, if written[i] { next } else { column_version(blob.as_ref().map(|_| &read), row_version, i) }))
                .collect();
            let blob = encode_column_versions(&after);
            let read = decode_column_versions(blob.as_deref()).unwrap();
            for (i, v) in &after {
                let got = column_version(blob.as_ref().map(|_| &read), next, *i);
                if blob.is_some() {
                    prop_assert_eq!(got, (*v).max(1));
                } else {
                    prop_assert_eq!(got, next);
                }
            }
            Ok(())
        })
        .unwrap();
}
