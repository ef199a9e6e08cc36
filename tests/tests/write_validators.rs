//! Write validators (§6.7) across connections: a validator runs once per
//! idempotency key even when the same commit is delivered on several
//! connections at once (the later deliveries wait for the first and replay
//! its stored outcome), and a rejection is replayed, not re-validated.

use std::sync::{Arc, Barrier};
use std::thread;

use serde_json::{json, Value};
use syncular_integration_tests::bump::{Scratch, PARTITION};

/// `syncular.commit` of one upsert of `id` under a fixed client and commit id.
fn deliver(c: &mut postgres::Client, commit_id: &str, id: &str, title: &str) -> Result<Value, postgres::Error> {
    let ops = json!([{"table": "cards", "op": "upsert", "row": {"id": id, "ws": "w1", "title": title}}]);
    Ok(c.query_one(
        "SELECT syncular.commit($1, 'alice', $2::text::jsonb, client_id => 'dup-client', client_commit_id => $3, \
                                allowed_scopes => '{\"ws\": [\"*\"]}')",
        &[&PARTITION, &ops.to_string(), &commit_id],
    )?
    .get(0))
}

/// Validator calls so far: a sequence counts them, rolled back or not.
fn calls(c: &mut postgres::Client) -> i64 {
    let r = c.query_one("SELECT last_value, is_called FROM public.validator_calls", &[]).unwrap();
    if r.get::<_, bool>(1) {
        r.get(0)
    } else {
        0
    }
}

/// A scratch database whose `cards` validator counts its calls and rejects
/// titles starting with `bad` (`card.bad`).
fn with_counting_validator(label: &str) -> Scratch {
    let db = Scratch::new(label);
    db.connect()
        .batch_execute(
            "CREATE SEQUENCE public.validator_calls; \
             CREATE FUNCTION public.count_calls(write jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$ BEGIN \
               PERFORM nextval('public.validator_calls'); \
               IF write->'row'->>'title' LIKE 'bad%' THEN \
                 RETURN jsonb_build_object('code', 'card.bad', 'message', 'bad title'); \
               END IF; \
               RETURN NULL; END $$; \
             SELECT syncular.set_write_validator('cards', 'public.count_calls(jsonb)');",
        )
        .unwrap();
    db
}

#[test]
fn overlapping_deliveries_of_one_commit_run_its_validator_once() {
    let db = with_counting_validator("valonce");
    let keys = 25;
    let connections = 4;
    let start = Arc::new(Barrier::new(connections));
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (mut c, start) = (db.connect(), Arc::clone(&start));
            thread::spawn(move || -> Vec<String> {
                start.wait();
                (0..keys)
                    .map(|k| {
                        let r = deliver(&mut c, &format!("commit-{k}"), &format!("k{k}"), &format!("title-{k}")).unwrap();
                        r["status"].as_str().unwrap_or("?").to_owned()
                    })
                    .collect()
            })
        })
        .collect();
    let statuses: Vec<Vec<String>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    for k in 0..keys {
        let of_key: Vec<&str> = statuses.iter().map(|s| s[k].as_str()).collect();
        assert_eq!(of_key.iter().filter(|s| **s == "applied").count(), 1, "key {k}: {of_key:?}");
        assert!(of_key.iter().all(|s| *s == "applied" || *s == "cached"), "key {k}: {of_key:?}");
    }
    let mut c = db.connect();
    assert_eq!(calls(&mut c), keys as i64, "one validator call per idempotency key");
    let commits: i64 = c.query_one("SELECT count(*) FROM syncular.sync_commits WHERE partition = $1", &[&PARTITION]).unwrap().get(0);
    assert_eq!(commits, keys as i64);
}

#[test]
fn a_rejected_commit_replays_its_rejection_without_validating_again() {
    let db = with_counting_validator("valreplay");
    let mut first = db.connect();
    let mut tx = first.transaction().unwrap();
    let ops = json!([{"table": "cards", "op": "upsert", "row": {"id": "k1", "ws": "w1", "title": "bad one"}}]);
    let rejected: Value = tx
        .query_one(
            "SELECT syncular.commit($1, 'alice', $2::text::jsonb, client_id => 'dup-client', client_commit_id => 'r1', \
                                    allowed_scopes => '{\"ws\": [\"*\"]}')",
            &[&PARTITION, &ops.to_string()],
        )
        .unwrap()
        .get(0);
    assert_eq!((rejected["status"].as_str(), rejected["results"][0]["code"].as_str()), (Some("rejected"), Some("card.bad")));
    // A second delivery while the first is still open waits for it, then replays.
    let second = {
        let mut c = db.connect();
        thread::spawn(move || deliver(&mut c, "r1", "k1", "bad one").unwrap())
    };
    thread::sleep(std::time::Duration::from_millis(300));
    assert!(!second.is_finished(), "the second delivery waits for the first");
    tx.commit().unwrap();
    let replayed = second.join().unwrap();
    assert_eq!((replayed["status"].as_str(), replayed["results"][0]["code"].as_str()), (Some("rejected"), Some("card.bad")));
    let mut c = db.connect();
    assert_eq!(calls(&mut c), 1, "the replay did not call the validator");
    let rows: i64 = c.query_one("SELECT count(*) FROM public.cards", &[]).unwrap().get(0);
    assert_eq!(rows, 0);
}

/// §6.8: candidate-state validation needs the partition serialized. The
/// commit validator allows at most two cards; one exists. A commit adding a
/// second is left open while another connection commits a third card (a
/// different row): the second one must wait for the first and then see its
/// card — rejected — instead of validating against a state without it and
/// leaving three cards.
#[test]
fn a_commit_validator_sees_the_commits_before_it_in_its_partition() {
    let db = Scratch::new("valserial");
    let mut admin = db.connect();
    admin
        .batch_execute(
            "CREATE FUNCTION public.at_most_two(commit jsonb) RETURNS jsonb LANGUAGE sql AS $$ \
               SELECT CASE WHEN (SELECT count(*) FROM public.cards WHERE _sync_partition = commit->>'partition') > 2 \
                 THEN '{\"code\": \"cards.full\"}'::jsonb END $$; \
             SELECT syncular.set_commit_validator('public.at_most_two(jsonb)');",
        )
        .unwrap();
    assert_eq!(deliver(&mut admin, "seed", "a", "x").unwrap()["status"], "applied");
    let mut first = db.connect();
    let mut tx = first.transaction().unwrap();
    let ops = json!([{"table": "cards", "op": "upsert", "row": {"id": "b", "ws": "w1", "title": "x"}}]);
    let r: Value = tx
        .query_one(
            "SELECT syncular.commit($1, 'alice', $2::text::jsonb, allowed_scopes => '{\"ws\": [\"*\"]}')",
            &[&PARTITION, &ops.to_string()],
        )
        .unwrap()
        .get(0);
    assert_eq!(r["status"], "applied");
    let second = {
        let mut c = db.connect();
        thread::spawn(move || deliver(&mut c, "third", "c", "y").unwrap())
    };
    thread::sleep(std::time::Duration::from_millis(400));
    assert!(!second.is_finished(), "the second commit waits for the open one");
    tx.commit().unwrap();
    let third = second.join().unwrap();
    assert_eq!((third["status"].as_str(), third["results"][0]["code"].as_str()), (Some("rejected"), Some("cards.full")), "{third}");
    let cards: i64 = admin.query_one("SELECT count(*) FROM public.cards", &[]).unwrap().get(0);
    assert_eq!(cards, 2);
}
