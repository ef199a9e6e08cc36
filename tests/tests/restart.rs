//! Crash and restart (DESIGN §5.3): the server is stopped with
//! `pg_ctl -m immediate` (no shutdown checkpoint — crash recovery on start)
//! while one transaction holds an applied-but-uncommitted push. After the
//! restart the committed log, registry epoch and rows are intact, the
//! in-flight push left nothing, the next commit continues the sequence, and
//! a real client resumes incrementally from its cursor.
//!
//! Needs the server's binaries (`SYNCULAR_PG_BIN`, exported by
//! `scripts/test`) and runs `pg_ctl` as the `postgres` user when the test runs
//! as root. It restarts the whole server, so it lives alone in this binary.

use std::process::{Command, Stdio};

use ssp2::model::PushStatus;
use syncular_integration_tests::clients::{
    held_snapshot, new_client, subscribe_projects, sync_idle, task_values, upsert_task,
};
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{
    allow_projects, partition_name, register_schema, server_tasks,
};
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::{commit, upsert, RawSession, Task};

fn restart_immediately(data_directory: &str) {
    let bin = std::env::var("SYNCULAR_PG_BIN").unwrap_or_else(|_| {
        panic!(
            "SYNCULAR_PG_BIN is not set: run through scripts/test (it exports the server's bindir)"
        )
    });
    let pg_ctl = format!("{bin}/pg_ctl");
    // Keep logging where scripts/lib/pg-server.sh puts it (next to the data directory).
    let log = std::path::Path::new(data_directory)
        .parent()
        .map(|p| p.join("server.log").display().to_string())
        .unwrap_or_else(|| "/dev/null".to_owned());
    let args = [
        "-D",
        data_directory,
        "-l",
        &log,
        "-m",
        "immediate",
        "-w",
        "-t",
        "120",
        "restart",
    ];
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let mut cmd = if is_root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &pg_ctl]).args(args);
        c
    } else {
        let mut c = Command::new(&pg_ctl);
        c.args(args);
        c
    };
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run pg_ctl restart");
    assert!(
        out.status.success(),
        "pg_ctl restart failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_log_survives_an_immediate_restart_and_clients_resume() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let data_directory: String = admin
        .query_one("SHOW data_directory", &[])
        .expect("data_directory (superuser)")
        .get(0);
    let partition = partition_name("restart");
    let allowed = allow_projects(&["p1"]);

    let mut a = new_client("writer").expect("A");
    subscribe_projects(&mut a, "a", &["p1"]).expect("A subscribes");
    let mut ta = PgTransport::new(connect(), &partition, "alice", Some(allowed.clone()));
    a.mutate(vec![upsert_task(task_values(
        "t1", "p1", "before", false, None,
    ))])
    .expect("A writes");
    a.mutate(vec![upsert_task(task_values(
        "t2",
        "p1",
        "before too",
        false,
        None,
    ))])
    .expect("A writes");
    sync_idle(&mut a, &mut ta, 6).expect("A syncs");
    let mut b = new_client("reader").expect("B");
    subscribe_projects(&mut b, "b", &["p1"]).expect("B subscribes");
    let mut tb = PgTransport::new(connect(), &partition, "bob", Some(allowed.clone()));
    sync_idle(&mut b, &mut tb, 6).expect("B bootstraps");
    assert_eq!(b.subscription_state("b").expect("sub").cursor, 2);
    let epoch_before: String = admin
        .query_one(
            "SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1",
            &[&partition],
        )
        .expect("epoch")
        .get(0);

    // An applied push whose transaction is still open when the server dies.
    let mut doomed = RawSession::new(
        connect(),
        &partition,
        "alice",
        "doomed",
        Some(allowed.clone()),
    );
    doomed.acquire_epoch().expect("epoch");
    doomed.conn.batch_execute("BEGIN").expect("begin");
    let out = doomed
        .push(vec![commit(
            "lost",
            vec![upsert(&Task::new("ghost", "p1", "never committed"), None)],
        )])
        .expect("push inside the open transaction");
    assert_eq!(
        (out[0].status, out[0].commit_seq),
        (PushStatus::Applied, Some(3))
    );

    restart_immediately(&data_directory);

    let mut admin = connect();
    let epoch_after: String = admin
        .query_one(
            "SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1",
            &[&partition],
        )
        .expect("epoch after restart")
        .get(0);
    assert_eq!(
        epoch_after, epoch_before,
        "the log epoch survives a restart"
    );
    let seqs: Vec<i64> = admin
        .query(
            "SELECT commit_seq FROM syncular.sync_commits WHERE partition = $1 ORDER BY 1",
            &[&partition],
        )
        .expect("log")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        seqs,
        [1, 2],
        "committed commits survive; the in-flight one left nothing"
    );
    let ids: Vec<String> = server_tasks(&mut admin, &partition)
        .expect("rows")
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(ids, ["t1", "t2"]);

    // The clients reconnect (new connections) and carry on from their cursors.
    let mut ta = PgTransport::new(connect(), &partition, "alice", Some(allowed.clone()));
    let mut tb = PgTransport::new(connect(), &partition, "bob", Some(allowed));
    a.mutate(vec![upsert_task(task_values(
        "t3", "p1", "after", false, None,
    ))])
    .expect("A writes again");
    let report = sync_idle(&mut a, &mut ta, 6).expect("A syncs after the restart");
    assert_eq!(report.applied.len(), 1, "{report:?}");
    let report = sync_idle(&mut b, &mut tb, 6).expect("B pulls after the restart");
    assert_eq!(
        (report.commits_applied, report.segment_rows_applied),
        (1, 0),
        "incremental: {report:?}"
    );
    assert_eq!(
        b.subscription_state("b").expect("sub").cursor,
        3,
        "commit 3 is the next one, no gap"
    );
    assert_eq!(
        held_snapshot(&b).expect("B rows"),
        held_snapshot(&a).expect("A rows")
    );
}
