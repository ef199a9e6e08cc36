//! Model-based check of the push half: a few hundred random commits
//! (upserts with every kind of `baseVersion`, deletes, forbidden projects,
//! several operations per commit, several commits per request) are applied
//! both to a tiny in-memory model of SPEC §6.2/§3.4/§6.4 and through
//! `syncular.sync`; after every request the app table, the scope index and
//! the log must match the model exactly.

#[pgrx::pg_schema]
mod tests {
    use std::collections::BTreeMap;

    use pgrx::prelude::*;
    use syncular_protocol::request::{Operation, PushCommit};
    use syncular_protocol::response::{OpResult, PushStatus};

    use crate::tests::sync_support::*;

    const P: &str = "tenant-model";

    /// Deterministic xorshift generator (no external randomness in tests).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[derive(Clone, Debug, PartialEq)]
    struct Row {
        version: i64,
        project: String,
        title: String,
    }

    /// What the model expects of one operation.
    enum Expect {
        Applied { change: bool },
        Stop(&'static str),
    }

    fn model_op(rows: &mut BTreeMap<String, Row>, op: &Operation, project: &str, title: &str) -> Expect {
        let allowed = |p: &str| p == "p1" || p == "p2";
        match (op.payload.is_some(), rows.get(&op.row_id).cloned()) {
            (false, None) => Expect::Applied { change: false },
            (false, Some(stored)) if !allowed(&stored.project) => Expect::Stop("sync.forbidden"),
            (false, Some(_)) => {
                rows.remove(&op.row_id);
                Expect::Applied { change: true }
            }
            (true, Some(stored)) if !allowed(&stored.project) => Expect::Stop("sync.forbidden"),
            (true, Some(stored)) => match op.base_version {
                Some(b) if b == 0 || b != stored.version => Expect::Stop("sync.version_conflict"),
                _ => {
                    rows.insert(
                        op.row_id.clone(),
                        Row { version: stored.version + 1, project: stored.project, title: title.into() },
                    );
                    Expect::Applied { change: true }
                }
            },
            (true, None) if !allowed(project) => Expect::Stop("sync.forbidden"),
            (true, None) if op.base_version.is_some_and(|b| b != 0) => Expect::Stop("sync.row_missing"),
            (true, None) => {
                rows.insert(op.row_id.clone(), Row { version: 1, project: project.into(), title: title.into() });
                Expect::Applied { change: true }
            }
        }
    }

    fn code_of(r: &OpResult) -> String {
        match r {
            OpResult::Conflict { code, .. } | OpResult::Error { code, .. } => code.clone(),
            OpResult::Applied { .. } => "applied".into(),
        }
    }

