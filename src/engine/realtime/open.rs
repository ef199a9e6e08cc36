//! Session open and registration reload (SPEC §8.1, §8.7; docs/src/sql/realtime.md
//! `syncular.realtime_open`).
//!
//! Order of work: identity checks (partition size, `clientId` NUL / reserved
//! prefix) → the registered schema (behind the schema fence) → the
//! partition's write fence → partition registry touch (created with a fresh
//! `logEpoch` on first sight) → the client record (bound to
//! another actor → `sync.invalid_client_id`; none → no registrations) →
//! `latestCursor` (read before the scopes are resolved) → allowed scopes (a gateway's map is always validated; the resolver runs
//! once, only when there is something to register) → the registrations and
//! their scope keys. Nothing but the
//! registry's last-seen time is written: no client record is created.

use serde_json::Value;
use syncular_protocol::realtime_open::Opened;

use crate::engine::error::{EngineError, EngineResult};
use crate::engine::realtime::registrations::{self, Registration};
use crate::engine::auth::caller::{check_caller, resolve_allowed, Caller};
use crate::engine::auth::client_id::{check_client_id, client_bound_elsewhere};
use crate::engine::{clock, partition, schema};
use crate::store::pull::window::read_partition_bounds;
use crate::store::realtime as store;

/// The wire version deltas use for a client with no record (the newest).
pub const DEFAULT_WIRE_VERSION: i32 = 2;

/// Everything a gateway needs to greet (§8.1 `hello`) and register one
/// connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Fresh per call (`gen_random_uuid()`).
    pub session_id: String,
    /// The client record's cursor, −1 without a record.
    pub cursor: i64,
    /// The partition's `max_commit_seq`, read before the registrations were
    /// resolved (so they are current for every commit up to it).
    pub latest_cursor: i64,
    /// No record, or `cursor < latest_cursor`.
    pub requires_sync: bool,
    /// The record's accepted wire version ([`DEFAULT_WIRE_VERSION`] without one).
    pub wire_version: i32,
    /// The partition's current `logEpoch`.
    pub log_epoch: String,
    /// The served schema version.
    pub schema_version: i32,
    /// The re-resolved registrations (record order).
    pub registrations: Vec<Registration>,
    /// Their scope keys, sorted and distinct.
    pub scope_keys: Vec<String>,
    /// When the registrations were resolved from an auth lease (the §7.3.3
    /// outage signal): its expiry, Unix ms — the gateway ends the session then.
    pub lease_expires_at_ms: Option<i64>,
}

impl Session {
    /// What `syncular.realtime_open` returns (the gateway contract §2; the
    /// one type gateways decode).
    pub fn to_opened(&self, caller: &Caller<'_>, client_id: &str) -> Opened {
        Opened {
            session_id: self.session_id.clone(),
            actor_id: caller.actor_id.to_owned(),
            client_id: client_id.to_owned(),
            cursor: self.cursor,
            latest_cursor: self.latest_cursor,
            requires_sync: self.requires_sync,
            wire_version: i64::from(self.wire_version),
            log_epoch: self.log_epoch.clone(),
            schema_version: i64::from(self.schema_version),
            registrations: registrations::to_json(&self.registrations),
            scope_keys: self.scope_keys.clone(),
            lease_expires_at_ms: self.lease_expires_at_ms,
        }
    }

    /// [`Session::to_opened`] as the JSON `syncular.realtime_open` returns.
    /// Errors: `syncular.internal` (never for this shape).
    pub fn to_json(&self, caller: &Caller<'_>, client_id: &str) -> EngineResult<Value> {
        serde_json::to_value(self.to_opened(caller, client_id))
            .map_err(|e| EngineError::internal(format!("realtime_open answer does not encode: {e}")))
    }
}

/// Opens (or reloads) the realtime session of `client_id` for `caller`.
/// Errors: `syncular.invalid_argument` (partition too long, malformed
/// `allowed_scopes`), `sync.invalid_request` (NUL in `client_id`),
/// `sync.invalid_client_id` (reserved prefix, bound to another actor),
/// `syncular.no_schema`, `sync.invalid_subscription` (allowed map names an
/// undeclared variable), resolver errors (`syncular.resolver_malformed`,
/// `syncular.invalid_resolver`, re-raised transient SQLSTATEs).
pub fn open(caller: &Caller<'_>, client_id: &str) -> EngineResult<Session> {
    check_caller(caller)?;
    check_client_id(client_id)?;
    let now_ms = clock::now_ms()?;
    // Behind the schema fence: a bump never lands between this read and the log reads.
    let schema = schema::require_fenced_schema()?;
    // The partition's write fence before the first write, after the schema fence (every
    // taker's order: a drop batch holds the first while it waits for the second).
    crate::store::lifecycle::fence::share_writes(caller.partition);
    let registry = partition::touch(caller.partition, now_ms)?;
    let (session_id, record) = store::open_client(caller.partition, client_id)?;
    if let Some(record) = &record {
        if record.actor_id != caller.actor_id {
            return Err(client_bound_elsewhere());
        }
    }
    // Read before the scopes are resolved: every commit up to `latestCursor`
    // was committed before the resolver's snapshot, so registrations resolved
    // here may serve it (a gateway caps deltas for refreshed sessions at it).
    let latest_cursor = read_partition_bounds(caller.partition)?.max_commit_seq;
    // A gateway's allowed map is always validated (cheap, and a bad one is
    // a host bug to surface at connect); the resolver runs only when there
    // is something to register.
    let subscriptions = record.as_ref().map(|r| r.subscriptions_json.as_str()).filter(|s| s.trim() != "[]");
    let (registrations, lease_expires_at_ms) = if subscriptions.is_some() || caller.allowed_scopes.is_some() {
        let resolved = resolve_allowed(caller, &schema, client_id, now_ms, None)?;
        let regs = subscriptions.map_or_else(Vec::new, |subs| registrations::resolve(subs, &schema, &resolved.allowed));
        (regs, resolved.lease_expires_at_ms)
    } else {
        (Vec::new(), None)
    };
    let cursor = record.as_ref().map_or(-1, |r| r.cursor);
    Ok(Session {
        session_id,
        cursor,
        latest_cursor,
        requires_sync: record.is_none() || cursor < latest_cursor,
        wire_version: record.as_ref().map_or(DEFAULT_WIRE_VERSION, |r| r.wire_version),
        log_epoch: registry.log_epoch,
        schema_version: schema.version,
        scope_keys: registrations::scope_keys(&registrations, &schema),
        registrations,
        lease_expires_at_ms,
    })
}
