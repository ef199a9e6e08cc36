//! Schema bumps racing everything else that reads the schema: REPEATABLE
//! READ and SERIALIZABLE callers (their snapshot predates the fence: 40001,
//! never an old-layout write), captured plain SQL in REPEATABLE READ,
//! `realtime_deltas` (never a new-layout commit for an old-version group),
//! `drop_partition_batch` against a table retirement, `lock_timeout`, two
//! migrations that each made a request first, and pulls (bootstrap and
//! incremental) under pushes and bumps. Found by a break attempt on the
//! schema fence; each test states the behaviour docs/src/sql/schema.md promises.

use std::thread;
use std::time::Duration;

use postgres::Client;
use serde_json::json;
use syncular_integration_tests::bump::{assert_every_row_updates, err_text, ir, register, spawn, sqlstate, upsert, Scratch, PARTITION};

/// A `syncular.commit` under `isolation` that starts while a bump is open:
/// its snapshot predates the bump's COMMIT, so it must fail with 40001
/// (retry), never write the old layout into the widened table.
fn commit_waiting_on_a_bump_under(isolation: &'static str) {
    let db = Scratch::new(if isolation == "serializable" { "sercommit" } else { "rrcommit" });
    let mut seed = db.connect();
    assert_eq!(upsert(&mut seed, "k1", "a", None).unwrap()["status"], "applied");
    let mut bump = db.connect();
    let mut tx = bump.transaction().unwrap();
    register(&mut tx, 2).unwrap();
    let insert = {
        let mut c = db.connect();
        c.batch_execute(&format!("SET default_transaction_isolation = '{isolation}'")).unwrap();
        spawn(move || upsert(&mut c, "k2", "c", None).map_err(|e| sqlstate(&e)))
    };
    assert!(insert.recv_timeout(Duration::from_millis(700)).is_err(), "the commit waits for the bump");
    tx.commit().unwrap();
    let inserted = insert.recv_timeout(Duration::from_secs(30)).expect("commit finished");
    assert_eq!(inserted.map(|v| v.to_string()), Err("40001".to_string()), "{isolation}");
    assert_every_row_updates(&mut seed, "c2");
    // A retry (a new transaction, a new snapshot) succeeds under the new layout.
    let mut retry = db.connect();
    retry.batch_execute(&format!("SET default_transaction_isolation = '{isolation}'")).unwrap();
    assert_eq!(upsert(&mut retry, "k2", "c", Some(("c2", "v2"))).unwrap()["status"], "applied");
    assert_every_row_updates(&mut seed, "c2");
}

#[test]
fn a_repeatable_read_commit_waiting_on_a_bump_fails_with_40001() {
    commit_waiting_on_a_bump_under("repeatable read");
}

#[test]
fn a_serializable_commit_waiting_on_a_bump_fails_with_40001() {
    commit_waiting_on_a_bump_under("serializable");
}

/// A captured plain SQL INSERT in a REPEATABLE READ transaction whose
/// snapshot predates a bump: 40001, not an old-layout payload.
#[test]
fn a_repeatable_read_plain_sql_insert_after_a_bump_fails_with_40001() {
    let db = Scratch::new("rrplain");
    let mut seed = db.connect();
    assert_eq!(upsert(&mut seed, "k1", "a", None).unwrap()["status"], "applied");
    let mut writer = db.connect();
    writer.execute("SELECT set_config('syncular.partition', $1, false)", &[&PARTITION]).unwrap();
    writer.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").unwrap();
    register(&mut db.connect(), 2).unwrap();
    let err = writer
        .batch_execute("INSERT INTO public.cards (id, ws, title) VALUES ('k9', 'w1', 'plain')")
        .expect_err("the insert must not use the old layout");
    assert_eq!(sqlstate(&err), "40001", "{}", err_text(&err));
    writer.batch_execute("ROLLBACK").unwrap();
    assert_every_row_updates(&mut seed, "c2");
}

