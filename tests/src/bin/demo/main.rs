//! `demo`: two real Syncular clients (`syncular-client` 0.15.48 with its
//! native HTTP/WebSocket transport) sync through `syncular-gateway` and the
//! syncular extension: laptop (actor alice) and phone (actor bob) share
//! project `home`; bob's access comes from a membership table read by the
//! registered scope resolver.
//!
//! 1. laptop writes offline and syncs over `POST /sync`; phone bootstraps;
//! 2. phone opens the realtime socket (`hello`); laptop edits a task; phone
//!    receives the change as a pushed `0x00` delta — it sends no request;
//! 3. bob's membership is deleted in SQL, with `syncular.refresh_scopes` in
//!    the same transaction; laptop writes again: phone gets no delta, only a
//!    wake-up, and its next round revokes the subscription and purges;
//! 4. a mixed fleet: a tablet with `syncular-client` 0.49.2 (wire version 3,
//!    the fleet driver process `SYNCULAR_CLIENT_V3_DRIVER`) joins the same
//!    partition, patches one column of a task (a sparse row on the wire), and
//!    the 0.15.48 laptop receives the full merged row;
//! 5. with `SYNCULAR_DEMO_OBJECT_STORE=1` (the gateway's mover and an S3-compatible server
//!    started by `scripts/demo`): a bulk import bootstrapped twice, the second time from the
//!    bucket through a presigned URL ([`objects`]).
//!
//! Usage: `demo BASE_URL DSN` — `scripts/demo` starts Postgres and the
//! gateway and runs this binary.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use ssp2::model::Frame;
use syncular_integration_tests::clients::{held_rows, task_values, upsert_task};
use syncular_integration_tests::connect_to;
use syncular_integration_tests::fleet::{values, FleetClient, Generation};
use syncular_integration_tests::fixtures::{register_schema, server_tasks};
use syncular_integration_tests::gateway::{Peer, Received};
use syncular_integration_tests::wire::decode_response;

mod objects;

