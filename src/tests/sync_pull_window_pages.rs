//! How an incremental window is read in pages (SPEC §4.5;
//! `engine::pull::window`): candidates, their metadata and their changes cut
//! at the changes still wanted plus one row — a cut inside a later commit
//! ends the page before it, a first commit larger than the cut is read whole
//! — with dense candidates (one run of consecutive commits) and scattered
//! ones (one run per commit), and changes that the other scope variables
//! filter out.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::sync_pull_support::*;

    fn tasks_sub(cursor: i64) -> syncular_protocol::request::Subscription {
        sub("s", "tasks", &[("ws", &["w1"])], cursor, None)
    }

    /// Pulls `tasks` of `w1` from `cursor` until the window is exhausted with
    /// `limit`; returns every delivered commitSeq and the cursor of each round.
    fn drain(b: &mut Client, limit: i32, mut cursor: i64, max: i64) -> (Vec<i64>, Vec<i64>) {
        let (mut seqs, mut cursors) = (vec![], vec![]);
        loop {
            let p = b.pull(header(limit, 0, 0, ACCEPT_ROWS), vec![tasks_sub(cursor)]);
            let sec = p.one();
            assert!(sec.change_count() <= limit as usize || sec.commits.len() == 1);
            seqs.extend(sec.commit_seqs());
            cursor = sec.end.next_cursor;
            cursors.push(cursor);
            if cursor == max {
                return (seqs, cursors);
            }
        }
    }

    #[pg_test]
    fn dense_and_scattered_windows_deliver_every_matching_commit_once_in_order() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        // 30 dense w1 commits, then 30 alternating w1/w2, then 10 two-row w1 commits.
        let mut w1 = vec![];
        for i in 0..30 {
            w1.push(a.push_ok(vec![task(&format!("d{i}"), "w1", "x")]));
        }
        for i in 0..30 {
            let ws = if i % 2 == 0 { "w1" } else { "w2" };
            let seq = a.push_ok(vec![task(&format!("s{i}"), ws, "x")]);
            if ws == "w1" {
                w1.push(seq);
            }
        }
        let mut last = 0;
        for i in 0..10 {
            last = a.push_ok(vec![
                task(&format!("t{i}a"), "w1", "x"),
                task(&format!("t{i}b"), "w1", "x"),
            ]);
            w1.push(last);
        }
        let mut b = Client::new("p1", "bob", "cb");
        for limit in [1, 2, 3, 7, 20, 1000] {
            let (seqs, cursors) = drain(&mut b, limit, 0, last);
            assert_eq!(seqs, w1, "limit {limit}");
            assert!(
                cursors.windows(2).all(|w| w[0] < w[1]),
                "limit {limit}: cursors advance {cursors:?}"
            );
        }
        // One round with the default limit delivers everything.
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().commit_seqs(), w1);
        assert_eq!(p.one().change_count(), 30 + 15 + 20);
        assert_eq!(p.one().end.next_cursor, last);
    }

    #[pg_test]
    fn a_full_page_is_cut_at_the_limit_and_the_next_pull_resumes_after_it() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let seqs: Vec<i64> = (0..50)
            .map(|i| a.push_ok(vec![task(&format!("r{i}"), "w1", "x")]))
            .collect();
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(20, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().commit_seqs(), seqs[..20].to_vec());
        assert_eq!(
            p.one().end.next_cursor,
            seqs[19],
            "truncated at the limit: the last delivered commit"
        );
        let p = b.pull(header(20, 0, 0, ACCEPT_ROWS), vec![tasks_sub(seqs[19])]);
        assert_eq!(p.one().commit_seqs(), seqs[20..40].to_vec());
        let p = b.pull(header(20, 0, 0, ACCEPT_ROWS), vec![tasks_sub(seqs[39])]);
        assert_eq!(p.one().commit_seqs(), seqs[40..].to_vec());
        assert_eq!(p.one().end.next_cursor, seqs[49], "exhausted");
    }

    /// `notes` subscriptions select candidates by `proj` (the first scope
    /// variable) and filter the changes by `ws`: a candidate's rows may
    /// mostly not match.
    #[pg_test]
    fn changes_filtered_by_another_variable_do_not_count_against_the_limit() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let c1 = a.push_ok(vec![note("n1", "w1", "p1", "x")]);
        // Ten p1 notes, only the last in w1.
        let c2 = a.push_ok(
            (0..10)
                .map(|i| {
                    note(
                        &format!("m{i}"),
                        if i == 9 { "w1" } else { "w2" },
                        "p1",
                        "x",
                    )
                })
                .collect(),
        );
        let c3 = a.push_ok(vec![note("n3", "w1", "p1", "x")]);
        let mut b = Client::new("p1", "bob", "cb");
        let notes = |cursor| {
            sub(
                "n",
                "notes",
                &[("proj", &["p1"]), ("ws", &["w1"])],
                cursor,
                None,
            )
        };
        // Limit 3: c2's first rows cut the page after c1; c2 is then read
        // whole (its first rows match nothing), delivers one change, and c3
        // still fits.
        let p = b.pull(header(3, 0, 0, ACCEPT_ROWS), vec![notes(0)]);
        assert_eq!(p.one().commit_seqs(), vec![c1, c2, c3]);
        assert_eq!(p.one().commits[1].changes.len(), 1);
        assert_eq!(p.one().commits[1].changes[0].row_id, "m9");
        assert_eq!(p.one().end.next_cursor, c3);
        // Limit 2: c3 no longer fits.
        let p = b.pull(header(2, 0, 0, ACCEPT_ROWS), vec![notes(0)]);
        assert_eq!(p.one().commit_seqs(), vec![c1, c2]);
        assert_eq!(p.one().end.next_cursor, c2);
        // Limit 1 from c1: c2 has one matching change (of ten rows): it fits.
        let p = b.pull(header(1, 0, 0, ACCEPT_ROWS), vec![notes(c1)]);
        assert_eq!(p.one().commit_seqs(), vec![c2]);
        assert_eq!(p.one().end.next_cursor, c2);
    }

    /// A first commit larger than the whole limit goes alone, whole, even
    /// when its rows fill several row-limit cuts.
    #[pg_test]
    fn a_first_commit_larger_than_the_limit_is_read_whole() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let big = a.push_ok((0..40).map(|i| task(&format!("b{i}"), "w1", "x")).collect());
        let next = a.push_ok(vec![task("n", "w1", "x")]);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(5, 0, 0, ACCEPT_ROWS), vec![tasks_sub(0)]);
        assert_eq!(p.one().commit_seqs(), vec![big]);
        assert_eq!(p.one().change_count(), 40);
        assert_eq!(p.one().end.next_cursor, big);
        // With one change delivered first, the big commit does not fit.
        let p = b.pull(header(5, 0, 0, ACCEPT_ROWS), vec![tasks_sub(big)]);
        assert_eq!(p.one().commit_seqs(), vec![next]);
        let small = a.push_ok(vec![task("s", "w1", "x")]);
        let bigger = a.push_ok((0..40).map(|i| task(&format!("c{i}"), "w1", "x")).collect());
        let p = b.pull(header(5, 0, 0, ACCEPT_ROWS), vec![tasks_sub(next)]);
        assert_eq!(p.one().commit_seqs(), vec![small]);
        assert_eq!(p.one().end.next_cursor, small);
        let p = b.pull(header(5, 0, 0, ACCEPT_ROWS), vec![tasks_sub(small)]);
        assert_eq!(p.one().commit_seqs(), vec![bigger]);
        assert_eq!(p.one().end.next_cursor, bigger);
    }
}
