//! A `syncular_client::Transport` that carries every sync round through
//! `SELECT syncular.sync(partition, actor_id, request, allowed_scopes)` on one
//! Postgres connection — the SQL-API binding of the §1.1 request/response
//! round (the extension is the server; no HTTP in between).
//!
//! Request-level failures arrive as Postgres errors whose message starts with
//! the SSP2 code (`sync.invalid_request: …`); they are handed to the client as
//! a [`TransportError`] carrying that code, exactly as an HTTP binding hands
//! over the §10.1 JSON body. A `SEGMENT_REF` download (§5.5) is
//! `SELECT syncular.segment(partition, actor_id, segment_id, requested_scopes,
//! allowed_scopes)` on the same connection. Blobs and realtime are not
//! served by this transport: those calls fail loud.

use postgres::Client;
use serde_json::Value;
use syncular_client::{SegmentRequest, Transport, TransportError};

/// One `syncular.sync` call as SQL: `$1` partition (text), `$2` actor id
/// (text), `$3` SSP2 request (bytea), `$4` allowed-scopes map (jsonb, may be NULL).
pub const SYNC_SQL: &str = "SELECT syncular.sync($1::text, $2::text, $3::bytea, $4::jsonb)";

/// One §5.5 download as SQL: `$1` partition, `$2` actor id, `$3` segment id,
/// `$4` requested scopes (canonical JSON text, the `X-Syncular-Scopes`
/// header), `$5` allowed-scopes map (jsonb, may be NULL).
pub const SEGMENT_SQL: &str = "SELECT syncular.segment($1::text, $2::text, $3::text, $4::text, $5::jsonb)";

/// Split a Postgres error into (`sync.*` code, full message). Errors that do
/// not come from the server with an SSP2 prefix (connection loss, I/O) map to
/// `transport.postgres` so the client treats them as a failed round.
pub fn error_code_and_message(error: &postgres::Error) -> (String, String) {
    match error.as_db_error() {
        Some(db) => {
            let message = db.message().to_owned();
            let code = message
                .split_once(':')
                .map(|(head, _)| head)
                .filter(|head| head.contains('.') && !head.contains(' '))
                .unwrap_or("transport.postgres")
                .to_owned();
            (code, message)
        }
        None => ("transport.postgres".to_owned(), error.to_string()),
    }
}

/// Calls `syncular.sync` once and returns the response bytes.
///
/// Errors: the Postgres error of the call (its message starts with the SSP2
/// code for request-level failures).
pub fn call_sync(
    conn: &mut Client,
    partition: &str,
    actor_id: &str,
    request: &[u8],
    allowed_scopes: Option<&Value>,
) -> Result<Vec<u8>, postgres::Error> {
    let row = conn.query_one(
        SYNC_SQL,
        &[&partition, &actor_id, &request, &allowed_scopes],
    )?;
    row.try_get::<_, Vec<u8>>(0)
}

/// The SQL-API transport: one connection, one partition, one actor and the
/// allowed-scopes map the "gateway" resolved for that actor (`None` = let the
/// registered resolver decide).
pub struct PgTransport {
    conn: Client,
    partition: String,
    actor_id: String,
    allowed_scopes: Option<Value>,
    /// Bytes of the last request sent and response received (for logging).
    pub last_exchange: Option<(Vec<u8>, Vec<u8>)>,
    /// Every response received, in order (tests inspect what was delivered).
    pub responses: Vec<Vec<u8>>,
    /// Number of `syncular.sync` calls made through this transport.
    pub rounds: u64,
    /// Segment ids downloaded through `syncular.segment`, in order.
    pub downloads: Vec<String>,
    /// Whether the client may fetch bare URLs (§5.4 `accept` bit 3): [`PgTransport::with_url_fetch`].
    url_fetch: bool,
    /// URLs fetched (no host authentication, plain GET), in order.
    pub fetched_urls: Vec<String>,
}

