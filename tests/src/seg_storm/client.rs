//! One storm client: a raw SSP2 bootstrap of the whole `tasks` table over HTTP through the
//! gateway (dev auth), the server side only — `POST /sync` until the subscription is done, then
//! one GET per `SEGMENT_REF`: its presigned URL when it carries one (the bucket), else the
//! gateway's direct endpoint `GET /segments/{id}` (Postgres, `syncular.segment_open` +
//! `segment_chunk`). Every download is hashed as it streams in and checked against its content
//! address and length; nothing is applied into a SQLite database.

use std::io::Read;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use ssp2::model::{Frame, MediaType};

use crate::fixtures::TASKS;
use crate::wire::{decode_response, pull_header, request, resp_header_epoch, subscription};

/// The actor every storm client bootstraps as (granted project `p1`).
pub const ACTOR: &str = "alice";
/// The one project (scope value) every row belongs to.
pub const PROJECT: &str = "p1";
/// The canonical JSON of the subscription's requested scopes (`X-Syncular-Scopes`, §5.5).
const REQUESTED_SCOPES: &str = r#"{"project_id":["p1"]}"#;
const SSP2_CONTENT_TYPE: &str = "application/vnd.syncular.sync.v2";

/// What one bootstrap moved and how long it took.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Rows the `SEGMENT_REF`s (and inline segments) described.
    pub rows: u64,
    /// `POST /sync` response bytes (served by Postgres through the gateway).
    pub sync_bytes: u64,
    /// Segment bytes downloaded from the gateway (Postgres): direct endpoint or native signed URL.
    pub pg_segment_bytes: u64,
    /// Segment bytes downloaded from the bucket (presigned URLs).
    pub bucket_bytes: u64,
    /// Segments downloaded from Postgres / from the bucket.
    pub pg_segments: u32,
    pub bucket_segments: u32,
    /// The image's segment id (the last `SEGMENT_REF` of the sqlite media type).
    pub image_id: Option<String>,
    /// First request to last byte checked.
    pub wall: Duration,
}

/// A client's connection settings.
pub struct Target<'a> {
    /// `http://127.0.0.1:PORT` of the gateway.
    pub gateway: &'a str,
    /// The partition the rows live in.
    pub partition: &'a str,
    /// Origin of the bucket's presigned URLs (`http://127.0.0.1:PORT`); `None` without one.
    pub bucket_origin: Option<&'a str>,
}

/// An HTTP agent for the storm: statuses returned, 5 min bound per request.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(300))).build().into()
}

fn post_sync(agent: &ureq::Agent, t: &Target<'_>, body: &[u8]) -> Result<Vec<u8>, String> {
    let resp = agent
        .post(format!("{}/sync", t.gateway))
        .header("content-type", SSP2_CONTENT_TYPE)
        .header("accept-encoding", "identity")
        .header("x-syncular-actor", ACTOR)
        .header("x-syncular-partition", t.partition)
        .send(body)
        .map_err(|e| format!("POST /sync: {e}"))?;
    let status = resp.status().as_u16();
    let mut out = Vec::new();
    resp.into_body().into_reader().read_to_end(&mut out).map_err(|e| format!("POST /sync body: {e}"))?;
    if status != 200 {
        return Err(format!("POST /sync: HTTP {status}: {}", String::from_utf8_lossy(&out)));
    }
    Ok(out)
}

