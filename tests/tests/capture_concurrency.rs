//! Plain SQL writers and pushing clients on one partition at once (issue 9,
//! DESIGN §4, §6 "one commit writer"): 4 connections write `public.tasks`
//! with plain SQL (each its own rows; single- and multi-row INSERT, UPDATE
//! and DELETE, autocommit and multi-statement transactions) while 4 real
//! `syncular-client` 0.15.48 clients push and pull through `syncular.sync`.
//!
//! Afterwards the log is dense (`commitSeq` exactly 1..N, no gap, no
//! duplicate, one NOTIFY each), N = statements that wrote rows + applied
//! pushes, no statement failed (no deadlock, no timeout), and the existing
//! clients after a final pull and a fresh client after its bootstrap hold
//! exactly the table's rows.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use postgres::Client;
use syncular_client::SyncClient;
use syncular_integration_tests::capture::{held_tasks, log_shape, sql_writer, LogShape};
use syncular_integration_tests::clients::{
    delete_task, new_client, subscribe_projects, sync_idle, sync_once, task_values, upsert_task,
};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_all_projects, partition_name, register_schema, server_tasks,
};
use syncular_integration_tests::notify::{parse_payload, CommitListener};
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::db_message;

const SQL_WRITERS: usize = 4;
const CLIENTS: usize = 4;
/// Loop iterations per SQL writer (each issues one to three statements).
const SQL_ROUNDS: usize = 90;
/// Local commits per client (synced in rounds of one to three commits).
const CLIENT_COMMITS: usize = 60;
const PROJECTS: [&str; 3] = ["p1", "p2", "p3"];