/// realtime_deltas reads the schema marker, then (after the pruning fence) the log bounds
/// and the log. It takes no schema fence: when a bump and a commit under the new version
/// land between its marker read and its log read, a group resolved under the old version
/// is served a delta holding a new-layout payload instead of `reset-required`.
/// The window is widened deterministically with a pruning batch in progress (prune_batch
/// holds the pruning fence exclusively until its transaction ends).
#[test]
fn realtime_deltas_never_serve_a_new_layout_commit_to_an_old_version_group() {
    let db = Scratch::new("rtdelta");
    let mut writer = db.connect();
    writer.execute("SELECT set_config('syncular.partition', $1, false)", &[&PARTITION]).unwrap();
    writer
        .batch_execute(
            "DO $$ BEGIN FOR i IN 1..1100 LOOP \
               INSERT INTO public.cards (id, ws, title) VALUES ('t' || i, 'w1', 'x'); \
             END LOOP; END $$",
        )
        .unwrap();
    let mut admin = db.connect();
    let horizon: i64 = admin.query_one("SELECT syncular.advance_horizon($1)", &[&PARTITION]).unwrap().get(0);
    assert!(horizon > 0);
    let (epoch, head): (String, i64) = {
        let r = admin
            .query_one(
                "SELECT r.log_epoch, (SELECT max(commit_seq) FROM syncular.sync_commits WHERE partition = $1) \
                 FROM syncular.sync_partition_registry r WHERE r.partition = $1",
                &[&PARTITION],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };

    // A pruning batch in progress: holds the partition's pruning fence exclusively.
    let mut pruner = db.connect();
    pruner.batch_execute("BEGIN").unwrap();
    let pruned: i64 = pruner.query_one("SELECT commits FROM syncular.prune_batch($1, 10)", &[&PARTITION]).unwrap().get(0);
    assert!(pruned > 0, "the batch deleted something (holds the fence)");

    // The gateway's delta call for sessions opened under version 1, at the head.
    let groups = json!([{
        "registrations": [{"id": "s1", "table": "cards", "effective": {"ws": ["w1"]}}],
        "schemaVersion": 1, "logEpoch": epoch, "wireVersion": 2, "cursor": head, "suppressed": false,
    }]);
    let deltas = {
        let mut c = db.connect();
        spawn(move || {
            c.query("SELECT kind, cursor, delta FROM syncular.realtime_deltas($1, $2)", &[&PARTITION, &groups])
                .map(|rows| rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1), r.get::<_, Option<Vec<u8>>>(2))).collect::<Vec<_>>())
                .map_err(|e| err_text(&e))
        })
    };
    assert!(deltas.recv_timeout(Duration::from_millis(500)).is_err(), "the delta call waits for the pruning batch");

    // Meanwhile: a bump to version 2 and a commit under it (on a thread: with a schema
    // fence in realtime_deltas, the bump waits for the delta call).
    let bumped = spawn(move || {
        register(&mut admin, 2).map_err(|e| err_text(&e))?;
        upsert(&mut admin, "new", "v2 row", Some(("c2", "hello"))).map_err(|e| err_text(&e))
    });
    let early = bumped.recv_timeout(Duration::from_millis(700));
    pruner.batch_execute("COMMIT").unwrap();

    let out = deltas.recv_timeout(Duration::from_secs(30)).expect("deltas finished").expect("deltas succeeded");
    let bumped = match early {
        Ok(r) => r,
        Err(_) => bumped.recv_timeout(Duration::from_secs(30)).expect("bump finished"),
    };
    assert_eq!(bumped.expect("bump and v2 commit")["status"], "applied");
    eprintln!("realtime_deltas: {:?}", out.iter().map(|(k, c, d)| (k, c, d.as_ref().map(Vec::len))).collect::<Vec<_>>());
    // A version-1 group may get `none` (the call ran before the bump) or `reset-required`
    // (after it), never a delta holding the version-2 commit.
    assert!(
        out[0].0 != "delta" && (out[0].0 == "reset-required" || out[0].1 == head),
        "a version-1 group got {:?} through {} after the bump (delta bytes {:?})",
        out[0].0,
        out[0].1,
        out[0].2
    );
}

/// A request waiting on an open bump with lock_timeout set surfaces 55P03 (docs/src/sql/schema.md: "set
/// lock_timeout to bound the wait").
#[test]
fn a_request_waiting_on_a_bump_with_lock_timeout_fails_with_55p03() {
    let db = Scratch::new("locktimeout");
    let mut bump = db.connect();
    let mut tx = bump.transaction().unwrap();
    register(&mut tx, 2).unwrap();
    let mut c = db.connect();
    c.batch_execute("SET lock_timeout = '300ms'").unwrap();
    let e = upsert(&mut c, "k1", "a", None).expect_err("times out");
    assert_eq!(sqlstate(&e), "55P03");
    tx.rollback().unwrap();
}

