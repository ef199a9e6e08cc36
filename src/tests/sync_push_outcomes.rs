//! Push half: every commit-level outcome (SPEC §6.1–§6.4, §3.4, §2.2),
//! the writes of an applied commit, and the subtransaction isolation of a
//! rejected one.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::json;
    use syncular_protocol::frame_fields::Op;
    use syncular_protocol::request::Operation;
    use syncular_protocol::response::{OpResult, PushStatus};
    use syncular_protocol::row_codec::{decode_row, RowValue};

    use crate::tests::sync_support::*;

    const P: &str = "tenant-a";

    fn ready() -> String {
        setup_tasks();
        acquire_epoch(P, "alice", "c1")
    }

    #[pg_test]
    fn insert_writes_row_log_index_and_result() {
        let epoch = ready();
        let row = task("t1", "p1", "first", Some("A"));
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("k1", vec![upsert(&row, None)])],
            Some(&allowed_p1_p2()),
        );
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, PushStatus::Applied);
        assert_eq!(r[0].commit_seq, Some(1));
        assert_eq!(r[0].results, vec![OpResult::Applied { op_index: 0 }]);

        // App row: typed projection, version 1, scopes, verbatim payload.
        assert_eq!(count("SELECT count(*) FROM public.tasks WHERE _sync_partition = 'tenant-a' AND _sync_row_id = 't1' \
                          AND title = 'first' AND project_id = 'p1' AND code = 'A' AND done = false AND n IS NULL \
                          AND _sync_version = 1 AND _sync_scopes = '{\"project_id\":\"p1\"}'::jsonb"), 1);
        let stored = Spi::get_one::<Vec<u8>>(
            "SELECT _sync_payload FROM public.tasks WHERE _sync_row_id = 't1'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(stored, payload(&row));
        // Log: commit header, change, change scope, row scope, persisted result.
        assert_eq!(count("SELECT count(*) FROM syncular.sync_commits WHERE partition = 'tenant-a' AND commit_seq = 1 \
                          AND client_id = 'c1' AND client_commit_id = 'k1' AND actor_id = 'alice'"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_changes WHERE partition = 'tenant-a' AND commit_seq = 1 \
                          AND idx = 0 AND tbl = 'tasks' AND row_id = 't1' AND op = 1 AND row_version = 1 \
                          AND scopes = '{\"project_id\":\"p1\"}'::jsonb"), 1);
        let change_payload = Spi::get_one::<Vec<u8>>(
            "SELECT payload FROM syncular.sync_changes WHERE commit_seq = 1",
        )
        .unwrap()
        .unwrap();
        assert_eq!(change_payload, stored);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_change_scopes WHERE partition = 'tenant-a' \
                          AND tbl = 'tasks' AND var = 'project_id' AND value = 'p1' AND commit_seq = 1"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = 'tenant-a' \
                          AND tbl = 'tasks' AND var = 'project_id' AND value = 'p1' AND row_id = 't1'"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results WHERE partition = 'tenant-a' \
                          AND client_id = 'c1' AND client_commit_id = 'k1' AND result->>'status' = 'applied' \
                          AND (result->>'commitSeq')::int8 = 1"), 1);
        assert_eq!(
            count(
                "SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = 'tenant-a'"
            ),
            1
        );
    }

    #[pg_test]
    fn a_partition_without_its_counter_row_gets_one_and_the_push_applies() {
        let epoch = ready();
        // Only a hand-edited or partially restored database lacks it: the registry stays.
        Spi::run("DELETE FROM syncular.sync_partitions WHERE partition = 'tenant-a'").unwrap();
        let r = push(P, "alice", "c1", &epoch, vec![commit("k1", vec![upsert(&task("t1", "p1", "a", None), None)])], Some(&allowed_p1_p2()));
        assert_eq!((r[0].status, r[0].commit_seq), (PushStatus::Applied, Some(1)));
        assert_eq!(count("SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = 'tenant-a'"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_commits WHERE partition = 'tenant-a' AND commit_seq = 1"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_changes WHERE partition = 'tenant-a' AND commit_seq = 1"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results WHERE partition = 'tenant-a' \
                          AND result->>'commitSeq' = '1'"), 1);
    }

    #[pg_test]
    fn commit_seq_is_dense_and_rejections_consume_none() {
        let epoch = ready();
        let a = allowed_p1_p2();
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("k1", vec![upsert(&task("t1", "p1", "a", None), None)]),
                commit(
                    "k2",
                    vec![upsert(&task("t2", "p9", "forbidden", None), None)],
                ),
                commit("k3", vec![upsert(&task("t3", "p2", "c", None), None)]),
            ],
            Some(&a),
        );
        assert_eq!(
            r.iter().map(|x| x.status).collect::<Vec<_>>(),
            vec![
                PushStatus::Applied,
                PushStatus::Rejected,
                PushStatus::Applied
            ]
        );
        assert_eq!(
            r.iter().map(|x| x.commit_seq).collect::<Vec<_>>(),
            vec![Some(1), None, Some(2)]
        );
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("k4", vec![delete("t1")])],
            Some(&a),
        );
        assert_eq!(r[0].commit_seq, Some(3));
        let seqs = Spi::get_one::<String>(
            "SELECT string_agg(commit_seq::text, ',' ORDER BY commit_seq) FROM syncular.sync_commits WHERE partition = 'tenant-a'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(seqs, "1,2,3");
        // Another partition has its own sequence.
        let epoch_b = acquire_epoch("tenant-b", "alice", "c1");
        let r = push(
            "tenant-b",
            "alice",
            "c1",
            &epoch_b,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "b", None), None)],
            )],
            Some(&a),
        );
        assert_eq!(r[0].commit_seq, Some(1));
    }

    #[pg_test]
    fn rejected_commit_leaves_only_its_rejection() {
        let epoch = ready();
        // op 0 valid (would insert t1), op 1 names an unknown table.
        let bad = Operation {
            table: "nope".into(),
            row_id: "x".into(),
            op: Op::Delete,
            base_version: None,
            payload: None,
        };
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit(
                    "k1",
                    vec![upsert(&task("t1", "p1", "a", Some("Z")), None), bad],
                ),
                commit("k2", vec![upsert(&task("t2", "p1", "b", None), None)]),
            ],
            Some(&allowed_p1_p2()),
        );
        assert_eq!(r[0].status, PushStatus::Rejected);
        assert_eq!(r[0].commit_seq, None);
        assert_eq!(rejection(&r[0]), (1, "sync.unknown_table".into(), false));
        // The batch continues.
        assert_eq!(
            (r[1].status, r[1].commit_seq),
            (PushStatus::Applied, Some(1))
        );
        // Nothing of k1 survived: no row, no row scopes, no change, no commit.
        assert_eq!(
            count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 't1'"),
            0
        );
        assert_eq!(
            count("SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = 't1'"),
            0
        );
        assert_eq!(
            count("SELECT count(*) FROM syncular.sync_changes WHERE row_id = 't1'"),
            0
        );
        assert_eq!(
            count("SELECT count(*) FROM syncular.sync_commits WHERE client_commit_id = 'k1'"),
            0
        );
        assert_eq!(
            count(
                "SELECT count(*) FROM syncular.sync_push_results WHERE client_commit_id = 'k1' \
                          AND result->>'status' = 'rejected' AND result->'commitSeq' IS NULL \
                          AND jsonb_array_length(result->'results') = 1"
            ),
            1
        );
        assert_eq!(
            count(
                "SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = 'tenant-a'"
            ),
            1
        );
    }

    #[pg_test]
    fn unique_violation_is_constraint_violation_and_isolated() {
        let epoch = ready();
        let a = allowed_p1_p2();
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit(
                    "k1",
                    vec![upsert(&task("t1", "p1", "a", Some("SAME")), None)],
                ),
                commit(
                    "k2",
                    vec![
                        upsert(&task("t9", "p1", "x", None), None),
                        upsert(&task("t2", "p2", "b", Some("SAME")), None),
                    ],
                ),
                commit(
                    "k3",
                    vec![upsert(&task("t3", "p2", "c", Some("OTHER")), None)],
                ),
            ],
            Some(&a),
        );
        assert_eq!(r[0].status, PushStatus::Applied);
        assert_eq!(r[1].status, PushStatus::Rejected);
        assert_eq!(
            rejection(&r[1]),
            (1, "sync.constraint_violation".into(), false)
        );
        assert_eq!(
            (r[2].status, r[2].commit_seq),
            (PushStatus::Applied, Some(2))
        );
        assert_eq!(
            count("SELECT count(*) FROM public.tasks WHERE _sync_row_id IN ('t9', 't2')"),
            0
        );
        assert_eq!(
            count("SELECT count(*) FROM syncular.sync_changes WHERE row_id IN ('t9', 't2')"),
            0
        );
        // The same unique value in another partition is fine (indexes lead with the partition).
        let eb = acquire_epoch("tenant-b", "alice", "c1");
        let r = push(
            "tenant-b",
            "alice",
            "c1",
            &eb,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", Some("SAME")), None)],
            )],
            Some(&a),
        );
        assert_eq!(r[0].status, PushStatus::Applied);
    }

    #[pg_test]
    fn update_paths_versions_and_conflicts() {
        let epoch = ready();
        let a = allowed_p1_p2();
        push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "v1", None), Some(0))],
            )],
            Some(&a),
        );
        // baseVersion matches → version 2.
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k2",
                vec![upsert(&task("t1", "p1", "v2", None), Some(1))],
            )],
            Some(&a),
        );
        assert_eq!(r[0].status, PushStatus::Applied);
        // Last-write-wins (no baseVersion) → version 3.
        push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k3",
                vec![upsert(&task("t1", "p1", "v3", None), None)],
            )],
            Some(&a),
        );
        assert_eq!(
            count("SELECT _sync_version FROM public.tasks WHERE _sync_row_id = 't1'"),
            3
        );
        let stored = Spi::get_one::<Vec<u8>>(
            "SELECT _sync_payload FROM public.tasks WHERE _sync_row_id = 't1'",
        )
        .unwrap()
        .unwrap();
        // Stale baseVersion → conflict with the server row and version.
        for (id, base) in [("k4", 2), ("k5", 0)] {
            let r = push(
                P,
                "alice",
                "c1",
                &epoch,
                vec![commit(
                    id,
                    vec![upsert(&task("t1", "p1", "stale", None), Some(base))],
                )],
                Some(&a),
            );
            assert_eq!(r[0].status, PushStatus::Rejected);
            match &r[0].results[..] {
                [OpResult::Conflict {
                    op_index: 0,
                    code,
                    server_version: 3,
                    server_row,
                    ..
                }] => {
                    assert_eq!(code, "sync.version_conflict");
                    assert_eq!(server_row, &stored);
                }
                other => panic!("expected a conflict record, got {other:?}"),
            }
        }
        assert_eq!(
            count("SELECT count(*) FROM public.tasks WHERE title = 'v3' AND _sync_version = 3"),
            1
        );
        // baseVersion ≠ 0 on an absent row → sync.row_missing.
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k6",
                vec![upsert(&task("t404", "p1", "x", None), Some(7))],
            )],
            Some(&a),
        );
        assert_eq!(rejection(&r[0]), (0, "sync.row_missing".into(), false));
        // Changes carry the version after each write.
        let versions = Spi::get_one::<String>(
            "SELECT string_agg(row_version::text, ',' ORDER BY commit_seq) FROM syncular.sync_changes WHERE row_id = 't1'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(versions, "1,2,3");
    }

    #[pg_test]
    fn authorization_uses_the_stored_row_and_scope_columns_are_immutable() {
        let epoch = ready();
        push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "orig", None), None)],
            )],
            Some(&allowed_p1_p2()),
        );
        // An actor allowed only p2 cannot update the p1 row, even with a p2 payload.
        let only_p2 = json!({"project_id": ["p2"]});
        let r = push(
            P,
            "bob",
            "c2",
            &epoch,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p2", "hijack", None), None)],
            )],
            Some(&only_p2),
        );
        assert_eq!(rejection(&r[0]), (0, "sync.forbidden".into(), false));
        let r = push(
            P,
            "bob",
            "c2",
            &epoch,
            vec![commit("k2", vec![delete("t1")])],
            Some(&only_p2),
        );
        assert_eq!(rejection(&r[0]), (0, "sync.forbidden".into(), false));
        // Insert into a project the actor does not hold.
        let r = push(
            P,
            "bob",
            "c2",
            &epoch,
            vec![commit(
                "k3",
                vec![upsert(&task("t2", "p1", "x", None), None)],
            )],
            Some(&only_p2),
        );
        assert_eq!(rejection(&r[0]), (0, "sync.forbidden".into(), false));
        // '*' allows any value.
        let r = push(
            P,
            "bob",
            "c2",
            &epoch,
            vec![commit(
                "k4",
                vec![upsert(&task("t3", "p7", "x", None), None)],
            )],
            Some(&json!({"project_id": ["*"]})),
        );
        assert_eq!(r[0].status, PushStatus::Applied);
        // An authorized update that tries to move the row keeps its stored scope (re-encoded payload).
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k2",
                vec![upsert(&task("t1", "p2", "moved?", None), None)],
            )],
            Some(&allowed_p1_p2()),
        );
        assert_eq!(r[0].status, PushStatus::Applied);
        assert_eq!(count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 't1' AND project_id = 'p1' AND title = 'moved?' \
                          AND _sync_scopes = '{\"project_id\":\"p1\"}'::jsonb"), 1);
        let stored = Spi::get_one::<Vec<u8>>(
            "SELECT _sync_payload FROM public.tasks WHERE _sync_row_id = 't1'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(stored, payload(&task("t1", "p1", "moved?", None)));
        let decoded = decode_row(&tasks_layout(), &stored).unwrap();
        assert_eq!(decoded[1], Some(RowValue::String("p1".into())));
        assert_eq!(count("SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = 't1' AND value = 'p1'"), 1);
        assert_eq!(
            count("SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = 't1'"),
            1
        );
    }

    #[pg_test]
    fn no_allowed_map_forbids_every_write() {
        let epoch = ready();
        // No allowed_scopes argument and no resolver registered.
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k1",
                vec![upsert(&task("t1", "p1", "a", None), None)],
            )],
            None,
        );
        assert_eq!(rejection(&r[0]), (0, "sync.forbidden".into(), false));
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
    }

    #[pg_test]
    fn bad_payloads_are_commit_level_invalid_request() {
        let epoch = ready();
        let a = allowed_p1_p2();
        let mut garbage = upsert(&task("t1", "p1", "a", None), None);
        garbage.payload = Some(vec![0xff, 0x00, 0x01]);
        let mut wrong_pk = upsert(&task("t1", "p1", "a", None), None);
        wrong_pk.row_id = "t2".into();
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("k1", vec![garbage]), commit("k2", vec![wrong_pk])],
            Some(&a),
        );
        assert_eq!(rejection(&r[0]), (0, "sync.invalid_request".into(), false));
        assert_eq!(rejection(&r[1]), (0, "sync.invalid_request".into(), false));
        match &r[1].results[0] {
            OpResult::Error { message, .. } => {
                assert!(message.contains("primary key"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // An empty scope value on insert counts as missing: forbidden (§3.4 step 2).
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("k3", vec![upsert(&task("t3", "", "a", None), None)])],
            Some(&a),
        );
        assert_eq!(rejection(&r[0]), (0, "sync.forbidden".into(), false));
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
    }

    #[pg_test]
    fn crdt_values_that_do_not_decode_fail() {
        let epoch = ready();
        let row = with(
            task("t1", "p1", "a", None),
            "doc",
            Some(RowValue::Crdt(vec![1, 2, 3])),
        );
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("k1", vec![upsert(&row, None)])],
            Some(&allowed_p1_p2()),
        );
        assert_eq!(
            rejection(&r[0]),
            (0, "sync.crdt_merge_failed".into(), false)
        );
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
    }

    #[pg_test]
    fn deletes_existing_and_absent_rows() {
        let epoch = ready();
        let a = allowed_p1_p2();
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
        let (before, _) = crate::engine::notify::queued_in_backend();
        // Absent row: applied, consumes a seq, emits no change and no notification.
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("k2", vec![delete("ghost")])],
            Some(&a),
        );
        assert_eq!(
            (r[0].status, r[0].commit_seq),
            (PushStatus::Applied, Some(2))
        );
        assert_eq!(
            count("SELECT count(*) FROM syncular.sync_changes WHERE commit_seq = 2"),
            0
        );
        assert_eq!(crate::engine::notify::queued_in_backend().0, before);
        // Existing row: gone with its scope entries; a delete change tagged with the stored scopes; a tombstone.
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("k3", vec![delete("t1")])],
            Some(&a),
        );
        assert_eq!(
            (r[0].status, r[0].commit_seq),
            (PushStatus::Applied, Some(3))
        );
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 0);
        assert_eq!(
            count("SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = 't1'"),
            0
        );
        assert_eq!(count("SELECT count(*) FROM syncular.sync_changes WHERE commit_seq = 3 AND op = 2 AND row_id = 't1' \
                          AND payload IS NULL AND row_version IS NULL AND scopes = '{\"project_id\":\"p1\"}'::jsonb"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_change_scopes WHERE commit_seq = 3 AND value = 'p1'"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_tombstones WHERE partition = 'tenant-a' AND tbl = 'tasks' \
                          AND row_id = 't1' AND commit_seq = 3"), 1);
        assert_eq!(crate::engine::notify::queued_in_backend().0, before + 1);
        // Re-insert clears the tombstone.
        push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit(
                "k4",
                vec![upsert(&task("t1", "p1", "again", None), None)],
            )],
            Some(&a),
        );
        assert_eq!(
            count("SELECT count(*) FROM syncular.sync_tombstones WHERE row_id = 't1'"),
            0
        );
        assert_eq!(
            count("SELECT _sync_version FROM public.tasks WHERE _sync_row_id = 't1'"),
            1
        );
    }

    #[pg_test]
    fn notifications_only_for_applied_commits_with_changes() {
        let epoch = ready();
        let a = allowed_p1_p2();
        let (before, _) = crate::engine::notify::queued_in_backend();
        push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("k1", vec![upsert(&task("t1", "p1", "a", None), None)]),
                commit("k2", vec![upsert(&task("t2", "p9", "denied", None), None)]),
                commit(
                    "k3",
                    vec![
                        upsert(&task("t3", "p2", "b", None), None),
                        upsert(&task("t4", "p2", "c", None), None),
                    ],
                ),
            ],
            Some(&a),
        );
        let (after, last) = crate::engine::notify::queued_in_backend();
        assert_eq!(
            after,
            before + 2,
            "one per applied commit with changes, none for the rejection"
        );
        let key = crate::store::notifications::notification_key().unwrap();
        assert_eq!(
            last.as_deref(),
            Some(syncular_protocol::notification::commit_payload(&key, P, 2).as_str())
        );
        let last = last.unwrap();
        assert!(last.starts_with("dGVuYW50LWE:2:"), "{last}");
        assert_eq!(
            syncular_protocol::notification::parse_commit_payload(&key, &last),
            Some((P.to_owned(), 2)),
            "signed with the notification key"
        );
        // Replays notify nothing.
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
        assert_eq!(crate::engine::notify::queued_in_backend().0, after);
        // The SQL helper renders the same payload.
        let sql =
            Spi::get_one::<String>("SELECT syncular.commit_notification_payload('tenant-a', 2)")
                .unwrap()
                .unwrap();
        assert_eq!(sql, last);
    }

    #[pg_test]
    fn later_commits_and_operations_see_earlier_writes_of_the_same_request() {
        let epoch = ready();
        let a = allowed_p1_p2();
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit(
                    "k1",
                    vec![
                        upsert(&task("t1", "p1", "v1", None), Some(0)),
                        upsert(&task("t1", "p1", "v2", None), Some(1)),
                    ],
                ),
                commit("k2", vec![upsert(&task("t1", "p1", "v3", None), Some(2))]),
                commit(
                    "k3",
                    vec![delete("t1"), upsert(&task("t1", "p1", "v4", None), Some(0))],
                ),
            ],
            Some(&a),
        );
        assert_eq!(
            r.iter()
                .map(|x| (x.status, x.commit_seq))
                .collect::<Vec<_>>(),
            vec![
                (PushStatus::Applied, Some(1)),
                (PushStatus::Applied, Some(2)),
                (PushStatus::Applied, Some(3))
            ]
        );
        assert_eq!(count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 't1' AND title = 'v4' AND _sync_version = 1"), 1);
        let log = Spi::get_one::<String>(
            "SELECT string_agg(commit_seq || '/' || idx || '/' || op || '/' || coalesce(row_version::text, '-'), ',' ORDER BY commit_seq, idx) \
             FROM syncular.sync_changes WHERE row_id = 't1'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(log, "1/0/1/1,1/1/1/2,2/0/1/3,3/0/2/-,3/1/1/1");
        assert_eq!(
            count("SELECT count(*) FROM syncular.sync_tombstones WHERE row_id = 't1'"),
            0
        );
    }

    #[pg_test]
    fn projection_columns_hold_typed_values_and_null_for_unstorable_json() {
        let epoch = ready();
        let a = allowed_p1_p2();
        let good = with(
            with(
                task("t1", "p1", "a", None),
                "meta",
                Some(RowValue::Json("{\"k\": [1, 2]}".into())),
            ),
            "n",
            Some(RowValue::Integer(42)),
        );
        let nul = with(
            task("t2", "p1", "b", None),
            "meta",
            Some(RowValue::Json("{\"k\": \"\\u0000\"}".into())),
        );
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("k1", vec![upsert(&good, None), upsert(&nul, None)])],
            Some(&a),
        );
        assert_eq!(r[0].status, PushStatus::Applied);
        assert_eq!(count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 't1' AND meta = '{\"k\": [1, 2]}'::jsonb AND n = 42"), 1);
        assert_eq!(
            count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 't2' AND meta IS NULL"),
            1
        );
        let stored = Spi::get_one::<Vec<u8>>(
            "SELECT _sync_payload FROM public.tasks WHERE _sync_row_id = 't2'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            stored,
            payload(&nul),
            "the payload keeps the value verbatim"
        );
    }

    #[pg_test]
    fn server_authored_commit_uses_the_push_path() {
        let _ = ready();
        let ops = json!([
            {"table": "tasks", "op": "upsert", "row": {"id": "s1", "project_id": "p1", "title": "from sql", "done": true}},
            {"table": "tasks", "op": "upsert", "row": {"id": "s2", "project_id": "p2", "done": false}}
        ]);
        let call = |ops: &serde_json::Value, id: &str, allowed: serde_json::Value| {
            Spi::get_one_with_args::<pgrx::JsonB>(
                "SELECT syncular.commit($1, $2, $3, client_commit_id => $4, allowed_scopes => $5)",
                &[
                    P.into(),
                    "svc".into(),
                    pgrx::JsonB(ops.clone()).into(),
                    id.into(),
                    pgrx::JsonB(allowed).into(),
                ],
            )
            .unwrap()
            .unwrap()
            .0
        };
        let out = call(&ops, "op-1", allowed_p1_p2());
        assert_eq!(out["status"], "applied");
        assert_eq!(out["commitSeq"], 1);
        assert_eq!(out["clientId"], "sql:svc");
        assert_eq!(out["results"].as_array().unwrap().len(), 2);
        assert_eq!(count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 's1' AND title = 'from sql' AND done"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_commits WHERE actor_id = 'svc' AND client_id = 'sql:svc'"), 1);
        // Same ids → cached, nothing re-applied.
        let again = call(&ops, "op-1", allowed_p1_p2());
        assert_eq!(
            (again["status"].as_str(), again["commitSeq"].as_i64()),
            (Some("cached"), Some(1))
        );
        // A stale baseVersion is a conflict carrying the server row as JSON.
        let stale = json!([{"table": "tasks", "op": "upsert", "baseVersion": 9,
                            "row": {"id": "s1", "project_id": "p1", "title": "x", "done": false}}]);
        let out = call(&stale, "op-2", allowed_p1_p2());
        assert_eq!(out["status"], "rejected");
        assert_eq!(out["results"][0]["status"], "conflict");
        assert_eq!(out["results"][0]["serverVersion"], 1);
        assert_eq!(out["results"][0]["serverRow"]["title"], "from sql");
        // Authorization applies.
        let out = call(
            &json!([{"table": "tasks", "op": "delete", "rowId": "s1"}]),
            "op-3",
            json!({"project_id": ["p2"]}),
        );
        assert_eq!(
            (out["status"].as_str(), out["results"][0]["code"].as_str()),
            (Some("rejected"), Some("sync.forbidden"))
        );
        // Malformed operations fail the call.
        let bad = crate::store::spi::subtransaction::run(|| {
            call(
                &json!([{"table": "tasks", "op": "upsert", "row": {"nope": 1}}]),
                "op-4",
                allowed_p1_p2(),
            )
        });
        assert!(bad
            .unwrap_err()
            .message
            .starts_with("sync.invalid_request: "));
    }

    #[pg_test]
    fn kept_plans_serve_nulls_and_values_of_every_projection_type() {
        let epoch = ready();
        let a = allowed_p1_p2();
        // First NULLs everywhere (plans are prepared with typed NULLs), then values.
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
        let full = [
            ("n", RowValue::Integer(-7)),
            ("f", RowValue::Float(2.5)),
            ("meta", RowValue::Json("[true]".into())),
            ("bin", RowValue::Bytes(vec![0, 1, 2])),
            ("secret", RowValue::Bytes(vec![9])),
            ("code", RowValue::String("C".into())),
        ]
        .into_iter()
        .fold(task("t2", "p1", "b", None), |row, (name, v)| {
            with(row, name, Some(v))
        });
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("k2", vec![upsert(&full, None)])],
            Some(&a),
        );
        assert_eq!(r[0].status, PushStatus::Applied);
        assert_eq!(count("SELECT count(*) FROM public.tasks WHERE _sync_row_id = 't2' AND n = -7 AND f = 2.5 \
                          AND meta = '[true]'::jsonb AND bin = '\\x000102'::bytea AND secret = '\\x09'::bytea AND code = 'C'"), 1);
        // The hot statements (context read, app-row read and write, log statement) are kept
        // plans, and another push of the same shape prepares none.
        let kept = crate::store::spi::plan_cache::kept_plans();
        assert!(kept >= 4, "hot statements are kept plans ({kept})");
        let third = with(task("t3", "p2", "c", None), "n", Some(RowValue::Integer(3)));
        let r = push(P, "alice", "c1", &epoch, vec![commit("k3", vec![upsert(&third, None)])], Some(&a));
        assert_eq!(r[0].status, PushStatus::Applied);
        assert_eq!(crate::store::spi::plan_cache::kept_plans(), kept, "no new plan for a push of the same shape");
    }
}
