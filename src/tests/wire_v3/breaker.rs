//! Adversarial `#[pg_test]`s of wire version 3 (a review of what landed):
//! malformed v3 input through every SQL entry point, authorization and
//! scope attacks with sparse payloads, column versions under the writers
//! that mix (NaN floats, `syncular.commit` mixing `patch` and `upsert`,
//! crdt columns, a schema bump), conflict bitmaps past the first byte, the
//! replay of a v3 outcome, a hand-corrupted `_sync_column_versions`, and the
//! lifetime of `ROUND_FAILURE` reports.
//!
//! The first four were bugs of the code as it first landed (each doc
//! comment names the fault and its fix); the others are attacks that held,
//! all kept as regression tests.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::{json, Value};
    use syncular_protocol::request::{encode_request, Request, ReqHeader};
    use syncular_protocol::response::{OpResult, PushStatus};
    use syncular_protocol::row_codec::RowValue;
    use syncular_protocol::sparse_row::{encode_sparse_row, SparseSlot};

    use crate::tests::capture::support::{set_partition, write_ok};
    use crate::tests::lifecycle::support::{prune_all, set_now, DAY, T0};
    use crate::tests::support::{expect_error, int8, run, text};
    use crate::tests::sync_support::*;
    use crate::tests::wire_v3::support::*;

    const P: &str = "v3-breaker";

    fn rows_named(id: &str) -> i64 {
        count(&format!("SELECT count(*) FROM public.tasks WHERE _sync_partition = '{P}' AND _sync_row_id = '{id}'"))
    }

    fn sparse_bytes(row: &syncular_protocol::sparse_row::SparseRow) -> Vec<u8> {
        encode_sparse_row(&tasks_layout(), 0, row).expect("encode")
    }

    fn nan_row(id: &str, title: &str) -> syncular_protocol::sparse_row::SparseRow {
        let mut row = full(id, "p1", title);
        row[tasks_layout().index_of("f").unwrap()] = SparseSlot::Value(RowValue::Float(f64::NAN));
        row
    }

    fn server_commit(ops: Value) -> Value {
        let sql = format!(
            "SELECT syncular.commit('{P}', 'svc', '{ops}'::jsonb, allowed_scopes => '{{\"project_id\": [\"*\"]}}'::jsonb)::text"
        );
        serde_json::from_str(&text(&sql).expect("commit result")).expect("json")
    }

    // ------------------------------------------------- bugs found, then fixed

    /// Was a bug (fixed: a pruning batch deletes the reports of pruned
    /// clients, `store::round::failures::delete_orphans`): `ROUND_FAILURE` reports outlive their client. `sync_round_failures`
    /// is deleted only with the partition (`src/store/lifecycle/drop.rs`):
    /// pruning deletes expired client records
    /// (`src/store/lifecycle/prune.rs` `delete_expired_clients`) but leaves
    /// their reports, so a client that reported and went away — or one
    /// actor inventing client ids, 17 rows each — grows the table for ever.
    #[pg_test]
    fn round_failure_reports_are_pruned_with_their_client() {
        setup_tasks();
        set_now(T0);
        let epoch = acquire_epoch(P, "alice", "c0");
        for i in 0..5 {
            let client = format!("c{i}");
            sync(P, "alice", &request3(&client, Some(&epoch), None, vec![], Some(empty_pull())), None);
            sync(P, "alice", &request3(&client, Some(&epoch), Some("transport.timeout"), vec![], Some(empty_pull())), None);
        }
        assert_eq!(int8(&format!("SELECT count(*) FROM syncular.round_failures('{P}')")), Some(5));
        // Forty days later (client retention is 30 days) every client record is pruned…
        set_now(T0 + 40 * DAY);
        let pruned = prune_all(P, 1000);
        assert_eq!(pruned.clients, 5, "{pruned:?}");
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_clients WHERE partition = '{P}'")), 0);
        // …and the reports of clients that no longer exist must go with them.
        assert_eq!(
            int8(&format!("SELECT count(*) FROM syncular.round_failures('{P}')")),
            Some(0),
            "round-failure reports of pruned clients are never deleted"
        );
    }

    /// Was a bug (fixed: the rotation deletes the partition's reports with its
    /// client records): an epoch rotation deletes every client record of the partition
    /// (`src/store/lifecycle/rotate.rs`, `DELETE FROM syncular.sync_clients`)
    /// but keeps their `ROUND_FAILURE` reports: a client id bound afresh
    /// after the rotation — by another actor, even — inherits the old
    /// client's counts.
    #[pg_test]
    fn round_failure_reports_do_not_survive_an_epoch_rotation() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        sync(P, "alice", &request3("c1", Some(&epoch), None, vec![], Some(empty_pull())), None);
        sync(P, "alice", &request3("c1", Some(&epoch), Some("transport.failed"), vec![], Some(empty_pull())), None);
        run(&format!("SELECT count(*) FROM syncular.rotate_log_epoch('{P}')"));
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_clients WHERE partition = '{P}'")), 0);
        // mallory binds the freed id "c1" after the rotation.
        let epoch = acquire_epoch(P, "mallory", "c1");
        sync(P, "mallory", &request3("c1", Some(&epoch), None, vec![], Some(empty_pull())), None);
        assert_eq!(
            int8(&format!("SELECT count(*) FROM syncular.round_failures('{P}') WHERE client_id = 'c1'")),
            Some(0),
            "the new c1 (mallory's) is listed with alice's old report"
        );
    }

    /// Was a bug (fixed: writers compare with `row_codec::identical`, floats by
    /// their bits): a `float` column holding NaN "changes" on every write that leaves
    /// it alone. The writers decide which columns moved by comparing values
    /// with `RowValue`'s derived `PartialEq` (`f64`: NaN ≠ NaN):
    /// `src/engine/push/apply.rs` `update` (`|i| row[i] != stored_row[i]`
    /// for a full row) and `src/engine/capture/row.rs` `update_row`
    /// (`old != new`). The NaN column's version moves to every new version,
    /// so a v3 client editing it from any earlier base conflicts although
    /// nobody touched it. (The same comparison misses a 0.0 → -0.0 edit.)
    #[pg_test]
    fn a_nan_float_does_not_move_when_a_write_leaves_it() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "a");
        let r = push3(P, "a", &epoch, vec![commit("seed", vec![upsert3(&nan_row("t1", "first"), Some(0))])]);
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        // A v2 client edits the title at the current version; its full row carries the same NaN.
        let v2row = with(task("t1", "p1", "second", None), "f", Some(RowValue::Float(f64::NAN)));
        let r = push(P, "alice", "old", &epoch, vec![commit("o1", vec![upsert(&v2row, Some(1))])], Some(&allowed_p1_p2()));
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        // A plain SQL UPDATE of the title leaves f alone too.
        set_partition(P);
        write_ok("UPDATE public.tasks SET title = 'third' WHERE id = 't1'");
        let state = stored(P, "t1");
        assert_eq!(state.0, 3);
        assert_eq!(version_of(&state, "title"), 3);
        assert_eq!(version_of(&state, "f"), 1, "f was never written after the insert");
        // So a v3 client editing f from version 1 is not in conflict with anything.
        let r = push3(P, "a", &epoch, vec![commit("f1", vec![upsert3(&sparse("t1", &[("f", Some(RowValue::Float(1.5)))]), Some(1))])]);
        assert_eq!(r[0].status, PushStatus::Applied, "a spurious conflict on an untouched column: {r:?}");
    }

    /// Was a bug (fixed: each `syncular.commit` operation has its own payload
    /// form, `push::run`'s `forms`): docs/src/reference/client-generations.md "Per-column versions" says a
    /// `syncular.commit` `upsert` moves only the columns whose value changed,
    /// but `src/engine/server_commit.rs` `parse_operations` switches every
    /// upsert of a commit that also has a `patch` to a sparse row with every
    /// column present (`None if kind == "upsert" … => SparseSlot::Null`,
    /// `form = Sparse`), and a sparse write moves every present column. So
    /// adding an unrelated patch to a commit changes what its upserts do
    /// (here: every column of t1 moves, and a stale-based edit of an
    /// untouched column then conflicts; the upsert would also refuse a scope
    /// change instead of stripping it, and obey the tombstone rule).
    #[pg_test]
    fn an_upsert_beside_a_patch_moves_only_changed_columns() {
        setup_tasks();
        let r = server_commit(json!([
            {"table": "tasks", "op": "upsert", "row": {"id": "t1", "project_id": "p1", "title": "a", "done": false, "n": 1}},
            {"table": "tasks", "op": "upsert", "row": {"id": "t2", "project_id": "p1", "title": "b", "done": false}}
        ]));
        assert_eq!(r["status"], json!("applied"), "{r}");
        // The same upsert of t1 (only n changes), once alone and once beside a patch of t2.
        let r = server_commit(json!([
            {"table": "tasks", "op": "upsert", "row": {"id": "t1", "project_id": "p1", "title": "a", "done": false, "n": 2}},
            {"table": "tasks", "op": "patch", "row": {"id": "t2", "title": "c"}}
        ]));
        assert_eq!(r["status"], json!("applied"), "{r}");
        let state = stored(P, "t1");
        assert_eq!(state.0, 2);
        assert_eq!(version_of(&state, "n"), 2);
        assert_eq!(
            (version_of(&state, "title"), version_of(&state, "done")),
            (1, 1),
            "an upsert moves the columns whose value changed (docs/src/reference/client-generations.md), whatever else the commit holds"
        );
    }

    // ------------------------------------------------------ attacks that held

    /// Malformed sparse payloads (wrong types, NULL primary key, NULL in a
    /// non-nullable column, invalid UTF-8, unsafe integers, invalid JSON,
    /// a truncated or giant length prefix, a primary key that is not the
    /// rowId): each rejects its commit with `sync.invalid_request` naming
    /// the fault; the next commit of the request applies; nothing of the bad
    /// one is stored.
    #[pg_test]
    fn malformed_sparse_values_reject_their_commit_and_nothing_else() {
        let epoch = seeded(P, "c1");
        let good = upsert3(&full("ok", "p1", "ok"), None);
        let mut cases: Vec<(&str, Operation, &str)> = Vec::new();
        // done = true, its byte changed to 2.
        let mut b = sparse_bytes(&sparse("t3", &[("done", Some(RowValue::Boolean(true)))]));
        *b.last_mut().unwrap() = 2;
        cases.push(("bool byte", raw_upsert("t3", b), "bool"));
        // title "ab" → invalid UTF-8.
        let mut b = sparse_bytes(&sparse("t3", &[("title", s("ab"))]));
        let n = b.len();
        b[n - 2] = 0xff;
        b[n - 1] = 0xfe;
        cases.push(("utf8", raw_upsert("t3", b), "UTF-8"));
        // n = 1 → 2^53 (outside the safe range).
        let mut b = sparse_bytes(&sparse("t3", &[("n", Some(RowValue::Integer(1)))]));
        let n = b.len();
        b[n - 8..].copy_from_slice(&(1i64 << 53).to_le_bytes());
        cases.push(("unsafe integer", raw_upsert("t3", b), "2^53"));
        // meta = {} → "{x" (not JSON).
        let mut b = sparse_bytes(&sparse("t3", &[("meta", Some(RowValue::Json("{}".into())))]));
        let n = b.len();
        b[n - 1] = b'x';
        cases.push(("json", raw_upsert("t3", b), "JSON"));
        // The primary key present but NULL: presence {id}, null bitmap {id}, no value.
        cases.push(("null pk", raw_upsert("t3", vec![0x01, 0x00, 0x01]), "non-nullable column \\\"id\\\""));
        // done present and NULL (non-nullable): presence {id, done}, null bit of the second present.
        let mut b = sparse_bytes(&sparse("t3", &[("done", Some(RowValue::Boolean(true)))]));
        b[2] = 0x02;
        b.pop();
        cases.push(("null done", raw_upsert("t3", b), "non-nullable column \\\"done\\\""));
        // A title whose length prefix claims 4 GiB.
        let mut b = sparse_bytes(&sparse("t3", &[("title", s("ab"))]));
        let n = b.len();
        b[n - 6..n - 2].copy_from_slice(&u32::MAX.to_le_bytes());
        cases.push(("giant length", raw_upsert("t3", b), "left"));
        // A whole row cut short.
        let mut b = sparse_bytes(&full("t3", "p1", "x"));
        b.pop();
        cases.push(("cut", raw_upsert("t3", b), "left"));
        // Every presence bit set (16 for 12 columns).
        let mut b = sparse_bytes(&full("t3", "p1", "x"));
        b[1] = 0xff;
        cases.push(("all presence bits", raw_upsert("t3", b), "padding"));
        // A payload whose primary key is not the rowId.
        cases.push(("other pk", raw_upsert("t3", sparse_bytes(&full("t4", "p1", "x"))), "rowId"));
        for (i, (name, op, fragment)) in cases.into_iter().enumerate() {
            let r = push3(P, "c1", &epoch, vec![commit(&format!("bad{i}"), vec![op]), commit(&format!("good{i}"), vec![good.clone()])]);
            let (_, code, _) = rejection(&r[0]);
            assert_eq!(code, "sync.invalid_request", "{name}: {r:?}");
            assert!(format!("{:?}", r[0]).contains(fragment), "{name}: {r:?}");
            assert_eq!(r[1].status, PushStatus::Applied, "{name}: {r:?}");
        }
        assert_eq!(rows_named("t3") + rows_named("t4"), 0);
    }

    /// The same malformed requests through `push`, `pull` and `sync_stream`:
    /// a request-level fault (bad `ROUND_FAILURE`, wire version 65535) is
    /// `sync.invalid_request` from every entry point; a bad payload rejects
    /// its commit through `push` and is never applied by `pull` (which does
    /// not run the push half); the backend keeps serving.
    #[pg_test]
    fn every_entry_point_refuses_malformed_v3_requests_and_keeps_serving() {
        let epoch = seeded(P, "c1");
        let bad_payload = || {
            request3(
                "c1",
                Some(&epoch),
                None,
                vec![commit("bp", vec![raw_upsert("t5", vec![0x00, 0x00])])],
                Some(empty_pull()),
            )
        };
        let bad_code = {
            let mut b = request3("c1", Some(&epoch), Some("transport.failed"), vec![], Some(empty_pull()));
            let at = 8 + 5 + u32::from_le_bytes(b[9..13].try_into().unwrap()) as usize + 5 + 4;
            b[at] = b'-';
            b
        };
        let mut wire_65535 = request3("c1", Some(&epoch), None, vec![], Some(empty_pull()));
        wire_65535[4] = 0xff;
        wire_65535[5] = 0xff;
        for function in ["sync", "push", "pull"] {
            expect_error(call(function, P, "alice", &bad_code, None), "22023", "sync.invalid_request", "ROUND_FAILURE.code");
            expect_error(call(function, P, "alice", &wire_65535, None), "22023", "sync.invalid_request", "65535");
        }
        for function in ["sync_stream", "pull_stream"] {
            for bytes in [&bad_code, &wire_65535] {
                let b = bytes.clone();
                let e = crate::store::spi::subtransaction::run(move || {
                    Spi::get_one_with_args::<i64>(
                        &format!("SELECT count(*) FROM syncular.{function}($1, 'alice', $2)"),
                        &[P.into(), b.into()],
                    )
                    .unwrap_or_else(|e| panic!("SPI: {e}"))
                });
                expect_error(e, "22023", "sync.invalid_request", "");
            }
        }
        let pushed = decode(call("push", P, "alice", &bad_payload(), Some(&allowed_p1_p2())).expect("push half"));
        assert_eq!(rejection(&push_results(&pushed)[0]).1, "sync.invalid_request");
        call("pull", P, "alice", &bad_payload(), Some(&allowed_p1_p2())).expect("pull half ignores pushes");
        assert_eq!(rows_named("t5"), 0);
        // Still serving.
        let r = push3(P, "c1", &epoch, vec![commit("after", vec![upsert3(&sparse("t1", &[("title", s("still"))]), None)])]);
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        assert_eq!(int8(&format!("SELECT count(*) FROM syncular.round_failures('{P}')")), Some(0));
    }

    fn decode(bytes: Vec<u8>) -> syncular_protocol::response::Response {
        syncular_protocol::response::decode_response(&bytes).expect("decodable response")
    }

    /// Sparse payloads cannot reach a row of a scope the actor lacks: no
    /// scope columns, a scope "move" into an allowed scope, a baseVersion, a
    /// delete — all `sync.forbidden` on the stored row, which stays as it
    /// was; and an absent row's partial payload naming a forbidden scope is
    /// `sync.forbidden` before `sync.row_missing`.
    #[pg_test]
    fn sparse_payloads_cannot_reach_another_scope() {
        let epoch = seeded(P, "c1");
        set_partition(P);
        write_ok("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('x9', 'p9', 'secret', false)");
        let attempts = [
            ("no scope", upsert3(&sparse("x9", &[("title", s("pwn"))]), None)),
            ("move to p1", upsert3(&sparse("x9", &[("project_id", s("p1")), ("title", s("pwn"))]), None)),
            ("versioned", upsert3(&sparse("x9", &[("title", s("pwn"))]), Some(1))),
            ("base 0", upsert3(&sparse("x9", &[("title", s("pwn"))]), Some(0))),
            ("pk only", upsert3(&sparse("x9", &[]), None)),
            ("full row in p1", upsert3(&full("x9", "p1", "pwn"), None)),
            ("delete", delete("x9")),
            ("absent, p9", upsert3(&sparse("ghost", &[("project_id", s("p9")), ("title", s("x"))]), None)),
        ];
        for (i, (name, op)) in attempts.into_iter().enumerate() {
            let r = push3(P, "c1", &epoch, vec![commit(&format!("x{i}"), vec![op])]);
            let rec = &r[0].results[0];
            assert!(
                matches!(rec, OpResult::Error { code, .. } if code == "sync.forbidden"),
                "{name}: {r:?}"
            );
        }
        let state = stored(P, "x9");
        assert_eq!((state.0, value(&state.1, "title"), value(&state.1, "project_id")), (1, s("secret"), s("p9")));
        assert!(state.2.is_none());
    }

    /// `conflictColumns` over a table of 12 columns is two bytes, a column
    /// past the first byte (`code`, ordinal 11) is bit 3 of byte 1, and the
    /// replay of the conflicting commit answers the identical record.
    #[pg_test]
    fn conflict_bitmaps_span_bytes_and_replay_identically() {
        let epoch = seeded(P, "a");
        let r = push3(P, "a", &epoch, vec![commit("a1", vec![upsert3(&sparse("t1", &[("code", s("A"))]), Some(1))])]);
        assert_eq!(r[0].status, PushStatus::Applied);
        let stale = || vec![commit("b1", vec![upsert3(&sparse("t1", &[("code", s("B")), ("title", s("b"))]), Some(1))])];
        let first = push3(P, "b", &epoch, stale());
        let (version, _, bitmap) = conflict(&first[0]);
        assert_eq!((version, bitmap.as_slice()), (2, &[0u8, 0b0000_1000][..]));
        assert_eq!(marked(&bitmap), vec!["code".to_owned()]);
        // Replayed (same client and commit id) after the row moved on: the stored answer.
        push3(P, "a", &epoch, vec![commit("a2", vec![upsert3(&sparse("t1", &[("title", s("z"))]), None)])]);
        let again = push3(P, "b", &epoch, stale());
        assert_eq!(again, first, "a replay answers what the first delivery answered");
        // An applied v3 commit replays as cached with the same commitSeq.
        let applied = push3(P, "a", &epoch, vec![commit("a3", vec![upsert3(&sparse("t1", &[("n", Some(RowValue::Integer(3)))]), Some(3))])]);
        assert_eq!(applied[0].status, PushStatus::Applied, "{applied:?}");
        let cached = push3(P, "a", &epoch, vec![commit("a3", vec![upsert3(&sparse("t1", &[("n", Some(RowValue::Integer(3)))]), Some(3))])]);
        assert_eq!((cached[0].status, cached[0].commit_seq), (PushStatus::Cached, applied[0].commit_seq));
        assert_eq!(stored(P, "t1").0, 4, "the replay wrote nothing");
    }

    /// crdt columns move when carried but never conflict; NULLs move like
    /// values; a v3 insert after a v2 delete, a v2 write after v3 patches
    /// and a plain SQL update each keep exact column versions.
    #[pg_test]
    fn column_versions_stay_exact_across_writers() {
        let epoch = seeded(P, "a");
        let doc = syncular_crdt::text::insert(&[], 7, "t", 0, "hi").expect("a yjs update");
        let r = push3(P, "a", &epoch, vec![commit("d1", vec![upsert3(&sparse("t1", &[("doc", Some(RowValue::Crdt(doc.clone()))), ("title", None)]), Some(1))])]);
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        let state = stored(P, "t1");
        assert_eq!((version_of(&state, "doc"), version_of(&state, "title"), version_of(&state, "n")), (2, 2, 1));
        // A stale writer of the crdt column merges (never comparable); of n applies (untouched).
        let more = syncular_crdt::text::insert(&[], 8, "t", 0, "yo").expect("a yjs update");
        let r = push3(P, "b", &epoch, vec![commit("d2", vec![upsert3(&sparse("t1", &[("doc", Some(RowValue::Crdt(more))), ("n", Some(RowValue::Integer(4)))]), Some(1))])]);
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        // …but of the title (NULLed at 2) conflicts.
        let r = push3(P, "b", &epoch, vec![commit("d3", vec![upsert3(&sparse("t1", &[("title", s("x"))]), Some(1))])]);
        assert_eq!(marked(&conflict(&r[0]).2), vec!["title".to_owned()]);
        // A plain SQL update of n moves n only.
        set_partition(P);
        write_ok("UPDATE public.tasks SET n = 5 WHERE id = 't1'");
        let state = stored(P, "t1");
        assert_eq!((state.0, version_of(&state, "n"), version_of(&state, "title"), version_of(&state, "doc")), (4, 4, 2, 3));
        // A v2 full-row write at the current version that changes nothing moves nothing.
        let mut same: Vec<Option<RowValue>> = state.1.clone();
        same[0] = s("t1");
        let r = push(P, "alice", "old", &epoch, vec![commit("o1", vec![upsert(&same, Some(4))])], Some(&allowed_p1_p2()));
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        let after = stored(P, "t1");
        assert_eq!((after.0, version_of(&after, "n"), version_of(&after, "title"), version_of(&after, "done")), (5, 4, 2, 1));
    }

    /// A schema bump appends a column: rows keep their column versions, the
    /// new column reads at 1 on a row with explicit versions and at the row
    /// version on a NULL one, and v3 patches of it follow the rule.
    #[pg_test]
    fn a_schema_bump_appending_a_column_keeps_column_versions() {
        let epoch = seeded(P, "a");
        push3(P, "a", &epoch, vec![commit("a1", vec![upsert3(&sparse("t1", &[("title", s("two"))]), Some(1))])]);
        let mut ir = crate::tests::support::tasks_ir(2);
        ir["tables"][0]["columns"].as_array_mut().unwrap().push(json!({"name": "extra", "type": "string", "nullable": true}));
        crate::tests::support::register(&ir).expect("bump");
        let layout = syncular_protocol::schema_ir::Schema::from_value(&ir).unwrap().tables[0].layout().clone();
        assert_eq!(layout.len(), 13);
        let req = |client: &str, id: &str, col: &str, v: &str, base: Option<i64>, cid: &str| {
            let mut row = vec![SparseSlot::Absent; 13];
            row[0] = SparseSlot::Value(RowValue::String(id.into()));
            row[layout.index_of(col).unwrap()] = SparseSlot::Value(RowValue::String(v.into()));
            encode_request(&Request {
                wire_version: 3,
                header: ReqHeader { client_id: client.into(), schema_version: 2, log_epoch: Some(epoch.clone()) },
                round_failure: None,
                commits: vec![commit(cid, vec![Operation {
                    table: "tasks".into(),
                    row_id: id.into(),
                    op: syncular_protocol::frame_fields::Op::Upsert,
                    base_version: base,
                    payload: Some(encode_sparse_row(&layout, 0, &row).unwrap()),
                }])],
                pull: None,
                unknown: vec![],
            })
            .unwrap()
        };
        let res = |bytes: Vec<u8>| push_results(&sync(P, "alice", &bytes, Some(&allowed_p1_p2())));
        // t1 has explicit versions {title: 2}: extra (never written) is at 1.
        let r = res(req("a", "t1", "extra", "e", Some(1), "e1"));
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        let r = res(req("b", "t1", "extra", "f", Some(2), "e2"));
        assert!(matches!(&r[0].results[..], [OpResult::Conflict { conflict_columns, .. }] if conflict_columns == &vec![0u8, 0b0001_0000]), "{r:?}");
        let cv = crate::tests::support::bytea(&format!(
            "SELECT _sync_column_versions FROM public.tasks WHERE _sync_partition = '{P}' AND _sync_row_id = 't1'"
        ));
        let map = syncular_protocol::column_versions::decode_column_versions(Some(&cv)).unwrap();
        assert_eq!(map.into_iter().collect::<Vec<_>>(), vec![(2, 2), (12, 3)]);
    }

    /// A hand-corrupted `_sync_column_versions` (garbage bytes, written with
    /// the capture triggers off) reads as NULL — every column at the row's
    /// version, so a stale base conflicts rather than merges — and the next
    /// write of the row (a v3 push, a v2 push, a plain SQL UPDATE) stores a
    /// well-formed value again; other rows keep syncing; DELETE works.
    /// (As first landed, every write of such a row failed its whole request.)
    #[pg_test]
    fn a_corrupt_column_versions_value_is_read_as_null_and_healed() {
        let epoch = seeded(P, "c1");
        push3(P, "c1", &epoch, vec![commit("t2", vec![upsert3(&full("t2", "p1", "two"), Some(0))])]);
        let corrupt = |id: &str| {
            run("SET LOCAL session_replication_role = replica");
            run(&format!("UPDATE public.tasks SET _sync_column_versions = '\\xff' WHERE _sync_partition = '{P}' AND _sync_row_id = '{id}'"));
            run("SET LOCAL session_replication_role = origin");
        };
        // `stored` decodes the column versions and panics on a malformed value.
        let readable = |id: &str| stored(P, id).0 > 0;
        corrupt("t1");
        // A malformed value reads as NULL (every column at the row's version — a stale base
        // conflicts on every column it carries, never merges), with a WARNING; the write
        // stores a well-formed value again.
        let stale = request3("c1", Some(&epoch), None, vec![commit("k0", vec![upsert3(&sparse("t1", &[("title", s("x"))]), Some(0))])], None);
        let r = push_results(&sync(P, "alice", &stale, Some(&allowed_p1_p2())));
        assert_eq!(marked(&conflict(&r[0]).2), vec!["title".to_owned()], "read as NULL: the carried column conflicts");
        let v3 = request3("c1", Some(&epoch), None, vec![commit("k1", vec![upsert3(&sparse("t1", &[("title", s("x"))]), Some(1))])], None);
        let r = push_results(&sync(P, "alice", &v3, Some(&allowed_p1_p2())));
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        assert!(readable("t1"), "the push healed the value");
        assert_eq!((version_of(&stored(P, "t1"), "title"), version_of(&stored(P, "t1"), "done")), (2, 1));
        // A full-row (v2) write and a plain SQL UPDATE heal it alike.
        corrupt("t1");
        let v2 = request(2, "old", 1, Some(&epoch), vec![commit("o1", vec![upsert(&task("t1", "p1", "v2", None), None)])], None);
        let r = push_results(&sync(P, "alice", &v2, Some(&allowed_p1_p2())));
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        assert!(readable("t1"));
        corrupt("t1");
        set_partition(P);
        write_ok("UPDATE public.tasks SET title = 'sql' WHERE id = 't1'");
        assert!(readable("t1"));
        assert_eq!(text("SELECT title FROM public.tasks WHERE id = 't1'"), Some("sql".into()));
        // Other rows keep syncing; a DELETE works.
        let r = push3(P, "c1", &epoch, vec![commit("k2", vec![upsert3(&sparse("t2", &[("title", s("still"))]), Some(1))])]);
        assert_eq!(r[0].status, PushStatus::Applied, "{r:?}");
        corrupt("t1");
        write_ok("DELETE FROM public.tasks WHERE id = 't1'");
        assert_eq!(rows_named("t1"), 0);
    }

    use syncular_protocol::request::Operation;
}
