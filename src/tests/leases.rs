//! Auth leases (SPEC §7.3): off by default (no frame, no rows); a live
//! round issues a lease whose `LEASE` frame follows `RESP_HEADER`; refresh
//! slides the same id; the outage signal (argument or resolver) serves the
//! round from a valid lease without refreshing it; expired, another actor,
//! a tampered row → `sync.auth_lease_required`; revoked →
//! `sync.auth_lease_revoked`; a revoked lease is not refreshed until the
//! revocation is cleared, then a fresh id is minted.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::response::{decode_response, PushStatus, Response, ResponseFrame};

    use crate::tests::support::*;
    use crate::tests::sync_support::*;

    const P: &str = "leases-p";
    const T0: i64 = 1_800_000_000_000;
    const TTL_MS: i64 = 60_000;

    fn at(now_ms: i64) {
        run(&format!("SET LOCAL syncular.now_ms = '{now_ms}'"));
    }

    fn leases_on() {
        run("SET LOCAL syncular.lease_ttl = '60s'");
    }

    fn outage() -> Value {
        json!("resolver_outage")
    }

    fn p1() -> Value {
        json!({"project_id": ["p1"]})
    }

    /// The `LEASE` frame of a response, asserting it is the first frame after `RESP_HEADER`.
    fn lease_of(resp: &Response) -> Option<(String, i64)> {
        let found: Vec<usize> =
            resp.frames.iter().enumerate().filter(|(_, f)| matches!(f, ResponseFrame::Lease(_))).map(|(i, _)| i).collect();
        match found.as_slice() {
            [] => None,
            [0] => match &resp.frames[0] {
                ResponseFrame::Lease(l) => Some((l.lease_id.clone(), l.expires_at_ms)),
                _ => unreachable!(),
            },
            other => panic!("LEASE must be the single frame right after RESP_HEADER, found at {other:?}: {resp:?}"),
        }
    }

    /// A round of `actor`/`client` pushing `commits` (and an empty pull).
    fn round(actor: &str, client: &str, epoch: &str, commits: Vec<syncular_protocol::request::PushCommit>, allowed: Option<&Value>) -> Response {
        sync(P, actor, &request(2, client, 1, Some(epoch), commits, Some(empty_pull())), allowed)
    }

    fn try_round(actor: &str, client: &str, epoch: &str, allowed: Option<&Value>) -> Result<Vec<u8>, crate::store::spi::subtransaction::SubtransactionError> {
        call("sync", P, actor, &request(2, client, 1, Some(epoch), vec![], Some(empty_pull())), allowed)
    }

    fn stored(client: &str) -> (String, i64, i64, Option<i64>, bool) {
        let row = text(&format!(
            "SELECT json_build_array(lease_id, issued_at_ms, expires_at_ms, revoked_at_ms, signature_valid)::text \
               FROM syncular.leases('{P}') WHERE client_id = '{client}'"
        ))
        .expect("a stored lease");
        let v: Value = serde_json::from_str(&row).unwrap();
        (
            v[0].as_str().unwrap().to_owned(),
            v[1].as_i64().unwrap(),
            v[2].as_i64().unwrap(),
            v[3].as_i64(),
            v[4].as_bool().unwrap(),
        )
    }

    fn setup() -> String {
        setup_tasks();
        at(T0);
        acquire_epoch(P, "alice", "c1")
    }

    #[pg_test]
    fn off_by_default_no_frame_no_rows_and_the_outage_signal_is_refused() {
        let epoch = setup();
        let resp = round("alice", "c1", &epoch, vec![commit("k1", vec![upsert(&task("t1", "p1", "a", None), None)])], Some(&p1()));
        assert_eq!(lease_of(&resp), None);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_auth_leases"), 0);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_lease_key"), 0);
        expect_error(try_round("alice", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_required", "leases are off");
    }

    #[pg_test]
    fn a_resolved_round_issues_a_lease_right_after_resp_header() {
        let epoch = setup();
        leases_on();
        let resp = round("alice", "c1", &epoch, vec![commit("k1", vec![upsert(&task("t1", "p1", "a", None), None)])], Some(&p1()));
        let (id, expires) = lease_of(&resp).expect("a LEASE frame");
        assert!(!id.is_empty());
        assert_eq!(expires, T0 + TTL_MS);
        assert!(matches!(&resp.frames[1], ResponseFrame::PushResult(r) if r.status == PushStatus::Applied), "{resp:?}");
        assert_eq!(stored("c1"), (id, T0, T0 + TTL_MS, None, true));
        assert_eq!(
            text(&format!("SELECT allowed_scopes::text FROM syncular.sync_auth_leases WHERE partition = '{P}'")),
            Some(r#"{"project_id": ["p1"]}"#.into())
        );
        assert_eq!(count("SELECT count(*) FROM syncular.sync_lease_key"), 1);
        // A denied round (no resolver, no map) and a schema-floor round issue nothing.
        let before = stored("c1");
        let denied = round("alice", "c1", &epoch, vec![], None);
        assert_eq!(lease_of(&denied), None);
        let floor = sync(P, "alice", &request(2, "c1", 9, Some(&epoch), vec![], Some(empty_pull())), Some(&p1()));
        assert_eq!(lease_of(&floor), None);
        assert_eq!(stored("c1"), before);
    }

    #[pg_test]
    fn refresh_slides_the_same_id_and_recaptures_the_scopes() {
        let epoch = setup();
        leases_on();
        let (id, _) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        at(T0 + 30_000);
        let wider = json!({"project_id": ["p1", "p2"]});
        let (again, expires) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&wider))).unwrap();
        assert_eq!(again, id, "a refresh keeps the id");
        assert_eq!(expires, T0 + 30_000 + TTL_MS);
        assert_eq!(stored("c1"), (id.clone(), T0 + 30_000, T0 + 30_000 + TTL_MS, None, true));
        assert_eq!(
            text(&format!("SELECT allowed_scopes::text FROM syncular.sync_auth_leases WHERE partition = '{P}'")),
            Some(r#"{"project_id": ["p1", "p2"]}"#.into())
        );
        // Another client of the same actor holds its own lease.
        acquire_epoch(P, "alice", "c2");
        let (other, _) = lease_of(&round("alice", "c2", &epoch, vec![], Some(&p1()))).unwrap();
        assert_ne!(other, id);
    }

    #[pg_test]
    fn the_split_halves_emit_the_frame_once() {
        let epoch = setup();
        leases_on();
        let req = request(2, "c1", 1, Some(&epoch), vec![commit("k1", vec![upsert(&task("t1", "p1", "a", None), None)])], Some(empty_pull()));
        let push = decode_response(&call("push", P, "alice", &req, Some(&p1())).unwrap()).unwrap();
        assert!(lease_of(&push).is_some(), "the push half issues");
        let pull = decode_response(&call("pull", P, "alice", &req, Some(&p1())).unwrap()).unwrap();
        assert_eq!(lease_of(&pull), None, "the pull half of a request with commits does not");
        let pull_only = request(2, "c1", 1, Some(&epoch), vec![], Some(empty_pull()));
        let pull = decode_response(&call("pull", P, "alice", &pull_only, Some(&p1())).unwrap()).unwrap();
        assert!(lease_of(&pull).is_some(), "a pull-only request does");
    }

    #[pg_test]
    fn an_outage_is_served_from_a_valid_lease_without_refreshing_it() {
        let epoch = setup();
        leases_on();
        let (id, _) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        at(T0 + 10_000);
        // The gateway's signal: writes authorized against the leased map, exactly as a resolver's.
        let resp = round(
            "alice",
            "c1",
            &epoch,
            vec![
                commit("k1", vec![upsert(&task("t1", "p1", "in scope", None), None)]),
                commit("k2", vec![upsert(&task("t2", "p2", "out of scope", None), None)]),
            ],
            Some(&outage()),
        );
        assert_eq!(lease_of(&resp), None, "no refresh during lease service");
        let results = push_results(&resp);
        assert_eq!(results[0].status, PushStatus::Applied);
        assert_eq!(results[1].status, PushStatus::Rejected);
        assert_eq!(rejection(&results[1]).1, "sync.forbidden");
        assert_eq!(stored("c1"), (id.clone(), T0, T0 + TTL_MS, None, true), "untouched");
        // The resolver's signal: the same.
        run(
            "CREATE FUNCTION public.lease_outage(partition text, actor_id text) RETURNS jsonb \
             LANGUAGE sql AS $$ SELECT '\"resolver_outage\"'::jsonb $$",
        );
        run("SELECT syncular.set_scope_resolver('public.lease_outage(text,text)')");
        let resp = round("alice", "c1", &epoch, vec![commit("k3", vec![upsert(&task("t3", "p1", "via resolver", None), None)])], None);
        assert_eq!(lease_of(&resp), None);
        assert_eq!(push_results(&resp)[0].status, PushStatus::Applied);
        // Up to the instant before expiry, then sync.auth_lease_required.
        at(T0 + TTL_MS - 1);
        try_round("alice", "c1", &epoch, None).unwrap();
        at(T0 + TTL_MS);
        expect_error(try_round("alice", "c1", &epoch, None), "28000", "sync.auth_lease_required", "expired");
        expect_error(try_round("alice", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_required", "expired");
        // The §10.1 object rides in DETAIL.
        let err = try_round("alice", "c1", &epoch, None).unwrap_err();
        let detail: Value = serde_json::from_str(err.detail.as_deref().unwrap()).unwrap();
        assert_eq!((detail["category"].as_str(), detail["recommendedAction"].as_str()), (Some("auth-required"), Some("refreshAuth")));
    }

    #[pg_test]
    fn no_lease_or_another_actors_lease_is_required() {
        let epoch = setup();
        leases_on();
        expect_error(try_round("alice", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_required", "holds no auth lease");
        lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        // The client record is gone (retention), so bob may bind c1: alice's lease is not his.
        run(&format!("DELETE FROM syncular.sync_clients WHERE partition = '{P}' AND client_id = 'c1'"));
        expect_error(try_round("bob", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_required", "another actor");
        // A live round for bob re-issues under a fresh id.
        let id = stored("c1").0;
        let (fresh, _) = lease_of(&round("bob", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        assert_ne!(fresh, id);
    }

    #[pg_test]
    fn revocation_holds_until_a_live_round_mints_a_fresh_id() {
        let epoch = setup();
        leases_on();
        let (id, _) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        at(T0 + 1_000);
        assert_eq!(text(&format!("SELECT syncular.revoke_lease('{P}', '{id}')::text")), Some("true".into()));
        assert_eq!(text(&format!("SELECT syncular.revoke_lease('{P}', 'nope')::text")), Some("false".into()));
        assert_eq!(text(&format!("SELECT syncular.revoke_lease('other-partition', '{id}')::text")), Some("false".into()));
        let (_, _, _, revoked, valid) = stored("c1");
        assert_eq!((revoked, valid), (Some(T0 + 1_000), true), "re-signed with the revocation");
        expect_error(try_round("alice", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_revoked", "revoked");
        expect_error(try_round("alice", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_revoked", "");
        // Un-revoking by hand breaks the signature: still no service.
        run(&format!("UPDATE syncular.sync_auth_leases SET revoked_at_ms = NULL WHERE partition = '{P}'"));
        expect_error(try_round("alice", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_required", "does not verify");
        run(&format!("UPDATE syncular.sync_auth_leases SET revoked_at_ms = {} WHERE partition = '{P}'", T0 + 1_000));
        // Recovery (§7.3.4, Appendix B 15 (c)): the next live round replaces the revoked lease by
        // a fresh one, in its LEASE frame and in the store.
        at(T0 + 2_000);
        let (fresh, expires) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).expect("a fresh lease on recovery");
        assert_ne!(fresh, id, "the revoked handle never comes back");
        let (stored_id, _, stored_expires, revoked, valid) = stored("c1");
        assert_eq!((stored_id.as_str(), stored_expires, revoked, valid), (fresh.as_str(), expires, None, true));
        try_round("alice", "c1", &epoch, Some(&outage())).expect("the fresh lease serves an outage");
        // The revoked id is gone: neither revocable nor clearable any more.
        assert_eq!(text(&format!("SELECT syncular.revoke_lease('{P}', '{id}')::text")), Some("false".into()));
        assert_eq!(text(&format!("SELECT syncular.clear_lease_revocation('{P}', '{id}')::text")), Some("false".into()));
        // The next live round slides the fresh lease (no new handle).
        let (again, _) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        assert_eq!(again, fresh);
    }

    #[pg_test]
    fn clearing_a_revocation_is_an_extra_before_recovery() {
        let epoch = setup();
        leases_on();
        let (id, _) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        assert_eq!(text(&format!("SELECT syncular.revoke_lease('{P}', '{id}')::text")), Some("true".into()));
        assert_eq!(text(&format!("SELECT syncular.clear_lease_revocation('{P}', '{id}')::text")), Some("true".into()));
        assert_eq!(text(&format!("SELECT syncular.clear_lease_revocation('{P}', '{id}')::text")), Some("false".into()));
        // Cleared: no lease at all until the next live round.
        expect_error(try_round("alice", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_required", "holds no auth lease");
        let (fresh, _) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).expect("a fresh lease");
        assert_ne!(fresh, id, "the revoked handle never comes back");
        try_round("alice", "c1", &epoch, Some(&outage())).unwrap();
    }

    #[pg_test]
    fn a_tampered_row_is_no_valid_lease() {
        let epoch = setup();
        leases_on();
        let (id, _) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        for tamper in [
            r#"allowed_scopes = '{"project_id": ["*"]}'"#,
            "expires_at_ms = expires_at_ms + 1",
            "actor_id = 'mallory'",
        ] {
            let before = stored("c1").0;
            run(&format!("UPDATE syncular.sync_auth_leases SET {tamper} WHERE partition = '{P}'"));
            assert!(!stored("c1").4, "{tamper}: signature_valid");
            expect_error(try_round("alice", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_required", "");
            // The next live round replaces the unverifiable record under a fresh id.
            let (fresh, _) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
            assert_ne!(fresh, before, "{tamper}");
            assert_ne!(fresh, id, "{tamper}");
            try_round("alice", "c1", &epoch, Some(&outage())).unwrap();
        }
        // A rotated key invalidates every lease; the next live round re-issues under a fresh id.
        run("SELECT syncular.rotate_lease_key()");
        expect_error(try_round("alice", "c1", &epoch, Some(&outage())), "28000", "sync.auth_lease_required", "does not verify");
        let (fresh, _) = lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        assert_ne!(fresh, id);
        assert!(stored("c1").4);
        try_round("alice", "c1", &epoch, Some(&outage())).unwrap();
    }

    #[pg_test]
    fn server_commits_and_realtime_open_honour_the_outage_signal() {
        let epoch = setup();
        leases_on();
        lease_of(&round("alice", "c1", &epoch, vec![], Some(&p1()))).unwrap();
        let ops = r#"[{"table":"tasks","op":"upsert","row":{"id":"s1","project_id":"p1","title":"x","done":false}}]"#;
        let status = text(&format!(
            "SELECT (syncular.commit('{P}', 'alice', '{ops}'::jsonb, 'c1', NULL, '\"resolver_outage\"'::jsonb))->>'status'"
        ));
        assert_eq!(status, Some("applied".into()));
        expect_error(
            try_run(&format!("SELECT syncular.commit('{P}', 'alice', '{ops}'::jsonb, 'c9', NULL, '\"resolver_outage\"'::jsonb)")),
            "28000",
            "sync.auth_lease_required",
            "",
        );
        // realtime_open: the registrations come from the lease, which the answer names.
        let sub = syncular_protocol::request::Subscription {
            id: "s".into(),
            table: "tasks".into(),
            scopes: vec![("project_id".into(), vec!["p1".into(), "p2".into()])],
            params: None,
            cursor: -1,
            bootstrap_state: None,
        };
        let mut pull = empty_pull();
        pull.subscriptions.push(sub);
        sync(P, "alice", &request(2, "c1", 1, Some(&epoch), vec![], Some(pull)), Some(&json!({"project_id": ["p1", "p2"]})));
        let open = |allowed: &str| -> Value {
            let text = text(&format!("SELECT syncular.realtime_open('{P}', 'alice', 'c1', '{allowed}'::jsonb)::text")).unwrap();
            serde_json::from_str(&text).unwrap()
        };
        let live = open(r#"{"project_id": ["p1"]}"#);
        assert!(live.get("leaseExpiresAtMs").is_none(), "{live}");
        let leased = open(r#""resolver_outage""#);
        let (_, _, expires, _, _) = stored("c1");
        assert_eq!(leased["leaseExpiresAtMs"], json!(expires), "{leased}");
        assert_eq!(leased["registrations"][0]["effective"], json!({"project_id": ["p1", "p2"]}), "{leased}");
        run(&format!("SELECT syncular.revoke_lease('{P}', '{}')", stored("c1").0));
        expect_error(
            try_run(&format!("SELECT syncular.realtime_open('{P}', 'alice', 'c1', '\"resolver_outage\"'::jsonb)")),
            "28000",
            "sync.auth_lease_revoked",
            "",
        );
    }
}
