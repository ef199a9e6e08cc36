//! Concurrent `register_schema` calls are serialized: while one
//! registration's transaction is open, a second one with the same IR waits,
//! then finds the schema registered and changes nothing (no duplicate-key or
//! duplicate-table error).

use std::sync::mpsc;
use std::time::Duration;

use syncular_integration_tests::{connect_to, dsn, dsn_for_db};

const IR: &str = r#"{"version": 1, "tables": [{"name": "cards", "primaryKey": "id",
  "columns": [{"name": "id", "type": "string", "nullable": false}, {"name": "ws", "type": "string", "nullable": false}],
  "scopes": ["ws:{ws}"]}]}"#;

#[test]
fn concurrent_registrations_of_one_ir_serialize() {
    let base = dsn();
    let mut admin = connect_to(&base);
    let db = format!("syncular_register_race_{}", std::process::id());
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {db}")).unwrap();
    let target = dsn_for_db(&base, &db);
    connect_to(&target).batch_execute("CREATE EXTENSION syncular").unwrap();

    let mut first = connect_to(&target);
    let mut tx = first.transaction().unwrap();
    tx.execute("SELECT syncular.register_schema($1::text::jsonb)", &[&IR]).unwrap();

    let (done_tx, done_rx) = mpsc::channel();
    let second_dsn = target.clone();
    let second = std::thread::spawn(move || {
        let mut second = connect_to(&second_dsn);
        let result = second.execute("SELECT syncular.register_schema($1::text::jsonb)", &[&IR]).map(|_| ());
        done_tx.send(()).unwrap();
        result
    });
    // The second registration must wait for the first transaction.
    assert!(done_rx.recv_timeout(Duration::from_millis(500)).is_err(), "second registration did not wait");
    tx.commit().unwrap();
    done_rx.recv_timeout(Duration::from_secs(30)).expect("second registration finished");
    second.join().unwrap().expect("second registration succeeds");

    let mut check = connect_to(&target);
    let versions: i64 = check.query_one("SELECT count(*) FROM syncular.sync_schema_versions", &[]).unwrap().get(0);
    assert_eq!(versions, 1);
    let tables: i64 = check.query_one("SELECT count(*) FROM pg_tables WHERE tablename = 'cards'", &[]).unwrap().get(0);
    assert_eq!(tables, 1);
    drop(check);
    drop(first);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).unwrap();
}
