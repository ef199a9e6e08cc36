//! EXPLAIN tests of the push's statements: the row-scope removal (SPEC
//! §3.1, §4.7) — `DELETE … WHERE partition, tbl, row_id` runs through
//! `sync_row_scopes_by_row`, with enough rows that a sequential scan would
//! otherwise be chosen — and the stored-outcome read that comes with a
//! request's context (§6.3): primary-key probes of `sync_push_results`
//! whatever the statistics say, returning exactly the outcomes asked for.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::store::log::row_scopes;

    #[pg_test]
    fn row_scope_replace_uses_the_by_row_index() {
        // 20 000 entries over 2 partitions × 2 tables × 4 values × 1 250 rows.
        Spi::run(
            "INSERT INTO syncular.sync_row_scopes (partition, tbl, var, value, row_id) \
             SELECT 'p' || (g % 2), 't' || (g % 4 / 2), 'project_id', 'v' || (g % 8 / 4), 'r' || (g / 8) \
             FROM generate_series(0, 19999) AS g",
        )
        .unwrap();
        Spi::run("ANALYZE syncular.sync_row_scopes").unwrap();
        let plan = row_scopes::explain_delete_row_scopes("p0", "t0", "r77").unwrap();
        assert!(
            plan.contains("sync_row_scopes_by_row"),
            "plan should use sync_row_scopes_by_row: {plan}"
        );
        assert!(!plan.contains("Seq Scan"), "no sequential scan: {plan}");
        // And the statement really removes exactly that row's entries.
        let before = Spi::get_one::<i64>("SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = 'p0' AND tbl = 't0' AND row_id = 'r77'")
            .unwrap()
            .unwrap();
        assert!(before > 0);
        row_scopes::delete_row_scopes("p0", "t0", "r77").unwrap();
        let after = Spi::get_one::<i64>(
            "SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = 'r77'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(after, Spi::get_one::<i64>("SELECT count(*) FROM syncular.sync_row_scopes WHERE row_id = 'r77' AND NOT (partition = 'p0' AND tbl = 't0')").unwrap().unwrap());
    }

    /// The stored outcomes of a request's keys, read with its context: the
    /// plan probes `sync_push_results_pkey` on never-analyzed and on analyzed
    /// tables, and the read returns the outcomes of exactly those keys of
    /// that client and partition.
    #[pg_test]
    fn stored_outcomes_come_with_the_context_by_primary_key() {
        use crate::store::round::context;
        // 20 000 outcomes over 2 partitions × 2 clients × 5 000 keys.
        Spi::run(
            "INSERT INTO syncular.sync_push_results (partition, client_id, client_commit_id, result) \
             SELECT 'p' || (g % 2), 'c' || (g / 2 % 2), 'k' || (g / 4), \
                    jsonb_build_object('status', 'applied', 'n', g) \
             FROM generate_series(0, 19999) AS g",
        )
        .unwrap();
        let keys: Vec<String> = vec!["k7".into(), "k4999".into(), "k5000".into(), "missing".into()];
        for analyzed in [false, true] {
            if analyzed {
                Spi::run("ANALYZE syncular.sync_push_results").unwrap();
            }
            let plan = context::explain_read("p1", "c0", &keys).unwrap();
            assert!(plan.contains("sync_push_results_pkey"), "analyzed={analyzed}: {plan}");
            assert!(!plan.contains("Seq Scan"), "analyzed={analyzed}: no sequential scan: {plan}");
            // The key is part of the probe, never a filter over the client's outcomes.
            assert!(plan.contains("client_commit_id = u.id"), "analyzed={analyzed}: {plan}");
            let filtered = plan.lines().any(|l| l.contains("\"Filter\"") && l.contains("client_commit_id"));
            assert!(!filtered, "analyzed={analyzed}: the key must be an index condition: {plan}");
        }
        let context = context::read("p1", Some("c0"), context::PullPart::None, Vec::new(), false, &keys).unwrap();
        let mut got: Vec<(String, i64)> = context
            .stored_outcomes
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::from_str::<serde_json::Value>(v).unwrap()["n"].as_i64().unwrap()))
            .collect();
        got.sort();
        // g = 4·key + 2·client + partition: k7 → 29, k4999 → 19997; k5000 and "missing" have none.
        assert_eq!(got, vec![("k4999".to_owned(), 19997), ("k7".to_owned(), 29)]);
        let none = context::read("p1", Some("c0"), context::PullPart::None, Vec::new(), false, &[]).unwrap();
        assert!(none.stored_outcomes.is_empty());
    }
}
