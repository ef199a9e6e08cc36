//! `syncular.realtime_open` (SPEC §8.1, §8.7, §1.5): hello fields, the last
//! pull's subscriptions re-resolved against the current allowed scopes,
//! scope keys, client-binding checks, and what it does not write.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;

    use crate::tests::realtime::support::*;
    use crate::tests::support::{expect_error, int8, text};
    use crate::tests::sync_pull_support::*;

    #[pg_test]
    fn a_client_without_record_must_sync_first_and_gets_no_registration() {
        setup();
        let s = open_ok("rt-new", "alice", "c-new", Some(json!({"ws": ["*"]})));
        assert_eq!(s["cursor"], json!(-1));
        assert_eq!(s["latestCursor"], json!(0));
        assert_eq!(s["requiresSync"], json!(true));
        assert_eq!(s["wireVersion"], json!(2));
        assert_eq!(s["registrations"], json!([]));
        assert_eq!(s["scopeKeys"], json!([]));
        assert_eq!((s["actorId"].clone(), s["clientId"].clone()), (json!("alice"), json!("c-new")));
        assert_eq!(s["schemaVersion"], json!(1));
        let epoch = text("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = 'rt-new'");
        assert_eq!(s["logEpoch"].as_str(), epoch.as_deref(), "the partition was created with its epoch");
        assert_eq!(int8("SELECT count(*) FROM syncular.sync_clients WHERE partition = 'rt-new'"), Some(0), "no client record");
        let other = open_ok("rt-new", "alice", "c-new", None);
        assert_ne!(s["sessionId"], other["sessionId"], "a fresh session id per call");
    }

    #[pg_test]
    fn registrations_are_the_last_pull_re_resolved_against_current_scopes() {
        setup();
        let mut a = Client::new("rt-p", "alice", "ca");
        let seq = a.push_ok(vec![task("t1", "w1", "x")]);
        let mut b = Client::new("rt-p", "bob", "cb");
        b.pull(
            header(0, 0, 0, ACCEPT_ROWS),
            vec![
                sub("tasks-sub", "tasks", &[("ws", &["w1", "w2"])], 0, None),
                sub("notes-sub", "notes", &[("proj", &["p1", "p2"]), ("ws", &["w1"])], 0, None),
            ],
        );
        let s = open_ok("rt-p", "bob", "cb", Some(json!({"ws": ["w1"], "proj": ["*"]})));
        assert_eq!(s["cursor"], json!(seq));
        assert_eq!(s["latestCursor"], json!(seq));
        assert_eq!(s["requiresSync"], json!(false));
        assert_eq!(
            s["registrations"],
            json!([
                {"id": "tasks-sub", "table": "tasks", "effective": {"ws": ["w1"]}},
                {"id": "notes-sub", "table": "notes", "effective": {"proj": ["p1", "p2"], "ws": ["w1"]}}
            ])
        );
        assert_eq!(s["scopeKeys"], json!(["proj:p1", "proj:p2", "ws:w1"]));

        // Narrowed grant: the notes subscription loses `proj` → revoked, left out.
        let s = open_ok("rt-p", "bob", "cb", Some(json!({"ws": ["w2"]})));
        assert_eq!(s["registrations"], json!([{"id": "tasks-sub", "table": "tasks", "effective": {"ws": ["w2"]}}]));
        assert_eq!(s["scopeKeys"], json!(["ws:w2"]));
        // No grant at all (no argument, no resolver): nothing registered.
        assert_eq!(open_ok("rt-p", "bob", "cb", None)["registrations"], json!([]));
        // A newer commit the client has not pulled: it must sync first.
        a.push_ok(vec![task("t2", "w1", "y")]);
        let s = open_ok("rt-p", "bob", "cb", Some(json!({"ws": ["*"]})));
        assert_eq!((s["cursor"].clone(), s["latestCursor"].clone(), s["requiresSync"].clone()), (json!(seq), json!(seq + 1), json!(true)));
    }

    #[pg_test]
    fn client_binding_is_checked_and_errors_carry_their_json() {
        setup();
        let mut a = Client::new("rt-b", "alice", "shared");
        a.pull(header(0, 0, 0, ACCEPT_ROWS), vec![]);
        let err = open("rt-b", "mallory", "shared", None).unwrap_err();
        expect_error(Err::<(), _>(err.clone()), "22023", "sync.invalid_client_id", "bound to a different actor");
        assert_eq!(
            detail_object(&err),
            json!({"code": "sync.invalid_client_id", "message": err.message.trim_start_matches("sync.invalid_client_id: "),
                   "category": "invalid-request", "retryable": false, "recommendedAction": "resetClientId"})
        );
        expect_error(open("rt-b", "alice", "[\"remote-command\",\"x\"]", None), "22023", "sync.invalid_client_id", "reserved");
        let err = open("rt-b", "", "c", None).unwrap_err();
        assert_eq!(detail_object(&err)["category"], json!("invalid-request"));
        expect_error(Err::<(), _>(err), "22023", "syncular.invalid_argument", "actor_id must not be empty");
        expect_error(
            open("rt-b", "alice", "c", Some(json!({"nope": ["x"]}))),
            "22023",
            "sync.invalid_subscription",
            "no table declares",
        );
        let err = open(&"p".repeat(5000), "alice", "c", None).unwrap_err();
        expect_error(Err::<(), _>(err), "22023", "syncular.invalid_argument", "at most 512 bytes");
    }
}
