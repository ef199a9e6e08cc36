//! `syncular.router_statements`: the same requests pushed into two
//! partitions, one with the one-statement log write and one with the
//! single-shard statements, leave identical log rows (headers, changes,
//! change scopes, tombstones, outcomes, row scopes).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::tests::support::*;
    use crate::tests::sync_support::*;

    /// Every log row of `partition`, as text, without the partition and the
    /// wall-clock and random parts (which differ between two runs).
    fn log_of(partition: &str) -> String {
        let q = |sql: &str| text(&sql.replace("$P", &format!("'{partition}'"))).unwrap_or_default();
        [
            q("SELECT string_agg(commit_seq || ':' || client_id || ':' || client_commit_id || ':' || actor_id, ',' ORDER BY commit_seq) FROM syncular.sync_commits WHERE partition = $P"),
            q("SELECT string_agg(commit_seq || ':' || idx || ':' || tbl || ':' || row_id || ':' || op || ':' || coalesce(row_version::text, '-') || ':' || scopes::text || ':' || coalesce(md5(payload), '-'), ',' ORDER BY commit_seq, idx) FROM syncular.sync_changes WHERE partition = $P"),
            q("SELECT string_agg(tbl || ':' || var || ':' || value || ':' || commit_seq, ',' ORDER BY commit_seq, tbl, var, value) FROM syncular.sync_change_scopes WHERE partition = $P"),
            q("SELECT string_agg(tbl || ':' || row_id || ':' || commit_seq, ',' ORDER BY tbl, row_id) FROM syncular.sync_tombstones WHERE partition = $P"),
            q("SELECT string_agg(client_commit_id || ':' || (result - 'recordedAtMs')::text, ',' ORDER BY client_commit_id) FROM syncular.sync_push_results WHERE partition = $P"),
            q("SELECT string_agg(tbl || ':' || var || ':' || value || ':' || row_id, ',' ORDER BY tbl, var, value, row_id) FROM syncular.sync_row_scopes WHERE partition = $P"),
            q("SELECT max_commit_seq::text FROM syncular.sync_partitions WHERE partition = $P"),
        ]
        .join("\n")
    }

    /// Inserts, updates, deletes, a delete and re-insert, a rejection, a
    /// replay and a multi-commit request, in `partition`.
    fn scenario(partition: &str) {
        let epoch = acquire_epoch(partition, "alice", "c1");
        let allowed = allowed_p1_p2();
        let a = task("a", "p1", "A", Some("ca"));
        let b = task("b", "p2", "B", None);
        let results = push(partition, "alice", "c1", &epoch, vec![commit("k1", vec![upsert(&a, None), upsert(&b, None)])], Some(&allowed));
        assert_eq!(results.len(), 1);
        let two = vec![
            commit("k2", vec![upsert(&task("a", "p1", "A2", Some("ca")), Some(1))]),
            commit("k3", vec![delete("b")]),
            commit("k4", vec![upsert(&task("x", "p9", "forbidden scope", None), None)]),
            commit("k5", vec![upsert(&task("c", "p1", "C", None), None), delete("c")]),
        ];
        let results = push(partition, "alice", "c1", &epoch, two, Some(&allowed));
        assert_eq!(results.len(), 4);
        let back = vec![commit("k6", vec![upsert(&task("b", "p2", "B again", None), None)]), commit("k2", vec![upsert(&task("a", "p1", "A2", Some("ca")), Some(1))])];
        let results = push(partition, "alice", "c1", &epoch, back, Some(&allowed));
        assert_eq!(results.len(), 2);
    }

    #[pg_test]
    fn the_router_log_write_leaves_the_same_rows_as_the_one_statement_write() {
        setup_tasks();
        scenario("one-statement");
        run("SET syncular.router_statements = on");
        scenario("router");
        run("RESET syncular.router_statements");
        let (plain, router) = (log_of("one-statement"), log_of("router"));
        assert_eq!(plain, router);
        // Not vacuous: the scenario wrote a tombstone, a rejection and 5 commits.
        assert!(plain.lines().nth(3).is_some_and(|l| l.starts_with("tasks:c:") && !l.contains("tasks:b:")), "{plain}");
        assert!(plain.lines().nth(4).is_some_and(|l| l.contains("k4:") && l.contains("k6:")), "{plain}");
        assert_eq!(plain.lines().last(), Some("5"), "{plain}");
    }

    #[pg_test]
    fn a_router_request_of_more_rows_than_one_chunk_writes_them_all() {
        setup_tasks();
        run("SET syncular.router_statements = on");
        let epoch = acquire_epoch("big", "alice", "c1");
        let ops: Vec<_> = (0..300).map(|i| upsert(&task(&format!("r{i}"), "p1", "t", None), None)).collect();
        let results = push("big", "alice", "c1", &epoch, vec![commit("k1", ops)], Some(&allowed_p1_p2()));
        assert_eq!(results.len(), 1);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_changes WHERE partition = 'big'"), 300);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = 'big'"), 300);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_change_scopes WHERE partition = 'big'"), 1);
    }

    #[pg_test]
    fn distribute_without_citus_is_refused_with_its_code() {
        let result = try_run("SELECT * FROM syncular.distribute()");
        expect_error(result, "55000", "syncular.citus_missing", "CREATE EXTENSION citus");
        let nothing = text("SELECT count(*)::text FROM pg_catalog.pg_db_role_setting WHERE array_to_string(setconfig, ',') LIKE '%router_statements%'");
        assert_eq!(nothing.as_deref(), Some("0"));
    }
}
