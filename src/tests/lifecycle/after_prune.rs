//! What clients see after pruning: a cursor below the horizon is reset
//! (`sync.cursor_expired`), then a fresh bootstrap delivers exactly the
//! current rows; a cursor at the horizon still pulls incrementally; a replay
//! of a commit whose log entry was pruned still answers `cached`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use std::collections::BTreeMap;
    use syncular_protocol::request::PushCommit;
    use syncular_protocol::response::{decode_response, PushStatus, ResponseFrame, SubStatus};

    use crate::tests::lifecycle::support::*;
    use crate::tests::sync_pull_support::*;

    const P: &str = "after-prune";

    fn subscribe(cursor: i64, token: Option<&str>) -> Vec<syncular_protocol::request::Subscription> {
        vec![sub("s", "tasks", &[("ws", &["w1"])], cursor, token)]
    }

    /// `(id → title)` of the partition's `tasks` rows, read from the app table.
    fn server_rows() -> BTreeMap<String, String> {
        Spi::connect(|c| {
            c.select(
                "SELECT id, title FROM public.tasks WHERE _sync_partition = $1",
                None,
                &[P.into()],
            )
            .unwrap()
            .map(|r| (r.get::<String>(1).unwrap().unwrap(), r.get::<String>(2).unwrap().unwrap()))
            .collect()
        })
    }

    #[pg_test]
    fn a_pull_below_the_horizon_is_reset_and_a_replay_still_answers_cached() {
        setup();
        set_now(T0);
        let mut c = Client::new(P, "alice", "c1");
        let first = c.push_ok(vec![task("a", "w1", "first")]);
        let boot = c.pull(header(100, 1000, 10, ACCEPT_ROWS), subscribe(-1, None));
        let cursor = boot.one().end.next_cursor;
        assert_eq!(cursor, first);

        // 1,200 plain SQL inserts, an update of `a`, five deletes.
        insert_commits(P, "b", "w1", 1200, T0);
        set_now(T0);
        crate::tests::support::run("UPDATE public.tasks SET title = 'changed' WHERE _sync_partition = 'after-prune' AND id = 'a'");
        delete_commits(P, "b", 5, T0);
        let max = first + 1200 + 1 + 5;

        // Fifteen days later the client is no longer active: the newest 1,000 stay.
        set_now(T0 + 15 * DAY);
        assert_eq!(advance(P), max - 1000);
        assert_eq!(prune_all(P, 300).commits, max - 1000);

        let reset = c.pull(header(100, 1000, 10, ACCEPT_ROWS), subscribe(cursor, None));
        let s = reset.one();
        assert_eq!(s.start.status, SubStatus::Reset);
        assert_eq!(s.start.reason_code, "sync.cursor_expired");
        assert!(s.commits.is_empty() && s.segments.is_empty());
        assert_eq!(s.end.next_cursor, cursor, "the request cursor is echoed");

        // At the horizon: incremental, from horizon + 1.
        let at = c.pull(header(100_000, 1000, 10, ACCEPT_ROWS), subscribe(max - 1000, None));
        assert_eq!(at.one().start.status, SubStatus::Active);
        assert_eq!(at.one().commit_seqs().first(), Some(&(max - 999)));

        // A fresh bootstrap: exactly the current rows.
        let mut delivered = BTreeMap::new();
        let mut token: Option<String> = None;
        loop {
            let page = c.pull(header(100, 500, 1, ACCEPT_ROWS), subscribe(-1, token.as_deref()));
            let s = page.one();
            assert_eq!(s.start.status, SubStatus::Active);
            for (_, _, payload) in s.segment_rows() {
                let (id, _, title) = task_values(&payload);
                delivered.insert(id, title);
            }
            token = s.end.bootstrap_state.clone();
            if token.is_none() {
                assert_eq!(s.end.next_cursor, max);
                break;
            }
        }
        assert_eq!(delivered, server_rows());
        assert_eq!(delivered.len(), 1 + 1200 - 5);
        assert_eq!(delivered["a"], "changed");

        // The first commit's log entry is gone; its outcome is not.
        assert_eq!(rows("sync_commits", P, &format!("commit_seq = {first}")), 0);
        let replay = c.request(
            vec![PushCommit { client_commit_id: "c1-c1".into(), operations: vec![task("a", "w1", "first")] }],
            None,
        );
        let resp = decode_response(&c.sync_bytes(replay).unwrap()).unwrap();
        match &resp.frames[0] {
            ResponseFrame::PushResult(r) => {
                assert_eq!(r.status, PushStatus::Cached);
                assert_eq!(r.commit_seq, Some(first));
            }
            other => panic!("expected PUSH_RESULT, got {other:?}"),
        }
        assert_eq!(server_rows()["a"], "changed", "a replay applies nothing");
    }
}
