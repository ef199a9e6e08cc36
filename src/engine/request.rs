//! The order of work of one sync round (SPEC §1.5–§1.7, §2.1, §3.2, §6.1,
//! §9): decode → partition registry → epoch/wire gate → schema floor →
//! reset response → client record → operation cap → allowed scopes →
//! subscription validation → push half → pull half.
//!
//! Every check that fails the request runs before any push is attempted, so
//! a request-level error leaves nothing applied (and the caller's
//! transaction aborts anyway). The response is written in the request's
//! wire version (§9).

use std::rc::Rc;

use serde_json::Value;
use syncular_protocol::constants::WIRE_VERSION_1;
use syncular_protocol::request::{decode_request, Request};
use syncular_protocol::response::{Lease, RespEpoch, RespHeader, ResponseWriter};
use syncular_protocol::ErrorCode;

use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult, HostCode};
use crate::engine::partition::{self, EpochGate};
use crate::engine::leases;
use crate::engine::resolver::{self, Allowed, Resolution};
use crate::engine::schema::RegisteredSchema;
use crate::engine::{clock, pull, push, subscriptions};
use crate::store::clients_write;
use crate::store::leases::LeaseContext;
use crate::store::request_context::{self, ClientRow, PullPart};

/// Longest partition name accepted, in bytes: its commit NOTIFY payload
/// (`base64url(partition) + ":" + commitSeq`) must stay under Postgres's
/// 8000-byte payload limit.
pub const MAX_PARTITION_BYTES: usize = 4096;

/// Checks the caller's identity arguments: a partition of at most
/// [`MAX_PARTITION_BYTES`]. Errors: `syncular.invalid_argument`.
pub fn check_caller(caller: &Caller<'_>) -> EngineResult<()> {
    crate::engine::validators::refuse_reentry("a sync call")?;
    check_partition(caller.partition)
}

/// Refuses a partition longer than [`MAX_PARTITION_BYTES`] with
/// `syncular.invalid_argument` (22023) — for the sync functions and for
/// captured plain SQL writes alike.
pub fn check_partition(partition: &str) -> EngineResult<()> {
    if partition.len() > MAX_PARTITION_BYTES {
        return Err(EngineError::host(
            HostCode::InvalidArgument,
            format!(
                "partition is {} bytes long; at most {MAX_PARTITION_BYTES} bytes are accepted \
                 (the commit NOTIFY payload must stay under 8000 bytes)",
                partition.len()
            ),
        ));
    }
    Ok(())
}

/// The reserved server-command client id prefix (§1.5).
pub const REMOTE_COMMAND_PREFIX: &str = "[\"remote-command\",";

/// Which halves of the request a call executes. Validation is identical for
/// all three, so the same request bytes fail the same way whichever is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Halves {
    /// `syncular.sync`: push then pull.
    Both,
    /// `syncular.push`: `PUSH_RESULT`s only (any pull half is not served).
    PushOnly,
    /// `syncular.pull`: subscriptions only (any push half is not applied).
    PullOnly,
}

/// The caller-supplied identity and authorization of a request.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// Host partition (tenant); never on the wire.
    pub partition: &'a str,
    /// Authenticated actor.
    pub actor_id: &'a str,
    /// The gateway's §3.2 allowed map, or `None` to call the registered resolver.
    pub allowed_scopes: Option<&'a Value>,
    /// The realtime connection's `clientId` when the request is a §8.7
    /// socket round: `REQ_HEADER.clientId` must equal it. `None` over HTTP.
    pub connection_client_id: Option<&'a str>,
}

/// §8.7: a socket round's `REQ_HEADER.clientId` must equal the connection's
/// `clientId` (registration identity would otherwise be ambiguous).
/// Errors: `sync.invalid_client_id`.
pub fn check_connection_client_id(caller: &Caller<'_>, client_id: &str) -> EngineResult<()> {
    match caller.connection_client_id {
        Some(expected) if expected != client_id => Err(EngineError::protocol(
            ErrorCode::InvalidClientId,
            format!(
                "REQ_HEADER.clientId {client_id:?} differs from the realtime connection's clientId \
                 {expected:?}; a socket round must use the connection's clientId (§8.7)"
            ),
        )),
        _ => Ok(()),
    }
}

