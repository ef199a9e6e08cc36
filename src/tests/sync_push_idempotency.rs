//! Push idempotency (SPEC §2.3, §6.3): replays are byte-equivalent
//! (`applied` → `cached` with the original `commitSeq`, `rejected` stays
//! `rejected`), a repeated `clientCommitId` inside one request is processed
//! once, and an unreadable record answers `sync.idempotency_cache_miss`
//! without being persisted or re-applied.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use syncular_protocol::response::{PushResult, PushStatus};

    use crate::tests::sync_support::*;

    const P: &str = "tenant-a";

    /// Equal except for the status byte (`applied` vs `cached`).
    fn same_but_status(a: &PushResult, b: &PushResult) {
        assert_eq!(a.client_commit_id, b.client_commit_id);
        assert_eq!(a.commit_seq, b.commit_seq);
        assert_eq!(a.results, b.results);
    }

    #[pg_test]
    fn replays_are_byte_equivalent() {
        setup_tasks();
        let a = allowed_p1_p2();
        let epoch = acquire_epoch(P, "alice", "c1");
        let commits = || {
            vec![
                commit(
                    "k1",
                    vec![
                        upsert(&task("t1", "p1", "a", None), None),
                        upsert(&task("t2", "p1", "b", None), None),
                    ],
                ),
                commit("k2", vec![upsert(&task("t3", "p9", "denied", None), None)]),
                commit(
                    "k3",
                    vec![upsert(&task("t1", "p1", "stale", None), Some(5))],
                ),
            ]
        };
        let first = sync(
            P,
            "alice",
            &request(2, "c1", 1, Some(&epoch), commits(), None),
            Some(&a),
        );
        let again = sync(
            P,
            "alice",
            &request(2, "c1", 1, Some(&epoch), commits(), Some(empty_pull())),
            Some(&a),
        );
        let (f, g) = (push_results(&first), push_results(&again));
        assert_eq!(
            f.iter().map(|r| r.status).collect::<Vec<_>>(),
            vec![
                PushStatus::Applied,
                PushStatus::Rejected,
                PushStatus::Rejected
            ]
        );
        assert_eq!(
            g.iter().map(|r| r.status).collect::<Vec<_>>(),
            vec![
                PushStatus::Cached,
                PushStatus::Rejected,
                PushStatus::Rejected
            ]
        );
        for (x, y) in f.iter().zip(&g) {
            same_but_status(x, y);
        }
        assert_eq!(g[0].commit_seq, Some(1));
        // Rejections replay identically, including the conflict's server row bytes.
        assert_eq!(f[1], g[1]);
        assert_eq!(f[2], g[2]);
        // Nothing was applied twice.
        assert_eq!(count("SELECT count(*) FROM syncular.sync_commits"), 1);
        assert_eq!(
            count("SELECT _sync_version FROM public.tasks WHERE _sync_row_id = 't1'"),
            1
        );
        // Even with different allowed scopes (authorization is not re-run on replay).
        let none = sync(
            P,
            "alice",
            &request(2, "c1", 1, Some(&epoch), commits(), None),
            None,
        );
        assert_eq!(push_results(&none)[0].status, PushStatus::Cached);
    }

    #[pg_test]
    fn repeated_id_inside_one_request_is_processed_once() {
        setup_tasks();
        let a = allowed_p1_p2();
        let epoch = acquire_epoch(P, "alice", "c1");
        let r = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("k1", vec![upsert(&task("t1", "p1", "first", None), None)]),
                commit("k1", vec![upsert(&task("t1", "p1", "second", None), None)]),
                commit(
                    "bad",
                    vec![delete("x"), upsert(&task("t2", "p9", "denied", None), None)],
                ),
                commit("bad", vec![delete("x")]),
            ],
            Some(&a),
        );
        assert_eq!(
            r.iter().map(|x| x.status).collect::<Vec<_>>(),
            vec![
                PushStatus::Applied,
                PushStatus::Cached,
                PushStatus::Rejected,
                PushStatus::Rejected
            ]
        );
        same_but_status(&r[0], &r[1]);
        assert_eq!(r[2], r[3]);
        assert_eq!(rejection(&r[3]), (1, "sync.forbidden".into(), false));
        assert_eq!(
            count("SELECT count(*) FROM public.tasks WHERE title = 'first' AND _sync_version = 1"),
            1
        );
        assert_eq!(count("SELECT count(*) FROM syncular.sync_commits"), 1);
    }

    #[pg_test]
    fn idempotency_key_is_per_client() {
        setup_tasks();
        let a = allowed_p1_p2();
        let epoch = acquire_epoch(P, "alice", "c1");
        let r1 = push(
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
        let r2 = push(
            P,
            "alice",
            "c2",
            &epoch,
            vec![commit(
                "k1",
                vec![upsert(&task("t2", "p1", "b", None), None)],
            )],
            Some(&a),
        );
        assert_eq!(
            (r1[0].status, r1[0].commit_seq),
            (PushStatus::Applied, Some(1))
        );
        assert_eq!(
            (r2[0].status, r2[0].commit_seq),
            (PushStatus::Applied, Some(2))
        );
    }

    #[pg_test]
    fn unreadable_record_is_a_cache_miss_never_reapplied() {
        setup_tasks();
        let a = allowed_p1_p2();
        let epoch = acquire_epoch(P, "alice", "c1");
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
        Spi::run("UPDATE syncular.sync_push_results SET result = '{\"garbage\": true}' WHERE client_commit_id = 'k1'").unwrap();
        let r = push(
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
        assert_eq!(r[0].status, PushStatus::Rejected);
        assert_eq!(r[0].commit_seq, None);
        assert_eq!(
            rejection(&r[0]),
            (0, "sync.idempotency_cache_miss".into(), true)
        );
        // Not persisted (the record is untouched) and not re-applied.
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results WHERE result = '{\"garbage\": true}'::jsonb"), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_commits"), 1);
    }
}
