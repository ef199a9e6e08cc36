//! Delivery by `accept` (§4.2, §5.7) and reuse of publications (§5.1).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;
    use syncular_protocol::constants::{ACCEPT_EXTERNAL_ROWS, ACCEPT_INLINE_ROWS, ACCEPT_SQLITE};
    use syncular_protocol::response::MediaType;
    use syncular_protocol::resume_token::ResumeToken;

    use crate::tests::segments::support::*;
    use crate::tests::support::run;
    use crate::tests::sync_pull_support::*;

    const W1: &str = r#"{"ws":["w1"]}"#;

    fn seed(n: usize, title_bytes: usize) -> i64 {
        let mut a = Client::new("p1", "alice", "ca");
        let ops = (0..n).map(|i| task(&format!("t{i:02}"), "w1", &"x".repeat(title_bytes))).collect();
        a.push_ok(ops)
    }

    fn expires(segment_id: &str) -> Vec<i64> {
        Spi::connect(|c| {
            c.select(
                "SELECT expires_at_ms FROM syncular.sync_segment_publications WHERE segment_id = $1 ORDER BY 1",
                None,
                &[segment_id.into()],
            )
            .unwrap()
            .map(|r| r.get::<i64>(1).unwrap().unwrap())
            .collect()
        })
    }

    #[pg_test]
    fn external_only_pages_are_references_with_cursors_and_download_to_the_rows() {
        setup();
        let pin = seed(5, 10);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 2, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        let s = p.one();
        assert!(s.start.bootstrap && s.segments.is_empty(), "never inline");
        assert_eq!(s.refs.len(), 3);
        assert_eq!(s.end.bootstrap_state, None, "table done");
        assert_eq!(s.end.next_cursor, pin);
        let mut ids = vec![];
        let mut prev: Option<String> = None;
        for r in &s.refs {
            assert_eq!((r.table.as_str(), r.as_of_commit_seq), ("tasks", pin));
            assert_eq!(r.scope_digest, ws_digest(&["w1"]));
            assert_eq!(r.row_cursor, prev, "pages chain by cursor");
            assert!(r.url.is_none() && r.url_expires_at_ms.is_none());
            prev = r.next_row_cursor.clone();
            let bytes = download("p1", "bob", &r.segment_id, Some(W1), Some(json!({"ws": ["*"]}))).unwrap();
            ids.extend(ids_of(&bytes, r));
        }
        assert_eq!(prev, None, "last page: no continuation");
        assert_eq!(ids, ["t00", "t01", "t02", "t03", "t04"]);
        // An empty scope still gets a (stored, empty) first segment by reference.
        let p = b.pull(header(0, 2, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("e", "tasks", &[("ws", &["w9"])], -1, None)]);
        assert_eq!(p.one().refs.len(), 1);
        assert_eq!(p.one().refs[0].row_count, 0);
    }

    /// §5.3 through the pull: a table of at most one page stays on rows; a fresh bootstrap with
    /// bit 2 over more than one page gets one whole-table image (one descriptor, no cursors, no
    /// token); a second client with the same scopes at the same pin is served the same stored
    /// image (reuse is looked up first); a bootstrap resumed mid-table stays on rows even with
    /// bit 2.
    #[pg_test]
    fn images_start_a_table_and_never_switch_a_resumed_one() {
        setup();
        let pin = seed(5, 10);
        let all = ACCEPT_INLINE_ROWS | ACCEPT_EXTERNAL_ROWS | ACCEPT_SQLITE;
        let w1: &[(&str, &[&str])] = &[("ws", &["w1"])];
        let images = || {
            crate::tests::support::int8("SELECT count(*) FROM syncular.sync_segments WHERE partition = 'p1' AND media_type = 2")
        };

        // At most one page of rows (5 rows, pages of 5): no image.
        let mut e = Client::new("p1", "erin", "ce");
        let small = e.pull(header(0, 5, 0, all), vec![sub("s", "tasks", w1, -1, None)]);
        assert!(small.one().refs.iter().all(|d| d.media_type == MediaType::Rows));
        assert_eq!(small.one().segments.len() + small.one().refs.len(), 1);
        assert_eq!(images(), Some(0));

        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 2, 0, all), vec![sub("s", "tasks", w1, -1, None)]);
        let s = p.one();
        assert!(s.segments.is_empty(), "nothing inline");
        assert_eq!(s.refs.len(), 1, "one image");
        let image = &s.refs[0];
        assert_eq!(image.media_type, MediaType::Sqlite);
        assert_eq!((image.row_count, image.as_of_commit_seq), (5, pin));
        assert_eq!((image.row_cursor.as_deref(), image.next_row_cursor.as_deref()), (None, None));
        assert_eq!(image.scope_digest, ws_digest(&["w1"]));
        assert_eq!(s.end.bootstrap_state, None, "the image ends the table");
        let bytes = download("p1", "bob", &image.segment_id, Some(W1), Some(json!({"ws": ["*"]}))).unwrap();
        assert_eq!(&bytes[..16], b"SQLite format 3\0");

        // Another client, same scopes, same pin: the same stored image, not a second one.
        let mut c = Client::new("p1", "carol", "cc");
        let again = c.pull(header(0, 2, 0, all), vec![sub("s", "tasks", w1, -1, None)]);
        assert_eq!(again.one().refs[0].segment_id, image.segment_id);
        assert_eq!(images(), Some(1));

        // Mid-table: a rows page first (no bit 2), then resumed with bit 2 → rows again.
        let mut d = Client::new("p1", "dave", "cd");
        let first = d.pull(header(0, 2, 1, ACCEPT_INLINE_ROWS), vec![sub("s", "tasks", w1, -1, None)]);
        let token = first.one().end.bootstrap_state.clone().expect("a resume token mid-table");
        let resumed = d.pull(header(0, 2, 0, all), vec![sub("s", "tasks", w1, pin, Some(&token))]);
        let r = resumed.one();
        assert!(r.refs.iter().all(|d| d.media_type == MediaType::Rows), "never an image mid-table");
        assert_eq!(r.segments.len() + r.refs.len(), 2, "the remaining three rows in pages of two");
        assert_eq!(images(), Some(1));
    }

    #[pg_test]
    fn identical_effective_scopes_share_one_segment_built_once() {
        setup();
        seed(5, 10);
        set_now(1_000_000);
        let mut b = Client::new("p1", "bob", "cb");
        let first = b.pull(header(0, 2, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        let ids: Vec<String> = first.one().refs.iter().map(|r| r.segment_id.clone()).collect();
        assert_eq!(count("sync_segments", "p1"), 3);
        assert_eq!(count("sync_segment_publications", "p1"), 3);
        let before = expires(&ids[0]);
        // Later, two other clients with the same effective scopes: the same
        // segments, served from the publications (not re-published: the
        // expiry did not move), still three stored segments.
        set_now(2_000_000);
        for (actor, client) in [("carol", "cc"), ("dave", "cd")] {
            let mut c = Client::new("p1", actor, client);
            let p = c.pull(header(0, 2, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("x", "tasks", &[("ws", &["w1"])], -1, None)]);
            let again: Vec<String> = p.one().refs.iter().map(|r| r.segment_id.clone()).collect();
            assert_eq!(again, ids);
        }
        assert_eq!(expires(&ids[0]), before, "reused, never rebuilt and re-published");
        assert_eq!(count("sync_segments", "p1"), 3);
        assert_eq!(count("sync_segment_chunks", "p1"), 3);
        assert_eq!(count("sync_segment_publications", "p1"), 3);
        // Another page window is another context (and other bytes).
        let mut e = Client::new("p1", "erin", "ce");
        let p = e.pull(header(0, 3, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("x", "tasks", &[("ws", &["w1"])], -1, None)]);
        assert_eq!(p.one().refs.len(), 2);
        assert_eq!(count("sync_segment_publications", "p1"), 5);
    }

    #[pg_test]
    fn a_resumed_bootstrap_continues_by_reference_and_reuses_its_pages() {
        setup();
        let pin = seed(5, 10);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 2, 1, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        let token = p.one().end.bootstrap_state.clone().expect("one page per pull: incomplete");
        assert_eq!(ResumeToken::parse(&token).unwrap().row_cursor.as_deref(), Some("t01"));
        let p = b.pull(header(0, 2, 1, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], pin, Some(&token))]);
        let r = &p.one().refs[0];
        assert_eq!(r.row_cursor.as_deref(), Some("t01"));
        assert_eq!(r.next_row_cursor.as_deref(), Some("t03"));
        let segments = count("sync_segments", "p1");
        let again = b.pull(header(0, 2, 1, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], pin, Some(&token))]);
        assert_eq!(again.one().refs[0].segment_id, r.segment_id);
        assert_eq!(count("sync_segments", "p1"), segments);
    }

    #[pg_test]
    fn mixed_mode_inlines_up_to_the_threshold_and_references_beyond() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        // Page 1 (t0, t1) small, page 2 (t2, t3) about 4 KB.
        a.push_ok(vec![
            task("t0", "w1", "s"),
            task("t1", "w1", "s"),
            task("t2", "w1", &"x".repeat(2000)),
            task("t3", "w1", &"x".repeat(2000)),
        ]);
        run("SET LOCAL syncular.segment_inline_max_bytes = 1000");
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 2, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        let s = p.one();
        assert_eq!(s.segment_ids(), ["t0", "t1"], "the small page inline");
        assert_eq!(s.refs.len(), 1, "the large page by reference");
        assert_eq!(s.refs[0].row_cursor.as_deref(), Some("t1"));
        assert!(s.refs[0].byte_length > 1000);
        // Both pages were stored (the inline one too, for reuse).
        assert_eq!(count("sync_segment_publications", "p1"), 2);
        // A larger threshold inlines both — the stored pages, reused.
        run("SET LOCAL syncular.segment_inline_max_bytes = 262144");
        let mut c = Client::new("p1", "carol", "cc");
        let p = c.pull(header(0, 2, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        assert_eq!(p.one().segment_ids(), ["t0", "t1", "t2", "t3"]);
        assert!(p.one().refs.is_empty());
        // Threshold 0: everything by reference.
        run("SET LOCAL syncular.segment_inline_max_bytes = 0");
        let p = c.pull(header(0, 2, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        assert!(p.one().segments.is_empty());
        assert_eq!(p.one().refs.len(), 2);
        assert_eq!(count("sync_segment_publications", "p1"), 2);
    }

    #[pg_test]
    fn mixed_mode_sends_a_page_that_does_not_fit_the_budget_by_reference() {
        setup();
        seed(12, 500);
        run("SET LOCAL syncular.response_budget_bytes = 2048");
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(
            header(0, 0, 0, ACCEPT_ROWS),
            vec![sub("x", "tasks", &[("ws", &["w1"])], -1, None), sub("y", "tasks", &[("ws", &["w1"])], -1, None)],
        );
        for s in &p.sections {
            assert!(s.segments.is_empty(), "6 KB does not fit a 2 KB budget: not inline");
            assert_eq!(s.refs.len(), 1, "the full page by reference, the fresh one too");
            assert_eq!(s.refs[0].row_count, 12);
            assert_eq!(s.end.bootstrap_state, None);
        }
        assert_eq!(p.sections[0].refs[0].segment_id, p.sections[1].refs[0].segment_id);
        assert!(p.bytes < 2048, "descriptors only ({} bytes)", p.bytes);
    }

    #[pg_test]
    fn inline_only_clients_store_nothing() {
        setup();
        seed(5, 10);
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(header(0, 2, 0, ACCEPT_INLINE_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        assert_eq!(p.one().segment_ids().len(), 5);
        assert!(p.one().refs.is_empty());
        assert_eq!(count("sync_segments", "p1"), 0);
    }
}
