//! Plan tests: with 20k rows per index (`enable_seqscan` left ON, so the
//! assertion means something), the incremental window reads
//! `sync_change_scopes` and the bootstrap page reads `sync_row_scopes` by an
//! index range scan, and no sync_* table or app table is read sequentially.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::Value;

    use crate::store::bootstrap_page::{explain_bootstrap_page, PageQuery};
    use crate::store::pull_window::{explain_window_page, WindowPageQuery};
    use crate::tests::support::{run, text};
    use crate::tests::sync_pull_support::setup;

    const ROWS: i64 = 20_000;

    /// 20k commits/changes/rows in partition `p1`, table `tasks`, spread over
    /// 20 workspaces (1000 each), the same volume in partition `p2`, and in
    /// `p3` 20k rows all in workspace `all`.
    fn seed() {
        setup();
        for (p, ws) in [("p1", "'w' || (g % 20)"), ("p2", "'w' || (g % 20)"), ("p3", "'all'")] {
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
        run("ANALYZE syncular.sync_commits, syncular.sync_changes, syncular.sync_change_scopes, \
             syncular.sync_row_scopes, public.tasks");
        assert_eq!(text("SHOW enable_seqscan").as_deref(), Some("on"));
    }

    /// Every `(Node Type, Relation Name, Index Name)` of a JSON plan.
    fn nodes(plan: &Value, out: &mut Vec<(String, String, String)>) {
        match plan {
            Value::Object(map) => {
                if let Some(Value::String(node)) = map.get("Node Type") {
                    let rel = map.get("Relation Name").and_then(Value::as_str).unwrap_or("").to_string();
                    let idx = map.get("Index Name").and_then(Value::as_str).unwrap_or("").to_string();
                    out.push((node.clone(), rel, idx));
                }
                map.values().for_each(|v| nodes(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| nodes(v, out)),
            _ => {}
        }
    }

    fn assert_indexed(plan_json: &str, driving_table: &str) {
        let plan: Value = serde_json::from_str(plan_json).unwrap();
        let mut all = vec![];
        nodes(&plan, &mut all);
        let seq: Vec<_> = all.iter().filter(|(n, _, _)| n == "Seq Scan").collect();
        assert!(seq.is_empty(), "no sequential scan expected, plan: {plan_json}");
        // Index Scan / Index Only Scan name the relation; a Bitmap Index
        // Scan names only the index (`<table>_pkey`).
        assert!(
            all.iter().any(|(n, rel, idx)| n.contains("Index")
                && (rel == driving_table || idx.starts_with(driving_table))),
            "an index scan on {driving_table} expected, plan: {plan_json}"
        );
    }

    #[pg_test]
    fn incremental_window_is_an_index_range_scan() {
        seed();
        let one = vec!["w7".to_string()];
        let many = vec!["w3".to_string(), "w7".to_string(), "w11".to_string()];
        for values in [&one, &many] {
            for after in [0, 15_000] {
                let plan = explain_window_page(&WindowPageQuery {
                    partition: "p1",
                    table: "tasks",
                    variable: "ws",
                    values,
                    after_seq: after,
                    through_seq: ROWS,
                    candidate_limit: 257,
                }, false)
                .unwrap();
                assert_indexed(&plan, "sync_change_scopes");
            }
        }
    }

    #[pg_test]
    fn bootstrap_page_is_an_index_range_scan() {
        seed();
        let one = vec!["w7".to_string()];
        let many = vec!["w3".to_string(), "w7".to_string(), "w11".to_string()];
        for values in [&one, &many] {
            for after in [None, Some("r010000")] {
                let plan = explain_bootstrap_page(&PageQuery {
                    partition: "p1",
                    app_table: "\"public\".\"tasks\"",
                    table: "tasks",
                    variable: "ws",
                    values,
                    after_row_id: after,
                    candidate_limit: 1001,
                }, false)
                .unwrap();
                assert_indexed(&plan, "sync_row_scopes");
            }
        }
    }

    /// `Actual Rows` of every plan node reading `relation` (index scans name
    /// the relation; bitmap index scans only their `<relation>_pkey` index).
    /// Postgres 18 prints it as a fractional average (`1.00`), older majors
    /// as an integer, so it is read as a float.
    fn actual_rows(plan: &Value, relation: &str, out: &mut Vec<f64>) {
        match plan {
            Value::Object(map) => {
                let rel = map.get("Relation Name").and_then(Value::as_str).unwrap_or("");
                let idx = map.get("Index Name").and_then(Value::as_str).unwrap_or("");
                if rel == relation || idx.starts_with(relation) {
                    out.push(map.get("Actual Rows").and_then(Value::as_f64).expect("EXPLAIN ANALYZE node without Actual Rows"));
                }
                map.values().for_each(|v| actual_rows(v, relation, out));
            }
            Value::Array(items) => items.iter().for_each(|v| actual_rows(v, relation, out)),
            _ => {}
        }
    }

    #[pg_test]
    fn pages_read_one_page_of_index_entries_not_the_whole_scope() {
        seed();
        let all = vec!["all".to_string()];
        for after in [0, 10_000] {
            let q = WindowPageQuery {
                partition: "p3",
                table: "tasks",
                variable: "ws",
                values: &all,
                after_seq: after,
                through_seq: ROWS,
                candidate_limit: 101,
            };
            let plan: Value = serde_json::from_str(&explain_window_page(&q, true).unwrap()).unwrap();
            let mut rows = vec![];
            actual_rows(&plan, "sync_change_scopes", &mut rows);
            assert!(!rows.is_empty() && rows.iter().all(|r| *r <= 101.0), "window read {rows:?} of 20000 entries: {plan}");
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
            let plan: Value = serde_json::from_str(&explain_bootstrap_page(&q, true).unwrap()).unwrap();
            let mut rows = vec![];
            actual_rows(&plan, "sync_row_scopes", &mut rows);
            assert!(!rows.is_empty() && rows.iter().all(|r| *r <= 101.0), "page read {rows:?} of 20000 entries: {plan}");
        }
    }
}
