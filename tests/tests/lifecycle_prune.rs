//! Pruning end to end with a real client (SPEC §4.6 pruning horizon): `CALL syncular.prune`,
//! and the same through `syncular.advance_horizon` + `syncular.prune_batch`, driven by an
//! operator connection while a real `syncular-client` 0.15.48 (SQL transport) lags behind.
//!
//! Both ways return their counts, keep the horizon at an active laggard's cursor, keep exactly
//! the newest 1,000 commits once nobody holds them; the laggard converges through `reset` and
//! re-bootstrap; expired client records go; the procedure refuses a transaction block.
//!
//! Helpers: `syncular_integration_tests::lifecycle`. Every test uses its own partitions and never
//! calls a lifecycle function with a NULL partition (that would touch the partitions of tests
//! running in parallel).

use postgres::Client;
use ssp2::model::SubStatus;
use syncular_integration_tests::clients::{
    held_snapshot, new_client, subscribe_projects, sync_idle, task_values, upsert_task,
};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name};
use syncular_integration_tests::lifecycle::{
    assert_call_refused_in_transaction,
    admin, count, db_error, horizon_seq, ids, max_commit_seq, now_ms, server_held, sub_starts,
    DAY_MS,
};
use syncular_integration_tests::transport::PgTransport;

// ---------------------------------------------------------------------------------------------
// 1. CALL syncular.prune

#[derive(Debug, PartialEq, Eq)]
struct PruneCounts {
    partitions: i32,
    commits: i64,
    push_results: i64,
    clients: i64,
}

/// How the scenario prunes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    /// `CALL syncular.prune(partition, batch_rows)` (outside a transaction block).
    Procedure,
    /// What the procedure does, one statement (= one transaction) at a time:
    /// `syncular.advance_horizon`, then `syncular.prune_batch` until `done`.
    BatchFunctions,
}

fn prune(conn: &mut Client, via: Via, partition: &str, batch_rows: i32) -> PruneCounts {
    match via {
        Via::Procedure => {
            let row = conn
                .query_one("CALL syncular.prune($1, $2)", &[&partition, &batch_rows])
                .unwrap_or_else(|e| panic!("CALL syncular.prune($1, {batch_rows}) outside a transaction block failed: {:?}", db_error(&e)));
            PruneCounts {
                partitions: row.get("partitions"),
                commits: row.get("commits"),
                push_results: row.get("push_results"),
                clients: row.get("clients"),
            }
        }
        Via::BatchFunctions => {
            conn.query_one("SELECT syncular.advance_horizon($1)", &[&partition])
                .expect("advance_horizon");
            let mut n = PruneCounts {
                partitions: 1,
                commits: 0,
                push_results: 0,
                clients: 0,
            };
            for _ in 0..1000 {
                let b = conn
                    .query_one(
                        "SELECT commits, push_results, clients, fence_busy, done FROM syncular.prune_batch($1, $2)",
                        &[&partition, &batch_rows],
                    )
                    .expect("prune_batch");
                let (commits, results, clients): (i64, i64, i64) = (b.get(0), b.get(1), b.get(2));
                let (busy, done): (bool, bool) = (b.get(3), b.get(4));
                assert!(
                    commits <= i64::from(batch_rows),
                    "a batch is bounded: {commits} > {batch_rows}"
                );
                assert!(!busy, "nobody reads this partition's log");
                n.commits += commits;
                n.push_results += results;
                n.clients += clients;
                if done {
                    return n;
                }
            }
            panic!("prune_batch never reported done");
        }
    }
}

/// Regression test (failed before a0fadbd): the procedure's body called
/// `pg_catalog.coalesce(names, ARRAY[]::text[])` (sql/lifecycle.sql and the 0.1.0→0.2.0 upgrade
/// script) — COALESCE is SQL syntax, not a function, so every `CALL syncular.prune(…)` failed
/// with 42883 `function pg_catalog.coalesce(text[], text[]) does not exist`.
#[test]
fn lifecycle_prune_procedure_keeps_the_newest_1000_commits_and_a_laggard_converges() {
    prune_scenario(Via::Procedure);
}

