//! Issue 10: pushes take their partition's sequence last, so two requests
//! writing the same rows overlap everything up to it — and must still never
//! deadlock. Two connections push, as fast as they can, requests writing the
//! same rows in opposite orders (within one commit, and across two commits
//! of one request); a third interleaves captured plain SQL UPDATEs of the
//! same rows (one row per autocommit statement: it takes the partition's
//! sequence after its row, as a push does). Every push and every statement
//! must succeed and the log must stay dense: a deadlock would surface as a
//! 40P01 error (after `deadlock_timeout`), a lost or doubled commit as a gap.

use std::sync::{Arc, Barrier};
use std::thread;

use ssp2::model::PushStatus;
use syncular_integration_tests::fixtures::{allow_all_projects, partition_name, register_schema};
use syncular_integration_tests::wire::{commit, upsert, RawSession, Task};
use syncular_integration_tests::{connect, env_usize};

const ROWS: [&str; 3] = ["x", "y", "z"];

fn task(id: &str, writer: usize, k: usize) -> Task {
    Task::new(id, "p1", format!("written by {writer} in round {k}"))
}

fn pusher(partition: String, epoch: String, writer: usize, rounds: usize, start: Arc<Barrier>) -> Result<usize, String> {
    let mut s = RawSession::new(connect(), &partition, "alice", &format!("lock-order-{writer}"), Some(allow_all_projects()));
    s.log_epoch = Some(epoch);
    let mut order: Vec<&str> = ROWS.to_vec();
    if writer % 2 == 1 {
        order.reverse();
    }
    start.wait();
    let mut applied = 0;
    for k in 0..rounds {
        // One commit writing every row in this writer's order, then two commits
        // splitting them (first rows, then the rest) in one request.
        let one = commit(format!("{writer}-{k}-a"), order.iter().map(|id| upsert(&task(id, writer, k), None)).collect());
        let (head, tail) = order.split_at(1);
        let two = vec![
            commit(format!("{writer}-{k}-b"), head.iter().map(|id| upsert(&task(id, writer, k), None)).collect()),
            commit(format!("{writer}-{k}-c"), tail.iter().map(|id| upsert(&task(id, writer, k), None)).collect()),
        ];
        for frames in [vec![one], two] {
            for outcome in s.push(frames)? {
                if outcome.status != PushStatus::Applied {
                    return Err(format!("writer {writer} round {k}: {outcome:?}"));
                }
                applied += 1;
            }
        }
    }
    Ok(applied)
}

#[test]
fn pushes_writing_the_same_rows_in_opposite_orders_never_deadlock() {
    let mut admin = connect();
    register_schema(&mut admin).unwrap();
    let partition = partition_name("lock-order");
    let mut first = RawSession::new(connect(), &partition, "alice", "lock-order-seed", Some(allow_all_projects()));
    let epoch = first.acquire_epoch().unwrap();
    let seeded = first.push(vec![commit("seed", ROWS.iter().map(|id| upsert(&task(id, 9, 0), None)).collect())]).unwrap();
    assert_eq!(seeded[0].status, PushStatus::Applied);
    let rounds = env_usize("LOCK_ORDER_ROUNDS", 150);
    let start = Arc::new(Barrier::new(3));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (partition, epoch, start) = (partition.clone(), epoch.clone(), Arc::clone(&start));
            thread::spawn(move || pusher(partition, epoch, w, rounds, start))
        })
        .collect();
    // A plain SQL writer: single-row autocommit UPDATEs (each captured as a commit).
    let sql = {
        let (partition, start) = (partition.clone(), Arc::clone(&start));
        thread::spawn(move || -> Result<usize, String> {
            let mut c = connect();
            c.batch_execute("SET statement_timeout = '20s'").map_err(|e| e.to_string())?;
            c.execute("SELECT set_config('syncular.partition', $1, false)", &[&partition]).map_err(|e| e.to_string())?;
            start.wait();
            let mut statements = 0;
            for k in 0..rounds {
                for id in ROWS {
                    let n = c
                        .execute(
                            "UPDATE public.tasks SET title = $1 WHERE _sync_partition = $2 AND id = $3",
                            &[&format!("sql round {k}"), &partition, &id],
                        )
                        .map_err(|e| syncular_integration_tests::wire::db_message(&e))?;
                    if n != 1 {
                        return Err(format!("the SQL update of {id} touched {n} rows"));
                    }
                    statements += 1;
                }
            }
            Ok(statements)
        })
    };
    let mut pushed = 0;
    for w in writers {
        pushed += w.join().expect("a pusher panicked").expect("every push applies without a deadlock");
    }
    let sql_commits = sql.join().expect("the SQL writer panicked").expect("every SQL update commits without a deadlock");
    assert_eq!(pushed, 2 * rounds * 3);
    // Dense and complete: seed + every push + every captured statement.
    let row = admin
        .query_one(
            "SELECT count(*), min(commit_seq), max(commit_seq) FROM syncular.sync_commits WHERE partition = $1",
            &[&partition],
        )
        .unwrap();
    let (count, min, max): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let expected = 1 + pushed as i64 + sql_commits as i64;
    assert_eq!((count, min, max), (expected, 1, expected));
    let counter: i64 = admin
        .query_one("SELECT max_commit_seq FROM syncular.sync_partitions WHERE partition = $1", &[&partition])
        .unwrap()
        .get(0);
    assert_eq!(counter, expected);
}
