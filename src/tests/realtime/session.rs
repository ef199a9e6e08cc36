//! The session rules (`syncular.realtime_connect`, `syncular.realtime_reload`,
//! `syncular.realtime_pass`; docs/src/sql/realtime.md "Session rules"): the hello and the first
//! state, a pass's deltas ready to send (the same bytes `realtime_deltas` computes, tagged),
//! wake-ups with their resume rule, the overflow fallback, reloads at a round's end (commits
//! made during the round reach the session as deltas), on a host refresh (narrowed and
//! fail-closed) and at connect, and bad input.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::realtime::{parse_control, ControlMessage, WakeReason};

    use crate::tests::realtime::support::*;
    use crate::tests::support::expect_error;
    use crate::tests::sync_pull_support::*;

    const MIB: i32 = 1 << 20;
    fn all() -> Value {
        json!({"ws": ["*"], "proj": ["*"]})
    }

    /// Bob pulls `tasks` ws:[w1] and connects; returns the connect answer and his cursor.
    fn bob(partition: &str) -> (Value, i64) {
        let mut bob = Client::new(partition, "bob", "cb");
        let pulled = bob.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("t", "tasks", &[("ws", &["w1"])], 0, None)]);
        let cursor = pulled.sections[0].end.next_cursor;
        (connect(partition, "bob", "cb", Some(all())).unwrap_or_else(|e| panic!("{}", e.message)), cursor)
    }

    fn wake_of(text: &str) -> (WakeReason, i64) {
        match parse_control(text).expect("a control message") {
            ControlMessage::Wake { reason, cursor, .. } => (reason, cursor),
            other => panic!("not a wake-up: {other:?}"),
        }
    }

    #[pg_test]
    fn connect_greets_and_starts_at_the_latest_cursor() {
        setup();
        let mut a = Client::new("rs-c", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "one")]);
        let (answer, cursor) = bob("rs-c");
        assert_eq!(cursor, s1);
        let ControlMessage::Hello(hello) = parse_control(answer["hello"].as_str().unwrap()).unwrap() else { panic!("not a hello") };
        assert_eq!((hello.actor_id.as_str(), hello.client_id.as_str(), hello.cursor, hello.latest_cursor), ("bob", "cb", s1, s1));
        assert!(!hello.requires_sync);
        assert_eq!(hello.session_id, answer["sessionId"].as_str().unwrap());
        let state = &answer["state"];
        assert_eq!((state["cursor"].as_i64(), state["suppressed"].as_bool(), state["wireVersion"].as_i64()), (Some(s1), Some(false), Some(2)));
        assert_eq!(state["registrations"][0]["id"], "t");
        assert!(answer["resume"].is_null());
        assert_eq!(answer["scopeKeys"], json!(["ws:w1"]));
        assert_eq!(answer["logEpoch"], state["logEpoch"]);

        // A client behind the log starts suppressed; an ack at latestCursor resumes it.
        let s2 = a.push_ok(vec![task("t2", "w1", "two")]);
        let behind = connect("rs-c", "bob", "cb", Some(all())).unwrap();
        assert_eq!((behind["state"]["cursor"].as_i64(), behind["state"]["suppressed"].as_bool()), (Some(s2), Some(true)));
        assert_eq!(behind["resume"]["cursor"].as_i64(), Some(s2));
        let mut resumed = behind["state"].clone();
        resumed["suppressed"] = json!(false);
        assert_eq!(behind["resume"]["state"], resumed);
    }

    #[pg_test]
    fn a_pass_sends_the_tagged_delta_and_moves_every_state() {
        setup();
        let (answer, c0) = bob("rs-p");
        let state = answer["state"].clone();
        let mut a = Client::new("rs-p", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "one")]);
        let s2 = a.push_ok(vec![task("t2", "w2", "not bob's")]);
        let mut woken = state.clone();
        woken["suppressed"] = json!(true);
        let rows = pass("rs-p", json!([state, woken]), MIB, None).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows.iter().map(|r| r.state_index).collect::<Vec<_>>(), vec![0, 1]);

        // The plain state: the delta realtime_deltas computes for the same group, tagged 0x00.
        let expected = deltas_ok("rs-p", json!([group(&answer["state"], c0, false)]), MIB);
        let message = rows[0].message.as_ref().expect("a delta");
        assert_eq!(message[0], 0x00);
        assert_eq!(&message[1..], expected[0].delta.as_deref().unwrap());
        assert_eq!((rows[0].state["cursor"].as_i64(), rows[0].state["suppressed"].as_bool()), (Some(s2), Some(false)));
        assert!(rows[0].control.is_none() && rows[0].resume.is_none());
        let overflow = rows[0].overflow.as_ref().expect("an overflow fallback");
        assert_eq!(wake_of(overflow["control"].as_str().unwrap()), (WakeReason::CatchupRequired, s2));
        assert_eq!(overflow["state"]["suppressed"], json!(true));
        assert_eq!(overflow["resume"]["cursor"].as_i64(), Some(s2));

        // The suppressed state: a wake-up instead, still suppressed, resumed by an ack at s2.
        assert!(rows[1].message.is_none() && rows[1].overflow.is_none());
        assert_eq!(wake_of(rows[1].control.as_deref().unwrap()), (WakeReason::CatchupRequired, s2));
        assert_eq!((rows[1].state["cursor"].as_i64(), rows[1].state["suppressed"].as_bool()), (Some(s2), Some(true)));
        assert_eq!(rows[1].resume.as_ref().unwrap()["state"], rows[0].state, "resuming gives the plain state");
        let _ = s1;

        // Nothing new: every state stays, nothing is sent; a quiet commit moves the cursor.
        let rows = pass("rs-p", json!([rows[0].state.clone()]), MIB, None).unwrap();
        assert!(rows[0].message.is_none() && rows[0].control.is_none());
        let quiet = a.push_ok(vec![task("q", "w2", "quiet")]);
        let rows = pass("rs-p", json!([rows[0].state.clone()]), MIB, None).unwrap();
        assert_eq!((rows[0].state["cursor"].as_i64(), rows[0].message.is_none()), (Some(quiet), true));
        // The window is capped at through_seq, and a cursor never moves back.
        let capped = pass("rs-p", json!([state]), MIB, Some(s1)).unwrap();
        assert_eq!(capped[0].state["cursor"].as_i64(), Some(s1));
        let ahead = pass("rs-p", json!([rows[0].state.clone()]), MIB, Some(s1)).unwrap();
        assert_eq!(ahead[0].state["cursor"].as_i64(), Some(quiet));
    }

    #[pg_test]
    fn a_commit_during_a_socket_round_wakes_then_arrives_as_a_delta_after_it() {
        setup();
        let (answer, c0) = bob("rs-r");
        let state = answer["state"].clone();
        let mut a = Client::new("rs-r", "alice", "ca");
        // The round: bob pulls (through s1); s2 lands after the round's pull, while its
        // response is in flight.
        let s1 = a.push_ok(vec![task("t1", "w1", "one")]);
        let mut round = Client::new("rs-r", "bob", "cb");
        let pulled = round.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("t", "tasks", &[("ws", &["w1"])], c0, None)]);
        assert_eq!(pulled.sections[0].commit_seqs(), vec![s1]);
        let s2 = a.push_ok(vec![task("t2", "w1", "two")]);
        // §8.7 interleaving: in flight, the session gets a wake-up, never a delta; the same
        // state outside a round gets the delta.
        let rows = pass_in_round("rs-r", json!([state, state]), MIB, None, Some(vec![Some(true), Some(false)])).unwrap();
        assert!(rows[0].message.is_none() && rows[0].overflow.is_none());
        assert_eq!(wake_of(rows[0].control.as_deref().unwrap()), (WakeReason::CatchupRequired, s2));
        assert_eq!((rows[0].state["cursor"].as_i64(), rows[0].state["suppressed"].as_bool()), (Some(s2), Some(true)));
        assert!(rows[1].message.is_some(), "outside a round: the delta");
        // The round ends: the state resumes from the round's floor (s1), unsuppressed.
        let ended = reload("rs-r", "bob", "cb", Some(all()), &rows[0].state, "round-end", Some(3)).unwrap();
        assert_eq!(ended["send"], json!([]), "no second wake-up");
        let next = &ended["state"];
        assert_eq!((next["cursor"].as_i64(), next["suppressed"].as_bool(), next["wireVersion"].as_i64()), (Some(s1), Some(false), Some(3)));
        assert!(ended["resume"].is_null());
        let rows = pass("rs-r", json!([next]), MIB, None).unwrap();
        let delta = Pulled::from_bytes(&rows[0].message.as_ref().expect("the mid-round commit as a delta")[1..]);
        assert_eq!(delta.sections[0].commit_seqs(), vec![s2], "exactly the commit the round did not deliver");

        // A session ahead of the floor, not suppressed, same registrations (a round without a
        // pull half): its cursor stays — everything up to it already went out as deltas.
        let ahead = rows[0].state.clone();
        let kept = reload("rs-r", "bob", "cb", Some(all()), &ahead, "round-end", None).unwrap();
        assert_eq!((kept["state"]["cursor"].as_i64(), kept["changed"].as_bool()), (Some(s2), Some(false)));
        // A failed round-end reload is an error: the gateway keeps the previous state.
        let err = reload("rs-r", "bob", "cb", Some(json!("resolver_outage")), &ahead, "round-end", None).unwrap_err();
        assert!(err.message.starts_with("sync.auth_lease_required"), "{}", err.message);
        // in_round must name every state, without NULLs.
        let err = pass_in_round("rs-r", json!([ahead]), MIB, None, Some(vec![Some(true), Some(false)])).unwrap_err();
        assert!(err.message.contains("in_round"), "{}", err.message);
        let err = pass_in_round("rs-r", json!([ahead]), MIB, None, Some(vec![None])).unwrap_err();
        expect_error(Err::<(), _>(err), "22023", "syncular.invalid_argument", "in_round must not contain NULL");
    }

    #[pg_test]
    fn host_reloads_wake_on_change_and_fail_closed() {
        setup();
        let (answer, _) = bob("rs-h");
        let state = answer["state"].clone();
        let mut a = Client::new("rs-h", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w2", "elsewhere")]);
        // Unchanged registrations: nothing to do.
        let same = reload("rs-h", "bob", "cb", Some(all()), &state, "host", None).unwrap();
        assert_eq!((same["changed"].as_bool(), same["send"].clone(), same["state"].clone()), (Some(false), json!([]), state.clone()));
        // Narrowed: the registration is revoked; the client is woken to pull it.
        let narrowed = reload("rs-h", "bob", "cb", Some(json!({"ws": ["w9"], "proj": []})), &state, "host", None).unwrap();
        assert_eq!((narrowed["changed"].as_bool(), narrowed["emptied"].as_bool()), (Some(true), Some(false)));
        assert_eq!(narrowed["state"]["registrations"], json!([]));
        let sent = narrowed["send"].as_array().unwrap();
        assert_eq!(sent.len(), 1);
        assert_eq!(wake_of(sent[0].as_str().unwrap()), (WakeReason::CatchupRequired, s1));
        assert_eq!(narrowed["resume"]["cursor"].as_i64(), Some(s1));
        // A resolution that fails (an outage signal without leases) empties the registrations.
        let closed = reload("rs-h", "bob", "cb", Some(json!("resolver_outage")), &state, "host", None).unwrap();
        assert_eq!((closed["emptied"].as_bool(), closed["state"]["registrations"].clone()), (Some(true), json!([])));
        assert_eq!(closed["send"].as_array().map(Vec::len), Some(1));
        assert_eq!(closed["scopeKeys"], json!([]));
        // Already empty: emptied again, no second wake-up.
        let again = reload("rs-h", "bob", "cb", Some(json!("resolver_outage")), &closed["state"], "host", None).unwrap();
        assert_eq!((again["emptied"].as_bool(), again["send"].clone()), (Some(true), json!([])));
        // An emptied state is served nothing.
        a.push_ok(vec![task("t2", "w1", "bob's, but revoked")]);
        let rows = pass("rs-h", json!([again["state"]]), MIB, None).unwrap();
        assert!(rows[0].message.is_none());
    }

    #[pg_test]
    fn a_connect_reload_wakes_only_when_the_state_changed() {
        setup();
        let (answer, _) = bob("rs-j");
        let state = answer["state"].clone();
        let same = reload("rs-j", "bob", "cb", Some(all()), &state, "connect", None).unwrap();
        assert_eq!((same["send"].clone(), same["state"].clone()), (json!([]), state.clone()));
        let mut a = Client::new("rs-j", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "one")]);
        let moved = reload("rs-j", "bob", "cb", Some(all()), &state, "connect", None).unwrap();
        assert_eq!(wake_of(moved["send"][0].as_str().unwrap()), (WakeReason::CatchupRequired, s1));
        assert_eq!(moved["state"]["suppressed"], json!(true));
    }

    #[pg_test]
    fn a_new_epoch_is_a_reset() {
        setup();
        let (answer, _) = bob("rs-e");
        let mut stale = answer["state"].clone();
        stale["logEpoch"] = json!("an-older-epoch");
        let reset = reload("rs-e", "bob", "cb", Some(all()), &stale, "round-end", None).unwrap();
        assert_eq!(wake_of(reset["send"][0].as_str().unwrap()).0, WakeReason::ResetRequired);
        assert_eq!(reset["state"]["logEpoch"], answer["state"]["logEpoch"]);
        assert_eq!(reset["logEpoch"], answer["logEpoch"]);
        let rows = pass("rs-e", json!([stale]), MIB, None).unwrap();
        assert_eq!(wake_of(rows[0].control.as_deref().unwrap()).0, WakeReason::ResetRequired);
    }

    #[pg_test]
    fn bad_states_and_arguments_are_invalid_arguments() {
        setup();
        let (answer, _) = bob("rs-b");
        let state = answer["state"].clone();
        let mut extra = state.clone();
        extra["admin"] = json!(true);
        let mut wire = state.clone();
        wire["wireVersion"] = json!(9);
        for bad in [json!({}), json!("x"), extra, wire] {
            let err = reload("rs-b", "bob", "cb", Some(all()), &bad, "host", None).unwrap_err();
            expect_error(Err::<(), _>(err), "22023", "syncular.invalid_argument", "state");
            let err = pass("rs-b", json!([bad]), MIB, None).unwrap_err();
            assert!(err.message.starts_with("syncular.invalid_argument"), "{}", err.message);
        }
        // A bad argument raises even on a host reload (it is not a resolution failure).
        let long = "p".repeat(5000);
        let err = reload(&long, "bob", "cb", Some(all()), &state, "host", None).unwrap_err();
        expect_error(Err::<(), _>(err), "22023", "syncular.invalid_argument", "partition");
        let err = reload("rs-b", "bob", "cb", Some(json!(["not", "a", "map"])), &state, "host", None).unwrap_err();
        assert!(err.message.starts_with("syncular.invalid_argument"), "{}", err.message);
        let err = reload("rs-b", "bob", "cb", Some(all()), &state, "later", None).unwrap_err();
        expect_error(Err::<(), _>(err), "22023", "syncular.invalid_argument", "reason");
        let err = reload("rs-b", "bob", "cb", Some(all()), &state, "round-end", Some(4)).unwrap_err();
        expect_error(Err::<(), _>(err), "22023", "syncular.invalid_argument", "wire_version");
        let err = pass("rs-b", json!({"not": "an array"}), MIB, None).unwrap_err();
        assert!(err.message.starts_with("syncular.invalid_argument"), "{}", err.message);
        let err = pass("rs-b", json!([state]), 10, None).unwrap_err();
        assert!(err.message.contains("max_delta_bytes"), "{}", err.message);
        let err = connect("rs-b", "mallory", "cb", Some(all())).unwrap_err();
        assert!(err.message.starts_with("sync.invalid_client_id"), "{}", err.message);
    }
}
