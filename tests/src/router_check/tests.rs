//! Known-bad and known-good statements with the exact violation kinds.

use super::report::{catalog_use, is_entry_call, skip_reason, HARNESS_TAG};
use super::ViolationKind::{self, *};
use super::{check, Layout};

fn layout() -> Layout {
    Layout::new(vec![("public".to_owned(), "tasks".to_owned())])
}

fn kinds(sql: &str) -> Vec<ViolationKind> {
    let a = check(sql, &layout());
    let mut k = a.kinds();
    k.sort();
    k
}

fn assert_ok(sql: &str) {
    let a = check(sql, &layout());
    assert!(a.violations.is_empty(), "expected router-shaped: {sql}\n{:#?}", a.violations);
}

// --- known bad -------------------------------------------------------------------------------

#[test]
fn insert_select_from_unnest_is_rule_2() {
    assert_eq!(
        kinds(
            "INSERT INTO syncular.sync_changes (partition, commit_seq, tbl, row_id, op) \
             SELECT $1, $2, t.tbl, t.row_id, t.op FROM unnest($3::text[], $4::text[], $5::text[]) AS t(tbl, row_id, op)"
        ),
        vec![InsertSelect]
    );
}

#[test]
fn insert_select_without_from_is_rule_2() {
    assert_eq!(kinds("INSERT INTO syncular.sync_commits (partition, commit_seq) SELECT $1, $2"), vec![InsertSelect]);
}

#[test]
fn insert_select_also_reports_its_unpinned_source() {
    assert_eq!(
        kinds("INSERT INTO syncular.sync_tombstones (partition, tbl) SELECT partition, tbl FROM syncular.sync_changes WHERE commit_seq = $1"),
        vec![UnpinnedReference, InsertSelect]
    );
}

#[test]
fn select_without_the_partition_predicate_is_unpinned() {
    assert_eq!(kinds("SELECT commit_seq, actor_id FROM syncular.sync_commits WHERE commit_seq > $1 ORDER BY commit_seq"), vec![UnpinnedReference]);
}

#[test]
fn join_of_two_sync_tables_with_only_one_pinned_is_unpinned() {
    let a = check(
        "SELECT ch.row_id FROM syncular.sync_commits c \
           JOIN syncular.sync_changes ch ON ch.commit_seq = c.commit_seq \
          WHERE c.partition = $1 AND c.commit_seq > $2",
        &layout(),
    );
    assert_eq!(a.kinds(), vec![UnpinnedReference]);
    assert!(a.violations[0].detail.contains("sync_changes AS ch"), "{:?}", a.violations);
}

#[test]
fn insert_cte_is_rule_3() {
    assert_eq!(
        kinds(
            "WITH ins AS (INSERT INTO syncular.sync_commits (partition, commit_seq) VALUES ($1, $2) RETURNING commit_seq) \
             SELECT commit_seq FROM ins"
        ),
        vec![InsertCte]
    );
}

#[test]
fn or_any_and_in_do_not_pin() {
    assert_eq!(kinds("SELECT 1 FROM syncular.sync_commits WHERE partition = $1 OR partition = $2"), vec![UnpinnedReference]);
    assert_eq!(kinds("SELECT 1 FROM syncular.sync_commits WHERE partition = ANY($1::text[])"), vec![UnpinnedReference]);
    assert_eq!(kinds("DELETE FROM syncular.sync_commits WHERE partition IN ($1, $2)"), vec![UnpinnedReference]);
}

#[test]
fn a_function_call_is_not_a_pinned_value() {
    assert_eq!(kinds("UPDATE public.tasks SET title = $1 WHERE _sync_partition = current_setting('syncular.partition')"), vec![UnpinnedReference]);
    assert_eq!(
        kinds("INSERT INTO syncular.sync_commits (partition, commit_seq) VALUES (current_setting('syncular.partition'), $1)"),
        vec![InsertPartitionValue]
    );
}

