//! The response byte budget (issue item 7, DESIGN §4): a pull stops adding
//! commits and pages once `syncular.response_budget_bytes` is reached, never
//! splits a commit, always makes progress, and defers the rest with a legal
//! "come back" `SUB_END`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::resume_token::ResumeToken;

    use crate::tests::support::run;
    use crate::tests::sync_pull_support::*;

    /// Inline rows only (`accept` bit 0): the lane whose pages the budget
    /// bounds row by row (stored pages: `src/tests/segments/`).
    const INLINE_ONLY: u8 = syncular_protocol::constants::ACCEPT_INLINE_ROWS;

    /// A title of `n` bytes.
    fn big(n: usize) -> String {
        "x".repeat(n)
    }

    #[pg_test]
    fn incremental_pull_stops_at_the_budget_and_resumes_from_the_last_commit() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let seqs: Vec<i64> = (0..10).map(|i| a.push_ok(vec![task(&format!("t{i}"), "w1", &big(600))])).collect();
        run("SET LOCAL syncular.response_budget_bytes = 2048");
        let mut b = Client::new("p1", "bob", "cb");
        let mut cursor = 0;
        let mut seen = vec![];
        let mut rounds = 0;
        loop {
            rounds += 1;
            let p = b.pull(header(0, 0, 0, INLINE_ONLY), vec![sub("s", "tasks", &[("ws", &["w1"])], cursor, None)]);
            let sec = p.one();
            assert!(p.bytes < 2048 + 1024, "a response passes the budget by at most one commit ({} bytes)", p.bytes);
            if sec.commits.is_empty() {
                assert_eq!(sec.end.next_cursor, cursor);
                break;
            }
            assert!(sec.commits.len() < seqs.len(), "the budget cut the window");
            assert_eq!(sec.end.next_cursor, *sec.commit_seqs().last().unwrap(), "deferred: last delivered commit");
            seen.extend(sec.commit_seqs());
            cursor = sec.end.next_cursor;
            assert!(rounds < 20);
        }
        assert_eq!(seen, seqs, "every commit exactly once, in order");
    }

    #[pg_test]
    fn a_commit_larger_than_the_budget_is_delivered_whole() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let s1 = a.push_ok((0..5).map(|i| task(&format!("t{i}"), "w1", &big(1000))).collect());
        let s2 = a.push_ok(vec![task("u", "w1", "small")]);
        run("SET LOCAL syncular.response_budget_bytes = 1024");
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 0, 0, INLINE_ONLY), vec![sub("s", "tasks", &[("ws", &["w1"])], 0, None)]);
        assert_eq!(p.one().commit_seqs(), vec![s1]);
        assert_eq!(p.one().change_count(), 5, "never split");
        assert!(p.bytes > 5000);
        assert_eq!(p.one().end.next_cursor, s1);
        let p = b.pull(header(0, 0, 0, INLINE_ONLY), vec![sub("s", "tasks", &[("ws", &["w1"])], s1, None)]);
        assert_eq!((p.one().commit_seqs(), p.one().end.next_cursor), (vec![s2], s2));
    }

    #[pg_test]
    fn later_subscriptions_are_deferred_with_their_cursor_unchanged() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", &big(3000))]);
        let s2 = a.push_ok(vec![task("t2", "w2", &big(10))]);
        run("SET LOCAL syncular.response_budget_bytes = 1024");
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(
            header(0, 0, 0, INLINE_ONLY),
            vec![
                sub("one", "tasks", &[("ws", &["w1"])], 0, None),
                sub("two", "tasks", &[("ws", &["w2"])], 0, None),
                sub("three", "tasks", &[("ws", &["w2"])], -1, Some("{\"garbage\":1}")),
            ],
        );
        assert_eq!(p.sections.len(), 3, "every subscription is still echoed");
        assert_eq!(p.sections[0].commit_seqs(), vec![s1]);
        assert_eq!(p.sections[0].end.next_cursor, s2, "first window exhausted");
        let two = &p.sections[1];
        assert_eq!(two.start.status.name(), "active");
        assert!(two.commits.is_empty());
        assert_eq!(two.end.next_cursor, 0, "deferred with nothing delivered: request cursor");
        let three = &p.sections[2];
        assert!(three.segments.is_empty(), "a non-fresh bootstrap may be deferred entirely");
        assert!(!three.start.bootstrap, "SUB_START.bootstrap is true iff segments follow (§4.4)");
        let token = ResumeToken::parse(three.end.bootstrap_state.as_deref().unwrap()).unwrap();
        assert_eq!((token.as_of_commit_seq, token.row_cursor), (s2, None), "come back from a fresh pin");
        assert_eq!(three.end.next_cursor, s2);
    }

    #[pg_test]
    fn bootstrap_pages_stop_at_the_budget_and_a_fresh_bootstrap_always_gets_a_first_segment() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let mut last = 0;
        for i in 0..12 {
            last = a.push_ok(vec![task(&format!("t{i:02}"), "w1", &big(500))]);
        }
        run("SET LOCAL syncular.response_budget_bytes = 2048");
        let mut b = Client::new("p1", "bob", "cb");
        // Two fresh bootstraps in one request: the second one still gets its
        // first segment (empty: the budget is spent) so the client's §5.6
        // first-page clear happens, then a token from the table start.
        let p = b.pull(
            header(0, 0, 0, INLINE_ONLY),
            vec![
                sub("x", "tasks", &[("ws", &["w1"])], -1, None),
                sub("y", "tasks", &[("ws", &["w1"])], -1, None),
            ],
        );
        let x = &p.sections[0];
        let x_ids = x.segment_ids();
        assert!(!x_ids.is_empty() && x_ids.len() < 12, "page cut by bytes: {x_ids:?}");
        let y = &p.sections[1];
        assert!(y.start.bootstrap);
        assert_eq!(y.segments.len(), 1);
        assert!(y.segment_ids().is_empty(), "an empty first page, then deferred");
        assert_eq!(y.segments[0].header.table, "tasks");
        let y_token = ResumeToken::parse(y.end.bootstrap_state.as_deref().unwrap()).unwrap();
        assert_eq!((y_token.as_of_commit_seq, y_token.row_cursor), (last, None));
        assert!(p.bytes < 2048 + 1024, "response stays near the budget ({} bytes)", p.bytes);
        // Resuming walks the rest without loss or duplicates.
        let mut ids = x_ids.clone();
        let mut token = x.end.bootstrap_state.clone();
        let mut rounds = 0;
        while let Some(t) = token {
            rounds += 1;
            assert!(rounds < 30);
            let p = b.pull(header(0, 0, 0, INLINE_ONLY), vec![sub("x", "tasks", &[("ws", &["w1"])], last, Some(&t))]);
            assert_eq!(p.one().end.next_cursor, last);
            ids.extend(p.one().segment_ids());
            token = p.one().end.bootstrap_state.clone();
        }
        let expected: Vec<String> = (0..12).map(|i| format!("t{i:02}")).collect();
        assert_eq!(ids, expected);
    }

    #[pg_test]
    fn maximal_clamps_and_many_subscriptions_stay_near_the_budget() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        for c in 0..4 {
            a.push_ok((0..100).map(|i| task(&format!("r{c}-{i:03}"), "w1", &big(1000))).collect());
        }
        run("SET LOCAL syncular.response_budget_bytes = 16384");
        let mut b = Client::new("p1", "bob", "cb");
        let mut subs = vec![];
        for i in 0..40 {
            subs.push(sub(&format!("boot{i}"), "tasks", &[("ws", &["w1"])], -1, None));
            subs.push(sub(&format!("inc{i}"), "tasks", &[("ws", &["w1"])], 0, None));
        }
        let p = b.pull(header(i32::MAX, i32::MAX, i32::MAX, INLINE_ONLY), subs);
        assert_eq!(p.sections.len(), 80);
        // 400 rows of ~1 KiB × 80 subscriptions would be ~32 MB unbounded.
        assert!(p.bytes < 16384 + 1100 + 80 * 256, "bounded by budget + one row + framing: {} bytes", p.bytes);
        assert!(!p.sections[0].segment_ids().is_empty());
        assert!(p.sections.iter().skip(1).all(|s| s.segment_ids().is_empty() && s.commits.is_empty()));
    }
}
