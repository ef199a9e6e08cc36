//! `syncular.realtime_deltas` (SPEC §8.2, §8.3): a delta carries exactly
//! the commits a pull of the same window would, per registration; the wake
//! reasons; one answer per group in one call; bad groups.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::response::decode_response;

    use crate::tests::realtime::support::*;
    use crate::tests::support::expect_error;
    use crate::tests::sync_pull_support::*;

    const MIB: i32 = 1 << 20;

    /// Bob pulls `tasks` ws:[w1] (and `notes` ws:[w1] proj:[p1]) and opens a
    /// session allowed everything; returns his session and cursor.
    fn bob_session(partition: &str, with_notes: bool) -> (Value, i64) {
        let mut bob = Client::new(partition, "bob", "cb");
        let mut subs = vec![sub("t", "tasks", &[("ws", &["w1"])], 0, None)];
        if with_notes {
            subs.push(sub("n", "notes", &[("proj", &["p1"]), ("ws", &["w1"])], 0, None));
        }
        bob.pull(header(0, 0, 0, ACCEPT_ROWS), subs);
        let s = open_ok(partition, "bob", "cb", Some(json!({"ws": ["*"], "proj": ["*"]})));
        let cursor = s["cursor"].as_i64().unwrap();
        (s, cursor)
    }

    #[pg_test]
    fn a_delta_carries_exactly_the_commits_a_pull_of_the_window_would() {
        setup();
        let (session, c0) = bob_session("rt-d", true);
        let mut a = Client::new("rt-d", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "one"), task("t2", "w2", "not bob's")]);
        let s2 = a.push_ok(vec![note("n1", "w1", "p1", "note"), note("n2", "w1", "p9", "other proj")]);
        let s3 = a.push_ok(vec![task("t9", "w2", "quiet")]);
        let s4 = a.push_ok(vec![delete("tasks", "t1")]);
        let rows = deltas_ok("rt-d", json!([group(&session, c0, false)]), MIB);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].group_index, rows[0].kind.as_str(), rows[0].cursor), (0, "delta", s4));
        let delta = Pulled::from_bytes(rows[0].delta.as_ref().unwrap());
        let epoch = delta.response.header.epoch.clone().expect("v2 header carries the epoch");
        assert_eq!((epoch.log_epoch.as_str(), epoch.reset_required), (session["logEpoch"].as_str().unwrap(), false));
        assert_eq!(delta.sections.len(), 2, "one section per registration with a match");
        let (t, n) = (&delta.sections[0], &delta.sections[1]);
        assert_eq!((t.start.id.as_str(), t.start.status.name(), t.start.bootstrap), ("t", "active", false));
        assert_eq!(t.commit_seqs(), vec![s1, s4], "s2/s3 touch no w1 task");
        assert_eq!(n.commit_seqs(), vec![s2]);
        assert_eq!(n.change_count(), 1, "n2 is outside proj p1");
        assert!(delta.sections.iter().all(|s| s.end.next_cursor == s4 && s.end.bootstrap_state.is_none()));
        assert_eq!(n.start.effective_scopes, vec![("proj".into(), vec!["p1".into()]), ("ws".into(), vec!["w1".into()])]);

        // Byte-for-byte the COMMIT frames an incremental pull of (c0, s4] returns.
        let mut probe = Client::new("rt-d", "bob", "cb");
        let pulled = probe.pull(
            header(0, 0, 0, ACCEPT_ROWS),
            vec![sub("t", "tasks", &[("ws", &["w1"])], c0, None), sub("n", "notes", &[("proj", &["p1"]), ("ws", &["w1"])], c0, None)],
        );
        assert_eq!(pulled.sections[0].commits, t.commits);
        assert_eq!(pulled.sections[1].commits, n.commits);
        let _ = s3;
    }

    #[pg_test]
    fn quiet_windows_suppression_and_the_size_cap() {
        setup();
        let (session, c0) = bob_session("rt-w", false);
        let mut a = Client::new("rt-w", "alice", "ca");
        let quiet = a.push_ok(vec![task("q", "w2", "not bob's")]);
        let rows = deltas_ok("rt-w", json!([group(&session, c0, false), group(&session, c0, true)]), MIB);
        assert_eq!(rows.iter().map(|r| (r.kind.as_str(), r.cursor)).collect::<Vec<_>>(), vec![("none", quiet), ("none", quiet)]);
        assert!(rows.iter().all(|r| r.delta.is_none()));

        let hit = a.push_ok(vec![task("h", "w1", &"x".repeat(500))]);
        let rows = deltas_ok(
            "rt-w",
            json!([group(&session, quiet, true), group(&session, quiet, false), group(&session, hit, false)]),
            MIB,
        );
        assert_eq!(rows[0].kind, "catchup-required", "suppressed + a match → wake, no bytes");
        assert!(rows[0].delta.is_none());
        assert_eq!(rows[1].kind, "delta");
        assert_eq!(rows[2].kind, "none", "nothing past the head");
        assert!(rows.iter().all(|r| r.cursor == hit));
        assert_eq!(rows.iter().map(|r| r.group_index).collect::<Vec<_>>(), vec![0, 1, 2]);

        let too_large = deltas_ok("rt-w", json!([group(&session, quiet, false)]), 200);
        assert_eq!((too_large[0].kind.as_str(), too_large[0].delta.is_none()), ("delta-too-large", true));
        let fits = rows[1].delta.as_ref().unwrap().len() as i32;
        assert_eq!(deltas_ok("rt-w", json!([group(&session, quiet, false)]), fits)[0].kind, "delta", "the cap is inclusive");
        assert_eq!(deltas_ok("rt-w", json!([group(&session, quiet, false)]), fits - 1)[0].kind, "delta-too-large");
    }

    #[pg_test]
    fn reset_and_catchup_wakes() {
        setup();
        let (session, c0) = bob_session("rt-r", false);
        let mut a = Client::new("rt-r", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "x")]);
        let mut stale = group(&session, c0, false);
        stale["logEpoch"] = json!("an-old-epoch");
        let mut old_schema = group(&session, c0, false);
        old_schema["schemaVersion"] = json!(0);
        let rows = deltas_ok("rt-r", json!([stale, old_schema]), MIB);
        assert_eq!(rows.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(), vec!["reset-required", "reset-required"]);

        let s2 = a.push_ok(vec![task("t2", "w1", "y")]);
        set_horizon("rt-r", s1);
        let rows = deltas_ok("rt-r", json!([group(&session, c0, false), group(&session, s1, false)]), MIB);
        assert_eq!(rows[0].kind, "catchup-required", "a cursor behind the pruning horizon cannot be bridged");
        assert_eq!(rows[1].kind, "delta");
        assert_eq!(Pulled::from_bytes(rows[1].delta.as_ref().unwrap()).one().commit_seqs(), vec![s2]);
    }

    #[pg_test]
    fn through_seq_caps_the_window_at_what_the_gateway_saw_notified() {
        setup();
        let (session, c0) = bob_session("rt-t", false);
        let mut a = Client::new("rt-t", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "x")]);
        let s2 = a.push_ok(vec![task("t2", "w1", "y")]);
        let rows = deltas_through("rt-t", json!([group(&session, c0, false)]), MIB, Some(s1)).unwrap();
        assert_eq!((rows[0].kind.as_str(), rows[0].cursor), ("delta", s1));
        let only = Pulled::from_bytes(rows[0].delta.as_ref().unwrap());
        assert_eq!((only.one().commit_seqs(), only.one().end.next_cursor), (vec![s1], s1));
        let rows = deltas_through("rt-t", json!([group(&session, s1, false)]), MIB, Some(s2 + 100)).unwrap();
        assert_eq!(rows[0].cursor, s2, "capped at max_commit_seq");
        assert_eq!(Pulled::from_bytes(rows[0].delta.as_ref().unwrap()).one().commit_seqs(), vec![s2]);
        let rows = deltas_through("rt-t", json!([group(&session, s1, false)]), MIB, Some(s1)).unwrap();
        assert_eq!((rows[0].kind.as_str(), rows[0].cursor), ("none", s1), "nothing past the cap");
        expect_error(
            deltas_through("rt-t", json!([group(&session, c0, false)]), MIB, Some(-1)),
            "22023",
            "syncular.invalid_argument",
            "through_seq",
        );
    }

    #[pg_test]
    fn each_group_gets_its_wire_version() {
        setup();
        let (session, c0) = bob_session("rt-v", false);
        let mut a = Client::new("rt-v", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "x")]);
        let mut v1 = group(&session, c0, false);
        v1["wireVersion"] = json!(1);
        let rows = deltas_ok("rt-v", json!([v1, group(&session, c0, false)]), MIB);
        let r1 = decode_response(rows[0].delta.as_ref().unwrap()).unwrap();
        let r2 = decode_response(rows[1].delta.as_ref().unwrap()).unwrap();
        assert_eq!((r1.wire_version, r1.header.epoch.is_none()), (1, true));
        assert_eq!((r2.wire_version, r2.header.epoch.is_some()), (2, true));
        assert_eq!(Pulled::from_bytes(rows[0].delta.as_ref().unwrap()).one().commit_seqs(), vec![s1]);
    }

    #[pg_test]
    fn malformed_groups_are_refused_loudly() {
        setup();
        let (session, c0) = bob_session("rt-m", false);
        let good = group(&session, c0, false);
        let with = |key: &str, v: Value| {
            let mut g = good.clone();
            g[key] = v;
            json!([g])
        };
        for (groups, fragment) in [
            (json!({}), "groups must be a JSON array"),
            (json!([1]), "group 0 must be an object"),
            (with("wireVersion", json!(4)), "wireVersion 4 is not 1, 2 or 3"),
            (with("wireVersion", json!(0)), "wireVersion 0 is not 1, 2 or 3"),
            (with("cursor", json!("7")), "\"cursor\" must be an integer"),
            (with("suppressed", json!(null)), "\"suppressed\" must be a boolean"),
            (with("registrations", json!([{"id": "t", "table": "nope", "effective": {"ws": ["w1"]}}])), "not registered"),
            (with("registrations", json!([{"id": "t", "table": "tasks", "effective": {"proj": ["p"]}}])), "not declared"),
            (with("registrations", json!([{"id": "t", "table": "tasks", "effective": {}}])), "must be non-empty"),
            (with("registrations", json!([{"id": "t", "table": "tasks", "effective": {"ws": ["*"]}}])), "'*'"),
        ] {
            let err = deltas("rt-m", groups, MIB).unwrap_err();
            assert_eq!(detail_object(&err)["code"], json!("syncular.invalid_argument"));
            expect_error(Err::<(), _>(err), "22023", "syncular.invalid_argument", fragment);
        }
        expect_error(deltas("rt-m", json!([good.clone()]), 10), "22023", "syncular.invalid_argument", "at least 64");
        // A group opened under an older schema is reset-required whatever its registrations
        // name (a table retired since must not fail the partition's whole call).
        let mut stale = good.clone();
        stale["schemaVersion"] = json!(0);
        stale["registrations"] = json!([{"id": "t", "table": "retired_long_ago", "effective": {"ws": ["w1"]}}]);
        let rows = deltas_ok("rt-m", json!([stale, good]), MIB);
        assert_eq!(rows.iter().map(|r| r.kind.as_str()).collect::<Vec<_>>(), vec!["reset-required", "none"]);
        // An unknown partition: the epoch cannot match.
        assert_eq!(deltas_ok("rt-unknown", json!([group(&session, 0, false)]), MIB)[0].kind, "reset-required");
    }
}