fn v2_epoch(wire_version: u16, log_epoch: &str, reset_required: bool) -> Option<RespEpoch> {
    (wire_version != WIRE_VERSION_1).then(|| RespEpoch {
        log_epoch: log_epoch.to_owned(),
        reset_required,
    })
}

/// A response the server failed to encode is a server bug, never the
/// client's request: `syncular.internal`.
fn encoding(e: syncular_protocol::ProtocolError) -> EngineError {
    EngineError::internal(format!("response encoding failed: {e}"))
}

fn header_only(wire_version: u16, header: &RespHeader) -> EngineResult<Vec<u8>> {
    let writer =
        ResponseWriter::new(Vec::with_capacity(64), wire_version, header).map_err(encoding)?;
    writer.finish().map_err(encoding)
}

/// The allowed map of a request and where it came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The §3.2 allowed map (or denied).
    pub allowed: Allowed,
    /// `true` when a live source decided (the gateway's map, the resolver);
    /// `false` when the stored auth lease did (§7.3.3 outage service).
    pub live: bool,
    /// The serving lease's expiry (Unix ms) when the lease decided.
    pub lease_expires_at_ms: Option<i64>,
}

/// §3.2 rule 3: the allowed map, from the gateway argument or the resolver,
/// key-validated against the union of every table's declared variables.
/// When either signals an outage (§7.3.3, [`leases::OUTAGE_SIGNAL`]), the
/// stored auth lease of `(partition, client_id)` decides instead
/// ([`leases::authorize`]; `lease`: what the request already read, `None`:
/// read it). Errors: `sync.invalid_subscription` (undeclared key), a
/// malformed map argument (`syncular.invalid_argument`) or resolver result
/// (`syncular.resolver_malformed`), `sync.auth_lease_required` /
/// `sync.auth_lease_revoked` (28000) under an outage, resolver storage failures.
pub fn resolve_allowed(
    caller: &Caller<'_>,
    schema: &RegisteredSchema,
    client_id: &str,
    now_ms: i64,
    lease: Option<&LeaseContext>,
) -> EngineResult<Resolved> {
    let live = match caller.allowed_scopes {
        Some(value) if leases::is_outage_signal(value) => None,
        Some(value) => Some(resolver::parse_allowed_map(value).map(Allowed::Map).map_err(|problem| {
            EngineError::host(HostCode::InvalidArgument, format!("allowed_scopes argument {problem}"))
        })?),
        None => match resolver::resolve(caller.partition, caller.actor_id)? {
            Resolution::Live(allowed) => Some(allowed),
            Resolution::Outage => None,
        },
    };
    let resolved = match live {
        Some(allowed) => Resolved { allowed, live: true, lease_expires_at_ms: None },
        None => {
            let leased = leases::authorize(caller.partition, client_id, caller.actor_id, now_ms, lease)?;
            Resolved { allowed: Allowed::Map(leased.allowed), live: false, lease_expires_at_ms: Some(leased.expires_at_ms) }
        }
    };
    if let Allowed::Map(map) = &resolved.allowed {
        let declared = schema.variables();
        let undeclared: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !declared.contains_key(k))
            .collect();
        if !undeclared.is_empty() {
            return Err(EngineError::protocol(
                ErrorCode::InvalidSubscription,
                format!("allowed scopes name variable(s) no table declares: {undeclared:?} (§3.2 rule 3)"),
            ));
        }
    }
    Ok(resolved)
}

/// §7.3.3 issuance: the `LEASE` frame of a round, when leases are on, the
/// allowed map came from a live source, and this call issues for the round
/// — `syncular.sync` and `syncular.push` always, `syncular.pull` only for a
/// request without `PUSH_COMMIT` frames (a gateway that splits a round into
/// `push` then `pull` gets the frame once, from the push half). Errors:
/// store failures.
fn round_lease(
    ctx: &SyncContext<'_>,
    resolved_live: bool,
    halves: Halves,
    has_commits: bool,
    lease: Option<&LeaseContext>,
) -> EngineResult<Option<Lease>> {
    let (Some(ttl_ms), Some(lease), Allowed::Map(map)) = (crate::settings::lease_ttl_ms(), lease, &ctx.allowed) else {
        return Ok(None);
    };
    if !resolved_live || (halves == Halves::PullOnly && has_commits) {
        return Ok(None);
    }
    leases::issue(&ctx.partition, &ctx.client_id, &ctx.actor_id, map, ctx.now_ms, ttl_ms, lease)
}

