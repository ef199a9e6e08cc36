//! Convergence (SPEC §4.5, §4.7, §5.6): a client that bootstraps page by
//! page while another client keeps writing — updates, deletes, inserts, in
//! and out of its scope — and then pulls incrementally ends with exactly the
//! server's rows of its scope (ids, versions, payloads). This is what makes
//! serving current rows under a pin sound.

#[pgrx::pg_schema]
mod tests {
    use std::collections::BTreeMap;

    use pgrx::prelude::*;
    use syncular_protocol::frame_fields::Op;

    use crate::tests::sync_pull_support::*;

    /// A tiny deterministic generator (no external crates in pg_tests).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    type Local = BTreeMap<String, (i64, Vec<u8>)>;

    fn apply(local: &mut Local, sec: &Section, fresh: bool) {
        if fresh && !sec.segments.is_empty() {
            local.clear(); // §5.6 first-page clear (one scope per test client)
        }
        for (id, version, payload) in sec.segment_rows() {
            local.insert(id, (version, payload));
        }
        for commit in &sec.commits {
            for change in &commit.changes {
                match change.op {
                    Op::Upsert => {
                        local.insert(
                            change.row_id.clone(),
                            (change.row_version.unwrap(), change.row.clone().unwrap()),
                        );
                    }
                    Op::Delete => {
                        local.remove(&change.row_id);
                    }
                }
            }
        }
    }

    fn server_rows(ws: &str) -> Local {
        Spi::connect(|c| {
            let t = c
                .select(
                    "SELECT _sync_row_id, _sync_version, _sync_payload FROM public.tasks \
                     WHERE _sync_partition = 'p1' AND _sync_scopes->>'ws' = $1",
                    None,
                    &[ws.into()],
                )
                .unwrap();
            t.map(|r| {
                (
                    r.get::<String>(1).unwrap().unwrap(),
                    (r.get::<i64>(2).unwrap().unwrap(), r.get::<Vec<u8>>(3).unwrap().unwrap()),
                )
            })
            .collect()
        })
    }

    fn random_write(a: &mut Client, rng: &mut Lcg, step: usize) {
        let mut ops = vec![];
        for _ in 0..(1 + rng.next(3)) {
            let id = format!("t{:02}", rng.next(40));
            let ws = if rng.next(4) == 0 { "w2" } else { "w1" };
            if rng.next(4) == 0 {
                ops.push(delete("tasks", &id));
            } else {
                ops.push(task(&id, ws, &format!("step {step}")));
            }
        }
        // Scope columns are immutable on update: a write that would re-home
        // a row is rejected as a whole; that is fine, the log stays valid.
        let _ = a.push(ops);
    }

    #[pg_test]
    fn paged_bootstrap_under_concurrent_writes_then_catch_up_converges() {
        setup();
        let mut a = Client::new("p1", "alice", "ca");
        let mut rng = Lcg(7);
        for i in 0..30 {
            let ws = if i % 5 == 0 { "w2" } else { "w1" };
            a.push_ok(vec![task(&format!("t{i:02}"), ws, "initial")]);
        }
        let mut b = Client::new("p1", "bob", "cb");
        let mut local = Local::new();
        let mut cursor = -1;
        let mut token: Option<String> = None;
        let mut rounds = 0;
        // Bootstrap 3 rows per pull, with writes between pulls.
        loop {
            rounds += 1;
            assert!(rounds < 200, "bootstrap must finish");
            let fresh = cursor < 0 && token.is_none();
            let p = b.pull(header(0, 3, 1, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], cursor, token.as_deref())]);
            let sec = p.one();
            assert!(sec.start.bootstrap);
            apply(&mut local, sec, fresh);
            cursor = sec.end.next_cursor;
            token = sec.end.bootstrap_state.clone();
            random_write(&mut a, &mut rng, rounds);
            if token.is_none() {
                break;
            }
        }
        // Catch up incrementally (small windows), still under writes for a while.
        for step in 0..400 {
            let p = b.pull(header(2, 0, 0, ACCEPT_ROWS), vec![sub("s", "tasks", &[("ws", &["w1"])], cursor, None)]);
            let sec = p.one();
            assert!(!sec.start.bootstrap);
            apply(&mut local, sec, false);
            let advanced = sec.end.next_cursor != cursor;
            cursor = sec.end.next_cursor;
            if step < 20 {
                random_write(&mut a, &mut rng, 1000 + step);
            } else if !advanced && sec.commits.is_empty() {
                break;
            }
        }
        let commits = crate::tests::support::int8(
            "SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = 'p1'",
        )
        .unwrap();
        assert!(commits > 50, "writes really interleaved with the bootstrap ({commits} commits)");
        let expected = server_rows("w1");
        assert!(expected.len() > 10, "the scope still holds rows");
        assert_eq!(local, expected, "client converged to the server's rows of its scope");
        assert!(local.keys().all(|id| !server_rows("w2").contains_key(id)), "no foreign-scope row");
    }
}
