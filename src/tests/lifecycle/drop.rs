//! `syncular.drop_partition_batch`: every row of one partition, in every
//! app table and every `sync_*` table, in bounded batches, without
//! capturing the app-table deletes; nothing of another partition changes;
//! afterwards the partition is brand new to a client.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::store::lifecycle::drop::SYNC_TABLES;
    use crate::tests::lifecycle::support::*;
    use crate::tests::support::{int8, run, text};
    use crate::tests::sync_pull_support::*;

    const A: &str = "drop-a";
    const B: &str = "drop-b";
    const APP_TABLES: [&str; 2] = ["public.tasks", "public.notes"];

    fn fill(p: &str) {
        set_now(T0);
        let mut c = Client::new(p, "alice", &format!("{p}-c"));
        c.push_ok(vec![task("t1", "w1", "one"), note("n1", "w1", "p1", "body")]);
        c.push_ok(vec![delete("tasks", "t1")]);
        c.pull(header(100, 1000, 10, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        insert_commits(p, "sql", "w2", 30, T0);
        delete_commits(p, "sql", 3, T0);
        run(&format!(
            "INSERT INTO syncular.sync_reactions (partition, idempotency_key, type, version, payload, \
               source_client_id, source_client_commit_id, source_commit_seq, created_at_ms, available_at_ms, \
               status, attempts, max_attempts) \
             VALUES ('{p}', 'k', 'mail', 1, '{{}}', 'c', 'k', 1, 0, 0, 'pending', 0, 3)"
        ));
        run(&format!("INSERT INTO syncular.sync_blob_refs VALUES ('{p}', 'notes', 'n1', 'sha256:00')"));
        run(&format!("INSERT INTO syncular.sync_round_failures VALUES ('{p}', '{p}-c', 'transport.failed', 1, 0)"));
        run(&format!(
            "INSERT INTO syncular.sync_auth_leases VALUES ('{p}', '{p}-c', 'lease-1', 'alice', '{{}}', 0, 1, NULL, '\\x00')"
        ));
        run(&format!("INSERT INTO syncular.sync_blob_grants VALUES ('{p}', 'sha256:01', 1, 0, 1, 0, 0, 'up/x')"));
        run(&format!("INSERT INTO syncular.sync_segments VALUES ('{p}', 'sha256:00', 1, 1, 1, 0)"));
        run(&format!("INSERT INTO syncular.sync_segment_chunks VALUES ('{p}', 'sha256:00', 0, '\\x00')"));
        run(&format!(
            "INSERT INTO syncular.sync_segment_publications VALUES ('{p}', 'e', 'tasks', 1, 1, 'd', 1, true, '', 100, \
               'sha256:00', NULL, 1, 0, 1)"
        ));
        crate::tests::capture::support::put_abc(p);
    }

    /// Every row of `p` in every table, as text, hashed per table.
    fn fingerprint(p: &str) -> Vec<(String, i64, Option<String>)> {
        let mut out = Vec::new();
        for t in SYNC_TABLES {
            let q = format!("SELECT count(*), md5(string_agg(x::text, '|' ORDER BY x::text)) FROM syncular.{t} x WHERE partition = '{p}'");
            let (n, h) = Spi::get_two::<i64, String>(&q).unwrap();
            out.push((t.to_owned(), n.unwrap(), h));
        }
        for t in APP_TABLES {
            let q = format!("SELECT count(*), md5(string_agg(x::text, '|' ORDER BY x::text)) FROM {t} x WHERE _sync_partition = '{p}'");
            let (n, h) = Spi::get_two::<i64, String>(&q).unwrap();
            out.push((t.to_owned(), n.unwrap(), h));
        }
        out
    }

    /// One `drop_partition_batch` call: (rows_deleted, done).
    fn batch(p: &str, max_rows: i32) -> (i64, bool) {
        let q = format!("SELECT rows_deleted, done FROM syncular.drop_partition_batch('{p}', {max_rows})");
        let (n, done) = Spi::get_two::<i64, bool>(&q).unwrap();
        (n.unwrap(), done.unwrap())
    }

    fn registry_rows(p: &str) -> i64 {
        int8(&format!("SELECT count(*) FROM syncular.sync_partition_registry WHERE partition = '{p}'")).unwrap()
    }

    #[pg_test]
    fn dropping_a_partition_removes_all_of_it_and_nothing_else() {
        setup();
        fill(A);
        fill(B);
        let before_b = fingerprint(B);
        let before_a = fingerprint(A);
        for (t, n, _) in &before_a {
            assert!(*n > 0, "the fixture writes rows of {A} in {t}");
        }
        let total: i64 = before_a.iter().map(|(_, n, _)| n).sum();
        let old_epoch = text(&format!("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = '{A}'"));

        let mut calls = 0;
        let mut deleted = 0;
        loop {
            let registry_before = registry_rows(A);
            let (n, done) = batch(A, 7);
            assert!(n <= 7, "a batch deletes at most max_rows rows");
            calls += 1;
            deleted += n;
            assert_eq!(done, registry_before == 1 && registry_rows(A) == 0, "done is the batch that removed the registry row");
            if done {
                break;
            }
            assert!(calls < 1000, "the drop ends");
        }
        assert_eq!(deleted, total, "every row counted once");
        assert_eq!(batch(A, 7), (0, true), "a gone partition: nothing deleted, done");
        // Every batch but the last deletes exactly max_rows (with max_rows under the 64-chunk
        // cap), and the last one at least the registry row.
        assert_eq!(calls, (total + 6) / 7, "bounded batches: {calls} calls for {total} rows");
        for (t, n, _) in fingerprint(A) {
            assert_eq!(n, 0, "{t} still holds rows of {A}");
        }
        assert_eq!(fingerprint(B), before_b, "{B} is unchanged");

        // The partition is new again: a fresh epoch, an empty bootstrap.
        let mut c = Client::new(A, "alice", "later");
        let boot = c.pull(header(100, 1000, 10, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1", "w2"])], -1, None)]);
        assert!(boot.one().segment_rows().is_empty());
        assert_eq!(boot.one().end.next_cursor, 0);
        let new_epoch = text(&format!("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = '{A}'"));
        assert_ne!(new_epoch, old_epoch);
    }
}
