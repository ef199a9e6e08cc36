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

    /// The request context read without a statement and as one statement
    /// (Citus, leases) agree field for field: no partition yet, a partition
    /// with its registry and counter, a bound client with stored outcomes, a
    /// round that only pulls (the log bounds).
    #[pg_test]
    fn the_direct_context_read_equals_the_statement_read() {
        use crate::store::round::context::{read_direct, read_statement, PullPart};
        let shown = |c: crate::store::round::context::RequestContextRow| {
            let outcomes: std::collections::BTreeMap<_, _> = c.stored_outcomes.into_iter().collect();
            format!(
                "schema_key: {:?}, registry: {:?}, client: {:?}, key: {:?}, lease: {:?}, bounds: {:?}, outcomes: {outcomes:?}",
                c.schema_key, c.registry, c.client, c.notification_key, c.lease.is_some(), c.bounds
            )
        };
        let both = |partition: &str, client: Option<&str>, pull: PullPart, ids: &[String]| {
            let direct = shown(read_direct(partition, client, pull, ids));
            let statement = shown(read_statement(partition, client, pull, false, ids).unwrap());
            assert_eq!(direct, statement, "partition {partition:?}, client {client:?}, {pull:?}");
            direct
        };
        let ids: Vec<String> = vec!["k1".into(), "k2".into(), "absent".into()];
        let empty = both("nowhere", Some("c0"), PullPart::BoundsNow, &ids);
        assert!(empty.contains("registry: None") && empty.contains("client: None"), "{empty}");
        Spi::run(
            "INSERT INTO syncular.sync_schema_versions (version, ir, app_schema, registered_at_ms) VALUES (3, '{}', 'public', 0), (5, '{}', 'public', 0); \
             INSERT INTO syncular.sync_notification_key VALUES (1, '\\x00ff'); \
             INSERT INTO syncular.sync_partition_registry VALUES ('p1', 'epoch-1', true, 42); \
             INSERT INTO syncular.sync_partitions VALUES ('p1', 17, 3); \
             INSERT INTO syncular.sync_clients (partition, client_id, actor_id, wire_version, cursor, subscriptions, updated_at_ms) \
               VALUES ('p1', 'c0', 'alice', 2, 5, '[]', 99); \
             INSERT INTO syncular.sync_push_results VALUES \
               ('p1', 'c0', 'k1', '{\"status\": \"applied\", \"commitSeq\": 7}'), \
               ('p1', 'c0', 'k2', '{\"status\": \"rejected\"}'), \
               ('p1', 'c1', 'k1', '{\"status\": \"other client\"}')",
        )
        .unwrap();
        for pull in [PullPart::None, PullPart::BoundsLater, PullPart::BoundsNow] {
            let seen = both("p1", Some("c0"), pull, &ids);
            assert!(seen.contains("epoch-1") && seen.contains("alice"), "{seen}");
        }
        let now = both("p1", Some("c0"), PullPart::BoundsNow, &ids);
        assert!(now.contains("max_commit_seq: 17, horizon_seq: 3"), "{now}");
        assert!(now.contains("schema_key: Some((5, ") && now.contains("key: Some([0, 255])"), "{now}");
        assert!(now.contains("commitSeq") && now.contains("rejected") && !now.contains("other client"), "{now}");
        both("p1", None, PullPart::None, &[]);
        both("p1", Some("c9"), PullPart::BoundsLater, &ids);
    }
}