/// Two migrations, each of which made a request and then registers: both
/// hold the fence shared and want it exclusively — Postgres detects the
/// deadlock (40P01) and the other one goes through.
#[test]
fn two_migrations_that_each_made_a_request_first_end_in_one_deadlock_error_at_most() {
    let db = Scratch::new("twomig");
    let mut a = db.connect();
    let mut b = db.connect();
    let commit_in = |c: &mut Client, p: &str, id: &str| {
        let ops = json!([{"table": "cards", "op": "upsert", "row": {"id": id, "ws": "w1", "title": "x"}}]);
        c.query_one(
            "SELECT syncular.commit($1, 'alice', $2::text::jsonb, allowed_scopes => '{\"ws\": [\"*\"]}')",
            &[&p, &ops.to_string()],
        )
        .map(|_| ())
        .map_err(|e| err_text(&e))
    };
    // First use creates shared rows (the notification key): outside the transactions.
    commit_in(&mut a, "pa", "a0").unwrap();
    commit_in(&mut b, "pb", "b0").unwrap();
    a.batch_execute("BEGIN").unwrap();
    b.batch_execute("BEGIN").unwrap();
    commit_in(&mut a, "pa", "a1").unwrap();
    commit_in(&mut b, "pb", "b1").unwrap();
    let ra = spawn(move || {
        let r = register(&mut a, 2).map_err(|e| sqlstate(&e));
        let _ = a.batch_execute(if r.is_ok() { "COMMIT" } else { "ROLLBACK" });
        r
    });
    thread::sleep(Duration::from_millis(300));
    let rb = register(&mut b, 2).map_err(|e| sqlstate(&e));
    let _ = b.batch_execute(if rb.is_ok() { "COMMIT" } else { "ROLLBACK" });
    let ra = ra.recv_timeout(Duration::from_secs(30)).expect("a finished");
    assert!(ra.is_ok() || rb.is_ok(), "both failed: {ra:?} {rb:?}");
    for r in [&ra, &rb] {
        if let Err(state) = r {
            assert_eq!(state, "40P01", "{ra:?} {rb:?}");
        }
    }
}

/// drop_partition_batch reads the schema behind the schema fence and then deletes from
/// every app table, racing a bump that retires a table (allow_drop): the batch waits for
/// the bump or the bump for the batch, and the batch succeeds either way.
#[test]
fn drop_partition_batch_racing_a_table_retirement_succeeds() {
    let db = Scratch::new("dropretire");
    let two = json!({"version": 2, "tables": [
        ir(1)["tables"][0].clone(),
        {"name": "old", "primaryKey": "id", "columns": [
            {"name": "id", "type": "string", "nullable": false},
            {"name": "ws", "type": "string", "nullable": false}], "scopes": ["ws:{ws}"]}]});
    let three = json!({"version": 3, "tables": [ir(1)["tables"][0].clone()]});
    let mut admin = db.connect();
    admin.execute("SELECT syncular.register_schema($1::text::jsonb)", &[&two.to_string()]).unwrap();
    assert_eq!(upsert(&mut admin, "k1", "a", None).unwrap()["status"], "applied");

    let mut bump = db.connect();
    let mut tx = bump.transaction().unwrap();
    tx.execute("SELECT syncular.register_schema($1::text::jsonb, 'public', true)", &[&three.to_string()]).unwrap();
    let dropper = {
        let mut c = db.connect();
        spawn(move || c.query_one("SELECT rows_deleted FROM syncular.drop_partition_batch($1, 100)", &[&PARTITION]).map(|r| r.get::<_, i64>(0)).map_err(|e| err_text(&e)))
    };
    let early = dropper.recv_timeout(Duration::from_millis(500));
    tx.commit().unwrap();
    let out = match early {
        Ok(r) => r,
        Err(_) => dropper.recv_timeout(Duration::from_secs(30)).expect("drop finished"),
    };
    assert!(out.is_ok(), "drop_partition_batch failed: {out:?}");
}