/// §1.5 client record: refuses the reserved server-command prefix and a
/// `clientId` bound to another actor in the partition
/// (`sync.invalid_client_id`), else binds it and stores `wire_version`.
pub fn bind_client_id(
    partition: &str,
    client_id: &str,
    actor_id: &str,
    wire_version: u16,
    now_ms: i64,
) -> EngineResult<()> {
    check_client_id(client_id)?;
    write_binding(partition, client_id, actor_id, wire_version, now_ms)
}

/// The client record's upsert; `sync.invalid_client_id` when it is bound to another actor.
fn write_binding(partition: &str, client_id: &str, actor_id: &str, wire_version: u16, now_ms: i64) -> EngineResult<()> {
    if !clients_write::bind_client(partition, client_id, actor_id, i32::from(wire_version), now_ms)? {
        return Err(client_bound_elsewhere());
    }
    Ok(())
}

/// [`bind_client_id`] with the client's record already read by the caller
/// (`existing`, `None` when absent): nothing is written when the record is
/// bound to `actor_id`, has this `wire_version` and was written less than
/// `syncular.activity_refresh_ms` ago. Errors: as [`bind_client_id`].
pub fn bind_client_read(
    partition: &str,
    client_id: &str,
    actor_id: &str,
    wire_version: u16,
    now_ms: i64,
    existing: Option<&ClientRow>,
) -> EngineResult<()> {
    check_client_id(client_id)?;
    if let Some(row) = existing {
        if row.actor_id != actor_id {
            return Err(client_bound_elsewhere());
        }
        let due = row.updated_at_ms > now_ms || clock::activity_refresh_due(row.updated_at_ms, now_ms);
        if row.wire_version == i32::from(wire_version) && !due {
            return Ok(());
        }
    }
    write_binding(partition, client_id, actor_id, wire_version, now_ms)
}

/// `sync.invalid_client_id` for a `clientId` bound to another actor (§1.5).
pub fn client_bound_elsewhere() -> EngineError {
    EngineError::protocol(
        ErrorCode::InvalidClientId,
        "clientId is already bound to a different actor in this partition (§1.5)",
    )
}

/// The §1.5 checks of a `clientId` that need no storage: a NUL character
/// (`sync.invalid_request`: Postgres `text` cannot hold it) and the reserved
/// server-command prefix (`sync.invalid_client_id`).
pub fn check_client_id(client_id: &str) -> EngineResult<()> {
    if client_id.contains('\0') {
        return Err(EngineError::protocol(
            ErrorCode::InvalidRequest,
            "clientId contains a NUL character, which this server cannot store",
        ));
    }
    if client_id.starts_with(REMOTE_COMMAND_PREFIX) {
        return Err(EngineError::protocol(
            ErrorCode::InvalidClientId,
            format!("clientId may not start with the reserved server-command prefix {REMOTE_COMMAND_PREFIX} (§1.5)"),
        ));
    }
    Ok(())
}

/// Runs one SSP2 request for `caller` and returns the encoded response.
///
/// Errors (the whole request fails; raised by the API as a Postgres ERROR):
/// - any §1.7 decode error: `sync.invalid_request` / `sync.empty_commit`;
/// - `sync.invalid_client_id` when `caller.connection_client_id` is set and
///   differs from `REQ_HEADER.clientId` (§8.7), before anything is written;
/// - `sync.client_wire_unsupported` (wire v1 after an epoch rotation);
/// - `sync.invalid_request` (v2 without `logEpoch` carrying pushes, or a
///   `PULL_HEADER.accept` without bits 0 and 1 — E2b's validation);
/// - `sync.invalid_client_id` (reserved prefix, or bound to another actor);
/// - `sync.too_many_operations` (§6.1 cap, GUC `syncular.max_operations`);
/// - `sync.invalid_subscription` / `sync.unknown_table` (subscriptions,
///   allowed-map keys);
/// - `syncular.no_schema`, `syncular.invalid_argument` (malformed
///   `allowed_scopes`), `syncular.resolver_malformed`, `syncular.internal`.
///
/// Not errors: an unserved `schemaVersion` (schema-floor response) and an
/// absent/different v2 `logEpoch` (reset response).
pub fn run(caller: &Caller<'_>, request: &[u8], halves: Halves) -> EngineResult<Vec<u8>> {
    match begin(caller, request, halves)? {
        Begun::Complete(bytes) => Ok(bytes),
        Begun::Pulling(mut open) => {
            while open.step()? {}
            open.writer.finish().map_err(encoding)
        }
    }
}

