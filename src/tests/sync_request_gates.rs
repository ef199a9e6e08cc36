//! The sync round's request-level order of work (SPEC §1.5–§1.7, §2.1, §6.1,
//! §9): decode errors, partition registry, wire/epoch gate, schema floor,
//! reset response, client binding, operation cap, allowed-map keys, and the
//! push / pull halves.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;
    use syncular_protocol::request::PushCommit;
    use syncular_protocol::response::{PushResult, PushStatus, ResponseFrame};

    use crate::tests::support::expect_error;
    use crate::tests::sync_support::*;

    const P: &str = "tenant-a";

    /// A v2 request whose only PUSH_COMMIT has zero operations (the encoder
    /// refuses to build one, so the frames are written by hand).
    fn empty_commit_request(epoch: &str) -> Vec<u8> {
        use syncular_protocol::constants::{FRAME_PUSH_COMMIT, FRAME_REQ_HEADER};
        use syncular_protocol::envelope::{write_end, write_envelope_header, write_frame, MsgKind};
        use syncular_protocol::primitives::Writer;
        use syncular_protocol::request::{encode_req_header, ReqHeader};
        let mut w = Writer::with_capacity(64);
        write_envelope_header(&mut w, 2, MsgKind::Request).unwrap();
        let header = ReqHeader {
            client_id: "c1".into(),
            schema_version: 1,
            log_epoch: Some(epoch.into()),
        };
        write_frame(&mut w, FRAME_REQ_HEADER, |s| {
            encode_req_header(s, &header, 2)
        })
        .unwrap();
        write_frame(&mut w, FRAME_PUSH_COMMIT, |s| {
            s.str("k1", "clientCommitId")?;
            s.u32(0);
            Ok(())
        })
        .unwrap();
        write_end(&mut w);
        w.into_vec()
    }

    #[pg_test]
    fn decode_errors_raise_their_code() {
        setup_tasks();
        expect_error(
            call("sync", P, "alice", b"not an ssp2 message", None),
            "22023",
            "sync.invalid_request",
            "",
        );
        let full = request(2, "c1", 1, None, vec![], Some(empty_pull()));
        expect_error(
            call("sync", P, "alice", &full[..full.len() - 3], None),
            "22023",
            "sync.invalid_request",
            "",
        );
        // A PUSH_COMMIT with zero operations.
        let epoch = acquire_epoch(P, "alice", "c1");
        let empty = empty_commit_request(&epoch);
        expect_error(
            call("sync", P, "alice", &empty, None),
            "22023",
            "sync.empty_commit",
            "",
        );
        // NULL arguments.
        let null = crate::store::spi::subtransaction::run(|| {
            Spi::get_one::<Vec<u8>>("SELECT syncular.sync(NULL, 'a', '\\x00'::bytea)").unwrap()
        });
        let null = null.unwrap_err();
        assert_eq!(null.sqlstate, "22023");
        assert!(null.message.starts_with("syncular.invalid_argument: argument partition"), "{null:?}");
    }

    #[pg_test]
    fn partition_registry_created_once_and_last_seen_refreshed() {
        setup_tasks();
        Spi::run("SET LOCAL syncular.now_ms = '1000'").unwrap();
        let epoch = acquire_epoch(P, "alice", "c1");
        assert!(!epoch.is_empty());
        assert_eq!(count("SELECT count(*) FROM syncular.sync_partition_registry WHERE partition = 'tenant-a' \
                          AND epoch_required = false AND last_authenticated_at_ms = 1000"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_partitions WHERE partition = 'tenant-a' AND max_commit_seq = 0"), 1);
        // Within syncular.activity_refresh_ms (default 60 s) of the last write, last-seen stays.
        Spi::run("SET LOCAL syncular.now_ms = '60999'").unwrap();
        sync(P, "alice", &request(2, "c1", 1, Some(&epoch), vec![], Some(empty_pull())), None);
        assert_eq!(count("SELECT last_authenticated_at_ms FROM syncular.sync_partition_registry WHERE partition = 'tenant-a'"), 1000);
        // The client's record is created by that request (the epoch acquisition binds nothing).
        assert_eq!(count("SELECT updated_at_ms FROM syncular.sync_clients WHERE partition = 'tenant-a' AND client_id = 'c1'"), 60999);
        Spi::run("SET LOCAL syncular.now_ms = '61000'").unwrap();
        sync(P, "alice", &request(2, "c1", 1, Some(&epoch), vec![], Some(empty_pull())), None);
        assert_eq!(count("SELECT last_authenticated_at_ms FROM syncular.sync_partition_registry WHERE partition = 'tenant-a'"), 61000);
        assert_eq!(count("SELECT updated_at_ms FROM syncular.sync_clients WHERE partition = 'tenant-a' AND client_id = 'c1'"), 60999);
        // With the interval at 0, every request refreshes.
        Spi::run("SET LOCAL syncular.activity_refresh_ms = 0").unwrap();
        Spi::run("SET LOCAL syncular.now_ms = '65000'").unwrap();
        // A pull-only request refreshes last-seen and keeps the epoch.
        let resp = sync(
            P,
            "alice",
            &request(2, "c1", 1, Some(&epoch), vec![], Some(empty_pull())),
            None,
        );
        let e = resp.header.epoch.clone().unwrap();
        assert_eq!(
            (e.log_epoch.as_str(), e.reset_required),
            (epoch.as_str(), false)
        );
        assert_eq!(count("SELECT last_authenticated_at_ms FROM syncular.sync_partition_registry WHERE partition = 'tenant-a'"), 65000);
        assert_eq!(count("SELECT updated_at_ms FROM syncular.sync_clients WHERE partition = 'tenant-a' AND client_id = 'c1'"), 65000);
        // Another partition gets its own, different epoch.
        let other = acquire_epoch("tenant-b", "alice", "c1");
        assert_ne!(other, epoch);
    }

    #[pg_test]
    fn epoch_gate_and_reset_response() {
        setup_tasks();
        let a = allowed_p1_p2();
        let epoch = acquire_epoch(P, "alice", "c1");
        // Absent epoch with pushes → refused before anything.
        let req = request(
            2,
            "c1",
            1,
            None,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            None,
        );
        expect_error(
            call("sync", P, "alice", &req, Some(&a)),
            "22023",
            "sync.invalid_request",
            "logEpoch",
        );
        // A different epoch → reset response, nothing else, nothing applied.
        let req = request(
            2,
            "c1",
            1,
            Some("stale-epoch"),
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            Some(empty_pull()),
        );
        let resp = sync(P, "alice", &req, Some(&a));
        let e = resp.header.epoch.clone().unwrap();
        assert!(e.reset_required);
        assert_eq!(e.log_epoch, epoch);
        assert!(resp.frames.is_empty());
        assert_eq!(resp.header.required_schema_version, None);
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results"), 0);
    }

    #[pg_test]
    fn wire_v1_served_until_epochs_are_required() {
        setup_tasks();
        let a = allowed_p1_p2();
        let req = request(
            1,
            "old",
            1,
            None,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            None,
        );
        let resp = sync(P, "alice", &req, Some(&a));
        assert_eq!(
            resp.wire_version, 1,
            "answered in the request's wire version"
        );
        assert!(resp.header.epoch.is_none());
        assert_eq!(push_results(&resp)[0].status, PushStatus::Applied);
        assert_eq!(
            count("SELECT wire_version FROM syncular.sync_clients WHERE client_id = 'old'"),
            1
        );
        // After a rotation the partition requires epochs: v1 is refused before any push.
        Spi::run("UPDATE syncular.sync_partition_registry SET epoch_required = true WHERE partition = 'tenant-a'").unwrap();
        let req = request(
            1,
            "old",
            1,
            None,
            vec![commit(
                "k2",
                vec![upsert(&task("t2", "p1", "b", None), None)],
            )],
            None,
        );
        expect_error(
            call("sync", P, "alice", &req, Some(&a)),
            "0A000",
            "sync.client_wire_unsupported",
            "",
        );
        assert_eq!(
            count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 't2'"),
            0
        );
    }

    #[pg_test]
    fn schema_floor_answers_header_only() {
        setup_tasks();
        let a = allowed_p1_p2();
        let epoch = acquire_epoch(P, "alice", "c1");
        for version in [2, 7] {
            let req = request(
                2,
                "c1",
                version,
                Some(&epoch),
                vec![commit(
                    "k1",
                    vec![upsert(&task("t1", "p1", "a", None), None)],
                )],
                Some(empty_pull()),
            );
            let resp = sync(P, "alice", &req, Some(&a));
            assert_eq!(resp.header.required_schema_version, Some(1));
            assert_eq!(resp.header.latest_schema_version, Some(1));
            assert_eq!(
                resp.header.epoch.as_ref().map(|e| e.reset_required),
                Some(false)
            );
            assert!(resp.frames.is_empty(), "nothing else is processed");
        }
        // The floor wins over the reset response but still reports resetRequired.
        let req = request(2, "c1", 3, None, vec![], Some(empty_pull()));
        let resp = sync(P, "alice", &req, Some(&a));
        assert_eq!(resp.header.required_schema_version, Some(1));
        assert_eq!(
            resp.header.epoch.as_ref().map(|e| e.reset_required),
            Some(true)
        );
        // v1 floor response has no epoch fields.
        let resp = sync(
            P,
            "alice",
            &request(1, "c1", 9, None, vec![], Some(empty_pull())),
            Some(&a),
        );
        assert_eq!(
            (resp.wire_version, resp.header.required_schema_version),
            (1, Some(1))
        );
        assert!(resp.header.epoch.is_none());
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
    }

    #[pg_test]
    fn client_id_binding_and_reserved_prefix() {
        setup_tasks();
        let a = allowed_p1_p2();
        let epoch = acquire_epoch(P, "alice", "c1");
        assert_eq!(count("SELECT count(*) FROM syncular.sync_clients WHERE partition = 'tenant-a' AND client_id = 'c1' \
                          AND actor_id = 'alice' AND wire_version = 2 AND cursor = -1"), 0,
                   "a reset response does no client-record work");
        push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            Some(&a),
        );
        assert_eq!(count("SELECT count(*) FROM syncular.sync_clients WHERE partition = 'tenant-a' AND client_id = 'c1' \
                          AND actor_id = 'alice' AND wire_version = 2"), 1);
        // Another actor reusing c1 in this partition fails before any push.
        let req = request(
            2,
            "c1",
            1,
            Some(&epoch),
            vec![commit(
                "k2",
                vec![upsert(&task("t2", "p1", "b", None), None)],
            )],
            None,
        );
        expect_error(
            call("sync", P, "mallory", &req, Some(&a)),
            "22023",
            "sync.invalid_client_id",
            "different actor",
        );
        assert_eq!(
            count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 't2'"),
            0
        );
        // The same client id in another partition is a different binding.
        let eb = acquire_epoch("tenant-b", "mallory", "c1");
        let r = push(
            "tenant-b",
            "mallory",
            "c1",
            &eb,
            vec![commit(
                "k2",
                vec![upsert(&task("t2", "p1", "b", None), None)],
            )],
            Some(&a),
        );
        assert_eq!(r[0].status, PushStatus::Applied);
        // The reserved server-command prefix.
        let req = request(
            2,
            "[\"remote-command\",\"x\"]",
            1,
            Some(&epoch),
            vec![],
            Some(empty_pull()),
        );
        expect_error(
            call("sync", P, "alice", &req, Some(&a)),
            "22023",
            "sync.invalid_client_id",
            "reserved",
        );
    }

    #[pg_test]
    fn operation_cap_fails_the_whole_request() {
        setup_tasks();
        let a = allowed_p1_p2();
        let epoch = acquire_epoch(P, "alice", "c1");
        Spi::run("SET LOCAL syncular.max_operations = 2").unwrap();
        let req = request(
            2,
            "c1",
            1,
            Some(&epoch),
            vec![
                commit("k1", vec![upsert(&task("t1", "p1", "a", None), None)]),
                commit(
                    "k2",
                    vec![upsert(&task("t2", "p1", "b", None), None), delete("t1")],
                ),
            ],
            None,
        );
        expect_error(
            call("sync", P, "alice", &req, Some(&a)),
            "22023",
            "sync.too_many_operations",
            "3 operations",
        );
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results"), 0);
        // Exactly at the cap is fine.
        let req = request(
            2,
            "c1",
            1,
            Some(&epoch),
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None), delete("zz")],
            )],
            None,
        );
        assert_eq!(
            push_results(&sync(P, "alice", &req, Some(&a)))[0].status,
            PushStatus::Applied
        );
    }

    #[pg_test]
    fn allowed_map_keys_must_be_declared() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let req = request(
            2,
            "c1",
            1,
            Some(&epoch),
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            None,
        );
        let bad = json!({"project_id": ["p1"], "team_id": ["x"]});
        expect_error(
            call("sync", P, "alice", &req, Some(&bad)),
            "22023",
            "sync.invalid_subscription",
            "team_id",
        );
        let malformed = json!({"project_id": "p1"});
        expect_error(call("sync", P, "alice", &req, Some(&malformed)), "22023", "syncular.invalid_argument", "project_id");
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
    }

    #[pg_test]
    fn push_and_pull_halves() {
        setup_tasks();
        let a = allowed_p1_p2();
        let epoch = acquire_epoch(P, "alice", "c1");
        let req = request(
            2,
            "c1",
            1,
            Some(&epoch),
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            Some(empty_pull()),
        );
        // pull() validates but does not apply the push.
        let resp = syncular_protocol::response::decode_response(
            &call("pull", P, "alice", &req, Some(&a)).unwrap(),
        )
        .unwrap();
        assert!(push_results(&resp).is_empty());
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
        // push() applies and answers only push results.
        let resp = syncular_protocol::response::decode_response(
            &call("push", P, "alice", &req, Some(&a)).unwrap(),
        )
        .unwrap();
        assert_eq!(resp.frames.len(), 1);
        assert!(
            matches!(&resp.frames[0], ResponseFrame::PushResult(r) if r.status == PushStatus::Applied && r.commit_seq == Some(1))
        );
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 1);
    }

    /// `bad` as a clientId and as a clientCommitId: request-level errors (`client_id_code`, then
    /// `sync.invalid_request`, both naming `fragment`), nothing applied. Then one push of three
    /// commits — `bad` as a rowId, `bad` as a scope value, and `last` — answering their results.
    fn refused_as_key_parts(bad: &str, client_id_code: &str, fragment: &str, last: PushCommit) -> Vec<PushResult> {
        let all = serde_json::json!({"project_id": ["*"]});
        let epoch = acquire_epoch(P, "alice", "c1");
        let req = request(2, bad, 1, Some(&epoch), vec![commit("k1", vec![upsert(&task("t1", "p1", "a", None), None)])], None);
        expect_error(call("sync", P, "alice", &req, Some(&all)), "22023", client_id_code, fragment);
        let req = request(2, "c1", 1, Some(&epoch), vec![commit(bad, vec![upsert(&task("t1", "p1", "a", None), None)])], None);
        expect_error(call("sync", P, "alice", &req, Some(&all)), "22023", "sync.invalid_request", fragment);
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
        let ops = |id: &str, project: &str| vec![upsert(&task(id, project, "a", None), None)];
        push(P, "alice", "c1", &epoch, vec![commit("k2", ops(bad, "p1")), commit("k3", ops("t3", bad)), last], Some(&all))
    }

    #[pg_test]
    fn nul_characters_postgres_cannot_store_are_refused_cleanly() {
        setup_tasks();
        let r = refused_as_key_parts("x\u{0}y", "sync.invalid_request", "NUL", commit("k4", vec![upsert(&task("t4", "p1", "fine", None), None)]));
        // The two commits are rejected (and their rejections persist); the third applies.
        assert_eq!(rejection(&r[0]), (0, "sync.invalid_request".into(), false));
        assert_eq!(rejection(&r[1]), (0, "sync.invalid_request".into(), false));
        assert_eq!(r[2].status, PushStatus::Applied);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results WHERE result->>'status' = 'rejected'"), 2);
    }

    /// `n` hex digits from `seed` that Postgres cannot compress (an over-long key part would
    /// otherwise reach a btree as is: `54000 index row size … exceeds maximum`).
    fn noise(seed: u64, n: usize) -> String {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ seed;
        let mut digit = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from_digit((x % 16) as u32, 16).unwrap()
        };
        (0..n).map(|_| digit()).collect()
    }

    #[pg_test]
    fn key_parts_past_the_index_limit_are_refused_cleanly() {
        setup_tasks();
        let (long, edge) = (noise(1, 4000), noise(2, crate::engine::storable::MAX_KEY_PART_BYTES));
        // A clientId: the client starts over with a fresh one (sync.invalid_client_id).
        let at_limit = commit(&edge, vec![upsert(&task(&edge, &edge, "fine", None), None)]);
        let r = refused_as_key_parts(&long, "sync.invalid_client_id", "4000 bytes long", at_limit);
        assert_eq!(rejection(&r[0]), (0, "sync.invalid_request".into(), false));
        assert_eq!(rejection(&r[1]), (0, "sync.invalid_request".into(), false));
        assert_eq!(r[2].status, PushStatus::Applied, "a commit id, row id and scope value at the limit");
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = '{edge}'")), 1);
        // The host's syncular.commit and realtime_connect answer the same codes.
        let all = json!({"project_id": ["*"]});
        let ops = r#"[{"table":"tasks","op":"upsert","row":{"id":"h1","project_id":"p1","title":"x","done":false}}]"#;
        let host = |client: &str, commit_id: &str| {
            crate::tests::support::try_run(&format!(
                "SELECT syncular.commit('{P}', 'alice', '{ops}'::jsonb, '{client}', '{commit_id}', '{all}'::jsonb)"
            ))
        };
        expect_error(host(&long, "h"), "22023", "sync.invalid_client_id", "at most 512 bytes");
        expect_error(host("c1", &long), "22023", "sync.invalid_request", "client_commit_id");
        // No client_id: the error names its default ("sql:" + actor_id), not a clientId never sent.
        let defaulted = format!("SELECT syncular.commit('{P}', '{}', '{ops}'::jsonb, allowed_scopes => '{all}'::jsonb)", "a".repeat(509));
        expect_error(crate::tests::support::try_run(&defaulted), "22023", "sync.invalid_request", "client_id defaults to \"sql:\" + actor_id, which is 513 bytes long");
        let connect = format!("SELECT syncular.realtime_connect('{P}', 'alice', '{long}', '{all}'::jsonb)");
        expect_error(crate::tests::support::try_run(&connect), "22023", "sync.invalid_client_id", "4000 bytes long");
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 1, "only the commit at the limit applied");
    }

    #[pg_test]
    fn overlong_partitions_are_an_invalid_argument() {
        setup_tasks();
        let long = "p".repeat(513);
        let req = request(2, "c1", 1, None, vec![], Some(empty_pull()));
        expect_error(call("sync", &long, "alice", &req, None), "22023", "syncular.invalid_argument", "at most 512 bytes");
        // The longest partition with the longest ids, none compressible: every key still fits.
        let max = crate::engine::storable::MAX_KEY_PART_BYTES;
        let (ok, client, row, scope) = (noise(3, 512), noise(4, max), noise(5, max), noise(6, max));
        let epoch = acquire_epoch(&ok, "alice", &client);
        let ops = vec![upsert(&task(&row, &scope, "a", None), None)];
        let r = push(&ok, "alice", &client, &epoch, vec![commit(&noise(7, max), ops)], Some(&json!({"project_id": ["*"]})));
        assert_eq!((r[0].status, r[0].commit_seq), (PushStatus::Applied, Some(1)), "a 512-byte partition still notifies");
    }
}
