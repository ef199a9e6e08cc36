//! Request-level validation of the pull half (SPEC §1.7, §3.2, §4.1–§4.3):
//! each fault fails the whole request with its code, before any push.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::constants::{ACCEPT_EXTERNAL_ROWS, ACCEPT_SQLITE};
    use syncular_protocol::request::PullRequest;

    use crate::tests::support::{expect_error, int8};
    use crate::tests::sync_pull_support::*;

    const INVALID_REQUEST: (&str, &str) = ("22023", "sync.invalid_request");
    const INVALID_SUBSCRIPTION: (&str, &str) = ("22023", "sync.invalid_subscription");
    const UNKNOWN_TABLE: (&str, &str) = ("0A000", "sync.unknown_table");

    fn client() -> Client {
        setup();
        Client::new("p1", "alice", "c1")
    }

    #[pg_test]
    fn accept_without_rows_bits_is_invalid_request() {
        let mut c = client();
        let r = c.try_pull(header(0, 0, 0, ACCEPT_SQLITE), vec![sub("s", "tasks", &[("ws", &["w1"])], 0, None)]);
        expect_error(r, INVALID_REQUEST.0, INVALID_REQUEST.1, "neither bit 0");
        let r = c.try_pull(header(0, 0, 0, 0), vec![]);
        expect_error(r, INVALID_REQUEST.0, INVALID_REQUEST.1, "rows support is mandatory");
    }

    #[pg_test]
    fn duplicate_subscription_ids_fail_the_request() {
        let mut c = client();
        let r = c.try_pull(
            header(0, 0, 0, ACCEPT_ROWS),
            vec![
                sub("s", "tasks", &[("ws", &["w1"])], -1, None),
                sub("s", "notes", &[("ws", &["w1"])], -1, None),
            ],
        );
        expect_error(r, INVALID_SUBSCRIPTION.0, INVALID_SUBSCRIPTION.1, "duplicate subscription id \"s\"");
    }

    #[pg_test]
    fn requested_wildcard_fails_the_request() {
        let mut c = client();
        let r = c.try_pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1", "*"])], -1, None)]);
        expect_error(r, INVALID_SUBSCRIPTION.0, INVALID_SUBSCRIPTION.1, "'*'");
    }

    #[pg_test]
    fn undeclared_requested_key_fails_the_request() {
        let mut c = client();
        // `proj` is declared by `notes`, not by `tasks`: still undeclared here.
        let r = c.try_pull(
            header(0, 0, 0, ACCEPT_ROWS),
            vec![sub("s", "tasks", &[("proj", &["p1"]), ("ws", &["w1"])], -1, None)],
        );
        expect_error(r, INVALID_SUBSCRIPTION.0, INVALID_SUBSCRIPTION.1, "\"proj\"");
    }

    #[pg_test]
    fn unknown_table_fails_the_request() {
        let mut c = client();
        let r = c.try_pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "nope", &[("ws", &["w1"])], -1, None)]);
        expect_error(r, UNKNOWN_TABLE.0, UNKNOWN_TABLE.1, "unknown table \"nope\"");
    }

    #[pg_test]
    fn bootstrap_with_external_rows_only_is_served_by_reference() {
        let mut c = client();
        c.push_ok(vec![task("t1", "w1", "a")]);
        // Bit 1 only (§4.2): every rows segment is a SEGMENT_REF, never inline.
        for (cursor, token) in [(-1, None), (0, Some("{}")), (99, None)] {
            let p = c.pull(header(0, 0, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], cursor, token)]);
            let s = p.one();
            assert!(s.segments.is_empty(), "nothing inline");
            assert_eq!(s.refs.len(), 1, "one descriptor");
        }
        // A revoked subscription that would otherwise bootstrap gets no data.
        let mut denied = Client::with_allowed("p1", "bob", "c2", Some(serde_json::json!({"ws": ["w9"]})));
        let p = denied.pull(header(0, 0, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        assert_eq!(p.one().start.status.name(), "revoked");
        assert!(p.one().refs.is_empty());
    }

    #[pg_test]
    fn a_failed_pull_validation_applies_no_push() {
        let mut c = client();
        let before = int8("SELECT count(*) FROM syncular.sync_commits").unwrap();
        let commit = syncular_protocol::request::PushCommit {
            client_commit_id: "x1".into(),
            operations: vec![task("t1", "w1", "a")],
        };
        let bytes = c.request(
            vec![commit],
            Some(PullRequest {
                header: header(0, 0, 0, ACCEPT_ROWS),
                subscriptions: vec![sub("s", "tasks", &[("ws", &["*"])], -1, None)],
            }),
        );
        expect_error(c.sync_bytes(bytes), INVALID_SUBSCRIPTION.0, INVALID_SUBSCRIPTION.1, "'*'");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_commits").unwrap(), before);
        assert_eq!(int8("SELECT count(*) FROM public.tasks").unwrap(), 0);
    }

    #[pg_test]
    fn nul_characters_in_subscription_ids_or_scope_values_are_invalid_requests() {
        let mut c = client();
        let r = c.try_pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s\u{0}x", "tasks", &[("ws", &["w1"])], 0, None)]);
        expect_error(r, INVALID_REQUEST.0, INVALID_REQUEST.1, "NUL character");
        let r = c.try_pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1\u{0}x"])], 0, None)]);
        expect_error(r, INVALID_REQUEST.0, INVALID_REQUEST.1, "NUL character");
        // A resume token whose row cursor holds NUL just restarts the bootstrap.
        c.push_ok(vec![task("t1", "w1", "x")]);
        let token = r#"{"asOfCommitSeq":1,"tables":["tasks"],"tableIndex":0,"rowCursor":"a\u0000b"}"#;
        let p = c.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], 1, Some(token))]);
        assert_eq!(p.one().segment_ids(), ["t1"]);
    }
}