const PROJECT: &str = "home";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let (Some(base_url), Some(dsn)) = (args.next(), args.next()) else {
        return Err("usage: demo BASE_URL DSN (scripts/demo starts both)".into());
    };
    let mut admin = connect_to(&dsn);
    let version: String = admin
        .query_one("SELECT extversion FROM pg_extension WHERE extname = 'syncular'", &[])
        .map_err(|e| format!("is the extension installed? {e}"))?
        .get(0);
    println!("== syncular {version}, gateway at {base_url}");
    let partition = format!("demo-{}", std::process::id());

    step("the app's schema and its memberships (plain SQL, run by the app's owner)");
    register_schema(&mut admin).map_err(|e| e.to_string())?;
    admin
        .batch_execute(MEMBERSHIPS_SQL)
        .map_err(|e| format!("memberships: {e}"))?;
    admin
        .execute(
            "INSERT INTO app.memberships (tenant, user_id, project_id) VALUES ($1, 'alice', $2), ($1, 'bob', $2)",
            &[&partition, &PROJECT],
        )
        .map_err(|e| e.to_string())?;
    println!("{}", MEMBERSHIPS_SQL.trim());
    println!("alice and bob are members of project {PROJECT:?} in partition {partition:?}");

    let mut laptop = Device::new("laptop", "alice", &base_url, &partition);
    let mut phone = Device::new("phone", "bob", &base_url, &partition);

    step("laptop writes two tasks offline, then syncs over POST /sync");
    laptop
        .peer
        .client
        .mutate(vec![
            upsert_task(task_values("t1", PROJECT, "buy milk", false, Some(2))),
            upsert_task(task_values("t2", PROJECT, "fix the bike", false, None)),
        ])
        .map_err(|e| e.to_string())?;
    laptop.sync()?;

    step("phone syncs for the first time over POST /sync: it bootstraps");
    phone.sync()?;
    holdings(&[&laptop, &phone])?;

    step("phone opens the realtime socket: GET /realtime?clientId=…");
    phone.peer.connect();
    let hello = phone.wait_text("hello", Duration::from_secs(5))?;
    println!("  phone ← {hello}");

    step("laptop marks t1 done and syncs; phone does nothing but listen");
    laptop
        .peer
        .client
        .mutate(vec![upsert_task(task_values("t1", PROJECT, "buy milk", true, Some(2)))])
        .map_err(|e| e.to_string())?;
    let sent = Instant::now();
    laptop.sync()?;
    let delta = phone.wait_delta(Duration::from_secs(10)).ok_or("phone: no delta within 10 s")?;
    println!(
        "  phone ← 0x00 delta, {} bytes, {:.1} ms after laptop began syncing; phone sent no request",
        delta.len(),
        sent.elapsed().as_secs_f64() * 1000.0
    );
    for frame in decode_response(&delta)?.frames {
        describe(&frame);
    }
    holdings(&[&phone])?;

    step("bob leaves project home: DELETE his membership + syncular.refresh_scopes, one transaction");
    let mut tx = admin.transaction().map_err(|e| e.to_string())?;
    tx.execute("DELETE FROM app.memberships WHERE tenant = $1 AND user_id = 'bob'", &[&partition])
        .map_err(|e| e.to_string())?;
    tx.execute("SELECT syncular.refresh_scopes($1, 'bob')", &[&partition])
        .map_err(|e| e.to_string())?;
    tx.commit().map_err(|e| e.to_string())?;
    println!("  COMMIT: every gateway re-resolves bob's sessions before serving later commits");
    let wake = phone.wait_text("sync", Duration::from_secs(5))?;
    println!("  phone ← {wake}");

    step("laptop adds t3; phone's socket stays silent — no delta for a revoked scope");
    laptop
        .peer
        .client
        .mutate(vec![upsert_task(task_values("t3", PROJECT, "water plants", false, None))])
        .map_err(|e| e.to_string())?;
    laptop.sync()?;
    let quiet = Duration::from_millis(1500);
    if let Some(bytes) = phone.wait_delta(quiet) {
        return Err(format!("phone received a delta after the revocation: {} bytes", bytes.len()));
    }
    println!("  no delta in {} ms", quiet.as_millis());

    step("phone's next round (over the socket): its subscription is revoked and its rows purged");
    phone.sync()?;
    holdings(&[&laptop, &phone])?;
    if !held_rows(&phone.peer.client)?.is_empty() {
        return Err("phone still holds rows of a revoked scope".into());
    }

    step("a tablet joins with syncular-client 0.49.2 (wire version 3): same partition, same gateway");
    let mut tablet = FleetClient::spawn(Generation::V3, &base_url, &partition, "alice", &format!("tablet-{}", std::process::id()));
    tablet.subscribe_projects("tasks", &[PROJECT]);
    let report = tablet.synced(12);
    println!("  tablet POST /sync (wire 3): {report:?}");
    for row in tablet.tasks() {
        println!("    tablet holds {:<3} {:<13} priority={} version={}", row.row_id, row.values["title"].as_str().unwrap_or(""), row.values["priority"], row.version);
    }

    step("tablet changes one column of t2: a sparse patch, only the primary key and `priority` on the wire");
    tablet.patch("t2", values(&[("priority", json!(5))]), None)?;
    tablet.synced(12);
    let row = admin
        .query_one(
            "SELECT _sync_version, title, priority, encode(_sync_column_versions, 'hex') FROM public.tasks \
              WHERE _sync_partition = $1 AND id = 't2'",
            &[&partition],
        )
        .map_err(|e| e.to_string())?;
    let (version, title, priority, versions): (i64, String, Option<i64>, Option<String>) = (row.get(0), row.get(1), row.get(2), row.get(3));
    println!(
        "  server row t2: version {version}, title {title:?} kept, priority {priority:?}; column versions (LEB128 ordinal/version pairs) {}",
        versions.as_deref().unwrap_or("NULL")
    );

    step("laptop (syncular-client 0.15.48, wire version 2) syncs: t2 arrives as the full merged row");
    laptop.sync()?;
    holdings(&[&laptop])?;
    let merged = held_rows(&laptop.peer.client)?.into_iter().find(|r| r.row_id == "t2").ok_or("laptop lost t2")?;
    if merged.values["priority"] != json!(5) || merged.values["title"] != json!("fix the bike") {
        return Err(format!("laptop holds t2 as {:?}: the tablet's partial update did not merge", merged.values));
    }
    println!("  the old client holds the new client's one-column change, every other column intact");
    tablet.close();

    step("what the server holds, read with plain SQL");
    for (id, project, title, done, _, version) in server_tasks(&mut admin, &partition).map_err(|e| e.to_string())? {
        println!("  {id:<3} {project:<5} {title:<13} done={done:<5} version={version}");
    }
    phone.peer.disconnect();
    if std::env::var("SYNCULAR_DEMO_OBJECT_STORE").as_deref() == Ok("1") {
        objects::run(&base_url, &mut admin, &partition)?;
    }
    println!("\ndone.");
    Ok(())
}

/// The app's membership table and the scope resolver reading it (installed
/// by the database owner; the resolver must be superuser-owned).
const MEMBERSHIPS_SQL: &str = "
CREATE SCHEMA IF NOT EXISTS app;
CREATE TABLE IF NOT EXISTS app.memberships (tenant text, user_id text, project_id text,
                                            PRIMARY KEY (tenant, user_id, project_id));
CREATE OR REPLACE FUNCTION app.allowed(partition text, actor_id text) RETURNS jsonb
  LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('project_id', coalesce(jsonb_agg(project_id), '[]'))
      FROM app.memberships WHERE tenant = partition AND user_id = actor_id $$;
