//! Breaker attacks on issue 12 (regression tests): bad input to every new
//! SQL function is a clear `code: message` error (never a crash), requested
//! scopes in odd shapes never widen a grant, and signed-URL tokens do not
//! cross segments, partitions, epochs or rotated keys.

#[pgrx::pg_schema]
mod tests {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use pgrx::prelude::*;
    use serde_json::json;
    use syncular_protocol::constants::ACCEPT_EXTERNAL_ROWS;
    use syncular_protocol::response::SegmentRef;

    use crate::store::spi::subtransaction::{self, SubtransactionError};
    use crate::tests::segments::support::*;
    use crate::tests::segments::url_support::{open_signed, token_of};
    use crate::tests::support::{expect_error, run};
    use crate::tests::sync_pull_support::*;

    const INVALID: (&str, &str) = ("22023", "syncular.invalid_argument");
    const NOT_FOUND: (&str, &str) = ("42704", "sync.not_found");
    const FORBIDDEN: (&str, &str) = ("42501", "sync.forbidden");
    const W1: &str = r#"{"ws":["w1"]}"#;

    /// Runs `sql` in a subtransaction; `Ok` when it succeeded.
    fn try_sql(sql: &str) -> Result<(), SubtransactionError> {
        let sql = sql.to_owned();
        subtransaction::run(move || Spi::run(&sql).unwrap_or_else(|e| panic!("SPI: {e}")))
    }