#[test]
fn insert_values_rows_must_share_one_partition_value() {
    assert_eq!(kinds("INSERT INTO syncular.sync_changes (partition, commit_seq) VALUES ($1, 1), ($2, 2)"), vec![InsertPartitionValue]);
    assert_eq!(kinds("INSERT INTO syncular.sync_changes (commit_seq, tbl) VALUES ($1, $2)"), vec![InsertPartitionValue]);
    assert_eq!(kinds("INSERT INTO syncular.sync_changes VALUES ($1, $2)"), vec![InsertPartitionValue]);
}

#[test]
fn unpinned_subqueries_are_found_everywhere() {
    // EXISTS not correlated on the partition
    assert_eq!(
        kinds("SELECT 1 FROM syncular.sync_changes c WHERE c.partition = $1 AND EXISTS (SELECT 1 FROM syncular.sync_change_scopes s WHERE s.commit_seq = c.commit_seq)"),
        vec![UnpinnedReference]
    );
    // scalar subquery in the target list
    assert_eq!(kinds("SELECT (SELECT max(commit_seq) FROM syncular.sync_commits) AS m"), vec![UnpinnedReference]);
    // LATERAL not joined on the partition
    assert_eq!(
        kinds("SELECT x.n FROM syncular.sync_commits c, LATERAL (SELECT count(*) AS n FROM syncular.sync_changes ch WHERE ch.commit_seq = c.commit_seq) x WHERE c.partition = $1"),
        vec![UnpinnedReference]
    );
    // a CTE, and a DELETE … USING joined on something else
    assert_eq!(kinds("WITH w AS (SELECT commit_seq FROM syncular.sync_commits) SELECT * FROM w"), vec![UnpinnedReference]);
    assert_eq!(
        kinds("DELETE FROM syncular.sync_changes ch USING syncular.sync_commits c WHERE ch.partition = $1 AND ch.commit_seq = c.commit_seq"),
        vec![UnpinnedReference]
    );
}

#[test]
fn app_tables_are_distributed_on_sync_partition() {
    assert_eq!(kinds("SELECT id FROM public.tasks WHERE id = $1"), vec![UnpinnedReference]);
    assert_eq!(kinds("SELECT id FROM tasks t WHERE t.partition = $1"), vec![UnpinnedReference]);
    assert_ok("SELECT id FROM public.tasks t WHERE t._sync_partition = $1 AND t.id = ANY($2)");
}

#[test]
fn unknown_sync_tables_utility_statements_and_parse_errors_are_reported() {
    assert_eq!(kinds("SELECT 1 FROM syncular.sync_new_thing WHERE partition = $1"), vec![UnknownTable]);
    assert_eq!(kinds("LOCK TABLE syncular.sync_commits IN EXCLUSIVE MODE"), vec![Unsupported]);
    assert_eq!(
        kinds("MERGE INTO syncular.sync_clients c USING (SELECT $1 AS p) s ON c.partition = s.p WHEN MATCHED THEN DO NOTHING"),
        vec![Unsupported]
    );
    assert_eq!(kinds("SELECT FROM WHERE"), vec![ParseError]);
}

// --- known good ------------------------------------------------------------------------------

#[test]
fn statements_without_distributed_tables_pass() {
    assert_ok("SELECT pg_advisory_xact_lock($1)");
    assert_ok("SELECT pg_catalog.set_config('syncular.partition', $1, false)");
    assert_ok("SELECT pg_notify($1, $2)");
    assert_ok("SELECT key FROM syncular.sync_notification_key");
    assert_ok("LOCK TABLE syncular.sync_schema_versions IN EXCLUSIVE MODE");
    let a = check("SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1", &layout());
    assert!(a.violations.is_empty() && a.reads_catalog() && !a.touches_distributed());
}