/// How [`begin`] left a round.
enum Begun {
    /// The whole response (schema floor, reset, push only, no pull half).
    Complete(Vec<u8>),
    /// Everything before the first subscription section is written; the
    /// pull half's sections follow.
    Pulling(Box<OpenPull>),
}

/// A round whose pull half is under way: the context it runs under, the
/// resumable pull and the writer (whose sink holds what was not drained).
struct OpenPull {
    ctx: OwnedContext,
    stream: pull::PullStream,
    writer: ResponseWriter<Vec<u8>>,
}

impl OpenPull {
    /// One [`pull::PullStream::step`]; `false` when only `END` remains.
    fn step(&mut self) -> EngineResult<bool> {
        let ctx = self.ctx.view();
        self.stream.step(&ctx, &mut self.writer)
    }
}

/// A [`SyncContext`] that owns its schema, so a round can outlive the call
/// that began it (one SQL call per chunk of a streamed round).
struct OwnedContext {
    schema: Rc<RegisteredSchema>,
    partition: String,
    actor_id: String,
    client_id: String,
    wire_version: u16,
    allowed: Allowed,
    log_epoch: String,
    now_ms: i64,
    response_budget_bytes: usize,
    max_operations: usize,
    notification_key: Option<Vec<u8>>,
}

impl OwnedContext {
    fn view(&self) -> SyncContext<'_> {
        SyncContext {
            partition: self.partition.clone(),
            actor_id: self.actor_id.clone(),
            client_id: self.client_id.clone(),
            wire_version: self.wire_version,
            schema: &self.schema,
            allowed: self.allowed.clone(),
            log_epoch: self.log_epoch.clone(),
            now_ms: self.now_ms,
            response_budget_bytes: self.response_budget_bytes,
            max_operations: self.max_operations,
            notification_key: self.notification_key.clone(),
        }
    }
}

/// Records the request's `ROUND_FAILURE` report (wire version 3,
/// [`crate::engine::round_failures`]) once per request: not by the pull
/// half of a request whose push half (a separate `syncular.push` call)
/// already did, and only for a client record bound to the caller's actor —
/// `bound` when the binding was written or checked, else `existing` decides
/// (a round that ends at the schema floor or an epoch reset, before the
/// binding). Never fails the round for the report's sake beyond a store
/// failure.
fn record_round_failure(
    caller: &Caller<'_>,
    req: &Request,
    halves: Halves,
    bound: bool,
    existing: Option<&ClientRow>,
    now_ms: i64,
) -> EngineResult<()> {
    let Some(code) = req.round_failure.as_deref() else { return Ok(()) };
    if halves == Halves::PullOnly && !req.commits.is_empty() {
        return Ok(());
    }
    let client_id = req.header.client_id.as_str();
    let known = bound || existing.is_some_and(|row| row.actor_id == caller.actor_id);
    if !known || client_id.contains('\0') {
        return Ok(());
    }
    crate::engine::round_failures::record(caller.partition, client_id, code, now_ms)
}

