//! Incremental pulls (SPEC §4.2, §4.5, §4.6): the window, change-counted
//! `limitCommits` that never splits a commit, `nextCursor`, the silent
//! clamps, the pruning horizon, and the `COMMIT` frame shape.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::frame_fields::Op;

    use crate::tests::sync_pull_support::*;

    fn tasks_sub(cursor: i64) -> syncular_protocol::request::Subscription {
        sub("s", "tasks", &[("ws", &["w1"])], cursor, None)
    }

    #[pg_test]
    fn window_delivers_matching_commits_oldest_first_with_frame_shape() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "one")]);
        let s2 = a.push_ok(vec![task("t2", "w2", "other ws")]);
        let s3 = a.push_ok(vec![task("t1", "w1", "one v2"), task("t3", "w1", "three")]);
        let s4 = a.push_ok(vec![delete("tasks", "t3")]);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.response.wire_version, 2, "answered in the request's wire version");
        let sec = p.one();
        assert_eq!(sec.start.status.name(), "active");
        assert!(!sec.start.bootstrap);
        assert_eq!(sec.start.reason_code, "");
        assert_eq!(sec.start.effective_scopes, vec![("ws".to_string(), vec!["w1".to_string()])]);
        // s2 only touches w2: filtered out.
        assert_eq!(sec.commit_seqs(), vec![s1, s3, s4]);
        assert_eq!(sec.end.next_cursor, s4);
        assert_eq!(sec.end.bootstrap_state, None);

        let c3 = &sec.commits[1];
        assert_eq!(c3.actor_id, "alice");
        assert_eq!(c3.tables, vec!["tasks".to_string()]);
        assert_eq!(c3.changes.len(), 2);
        assert!(c3.changes.iter().all(|c| c.table_index == 0));
        assert_eq!(c3.changes[0].row_id, "t1");
        assert_eq!(c3.changes[0].op, Op::Upsert);
        assert_eq!(c3.changes[0].row_version, Some(2), "second write of t1");
        assert_eq!(c3.changes[0].scopes, vec![("ws".to_string(), "w1".to_string())]);
        assert_eq!(task_values(c3.changes[0].row.as_ref().unwrap()).2, "one v2");
        let del = &sec.commits[2].changes[0];
        assert_eq!((del.op, del.row_version.is_none(), del.row.is_none()), (Op::Delete, true, true));
        assert_eq!(del.scopes, vec![("ws".to_string(), "w1".to_string())]);
        let _ = s2;
    }

    #[pg_test]
    fn cursor_advances_over_quiet_windows() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "x")]);
        let s2 = a.push_ok(vec![task("t2", "w2", "y")]);
        let s3 = a.push_ok(vec![task("t3", "w2", "z")]);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![tasks_sub(s1)]);
        assert!(p.one().commits.is_empty());
        assert_eq!(p.one().end.next_cursor, s3, "quiet window still advances to maxCommitSeq");
        let _ = s2;
        // At the head: nothing, cursor unchanged.
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![tasks_sub(s3)]);
        assert_eq!((p.one().commits.len(), p.one().end.next_cursor), (0, s3));
    }

    #[pg_test]
    fn limit_commits_counts_changes_and_never_splits_a_commit() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let s1 = a.push_ok(vec![task("a", "w1", "1"), task("b", "w1", "1")]);
        let s2 = a.push_ok(vec![task("c", "w1", "1"), task("d", "w1", "1"), task("e", "w1", "1")]);
        let s3 = a.push_ok(vec![task("f", "w1", "1")]);
        let mut b = Client::new("p1", "bob", "cb");
        // limit 3 changes: s1 (2) fits, s2 (3) would pass 3 → stop after s1.
        let p = b.pull(header(3, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().commit_seqs(), vec![s1]);
        assert_eq!(p.one().end.next_cursor, s1, "truncated: last fully delivered commit");
        // limit 1: a commit bigger than the limit goes whole and alone.
        let p = b.pull(header(1, 0, 0, ACCEPT_ROWS), vec![tasks_sub(s1)]);
        assert_eq!(p.one().commit_seqs(), vec![s2]);
        assert_eq!(p.one().change_count(), 3);
        assert_eq!(p.one().end.next_cursor, s2);
        // limit 5 = exactly s1+s2: the window is not exhausted (s3 remains).
        let p = b.pull(header(5, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().commit_seqs(), vec![s1, s2]);
        assert_eq!(p.one().end.next_cursor, s2);
        // limit 6 = everything: exhausted, cursor at maxCommitSeq.
        let p = b.pull(header(6, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().commit_seqs(), vec![s1, s2, s3]);
        assert_eq!(p.one().end.next_cursor, s3);
    }

    #[pg_test]
    fn exact_limit_at_the_end_of_the_window_still_advances_past_quiet_commits() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let s1 = a.push_ok(vec![task("a", "w1", "1")]);
        let s2 = a.push_ok(vec![task("b", "w2", "1")]);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(1, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().commit_seqs(), vec![s1]);
        assert_eq!(p.one().end.next_cursor, s2, "no further matching commit: window exhausted");
    }

    #[pg_test]
    fn limit_clamps_are_silent() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let seqs: Vec<i64> = (0..3).map(|i| a.push_ok(vec![task(&format!("t{i}"), "w1", "x")])).collect();
        let mut b = Client::new("p1", "bob", "cb");
        // Negative → clamped to 1 change.
        let p = b.pull(header(-7, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().commit_seqs(), vec![seqs[0]]);
        // 0 → default 1000; i32::MAX → 1000.
        for limit in [0, i32::MAX] {
            let p = b.pull(header(limit, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
            assert_eq!(p.one().commit_seqs(), seqs);
        }
    }

    #[pg_test]
    fn the_default_limit_stops_at_one_thousand_changes() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        // 3 commits of 400 changes each = 1200 > 1000.
        let mut seqs = vec![];
        for c in 0..3 {
            seqs.push(a.push_ok((0..400).map(|i| task(&format!("r{c}-{i}"), "w1", "x")).collect()));
        }
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().commit_seqs(), vec![seqs[0], seqs[1]]);
        assert_eq!(p.one().change_count(), 800);
        assert_eq!(p.one().end.next_cursor, seqs[1]);
    }

    #[pg_test]
    fn cursor_behind_the_horizon_is_reset() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "x")]);
        let s2 = a.push_ok(vec![task("t2", "w1", "y")]);
        set_horizon("p1", s2);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![tasks_sub(s1)]);
        let sec = p.one();
        assert_eq!(sec.start.status.name(), "reset");
        assert_eq!(sec.start.reason_code, "sync.cursor_expired");
        assert!(sec.start.effective_scopes.is_empty());
        assert!(sec.commits.is_empty() && sec.segments.is_empty());
        assert_eq!(sec.end.next_cursor, s1, "request cursor echoed");
        // At the horizon: deltas are computable.
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![tasks_sub(s2)]);
        assert_eq!(p.one().start.status.name(), "active");
        // Cursor 0 with horizon > 0 is also behind it.
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().start.status.name(), "reset");
    }

    #[pg_test]
    fn cursor_from_the_future_bootstraps() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "x")]);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![tasks_sub(s1 + 10)]);
        let sec = p.one();
        assert!(sec.start.bootstrap);
        assert!(sec.commits.is_empty());
        assert_eq!(sec.segment_ids(), vec!["t1".to_string()]);
        assert_eq!(sec.end.next_cursor, s1, "bootstrap pins at maxCommitSeq");
    }

    #[pg_test]
    fn a_client_sees_its_own_push_in_the_same_round() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "x")]);
        let commit = syncular_protocol::request::PushCommit {
            client_commit_id: "same-round".into(),
            operations: vec![task("t2", "w1", "y")],
        };
        let bytes = a.request(
            vec![commit],
            Some(syncular_protocol::request::PullRequest {
                header: header(0, 0, 0, ACCEPT_ROWS),
                subscriptions: vec![tasks_sub(s1)],
            }),
        );
        let p = Pulled::from_bytes(&a.sync_bytes(bytes).unwrap());
        assert_eq!(p.one().commit_seqs(), vec![s1 + 1]);
        assert_eq!(p.one().end.next_cursor, s1 + 1);
    }
}