#[test]
fn pinned_selects_updates_and_deletes_pass() {
    assert_ok("SELECT commit_seq FROM syncular.sync_commits WHERE partition = $1 AND commit_seq > $2 ORDER BY commit_seq LIMIT $3");
    assert_ok("SELECT 1 FROM syncular.sync_commits WHERE partition = 'tenant-1'::text COLLATE \"C\"");
    assert_ok("SELECT max_commit_seq FROM syncular.sync_partitions WHERE $1 = partition FOR UPDATE");
    assert_ok("UPDATE syncular.sync_partitions SET max_commit_seq = max_commit_seq + 1 WHERE partition = $1 RETURNING max_commit_seq");
    assert_ok("DELETE FROM syncular.sync_commits WHERE partition = $1 AND commit_seq <= $2");
    assert_ok("UPDATE syncular.sync_clients SET cursor = GREATEST(cursor, $3) WHERE partition OPERATOR(pg_catalog.=) $1 AND client_id = $2");
}

#[test]
fn joins_on_the_distribution_column_pass() {
    assert_ok(
        "SELECT ch.row_id FROM syncular.sync_commits c \
           JOIN syncular.sync_changes ch ON ch.partition = c.partition AND ch.commit_seq = c.commit_seq \
           LEFT JOIN syncular.sync_change_scopes s ON s.partition = ch.partition AND s.change_id = ch.change_id \
          WHERE c.partition = $1 AND c.commit_seq > $2",
    );
    assert_ok("SELECT 1 FROM syncular.sync_commits c JOIN syncular.sync_changes ch USING (partition, commit_seq) WHERE c.partition = $1");
    assert_ok("SELECT 1 FROM syncular.sync_commits c, syncular.sync_changes ch WHERE ch.partition = c.partition AND $1 = c.partition");
    assert_ok(
        "DELETE FROM syncular.sync_changes ch USING syncular.sync_commits c \
          WHERE ch.partition = $1 AND c.partition = ch.partition AND ch.commit_seq = c.commit_seq",
    );
    assert_ok(
        "UPDATE public.tasks t SET title = v.title FROM syncular.sync_row_scopes r, (VALUES ($2, $3)) v(id, title) \
          WHERE t._sync_partition = $1 AND r.partition = t._sync_partition AND t.id = v.id",
    );
}

#[test]
fn pinned_subqueries_lateral_and_ctes_pass() {
    assert_ok(
        "SELECT c.commit_seq FROM syncular.sync_changes c WHERE c.partition = $1 \
           AND EXISTS (SELECT 1 FROM syncular.sync_change_scopes s WHERE s.partition = c.partition AND s.commit_seq = c.commit_seq)",
    );
    assert_ok(
        "SELECT x.n FROM syncular.sync_commits c, LATERAL (SELECT count(*) AS n FROM syncular.sync_changes ch \
           WHERE ch.partition = c.partition AND ch.commit_seq = c.commit_seq) x WHERE c.partition = $1",
    );
    assert_ok(
        "WITH w AS (SELECT partition, commit_seq FROM syncular.sync_commits WHERE partition = $1) \
         SELECT ch.row_id FROM w JOIN syncular.sync_changes ch ON ch.partition = w.partition AND ch.commit_seq = w.commit_seq",
    );
    assert_ok(
        "SELECT ch.row_id FROM (SELECT $1::text AS p) k JOIN syncular.sync_changes ch ON ch.partition = k.p",
    );
    assert_ok(
        "WITH d AS (DELETE FROM syncular.sync_commits WHERE partition = $1 AND commit_seq <= $2 RETURNING commit_seq), \
              u AS (UPDATE syncular.sync_partitions SET min_commit_seq = $2 WHERE partition = $1 RETURNING 1) \
         SELECT count(*) FROM d",
    );
    assert_ok(
        "SELECT commit_seq FROM syncular.sync_commits WHERE partition = $1 \
         UNION ALL SELECT commit_seq FROM syncular.sync_changes WHERE partition = $1",
    );
}