/// Everything of a round up to its first subscription section: the gates,
/// validation, the lease and the push half (errors: as [`run`]).
fn begin(caller: &Caller<'_>, request: &[u8], halves: Halves) -> EngineResult<Begun> {
    check_caller(caller)?;
    let req: Request = decode_request(request)?;
    check_connection_client_id(caller, &req.header.client_id)?;
    let wire = req.wire_version;
    let now_ms = clock::now_ms()?;
    // A clientId Postgres cannot hold (NUL) is refused at binding, after the gates.
    let lookup_id = Some(req.header.client_id.as_str()).filter(|c| !c.contains('\0'));
    // A pull reads the log bounds behind the pruning fence (§4.6), taken now: a round that only
    // pulls reads them with its context; after a push half, once the push is written (so the
    // pull sees the request's own commits).
    let pulls = halves != Halves::PushOnly && req.pull.is_some();
    let pull_part = match (pulls, halves == Halves::PullOnly || req.commits.is_empty()) {
        (false, _) => PullPart::None,
        (true, true) => PullPart::BoundsNow,
        (true, false) => PullPart::BoundsLater,
    };
    // The push's locks go with the fences, before the first statement — unless the request
    // is over the operation cap (refused below: no thousands of lock-table entries first).
    let total_ops: usize = req.commits.iter().map(|c| c.operations.len()).sum();
    let pushes = halves != Halves::PullOnly && total_ops <= crate::settings::max_operations();
    let push_keys =
        if pushes { push::lock_keys(caller.partition, &req.header.client_id, &req.commits) } else { Vec::new() };
    // Leases on: the client's lease and the key come with the context (no extra statement).
    let leases_on = crate::settings::lease_ttl_ms().is_some();
    // With the locks taken, the context read also brings the commits' stored outcomes (§6.3).
    let commit_ids = if pushes && lookup_id.is_some() { push::commit_ids(&req.commits) } else { Vec::new() };
    let context = request_context::read(caller.partition, lookup_id, pull_part, push_keys, leases_on, &commit_ids)?;

    let registry = partition::touch_read(caller.partition, context.registry, now_ms)?;
    let gate = partition::gate(
        &registry,
        wire,
        req.header.log_epoch.as_deref(),
        req.commits.len(),
    )?;

    let schema = crate::engine::schema::require_registered_schema_at(context.schema_key)?;
    let served = schema.version;
    if req.header.schema_version != served || gate == EpochGate::Reset {
        record_round_failure(caller, &req, halves, false, context.client.as_ref(), now_ms)?;
    }
    if req.header.schema_version != served {
        let reset = partition::reset_required(&registry, wire, req.header.log_epoch.as_deref());
        return header_only(
            wire,
            &RespHeader {
                required_schema_version: Some(served),
                latest_schema_version: Some(served),
                epoch: v2_epoch(wire, &registry.log_epoch, reset),
            },
        )
        .map(Begun::Complete);
    }
    if gate == EpochGate::Reset {
        return header_only(
            wire,
            &RespHeader {
                required_schema_version: None,
                latest_schema_version: Some(served),
                epoch: v2_epoch(wire, &registry.log_epoch, true),
            },
        )
        .map(Begun::Complete);
    }

    let client_id = req.header.client_id.as_str();
    bind_client_read(caller.partition, client_id, caller.actor_id, wire, now_ms, context.client.as_ref())?;
    record_round_failure(caller, &req, halves, true, None, now_ms)?;

    let max_operations = crate::settings::max_operations();
    if total_ops > max_operations {
        return Err(EngineError::protocol(
            ErrorCode::TooManyOperations,
            format!("request carries {total_ops} operations; the limit is {max_operations} per request (§6.1)"),
        ));
    }

    if let Some(c) = req
        .commits
        .iter()
        .find(|c| c.client_commit_id.contains('\0'))
    {
        return Err(EngineError::protocol(
            ErrorCode::InvalidRequest,
            format!(
                "clientCommitId {:?} contains a NUL character, which this server cannot store",
                c.client_commit_id
            ),
        ));
    }

    let resolved = resolve_allowed(caller, &schema, client_id, now_ms, context.lease.as_ref())?;
    let owned = OwnedContext {
        schema,
        partition: caller.partition.to_owned(),
        actor_id: caller.actor_id.to_owned(),
        client_id: client_id.to_owned(),
        wire_version: wire,
        allowed: resolved.allowed,
        log_epoch: registry.log_epoch.clone(),
        now_ms,
        response_budget_bytes: crate::settings::response_budget_bytes(),
        max_operations,
        notification_key: context.notification_key.clone(),
    };
    let ctx = owned.view();

    let subs = match &req.pull {
        Some(pull_req) => Some(subscriptions::validate(&ctx, pull_req)?),
        None => None,
    };

    let mut writer = ResponseWriter::new(
        Vec::with_capacity(256),
        wire,
        &RespHeader {
            required_schema_version: None,
            latest_schema_version: Some(served),
            epoch: v2_epoch(wire, &registry.log_epoch, false),
        },
    )
    .map_err(encoding)?;
    // §7.3.2: the lease frame right after RESP_HEADER, before any push result.
    if let Some(lease) = round_lease(&ctx, resolved.live, halves, !req.commits.is_empty(), context.lease.as_ref())? {
        writer.lease(&lease).map_err(encoding)?;
    }

    if halves != Halves::PullOnly {
        for answer in push::run_locked(&ctx, &req.commits, &context.stored_outcomes)? {
            writer.push_result(&answer.result).map_err(encoding)?;
            if let Some(details) = &answer.details {
                writer.push_result_details(details).map_err(encoding)?;
            }
        }
    }
    if halves != Halves::PushOnly {
        if let (Some(pull_req), Some(subs)) = (&req.pull, subs) {
            let stream = pull::PullStream::start(&ctx, pull_req, subs, context.bounds)?;
            drop(ctx);
            return Ok(Begun::Pulling(Box::new(OpenPull { ctx: owned, stream, writer })));
        }
    }
    writer.finish().map_err(encoding).map(Begun::Complete)
}

