//! Attacks on the bootstrap page reader (commit 97020b3): range + probe
//! reads over weird row ids, multi-value and multi-variable scopes,
//! vanished candidates, tiny pages and changes between rounds — every
//! result compared with plain SQL over the app table.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use std::collections::HashSet;
    use syncular_protocol::constants::ACCEPT_INLINE_ROWS;

    use crate::tests::support::run;
    use crate::tests::sync_pull_support::*;

    /// Walks a whole bootstrap of `subscription` with `rows` rows per page,
    /// one page per pull; `between` runs after every round.
    fn walk(
        table: &str,
        scopes: &[(&str, &[&str])],
        rows: i32,
        accept: u8,
        mut between: impl FnMut(usize),
    ) -> Vec<String> {
        let mut b = Client::new("p1", "bob", &format!("cb{rows}{accept}{table}"));
        let (mut got, mut token) = (Vec::new(), None::<String>);
        for round in 0..100_000 {
            let cursor = if token.is_some() { 0 } else { -1 };
            let p = b.pull(header(0, rows, 1, accept), vec![sub("s", table, scopes, cursor, token.as_deref())]);
            got.extend(p.one().segment_ids());
            token = p.one().end.bootstrap_state.clone();
            if token.is_none() {
                break;
            }
            between(round);
        }
        assert!(token.is_none(), "the walk ends");
        got
    }

    fn ids(sql: &str) -> Vec<String> {
        Spi::get_one::<Vec<String>>(sql).unwrap().unwrap_or_default()
    }

    fn weird_ids() {
        run("SELECT pg_catalog.set_config('syncular.partition', 'p1', false)");
        // Ids whose byte order differs from a linguistic order, spaces,
        // punctuation, unicode, a prefix of another, and long runs.
        run("INSERT INTO public.tasks (id, ws, title) \
             SELECT id, CASE WHEN n % 5 = 0 THEN 'w1' WHEN n % 11 = 0 THEN 'w2' ELSE 'w3' END, 'x' \
               FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM unnest(ARRAY[\
                 'A','a','B','b','Z','z','_','-',' ',' a','a ','aa','aA','Aa','é','e','E','ä','Ä','日本','本',\
                 '~','!','0','9','10','1','a-b','a_b','ab','a.b','Ω','ω','😀','\\','''','\"','a\"b','A B','a b']) id) s");
        run("INSERT INTO public.tasks (id, ws, title) \
             SELECT 'k' || lpad(g::text, 5, '0'), \
                    CASE WHEN g < 1200 OR g >= 4000 THEN 'w1' WHEN g % 13 = 0 THEN 'w2' ELSE 'w3' END, 'x' \
               FROM generate_series(0, 5199) g");
        // Sparse w2 tail, interleaving w1/w2 at the end.
        run("INSERT INTO public.tasks (id, ws, title) \
             SELECT 'm' || lpad(g::text, 5, '0'), CASE WHEN g % 2 = 0 THEN 'w1' ELSE 'w2' END, 'x' \
               FROM generate_series(0, 2999) g");
        // Vanished candidates: at a range bound (first/last), in runs and alone.
        run("ALTER TABLE public.tasks DISABLE TRIGGER USER");
        run("DELETE FROM public.tasks WHERE id IN ('A', 'k00000', 'k00999', 'k01000', 'k01001', 'k03991', 'm02998', 'm02999', '😀') \
             OR id BETWEEN 'k04000' AND 'k04100'");
        run("ALTER TABLE public.tasks ENABLE TRIGGER USER");
    }

    #[pg_test]
    fn weird_ids_multi_value_vanished_every_page_size() {
        setup();
        weird_ids();
        let w1 = ids("SELECT array_agg(id ORDER BY _sync_row_id) FROM public.tasks WHERE _sync_partition = 'p1' AND ws = 'w1'");
        let w12 = ids(
            "SELECT array_agg(id ORDER BY _sync_row_id) FROM public.tasks WHERE _sync_partition = 'p1' AND ws IN ('w1','w2')",
        );
        let w2 = ids("SELECT array_agg(id ORDER BY _sync_row_id) FROM public.tasks WHERE _sync_partition = 'p1' AND ws = 'w2'");
        assert!(w12.len() > w1.len() && !w2.is_empty());
        for rows in [7, 999, 1000, 1001, 2500, 0] {
            assert_eq!(walk("tasks", &[("ws", &["w1"])], rows, ACCEPT_ROWS, |_| {}), w1, "w1 rows={rows}");
            assert_eq!(walk("tasks", &[("ws", &["w2"])], rows, ACCEPT_INLINE_ROWS, |_| {}), w2, "w2 rows={rows}");
            assert_eq!(
                walk("tasks", &[("ws", &["w2", "w1"])], rows, ACCEPT_ROWS, |_| {}),
                w12,
                "w1+w2 rows={rows}"
            );
        }
    }

    #[pg_test]
    fn multi_variable_scopes_deliver_exactly_the_intersection() {
        setup();
        run("SELECT pg_catalog.set_config('syncular.partition', 'p1', false)");
        run("INSERT INTO public.notes (id, ws, proj, body) \
             SELECT 'n' || lpad(g::text, 5, '0'), \
                    CASE WHEN g % 3 = 0 THEN 'w1' WHEN g < 2500 THEN 'w2' ELSE 'w1' END, \
                    CASE WHEN g % 4 = 0 THEN 'p1' WHEN g % 7 = 0 THEN 'p2' ELSE 'p3' END, 'b' \
               FROM generate_series(0, 4999) g");
        let want = ids(
            "SELECT array_agg(id ORDER BY _sync_row_id) FROM public.notes \
              WHERE _sync_partition = 'p1' AND ws = 'w1' AND proj IN ('p1','p2')",
        );
        assert!(!want.is_empty());
        for rows in [1, 3, 1000, 0] {
            assert_eq!(
                walk("notes", &[("proj", &["p2", "p1"]), ("ws", &["w1"])], rows, ACCEPT_INLINE_ROWS, |_| {}),
                want,
                "rows={rows}"
            );
        }
    }

    #[pg_test]
    fn changes_between_rounds_never_skip_or_duplicate_a_stable_row() {
        setup();
        weird_ids();
        // Stable rows: the ones never touched below.
        let before: HashSet<String> = ids(
            "SELECT array_agg(id) FROM public.tasks WHERE _sync_partition = 'p1' AND ws IN ('w1','w2')",
        )
        .into_iter()
        .collect();
        let mut touched: HashSet<String> = HashSet::new();
        let mut inserted: HashSet<String> = HashSet::new();
        let got = walk("tasks", &[("ws", &["w1", "w2"])], 137, ACCEPT_ROWS, |round| {
            // Delete a few rows ahead and behind, insert rows in between,
            // move rows out of and into scope.
            let r = round as i64;
            let del = ids(&format!(
                "SELECT array_agg(id) FROM (SELECT id FROM public.tasks WHERE _sync_partition = 'p1' \
                  ORDER BY _sync_row_id OFFSET {} LIMIT 3) s",
                (r * 97) % 8000
            ));
            for id in &del {
                touched.insert(id.clone());
            }
            run(&format!(
                "DELETE FROM public.tasks WHERE _sync_partition = 'p1' AND id = ANY(ARRAY[{}]::text[])",
                del.iter().map(|d| format!("'{}'", d.replace('\'', "''"))).collect::<Vec<_>>().join(",")
            ));
            for k in 0..5 {
                let id = format!("k{:05}x{k}", (r * 211) % 5200);
                inserted.insert(id.clone());
                run(&format!(
                    "INSERT INTO public.tasks (id, ws, title) VALUES ('{id}', 'w{}', 'new') ON CONFLICT DO NOTHING",
                    1 + k % 3
                ));
            }
            let moved = format!("m{:05}", (r * 37) % 3000);
            touched.insert(moved.clone());
            run(&format!("DELETE FROM public.tasks WHERE _sync_partition = 'p1' AND id = '{moved}'"));
            run(&format!("INSERT INTO public.tasks (id, ws, title) VALUES ('{moved}', 'w3', 'moved')"));
        });
        // Strict row-id order, each once.
        let mut sorted = got.clone();
        sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        sorted.dedup();
        assert_eq!(got, sorted, "row-id order, no duplicates");
        let got_set: HashSet<String> = got.iter().cloned().collect();
        for id in before.iter().filter(|id| !touched.contains(*id)) {
            assert!(got_set.contains(id), "stable matching row {id:?} skipped");
        }
        for id in &got {
            assert!(before.contains(id) || inserted.contains(id), "row {id:?} never matched");
        }
    }

    /// The image lane (§5.3) over the same weird, sparse/dense, vanished ids:
    /// the SQLite image holds exactly the scope's rows.
    #[pg_test]
    fn image_lane_holds_exactly_the_scope_over_weird_ids() {
        use syncular_protocol::response::MediaType;
        use syncular_sqlite_image::rusqlite::{Connection, OpenFlags};
        setup();
        weird_ids();
        for (n, vals) in [vec!["w1"], vec!["w2"], vec!["w1", "w2"]].into_iter().enumerate() {
            let want = ids(&format!(
                "SELECT array_agg(id ORDER BY _sync_row_id) FROM public.tasks WHERE _sync_partition = 'p1' AND ws = ANY(ARRAY[{}])",
                vals.iter().map(|v| format!("'{v}'")).collect::<Vec<_>>().join(",")
            ));
            let mut c = Client::new("p1", "bob", &format!("ci{n}"));
            let p = c.pull(header(0, 2, 1, 0b0111), vec![sub("s", "tasks", &[("ws", vals.as_slice())], -1, None)]);
            let s = p.one();
            assert_eq!(s.refs.len(), 1, "{vals:?}: one image ref");
            assert_eq!(s.refs[0].media_type, MediaType::Sqlite);
            assert_eq!(s.end.bootstrap_state, None);
            let bytes = crate::tests::segments::support::download(
                "p1",
                "bob",
                &s.refs[0].segment_id,
                Some(&serde_json::json!({"ws": vals}).to_string()),
                Some(serde_json::json!({"ws": vals})),
            )
            .expect("download");
            let path = std::env::temp_dir().join(format!("breaker12-image-{}-{n}.sqlite", std::process::id()));
            std::fs::write(&path, &bytes).unwrap();
            let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
            let mut stmt = conn.prepare("SELECT id FROM tasks ORDER BY id").unwrap();
            let got: Vec<String> = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect();
            drop(stmt);
            drop(conn);
            let _ = std::fs::remove_file(&path);
            assert_eq!(got, want, "{vals:?}");
        }
    }
}
