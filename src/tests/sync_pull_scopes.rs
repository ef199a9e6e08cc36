//! Effective scopes and revocation on pull (SPEC §3.2, §3.3), and the
//! `sync_clients` bookkeeping (§4.5 watermark, §4.1/§8.1 omission is
//! unregistration).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;

    use crate::tests::support::run;
    use crate::tests::sync_pull_support::*;

    fn vs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn seeded() -> i64 {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        a.push_ok(vec![task("t1", "w1", "a"), task("t2", "w2", "b"), task("t3", "w3", "c")])
    }

    #[pg_test]
    fn effective_is_requested_intersect_allowed_and_is_echoed() {
        let max = seeded();
        let mut b = Client::with_allowed("p1", "bob", "cb", Some(json!({"ws": ["w2", "w3", "w9"]})));
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1", "w2"])], -1, None)]);
        let sec = p.one();
        assert_eq!(sec.start.status.name(), "active");
        assert_eq!(sec.start.effective_scopes, vec![("ws".to_string(), vs(&["w2"]))], "narrowed to the grant");
        assert_eq!(sec.segment_ids(), ["t2"], "rows of w1 never delivered");
        assert_eq!(sec.end.next_cursor, max);
        // Incremental too.
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1", "w2"])], 0, None)]);
        let ids: Vec<&str> = p.one().commits[0].changes.iter().map(|c| c.row_id.as_str()).collect();
        assert_eq!(ids, ["t2"]);
    }

    #[pg_test]
    fn wildcard_allowed_passes_requested_values_through() {
        seeded();
        let mut b = Client::with_allowed("p1", "bob", "cb", Some(json!({"ws": ["*"]})));
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w3", "w1"])], -1, None)]);
        assert_eq!(p.one().start.effective_scopes, vec![("ws".to_string(), vs(&["w3", "w1"]))]);
        assert_eq!(p.one().segment_ids(), ["t1", "t3"]);
    }

    #[pg_test]
    fn revoked_cases_send_no_data_and_echo_the_cursor() {
        seeded();
        let cases = [
            // Empty intersection.
            (Some(json!({"ws": ["w9"]})), vec![("ws", vec!["w1"])]),
            // Requested key absent from allowed (partial scope loss on notes).
            (Some(json!({"ws": ["*"]})), vec![("proj", vec!["p1"]), ("ws", vec!["w1"])]),
            // Nothing requested → effective empty.
            (Some(json!({"ws": ["*"]})), vec![]),
            // No allowed map and no resolver registered.
            (None, vec![("ws", vec!["w1"])]),
        ];
        for (i, (allowed, scopes)) in cases.into_iter().enumerate() {
            let mut b = Client::with_allowed("p1", "bob", &format!("c{i}"), allowed);
            let scopes: Vec<(&str, &[&str])> = scopes.iter().map(|(k, v)| (*k, v.as_slice())).collect();
            let table = if scopes.len() == 2 { "notes" } else { "tasks" };
            for cursor in [-1, 0] {
                let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", table, &scopes, cursor, None)]);
                let sec = p.one();
                assert_eq!(sec.start.status.name(), "revoked", "case {i}");
                assert_eq!(sec.start.reason_code, "sync.scope_revoked");
                assert!(sec.start.effective_scopes.is_empty());
                assert!(!sec.start.bootstrap);
                assert!(sec.commits.is_empty() && sec.segments.is_empty());
                assert_eq!((sec.end.next_cursor, sec.end.bootstrap_state.clone()), (cursor, None));
            }
        }
    }

    #[pg_test]
    fn a_raising_resolver_revokes() {
        seeded();
        run("CREATE FUNCTION public.boom(p text, a text) RETURNS jsonb LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'nope'; END $$");
        run("SELECT syncular.set_scope_resolver('public.boom(text,text)'::regprocedure)");
        let mut b = Client::with_allowed("p1", "bob", "cb", None);
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        assert_eq!(p.one().start.status.name(), "revoked");
        // A resolver granting w1 activates it.
        run("CREATE FUNCTION public.grant_w1(p text, a text) RETURNS jsonb LANGUAGE sql AS $$ SELECT '{\"ws\":[\"w1\"]}'::jsonb $$");
        run("SELECT syncular.set_scope_resolver('public.grant_w1(text,text)'::regprocedure)");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        assert_eq!(p.one().segment_ids(), ["t1"]);
    }

    #[pg_test]
    fn responses_echo_subscriptions_in_request_order() {
        seeded();
        let mut b = Client::with_allowed("p1", "bob", "cb", Some(json!({"ws": ["w1", "w2"]})));
        let p = b.pull(
            header(0, 0, 0, ACCEPT_ROWS),
            vec![
                sub("z", "tasks", &[("ws", &["w2"])], -1, None),
                sub("a", "tasks", &[("ws", &["w3"])], -1, None),
                sub("m", "tasks", &[("ws", &["w1"])], 0, None),
            ],
        );
        let ids: Vec<&str> = p.sections.iter().map(|s| s.start.id.as_str()).collect();
        assert_eq!(ids, ["z", "a", "m"]);
        let statuses: Vec<&str> = p.sections.iter().map(|s| s.start.status.name()).collect();
        assert_eq!(statuses, ["active", "revoked", "active"]);
    }

    #[pg_test]
    fn sync_clients_records_the_minimum_cursor_and_the_subscription_list() {
        let max = seeded();
        let mut a = Client::new("p1", "alice", "ca");
        let extra = a.push_ok(vec![task("t4", "w1", "d")]);
        let mut b = Client::new("p1", "bob", "cb");
        // Active subs' nextCursors: bootstrap → asOf = extra; incremental
        // from 0 with limit 1 → the first commit (max); a quiet notes window
        // → extra. The minimum is max.
        let p = b.pull(
            header(1, 0, 0, ACCEPT_ROWS),
            vec![
                sub("boot", "tasks", &[("ws", &["w2"])], -1, None),
                sub("inc", "tasks", &[("ws", &["w1"])], 0, None),
                sub("gone", "notes", &[("ws", &["w1"])], 0, None),
            ],
        );
        assert_eq!(p.sections[1].end.next_cursor, max);
        let (cursor, subs) = client_record("p1", "cb").expect("client row");
        assert_eq!(cursor, max, "minimum nextCursor over active subscriptions");
        assert_eq!(
            subs,
            json!([
                {"id": "boot", "table": "tasks", "scopes": {"ws": ["w2"]}},
                {"id": "inc", "table": "tasks", "scopes": {"ws": ["w1"]}},
                {"id": "gone", "table": "notes", "scopes": {"ws": ["w1"]}}
            ])
        );
        // Omission is unregistration: the next pull's list replaces it.
        b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("inc", "tasks", &[("ws", &["w1"])], max, None)]);
        let (cursor, subs) = client_record("p1", "cb").unwrap();
        assert_eq!(cursor, extra);
        assert_eq!(subs, json!([{"id": "inc", "table": "tasks", "scopes": {"ws": ["w1"]}}]));
        // A pull whose subscriptions are all revoked keeps the cursor.
        let mut denied = Client::with_allowed("p1", "bob", "cb", Some(json!({"ws": ["w9"]})));
        denied.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("inc", "tasks", &[("ws", &["w1"])], 0, None)]);
        assert_eq!(client_record("p1", "cb").unwrap().0, extra);
        // A push-only request leaves cursor and list alone.
        b.push_ok(vec![task("t5", "w1", "e")]);
        let (cursor, subs) = client_record("p1", "cb").unwrap();
        assert_eq!(cursor, extra);
        assert_eq!(subs, json!([{"id": "inc", "table": "tasks", "scopes": {"ws": ["w1"]}}]));
        // An empty subscription list unregisters everything.
        b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![]);
        assert_eq!(client_record("p1", "cb").unwrap().1, json!([]));
    }
}