/// Runs one plain SQL statement, panicking with the server message on any
/// error (a deadlock or a timeout fails the test); returns the row count.
fn exec(
    conn: &mut impl postgres::GenericClient,
    writer: usize,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> u64 {
    conn.execute(sql, params)
        .unwrap_or_else(|e| panic!("SQL writer {writer}: {sql}: {}", db_message(&e)))
}

/// One SQL writer: its own rows `s{w}-{k}`; returns how many statements
/// wrote at least one row (each is one commit).
fn sql_writer_loop(w: usize, partition: &str, mut conn: Client, start: &Barrier) -> u64 {
    let mut live: Vec<usize> = Vec::new();
    let mut next = 0usize;
    let mut commits = 0u64;
    let mut count = |n: u64| {
        if n > 0 {
            commits += 1;
        }
    };
    let id = |k: usize| format!("s{w}-{k:04}");
    let project = |k: usize| PROJECTS[k % PROJECTS.len()];
    let pattern = format!("s{w}-%");
    start.wait();
    for i in 0..SQL_ROUNDS {
        match i % 6 {
            // Multi-row INSERT of three new rows.
            0 => {
                let ks = [next, next + 1, next + 2];
                next += 3;
                let n = exec(
                    &mut conn,
                    w,
                    "INSERT INTO public.tasks (id, project_id, title, done, priority)
                     VALUES ($1, $2, 'sql new', false, NULL), ($3, $4, 'sql new', true, 1), ($5, $6, 'sql new', false, 2)",
                    &[&id(ks[0]), &project(ks[0]), &id(ks[1]), &project(ks[1]), &id(ks[2]), &project(ks[2])],
                );
                assert_eq!(n, 3);
                live.extend(ks);
                count(n);
            }
            // Single-row UPDATE.
            1 => {
                if let Some(&k) = live.get(i % live.len().max(1)) {
                    let n = exec(
                        &mut conn,
                        w,
                        "UPDATE public.tasks SET title = $3 WHERE _sync_partition = $1 AND id = $2",
                        &[&partition, &id(k), &format!("sql edit {i}")],
                    );
                    assert_eq!(n, 1);
                    count(n);
                }
            }
            // Multi-row UPDATE of every own row.
            2 => {
                let n = exec(
                    &mut conn,
                    w,
                    "UPDATE public.tasks SET done = NOT done, priority = coalesce(priority, 0) + 1
                      WHERE _sync_partition = $1 AND id LIKE $2",
                    &[&partition, &pattern],
                );
                assert_eq!(n as usize, live.len());
                count(n);
            }
            // A transaction of three statements: insert, update it, delete an older row.
            3 => {
                let k = next;
                next += 1;
                let mut tx = conn.transaction().expect("begin");
                let n = exec(
                    &mut tx,
                    w,
                    "INSERT INTO public.tasks (id, project_id, title, done) VALUES ($1, $2, 'in tx', false)",
                    &[&id(k), &project(k)],
                );
                count(n);
                let n = exec(
                    &mut tx,
                    w,
                    "UPDATE public.tasks SET title = 'in tx, edited', priority = 7 WHERE _sync_partition = $1 AND id = $2",
                    &[&partition, &id(k)],
                );
                count(n);
                if live.len() > 4 {
                    let old = live.remove(0);
                    let n = exec(
                        &mut tx,
                        w,
                        "DELETE FROM public.tasks WHERE _sync_partition = $1 AND id = $2",
                        &[&partition, &id(old)],
                    );
                    assert_eq!(n, 1);
                    count(n);
                }
                tx.commit()
                    .unwrap_or_else(|e| panic!("SQL writer {w}: COMMIT: {}", db_message(&e)));
                live.push(k);
            }
            // Multi-row DELETE of two rows.
            4 => {
                if live.len() > 6 {
                    let (a, b) = (live.remove(1), live.remove(1));
                    let n = exec(
                        &mut conn,
                        w,
                        "DELETE FROM public.tasks WHERE _sync_partition = $1 AND id IN ($2, $3)",
                        &[&partition, &id(a), &id(b)],
                    );
                    assert_eq!(n, 2);
                    count(n);
                }
            }
            // Single-row INSERT.
            _ => {
                let k = next;
                next += 1;
                let n = exec(
                    &mut conn,
                    w,
                    "INSERT INTO public.tasks (id, project_id, title, done, priority) VALUES ($1, $2, 'sql single', true, -3)",
                    &[&id(k), &project(k)],
                );
                count(n);
                live.push(k);
            }
        }
    }
    commits
}

/// One pushing client: its own rows `c{w}-{k}`; returns the client and its
/// transport (for the final pull) and how many of its commits applied.
fn client_loop(
    w: usize,
    mut client: SyncClient,
    mut transport: PgTransport,
    start: &Barrier,
) -> (SyncClient, PgTransport, u64) {
    let id = |k: usize| format!("c{w}-{k:04}");
    let mut applied = 0u64;
    let mut live: Vec<usize> = Vec::new();
    let mut made = 0usize;
    start.wait();
    while made < CLIENT_COMMITS {
        let burst = 1 + made % 3;
        for _ in 0..burst.min(CLIENT_COMMITS - made) {
            let k = made;
            made += 1;
            let mutations = match k % 5 {
                // Update an own row (last-write-wins: the row is only this client's).
                3 if !live.is_empty() => {
                    let target = live[k % live.len()];
                    vec![upsert_task(task_values(
                        &id(target),
                        PROJECTS[target % 3],
                        &format!("client edit {k}"),
                        true,
                        Some(k as i64),
                    ))]
                }
                4 if live.len() > 3 => vec![delete_task(&id(live.remove(0)))],
                _ => {
                    live.push(k);
                    vec![
                        upsert_task(task_values(
                            &id(k),
                            PROJECTS[k % 3],
                            "client new",
                            false,
                            None,
                        )),
                        upsert_task(task_values(
                            &format!("{}-b", id(k)),
                            PROJECTS[(k + 1) % 3],
                            "client pair",
                            true,
                            Some(1),
                        )),
                    ]
                }
            };
            client.mutate(mutations).expect("local commit");
        }
        let report = sync_once(&mut client, &mut transport)
            .unwrap_or_else(|e| panic!("client {w}: round failed: {e}"));
        assert!(
            report.rejected.is_empty() && report.failed.is_empty() && report.conflicts == 0,
            "client {w}: {report:?}"
        );
        applied += report.applied.len() as u64;
    }
    let report =
        sync_idle(&mut client, &mut transport, 50).unwrap_or_else(|e| panic!("client {w}: {e}"));
    assert!(
        report.rejected.is_empty() && report.conflicts == 0,
        "client {w}: {report:?}"
    );
    applied += report.applied.len() as u64;
    assert!(
        client.pending_commit_ids().is_empty(),
        "client {w}: outbox drained"
    );
    (client, transport, applied)
}

#[test]
fn capture_sql_writers_and_pushing_clients_share_one_dense_log_and_converge() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("capture-concurrency");
    let mut listener = CommitListener::listen(connect()).expect("LISTEN");

    let start = Arc::new(Barrier::new(SQL_WRITERS + CLIENTS));
    let sql_handles: Vec<_> = (0..SQL_WRITERS)
        .map(|w| {
            let (partition, start) = (partition.clone(), Arc::clone(&start));
            let conn = sql_writer(&partition, Some(&format!("sql-writer-{w}")));
            thread::spawn(move || sql_writer_loop(w, &partition, conn, &start))
        })
        .collect();
    let client_handles: Vec<_> = (0..CLIENTS)
        .map(|w| {
            let mut client = new_client(&format!("capture-client-{w}")).expect("client");
            subscribe_projects(&mut client, "all", &PROJECTS).expect("subscribe");
            let transport = PgTransport::new(
                connect(),
                &partition,
                format!("actor-{w}"),
                Some(allow_all_projects()),
            );
            let start = Arc::clone(&start);
            thread::spawn(move || client_loop(w, client, transport, &start))
        })
        .collect();
    // A thread that panics before the barrier would leave the others waiting:
    // every thread reaches it before its first statement, so only a failed
    // connection could, and those are opened above, on this thread.
    let sql_commits: u64 = sql_handles
        .into_iter()
        .map(|h| h.join().expect("SQL writer"))
        .sum();
    let mut clients = Vec::new();
    let mut pushed = 0u64;
    for h in client_handles {
        let (client, transport, applied) = h.join().expect("client");
        pushed += applied;
        clients.push((client, transport));
    }

    // The log: dense 1..N, N = SQL statements that wrote rows + applied pushes.
    let n = (sql_commits + pushed) as i64;
    assert!(
        sql_commits > 200 && pushed > 100,
        "both kinds of writers ran: {sql_commits} SQL, {pushed} pushed"
    );
    assert_eq!(
        log_shape(&mut admin, &partition).expect("log shape"),
        LogShape::dense(n)
    );
    let by_kind: Vec<(bool, i64)> = admin
        .query(
            "SELECT client_id LIKE 'sql:%', count(*)::int8 FROM syncular.sync_commits WHERE partition = $1 GROUP BY 1 ORDER BY 1",
            &[&partition],
        )
        .expect("commits by kind")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        by_kind,
        [(false, pushed as i64), (true, sql_commits as i64)]
    );
    let switches: i64 = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE sql IS DISTINCT FROM prev)::int8 FROM (
               SELECT client_id LIKE 'sql:%' AS sql, lag(client_id LIKE 'sql:%') OVER (ORDER BY commit_seq) AS prev
                 FROM syncular.sync_commits WHERE partition = $1) k",
            &[&partition],
        )
        .expect("interleaving")
        .get(0);
    assert!(
        switches >= 10,
        "SQL and pushed commits interleave in the log: {switches} switches"
    );

    // One notification per commit, each sequence number once.
    let seen = listener
        .wait_for(
            &partition,
            n as usize,
            Duration::from_millis(500),
            Duration::from_secs(60),
        )
        .expect("listen");
    let seqs: Vec<i64> = seen
        .iter()
        .filter_map(|s| parse_payload(&s.payload))
        .map(|(_, seq)| seq)
        .collect();
    assert_eq!(seqs.len(), n as usize, "one NOTIFY per commit");
    assert_eq!(
        seqs.iter().copied().collect::<BTreeSet<_>>(),
        (1..=n).collect::<BTreeSet<_>>()
    );

    // Convergence: every existing client after a final pull, and a fresh
    // client after its bootstrap, hold exactly the table's rows.
    let server = server_tasks(&mut admin, &partition).expect("server rows");
    assert!(server.len() > 100, "{} rows", server.len());
    for (i, (client, transport)) in clients.iter_mut().enumerate() {
        let report = sync_idle(client, transport, 100).expect("final pull");
        assert!(report.failed.is_empty(), "{report:?}");
        assert_eq!(
            held_tasks(client).expect("held rows"),
            server,
            "client {i} converged"
        );
    }
    let mut fresh = new_client("capture-fresh").expect("fresh client");
    subscribe_projects(&mut fresh, "all", &PROJECTS).expect("subscribe");
    let mut tf = PgTransport::new(connect(), &partition, "fresh", Some(allow_all_projects()));
    let report = sync_idle(&mut fresh, &mut tf, 200).expect("fresh bootstrap");
    assert_eq!(
        report.segment_rows_applied as usize,
        server.len(),
        "{report:?}"
    );
    assert_eq!(
        held_tasks(&fresh).expect("fresh rows"),
        server,
        "the fresh client converged"
    );
}