    fn seeded_ref() -> SegmentRef {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        a.push_ok(vec![task("t1", "w1", "one"), task("t2", "w1", "two")]);
        let mut c = Client::with_allowed("p1", "ann", "c-ann", Some(json!({"ws": ["w1"]})));
        let p = c.pull(header(0, 0, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        assert_eq!(p.one().refs.len(), 1);
        p.one().refs[0].clone()
    }

    #[pg_test]
    fn nulls_and_empty_strings_are_invalid_arguments_everywhere() {
        let r = seeded_ref();
        let id = r.segment_id.as_str();
        let cases: Vec<String> = vec![
            "SELECT syncular.segment(NULL, 'ann', 'x', '{}')".into(),
            "SELECT syncular.segment('', 'ann', 'x', '{}')".into(),
            "SELECT syncular.segment('p1', NULL, 'x', '{}')".into(),
            "SELECT syncular.segment('p1', '', 'x', '{}')".into(),
            "SELECT syncular.segment('p1', 'ann', NULL, '{}')".into(),
            "SELECT syncular.segment('p1', 'ann', '', '{}')".into(),
            format!("SELECT syncular.segment('p1', 'ann', '{id}', '{W1}', '[1]'::jsonb)"),
            format!("SELECT syncular.segment('p1', 'ann', '{id}', '{W1}', '\"x\"'::jsonb)"),
            "SELECT syncular.segment_open(NULL, 'ann', 'x', '{}')".into(),
            "SELECT syncular.segment_open('p1', '', 'x', '{}')".into(),
            "SELECT syncular.segment_open('p1', 'ann', '', '{}')".into(),
            "SELECT syncular.segment_chunk(NULL, 'x', 0)".into(),
            "SELECT syncular.segment_chunk('', 'x', 0)".into(),
            "SELECT syncular.segment_chunk('p1', NULL, 0)".into(),
            "SELECT syncular.segment_chunk('p1', '', 0)".into(),
            format!("SELECT syncular.segment_chunk('p1', '{id}', NULL)"),
            "SELECT syncular.segment_open_signed(NULL, 'a.b')".into(),
            "SELECT syncular.segment_open_signed('', 'a.b')".into(),
            format!("SELECT syncular.segment_open_signed('{id}', NULL)"),
            "SELECT syncular.segment_signed_url(NULL, 'x', 'd')".into(),
            "SELECT syncular.segment_signed_url('p1', '', 'd')".into(),
            "SELECT syncular.segment_signed_url('p1', 'x', NULL)".into(),
            "SELECT syncular.segment_sweep(0)".into(),
            "SELECT syncular.segment_sweep(-5)".into(),
            "SELECT syncular.segment_sweep(1, -1)".into(),
            "SELECT syncular.segment_sweep(1, -9223372036854775808)".into(),
            "SELECT count(*) FROM (SELECT syncular.sync_stream(NULL, 'ann', '\\x00'::bytea)) s".into(),
            "SELECT count(*) FROM (SELECT syncular.pull_stream('p1', '', '\\x00'::bytea)) s".into(),
            "SELECT count(*) FROM (SELECT syncular.pull_stream('p1', 'ann', NULL)) s".into(),
            "SELECT count(*) FROM syncular.sync_stream('', 'ann', '\\x00'::bytea)".into(),
        ];
        for sql in &cases {
            match try_sql(sql) {
                Ok(()) => panic!("{sql}: expected {} but it succeeded", INVALID.1),
                Err(e) => {
                    assert_eq!(e.sqlstate, INVALID.0, "{sql}: {:?}", e.message);
                    assert!(e.message.starts_with("syncular.invalid_argument: "), "{sql}: {:?}", e.message);
                }
            }
        }
    }

    #[pg_test]
    fn chunk_indexes_out_of_range_and_odd_ids_are_not_found() {
        let r = seeded_ref();
        let id = r.segment_id.as_str();
        for idx in [-1i64, -2147483648, 1, 2147483647] {
            let sql = format!("SELECT syncular.segment_chunk('p1', '{id}', {idx})");
            expect_error(try_sql(&sql), NOT_FOUND.0, NOT_FOUND.1, "no chunk");
        }
        // The chunk of p1's segment is not served under another partition.
        expect_error(try_sql(&format!("SELECT syncular.segment_chunk('p2', '{id}', 0)")), NOT_FOUND.0, NOT_FOUND.1, "no chunk");
        let huge = "x".repeat(1 << 20);
        for bad in ["sha256:", "SHA256:00", "sha256:%", &huge, "sha256:\u{00e9}"] {
            let sql = format!("SELECT syncular.segment('p1', 'ann', '{bad}', '{W1}', '{{\"ws\":[\"w1\"]}}')");
            expect_error(try_sql(&sql), NOT_FOUND.0, NOT_FOUND.1, "segment");
        }
        // An upper-case spelling of a real id is another id.
        let upper = format!("sha256:{}", id.trim_start_matches("sha256:").to_uppercase());
        let sql = format!("SELECT syncular.segment('p1', 'ann', '{upper}', '{W1}', '{{\"ws\":[\"w1\"]}}')");
        expect_error(try_sql(&sql), NOT_FOUND.0, NOT_FOUND.1, "segment");
    }

    #[pg_test]
    fn odd_requested_scopes_never_widen_the_grant() {
        let r = seeded_ref();
        let id = r.segment_id.as_str();
        let w1 = || Some(json!({"ws": ["w1"]}));
        let all = || Some(json!({"ws": ["*"]}));
        // Equivalent spellings of the same effective map: served (the digest binds, §3.5).
        for requested in [r#"{"ws":["w1","w1"]}"#, r#" { "ws" : [ "w1" ] } "#] {
            assert!(download("p1", "ann", id, Some(requested), w1()).is_ok(), "{requested}");
        }
        // Extra values the actor is not allowed are filtered out (§3.2) — still exactly w1.
        let many: Vec<String> = std::iter::once("w1".to_owned()).chain((0..20_000).map(|i| format!("x{i}"))).collect();
        let big = json!({"ws": many}).to_string();
        assert!(download("p1", "ann", id, Some(&big), w1()).is_ok());
        // …but under a wildcard grant they are part of the effective map: no match.
        expect_error(download("p1", "ann", id, Some(&big), all()), FORBIDDEN.0, FORBIDDEN.1, "do not match");
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        for (requested, allowed, needle) in [
            (r#"{"ws":["*"]}"#, w1(), "revoked"),
            (r#"{"ws":["*"]}"#, all(), "do not match"),
            (r#"{"ws":["w1"],"other":["x"]}"#, w1(), "revoked"),
            (r#"{"ws":["w1"],"other":["x"]}"#, all(), "revoked"),
            (r#"{}"#, w1(), "revoked"),
            (r#"{"ws":[]}"#, w1(), "revoked"),
            (r#"{"ws":null}"#, w1(), "JSON map"),
            (r#"{"ws":[1]}"#, w1(), "JSON map"),
            (r#"{"ws":[null]}"#, w1(), "JSON map"),
            (r#"[["ws",["w1"]]]"#, w1(), "JSON map"),
            ("null", w1(), "JSON map"),
            ("", w1(), "JSON map"),
            (deep.as_str(), w1(), "JSON map"),
            (r#"{"ws":["w2"]}"#, Some(json!({"ws": ["w1", "w2"]})), "do not match"),
        ] {
            let label: String = requested.chars().take(40).collect();
            match download("p1", "ann", id, Some(requested), allowed) {
                Ok(_) => panic!("{label}: served"),
                Err(e) => {
                    assert_eq!(e.sqlstate, FORBIDDEN.0, "{label}: {:?}", e.message);
                    assert!(e.message.starts_with("sync.forbidden: ") && e.message.contains(needle), "{label}: {:?}", e.message);
                }
            }
        }
        // Another actor of another partition, with the same grant: not published there.
        expect_error(download("p2", "ann", id, Some(W1), w1()), NOT_FOUND.0, NOT_FOUND.1, "not published");
    }

    fn signed(partition: &str, id: &str, digest: &str) -> String {
        let url = Spi::get_one_with_args::<pgrx::JsonB>(
            "SELECT syncular.segment_signed_url($1, $2, $3)",
            &[partition.into(), id.into(), digest.into()],
        )
        .unwrap()
        .expect("a URL")
        .0;
        token_of(url["url"].as_str().unwrap())
    }

    #[pg_test]
    fn tokens_do_not_cross_segments_partitions_epochs_or_dropped_keys() {
        let r = seeded_ref();
        run("SET LOCAL syncular.segment_url_base = 'https://cdn.example/s/'");
        let id = r.segment_id.clone();
        let token = signed("p1", &id, &r.scope_digest);
        assert_eq!(open_signed(&id, &token).unwrap()["partition"], "p1");
        // Another segment id (stored or not) with this token.
        let other = format!("sha256:{}", "0".repeat(64));
        expect_error(open_signed(&other, &token), FORBIDDEN.0, FORBIDDEN.1, "another segment");
        // A token naming a digest that has no publication: forbidden; a partition with none: not found.
        let wrong_digest = signed("p1", &id, &ws_digest(&["w2"]));
        expect_error(open_signed(&id, &wrong_digest), FORBIDDEN.0, FORBIDDEN.1, "scope digest");
        let p2 = signed("p2", &id, &r.scope_digest);
        expect_error(open_signed(&id, &p2), NOT_FOUND.0, NOT_FOUND.1, "not stored");
        // Spliced tokens: p2's payload with p1's MAC, p1's payload re-encoded with padding / junk.
        let (pay1, mac1) = token.split_once('.').unwrap();
        let (pay2, _) = p2.split_once('.').unwrap();
        for forged in [
            format!("{pay2}.{mac1}"),
            format!("{pay1}=.{mac1}"),
            format!("{pay1}.{mac1}."),
            format!("{pay1}.{mac1}AA"),
            format!(".{mac1}"),
            format!("{pay1}."),
            "..".to_owned(),
            ".".to_owned(),
            String::new(),
            "x".repeat(1 << 20),
            format!("{}.{mac1}", URL_SAFE_NO_PAD.encode(br#"{"v":1,"seg":"x","sd":"d","aud":"a","exp":1e30}"#)),
        ] {
            expect_error(open_signed(&id, &forged), FORBIDDEN.0, FORBIDDEN.1, "malformed");
        }
        // A new log epoch: the publication is no longer live.
        Spi::run("SELECT * FROM syncular.rotate_log_epoch('p1')").unwrap();
        expect_error(open_signed(&id, &token), NOT_FOUND.0, NOT_FOUND.1, "not stored");
        // A leaked key dropped: nothing it signed verifies.
        Spi::run("SELECT syncular.rotate_segment_url_key(true)").unwrap();
        expect_error(open_signed(&id, &token), FORBIDDEN.0, FORBIDDEN.1, "malformed");
    }

    #[pg_test]
    fn a_dropped_partition_serves_no_segment_by_any_path() {
        let r = seeded_ref();
        run("SET LOCAL syncular.segment_url_base = 'https://cdn.example/s/'");
        let id = r.segment_id.clone();
        let token = signed("p1", &id, &r.scope_digest);
        assert!(download("p1", "ann", &id, Some(W1), Some(json!({"ws": ["w1"]}))).is_ok());
        for _ in 0..100 {
            if Spi::get_one::<bool>("SELECT done FROM syncular.drop_partition_batch('p1', 1000)").unwrap().unwrap() {
                break;
            }
        }
        assert_eq!(count("sync_segments", "p1") + count("sync_segment_chunks", "p1") + count("sync_segment_publications", "p1"), 0);
        expect_error(download("p1", "ann", &id, Some(W1), Some(json!({"ws": ["w1"]}))), NOT_FOUND.0, NOT_FOUND.1, "segment");
        expect_error(open_signed(&id, &token), NOT_FOUND.0, NOT_FOUND.1, "not stored");
        expect_error(try_sql(&format!("SELECT syncular.segment_chunk('p1', '{id}', 0)")), NOT_FOUND.0, NOT_FOUND.1, "no chunk");
    }

    #[pg_test]
    fn bytes_swept_under_a_live_publication_are_not_found_not_a_crash() {
        let r = seeded_ref();
        let id = r.segment_id.clone();
        // Bytes gone (an operator's DELETE, a half-restored dump) while the publication stays.
        run(&format!("DELETE FROM syncular.sync_segment_chunks WHERE partition = 'p1' AND segment_id = '{id}'"));
        expect_error(download("p1", "ann", &id, Some(W1), Some(json!({"ws": ["w1"]}))), NOT_FOUND.0, NOT_FOUND.1, "no chunk 0");
        run(&format!("DELETE FROM syncular.sync_segments WHERE partition = 'p1' AND segment_id = '{id}'"));
        expect_error(download("p1", "ann", &id, Some(W1), Some(json!({"ws": ["w1"]}))), NOT_FOUND.0, NOT_FOUND.1, "no longer stored");
        // A new pull does not hand out a reference to bytes that are gone.
        let mut c = Client::with_allowed("p1", "ann", "c-ann2", Some(json!({"ws": ["w1"]})));
        let p = c.pull(header(0, 0, 0, ACCEPT_EXTERNAL_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        let again = p.one().refs[0].clone();
        assert_eq!(again.segment_id, id, "same rows, same bytes, stored again");
        assert!(download("p1", "ann", &id, Some(W1), Some(json!({"ws": ["w1"]}))).is_ok());
    }

    fn fetch(cursor: &str) -> Option<Vec<u8>> {
        Spi::connect(|c| {
            let t = c.select(&format!("FETCH 1 FROM {cursor}"), None, &[]).expect("FETCH");
            t.into_iter().next().map(|row| row.get::<Vec<u8>>(1).unwrap().unwrap())
        })
    }

    fn stream_request(client: &mut Client) -> String {
        use syncular_protocol::request::PullRequest;
        let req = client.request(
            vec![],
            Some(PullRequest {
                header: header(0, 0, 0, ACCEPT_ROWS),
                subscriptions: vec![
                    sub("s1", "tasks", &[("ws", &["w1"])], -1, None),
                    sub("s2", "notes", &[("proj", &["a"]), ("ws", &["w1"])], -1, None),
                ],
            }),
        );
        req.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A streamed pull abandoned after its first row (the gateway's client went
    /// away; `CLOSE` of the cursor) records nothing, and the backend serves the
    /// next rounds — whole, streamed, and two streams interleaved — exactly.
    #[pg_test]
    fn an_abandoned_stream_leaves_nothing_and_interleaved_streams_stay_exact() {
        setup();
        set_now(1_800_000_000_000);
        let mut a = Client::new("p1", "alice", "ca");
        for i in 0..12 {
            a.push_ok(vec![task(&format!("t{i:02}"), "w1", &"y".repeat(100))]);
        }
        a.push_ok(vec![note("n1", "w1", "a", "hello")]);
        let mut b = Client::new("p1", "bob", "cb");
        let mut c = Client::new("p1", "carol", "cc");
        b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![]);
        c.pull(header(0, 0, 0, ACCEPT_ROWS), vec![]);
        let (hb, hc) = (stream_request(&mut b), stream_request(&mut c));
        let declare = |name: &str, actor: &str, hex: &str| {
            run(&format!(
                "DECLARE {name} NO SCROLL CURSOR FOR SELECT syncular.pull_stream('p1', '{actor}', '\\x{hex}'::bytea, \
                 '{{\"ws\":[\"*\"],\"proj\":[\"*\"]}}'::jsonb)"
            ))
        };
        let one_shot = |actor: &str, hex: &str| {
            Spi::get_one::<Vec<u8>>(&format!(
                "SELECT syncular.pull('p1', '{actor}', '\\x{hex}'::bytea, '{{\"ws\":[\"*\"],\"proj\":[\"*\"]}}'::jsonb)"
            ))
            .unwrap()
            .unwrap()
        };
        let before = client_record("p1", "cb").unwrap().1;
        // Abandoned after the first row.
        declare("gone", "bob", &hb);
        assert_eq!(&fetch("gone").unwrap()[..4], b"SSP2");
        run("CLOSE gone");
        assert_eq!(client_record("p1", "cb").unwrap().1, before, "nothing of the abandoned pull recorded");
        // Two streams interleaved, row by row, in one backend.
        declare("sb", "bob", &hb);
        declare("sc", "carol", &hc);
        let (mut rb, mut rc) = (Vec::new(), Vec::new());
        loop {
            let nb = fetch("sb");
            let nc = fetch("sc");
            if nb.is_none() && nc.is_none() {
                break;
            }
            rb.extend(nb.unwrap_or_default());
            rc.extend(nc.unwrap_or_default());
        }
        run("CLOSE sb; CLOSE sc");
        let (pb, pc) = (Pulled::from_bytes(&rb), Pulled::from_bytes(&rc));
        assert_eq!(pb.sections.len(), 2);
        assert_eq!(pc.sections.len(), 2);
        // The streams delivered what a one-shot pull from the table start delivers.
        let (wb, wc) = (Pulled::from_bytes(&one_shot("bob", &hb)), Pulled::from_bytes(&one_shot("carol", &hc)));
        for (streamed, whole) in [(&pb, &wb), (&pc, &wc)] {
            for (s, w) in streamed.sections.iter().zip(&whole.sections) {
                assert_eq!(s.segment_ids(), w.segment_ids());
            }
        }
        assert_eq!(pb.sections[0].segment_ids().len(), 12);
        let ids: Vec<String> = client_record("p1", "cc").unwrap().1.as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap().to_owned()).collect();
        assert_eq!(ids, ["s1", "s2"]);
    }

    /// §5.3: a bootstrap resumed mid-table stays on the rows lane even when the
    /// client now advertises bit 2 (and bit 3); only a fresh one takes the image.
    #[pg_test]
    fn a_resumed_bootstrap_with_bit_2_stays_on_rows() {
        use syncular_protocol::response::MediaType;
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let mut pin = 0;
        for i in 0..10 {
            pin = a.push_ok(vec![task(&format!("t{i:02}"), "w1", "row")]);
        }
        let mut b = Client::new("p1", "bob", "cb");
        let w1 = || vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)];
        let p = b.pull(header(0, 2, 1, ACCEPT_EXTERNAL_ROWS), w1());
        let mut token = p.one().end.bootstrap_state.clone().expect("incomplete after one page");
        let mut ids = ids_of_refs(&p.one().refs);
        for accept in [0b0111u8, 0b1111, 0b0110, 0b0111, 0b0111] {
            let p = b.pull(header(0, 2, 1, accept), vec![sub("s", "tasks", &[("ws", &["w1"])], pin, Some(&token))]);
            let s = p.one();
            assert!(s.refs.iter().all(|r| r.media_type == MediaType::Rows), "accept {accept:#06b}: no image mid-table: {:?}", s.refs);
            assert!(!s.refs.is_empty() || !s.segments.is_empty());
            ids.extend(ids_of_refs(&s.refs));
            ids.extend(s.segment_ids());
            match s.end.bootstrap_state.clone() {
                Some(t) => token = t,
                None => break,
            }
        }
        let want: Vec<String> = (0..10).map(|i| format!("t{i:02}")).collect();
        assert_eq!(ids, want, "every row once, in order, on the rows lane");
        // A fresh bootstrap with bit 2 takes the image.
        let mut c = Client::new("p1", "carol", "cc");
        let p = c.pull(header(0, 2, 1, 0b0111), w1());
        assert_eq!(p.one().refs.len(), 1);
        assert_eq!(p.one().refs[0].media_type, MediaType::Sqlite);
        assert_eq!(p.one().end.bootstrap_state, None);
    }

    fn ids_of_refs(refs: &[SegmentRef]) -> Vec<String> {
        refs.iter()
            .flat_map(|r| {
                let bytes = download("p1", "bob", &r.segment_id, Some(W1), Some(json!({"ws": ["w1"]}))).expect("download");
                ids_of(&bytes, r)
            })
            .collect()
    }
}
