//! `syncular.sync_stream` / `syncular.pull_stream` (§1.4 streaming): the
//! rows concatenate to exactly the bytes of `syncular.sync` /
//! `syncular.pull` for the same request and database state, over many
//! request shapes; each row is one step (header + push half, one section or
//! one bootstrap page, `END`); and rows are produced lazily, one step per FETCH.

#[pgrx::pg_schema]
mod tests {
    use std::cell::RefCell;

    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::json;
    use syncular_protocol::constants::{ACCEPT_INLINE_ROWS, FRAME_END, FRAME_SEGMENT_INLINE, FRAME_SUB_START, WIRE_VERSION_1};
    use syncular_protocol::request::{PullRequest, PushCommit};

    use crate::store::spi::subtransaction::{self, SubtransactionError};
    use crate::tests::support::run;
    use crate::tests::sync_pull_support::*;

    /// Runs `f` in a subtransaction that is rolled back, returning what `f`
    /// returned: the next call sees the same database state.
    fn rolled_back<R>(f: impl FnOnce() -> R) -> R {
        let out = RefCell::new(None);
        let _ = subtransaction::run(|| {
            *out.borrow_mut() = Some(f());
            pgrx::error!("rolling back on purpose");
        });
        out.into_inner().expect("the closure ran")
    }

    fn one_shot(function: &str, c: &Client, bytes: &[u8]) -> Result<Vec<u8>, SubtransactionError> {
        let sql = format!("SELECT syncular.{function}($1, $2, $3, $4)");
        let (p, a, r, al) = (c.partition.clone(), c.actor.clone(), bytes.to_vec(), c.allowed.clone().map(JsonB));
        subtransaction::run(move || {
            Spi::get_one_with_args::<Vec<u8>>(&sql, &[p.as_str().into(), a.as_str().into(), r.into(), al.into()])
                .unwrap_or_else(|e| panic!("SPI: {e}"))
                .expect("bytes")
        })
    }

    fn streamed(function: &str, c: &Client, bytes: &[u8]) -> Result<Vec<Vec<u8>>, SubtransactionError> {
        let sql = format!("SELECT syncular.{function}($1, $2, $3, $4)");
        let (p, a, r, al) = (c.partition.clone(), c.actor.clone(), bytes.to_vec(), c.allowed.clone().map(JsonB));
        subtransaction::run(move || {
            Spi::connect(|client| {
                let rows = client
                    .select(&sql, None, &[p.as_str().into(), a.as_str().into(), r.into(), al.into()])
                    .unwrap_or_else(|e| panic!("SPI: {e}"));
                rows.map(|row| row.get::<Vec<u8>>(1).unwrap().expect("non-NULL chunk")).collect()
            })
        })
    }

    /// Asserts that `one` and `stream` give the same answer for `bytes`
    /// (same bytes, or the same error), both from the same state; returns
    /// the chunks.
    fn same(one: &str, stream: &str, c: &Client, bytes: &[u8]) -> Vec<Vec<u8>> {
        let expected = rolled_back(|| one_shot(one, c, bytes));
        let chunks = rolled_back(|| streamed(stream, c, bytes));
        match (expected, chunks) {
            (Ok(whole), Ok(chunks)) => {
                assert!(chunks.iter().all(|c| !c.is_empty()), "no empty chunk");
                let joined = chunks.concat();
                if joined != whole {
                    panic!(
                        "{stream} does not concatenate to {one}'s bytes:\n{:?}\nvs\n{:?}",
                        syncular_protocol::response::decode_response(&joined),
                        syncular_protocol::response::decode_response(&whole)
                    );
                }
                chunks
            }
            (Err(a), Err(b)) => {
                assert_eq!((a.sqlstate, a.message), (b.sqlstate, b.message), "same error");
                vec![]
            }
            (a, b) => panic!("{one} and {stream} disagree: {a:?} vs {:?}", b.map(|c| c.len())),
        }
    }