#[test]
fn lifecycle_prune_batch_functions_keep_the_newest_1000_commits_and_a_laggard_converges() {
    prune_scenario(Via::BatchFunctions);
}

/// A partition with > 1,000 commits, one client C that synced early and then went away:
/// pruning keeps the horizon at C's cursor while C is active, keeps exactly the newest 1,000
/// commits once C is inactive (`syncular.now_ms` 15 days ahead on the operator's session), C
/// converges through `reset` (`sync.cursor_expired`) and re-bootstrap, and 31 days ahead its
/// client record expires.
fn prune_scenario(via: Via) {
    let mut op = admin();
    let partition = partition_name(if via == Via::Procedure {
        "prune-call"
    } else {
        "prune-batches"
    });
    let allowed = allow_projects(&["p1"]);

    // C syncs two commits (ten rows), then stays away.
    let mut c = new_client("prune-c").expect("client C");
    subscribe_projects(&mut c, "c-tasks", &["p1"]).unwrap();
    let mut tc = PgTransport::new(connect(), &partition, "carl", Some(allowed.clone()));
    c.mutate(
        (0..5)
            .map(|i| upsert_task(task_values(&format!("r{i}"), "p1", "v0", false, None)))
            .collect(),
    )
    .unwrap();
    c.mutate(
        (5..10)
            .map(|i| upsert_task(task_values(&format!("r{i}"), "p1", "v0", false, None)))
            .collect(),
    )
    .unwrap();
    sync_idle(&mut c, &mut tc, 12).unwrap();
    let c_cursor: i64 = op
        .query_one("SELECT cursor FROM syncular.sync_clients WHERE partition = $1 AND client_id = 'prune-c'", &[&partition])
        .unwrap()
        .get(0);
    assert_eq!(c_cursor, 2);

    // ~1,200 captured plain-SQL commits: updates, a few deletes (tombstones in the pruned range)
    // and inserts.
    let mut writer = connect();
    writer
        .batch_execute(&format!("SET syncular.partition = '{partition}'"))
        .unwrap();
    writer
        .batch_execute(
            "DO $$ BEGIN
               FOR i IN 1..1500 LOOP
                 UPDATE public.tasks SET title = 'rev ' || i, done = (i % 2 = 0)
                  WHERE _sync_partition = current_setting('syncular.partition') AND id = 'r' || (i % 10);
                 IF i = 7 THEN
                   DELETE FROM public.tasks WHERE _sync_partition = current_setting('syncular.partition') AND id IN ('r1', 'r3');
                 END IF;
                 IF i % 150 = 0 THEN
                   INSERT INTO public.tasks (id, project_id, title, done, priority) VALUES ('n' || i, 'p1', 'new ' || i, false, i);
                 END IF;
               END LOOP;
             END $$",
        )
        .unwrap();
    let max = max_commit_seq(&mut op, &partition);
    assert!(max > 1100, "enough commits to prune: {max}");
    assert_eq!(count(&mut op, "sync_commits", &partition), max);

    // Now: C is active and holds the horizon at its cursor.
    let n = prune(&mut op, via, &partition, 100);
    assert_eq!(
        (n.partitions, n.commits, n.push_results, n.clients),
        (1, c_cursor, 0, 0)
    );
    assert_eq!(
        horizon_seq(&mut op, &partition),
        c_cursor,
        "an active laggard holds the horizon"
    );
    let stats = op
        .query_one("SELECT * FROM syncular.partition_stats($1)", &[&partition])
        .unwrap();
    assert_eq!(
        stats
            .get::<_, Option<String>>("laggard_client_id")
            .as_deref(),
        Some("prune-c")
    );
    assert_eq!(stats.get::<_, i64>("retained_commits"), max - c_cursor);

    // Fifteen days later C is no longer active: everything but the newest 1,000 commits goes.
    op.batch_execute(&format!(
        "SET syncular.now_ms = '{}'",
        now_ms() + 15 * DAY_MS
    ))
    .unwrap();
    let stats = op
        .query_one("SELECT * FROM syncular.partition_stats($1)", &[&partition])
        .unwrap();
    assert_eq!(stats.get::<_, i64>("active_clients"), 0);
    assert_eq!(stats.get::<_, i64>("prune_target"), max - 1000);
    let n = prune(&mut op, via, &partition, 75);
    assert_eq!(
        (n.partitions, n.commits, n.push_results, n.clients),
        (1, max - 1000 - c_cursor, 0, 0)
    );
    assert_eq!(horizon_seq(&mut op, &partition), max - 1000);
    assert_eq!(
        count(&mut op, "sync_commits", &partition),
        1000,
        "exactly the newest 1,000 commits stay"
    );
    let lowest: i64 = op
        .query_one(
            "SELECT min(commit_seq) FROM syncular.sync_commits WHERE partition = $1",
            &[&partition],
        )
        .unwrap()
        .get(0);
    assert_eq!(lowest, max - 999);
    let stale: i64 = op
        .query_one(
            "SELECT (SELECT count(*) FROM syncular.sync_changes WHERE partition = $1 AND commit_seq <= $2)
                  + (SELECT count(*) FROM syncular.sync_change_scopes WHERE partition = $1 AND commit_seq <= $2)
                  + (SELECT count(*) FROM syncular.sync_tombstones WHERE partition = $1 AND commit_seq <= $2)",
            &[&partition, &(max - 1000)],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        stale, 0,
        "no change, change-scope entry or tombstone at or below the horizon"
    );
    assert_eq!(
        count(&mut op, "sync_push_results", &partition),
        2,
        "C's push outcomes are kept"
    );
    // A second pass has nothing to do.
    let n = prune(&mut op, via, &partition, 75);
    assert_eq!(
        (n.partitions, n.commits, n.push_results, n.clients),
        (1, 0, 0, 0)
    );
    op.batch_execute("RESET syncular.now_ms").unwrap();

    // C comes back with cursor 2 < horizon: reset (sync.cursor_expired), re-bootstrap, converged.
    let first = tc.responses.len();
    let report = sync_idle(&mut c, &mut tc, 12).expect("C recovers");
    assert_eq!(report.resets, ["c-tasks"], "{report:?}");
    let starts = sub_starts(&tc.responses[first..]);
    assert_eq!(
        starts.first().map(|s| (s.1, s.2.as_str())),
        Some((SubStatus::Reset, "sync.cursor_expired")),
        "{starts:?}"
    );
    let server = server_held(&mut op, &partition);
    assert!(
        !ids(&server).contains(&"r1") && ids(&server).contains(&"n1500"),
        "{:?}",
        ids(&server)
    );
    assert_eq!(
        held_snapshot(&c).unwrap(),
        server,
        "C holds exactly the server's rows, deleted ones gone"
    );
    assert_eq!(c.subscription_state("c-tasks").unwrap().cursor, max);

    // Thirty-one days later C's client record has expired as well.
    op.batch_execute(&format!(
        "SET syncular.now_ms = '{}'",
        now_ms() + 31 * DAY_MS
    ))
    .unwrap();
    let n = prune(&mut op, via, &partition, 75);
    op.batch_execute("RESET syncular.now_ms").unwrap();
    assert_eq!(
        (n.partitions, n.commits, n.push_results, n.clients),
        (1, 0, 0, 1)
    );
    assert_eq!(count(&mut op, "sync_clients", &partition), 0);
    assert_eq!(
        horizon_seq(&mut op, &partition),
        max - 1000,
        "the newest 1,000 still stay"
    );

    if via == Via::Procedure {
        // Inside a transaction block the procedure cannot COMMIT between batches: refused.
        assert_call_refused_in_transaction(&mut op, "CALL syncular.prune($1, 100)", &[&partition]);
    }
}
