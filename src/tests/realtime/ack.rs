//! `syncular.realtime_ack` (SPEC §8.2): MAX semantics, the clamp to
//! `max_commit_seq`, actor and epoch checks, batching.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;

    use crate::tests::realtime::support::*;
    use crate::tests::support::expect_error;
    use crate::tests::sync_pull_support::*;

    fn cursor_of(partition: &str, client_id: &str) -> i64 {
        client_record(partition, client_id).expect("client record").0
    }

    #[pg_test]
    fn acks_only_move_cursors_forward_and_never_past_the_log() {
        setup();
        let mut a = Client::new("rt-a", "alice", "ca");
        let mut b = Client::new("rt-a", "bob", "cb");
        b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("t", "tasks", &[("ws", &["w1"])], 0, None)]);
        let s1 = a.push_ok(vec![task("t1", "w1", "x")]);
        let s2 = a.push_ok(vec![task("t2", "w1", "y")]);
        let epoch = open_ok("rt-a", "bob", "cb", None)["logEpoch"].clone();
        let ack_of = |cursor: i64| json!({"clientId": "cb", "actorId": "bob", "cursor": cursor, "logEpoch": epoch});

        assert_eq!(ack("rt-a", json!([ack_of(s1)])).unwrap(), 1);
        assert_eq!(cursor_of("rt-a", "cb"), s1);
        // Out of order: a lower ack never moves it back.
        ack("rt-a", json!([ack_of(0)])).unwrap();
        assert_eq!(cursor_of("rt-a", "cb"), s1);
        // Several acks of one client in one batch fold to their maximum.
        ack("rt-a", json!([ack_of(s2), ack_of(s1)])).unwrap();
        assert_eq!(cursor_of("rt-a", "cb"), s2);
        // A claim past the log is clamped to max_commit_seq (the retention watermark).
        ack("rt-a", json!([ack_of(s2 + 1000)])).unwrap();
        assert_eq!(cursor_of("rt-a", "cb"), s2);
    }

    #[pg_test]
    fn acks_of_another_actor_epoch_or_client_are_ignored() {
        setup();
        let mut b = Client::new("rt-i", "bob", "cb");
        b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![]);
        let mut a = Client::new("rt-i", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "x")]);
        let epoch = open_ok("rt-i", "bob", "cb", None)["logEpoch"].clone();
        let before = cursor_of("rt-i", "cb");
        let n = ack(
            "rt-i",
            json!([
                {"clientId": "cb", "actorId": "mallory", "cursor": s1, "logEpoch": epoch},
                {"clientId": "cb", "actorId": "bob", "cursor": s1, "logEpoch": "rotated"},
                {"clientId": "cb", "actorId": "bob", "cursor": -5, "logEpoch": epoch},
                {"clientId": "nobody", "actorId": "bob", "cursor": s1, "logEpoch": epoch}
            ]),
        )
        .unwrap();
        assert_eq!((n, cursor_of("rt-i", "cb")), (0, before));
        assert_eq!(ack("rt-none", json!([{"clientId": "cb", "actorId": "bob", "cursor": 1, "logEpoch": epoch}])).unwrap(), 0);
        assert_eq!(ack("rt-i", json!([])).unwrap(), 0);
    }

    #[pg_test]
    fn malformed_acks_are_refused() {
        setup();
        for (acks, fragment) in [
            (json!({"clientId": "c"}), "acks must be a JSON array"),
            (json!([{"clientId": "c", "actorId": "a", "cursor": 1.5, "logEpoch": "e"}]), "\"cursor\" must be an integer"),
            (json!([{"actorId": "a", "cursor": 1, "logEpoch": "e"}]), "\"clientId\" must be a string"),
        ] {
            expect_error(ack("rt-x", acks), "22023", "syncular.invalid_argument", fragment);
        }
    }
}