    fn both(c: &Client, bytes: &[u8]) -> Vec<Vec<u8>> {
        same("pull", "pull_stream", c, bytes);
        same("sync", "sync_stream", c, bytes)
    }

    fn pull_req(h: syncular_protocol::request::PullHeader, subs: Vec<syncular_protocol::request::Subscription>) -> Option<PullRequest> {
        Some(PullRequest { header: h, subscriptions: subs })
    }

    /// A populated partition: 30 tasks in w1, 5 in w2, notes in w1/a.
    fn populate(a: &mut Client) -> i64 {
        for i in 0..30 {
            a.push_ok(vec![task(&format!("t{i:02}"), "w1", &"x".repeat(200))]);
        }
        a.push_ok((0..5).map(|i| task(&format!("u{i}"), "w2", "two")).collect());
        a.push_ok(vec![note("n1", "w1", "a", "hello"), note("n2", "w1", "b", "other")])
    }

    #[pg_test]
    fn streamed_rounds_concatenate_to_the_one_shot_bytes() {
        setup();
        run("SET LOCAL syncular.now_ms = '1700000000000'");
        let mut a = Client::new("p1", "alice", "ca");
        let last = populate(&mut a);
        let mut b = Client::with_allowed("p1", "bob", "cb", Some(json!({"ws": ["w1"], "proj": ["a"]})));
        let w1 = || sub("s1", "tasks", &[("ws", &["w1"])], -1, None);
        let shapes: Vec<(&str, usize, Vec<u8>)> = vec![
            ("fresh bootstrap, paged", 5, b.request(vec![], pull_req(header(0, 7, 3, ACCEPT_ROWS), vec![w1()]))),
            ("bootstrap + incremental + revoked + reset", 9, {
                set_horizon("p1", 2);
                b.request(vec![], pull_req(header(0, 5, 2, ACCEPT_ROWS), vec![
                    w1(),
                    sub("s2", "notes", &[("proj", &["a"]), ("ws", &["w1"])], 3, None),
                    sub("s3", "tasks", &[("ws", &["w2"])], 5, None),
                    sub("s4", "tasks", &[("ws", &["w1"])], 1, None),
                    sub("s5", "tasks", &[("ws", &["w1"])], last + 5, None),
                ]))
            }),
            ("incremental, change limit", 3, b.request(vec![], pull_req(header(3, 0, 0, ACCEPT_ROWS), vec![sub("s1", "tasks", &[("ws", &["w1"])], 2, None)]))),
            ("inline-only accept", 3, b.request(vec![], pull_req(header(0, 0, 0, ACCEPT_INLINE_ROWS), vec![w1()]))),
            ("no subscriptions", 2, b.request(vec![], pull_req(header(0, 0, 0, ACCEPT_ROWS), vec![]))),
            ("push + pull", 3, b.request(
                vec![
                    PushCommit { client_commit_id: "b1".into(), operations: vec![task("t99", "w1", "mine")] },
                    PushCommit { client_commit_id: "b2".into(), operations: vec![task("z1", "w2", "forbidden")] },
                ],
                pull_req(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s1", "tasks", &[("ws", &["w1"])], last, None)]),
            )),
            ("push only", 1, b.request(vec![PushCommit { client_commit_id: "b3".into(), operations: vec![task("t98", "w1", "x")] }], None)),
            ("schema floor", 1, crate::tests::sync_support::request(2, "cb", 9, None, vec![], pull_req(header(0, 0, 0, ACCEPT_ROWS), vec![w1()]))),
            ("reset (no logEpoch)", 1, crate::tests::sync_support::request(2, "cb", 1, None, vec![], pull_req(header(0, 0, 0, ACCEPT_ROWS), vec![w1()]))),
            ("request-level error", 0, b.request(vec![], pull_req(header(0, 0, 0, ACCEPT_ROWS), vec![w1(), w1()]))),
            ("decode error", 0, vec![1, 2, 3]),
        ];
        for (name, count, bytes) in &shapes {
            assert_eq!(both(&b, bytes).len(), *count, "{name}: chunks (0 = the same error)");
        }
        // Budget-deferred sections: a small budget over several subscriptions.
        run("SET LOCAL syncular.response_budget_bytes = 3000");
        let req = b.request(vec![], pull_req(header(0, 5, 4, ACCEPT_ROWS), vec![
            w1(),
            sub("s2", "tasks", &[("ws", &["w1"])], -1, None),
            sub("s3", "tasks", &[("ws", &["w1"])], 0, None),
        ]));
        // One chunk per bootstrap segment (at least one per section), one per other section,
        // plus the header and END — and the budget really cut a bootstrap into several pages.
        let chunks = both(&b, &req);
        let pulled = Pulled::from_bytes(&chunks.concat());
        assert_eq!(pulled.sections.len(), 3);
        let per_section: Vec<usize> = pulled.sections.iter().map(|s| (s.segments.len() + s.refs.len()).max(1)).collect();
        assert!(per_section[0] > 1, "a paged bootstrap: {per_section:?}");
        assert_eq!(chunks.len(), 2 + per_section.iter().sum::<usize>(), "{per_section:?}");
        run("RESET syncular.response_budget_bytes");
        // Leases on: the LEASE frame travels in the first chunk.
        run("SET LOCAL syncular.lease_ttl = 3600");
        // Issued once for good: the compared rounds slide the same lease id.
        b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![]);
        let req = b.request(vec![], pull_req(header(0, 0, 0, ACCEPT_ROWS), vec![w1()]));
        let chunks = both(&b, &req);
        let frames = syncular_protocol::response::decode_response(&chunks.concat()).unwrap().frames;
        assert!(matches!(frames[0], syncular_protocol::response::ResponseFrame::Lease(_)), "{frames:?}");
        assert_eq!(chunks[1][0], FRAME_SUB_START, "the LEASE travels in the first chunk");
        run("RESET syncular.lease_ttl");
        // Wire version 1 (the partition does not require epochs yet? then a
        // v1 round is served, else refused the same way by both).
        let v1 = crate::tests::sync_support::request(WIRE_VERSION_1, "cb", 1, None, vec![], pull_req(header(0, 0, 0, ACCEPT_ROWS), vec![w1()]));
        both(&b, &v1);
    }

