//! Bootstrap (SPEC §4.7, §5.2, §5.6, §5.7): pinned at `maxCommitSeq`, paged
//! by row id, resumable through the token, silently restarted on an unusable
//! token, rows delivered as inline SSG2 segments.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::resume_token::ResumeToken;

    use crate::tests::support::run;
    use crate::tests::sync_pull_support::*;

    fn boot(cursor: i64, token: Option<&str>) -> syncular_protocol::request::Subscription {
        sub("s", "tasks", &[("ws", &["w1"])], cursor, token)
    }

    fn seed(n: usize) -> (Client, i64) {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let mut last = 0;
        for i in 0..n {
            last = a.push_ok(vec![task(&format!("t{i:02}"), "w1", &format!("v{i}"))]);
        }
        // Noise in another scope that must never show up.
        a.push_ok(vec![task("zz-other", "w2", "hidden")]);
        (a, last + 1)
    }

    #[pg_test]
    fn fresh_bootstrap_delivers_every_row_in_one_inline_segment() {
        let (_a, max) = seed(5);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![boot(-1, None)]);
        let sec = p.one();
        assert_eq!(sec.start.status.name(), "active");
        assert!(sec.start.bootstrap);
        assert!(sec.commits.is_empty());
        assert_eq!(sec.segments.len(), 1);
        let seg = &sec.segments[0];
        assert_eq!(seg.header.table, "tasks");
        assert_eq!(seg.header.schema_version, 1);
        assert_eq!(seg.header.layout, tasks_layout());
        let rows = sec.segment_rows();
        assert_eq!(rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["t00", "t01", "t02", "t03", "t04"]);
        assert!(rows.iter().all(|r| r.1 == 1), "serverVersion of a once-written row is 1");
        assert_eq!(task_values(&rows[2].2), ("t02".into(), "w1".into(), "v2".into()));
        assert_eq!(sec.end.next_cursor, max, "nextCursor = asOfCommitSeq = maxCommitSeq");
        assert_eq!(sec.end.bootstrap_state, None, "complete in one page");
    }

    #[pg_test]
    fn empty_scope_still_gets_one_empty_segment() {
        let (_a, max) = seed(0);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w7"])], -1, None)]);
        let sec = p.one();
        assert_eq!(sec.segments.len(), 1, "the §5.6 first-page clear needs a segment");
        assert!(sec.segment_rows().is_empty());
        assert_eq!((sec.end.next_cursor, sec.end.bootstrap_state.clone()), (max, None));
    }

    #[pg_test]
    fn pages_and_resume_tokens_walk_the_table() {
        let (mut a, max) = seed(7);
        let mut b = Client::new("p1", "bob", "cb");
        // 2 rows per page, 2 pages per pull.
        let p = b.pull(header(0, 2, 2, ACCEPT_ROWS), vec![boot(-1, None)]);
        let sec = p.one();
        assert_eq!(sec.segments.len(), 2);
        assert_eq!(sec.segment_ids(), ["t00", "t01", "t02", "t03"]);
        assert_eq!(sec.end.next_cursor, max);
        let token_text = sec.end.bootstrap_state.clone().expect("incomplete → token");
        let token = ResumeToken::parse(&token_text).unwrap();
        assert_eq!(token.as_of_commit_seq, max);
        assert_eq!(token.tables, vec!["tasks".to_string()]);
        assert_eq!(token.table_index, 0);
        assert_eq!(token.row_cursor.as_deref(), Some("t03"));

        // Rows change after the pin: t00 updated (already served), t05 deleted,
        // t06 updated, a new row t99 appears.
        let u0 = a.push_ok(vec![task("t00", "w1", "new 0")]);
        a.push_ok(vec![delete("tasks", "t05")]);
        let last = a.push_ok(vec![task("t06", "w1", "new 6"), task("t99", "w1", "late")]);

        // Resume: cursor = asOf plus the token; the pin is kept.
        let p = b.pull(header(0, 2, 2, ACCEPT_ROWS), vec![boot(max, Some(&token_text))]);
        let sec = p.one();
        assert!(sec.start.bootstrap);
        assert_eq!(sec.segment_ids(), ["t04", "t06", "t99"], "current rows after the cursor");
        assert_eq!(sec.end.next_cursor, max, "every bootstrap response echoes asOfCommitSeq");
        assert_eq!(sec.end.bootstrap_state, None, "table exhausted → complete");
        let v6 = sec.segment_rows().into_iter().find(|r| r.0 == "t06").unwrap();
        assert_eq!((v6.1, task_values(&v6.2).2), (2, "new 6".to_string()));

        // The incremental pull from the pin replays everything after it.
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![boot(max, None)]);
        let sec = p.one();
        assert!(!sec.start.bootstrap);
        assert_eq!(sec.commit_seqs(), vec![u0, u0 + 1, last]);
        assert_eq!(sec.end.next_cursor, last);
    }

    #[pg_test]
    fn exact_page_fit_completes_without_an_extra_round() {
        let (_a, _max) = seed(4);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 2, 2, ACCEPT_ROWS), vec![boot(-1, None)]);
        assert_eq!(p.one().segment_ids().len(), 4);
        assert_eq!(p.one().end.bootstrap_state, None, "lookahead proves the end");
    }

    #[pg_test]
    fn max_snapshot_pages_and_rows_clamp_silently() {
        let (_a, _max) = seed(3);
        let mut b = Client::new("p1", "bob", "cb");
        // Negative rows → 1 row per page; 0 pages → default 4.
        let p = b.pull(header(0, -5, 0, ACCEPT_ROWS), vec![boot(-1, None)]);
        assert_eq!(p.one().segments.len(), 3);
        assert!(p.one().segments.iter().all(|s| s.blocks.iter().map(Vec::len).sum::<usize>() == 1));
        assert_eq!(p.one().end.bootstrap_state, None);
        // Huge values → clamped to 50000 rows × 50 pages: one page holds all.
        let p = b.pull(header(0, i32::MAX, i32::MAX, ACCEPT_ROWS), vec![boot(-1, None)]);
        assert_eq!(p.one().segments.len(), 1);
        // One page of one row.
        let p = b.pull(header(0, 1, 1, ACCEPT_ROWS), vec![boot(-1, None)]);
        assert_eq!(p.one().segment_ids(), ["t00"]);
        assert!(p.one().end.bootstrap_state.is_some());
    }

    #[pg_test]
    fn unusable_tokens_restart_silently_with_a_fresh_pin() {
        let (mut a, max) = seed(3);
        let mut b = Client::new("p1", "bob", "cb");
        let later = a.push_ok(vec![task("t50", "w1", "x")]);
        let other_table = ResumeToken {
            as_of_commit_seq: max,
            tables: vec!["notes".into()],
            table_index: 0,
            row_cursor: Some("t01".into()),
        }
        .render();
        let future_pin = ResumeToken {
            as_of_commit_seq: later + 100,
            tables: vec!["tasks".into()],
            table_index: 0,
            row_cursor: Some("t01".into()),
        }
        .render();
        // (A token that is not JSON at all is a decode error of the
        // envelope, §4.3 `opt(json)`, so it never reaches the engine.)
        for bad in ["{}", "[1,2]", r#"{"asOfCommitSeq":-1,"tables":["tasks"],"tableIndex":0,"rowCursor":null}"#,
                    other_table.as_str(), future_pin.as_str()] {
            let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![boot(max, Some(bad))]);
            let sec = p.one();
            assert!(sec.start.bootstrap, "token {bad:?} keeps bootstrap mode");
            assert_eq!(sec.segment_ids(), ["t00", "t01", "t02", "t50"], "restart from the first row ({bad:?})");
            assert_eq!(sec.end.next_cursor, later, "fresh pin ({bad:?})");
        }
    }

    #[pg_test]
    fn a_pin_behind_the_horizon_restarts() {
        let (mut a, max) = seed(3);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 1, 1, ACCEPT_ROWS), vec![boot(-1, None)]);
        let token = p.one().end.bootstrap_state.clone().unwrap();
        let later = a.push_ok(vec![task("t60", "w1", "x")]);
        set_horizon("p1", later);
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![boot(max, Some(&token))]);
        let sec = p.one();
        assert_eq!(sec.start.status.name(), "active", "a token is never reset");
        assert_eq!(sec.segment_ids(), ["t00", "t01", "t02", "t60"]);
        assert_eq!(sec.end.next_cursor, later);
    }

    #[pg_test]
    fn a_pin_at_the_horizon_is_still_usable() {
        let (_a, max) = seed(3);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 1, 1, ACCEPT_ROWS), vec![boot(-1, None)]);
        let token = p.one().end.bootstrap_state.clone().unwrap();
        set_horizon("p1", max);
        let p = b.pull(header(0, 1, 1, ACCEPT_ROWS), vec![boot(max, Some(&token))]);
        assert_eq!(p.one().segment_ids(), ["t01"], "pin == horizon is still usable");
    }

    #[pg_test]
    fn multi_variable_scopes_filter_rows_exactly() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let last = a.push_ok(vec![
            note("n1", "w1", "p1", "a"),
            note("n2", "w1", "p2", "b"),
            note("n3", "w2", "p1", "c"),
            note("n4", "w1", "p1", "d"),
        ]);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(
            header(0, 0, 0, ACCEPT_ROWS),
            vec![sub("n", "notes", &[("proj", &["p1"]), ("ws", &["w1"])], -1, None)],
        );
        let sec = p.one();
        assert_eq!(sec.segments[0].header.layout, notes_layout());
        assert_eq!(sec.segment_ids(), ["n1", "n4"]);
        // And the incremental window applies the same filter.
        let p = b.pull(
            header(0, 0, 0, ACCEPT_ROWS),
            vec![sub("n", "notes", &[("proj", &["p1"]), ("ws", &["w1"])], 0, None)],
        );
        let ids: Vec<&str> = p.one().commits[0].changes.iter().map(|c| c.row_id.as_str()).collect();
        assert_eq!(ids, ["n1", "n4"]);
        assert_eq!(p.one().end.next_cursor, last);
    }

    #[pg_test]
    fn several_requested_values_merge_in_row_id_order() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        a.push_ok(vec![task("b", "w2", "x"), task("a", "w1", "x"), task("d", "w1", "x"), task("c", "w3", "x")]);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 2, 1, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1", "w2"])], -1, None)]);
        assert_eq!(p.one().segment_ids(), ["a", "b"]);
        let token = p.one().end.bootstrap_state.clone().unwrap();
        let p = b.pull(header(0, 2, 1, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1", "w2"])], 1, Some(&token))]);
        assert_eq!(p.one().segment_ids(), ["d"]);
        assert_eq!(p.one().end.bootstrap_state, None);
    }

    /// The page reader (`store::pull::bootstrap_page`) takes dense candidates in
    /// one primary-key range and sparse ones by probe: whichever it uses, a
    /// walk delivers exactly the scope's rows in row-id order — across dense
    /// and sparse runs, batches of 1,000 candidates, pages and candidates
    /// whose app row vanished.
    #[pg_test]
    fn dense_and_sparse_runs_deliver_exactly_the_scope() {
        setup();
        run("SELECT pg_catalog.set_config('syncular.partition', 'p1', false)");
        // r00000..r01499 all w1; then one in seven until r04999; then all w1 again.
        run("INSERT INTO public.tasks (id, ws, title) \
             SELECT 'r' || lpad(g::text, 5, '0'), \
                    CASE WHEN g < 1500 OR g >= 5000 OR g % 7 = 0 THEN 'w1' ELSE 'w2' END, 'x' \
               FROM generate_series(0, 6499) g");
        // Candidates without an app row (the capture off, so the index keeps them).
        run("ALTER TABLE public.tasks DISABLE TRIGGER USER");
        run("DELETE FROM public.tasks WHERE id IN ('r00010', 'r02100', 'r05999')");
        run("ALTER TABLE public.tasks ENABLE TRIGGER USER");
        let candidates = Spi::get_one::<i64>(
            "SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = 'p1' AND tbl = 'tasks' AND value = 'w1'",
        )
        .unwrap()
        .unwrap();
        let expected: Vec<String> = Spi::get_one::<Vec<String>>(
            "SELECT array_agg(id ORDER BY _sync_row_id) FROM public.tasks WHERE _sync_partition = 'p1' AND ws = 'w1'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(candidates, expected.len() as i64 + 3, "three candidates vanished");
        let mut b = Client::new("p1", "bob", "cb");
        let (mut got, mut token) = (Vec::new(), None::<String>);
        for _ in 0..10 {
            let cursor = if token.is_some() { 0 } else { -1 };
            let p = b.pull(header(0, 2500, 1, ACCEPT_ROWS), vec![boot(cursor, token.as_deref())]);
            got.extend(p.one().segment_ids());
            token = p.one().end.bootstrap_state.clone();
            if token.is_none() {
                break;
            }
        }
        assert!(token.is_none(), "the walk ends");
        assert_eq!(got.len(), expected.len());
        assert_eq!(got, expected);
    }
}
