//! Property tests for the §3.2 scope algebra and the §3.5 digest invariants
//! (ours only; reference agreement is in `parity_data.rs`).
//! `PARITY_CASES` sets the case count (default 10,000).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use syncular_protocol::scope_digest::scope_digest;
use syncular_protocol::scopes::{effective, matches_effective, Effective, RevokeReason, ScopeMap, WILDCARD};

fn runner() -> TestRunner {
    let cases = std::env::var("PARITY_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

fn scope_map(values: &'static [&'static str]) -> impl Strategy<Value = ScopeMap> {
    prop::collection::btree_map(
        prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(str::to_owned),
        prop::collection::vec(prop::sample::select(values.to_vec()).prop_map(str::to_owned), 0..4),
        0..4,
    )
}

#[test]
fn effective_is_requested_intersect_allowed() {
    let strat = (scope_map(&["1", "2", "3"]), prop::option::of(scope_map(&["1", "2", "3", "*"])));
    runner()
        .run(&strat, |(requested, allowed)| {
            match effective(&requested, allowed.as_ref()) {
                Effective::Active(eff) => {
                    let allowed = allowed.as_ref().expect("active needs an allowed map");
                    // Exactly the requested keys survive, none empty.
                    prop_assert_eq!(eff.keys().collect::<Vec<_>>(), requested.keys().collect::<Vec<_>>());
                    for (k, vals) in &eff {
                        prop_assert!(!vals.is_empty());
                        let allow = &allowed[k];
                        for v in vals {
                            prop_assert!(requested[k].contains(v));
                            prop_assert!(allow.contains(v) || allow.iter().any(|a| a == WILDCARD));
                        }
                        // Nothing requested-and-allowed is lost.
                        for v in &requested[k] {
                            if allow.contains(v) || allow.iter().any(|a| a == WILDCARD) {
                                prop_assert!(vals.contains(v));
                            }
                        }
                    }
                    // A row whose stored values come from the effective lists matches.
                    prop_assert!(matches_effective(|k| eff.get(k).map(|v| v[0].as_str()), &eff));
                }
                Effective::Revoked(reason) => match (reason, allowed.as_ref()) {
                    (RevokeReason::ResolverFailed, a) => prop_assert!(a.is_none()),
                    (RevokeReason::Empty, _) => prop_assert!(requested.is_empty()),
                    (RevokeReason::KeyLost(k), Some(a)) => {
                        let survives = a.get(&k).is_some_and(|allow| {
                            requested[&k].iter().any(|v| allow.contains(v) || allow.iter().any(|x| x == WILDCARD))
                        });
                        prop_assert!(!survives, "key {k} should have survived");
                    }
                    (RevokeReason::KeyLost(_), None) => prop_assert!(false, "KeyLost without allowed"),
                },
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn digest_ignores_key_order_value_order_and_duplicates() {
    runner()
        .run(&scope_map(&["x", "y", "\u{10000}", "\u{ff61}", "\""]), |m| {
            let d = scope_digest(&m);
            prop_assert_eq!(d.len(), 64);
            let shuffled: Vec<(String, Vec<String>)> = m
                .iter()
                .rev()
                .map(|(k, v)| (k.clone(), v.iter().rev().chain(v.iter()).cloned().collect()))
                .collect();
            prop_assert_eq!(scope_digest(shuffled.iter().map(|(k, v)| (k, v))), d.clone());
            // A different value set changes the digest.
            let mut other = m.clone();
            other.entry("z".into()).or_default().push("new".into());
            prop_assert_ne!(scope_digest(&other), d);
            Ok(())
        })
        .unwrap();
}
