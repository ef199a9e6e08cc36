//! Plan tests of the pull path's reads, in the three statistics states a
//! pull meets: log tables never analyzed (freshly written), analyzed while
//! the pulled partition did not exist yet (the statistics describe other
//! partitions), and analyzed. In each, with 20k commits/changes/rows per
//! partition and `enable_seqscan` left ON in the session, the plans the pull
//! runs ([`crate::store::spi::pinned_plan::explain`]: the kept generic plan) must
//! read
//! - `sync_partitions` (the log bounds, alone or with the request's
//!   context) through `sync_partitions_pkey`,
//! - `sync_change_scopes` through `sync_change_scopes_pkey`,
//! - `sync_commits` only through `sync_commits_pkey`,
//! - `sync_changes` through `sync_changes_pkey` or `sync_changes_by_table`,
//!
//! each with its `commit_seq` bound as an index condition (never a filter),
//! the bootstrap page's app table through its primary key, and no table
//! sequentially or through a bitmap.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::Value;

    use crate::store::pull::bootstrap_page::{explain_page_statement, PageQuery, PageStatement};
    use crate::store::pull::window::{
        explain_partition_bounds, explain_window_statement, read_partition_bounds, read_window_candidates,
        CandidateQuery, SeqRuns, WindowStatement,
    };
    use crate::store::round::context::{self, PullPart};
    use crate::tests::support::{int8, run, text};
    use crate::tests::sync_pull_support::{header, setup, sub, Client, ACCEPT_ROWS};

    const ROWS: i64 = 20_000;

    /// The statistics state a test seeds.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Stats {
        /// Rows written, no `ANALYZE`: no column statistics at all.
        NeverAnalyzed,
        /// `ANALYZE` ran before partition `p1` was written.
        AnalyzedWithoutPartition,
        /// `ANALYZE` ran after everything was written.
        Analyzed,
    }

    const LOG_TABLES: &str = "'syncular.sync_commits'::regclass, 'syncular.sync_changes'::regclass, \
                              'syncular.sync_change_scopes'::regclass, 'syncular.sync_row_scopes'::regclass, \
                              'public.tasks'::regclass";

    /// 20k commits/changes/rows of table `tasks` in partition `p`, spread
    /// over 20 workspaces (1000 each) — or all in workspace `all` for `p3`.
    fn write_partition(p: &str) {
        let ws = if p == "p3" {
            "'all'"
        } else {
            "'w' || (g % 20)"
        };
        run(&format!(
            "INSERT INTO syncular.sync_partitions(partition, max_commit_seq, horizon_seq) VALUES ('{p}', {ROWS}, 0);
             INSERT INTO syncular.sync_commits(partition, commit_seq, client_id, client_commit_id, actor_id, created_at_ms)
               SELECT '{p}', g, 'c', 'cc' || g, 'a', 1700000000000 + g FROM generate_series(1, {ROWS}) g;
             INSERT INTO syncular.sync_changes(partition, commit_seq, idx, tbl, row_id, op, row_version, scopes, payload)
               SELECT '{p}', g, 0, 'tasks', 'r' || lpad(g::text, 6, '0'), 1, 1,
                      jsonb_build_object('ws', {ws}), '\\x00'::bytea
                 FROM generate_series(1, {ROWS}) g;
             INSERT INTO syncular.sync_change_scopes(partition, tbl, var, value, commit_seq)
               SELECT '{p}', 'tasks', 'ws', {ws}, g FROM generate_series(1, {ROWS}) g;
             INSERT INTO syncular.sync_row_scopes(partition, tbl, var, value, row_id)
               SELECT '{p}', 'tasks', 'ws', {ws}, 'r' || lpad(g::text, 6, '0') FROM generate_series(1, {ROWS}) g;
             -- Raw stored state, not a client-visible write: bypass the capture triggers.
             SET LOCAL session_replication_role = replica;
             INSERT INTO public.tasks(_sync_partition, _sync_row_id, id, ws, title, _sync_version, _sync_scopes, _sync_payload)
               SELECT '{p}', 'r' || lpad(g::text, 6, '0'), 'r' || lpad(g::text, 6, '0'), {ws}, 't', 1,
                      jsonb_build_object('ws', {ws}), '\\x00'::bytea
                 FROM generate_series(1, {ROWS}) g;
             RESET session_replication_role;"
        ));
    }

    fn analyze() {
        run(
            "ANALYZE syncular.sync_commits, syncular.sync_changes, syncular.sync_change_scopes, \
             syncular.sync_row_scopes, public.tasks",
        );
    }

    /// Column statistics rows of the log tables and the app table.
    fn statistics_rows() -> i64 {
        int8(&format!(
            "SELECT count(*) FROM pg_catalog.pg_statistic WHERE starelid IN ({LOG_TABLES})"
        ))
        .unwrap()
    }

    /// Partitions `p1`, `p2`, `p3` (20k each) in the statistics state `stats`.
    /// `tasks` gets a declared index led by `_sync_partition` (as every
    /// declared index is), the kind that competes with the primary key.
    fn seed(stats: Stats) {
        setup();
        run("CREATE INDEX sync_ix_tasks_by_title ON public.tasks (_sync_partition, title)");
        match stats {
            Stats::NeverAnalyzed => {
                for p in ["p1", "p2", "p3"] {
                    write_partition(p);
                }
                assert_eq!(
                    statistics_rows(),
                    0,
                    "the tables must have no column statistics"
                );
            }
            Stats::AnalyzedWithoutPartition => {
                write_partition("p2");
                write_partition("p3");
                analyze();
                write_partition("p1");
                let p1_known = int8(
                    "SELECT count(*) FROM pg_catalog.pg_stats WHERE schemaname = 'syncular' \
                     AND tablename = 'sync_commits' AND attname = 'partition' \
                     AND most_common_vals::text LIKE '%p1%'",
                );
                assert_eq!(
                    p1_known,
                    Some(0),
                    "the statistics must not know partition p1"
                );
            }
            Stats::Analyzed => {
                for p in ["p1", "p2", "p3"] {
                    write_partition(p);
                }
                analyze();
                assert!(statistics_rows() > 0);
            }
        }
        assert_eq!(text("SHOW enable_seqscan").as_deref(), Some("on"));
    }

    /// One plan node: `(Node Type, Relation Name, Index Name, Index Cond, Filter)`.
    #[derive(Debug)]
    struct Node {
        kind: String,
        relation: String,
        index: String,
        index_cond: String,
        filter: String,
    }

    fn field(map: &serde_json::Map<String, Value>, key: &str) -> String {
        map.get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }

    fn nodes(plan: &Value, out: &mut Vec<Node>) {
        match plan {
            Value::Object(map) => {
                if map.contains_key("Node Type") {
                    out.push(Node {
                        kind: field(map, "Node Type"),
                        relation: field(map, "Relation Name"),
                        index: field(map, "Index Name"),
                        index_cond: field(map, "Index Cond"),
                        filter: field(map, "Filter"),
                    });
                }
                map.values().for_each(|v| nodes(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| nodes(v, out)),
            _ => {}
        }
    }

    /// Asserts the plan reads no relation sequentially or through a bitmap,
    /// and that every node reading `relation` is an index scan on one of
    /// `indexes` with `key` in its index condition and not in a filter
    /// (at least one such node).
    fn assert_walks(plan_json: &str, relation: &str, indexes: &[&str], key: &str, what: &str) {
        let plan: Value = serde_json::from_str(plan_json).unwrap();
        let mut all = vec![];
        nodes(&plan, &mut all);
        for n in &all {
            assert!(
                n.kind != "Seq Scan" && !n.kind.starts_with("Bitmap"),
                "{what}: no sequential or bitmap scan expected, got {n:?} in {plan_json}"
            );
        }
        let reading: Vec<_> = all.iter().filter(|n| n.relation == relation).collect();
        assert!(
            !reading.is_empty(),
            "{what}: {relation} is not read: {plan_json}"
        );
        for n in reading {
            assert!(
                n.kind.starts_with("Index") && indexes.contains(&n.index.as_str()),
                "{what}: {relation} must be read through {indexes:?}, got {n:?} in {plan_json}"
            );
            assert!(
                n.index_cond.contains(key) && !n.filter.contains(key),
                "{what}: {key} must be an index condition of {relation}, not a filter: {n:?} in {plan_json}"
            );
        }
    }

    fn candidates(values: &[String], after: i64, limit: i64) -> CandidateQuery<'_> {
        CandidateQuery {
            partition: "p1",
            table: "tasks",
            variable: "ws",
            values,
            after_seq: after,
            through_seq: ROWS,
            limit,
        }
    }

    fn window_plans_walk_the_primary_keys(stats: Stats) {
        seed(stats);
        let what = |s: &str| format!("{stats:?} {s}");
        let plan = explain_partition_bounds("p1").unwrap();
        assert_walks(
            &plan,
            "sync_partitions",
            &["sync_partitions_pkey"],
            "partition",
            &what("bounds"),
        );
        // A round that only pulls reads the bounds with its context: the same probe, the same values.
        let plan = context::explain_read("p1", "c", &[]).unwrap();
        assert_walks(&plan, "sync_partitions", &["sync_partitions_pkey"], "partition", &what("context bounds"));
        for p in ["p1", "never-seen"] {
            let context = context::read(p, Some("c"), PullPart::BoundsNow, Vec::new(), false, &[]).unwrap();
            assert_eq!(context.bounds, Some(read_partition_bounds(p).unwrap()), "{}", what(p));
        }
        let later = context::read("p1", Some("c"), PullPart::BoundsLater, Vec::new(), false, &[]).unwrap();
        assert_eq!(later.bounds, None, "after a push half the pull reads its bounds itself");
        let one = vec!["w7".to_string()];
        let many = vec!["w3".to_string(), "w7".to_string(), "w11".to_string()];
        for values in [&one, &many] {
            for after in [0, 15_000] {
                let q = candidates(values, after, 1001);
                let plan =
                    explain_window_statement(WindowStatement::Candidates(&q), false).unwrap();
                assert_walks(
                    &plan,
                    "sync_change_scopes",
                    &["sync_change_scopes_pkey"],
                    "commit_seq",
                    &what("candidates"),
                );
                // Scattered candidates (every 20th commit): one run per commit.
                let scattered = SeqRuns::of(&read_window_candidates(&q).unwrap());
                assert!(scattered.len() > 1);
                // Dense candidates (every commit of the window): one run.
                let dense = SeqRuns::of(&((after + 1)..=(after + 1000)).collect::<Vec<_>>());
                for runs in [&scattered, &dense] {
                    let plan = explain_window_statement(
                        WindowStatement::CommitMetas {
                            partition: "p1",
                            runs,
                        },
                        false,
                    )
                    .unwrap();
                    assert_walks(
                        &plan,
                        "sync_commits",
                        &["sync_commits_pkey"],
                        "commit_seq",
                        &what("commits"),
                    );
                    for row_limit in [Some(1001), None] {
                        let plan = explain_window_statement(
                            WindowStatement::Changes {
                                partition: "p1",
                                table: "tasks",
                                runs,
                                row_limit,
                            },
                            false,
                        )
                        .unwrap();
                        assert_walks(
                            &plan,
                            "sync_changes",
                            &["sync_changes_pkey", "sync_changes_by_table"],
                            "commit_seq",
                            &what("changes"),
                        );
                    }
                }
            }
        }
    }

    fn bootstrap_plans_walk_the_primary_keys(stats: Stats) {
        seed(stats);
        let one = vec!["w7".to_string()];
        let many = vec!["w3".to_string(), "w7".to_string(), "w11".to_string()];
        for values in [&one, &many] {
            for after in [None, Some("r010000")] {
                let q = PageQuery {
                    partition: "p1",
                    app_table: "\"public\".\"tasks\"",
                    table: "tasks",
                    variable: "ws",
                    values,
                    after_row_id: after,
                    candidate_limit: 1001,
                };
                let what = format!("{stats:?} bootstrap page candidates ({} values)", values.len());
                let plan = explain_page_statement(&PageStatement::Candidates(&q), false).unwrap();
                assert_walks(
                    &plan,
                    "sync_row_scopes",
                    &["sync_row_scopes_pkey", "sync_row_scopes_by_row"],
                    "partition",
                    &what,
                );
            }
        }
        let range = PageStatement::Range {
            partition: "p1",
            app_table: "\"public\".\"tasks\"",
            first: "r010000",
            last: "r012000",
            limit: 2002,
        };
        let plan = explain_page_statement(&range, false).unwrap();
        assert_walks(&plan, "tasks", &["tasks_pkey"], "_sync_row_id", &format!("{stats:?} bootstrap page range"));
        let ids: Vec<String> = (0..1001).map(|i| format!("r{:06}", 10_000 + 20 * i)).collect();
        let probe = PageStatement::Probe { partition: "p1", app_table: "\"public\".\"tasks\"", ids: &ids };
        let plan = explain_page_statement(&probe, false).unwrap();
        assert_walks(&plan, "tasks", &["tasks_pkey"], "_sync_row_id", &format!("{stats:?} bootstrap page probe"));
    }

    #[pg_test]
    fn window_plans_walk_the_primary_keys_on_never_analyzed_tables() {
        window_plans_walk_the_primary_keys(Stats::NeverAnalyzed);
    }

    #[pg_test]
    fn window_plans_walk_the_primary_keys_when_the_statistics_miss_the_partition() {
        window_plans_walk_the_primary_keys(Stats::AnalyzedWithoutPartition);
    }

    #[pg_test]
    fn window_plans_walk_the_primary_keys_on_analyzed_tables() {
        window_plans_walk_the_primary_keys(Stats::Analyzed);
    }

    #[pg_test]
    fn bootstrap_plans_walk_the_primary_keys_on_never_analyzed_tables() {
        bootstrap_plans_walk_the_primary_keys(Stats::NeverAnalyzed);
    }

    #[pg_test]
    fn bootstrap_plans_walk_the_primary_keys_when_the_statistics_miss_the_partition() {
        bootstrap_plans_walk_the_primary_keys(Stats::AnalyzedWithoutPartition);
    }

    #[pg_test]
    fn bootstrap_plans_walk_the_primary_keys_on_analyzed_tables() {
        bootstrap_plans_walk_the_primary_keys(Stats::Analyzed);
    }

    /// `Actual Rows` of every plan node reading `relation` (index scans name
    /// the relation; bitmap index scans only their `<relation>_pkey` index).
    /// Postgres 18 prints it as a fractional average (`1.00`), older majors
    /// as an integer, so it is read as a float.
    fn actual_rows(plan: &Value, relation: &str, out: &mut Vec<f64>) {
        match plan {
            Value::Object(map) => {
                let rel = map
                    .get("Relation Name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let idx = map.get("Index Name").and_then(Value::as_str).unwrap_or("");
                if rel == relation || idx.starts_with(relation) {
                    out.push(
                        map.get("Actual Rows")
                            .and_then(Value::as_f64)
                            .expect("EXPLAIN ANALYZE node without Actual Rows"),
                    );
                }
                map.values().for_each(|v| actual_rows(v, relation, out));
            }
            Value::Array(items) => items.iter().for_each(|v| actual_rows(v, relation, out)),
            _ => {}
        }
    }

    #[pg_test]
    fn pages_read_one_page_of_index_entries_not_the_whole_scope() {
        seed(Stats::NeverAnalyzed);
        let all = vec!["all".to_string()];
        for after in [0, 10_000] {
            let q = CandidateQuery {
                partition: "p3",
                ..candidates(&all, after, 101)
            };
            let plan: Value = serde_json::from_str(
                &explain_window_statement(WindowStatement::Candidates(&q), true).unwrap(),
            )
            .unwrap();
            let mut rows = vec![];
            actual_rows(&plan, "sync_change_scopes", &mut rows);
            assert!(
                !rows.is_empty() && rows.iter().all(|r| *r <= 101.0),
                "window read {rows:?} of 20000 entries: {plan}"
            );
            // The changes of 101 dense commits, cut at 11 rows.
            let runs = SeqRuns::of(&((after + 1)..=(after + 101)).collect::<Vec<_>>());
            let statement = WindowStatement::Changes {
                partition: "p3",
                table: "tasks",
                runs: &runs,
                row_limit: Some(11),
            };
            let plan: Value =
                serde_json::from_str(&explain_window_statement(statement, true).unwrap()).unwrap();
            let mut rows = vec![];
            actual_rows(&plan, "sync_changes", &mut rows);
            assert!(
                !rows.is_empty() && rows.iter().all(|r| *r <= 11.0),
                "changes read {rows:?}: {plan}"
            );
        }
        for after in [None, Some("r010000")] {
            let q = PageQuery {
                partition: "p3",
                app_table: "\"public\".\"tasks\"",
                table: "tasks",
                variable: "ws",
                values: &all,
                after_row_id: after,
                candidate_limit: 101,
            };
            let plan: Value =
                serde_json::from_str(&explain_page_statement(&PageStatement::Candidates(&q), true).unwrap()).unwrap();
            let mut rows = vec![];
            actual_rows(&plan, "sync_row_scopes", &mut rows);
            assert!(
                !rows.is_empty() && rows.iter().all(|r| *r <= 101.0),
                "page read {rows:?} of 20000 entries: {plan}"
            );
        }
        // The range read stops at its limit, whatever the range holds.
        let range = PageStatement::Range {
            partition: "p3",
            app_table: "\"public\".\"tasks\"",
            first: "r000001",
            last: "r020000",
            limit: 202,
        };
        let plan: Value = serde_json::from_str(&explain_page_statement(&range, true).unwrap()).unwrap();
        let mut rows = vec![];
        actual_rows(&plan, "tasks", &mut rows);
        assert!(!rows.is_empty() && rows.iter().all(|r| *r <= 202.0), "range read {rows:?}: {plan}");
    }

    /// The pinned planner settings apply to the pull's own statements only:
    /// the session's settings are the same after a pull.
    #[pg_test]
    fn a_pull_leaves_the_session_planner_settings_alone() {
        setup();
        run("SET enable_bitmapscan = on; SET plan_cache_mode = auto");
        let mut a = Client::new("p1", "alice", "ca");
        for i in 0..3 {
            a.push_ok(vec![crate::tests::sync_pull_support::task(
                &format!("t{i}"),
                "w1",
                "x",
            )]);
        }
        let mut b = Client::new("p1", "bob", "cb");
        let p = b.pull(
            header(0, 0, 0, ACCEPT_ROWS),
            vec![sub("s", "tasks", &[("ws", &["w1"])], 0, None)],
        );
        assert_eq!(p.one().commits.len(), 3);
        assert_eq!(text("SHOW enable_seqscan").as_deref(), Some("on"));
        assert_eq!(text("SHOW enable_bitmapscan").as_deref(), Some("on"));
        assert_eq!(text("SHOW plan_cache_mode").as_deref(), Some("auto"));
    }
}
