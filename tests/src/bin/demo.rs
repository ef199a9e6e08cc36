//! `demo`: two real Syncular clients (`syncular-client` 0.15.48) exchange
//! rows through the syncular extension. Every round trip is one
//! `SELECT syncular.sync(...)`; a third connection `LISTEN`s on
//! `syncular_commit` and prints each notification.
//!
//! Usage: `demo [DSN]` (default: `$SYNCULAR_TEST_DSN`). `scripts/demo` starts
//! a throwaway server with the extension and runs this binary against it.

use std::process::ExitCode;
use std::time::Duration;

use ssp2::model::Frame;
use syncular_client::SyncClient;
use syncular_integration_tests::clients::{
    delete_task, held_rows, new_client, subscribe_projects, sync_idle, task_values, upsert_task,
};
use syncular_integration_tests::connect_to;
use syncular_integration_tests::fixtures::{
    allow_projects, register_schema, schema_ir, server_tasks,
};
use syncular_integration_tests::notify::{parse_payload, CommitListener};
use syncular_integration_tests::transport::PgTransport;
use syncular_integration_tests::wire::decode_response;

/// One demo participant: a real client and its SQL transport.
struct Device {
    name: &'static str,
    client: SyncClient,
    transport: PgTransport,
}

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
    let dsn = std::env::args()
        .nth(1)
        .or_else(|| std::env::var(syncular_integration_tests::DSN_ENV).ok())
        .ok_or("usage: demo DSN (or set SYNCULAR_TEST_DSN)")?;
    let mut admin = connect_to(&dsn);
    let version: String = admin
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'syncular'",
            &[],
        )
        .map_err(|e| format!("is the extension installed? {e}"))?
        .get(0);
    println!("== syncular {version} on {}", server_version(&mut admin)?);

    step("register the sample schema: syncular.register_schema(ir jsonb)");
    register_schema(&mut admin).map_err(|e| e.to_string())?;
    println!(
        "{}",
        serde_json::to_string_pretty(&schema_ir()).unwrap_or_default()
    );

    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let partition = format!("demo-{stamp}");
    println!("partition: {partition}");
    let mut listener = CommitListener::listen(connect_to(&dsn)).map_err(|e| e.to_string())?;
    println!("listener: LISTEN syncular_commit on its own connection");

    let allowed = allow_projects(&["home", "work"]);
    let mut laptop = device("laptop", "alice", &dsn, &partition, &allowed)?;
    let mut phone = device("phone", "alice", &dsn, &partition, &allowed)?;
    println!("two clients, actor alice, allowed scopes {allowed}; both subscribe to tasks in projects home + work");

    step("laptop writes three tasks offline, then syncs");
    laptop
        .client
        .mutate(vec![
            upsert_task(task_values("t1", "home", "buy milk", false, Some(2))),
            upsert_task(task_values("t2", "work", "write report", false, Some(1))),
        ])
        .map_err(|e| e.to_string())?;
    laptop
        .client
        .mutate(vec![upsert_task(task_values(
            "t3",
            "work",
            "book flights",
            false,
            None,
        ))])
        .map_err(|e| e.to_string())?;
    round(&mut laptop)?;
    notifications(&mut listener, &partition)?;

    step("phone syncs for the first time: it bootstraps");
    round(&mut phone)?;
    holdings(&[&laptop, &phone])?;

    step("phone completes t1 and adds t4; laptop deletes t3 — both offline");
    phone
        .client
        .mutate(vec![upsert_task(task_values(
            "t1",
            "home",
            "buy milk",
            true,
            Some(2),
        ))])
        .map_err(|e| e.to_string())?;
    phone
        .client
        .mutate(vec![upsert_task(task_values(
            "t4",
            "home",
            "call mum",
            false,
            Some(3),
        ))])
        .map_err(|e| e.to_string())?;
    laptop
        .client
        .mutate(vec![delete_task("t3")])
        .map_err(|e| e.to_string())?;
    holdings(&[&laptop, &phone])?;

    step("phone syncs (pushes two commits), then laptop syncs (pushes one, pulls phone's)");
    round(&mut phone)?;
    round(&mut laptop)?;
    notifications(&mut listener, &partition)?;

    step("phone syncs again: it pulls laptop's delete incrementally");
    round(&mut phone)?;
    holdings(&[&laptop, &phone])?;

    let a = rows_of(&laptop)?;
    let b = rows_of(&phone)?;
    if a != b {
        return Err(format!(
            "the clients diverged:\n laptop {a:?}\n phone  {b:?}"
        ));
    }
    println!("✔ laptop and phone hold the same {} rows", a.len());

    step("what the server holds, read with plain SQL");
    println!("SELECT id, project_id, title, done, priority, _sync_version FROM tasks WHERE _sync_partition = '{partition}'");
    for (id, project, title, done, priority, version) in
        server_tasks(&mut admin, &partition).map_err(|e| e.to_string())?
    {
        println!("  {id:<3} {project:<5} {title:<14} done={done:<5} priority={priority:<8} version={version}",
            priority = priority.map_or("NULL".to_owned(), |p| p.to_string()));
    }
    println!("SELECT commit_seq, client_id, client_commit_id, actor_id FROM syncular.sync_commits WHERE partition = …");
    for row in admin
        .query(
            "SELECT commit_seq, client_id, client_commit_id, actor_id FROM syncular.sync_commits
              WHERE partition = $1 ORDER BY commit_seq",
            &[&partition],
        )
        .map_err(|e| e.to_string())?
    {
        let (seq, client, commit, actor): (i64, String, String, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        println!("  commitSeq {seq}: {client} / {commit} by {actor}");
    }
    println!("\ndone.");
    Ok(())
}

