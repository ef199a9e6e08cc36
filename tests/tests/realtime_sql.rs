//! The realtime SQL surface over a real connection (issue 8, SPEC §8.7,
//! §10.1): `syncular.refresh_scopes` notifies `syncular_scopes` only at
//! COMMIT, in commit order with the commit notifications on one listening
//! connection; the §10.1 DETAIL reaches a client driver intact.

use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::Client;
use ssp2::model::PushStatus;
use syncular_integration_tests::connect;
use syncular_integration_tests::fixtures::{allow_projects, partition_name, register_schema};
use syncular_integration_tests::notify::{expected_payload, notification_key, tag};
use syncular_integration_tests::wire::{commit, upsert, RawSession, Task};

const QUIET: Duration = Duration::from_millis(400);

/// Every notification on `conn` until `QUIET` passes with nothing new (at
/// most 10 s), as `(channel, payload)` in arrival order.
fn drain(conn: &mut Client) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    let mut notifications = conn.notifications();
    let mut iter = notifications.timeout_iter(QUIET);
    while Instant::now() < deadline {
        match iter.next().expect("listening connection") {
            Some(n) => out.push((n.channel().to_owned(), n.payload().to_owned())),
            None => break,
        }
    }
    out
}

fn base64url(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s.as_bytes())
}

/// The signed `syncular_scopes` payload, computed here independently of the extension.
fn scopes_payload(partition: &str, actor: Option<&str>) -> String {
    let body = match actor {
        Some(a) => format!("{}:{}", base64url(partition), base64url(a)),
        None => base64url(partition),
    };
    let t = tag(notification_key(), "syncular_scopes", &body);
    format!("{body}:{t}")
}

#[test]
fn refresh_scopes_notifies_at_commit_in_commit_order_with_commits() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("refresh");
    let mut listener = connect();
    listener.batch_execute("LISTEN syncular_commit; LISTEN syncular_scopes").expect("LISTEN");
    let mut s = RawSession::new(connect(), &partition, "alice", "refresh-client", Some(allow_projects(&["p1"])));
    s.acquire_epoch().expect("epoch");
    let mine = |seen: Vec<(String, String)>, p: &str| -> Vec<(String, String)> {
        let commit_prefix = format!("{}:", base64url(p));
        seen.into_iter()
            .filter(|(c, payload)| if c == "syncular_commit" { payload.starts_with(&commit_prefix) } else { true })
            .collect()
    };

    // Nothing while the refreshing transaction is open, nothing after ROLLBACK.
    let mut app = connect();
    let mut tx = app.transaction().expect("begin");
    tx.execute("SELECT syncular.refresh_scopes($1, 'alice')", &[&partition]).expect("refresh");
    assert!(mine(drain(&mut listener), &partition).is_empty(), "not before COMMIT");
    tx.rollback().expect("rollback");
    assert!(mine(drain(&mut listener), &partition).is_empty(), "never after ROLLBACK");

    // commit 1, refresh (actor), commit 2, refresh (partition): delivered in commit order.
    let out = s.push(vec![commit("c1", vec![upsert(&Task::new("a", "p1", "one"), None)])]).expect("push");
    assert_eq!(out[0].status, PushStatus::Applied);
    let mut tx = app.transaction().expect("begin");
    tx.execute("SELECT syncular.refresh_scopes($1, 'alice')", &[&partition]).expect("refresh");
    tx.commit().expect("commit");
    s.push(vec![commit("c2", vec![upsert(&Task::new("b", "p1", "two"), None)])]).expect("push");
    app.execute("SELECT syncular.refresh_scopes($1)", &[&partition]).expect("refresh all");
    let seen = mine(drain(&mut listener), &partition);
    let actor_payload = scopes_payload(&partition, Some("alice"));
    let partition_payload = scopes_payload(&partition, None);
    let from_sql: String = app
        .query_one("SELECT syncular.realtime_scopes_payload($1, 'alice')", &[&partition])
        .expect("payload")
        .get(0);
    assert_eq!(from_sql, actor_payload, "the SQL helper renders the signed payload");
    let scoped: Vec<(String, String)> = seen
        .into_iter()
        .filter(|(c, p)| c == "syncular_commit" || *p == actor_payload || *p == partition_payload)
        .collect();
    assert_eq!(
        scoped,
        vec![
            ("syncular_commit".into(), expected_payload(&partition, 1)),
            ("syncular_scopes".into(), actor_payload),
            ("syncular_commit".into(), expected_payload(&partition, 2)),
            ("syncular_scopes".into(), partition_payload),
        ]
    );
}

#[test]
fn the_10_1_object_reaches_the_driver_in_detail() {
    let mut admin = connect();
    register_schema(&mut admin).expect("register the sample schema");
    let partition = partition_name("detail");
    let mut conn = connect();
    let err = conn
        .query_one("SELECT syncular.sync($1, 'alice', '\\x53535032'::bytea)", &[&partition])
        .expect_err("a truncated request fails");
    let db = err.as_db_error().expect("a database error");
    assert_eq!(db.code().code(), "22023");
    let detail: serde_json::Value = serde_json::from_str(db.detail().expect("DETAIL")).expect("JSON DETAIL");
    assert_eq!(detail["code"], "sync.invalid_request");
    assert_eq!(detail["category"], "invalid-request");
    assert_eq!(detail["recommendedAction"], "fixRequest");
    assert_eq!(format!("sync.invalid_request: {}", detail["message"].as_str().unwrap()), db.message());
}