impl PgTransport {
    /// Wraps an open connection. `allowed_scopes` is the §3.2 allowed map
    /// (`{"variable": ["value", …]}`, `"*"` = any value).
    pub fn new(
        mut conn: Client,
        partition: impl Into<String>,
        actor_id: impl Into<String>,
        allowed_scopes: Option<Value>,
    ) -> Self {
        // Bounded: a statement that waits forever fails instead of hanging.
        let _ = crate::fixtures::bound_statements(&mut conn);
        PgTransport {
            conn,
            partition: partition.into(),
            actor_id: actor_id.into(),
            allowed_scopes,
            last_exchange: None,
            responses: Vec::new(),
            rounds: 0,
            downloads: Vec::new(),
            url_fetch: false,
            fetched_urls: Vec::new(),
        }
    }

    /// Lets the client fetch signed / presigned URLs (a plain GET, no credentials).
    pub fn with_url_fetch(mut self) -> Self {
        self.url_fetch = true;
        self
    }

    /// The underlying connection (for assertions made with plain SQL).
    pub fn connection(&mut self) -> &mut Client {
        &mut self.conn
    }

    /// Replaces the allowed-scopes map used for the following rounds.
    pub fn set_allowed_scopes(&mut self, allowed_scopes: Option<Value>) {
        self.allowed_scopes = allowed_scopes;
    }

    fn round(&mut self, request: &[u8]) -> Result<Vec<u8>, TransportError> {
        self.rounds += 1;
        match call_sync(
            &mut self.conn,
            &self.partition,
            &self.actor_id,
            request,
            self.allowed_scopes.as_ref(),
        ) {
            Ok(response) => {
                self.last_exchange = Some((request.to_vec(), response.clone()));
                self.responses.push(response.clone());
                Ok(response)
            }
            Err(error) => {
                let (code, message) = error_code_and_message(&error);
                Err(TransportError::new(code, message))
            }
        }
    }
}

impl Transport for PgTransport {
    fn sync(&mut self, request: &[u8]) -> Result<Vec<u8>, TransportError> {
        self.round(request)
    }

    fn realtime_sync(&mut self, request: &[u8]) -> Result<Vec<u8>, TransportError> {
        // No socket: a realtime round is the same request/response round.
        self.round(request)
    }

    fn supports_url_fetch(&self) -> bool {
        self.url_fetch
    }

    fn fetch_url(&mut self, url: &str) -> Result<Vec<u8>, TransportError> {
        use std::io::Read;
        self.fetched_urls.push(url.to_owned());
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let resp = agent.get(url).call().map_err(|e| TransportError::new("transport.failed", e.to_string()))?;
        let status = resp.status().as_u16();
        let mut body = Vec::new();
        resp.into_body().into_reader().read_to_end(&mut body).map_err(|e| TransportError::new("transport.failed", e.to_string()))?;
        if status != 200 {
            return Err(TransportError::new("transport.failed", format!("GET of a signed URL: status {status}")));
        }
        Ok(body)
    }

    fn download_segment(&mut self, request: &SegmentRequest) -> Result<Vec<u8>, TransportError> {
        let row = self.conn.query_one(
            SEGMENT_SQL,
            &[
                &self.partition,
                &self.actor_id,
                &request.segment_id,
                &request.requested_scopes_json,
                &self.allowed_scopes,
            ],
        );
        match row.and_then(|r| r.try_get::<_, Vec<u8>>(0)) {
            Ok(bytes) => {
                self.downloads.push(request.segment_id.clone());
                Ok(bytes)
            }
            Err(error) => {
                let (code, message) = error_code_and_message(&error);
                Err(TransportError::new(code, message))
            }
        }
    }

    fn realtime_connect(&mut self) -> Result<(), TransportError> {
        Err(TransportError::new(
            "transport.realtime_unsupported",
            "the SQL transport has no realtime socket; use LISTEN syncular_commit",
        ))
    }

    fn realtime_send(&mut self, _text: &str) -> Result<(), TransportError> {
        Err(TransportError::new(
            "transport.realtime_unsupported",
            "the SQL transport has no realtime socket",
        ))
    }

    fn realtime_close(&mut self) -> Result<(), TransportError> {
        Ok(())
    }
}
