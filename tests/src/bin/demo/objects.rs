//! The demo's object-store part (`SYNCULAR_DEMO_OBJECT_STORE=1 ./scripts/demo`; docs/src/operate/
//! object-store.md): a bulk import, a first bootstrap whose SQLite image Postgres serves, the
//! mover copying the image into the bucket, and a second bootstrap fetched from the bucket by a
//! presigned URL — Postgres serves none of its bytes.

use std::time::{Duration, Instant};

use postgres::Client;
use syncular_client::{ClientLimits, SyncClient};
use syncular_integration_tests::capture::held_tasks;
use syncular_integration_tests::clients::subscribe_projects;
use syncular_integration_tests::fixtures::schema_ir;
use syncular_integration_tests::gateway::Peer;

use super::{step, PROJECT};

/// Rows the bulk import writes.
const ROWS: i64 = 20_000;

/// Segment bytes the gateway's direct endpoint served so far (its `/metrics`).
fn direct_served(base_url: &str) -> f64 {
    let body = ureq::get(format!("{base_url}/metrics")).call().ok().and_then(|r| r.into_body().read_to_string().ok()).unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with("syncular_gateway_http_requests_total{") && l.contains("route=\"/segments/{id}\"") && l.contains("status=\"200\""))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// A desktop client (alice) bootstrapping the image lane with URL fetches on; returns its row count.
fn desktop(base_url: &str, partition: &str, name: &str) -> Result<usize, String> {
    let client_id = format!("{name}-{}", std::process::id());
    let mut peer = Peer::new(base_url, partition, "alice", &client_id);
    let limits = ClientLimits { accept: Some(0b1110), ..ClientLimits::default() };
    peer.client = SyncClient::new(client_id, &schema_ir(), limits).map_err(|e| e.to_string())?;
    subscribe_projects(&mut peer.client, "tasks", &[PROJECT]).map_err(|e| e.to_string())?;
    peer.transport.set_signed_urls(true);
    peer.sync_idle(40)?;
    Ok(held_tasks(&peer.client)?.len())
}

/// The object-store steps; `admin` is the app owner's connection.
pub fn run(base_url: &str, admin: &mut Client, partition: &str) -> Result<(), String> {
    step(&format!("object store: a bulk import of {ROWS} tasks with plain SQL"));
    admin.execute("SELECT pg_catalog.set_config('syncular.partition', $1, false)", &[&partition]).map_err(|e| e.to_string())?;
    admin
        .execute(
            "INSERT INTO public.tasks (id, project_id, title, done) \
             SELECT 'bulk' || lpad(g::text, 6, '0'), $1, 'imported ' || g, false FROM generate_series(1, $2::bigint) g",
            &[&PROJECT, &ROWS],
        )
        .map_err(|e| e.to_string())?;

    step("desktop-1 bootstraps: the SQLite image is built and Postgres serves it (the bucket does not hold it yet)");
    let before = direct_served(base_url);
    let rows = desktop(base_url, partition, "desktop-1")?;
    println!("  desktop-1 holds {rows} rows; Postgres served {} segment download(s)", direct_served(base_url) - before);

    step("the mover copies the image into the bucket (syncular.object_store_work → PUT → object_store_report)");
    let started = Instant::now();
    let key = loop {
        let row = admin
            .query_opt("SELECT segment_id, byte_length FROM syncular.sync_segment_objects ORDER BY stored_at_ms DESC LIMIT 1", &[])
            .map_err(|e| e.to_string())?;
        if let Some(row) = row {
            let (id, len): (String, i64) = (row.get(0), row.get(1));
            break format!("{id} ({len} bytes)");
        }
        if started.elapsed() > Duration::from_secs(30) {
            return Err("the mover did not copy the image within 30 s (is the bucket up?)".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("  the bucket holds segment {key} (the demo waited {:?} for it)", started.elapsed());

    step("desktop-2 bootstraps: its SEGMENT_REF carries a presigned GET of the bucket, fetched with no credentials");
    let before = direct_served(base_url);
    let rows = desktop(base_url, partition, "desktop-2")?;
    let served = direct_served(base_url) - before;
    println!("  desktop-2 holds {rows} rows; Postgres served {served} segment download(s)");
    if served != 0.0 {
        return Err("the second bootstrap should not have gone through the gateway's direct endpoint".into());
    }
    Ok(())
}
