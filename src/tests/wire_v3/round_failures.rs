//! `ROUND_FAILURE` (wire version 3): a report is kept per client and code
//! (`syncular.round_failures`), once per request — also when the push and
//! pull halves run as two calls, and on a round that ends at the schema
//! floor — and never changes the round's outcome; a malformed or misplaced
//! frame, and any wire version outside 1–3, is `sync.invalid_request` with
//! nothing written.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::response::PushStatus;

    use crate::tests::support::{expect_error, int8};
    use crate::tests::sync_support::*;
    use crate::tests::wire_v3::support::*;

    const P: &str = "v3-rf";

    fn reports(client: &str, code: &str) -> Option<i64> {
        int8(&format!(
            "SELECT (SELECT reports FROM syncular.round_failures('{P}') WHERE client_id = '{client}' AND code = '{code}')"
        ))
    }

    #[pg_test]
    fn a_report_is_counted_once_per_request_and_changes_nothing_else() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let allowed = allowed_p1_p2();
        let with_push = || {
            request3(
                "c1",
                Some(&epoch),
                Some("transport.timeout"),
                vec![commit("k1", vec![upsert3(&full("t1", "p1", "x"), None)])],
                Some(empty_pull()),
            )
        };
        let resp = sync(P, "alice", &with_push(), Some(&allowed));
        assert_eq!(push_results(&resp)[0].status, PushStatus::Applied, "the report does not change the round");
        assert_eq!(reports("c1", "transport.timeout"), Some(1));
        // The gateway's two-transaction plan: push half, then pull half of the same request.
        call("push", P, "alice", &with_push(), Some(&allowed)).expect("push half");
        call("pull", P, "alice", &with_push(), Some(&allowed)).expect("pull half");
        assert_eq!(reports("c1", "transport.timeout"), Some(2), "one request, one report");
        // A pull-only request reports through its only call.
        let pull_only = request3("c1", Some(&epoch), Some("sync.rate_limited"), vec![], Some(empty_pull()));
        call("pull", P, "alice", &pull_only, Some(&allowed)).expect("pull");
        assert_eq!(reports("c1", "sync.rate_limited"), Some(1));
        let last = int8(&format!("SELECT max(last_reported_at_ms) FROM syncular.round_failures('{P}')")).unwrap();
        assert!(last > 0);
    }

    #[pg_test]
    fn a_client_keeps_at_most_sixteen_codes() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        for i in 0..20 {
            let code = format!("made.up_{i}");
            sync(P, "alice", &request3("c1", Some(&epoch), Some(&code), vec![], Some(empty_pull())), None);
        }
        sync(P, "alice", &request3("c1", Some(&epoch), Some("made.up_0"), vec![], Some(empty_pull())), None);
        assert_eq!(int8(&format!("SELECT count(*) FROM syncular.round_failures('{P}') WHERE client_id = 'c1'")), Some(17));
        assert_eq!(reports("c1", "made.up_0"), Some(2), "a kept code keeps counting");
        assert_eq!(reports("c1", "syncular.other_codes"), Some(4), "the codes past sixteen");
        assert_eq!(reports("c1", "made.up_19"), None);
    }

    #[pg_test]
    fn a_floor_round_reports_for_a_known_client_only() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let floor = |client: &str| {
            syncular_protocol::request::encode_request(&syncular_protocol::request::Request {
                wire_version: 3,
                header: syncular_protocol::request::ReqHeader {
                    client_id: client.into(),
                    schema_version: 9,
                    log_epoch: Some(epoch.clone()),
                },
                round_failure: Some("transport.failed".into()),
                commits: vec![],
                pull: Some(empty_pull()),
                unknown: vec![],
            })
            .unwrap()
        };
        // c1 has a client record once a round bound it (the epoch acquisition did not).
        sync(P, "alice", &request3("c1", Some(&epoch), None, vec![], Some(empty_pull())), None);
        let resp = sync(P, "alice", &floor("c1"), None);
        assert_eq!(resp.header.required_schema_version, Some(1), "answered at the schema floor");
        assert_eq!(reports("c1", "transport.failed"), Some(1), "a bound client's report lands");
        sync(P, "alice", &floor("stranger"), None);
        assert_eq!(reports("stranger", "transport.failed"), None, "no record, no report");
        // Bound to another actor: not recorded either.
        sync(P, "mallory", &floor("c1"), None);
        assert_eq!(reports("c1", "transport.failed"), Some(1));
    }

    #[pg_test]
    fn malformed_round_failure_frames_are_invalid_requests() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let valid = request3("c1", Some(&epoch), Some("transport.failed"), vec![], Some(empty_pull()));
        // Byte surgery on a valid request: the frame after the 8-byte envelope is REQ_HEADER,
        // then ROUND_FAILURE (type 0x05).
        let header_len = 5 + u32::from_le_bytes(valid[9..13].try_into().unwrap()) as usize;
        let rf_at = 8 + header_len;
        assert_eq!(valid[rf_at], 0x05);
        let rf_len = 5 + u32::from_le_bytes(valid[rf_at + 1..rf_at + 5].try_into().unwrap()) as usize;
        let rf = valid[rf_at..rf_at + rf_len].to_vec();
        let splice = |at: usize, extra: &[u8]| {
            let mut b = valid.clone();
            b.splice(at..at, extra.iter().copied());
            b
        };
        let twice = splice(rf_at + rf_len, &rf);
        // An unknown frame (type 0x0e, empty) between REQ_HEADER and ROUND_FAILURE.
        let late = splice(rf_at, &[0x0e, 0, 0, 0, 0]);
        let bad_code = {
            let mut b = valid.clone();
            let code_at = rf_at + 5 + 4;
            b[code_at] = b'T'; // "Transport.failed": uppercase
            b
        };
        for (name, bytes, fragment) in [
            ("duplicate", twice, "duplicate ROUND_FAILURE"),
            ("after another frame", late, "immediately follow REQ_HEADER"),
            ("bad code", bad_code, "ROUND_FAILURE.code"),
        ] {
            expect_error(call("sync", P, "alice", &bytes, None), "22023", "sync.invalid_request", fragment);
            let _ = name;
        }
        assert_eq!(int8(&format!("SELECT count(*) FROM syncular.round_failures('{P}')")), Some(0), "nothing recorded");
        // A v2 request cannot carry one: 0x05 is an unknown frame there, skipped (§1.2).
        let mut v2 = valid.clone();
        v2[4] = 2;
        let resp = sync(P, "alice", &v2, None);
        assert_eq!(resp.wire_version, 2);
        assert_eq!(int8(&format!("SELECT count(*) FROM syncular.round_failures('{P}')")), Some(0));
        // Wire versions outside 1–3.
        for version in [0u8, 4, 255] {
            let mut b = valid.clone();
            b[4] = version;
            expect_error(call("sync", P, "alice", &b, None), "22023", "sync.invalid_request", "wireVersion");
        }
        // And the connection still serves.
        assert_eq!(sync(P, "alice", &valid, None).wire_version, 3);
    }
}