/// Bootstrap and incremental pulls (wire bytes through syncular.sync, wire v2) racing
/// pushes and bumps v2..v6 in READ COMMITTED: no request errors, every served rows
/// segment decodes.
#[test]
fn pulls_under_bumps_and_pushes_serve_only_decodable_segments() {
    use ssp2::model::{Frame, Message, MsgKind};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let db = Scratch::new("pulls");
    let mut seed = db.connect();
    for i in 0..40 {
        assert_eq!(upsert(&mut seed, &format!("k{i}"), "seed", None).unwrap()["status"], "applied");
    }
    let epoch: String = seed
        .query_one("SELECT log_epoch FROM syncular.sync_partition_registry WHERE partition = $1", &[&PARTITION])
        .unwrap()
        .get(0);
    let stop = Arc::new(AtomicBool::new(false));
    let allowed = json!({"ws": ["w1"]});
    let pullers: Vec<_> = (0..2)
        .map(|w| {
            let (mut c, stop, epoch, allowed) = (db.connect(), Arc::clone(&stop), epoch.clone(), allowed.clone());
            thread::spawn(move || -> Result<(usize, usize), String> {
                let (mut served, mut floors) = (0, 0);
                let mut cursor: i64 = -1;
                while !stop.load(Ordering::Relaxed) {
                    let v: i32 = c.query_one("SELECT syncular.current_schema_version()", &[]).unwrap().get(0);
                    // Worker 0 bootstraps every time; worker 1 goes incremental after its first bootstrap.
                    let cur = if w == 0 { -1 } else { cursor };
                    let msg = Message {
                        wire_version: 2,
                        msg_kind: MsgKind::Request,
                        frames: vec![
                            Frame::ReqHeader { client_id: format!("puller-{w}"), schema_version: v, log_epoch: Some(epoch.clone()) },
                            Frame::PullHeader { limit_commits: 50, limit_snapshot_rows: 7, max_snapshot_pages: 10, accept: 0b0011 },
                            Frame::Subscription {
                                id: "s".into(),
                                table: "cards".into(),
                                scopes: vec![("ws".to_owned(), vec!["w1".to_owned()])].into_iter().collect(),
                                params: None,
                                cursor: cur,
                                bootstrap_state: None,
                            },
                        ],
                    };
                    let bytes = ssp2::encode_message(&msg);
                    let resp = syncular_integration_tests::transport::call_sync(&mut c, PARTITION, "alice", &bytes, Some(&allowed))
                        .map_err(|e| format!("pull (v{v}): {}", err_text(&e)))?;
                    let decoded = ssp2::decode_message(&resp).map_err(|e| format!("decode response: {e}"))?;
                    let mut floor = false;
                    for f in &decoded.frames {
                        match f {
                            Frame::SegmentInline { payload } => {
                                ssp2::decode_rows_segment(payload).map_err(|e| format!("segment (v{v}): {e}"))?;
                            }
                            Frame::RespHeader { required_schema_version: Some(_), .. } => floor = true,
                            Frame::SubEnd { next_cursor, .. } => cursor = *next_cursor,
                            _ => {}
                        }
                    }
                    if floor { floors += 1 } else { served += 1 }
                }
                Ok((served, floors))
            })
        })
        .collect();
    let pusher = {
        let (mut c, stop) = (db.connect(), Arc::clone(&stop));
        thread::spawn(move || -> Result<usize, String> {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let r = upsert(&mut c, &format!("k{}", n % 50), &format!("p{n}"), None).map_err(|e| err_text(&e))?;
                if r["status"] != "applied" {
                    return Err(r.to_string());
                }
                n += 1;
            }
            Ok(n)
        })
    };
    let mut admin = db.connect();
    for v in 2..=6 {
        thread::sleep(Duration::from_millis(400));
        register(&mut admin, v).unwrap_or_else(|e| panic!("bump {v}: {}", err_text(&e)));
    }
    thread::sleep(Duration::from_millis(400));
    stop.store(true, Ordering::Relaxed);
    for (w, p) in pullers.into_iter().enumerate() {
        let r = p.join().unwrap();
        eprintln!("puller {w}: {r:?}");
        r.unwrap_or_else(|e| panic!("puller {w}: {e}"));
    }
    let n = pusher.join().unwrap().unwrap_or_else(|e| panic!("pusher: {e}"));
    eprintln!("pusher: {n}");
}