    #[pg_test]
    fn random_commits_match_the_model() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let allowed = allowed_p1_p2();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut model: BTreeMap<String, Row> = BTreeMap::new();
        let (mut applied, mut changes_expected, mut next_id) = (0i64, 0i64, 0u64);
        for _request in 0..60 {
            let mut commits: Vec<PushCommit> = Vec::new();
            let mut expected: Vec<Result<i64, (i32, &'static str)>> = Vec::new();
            for _ in 0..(1 + rng.below(3)) {
                next_id += 1;
                let mut draft = model.clone();
                let mut ops = Vec::new();
                let mut outcome: Option<(i32, &'static str)> = None;
                let mut changes = 0;
                for i in 0..(1 + rng.below(3)) as i32 {
                    let row_id = format!("r{}", rng.below(6));
                    let project = ["p1", "p2", "p3"][rng.below(3) as usize];
                    let title = format!("t{}", rng.next() % 1000);
                    let current = draft.get(&row_id).map(|r| r.version);
                    let op = if rng.below(4) == 0 {
                        delete(&row_id)
                    } else {
                        let base = match rng.below(4) {
                            0 => None,
                            1 => current,
                            2 => Some(0),
                            _ => Some(current.unwrap_or(0) + 1 + rng.below(2) as i64),
                        };
                        upsert(&task(&row_id, project, &title, None), base)
                    };
                    if outcome.is_none() {
                        match model_op(&mut draft, &op, project, &title) {
                            Expect::Applied { change } => changes += i64::from(change),
                            Expect::Stop(code) => outcome = Some((i, code)),
                        }
                    }
                    ops.push(op);
                }
                match outcome {
                    None => {
                        model = draft;
                        applied += 1;
                        changes_expected += changes;
                        expected.push(Ok(applied));
                    }
                    Some(stop) => expected.push(Err(stop)),
                }
                commits.push(commit(&format!("k{next_id}"), ops));
            }
            let results = push(P, "alice", "c1", &epoch, commits, Some(&allowed));
            assert_eq!(results.len(), expected.len());
            for (got, want) in results.iter().zip(&expected) {
                match want {
                    Ok(seq) => {
                        assert_eq!((got.status, got.commit_seq), (PushStatus::Applied, Some(*seq)), "{got:?}");
                    }
                    Err((op_index, code)) => {
                        assert_eq!(got.status, PushStatus::Rejected, "{got:?}");
                        assert_eq!(got.results.len(), 1);
                        assert_eq!(got.results[0].op_index(), *op_index, "{got:?}");
                        assert_eq!(code_of(&got.results[0]), *code, "{got:?}");
                    }
                }
            }
            // The stored state equals the model.
            let stored = Spi::get_one::<String>(
                "SELECT coalesce(string_agg(_sync_row_id || '=' || _sync_version || '/' || project_id || '/' || title, ',' \
                 ORDER BY _sync_row_id), '') FROM public.tasks WHERE _sync_partition = 'tenant-model'",
            )
            .unwrap()
            .unwrap();
            let want = model
                .iter()
                .map(|(id, r)| format!("{id}={}/{}/{}", r.version, r.project, r.title))
                .collect::<Vec<_>>()
                .join(",");
            assert_eq!(stored, want);
            // The scope index holds exactly one entry per current row, with its project (rows
            // inserted, deleted and inserted again within one request included).
            let index = Spi::get_one::<String>(
                "SELECT coalesce(string_agg(row_id || '=' || tbl || '/' || var || '/' || value, ',' ORDER BY row_id, var), '') \
                 FROM syncular.sync_row_scopes WHERE partition = 'tenant-model'",
            )
            .unwrap()
            .unwrap();
            let want_index = model
                .iter()
                .map(|(id, r)| format!("{id}=tasks/project_id/{}", r.project))
                .collect::<Vec<_>>()
                .join(",");
            assert_eq!(index, want_index);
            assert_eq!(count("SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = 'tenant-model'"), applied);
            assert_eq!(count("SELECT count(*) FROM syncular.sync_commits WHERE partition = 'tenant-model'"), applied);
            assert_eq!(count("SELECT count(*) FROM syncular.sync_changes WHERE partition = 'tenant-model'"), changes_expected);
        }
        assert!(applied > 20 && applied < 150, "the mix exercised both outcomes ({applied} applied)");
    }

    /// The scope index follows each row's final state in one request, where
    /// the entries of inserted rows are written with the log: inserted,
    /// deleted and inserted again under another project → the last
    /// project's entry only; inserted then deleted → none; an existing row
    /// deleted → its entry gone; an existing row updated → its entry kept.
    #[pg_test]
    fn one_request_leaves_the_scope_index_of_each_rows_final_state() {
        setup_tasks();
        let epoch = acquire_epoch(P, "alice", "c1");
        let allowed = allowed_p1_p2();
        let first = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![commit("s1", vec![upsert(&task("old", "p1", "a", None), None), upsert(&task("kept", "p2", "b", None), None)])],
            Some(&allowed),
        );
        assert_eq!(first[0].status, PushStatus::Applied);
        let results = push(
            P,
            "alice",
            "c1",
            &epoch,
            vec![
                commit("s2", vec![upsert(&task("again", "p1", "c", None), None), delete("old")]),
                commit("s3", vec![delete("again"), upsert(&task("gone", "p1", "d", None), None)]),
                commit("s4", vec![upsert(&task("again", "p2", "e", None), None), delete("gone")]),
                commit("s5", vec![upsert(&task("kept", "p2", "f", None), Some(1))]),
            ],
            Some(&allowed),
        );
        assert!(results.iter().all(|r| r.status == PushStatus::Applied), "{results:?}");
        let index = Spi::get_one::<String>(
            "SELECT string_agg(row_id || '=' || value, ',' ORDER BY row_id) \
             FROM syncular.sync_row_scopes WHERE partition = 'tenant-model'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(index, "again=p2,kept=p2");
        // The app table agrees.
        let rows = Spi::get_one::<String>(
            "SELECT string_agg(_sync_row_id || '=' || project_id, ',' ORDER BY _sync_row_id) \
             FROM public.tasks WHERE _sync_partition = 'tenant-model'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(rows, index);
    }
}
