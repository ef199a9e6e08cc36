//! What a plain SQL write to an app table may not do (issue 9, docs/src/guide/plain-sql.md
//! "Writing with plain SQL"): each refusal raises its code and SQLSTATE
//! (§10.1 JSON in DETAIL) and changes nothing — no row, version, log entry,
//! counter or notification; failed, rolled-back and row-less statements
//! write no commit; mistyped `syncular.*` settings are refused (PG15+).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use serde_json::Value;

    use crate::tests::capture::support::*;
    use crate::tests::support::{run, text};
    use crate::tests::sync_support::setup_tasks;

    const REFUSED: (&str, &str) = ("0A000", "syncular.write_refused");
    const INVALID: (&str, &str) = ("22000", "syncular.invalid_row");
    const NO_PARTITION: (&str, &str) = ("55000", "syncular.partition_required");

    /// `tasks` with rows t1 (p1), t2 (p2) in partition `p`, one commit.
    fn seeded(p: &str) {
        setup_tasks();
        set_partition(p);
        write_ok("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('t1', 'p1', 'one', false), ('t2', 'p2', 'two', false)");
        assert_eq!(commits(p), 1);
    }

    /// [`refused`] plus the §10.1 DETAIL of the error.
    fn refused_with_detail(sql: &str, (sqlstate, code): (&str, &str), fragment: &str) {
        refused(sql, sqlstate, code, fragment);
        let err = write(sql).unwrap_err();
        let detail: Value = serde_json::from_str(err.detail.as_deref().unwrap_or("null")).unwrap();
        assert_eq!(detail["code"], code, "{detail}");
        assert_eq!(detail["category"], "invalid-request", "{detail}");
        assert_eq!(detail["retryable"], false, "{detail}");
        assert_eq!(detail["recommendedAction"], "fixRequest", "{detail}");
    }

    #[pg_test]
    fn writes_without_a_partition_are_refused() {
        const P: &str = "cap-r-nopart";
        seeded(P);
        run("RESET syncular.partition");
        for sql in [
            "INSERT INTO public.tasks (id, project_id, done) VALUES ('t3', 'p1', false)".to_string(),
            format!("UPDATE public.tasks SET title = 'x' WHERE _sync_partition = '{P}'"),
            format!("DELETE FROM public.tasks WHERE _sync_partition = '{P}'"),
            // Checked per statement, before any row.
            "UPDATE public.tasks SET title = 'x' WHERE false".to_string(),
        ] {
            refused_with_detail(&sql, NO_PARTITION, "synced table \"tasks\" needs its partition: SET syncular.partition");
        }
        set_partition("");
        refused(
            "INSERT INTO public.tasks (id, project_id, done) VALUES ('t3', 'p1', false)",
            NO_PARTITION.0,
            NO_PARTITION.1,
            "needs its partition",
        );
        assert_eq!(commits(P), 1);
    }

    #[pg_test]
    fn inserts_writing_computed_columns_are_refused() {
        const P: &str = "cap-r-insert";
        seeded(P);
        let computed = "writes _sync_version, _sync_scopes, _sync_payload or _sync_column_versions: they are computed from the typed columns";
        for (columns, values) in [
            ("_sync_version", "1"),
            ("_sync_scopes", "'{\"project_id\": \"p1\"}'"),
            ("_sync_payload", "'\\x00'"),
        ] {
            refused_with_detail(
                &format!("INSERT INTO public.tasks (id, project_id, done, {columns}) VALUES ('t3', 'p1', false, {values})"),
                REFUSED,
                computed,
            );
        }
        refused_with_detail(
            "INSERT INTO public.tasks (id, project_id, done, _sync_row_id) VALUES ('t3', 'p1', false, 'other')",
            REFUSED,
            "writes _sync_row_id \"other\", but it is derived from the primary key (\"t3\")",
        );
        refused_with_detail(
            "INSERT INTO public.tasks (id, project_id, done, _sync_partition) VALUES ('t3', 'p1', false, 'elsewhere')",
            REFUSED,
            &format!("INSERT of synced table \"tasks\" touches a row of partition \"elsewhere\" while syncular.partition is \"{P}\""),
        );
        // The computed values themselves are accepted.
        write_ok(&format!(
            "INSERT INTO public.tasks (id, project_id, done, _sync_row_id, _sync_partition) VALUES ('t3', 'p1', false, 't3', '{P}')"
        ));
        assert_eq!(commits(P), 2);
    }

    #[pg_test]
    fn updates_of_computed_scope_or_key_columns_are_refused() {
        const P: &str = "cap-r-update";
        seeded(P);
        let target = format!("WHERE _sync_partition = '{P}' AND id = 't1'");
        for (set, column) in [
            ("_sync_version = 9", "_sync_version"),
            ("_sync_scopes = '{\"project_id\": \"p9\"}'", "_sync_scopes"),
            ("_sync_payload = '\\x00'", "_sync_payload"),
            ("_sync_row_id = 'other'", "_sync_row_id"),
            ("_sync_partition = 'elsewhere'", "_sync_partition"),
        ] {
            refused_with_detail(
                &format!("UPDATE public.tasks SET {set} {target}"),
                REFUSED,
                &format!("UPDATE of synced table \"tasks\" writes {column}: the _sync_* columns are computed"),
            );
        }
        refused_with_detail(
            &format!("UPDATE public.tasks SET project_id = 'p2' {target}"),
            REFUSED,
            "changes scope column \"project_id\": scope columns are immutable (§3.4 rule 5)",
        );
        refused_with_detail(
            &format!("UPDATE public.tasks SET id = 't9' {target}"),
            REFUSED,
            "changes primary key column \"id\": a row's id is immutable",
        );
        // The same values written back are no change of those columns.
        write_ok(&format!("UPDATE public.tasks SET project_id = 'p1', id = 't1', title = 'ok' {target}"));
        assert_eq!(commits(P), 2);
    }

    #[pg_test]
    fn rows_of_another_partition_are_refused() {
        const A: &str = "cap-r-part-a";
        const B: &str = "cap-r-part-b";
        seeded(A);
        set_partition(B);
        write_ok("INSERT INTO public.tasks (id, project_id, title, done) VALUES ('t1', 'p1', 'b one', false)");
        set_partition(A);
        refused_with_detail(
            "UPDATE public.tasks SET title = 'everywhere'",
            REFUSED,
            &format!("touches a row of partition \"{B}\" while syncular.partition is \"{A}\""),
        );
        refused_with_detail(
            "DELETE FROM public.tasks",
            REFUSED,
            &format!("DELETE of synced table \"tasks\" touches a row of partition \"{B}\""),
        );
        // Filtered to the setting, the same statements pass and leave B alone.
        write_ok("UPDATE public.tasks SET title = 'a only' WHERE _sync_partition = current_setting('syncular.partition')");
        assert_eq!((commits(A), commits(B)), (2, 1));
        assert_eq!(
            text("SELECT string_agg(_sync_partition || '/' || id || '=' || title, ',' ORDER BY _sync_partition, id) FROM public.tasks"),
            Some(format!("{A}/t1=a only,{A}/t2=a only,{B}/t1=b one"))
        );
    }

    #[pg_test]
    fn truncate_is_refused() {
        const P: &str = "cap-r-truncate";
        seeded(P);
        refused_with_detail("TRUNCATE public.tasks", REFUSED, "TRUNCATE of synced table \"tasks\" cannot be expressed as commits");
        // Whatever the partition setting.
        run("RESET syncular.partition");
        refused("TRUNCATE public.tasks", REFUSED.0, REFUSED.1, "TRUNCATE of synced table \"tasks\"");
        assert_eq!(count("SELECT count(*) FROM public.tasks"), 2);
    }

    #[pg_test]
    fn a_column_retyped_by_hand_is_an_error_not_a_misread_value() {
        const P: &str = "cap-r-retyped";
        seeded(P);
        // The capture has read this table (its column numbers and types are cached).
        write_ok(&format!("UPDATE public.tasks SET title = 'warm' WHERE _sync_partition = '{P}' AND id = 't1'"));
        run("ALTER TABLE public.tasks ALTER COLUMN n TYPE text");
        let before = fingerprint();
        refused(
            &format!("UPDATE public.tasks SET title = 'after' WHERE _sync_partition = '{P}' AND id = 't1'"),
            "XX000",
            "syncular.internal",
            "column \"n\" no longer has the type register_schema gave it",
        );
        assert_eq!(fingerprint(), before, "nothing written");
    }

    #[pg_test]
    fn values_clients_cannot_hold_are_invalid_rows() {
        const P: &str = "cap-r-invalid";
        seeded(P);
        let insert = |values: &str| format!("INSERT INTO public.tasks (id, project_id, n, done, att) VALUES {values}");
        for (values, fragment) in [
            ("('t3', 'p1', NULL, NULL, NULL)", "cannot be encoded for clients: NULL for non-nullable column \"done\""),
            ("(NULL, 'p1', NULL, false, NULL)", "NULL for non-nullable column \"id\""),
            ("('t3', NULL, NULL, false, NULL)", "NULL for non-nullable column \"project_id\""),
            ("('t3', '', NULL, false, NULL)", "needs scope column \"project_id\" (variable \"project_id\"): it is NULL or empty"),
            ("('t3', 'p1', 9007199254740992, false, NULL)", "9007199254740992 is outside ±(2^53−1)"),
            ("('t3', 'p1', -9007199254740992, false, NULL)", "-9007199254740992 is outside ±(2^53−1)"),
            ("('t3', 'p1', NULL, false, 'not a blob ref')", "cannot be encoded for clients"),
            // One bad row fails the whole statement: no row, no commit.
            (
                "('t3', 'p1', 1, false, NULL), ('t4', 'p2', 2, false, NULL), ('t5', 'p1', NULL, NULL, NULL)",
                "NULL for non-nullable column \"done\"",
            ),
        ] {
            refused_with_detail(&insert(values), INVALID, fragment);
        }
        let target = format!("WHERE _sync_partition = '{P}' AND id = 't1'");
        refused_with_detail(&format!("UPDATE public.tasks SET done = NULL {target}"), INVALID, "NULL for non-nullable column \"done\"");
        refused_with_detail(&format!("UPDATE public.tasks SET n = 9007199254740992 {target}"), INVALID, "is outside ±(2^53−1)");
        // The limits themselves are fine.
        write_ok(&insert("('t3', 'p1', 9007199254740991, false, NULL), ('t4', 'p1', -9007199254740991, false, NULL)"));
        assert_eq!(commits(P), 2);
    }

    #[pg_test]
    fn crdt_values_that_do_not_decode_are_refused() {
        const P: &str = "cap-r-crdt";
        seeded(P);
        for sql in [
            "INSERT INTO public.tasks (id, project_id, done, doc) VALUES ('t3', 'p1', false, '\\x0102')".to_string(),
            format!("UPDATE public.tasks SET doc = '\\x01' WHERE _sync_partition = '{P}' AND id = 't1'"),
        ] {
            // An SSP2 code: SQLSTATE of its category (internal → XX000).
            refused(&sql, "XX000", "sync.crdt_merge_failed", "crdt column \"doc\" of table \"tasks\": the incoming value is not a Yjs (v1) update");
        }
        // NULL is fine.
        write_ok("INSERT INTO public.tasks (id, project_id, done, doc) VALUES ('t3', 'p1', false, NULL)");
        assert_eq!(commits(P), 2);
    }

    #[pg_test]
    fn failed_and_rolled_back_statements_leave_no_commit() {
        const P: &str = "cap-r-failed";
        seeded(P);
        write_ok(&format!("UPDATE public.tasks SET code = 'C-1' WHERE _sync_partition = '{P}' AND id = 't1'"));
        assert_eq!(commits(P), 2);
        // A constraint failing on a later row, after the row triggers ran.
        let before = fingerprint();
        let err = write("INSERT INTO public.tasks (id, project_id, done, code) VALUES ('t3', 'p1', false, 'C-3'), ('t4', 'p1', false, 'C-1')")
            .unwrap_err();
        assert_eq!(err.sqlstate, "23505", "{err:?}");
        assert!(err.message.contains("sync_ix_tasks_code"), "{err:?}");
        assert_eq!(fingerprint(), before);
        // A statement that succeeded, rolled back with its subtransaction.
        let before = fingerprint();
        let err = write("INSERT INTO public.tasks (id, project_id, done) VALUES ('t5', 'p1', false); SELECT 1 / 0").unwrap_err();
        assert_eq!(err.sqlstate, "22012", "{err:?}");
        assert_eq!(fingerprint().0, before.0, "the commit went with the rollback");
        // The next commit takes the next dense seq.
        write_ok("INSERT INTO public.tasks (id, project_id, done) VALUES ('t5', 'p1', false)");
        assert_eq!(
            text(&format!("SELECT string_agg(commit_seq::text, ',' ORDER BY commit_seq) FROM syncular.sync_commits WHERE partition = '{P}'")),
            Some("1,2,3".into())
        );
        assert_eq!(max_commit_seq(P), 3);
    }

    #[pg_test]
    fn statements_that_touch_no_row_write_no_commit() {
        const P: &str = "cap-r-norow";
        seeded(P);
        let before = fingerprint();
        for sql in [
            "INSERT INTO public.tasks (id, project_id, done) VALUES ('t1', 'p1', true), ('t2', 'p2', true) ON CONFLICT DO NOTHING".to_string(),
            "INSERT INTO public.tasks (id, project_id, done) VALUES ('t1', 'p1', true) ON CONFLICT (_sync_partition, _sync_row_id) DO NOTHING"
                .to_string(),
            format!("UPDATE public.tasks SET title = 'x' WHERE _sync_partition = '{P}' AND id = 'nope'"),
            format!("DELETE FROM public.tasks WHERE _sync_partition = '{P}' AND id = 'nope'"),
            "INSERT INTO public.tasks (id, project_id, done) SELECT 'g' || g, 'p1', false FROM generate_series(1, 0) g".to_string(),
        ] {
            write_ok(&sql);
            assert_eq!(fingerprint(), before, "{sql} wrote something");
        }
        // ON CONFLICT DO NOTHING with one new row: a commit of that row only.
        write_ok("INSERT INTO public.tasks (id, project_id, done) VALUES ('t1', 'p1', true), ('t3', 'p1', true) ON CONFLICT DO NOTHING");
        assert_eq!(commits(P), 2);
        assert_eq!(
            text(&format!(
                "SELECT string_agg(concat_ws('/', idx, row_id, op, row_version), ',') FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = 2"
            )),
            Some("0/t3/1/1".into())
        );
        // ON CONFLICT DO UPDATE that inserts and updates: two commits (inserted rows, updated rows).
        write_ok(
            "INSERT INTO public.tasks (id, project_id, title, done) VALUES ('t1', 'p1', 'upserted', true), ('t4', 'p2', 'new', true) \
             ON CONFLICT (_sync_partition, _sync_row_id) DO UPDATE SET title = EXCLUDED.title",
        );
        assert_eq!(commits(P), 4);
        assert_eq!(
            text(&format!(
                "SELECT string_agg(concat_ws('/', idx, row_id, op, row_version), ',' ORDER BY row_id) FROM syncular.sync_changes \
                  WHERE partition = '{P}' AND commit_seq IN (3, 4)"
            )),
            Some("0/t1/1/2,0/t4/1/1".into())
        );
        assert_eq!(
            count(&format!(
                "SELECT count(DISTINCT commit_seq) FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq IN (3, 4)"
            )),
            2
        );
        assert_eq!(
            text(&format!(
                "SELECT string_agg(id || '=' || coalesce(title, '') || '@' || _sync_version, ',' ORDER BY id) FROM public.tasks WHERE _sync_partition = '{P}'"
            )),
            Some("t1=upserted@2,t2=two@1,t3=@1,t4=new@1".into())
        );
    }

    #[cfg(not(feature = "pg13"))]
    #[pg_test]
    fn a_mistyped_setting_is_refused() {
        // The `syncular.` prefix is reserved (Postgres 15+).
        let err = write("SET syncular.partiton = 'x'").unwrap_err();
        assert_eq!(err.sqlstate, "42602", "{err:?}");
        assert!(err.message.contains("invalid configuration parameter name \"syncular.partiton\""), "{err:?}");
        let err = write("SET LOCAL syncular.actorid = 'x'").unwrap_err();
        assert_eq!(err.sqlstate, "42602", "{err:?}");
        // The real names are fine.
        set_partition("cap-r-typo");
        set_actor("typo-job");
        assert_eq!(text("SELECT current_setting('syncular.partition')"), Some("cap-r-typo".into()));
        assert_eq!(text("SELECT current_setting('syncular.actor_id')"), Some("typo-job".into()));
    }

    #[cfg(feature = "pg13")]
    #[pg_test]
    fn a_mistyped_setting_leaves_the_write_without_a_partition() {
        // Postgres 13 cannot reserve a prefix: the typo is a placeholder, the write is refused.
        setup_tasks();
        write_ok("SET LOCAL syncular.partiton = 'x'");
        crate::tests::support::expect_error(
            write("INSERT INTO public.tasks (id, project_id, done) VALUES ('t1', 'p1', false)"),
            NO_PARTITION.0,
            NO_PARTITION.1,
            "needs its partition",
        );
    }
}