fn server_version(conn: &mut postgres::Client) -> Result<String, String> {
    Ok(conn
        .query_one("SHOW server_version", &[])
        .map_err(|e| e.to_string())?
        .get(0))
}

fn device(
    name: &'static str,
    actor: &str,
    dsn: &str,
    partition: &str,
    allowed: &serde_json::Value,
) -> Result<Device, String> {
    let mut client = new_client(&format!("{name}-{}", std::process::id()))?;
    subscribe_projects(&mut client, "tasks", &["home", "work"])?;
    let transport = PgTransport::new(connect_to(dsn), partition, actor, Some(allowed.clone()));
    Ok(Device {
        name,
        client,
        transport,
    })
}

fn step(title: &str) {
    println!("\n-- {title}");
}

/// Runs the device's client until idle and prints every round trip.
fn round(device: &mut Device) -> Result<(), String> {
    let first = device.transport.responses.len();
    let report = sync_idle(&mut device.client, &mut device.transport, 12)?;
    for (i, response) in device.transport.responses[first..].iter().enumerate() {
        let msg = decode_response(response)?;
        println!(
            "  {} round {}: syncular.sync → {} bytes",
            device.name,
            i + 1,
            response.len()
        );
        for frame in &msg.frames {
            describe(frame);
        }
    }
    println!(
        "  {} report: pushed {}, applied {:?}, rejected {:?}, commits pulled {}, bootstrap rows {}",
        device.name,
        report.pushed,
        report.applied,
        report.rejected,
        report.commits_applied,
        report.segment_rows_applied
    );
    Ok(())
}

fn describe(frame: &Frame) {
    match frame {
        Frame::RespHeader {
            log_epoch,
            reset_required: Some(true),
            ..
        } => {
            println!(
                "    RESP_HEADER reset required: adopt logEpoch {}",
                log_epoch.clone().unwrap_or_default()
            );
        }
        Frame::PushResult {
            client_commit_id,
            status,
            commit_seq,
            ..
        } => println!(
            "    PUSH_RESULT {client_commit_id}: {} commitSeq={}",
            status.name(),
            commit_seq.map_or("-".to_owned(), |s| s.to_string())
        ),
        Frame::SubStart {
            id,
            status,
            effective_scopes,
            bootstrap,
            ..
        } => println!(
            "    SUB_START {id}: {} effective={effective_scopes:?}{}",
            status.name(),
            if *bootstrap { " (bootstrap)" } else { "" }
        ),
        Frame::Commit {
            commit_seq,
            actor_id,
            changes,
            ..
        } => {
            let what: Vec<String> = changes
                .iter()
                .map(|c| format!("{} {}", c.op.name(), c.row_id))
                .collect();
            println!("    COMMIT {commit_seq} by {actor_id}: {}", what.join(", "));
        }
        Frame::SegmentInline { payload } => {
            let rows = ssp2::decode_rows_segment(payload)
                .map(|s| s.blocks.iter().map(Vec::len).sum::<usize>());
            println!(
                "    SEGMENT_INLINE rows segment: {} rows, {} bytes",
                rows.unwrap_or(0),
                payload.len()
            );
        }
        Frame::SubEnd {
            next_cursor,
            bootstrap_state,
        } => println!(
            "    SUB_END nextCursor={next_cursor}{}",
            if bootstrap_state.is_some() {
                " (bootstrap continues)"
            } else {
                ""
            }
        ),
        _ => {}
    }
}

fn rows_of(device: &Device) -> Result<Vec<(String, i64, String)>, String> {
    Ok(held_rows(&device.client)?
        .into_iter()
        .map(|r| {
            (
                r.row_id,
                r.version,
                serde_json::Value::Object(r.values).to_string(),
            )
        })
        .collect())
}

fn holdings(devices: &[&Device]) -> Result<(), String> {
    for d in devices {
        println!("  {} holds:", d.name);
        for r in held_rows(&d.client)? {
            let v = &r.values;
            println!(
                "    {:<3} {:<5} {:<14} done={:<5} version={}",
                r.row_id,
                v["project_id"].as_str().unwrap_or(""),
                v["title"].as_str().unwrap_or(""),
                v["done"],
                if r.version < 0 {
                    "pending".to_owned()
                } else {
                    r.version.to_string()
                }
            );
        }
    }
    Ok(())
}

fn notifications(listener: &mut CommitListener, partition: &str) -> Result<(), String> {
    let seen = listener
        .drain(
            partition,
            Duration::from_millis(300),
            Duration::from_secs(5),
        )
        .map_err(|e| e.to_string())?;
    if seen.is_empty() {
        println!("  listener: no notifications");
    }
    for n in seen {
        let decoded =
            parse_payload(&n.payload).map(|(p, s)| format!("partition {p}, commitSeq {s}"));
        println!(
            "  listener: NOTIFY {} '{}' → {}",
            n.channel,
            n.payload,
            decoded.unwrap_or_else(|| "unparsable".to_owned())
        );
    }
    Ok(())
}