#[test]
fn insert_values_with_one_partition_value_and_on_conflict_pass() {
    assert_ok("INSERT INTO syncular.sync_commits (partition, commit_seq, actor_id) VALUES ($1, $2, $3)");
    assert_ok(
        "INSERT INTO syncular.sync_changes (partition, commit_seq, row_id) VALUES ($1, $2, $3), ($1, $2, $4), ($1::text, $2, $5) \
         ON CONFLICT (partition, commit_seq, row_id) DO UPDATE SET row_id = EXCLUDED.row_id",
    );
    assert_ok("INSERT INTO public.tasks (_sync_partition, id) VALUES ('p', $1) ON CONFLICT DO NOTHING RETURNING id");
    // the reference table above: INSERT … SELECT into a reference table is rule 2 too
    assert_eq!(kinds("INSERT INTO syncular.sync_schema_tables (version) SELECT version FROM syncular.sync_schema_versions"), vec![InsertSelect]);
}

// --- statement selection ---------------------------------------------------------------------

#[test]
fn entry_calls_and_harness_statements_are_skipped() {
    assert!(is_entry_call("SELECT syncular.sync($1, $2, $3, $4)"));
    assert!(is_entry_call("SELECT commits, fence_busy, done FROM syncular.prune_batch($1, $2)"));
    assert!(is_entry_call("CALL syncular.prune($1, $2)"));
    assert!(!is_entry_call("SELECT syncular.x($1) FROM syncular.sync_commits WHERE partition = $1"));
    assert!(!is_entry_call("SELECT pg_advisory_xact_lock($1)"));
    let l = layout();
    assert!(skip_reason(&format!("SELECT {HARNESS_TAG} 1 FROM syncular.sync_commits"), &l).is_some());
    assert!(skip_reason("SELECT 1", &l).is_some());
    assert!(skip_reason("SELECT 1 FROM syncular.sync_commits", &l).is_none());
    assert!(skip_reason("DELETE FROM public.tasks", &l).is_none());
}

// --- notes and catalog use (reported, never violations) -------------------------------------

#[test]
fn notes_flag_different_pinned_values_and_local_relations() {
    let l = layout();
    let a = check("SELECT 1 FROM syncular.sync_row_scopes rs LEFT JOIN public.tasks a ON a._sync_partition = $5 WHERE rs.partition = $1", &l);
    assert!(a.violations.is_empty(), "{:?}", a.violations);
    assert_eq!(a.notes.len(), 1, "{:?}", a.notes);
    assert!(a.notes[0].contains("$1, $5"), "{:?}", a.notes);
    let a = check("DELETE FROM syncular.sync_row_scopes r USING syncular_old_rows t WHERE r.partition = $1 AND r.row_id = t.id", &l);
    assert!(a.violations.is_empty(), "{:?}", a.violations);
    assert!(a.notes.len() == 1 && a.notes[0].contains("syncular_old_rows"), "{:?}", a.notes);
    let a = check("SELECT 1 FROM syncular.sync_commits c JOIN syncular.sync_changes ch ON ch.partition = c.partition WHERE c.partition = $1", &l);
    assert!(a.notes.is_empty(), "{:?}", a.notes);
}

#[test]
fn catalog_use_lists_catalog_relations_and_lookups() {
    let l = layout();
    assert_eq!(catalog_use("SELECT pg_catalog.to_regclass($1)::oid", &l), vec!["to_regclass()"]);
    assert_eq!(catalog_use("SELECT $1::regclass", &l), vec!["::regclass"]);
    assert_eq!(catalog_use("SELECT relname FROM pg_catalog.pg_class WHERE oid = $1", &l), vec!["pg_catalog.pg_class"]);
    assert!(catalog_use("SELECT 1 FROM syncular.sync_commits WHERE partition = $1", &l).is_empty());
}
