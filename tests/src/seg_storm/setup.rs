//! The storm's database, gateways and bucket: a database of its own on the bench's server (the
//! object-store configuration is database-wide), the sample `tasks` schema with the gateway tests'
//! scope resolver, `rows` rows of one project in one partition; a gateway without the tier (the
//! Postgres-only lane) or with its mover pointed at a real S3 server (`s3s-fs`).

use std::time::{Duration, Instant};

use postgres::Client;

use crate::gateway::{grant, setup, Gateway};
use crate::s3_fixture::S3Server;
use crate::{connect_to, dsn_for_db};

use super::client::{ACTOR, PROJECT};

/// The database the storm runs in.
pub const DB: &str = "syncular_storm";

/// Creates [`DB`] on the server of `base_dsn` (dropping an earlier one), with the extension, the
/// sample schema and the resolver; returns its DSN.
pub fn create_db(base_dsn: &str) -> String {
    let mut admin = connect_to(base_dsn);
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {DB} WITH (FORCE)")).unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {DB}")).unwrap();
    let dsn = dsn_for_db(base_dsn, DB);
    let mut c = connect_to(&dsn);
    c.batch_execute("CREATE EXTENSION syncular").unwrap();
    setup(&mut c);
    dsn
}

/// Writes `rows` tasks of project `p1` into `partition` with plain SQL (captured commits, 100,000
/// rows a statement), grants them to [`ACTOR`], then `VACUUM ANALYZE` and `CHECKPOINT` so neither
/// autovacuum nor a checkpoint lands in a lane.
pub fn seed(dsn: &str, partition: &str, rows: usize) {
    let mut c = connect_to(dsn);
    grant(&mut c, partition, ACTOR, &[PROJECT]);
    c.batch_execute("SET statement_timeout = 0").unwrap();
    c.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&partition]).unwrap();
    let mut from = 0usize;
    while from < rows {
        let to = (from + 100_000).min(rows);
        c.batch_execute(&format!(
            "INSERT INTO public.tasks (id, project_id, title, done, priority) \
             SELECT 't' || lpad(g::text, 7, '0'), '{PROJECT}', 'task ' || g, g % 3 = 0, \
                    CASE WHEN g % 5 = 0 THEN NULL ELSE g END \
               FROM generate_series({from}, {}) g",
            to - 1
        ))
        .unwrap();
        from = to;
    }
    c.batch_execute("VACUUM ANALYZE").unwrap();
    c.batch_execute("CHECKPOINT").unwrap();
}

/// A dev-auth gateway on `dsn` without the object store.
pub fn plain_gateway(dsn: &str) -> Gateway {
    Gateway::start_with_dsn(dsn, &["--auth", "dev"])
}

/// A dev-auth gateway on `dsn` whose mover copies into `s3` (prefix `storm/`, the mover's default
/// interval), once its mover configured the bucket and reported it healthy.
pub fn tier_gateway(dsn: &str, s3: &S3Server) -> Gateway {
    crate::object_store_fixture::tier_gateway_prefixed(dsn, s3, "storm/", &[])
}

/// Whether the bucket holds segment `id` (the mover copied it and recorded its ETag).
pub fn segment_in_bucket(c: &mut Client, id: &str) -> bool {
    c.query_opt("SELECT 1 FROM syncular.sync_segment_objects WHERE segment_id = $1", &[&id]).unwrap().is_some()
}

/// Polls `cond` every 50 ms; panics with the gateway's logs after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, gw: &Gateway, mut cond: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !cond() {
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}; gateway logs:\n{}",
            gw.logs.lock().unwrap().join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

/// The port of `http://127.0.0.1:PORT`.
pub fn port_of(origin: &str) -> u16 {
    origin.rsplit(':').next().and_then(|p| p.trim_end_matches('/').parse().ok()).unwrap_or_else(|| panic!("no port in {origin}"))
}
