//! The object-store tests' parts (docs/src/operate/object-store.md): a database of their own (the
//! tier's configuration is database-wide, so other tests never see its presigned URLs), a
//! gateway whose mover talks to a real S3 server ([`crate::s3_fixture::S3Server`]), and waits on
//! what the mover recorded.

use std::time::{Duration, Instant};

use postgres::Client;

use crate::gateway::{grant, setup, Gateway};
use crate::s3_fixture::S3Server;
use crate::{connect_to, dsn, dsn_for_db};

/// A database of its own with the sample schema and the gateway tests' resolver, dropped with
/// the value.
pub struct TierDb {
    name: String,
    /// Its connection string.
    pub dsn: String,
}

impl TierDb {
    /// Creates `syncular_objects_<label>_<pid>`.
    pub fn new(label: &str) -> TierDb {
        let name = format!("syncular_objects_{label}_{}", std::process::id());
        let mut admin = connect_to(&dsn());
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).unwrap();
        admin.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        let db = TierDb { dsn: dsn_for_db(&dsn(), &name), name };
        let mut c = db.connect();
        c.batch_execute("CREATE EXTENSION syncular").unwrap();
        setup(&mut c);
        db
    }

    /// A new connection.
    pub fn connect(&self) -> Client {
        connect_to(&self.dsn)
    }

    /// `rows` tasks `t0000000…` of project `p1` in `partition`, written with plain SQL (captured
    /// commits), and `actor` granted `p1`.
    pub fn seed_tasks(&self, partition: &str, actor: &str, rows: i64) {
        let mut c = self.connect();
        grant(&mut c, partition, actor, &["p1"]);
        c.batch_execute("SET statement_timeout = 0").unwrap();
        c.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&partition]).unwrap();
        let step = 50_000;
        let mut from = 0;
        while from < rows {
            let to = (from + step).min(rows) - 1;
            c.batch_execute(&format!(
                "INSERT INTO public.tasks (id, project_id, title, done, priority) \
                 SELECT 't' || lpad(g::text, 7, '0'), 'p1', 'task ' || g, g % 3 = 0, \
                        CASE WHEN g % 5 = 0 THEN NULL ELSE g END \
                   FROM generate_series({from}, {to}) g"
            ))
            .unwrap();
            from = to + 1;
        }
    }
}

impl Drop for TierDb {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&dsn(), postgres::NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name));
        }
    }
}

/// A gateway (`--auth dev`) on `db` whose mover uses `s3`, polling every 100 ms, plus `extra`
/// flags.
pub fn tier_gateway(db: &TierDb, s3: &S3Server, extra: &[&str]) -> Gateway {
    tier_gateway_on(&db.dsn, s3, extra)
}

/// [`tier_gateway`] on the database of `dsn`.
pub fn tier_gateway_on(dsn: &str, s3: &S3Server, extra: &[&str]) -> Gateway {
    let mut args = vec!["--object-store-interval-ms", "100"];
    args.extend_from_slice(extra);
    tier_gateway_prefixed(dsn, s3, "t/", &args)
}

/// A gateway (`--auth dev`) on the database of `dsn` whose mover uses `s3` under key prefix
/// `prefix`, plus `extra` flags; returned once its mover configured this bucket and reported it
/// healthy.
pub fn tier_gateway_prefixed(dsn: &str, s3: &S3Server, prefix: &str, extra: &[&str]) -> Gateway {
    let endpoint = s3.endpoint();
    let mut args = vec![
        "--auth",
        "dev",
        "--object-store-endpoint",
        endpoint.as_str(),
        "--object-store-bucket",
        s3.bucket(),
        "--object-store-prefix",
        prefix,
    ];
    args.extend_from_slice(extra);
    let gw = Gateway::start_with_env(
        dsn,
        &args,
        &[
            ("SYNCULAR_OBJECT_STORE_ACCESS_KEY_ID", s3.access_key_id()),
            ("SYNCULAR_OBJECT_STORE_SECRET_ACCESS_KEY", s3.secret_access_key()),
        ],
    );
    // Its mover configured this bucket and reported it healthy (a previous gateway's heartbeat
    // may still be live for a few seconds).
    let mut c = connect_to(dsn);
    let started = Instant::now();
    loop {
        let ours = c
            .query_opt("SELECT 1 FROM syncular.sync_object_store WHERE endpoint = $1", &[&endpoint])
            .unwrap()
            .is_some();
        if ours && tier_healthy(&mut c) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the mover never configured its bucket; gateway logs:\n{}",
            gw.logs.lock().unwrap().join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    gw
}

/// Polls `cond` every 50 ms until it holds; panics naming `what` after `timeout`.
pub fn eventually(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(started.elapsed() < timeout, "timed out after {timeout:?} waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One test at a time in a binary whose tests share a database: the tier's configuration is
/// database-wide (one bucket), and each test runs its own S3 server.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The integer in environment variable `var`, else `default` (row counts of the tests).
pub fn env_rows(var: &str, default: i64) -> i64 {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Whether every segment with a live publication is recorded in the bucket (and there is one).
pub fn segments_all_stored(c: &mut Client) -> bool {
    let row = c
        .query_one(
            "SELECT count(*) FILTER (WHERE o.segment_id IS NULL), count(*) \
               FROM (SELECT DISTINCT segment_id FROM syncular.sync_segment_publications \
                      WHERE expires_at_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint) p \
               LEFT JOIN syncular.sync_segment_objects o USING (segment_id)",
            &[],
        )
        .unwrap();
    let (missing, total): (i64, i64) = (row.get(0), row.get(1));
    total > 0 && missing == 0
}

/// Whether the mover's heartbeat is live.
pub fn tier_healthy(c: &mut Client) -> bool {
    c.query_opt(
        "SELECT 1 FROM syncular.sync_object_store WHERE healthy_until_ms > (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
        &[],
    )
    .unwrap()
    .is_some()
}