SELECT syncular.set_scope_resolver('app.allowed(text,text)');";

/// One participant: a real client over its native HTTP/WebSocket transport (the test
/// harness's [`Peer`]), printing each round's report.
struct Device {
    name: &'static str,
    peer: Peer,
    /// Socket messages already shown.
    seen: usize,
}

impl Device {
    fn new(name: &'static str, actor: &str, base_url: &str, partition: &str) -> Device {
        let mut peer = Peer::new(base_url, partition, actor, &format!("{name}-{}", std::process::id()));
        peer.subscribe("tasks", &[PROJECT]);
        println!("{name}: actor {actor}, subscribed to tasks of project {PROJECT}");
        Device { name, peer, seen: 0 }
    }

    /// Syncs until idle (over HTTP, or over the socket once connected) and prints the report.
    fn sync(&mut self) -> Result<(), String> {
        let binding = if self.peer.hello().is_some() { "socket round (0x01)" } else { "POST /sync" };
        let report = self.peer.sync_idle(12)?;
        println!(
            "  {} {binding}: pushed {}, commits pulled {}, bootstrap rows {}, revoked {:?}",
            self.name, report.pushed, report.commits_applied, report.segment_rows_applied, report.revoked
        );
        self.peer.pump();
        Ok(())
    }

    /// Waits (bounded) for the next socket message accepted by `wanted`, applying every
    /// message to the client as it arrives; `None` when none came within `max`.
    fn next(&mut self, max: Duration, wanted: impl Fn(&Received) -> bool) -> Option<Received> {
        let deadline = Instant::now() + max;
        loop {
            self.peer.pump();
            while self.seen < self.peer.received.len() {
                let r = self.peer.received[self.seen].clone();
                self.seen += 1;
                if wanted(&r) {
                    return Some(r);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn wait_text(&mut self, event: &str, max: Duration) -> Result<Value, String> {
        match self.next(max, |r| matches!(r, Received::Text(v) if v["event"] == event)) {
            Some(Received::Text(v)) => Ok(v),
            _ => Err(format!("{}: no {event:?} event within {max:?}", self.name)),
        }
    }

    fn wait_delta(&mut self, max: Duration) -> Option<Vec<u8>> {
        match self.next(max, |r| matches!(r, Received::Delta(_))) {
            Some(Received::Delta(b)) => Some(b),
            _ => None,
        }
    }
}

fn step(title: &str) {
    println!("\n-- {title}");
}

fn describe(frame: &Frame) {
    match frame {
        Frame::RespHeader { log_epoch, reset_required: Some(true), .. } => {
            println!("    RESP_HEADER reset required: adopt logEpoch {}", log_epoch.clone().unwrap_or_default());
        }
        Frame::PushResult { client_commit_id, status, commit_seq, .. } => println!(
            "    PUSH_RESULT {client_commit_id}: {} commitSeq={}",
            status.name(),
            commit_seq.map_or("-".to_owned(), |s| s.to_string())
        ),
        Frame::SubStart { id, status, effective_scopes, bootstrap, .. } => println!(
            "    SUB_START {id}: {} effective={effective_scopes:?}{}",
            status.name(),
            if *bootstrap { " (bootstrap)" } else { "" }
        ),
        Frame::Commit { commit_seq, actor_id, changes, .. } => {
            let what: Vec<String> = changes.iter().map(|c| format!("{} {}", c.op.name(), c.row_id)).collect();
            println!("    COMMIT {commit_seq} by {actor_id}: {}", what.join(", "));
        }
        Frame::SegmentInline { payload } => {
            let rows = ssp2::decode_rows_segment(payload).map(|s| s.blocks.iter().map(Vec::len).sum::<usize>());
            println!("    SEGMENT_INLINE rows segment: {} rows, {} bytes", rows.unwrap_or(0), payload.len());
        }
        Frame::SubEnd { next_cursor, bootstrap_state } => println!(
            "    SUB_END nextCursor={next_cursor}{}",
            if bootstrap_state.is_some() { " (bootstrap continues)" } else { "" }
        ),
        _ => {}
    }
}

fn holdings(devices: &[&Device]) -> Result<(), String> {
    for d in devices {
        let rows = held_rows(&d.peer.client)?;
        println!("  {} holds {} row(s):", d.name, rows.len());
        for r in rows {
            let v = &r.values;
            println!(
                "    {:<3} {:<13} done={:<5} priority={:<4} version={}",
                r.row_id,
                v["title"].as_str().unwrap_or(""),
                v["done"],
                v["priority"],
                if r.version < 0 { "pending".to_owned() } else { r.version.to_string() }
            );
        }
    }
    Ok(())
}