    #[pg_test]
    fn one_chunk_per_step() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        populate(&mut a);
        let mut b = Client::new("p1", "bob", "cb");
        let req = b.request(vec![], pull_req(header(0, 10, 2, ACCEPT_ROWS), vec![
            sub("s1", "tasks", &[("ws", &["w1"])], -1, None),
            sub("s2", "notes", &[("proj", &["a"]), ("ws", &["w1"])], -1, None),
        ]));
        let chunks = both(&b, &req);
        // Header; s1 (30 rows, pages of 10, at most 2 pages): SUB_START + page 1, then page 2 +
        // SUB_END; s2 (one page): SUB_START + page + SUB_END; END.
        assert_eq!(chunks.len(), 5, "header, one chunk per bootstrap page, END");
        assert_eq!(&chunks[0][..4], b"SSP2");
        assert_eq!(chunks[1][0], FRAME_SUB_START, "a section's first chunk starts with SUB_START");
        assert_eq!(chunks[2][0], FRAME_SEGMENT_INLINE, "its next page is a chunk of its own");
        assert_eq!(chunks[3][0], FRAME_SUB_START);
        assert_eq!(chunks[4], vec![FRAME_END, 0, 0, 0, 0], "the last chunk is END");
    }

    /// Alice's rows ([`populate`]), and bob recorded by one empty pull;
    /// returns bob and his pull request (inline rows) for `subs`.
    fn recorded_bob(subs: Vec<syncular_protocol::request::Subscription>) -> (Client, Vec<u8>) {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        populate(&mut a);
        let mut b = Client::new("p1", "bob", "cb");
        let req = b.request(vec![], pull_req(header(0, 0, 0, ACCEPT_ROWS), subs));
        b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![]);
        (b, req)
    }

    /// `DECLARE c` over `syncular.pull_stream` of bob's `req` (every scope allowed).
    fn declare_stream(req: &[u8]) {
        let hex: String = req.iter().map(|b| format!("{b:02x}")).collect();
        run(&format!(
            "DECLARE c NO SCROLL CURSOR FOR SELECT syncular.pull_stream('p1', 'bob', '\\x{hex}'::bytea, \
             '{{\"ws\":[\"*\"],\"proj\":[\"*\"]}}'::jsonb)"
        ));
    }

    /// The function is called per FETCH (value-per-call in the select list):
    /// the client record is written by the step before `END`, so it is
    /// unchanged while earlier rows are fetched and changed right after.
    #[pg_test]
    fn rows_are_produced_one_fetch_at_a_time() {
        let (b, req) = recorded_bob(vec![
            sub("s1", "tasks", &[("ws", &["w1"])], -1, None),
            sub("s2", "notes", &[("proj", &["a"]), ("ws", &["w1"])], -1, None),
        ]);
        let before = client_record("p1", "cb").expect("the first pull recorded cb").1;
        assert_eq!(before, json!([]));
        declare_stream(&req);
        let fetch = || {
            Spi::connect(|c| {
                let t = c.select("FETCH 1 FROM c", None, &[]).expect("FETCH");
                t.into_iter().next().map(|row| row.get::<Vec<u8>>(1).unwrap().unwrap())
            })
        };
        let mut chunks = vec![];
        for _ in 0..3 {
            chunks.push(fetch().expect("a chunk"));
            assert_eq!(client_record("p1", "cb").unwrap().1, before, "not recorded before the last step");
        }
        chunks.push(fetch().expect("END"));
        let after = client_record("p1", "cb").unwrap().1;
        let ids: Vec<&str> = after.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
        assert_eq!(ids, vec!["s1", "s2"], "recorded by the step that wrote END");
        assert_eq!(fetch(), None, "exhausted");
        run("CLOSE c");
        let whole = rolled_back(|| one_shot("pull", &b, &req)).unwrap();
        assert_eq!(Pulled::from_bytes(&chunks.concat()).sections.len(), 2);
        assert_eq!(Pulled::from_bytes(&whole).sections.len(), 2);
    }

    /// An error met by a later step surfaces at the FETCH that runs it, and
    /// aborts the transaction like any ERROR (nothing of the round stays).
    #[pg_test]
    fn a_later_step_error_surfaces_at_its_fetch() {
        let (_b, req) = recorded_bob(vec![
            sub("s1", "tasks", &[("ws", &["w1"])], -1, None),
            sub("s2", "tasks", &[("ws", &["w2"])], -1, None),
        ]);
        let r = subtransaction::run(|| {
            declare_stream(&req);
            let first = Spi::get_one::<Vec<u8>>("FETCH 1 FROM c").unwrap().unwrap();
            assert_eq!(&first[..4], b"SSP2");
            // The second section's table disappears under the stream.
            run("ALTER TABLE public.tasks RENAME TO tasks_gone");
            let _ = Spi::get_one::<Vec<u8>>("FETCH 1 FROM c");
            let _ = Spi::get_one::<Vec<u8>>("FETCH 1 FROM c");
            unreachable!("a section over a missing table raises");
        });
        let e = r.unwrap_err();
        assert!(e.message.contains("tasks") && e.message.contains("does not exist"), "{e:?}");
        assert_eq!(client_record("p1", "cb").unwrap().1, json!([]), "nothing recorded");
    }
}
