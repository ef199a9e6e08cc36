//! A schema bump (`register_schema` of a higher version that widens a
//! table, rewriting its stored payloads) and the requests around it: a
//! request reads the schema marker in its first statements and the app rows
//! later, so a bump committed in between would have it decode rewritten
//! payloads with the old layout (`syncular.internal: stored payload … does
//! not decode`) or store old-layout payloads in the widened table. The
//! schema fence (`store::schema_store::SCHEMA_FENCE_CLASS`) orders them: a
//! bump waits for the requests in flight, requests arriving meanwhile wait
//! for the bump and then use the new layout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use syncular_integration_tests::bump::{assert_every_row_updates, register, spawn, upsert, Scratch, PARTITION};

fn assert_applied(result: &serde_json::Value, what: &str) {
    assert_eq!(result["status"], "applied", "{what}: {result}");
}

#[test]
fn requests_arriving_during_a_bump_wait_for_it_and_write_the_new_layout() {
    let db = Scratch::new("open");
    let mut seed = db.connect();
    assert_applied(&upsert(&mut seed, "k1", "a", None).unwrap(), "seed");

    // The bump, left open: the table is widened and its payloads rewritten.
    let mut bump = db.connect();
    let mut tx = bump.transaction().unwrap();
    register(&mut tx, 2).unwrap();

    // An update of a rewritten row and an insert, both arriving now.
    let update = {
        let mut c = db.connect();
        spawn(move || upsert(&mut c, "k1", "b", None).map_err(|e| e.to_string()))
    };
    let insert = {
        let mut c = db.connect();
        spawn(move || upsert(&mut c, "k2", "c", None).map_err(|e| e.to_string()))
    };
    assert!(update.recv_timeout(Duration::from_millis(700)).is_err(), "an update ran while a bump was open");
    assert!(insert.recv_timeout(Duration::from_millis(100)).is_err(), "an insert ran while a bump was open");
    tx.commit().unwrap();

    let updated = update.recv_timeout(Duration::from_secs(30)).expect("update finished").expect("update succeeded");
    assert_applied(&updated, "update after the bump");
    let inserted = insert.recv_timeout(Duration::from_secs(30)).expect("insert finished").expect("insert succeeded");
    assert_applied(&inserted, "insert after the bump");
    // Both rows hold version-2 payloads: each decodes for an update.
    assert_every_row_updates(&mut seed, "c2");
}

#[test]
fn a_bump_waits_for_an_open_request_transaction() {
    let db = Scratch::new("wait");
    let mut writer = db.connect();
    let mut tx = writer.transaction().unwrap();
    assert_applied(&upsert(&mut tx, "k1", "a", None).unwrap(), "first commit");

    let bump = {
        let mut c = db.connect();
        spawn(move || register(&mut c, 2).map_err(|e| e.to_string()))
    };
    assert!(bump.recv_timeout(Duration::from_millis(700)).is_err(), "the bump did not wait for the open request");
    // The open transaction goes on with the layout it started with.
    assert_applied(&upsert(&mut tx, "k1", "b", None).unwrap(), "second commit in the open transaction");
    assert_applied(&upsert(&mut tx, "k2", "c", None).unwrap(), "third commit in the open transaction");
    tx.commit().unwrap();
    bump.recv_timeout(Duration::from_secs(30)).expect("bump finished").expect("bump succeeded");
    assert_every_row_updates(&mut writer, "c2");
}

#[test]
fn bumps_under_push_and_plain_sql_traffic_lose_nothing() {
    let db = Scratch::new("load");
    let stop = Arc::new(AtomicBool::new(false));
    let pushers: Vec<_> = (0..3)
        .map(|w| {
            let (mut c, stop) = (db.connect(), Arc::clone(&stop));
            thread::spawn(move || -> Result<usize, String> {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let id = format!("k{}", n % 12);
                    let result = upsert(&mut c, &id, &format!("w{w}-{n}"), None).map_err(|e| format!("push {n}: {e:?}"))?;
                    if result["status"] != "applied" {
                        return Err(format!("push {n}: {result}"));
                    }
                    n += 1;
                }
                Ok(n)
            })
        })
        .collect();
    // Captured plain SQL writes of the same rows.
    let plain = {
        let (mut c, stop) = (db.connect(), Arc::clone(&stop));
        thread::spawn(move || -> Result<usize, String> {
            c.execute("SELECT set_config('syncular.partition', $1, false)", &[&PARTITION]).map_err(|e| e.to_string())?;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                c.execute("UPDATE public.cards SET title = $1 WHERE id = $2", &[&format!("sql-{n}"), &format!("k{}", n % 12)])
                    .map_err(|e| format!("plain update {n}: {e:?}"))?;
                n += 1;
            }
            Ok(n)
        })
    };
    let mut admin = db.connect();
    let last = 6;
    for v in 2..=last {
        thread::sleep(Duration::from_millis(300));
        register(&mut admin, v).unwrap_or_else(|e| panic!("bump to version {v}: {e:?}"));
    }
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for (w, p) in pushers.into_iter().enumerate() {
        let n = p.join().unwrap().unwrap_or_else(|e| panic!("pusher {w}: {e}"));
        assert!(n > 0, "pusher {w} pushed nothing");
    }
    plain.join().unwrap().unwrap_or_else(|e| panic!("plain writer: {e}"));
    // The log is dense and every row decodes under the last layout.
    let (commits, max_seq): (i64, i64) = {
        let r = admin
            .query_one(
                "SELECT count(*), max(commit_seq) FROM syncular.sync_commits WHERE partition = $1",
                &[&PARTITION],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(commits, max_seq, "commitSeq has gaps");
    assert_every_row_updates(&mut admin, &format!("c{last}"));
}
