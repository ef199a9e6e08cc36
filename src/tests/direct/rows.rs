//! Attacks on the push path's direct rows (`crate::store::direct`): the log
//! rows a push inserts without a statement (heap tuple + index entries after
//! the counter `UPDATE`), the tombstone / row-scope probes that replace
//! `DELETE … USING` and `ON CONFLICT DO NOTHING`, and the request context read
//! by primary-key probes. Each test states what the old one-statement path
//! did and checks the direct path still does it.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;
    use pgrx::JsonB;
    use serde_json::{json, Value};
    use syncular_protocol::request::{Operation, PushCommit};
    use syncular_protocol::response::{decode_response, PushStatus, ResponseFrame};

    use crate::store::spi::subtransaction::{self, SubtransactionError};
    use crate::tests::capture::support::{assert_log_is, fingerprint_of};
    use crate::tests::support::{int8, run, text};
    use crate::tests::sync_pull_support::*;

    const P: &str = "direct-p";

    fn count(sql: &str) -> i64 {
        int8(sql).unwrap_or(0)
    }

    fn tombstones(row: &str) -> i64 {
        count(&format!("SELECT count(*) FROM syncular.sync_tombstones WHERE partition = '{P}' AND tbl = 'tasks' AND row_id = '{row}'"))
    }

    fn row_scopes(row: &str) -> i64 {
        count(&format!("SELECT count(*) FROM syncular.sync_row_scopes WHERE partition = '{P}' AND tbl = 'tasks' AND row_id = '{row}'"))
    }

    fn commit_of(id: &str, ops: Vec<Operation>) -> PushCommit {
        PushCommit { client_commit_id: id.into(), operations: ops }
    }

    /// Sends one request of `commits` (no pull) as `c`; the `PUSH_RESULT`s, or the ERROR.
    fn push_request(c: &mut Client, commits: Vec<PushCommit>) -> Result<Vec<syncular_protocol::response::PushResult>, SubtransactionError> {
        let bytes = c.request(commits, None);
        c.sync_bytes(bytes).map(|b| {
            decode_response(&b)
                .expect("decodes")
                .frames
                .into_iter()
                .filter_map(|f| match f {
                    ResponseFrame::PushResult(r) => Some(r),
                    _ => None,
                })
                .collect()
        })
    }

    fn statuses(r: &[syncular_protocol::response::PushResult]) -> Vec<PushStatus> {
        r.iter().map(|x| x.status).collect()
    }

    /// Bootstrap (cursor -1) of `tasks` in `ws = w1` by a fresh client: the row ids and titles.
    fn bootstrap_titles(client_id: &str) -> Vec<(String, String)> {
        let mut b = Client::new(P, "bob", client_id);
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], -1, None)]);
        p.one().segment_rows().iter().map(|(id, _, payload)| (id.clone(), task_values(payload).2)).collect()
    }

    fn everything() -> String {
        let (log, _) = fingerprint_of(&["public.tasks"]);
        let results = text("SELECT string_agg(x::text, ',' ORDER BY x::text) FROM syncular.sync_push_results x").unwrap_or_default();
        format!("{log}\n{results}")
    }

    /// A row deleted (tombstoned) and inserted again by a later request: the
    /// tombstone goes (the probe found it, the counter statement deleted it),
    /// the row-scope entry is written once, the log replays to the table, and
    /// both an incremental pull and a bootstrap (which walks sync_row_scopes)
    /// show the row.
    #[pg_test]
    fn a_tombstoned_row_inserted_again_loses_its_tombstone_and_pulls() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        let s1 = a.push_ok(vec![task("t1", "w1", "one")]);
        let s2 = a.push_ok(vec![delete("tasks", "t1")]);
        assert_eq!((tombstones("t1"), row_scopes("t1")), (1, 0));
        let s3 = a.push_ok(vec![task("t1", "w1", "again")]);
        assert_eq!((s1, s2, s3), (1, 2, 3));
        assert_eq!(tombstones("t1"), 0, "the re-inserted row's tombstone was cleared");
        assert_eq!(row_scopes("t1"), 1, "one row-scope entry for the re-inserted row");
        assert_log_is(P, "tasks");
        let mut b = Client::new(P, "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], s2, None)]);
        let sec = p.one();
        assert_eq!(sec.commit_seqs(), vec![s3]);
        assert_eq!(task_values(sec.commits[0].changes[0].row.as_ref().unwrap()).2, "again");
        assert_eq!(bootstrap_titles("cboot"), vec![("t1".to_owned(), "again".to_owned())]);
    }

    /// Delete and re-insert of one row inside one request, both ways round:
    /// a standing row deleted then inserted stays standing (no tombstone,
    /// its entry once); a tombstoned row inserted then deleted keeps one
    /// tombstone pointing at the deleting commit and has no entry.
    #[pg_test]
    fn delete_and_reinsert_inside_one_request() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        a.push_ok(vec![task("s", "w1", "standing")]);
        a.push_ok(vec![task("g", "w1", "gone")]);
        let sg = a.push_ok(vec![delete("tasks", "g")]);
        assert_eq!(tombstones("g"), 1);
        let r = push_request(
            &mut a,
            vec![
                commit_of("r1", vec![delete("tasks", "s")]),
                commit_of("r2", vec![task("s", "w1", "back")]),
                commit_of("r3", vec![task("g", "w1", "briefly back")]),
                commit_of("r4", vec![delete("tasks", "g")]),
            ],
        )
        .unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        assert_eq!(statuses(&r), vec![PushStatus::Applied; 4], "{r:?}");
        let seqs: Vec<i64> = r.iter().map(|x| x.commit_seq.unwrap()).collect();
        assert_eq!(seqs, vec![sg + 1, sg + 2, sg + 3, sg + 4]);
        assert_eq!((tombstones("s"), row_scopes("s")), (0, 1), "s stands again");
        assert_eq!((tombstones("g"), row_scopes("g")), (1, 0), "g is deleted again");
        assert_eq!(
            count(&format!("SELECT commit_seq FROM syncular.sync_tombstones WHERE partition = '{P}' AND row_id = 'g'")),
            sg + 4,
            "g's tombstone points at the deleting commit"
        );
        assert_log_is(P, "tasks");
        // A later request inserts g again (its tombstone is the one just moved).
        let s = a.push_ok(vec![task("g", "w1", "final")]);
        assert_eq!((tombstones("g"), row_scopes("g")), (0, 1));
        assert_log_is(P, "tasks");
        let mut titles = bootstrap_titles("cboot");
        titles.sort();
        assert_eq!(titles, vec![("g".to_owned(), "final".to_owned()), ("s".to_owned(), "back".to_owned())]);
        let _ = s;
    }

    /// A stale `sync_row_scopes` entry left behind (a write that bypassed the
    /// capture) does not fail a push inserting that row; the entry stays
    /// exactly once (the old `ON CONFLICT DO NOTHING`). Both an entry this
    /// transaction wrote and one of another scope value.
    #[pg_test]
    fn a_stale_row_scope_entry_does_not_fail_the_insert() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        a.push_ok(vec![task("x0", "w1", "warm up")]);
        run(&format!("INSERT INTO syncular.sync_row_scopes VALUES ('{P}', 'tasks', 'ws', 'w1', 'x1')"));
        let r = a.push(vec![task("x1", "w1", "new")]);
        assert_eq!(r.status, PushStatus::Applied, "{r:?}");
        assert_eq!(row_scopes("x1"), 1);
        // Two rows in one request, one with a stale entry and one without.
        run(&format!("INSERT INTO syncular.sync_row_scopes VALUES ('{P}', 'tasks', 'ws', 'w1', 'x2')"));
        let r = push_request(&mut a, vec![commit_of("m1", vec![task("x2", "w1", "two"), task("x3", "w1", "three")])])
            .unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        assert_eq!(statuses(&r), vec![PushStatus::Applied]);
        assert_eq!((row_scopes("x2"), row_scopes("x3")), (1, 1));
        assert_log_is(P, "tasks");
    }

    /// A duplicate key in a log table the push inserts into directly
    /// (`sync_changes`, `sync_change_scopes`, `sync_commits`) raises 23505
    /// and the whole request is undone — app rows, counter, tombstones,
    /// outcomes; the same commit id applies afterwards with the same
    /// `commitSeq` (the relations opened by the failed inserter were released
    /// by the subtransaction's abort and open again).
    #[pg_test]
    fn a_duplicate_key_in_the_log_fails_the_whole_request() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        a.push_ok(vec![task("d", "w1", "to delete")]);
        let next = count(&format!("SELECT max_commit_seq + 1 FROM syncular.sync_partitions WHERE partition = '{P}'"));
        let blockers = [
            format!("INSERT INTO syncular.sync_commits VALUES ('{P}', {next}, 'other', 'other-1', 'x', 0)"),
            format!("INSERT INTO syncular.sync_changes VALUES ('{P}', {next}, 0, 'tasks', 'zz', 1, 1, '{{}}', NULL)"),
            format!("INSERT INTO syncular.sync_change_scopes VALUES ('{P}', 'tasks', 'ws', 'w1', {next})"),
        ];
        for (i, blocker) in blockers.iter().enumerate() {
            run(blocker);
            let before = everything();
            let id = format!("dup-{i}");
            let err = push_request(&mut a, vec![commit_of(&id, vec![task(&format!("n{i}"), "w1", "new"), delete("tasks", "d")])])
                .expect_err("a duplicate log key fails the request");
            assert_eq!(err.sqlstate, "23505", "{blocker}: {}", err.message);
            assert_eq!(everything(), before, "{blocker}: the failed request left something behind");
            run(&format!(
                "DELETE FROM syncular.sync_commits WHERE partition = '{P}' AND client_id = 'other'; \
                 DELETE FROM syncular.sync_changes WHERE partition = '{P}' AND row_id = 'zz'; \
                 DELETE FROM syncular.sync_change_scopes WHERE partition = '{P}' AND commit_seq = {next}"
            ));
        }
        let r = push_request(&mut a, vec![commit_of("dup-0", vec![task("n0", "w1", "new"), delete("tasks", "d")])])
            .unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        assert_eq!((r[0].status, r[0].commit_seq), (PushStatus::Applied, Some(next)), "{r:?}");
        assert_eq!((tombstones("d"), row_scopes("n0")), (1, 1));
        assert_log_is(P, "tasks");
    }

    /// A push rolled back to a savepoint (a plpgsql exception block: a
    /// subtransaction) leaves nothing: inside it, its own later statements
    /// see the rows it inserted directly (a replay is `cached`, the commit
    /// counts); after the rollback the same commit applies again as new,
    /// with the same `commitSeq`.
    #[pg_test]
    fn a_push_rolled_back_to_a_savepoint_leaves_nothing() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        a.push_ok(vec![task("t0", "w1", "before")]);
        let before = everything();
        let req = a.request(vec![commit_of("sp-1", vec![task("t1", "w1", "in savepoint")])], None);
        run("CREATE TEMP TABLE direct_req(b bytea)");
        Spi::run_with_args("INSERT INTO direct_req VALUES ($1)", &[req.clone().into()]).unwrap();
        let allowed = JsonB(json!({"ws": ["*"], "proj": ["*"]}));
        run("CREATE TEMP TABLE direct_allowed(a jsonb)");
        Spi::run_with_args("INSERT INTO direct_allowed VALUES ($1)", &[allowed.into()]).unwrap();
        let body = format!(
            "DO $$ DECLARE n bigint; r bytea; BEGIN \
               r := syncular.sync('{P}', 'alice', (SELECT b FROM direct_req), (SELECT a FROM direct_allowed)); \
               SELECT count(*) INTO n FROM syncular.sync_commits c JOIN syncular.sync_push_results p \
                 ON p.partition = c.partition AND p.client_commit_id = c.client_commit_id \
                 WHERE c.partition = '{P}' AND c.client_commit_id = 'sp-1' \
                   AND (p.result->>'commitSeq')::bigint = c.commit_seq; \
               IF n <> 1 THEN RAISE EXCEPTION 'own commit not visible: %', n; END IF; \
               SELECT count(*) INTO n FROM syncular.sync_row_scopes WHERE partition = '{P}' AND row_id = 't1'; \
               IF n <> 1 THEN RAISE EXCEPTION 'own row scope not visible: %', n; END IF; \
               r := syncular.sync('{P}', 'alice', (SELECT b FROM direct_req), (SELECT a FROM direct_allowed)); \
               SELECT count(*) INTO n FROM syncular.sync_commits WHERE partition = '{P}'; \
               IF n <> 2 THEN RAISE EXCEPTION 'the replay wrote again: % commits', n; END IF; \
               RAISE EXCEPTION 'rolled back as planned'; \
             END $$"
        );
        let err = subtransaction::run(|| Spi::run(&body).unwrap()).expect_err("the block raises");
        assert_eq!(err.message, "rolled back as planned");
        assert_eq!(everything(), before, "the rolled-back push left something behind");
        let r = push_request(&mut a, vec![commit_of("sp-1", vec![task("t1", "w1", "in savepoint")])])
            .unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        assert_eq!((r[0].status, r[0].commit_seq), (PushStatus::Applied, Some(2)), "applied as new: {r:?}");
        let again = push_request(&mut a, vec![commit_of("sp-1", vec![task("t1", "w1", "in savepoint")])]).unwrap();
        assert_eq!((again[0].status, again[0].commit_seq), (PushStatus::Cached, Some(2)));
        assert_log_is(P, "tasks");
    }

    /// Rows inserted directly are visible to the transaction's later
    /// statements and requests: a second client's pull in the same
    /// transaction delivers the commits, and the pushes are counted in
    /// `pg_stat_xact_user_tables` as statement inserts are.
    #[pg_test]
    fn direct_rows_are_seen_and_counted_in_the_same_transaction() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        let mut b = Client::new(P, "bob", "cb");
        a.push_ok(vec![task("w", "w1", "warm")]);
        let ins = |t: &str| {
            count(&format!("SELECT n_tup_ins FROM pg_catalog.pg_stat_xact_user_tables WHERE schemaname = 'syncular' AND relname = '{t}'"))
        };
        let tables = ["sync_commits", "sync_changes", "sync_change_scopes", "sync_row_scopes", "sync_push_results"];
        let before: Vec<i64> = tables.iter().map(|t| ins(t)).collect();
        let r = push_request(
            &mut a,
            vec![
                commit_of("v1", vec![task("t1", "w1", "one"), task("t2", "w2", "two")]),
                commit_of("v2", vec![task("t3", "w1", "three")]),
            ],
        )
        .unwrap();
        assert_eq!(statuses(&r), vec![PushStatus::Applied; 2]);
        let after: Vec<i64> = tables.iter().map(|t| ins(t)).collect();
        let grown: Vec<i64> = after.iter().zip(&before).map(|(x, y)| x - y).collect();
        // commits 2, changes 3, change scopes (v1: w1, w2; v2: w1) 3, row scopes 3, outcomes 2.
        assert_eq!(grown, vec![2, 3, 3, 3, 2], "n_tup_ins of {tables:?}");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], 1, None)]);
        assert_eq!(p.one().commit_seqs(), vec![2, 3]);
        let ids: Vec<String> = p.one().commits.iter().flat_map(|c| c.changes.iter().map(|ch| ch.row_id.clone())).collect();
        assert_eq!(ids, ["t1", "t3"]);
        // The context read of a pull-only round (bounds now) sees the counter this transaction moved.
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], 3, None)]);
        assert_eq!(p.one().end.next_cursor, 3);
    }

    /// A push of a commit whose counter row was removed (a hand-edited
    /// database): the missing counter is created and the log is written once
    /// (nothing of the failed first attempt — not even the probes' effects).
    #[pg_test]
    fn a_missing_counter_row_is_recreated_and_the_log_written_once() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        a.push_ok(vec![task("w", "w1", "warm")]);
        a.push_ok(vec![delete("tasks", "w")]);
        run(&format!(
            "DELETE FROM syncular.sync_commits WHERE partition = '{P}'; DELETE FROM syncular.sync_changes WHERE partition = '{P}'; \
             DELETE FROM syncular.sync_change_scopes WHERE partition = '{P}'; DELETE FROM syncular.sync_partitions WHERE partition = '{P}'"
        ));
        let r = push_request(&mut a, vec![commit_of("mc-1", vec![task("w", "w1", "back")])]).unwrap();
        assert_eq!((r[0].status, r[0].commit_seq), (PushStatus::Applied, Some(1)), "{r:?}");
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_commits WHERE partition = '{P}'")), 1);
        assert_eq!(count(&format!("SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = '{P}'")), 1);
        assert_eq!((tombstones("w"), row_scopes("w")), (0, 1));
    }

    /// A request that only stores rejections, in a read-only transaction:
    /// the old path's `INSERT` refused it (25006); the direct insert must not
    /// write past `transaction_read_only` either. Before the fix (the
    /// executor's read-only check repeated in `Inserter::open`) the rejection
    /// was stored: "outcome: response with 1 frame(s), stored 1".
    #[pg_test]
    fn a_rejection_is_not_stored_in_a_read_only_transaction() {
        setup();
        let mut a = Client::with_allowed(P, "alice", "ca", Some(json!({"ws": ["w1"], "proj": ["*"]})));
        a.push_ok(vec![task("w", "w1", "warm")]);
        // Rejected before any row is read (an unknown table): the request's only write is its outcome.
        let mut unknown = task("t9", "w1", "nowhere");
        unknown.table = "nope".into();
        let req = a.request(vec![commit_of("ro-1", vec![unknown.clone()])], None);
        let outcome = subtransaction::run::<()>(|| {
            run("SET LOCAL transaction_read_only = on");
            let r = a.sync_bytes(req.clone());
            let stored = count("SELECT count(*) FROM syncular.sync_push_results WHERE client_commit_id = 'ro-1'");
            let shown = match r {
                Ok(bytes) => format!("response with {} frame(s), stored {stored}", decode_response(&bytes).unwrap().frames.len()),
                Err(e) => format!("error {} {}", e.sqlstate, e.message),
            };
            pgrx::error!("outcome: {shown}");
        })
        .expect_err("the probe block always raises");
        assert!(outcome.message.starts_with("outcome: error 25006"), "{}", outcome.message);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results WHERE client_commit_id = 'ro-1'"), 0);
        // Read-write again: it is stored as a rejection and replays identically.
        let r = push_request(&mut a, vec![commit_of("ro-1", vec![unknown.clone()])]).unwrap();
        assert_eq!(statuses(&r), vec![PushStatus::Rejected]);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results WHERE client_commit_id = 'ro-1'"), 1);
    }

    /// A `sync_*` table an operator changed (a trigger added): the push
    /// refuses to write or read it without statements — an error naming the
    /// table, nothing stored — instead of skipping what the trigger would do.
    #[pg_test]
    fn a_log_table_with_a_trigger_is_refused() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        a.push_ok(vec![task("w", "w1", "warm")]);
        let req = a.request(vec![commit_of("trig-1", vec![task("t1", "w1", "one")])], None);
        let outcome = subtransaction::run::<()>(|| {
            run("CREATE FUNCTION public.audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$");
            run("CREATE TRIGGER audit BEFORE INSERT ON syncular.sync_commits FOR EACH ROW EXECUTE FUNCTION public.audit()");
            let r = a.sync_bytes(req.clone());
            pgrx::error!("outcome: {}", r.map(|_| "applied".to_owned()).unwrap_or_else(|e| e.message));
        })
        .expect_err("the probe block always raises");
        assert!(outcome.message.contains("syncular.sync_commits is not the plain table"), "{}", outcome.message);
        assert_eq!(count("SELECT count(*) FROM syncular.sync_push_results WHERE client_commit_id = 'trig-1'"), 0);
        // The trigger rolled back with the block: the same commit applies.
        let r = push_request(&mut a, vec![commit_of("trig-1", vec![task("t1", "w1", "one")])]).unwrap();
        assert_eq!(statuses(&r), vec![PushStatus::Applied]);
    }

    /// A row whose payload is far above the TOAST threshold (incompressible):
    /// the direct heap insert toasts it as `INSERT` would; the log equals the
    /// table and a pull returns the title intact.
    #[pg_test]
    fn a_toasted_payload_round_trips() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let big: String = (0..300_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'!' + (x % 90) as u8)
            })
            .collect();
        let s = a.push_ok(vec![task("big", "w1", &big)]);
        assert_log_is(P, "tasks");
        let external = count(&format!(
            "SELECT count(*) FROM syncular.sync_changes WHERE partition = '{P}' AND commit_seq = {s} AND octet_length(payload) > 300000"
        ));
        assert_eq!(external, 1, "the whole payload is stored");
        let mut b = Client::new(P, "bob", "cb");
        let p = b.pull(header(0, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], 0, None)]);
        assert_eq!(task_values(p.one().commits[0].changes[0].row.as_ref().unwrap()).2, big);
    }

    /// `syncular.commit` (server commits) on the direct path: insert, delete,
    /// insert again of one row, with a stable commit id replayed (cached,
    /// same `commitSeq`, written once); the log replays to the table.
    #[pg_test]
    fn server_commits_write_and_replay_the_same_log() {
        setup();
        let commit = |id: &str, ops: Value| -> Value {
            Spi::get_one_with_args::<JsonB>(
                "SELECT syncular.commit($1, 'svc', $2, client_commit_id => $3, allowed_scopes => $4)",
                &[P.into(), JsonB(ops).into(), id.into(), JsonB(json!({"ws": ["*"], "proj": ["*"]})).into()],
            )
            .unwrap()
            .unwrap()
            .0
        };
        let ins = json!([{"table": "tasks", "op": "upsert", "row": {"id": "s1", "ws": "w1", "title": "a"}}]);
        let del = json!([{"table": "tasks", "op": "delete", "rowId": "s1"}]);
        let c1 = commit("sc-1", ins.clone());
        let c2 = commit("sc-2", del);
        let c3 = commit("sc-3", ins.clone());
        assert_eq!((c1["status"].as_str(), c2["status"].as_str(), c3["status"].as_str()), (Some("applied"), Some("applied"), Some("applied")));
        assert_eq!((tombstones("s1"), row_scopes("s1")), (0, 1));
        let replay = commit("sc-3", ins);
        assert_eq!(replay["status"], "cached", "{replay}");
        assert_eq!(replay["commitSeq"], c3["commitSeq"]);
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_commits WHERE partition = '{P}'")), 3);
        assert_eq!(
            count(&format!("SELECT (result->>'commitSeq')::bigint FROM syncular.sync_push_results WHERE partition = '{P}' AND client_commit_id = 'sc-3'")),
            c3["commitSeq"].as_i64().unwrap()
        );
        assert_log_is(P, "tasks");
    }

    /// The applied outcome stored by the direct path is the JSON the old
    /// `jsonb_set(result, '{commitSeq}', seq)` stored: the `commitSeq` of
    /// every outcome of a multi-commit request equals its commit's, and a
    /// rejected outcome between them carries none.
    #[pg_test]
    fn stored_outcomes_carry_their_commit_seq() {
        setup();
        let mut a = Client::with_allowed(P, "alice", "ca", Some(json!({"ws": ["w1"], "proj": ["*"]})));
        a.push_ok(vec![task("w", "w1", "warm")]);
        let r = push_request(
            &mut a,
            vec![
                commit_of("o1", vec![task("o1", "w1", "x")]),
                commit_of("o2", vec![task("o2", "w9", "denied")]),
                commit_of("o3", vec![task("o3", "w1", "y")]),
            ],
        )
        .unwrap();
        assert_eq!(statuses(&r), vec![PushStatus::Applied, PushStatus::Rejected, PushStatus::Applied]);
        let mismatched = count(&format!(
            "SELECT count(*) FROM syncular.sync_push_results p LEFT JOIN syncular.sync_commits c \
               ON c.partition = p.partition AND c.client_id = p.client_id AND c.client_commit_id = p.client_commit_id \
             WHERE p.partition = '{P}' AND p.client_commit_id IN ('o1', 'o2', 'o3') \
               AND (p.result->'commitSeq') IS DISTINCT FROM to_jsonb(c.commit_seq)"
        ));
        assert_eq!(mismatched, 0);
        assert_eq!(
            text(&format!("SELECT string_agg(result->>'status', ',' ORDER BY client_commit_id) FROM syncular.sync_push_results WHERE partition = '{P}' AND client_commit_id IN ('o1','o2','o3')")),
            Some("applied,rejected,applied".to_owned())
        );
        let replay = push_request(
            &mut a,
            vec![commit_of("o3", vec![task("o3", "w1", "y")]), commit_of("o1", vec![task("o1", "w1", "x")])],
        )
        .unwrap();
        assert_eq!(statuses(&replay), vec![PushStatus::Cached, PushStatus::Cached]);
        assert_eq!((replay[0].commit_seq, replay[1].commit_seq), (r[2].commit_seq, r[0].commit_seq));
    }

    /// Two commits with the same `clientCommitId` in one request, the first
    /// applied: processed once (the second replays it), one outcome stored —
    /// no 23505 from the direct insert of `sync_push_results`.
    #[pg_test]
    fn a_repeated_commit_id_in_one_request_stores_one_outcome() {
        setup();
        let mut a = Client::new(P, "alice", "ca");
        let op = |title: &str| vec![task("rp", "w1", title)];
        let r = push_request(&mut a, vec![commit_of("same", op("first")), commit_of("same", op("second"))])
            .unwrap_or_else(|e| panic!("{} {}", e.sqlstate, e.message));
        assert_eq!(statuses(&r), vec![PushStatus::Applied, PushStatus::Cached]);
        assert_eq!(r[0].commit_seq, r[1].commit_seq);
        assert_eq!(count(&format!("SELECT count(*) FROM syncular.sync_push_results WHERE partition = '{P}' AND client_commit_id = 'same'")), 1);
        assert_eq!(text(&format!("SELECT title FROM public.tasks WHERE _sync_partition = '{P}' AND _sync_row_id = 'rp'")), Some("first".into()));
    }
}