/// An owned [`Caller`], for a round that outlives its first call.
#[derive(Debug, Clone)]
pub struct OwnedCaller {
    /// [`Caller::partition`].
    pub partition: String,
    /// [`Caller::actor_id`].
    pub actor_id: String,
    /// [`Caller::allowed_scopes`].
    pub allowed_scopes: Option<Value>,
    /// [`Caller::connection_client_id`].
    pub connection_client_id: Option<String>,
}

impl OwnedCaller {
    fn view(&self) -> Caller<'_> {
        Caller {
            partition: &self.partition,
            actor_id: &self.actor_id,
            allowed_scopes: self.allowed_scopes.as_ref(),
            connection_client_id: self.connection_client_id.as_deref(),
        }
    }
}

/// One round produced in chunks (§1.4: no response-sized buffer) — the
/// engine of `syncular.sync_stream` / `syncular.pull_stream`. Each
/// [`RoundStream::next_chunk`] does one step of work and returns the bytes it
/// wrote: the first chunk carries `RESP_HEADER`, the `LEASE` and every
/// `PUSH_RESULT` (or the whole response when the round has no pull half or
/// ends at the schema floor / a reset); then one chunk per subscription
/// section; the last chunk is `END`, written after the §4.5 bookkeeping.
/// Concatenated, the chunks are byte for byte the response [`run`] returns
/// for the same request and database state — [`run`] drives the same steps.
///
/// A request-level error surfaces from the call that meets it (the first
/// one for every check of [`run`]'s list; a later one only for store or
/// encoder failures); afterwards the stream is over.
pub struct RoundStream {
    state: RoundState,
}

enum RoundState {
    Pending { caller: OwnedCaller, request: Vec<u8>, halves: Halves },
    Pulling(Box<OpenPull>),
    Finished(Vec<u8>),
    Done,
}

impl RoundStream {
    /// A round of `request` for `caller`, nothing run yet.
    pub fn new(caller: OwnedCaller, request: Vec<u8>, halves: Halves) -> Self {
        RoundStream { state: RoundState::Pending { caller, request, halves } }
    }

    /// The next chunk (never empty), `None` once `END` was returned.
    /// Errors: as [`run`]; the stream is over after an error.
    pub fn next_chunk(&mut self) -> EngineResult<Option<Vec<u8>>> {
        let result = self.next_inner();
        if result.is_err() {
            self.state = RoundState::Done;
        }
        result
    }

    fn next_inner(&mut self) -> EngineResult<Option<Vec<u8>>> {
        loop {
            match std::mem::replace(&mut self.state, RoundState::Done) {
                RoundState::Done => return Ok(None),
                RoundState::Finished(bytes) => return Ok(Some(bytes)),
                RoundState::Pending { caller, request, halves } => {
                    self.state = match begin(&caller.view(), &request, halves)? {
                        Begun::Complete(bytes) => RoundState::Finished(bytes),
                        Begun::Pulling(open) => RoundState::Pulling(open),
                    };
                }
                RoundState::Pulling(mut open) => {
                    if open.step()? {
                        self.state = RoundState::Pulling(open);
                    } else {
                        let OpenPull { writer, .. } = *open;
                        self.state = RoundState::Finished(writer.finish().map_err(encoding)?);
                        continue;
                    }
                }
            }
            if let RoundState::Pulling(open) = &mut self.state {
                let bytes = std::mem::take(open.writer.sink_mut());
                if !bytes.is_empty() {
                    return Ok(Some(bytes));
                }
            }
        }
    }
}