/// GETs `url` (with `headers`), hashing the body as it streams; returns its length after checking
/// it against `segment_id` and `byte_length`.
fn fetch_checked(agent: &ureq::Agent, url: &str, headers: &[(&str, &str)], segment_id: &str, byte_length: i64) -> Result<u64, String> {
    let mut req = agent.get(url).header("accept-encoding", "identity");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.call().map_err(|e| format!("GET {segment_id}: {e}"))?;
    let status = resp.status().as_u16();
    if let Some(enc) = resp.headers().get("content-encoding").and_then(|v| v.to_str().ok()) {
        if enc != "identity" {
            return Err(format!("GET {segment_id}: Content-Encoding {enc} although identity was asked"));
        }
    }
    let mut reader = resp.into_body().into_with_config().limit(u64::MAX).reader();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut len = 0u64;
    loop {
        let n = reader.read(&mut buf).map_err(|e| format!("GET {segment_id}: body: {e}"))?;
        if n == 0 {
            break;
        }
        if status == 200 {
            hasher.update(&buf[..n]);
        }
        len += n as u64;
    }
    if status != 200 {
        return Err(format!("GET {segment_id}: HTTP {status} ({len} bytes)"));
    }
    let hex: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if format!("sha256:{hex}") != segment_id {
        return Err(format!("GET {segment_id}: the body hashes to sha256:{hex}"));
    }
    if len as i64 != byte_length {
        return Err(format!("GET {segment_id}: {len} bytes, byteLength {byte_length}"));
    }
    Ok(len)
}

/// Bootstraps `tasks` of project `p1` as a new client `client_id` advertising `accept`.
///
/// Errors: a failed request, a wrong status, a download that fails its hash check.
pub fn bootstrap(agent: &ureq::Agent, t: &Target<'_>, client_id: &str, accept: u8) -> Result<Outcome, String> {
    let started = Instant::now();
    let mut out = Outcome::default();
    // §2.1: a request without logEpoch is answered by a reset response carrying it.
    let reset = post_sync(agent, t, &request(client_id, None, vec![pull_header(0, 0, 0, 0b0011)]))?;
    out.sync_bytes += reset.len() as u64;
    let epoch = match resp_header_epoch(&decode_response(&reset)?) {
        (Some(epoch), true) => epoch,
        other => return Err(format!("expected a reset response with a logEpoch, got {other:?}")),
    };
    let mut token: Option<String> = None;
    for _round in 0..1000 {
        let cursor = if token.is_some() { 0 } else { -1 };
        let frames = vec![
            pull_header(0, 50_000, 50, accept),
            subscription("s", TASKS, &[("project_id", &[PROJECT])], cursor, token.take()),
        ];
        let body = post_sync(agent, t, &request(client_id, Some(&epoch), frames))?;
        out.sync_bytes += body.len() as u64;
        for frame in decode_response(&body)?.frames {
            match frame {
                Frame::SegmentInline { payload } => {
                    let seg = ssp2::decode_rows_segment(&payload).map_err(|e| e.to_string())?;
                    out.rows += seg.blocks.iter().map(|b| b.len() as u64).sum::<u64>();
                }
                Frame::SegmentRef { segment_id, media_type, byte_length, row_count, url, .. } => {
                    let in_bucket = matches!((&url, t.bucket_origin), (Some(u), Some(o)) if u.starts_with(&format!("{o}/")));
                    let len = match &url {
                        Some(u) => fetch_checked(agent, u, &[], &segment_id, byte_length)?,
                        None => {
                            let direct = format!("{}/segments/{segment_id}", t.gateway);
                            let auth = [("x-syncular-actor", ACTOR), ("x-syncular-partition", t.partition), ("x-syncular-scopes", REQUESTED_SCOPES)];
                            fetch_checked(agent, &direct, &auth, &segment_id, byte_length)?
                        }
                    };
                    if in_bucket {
                        out.bucket_bytes += len;
                        out.bucket_segments += 1;
                    } else {
                        out.pg_segment_bytes += len;
                        out.pg_segments += 1;
                    }
                    if media_type == MediaType::Sqlite {
                        out.image_id = Some(segment_id);
                    }
                    out.rows += row_count as u64;
                }
                Frame::SubEnd { bootstrap_state, .. } => token = bootstrap_state.map(|s| s.0),
                Frame::Error { code, message, .. } => return Err(format!("{code}: {message}")),
                _ => {}
            }
        }
        if token.is_none() {
            out.wall = started.elapsed();
            return Ok(out);
        }
    }
    Err("the bootstrap did not finish in 1,000 rounds".into())
}
