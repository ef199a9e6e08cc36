//! The steps of a round up to its first subscription section (SPEC §1.5–
//! §1.7, §2.1, §3.2, §6.1, §7.3.2): [`begin`] runs them in the order the
//! module docs of [`super`] give, one named step per function.

use std::rc::Rc;

use syncular_protocol::request::{decode_request, PushCommit, Request};
use syncular_protocol::response::{Lease, RespHeader, ResponseWriter};
use syncular_protocol::ErrorCode;

use super::failures::record_round_failure;
use super::{encoding, header_only, v2_epoch, Begun, Halves, OpenPull};
use crate::engine::auth::allowed::Allowed;
use crate::engine::auth::caller::{check_caller, check_connection_client_id, resolve_allowed, Caller};
use crate::engine::auth::client_id::bind_client_read;
use crate::engine::auth::leases;
use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::partition::{self, EpochGate};
use crate::engine::pull::subscriptions;
use crate::engine::schema::RegisteredSchema;
use crate::engine::storable::{preview, unstorable};
use crate::engine::{clock, pull, push};
use crate::store::auth::leases::LeaseContext;
use crate::store::partitions::RegistryRow;
use crate::store::push::outcomes::StoredOutcomes;
use crate::store::round::context::{self, ClientRow, PullPart, RequestContextRow};

/// Everything of a round up to its first subscription section: the gates,
/// validation, the lease and the push half (errors: as [`super::run`]).
pub(super) fn begin(caller: &Caller<'_>, request: &[u8], halves: Halves) -> EngineResult<Begun> {
    check_caller(caller)?;
    let req: Request = decode_request(request)?;
    check_connection_client_id(caller, &req.header.client_id)?;
    let wire = req.wire_version;
    let now_ms = clock::now_ms()?;
    let total_ops: usize = req.commits.iter().map(|c| c.operations.len()).sum();
    let context = read_context(caller, &req, halves, total_ops)?;

    let registry = partition::touch_read(caller.partition, context.registry, now_ms)?;
    let gate = partition::gate(&registry, wire, req.header.log_epoch.as_deref(), req.commits.len())?;
    let schema = crate::engine::schema::require_registered_schema_at(context.schema_key)?;
    if let Some(bytes) = gated_response(caller, &req, halves, context.client.as_ref(), &registry, gate, schema.version, now_ms)? {
        return Ok(Begun::Complete(bytes));
    }

    let client_id = req.header.client_id.as_str();
    bind_client_read(caller.partition, client_id, caller.actor_id, wire, now_ms, context.client.as_ref())?;
    record_round_failure(caller, &req, halves, true, None, now_ms)?;
    check_request_limits(&req, total_ops)?;

    let resolved = resolve_allowed(caller, &schema, client_id, now_ms, context.lease.as_ref())?;
    let served = schema.version;
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
        max_operations: crate::settings::max_operations(),
        notification_key: context.notification_key.clone(),
    };
    let ctx = owned.view();
    let subs = match &req.pull {
        Some(pull_req) => Some(subscriptions::validate(&ctx, pull_req)?),
        None => None,
    };

    let mut writer = response_head(wire, served, &registry.log_epoch)?;
    // §7.3.2: the lease frame right after RESP_HEADER, before any push result.
    if let Some(lease) = round_lease(&ctx, resolved.live, halves, !req.commits.is_empty(), context.lease.as_ref())? {
        writer.lease(&lease).map_err(encoding)?;
    }
    if halves != Halves::PullOnly {
        push_half(&ctx, &req.commits, &context.stored_outcomes, &mut writer)?;
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

/// The round's one context read (registry, schema key, client record,
/// lease, stored outcomes, and — for a pull — the log bounds), with the push
/// half's locks taken first.
fn read_context(caller: &Caller<'_>, req: &Request, halves: Halves, total_ops: usize) -> EngineResult<RequestContextRow> {
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
    let pushes = halves != Halves::PullOnly && total_ops <= crate::settings::max_operations();
    let push_keys =
        if pushes { push::lock_keys(caller.partition, &req.header.client_id, &req.commits) } else { Vec::new() };
    // Leases on: the client's lease and the key come with the context (no extra statement).
    let leases_on = crate::settings::lease_ttl_ms().is_some();
    // With the locks taken, the context read also brings the commits' stored outcomes (§6.3).
    let commit_ids = if pushes && lookup_id.is_some() { push::commit_ids(&req.commits) } else { Vec::new() };
    Ok(context::read(caller.partition, lookup_id, pull_part, push_keys, leases_on, &commit_ids)?)
}

/// The header-only answers before the client record: the schema floor (an
/// unserved `schemaVersion`) and the epoch reset, each after recording the
/// request's `ROUND_FAILURE` report. `None`: the round goes on.
#[allow(clippy::too_many_arguments)]
fn gated_response(
    caller: &Caller<'_>,
    req: &Request,
    halves: Halves,
    existing: Option<&ClientRow>,
    registry: &RegistryRow,
    gate: EpochGate,
    served: i32,
    now_ms: i64,
) -> EngineResult<Option<Vec<u8>>> {
    let wire = req.wire_version;
    if req.header.schema_version != served || gate == EpochGate::Reset {
        record_round_failure(caller, req, halves, false, existing, now_ms)?;
    }
    if req.header.schema_version != served {
        let reset = partition::reset_required(registry, wire, req.header.log_epoch.as_deref());
        let header = RespHeader {
            required_schema_version: Some(served),
            latest_schema_version: Some(served),
            epoch: v2_epoch(wire, &registry.log_epoch, reset),
        };
        return header_only(wire, &header).map(Some);
    }
    if gate == EpochGate::Reset {
        let header = RespHeader {
            required_schema_version: None,
            latest_schema_version: Some(served),
            epoch: v2_epoch(wire, &registry.log_epoch, true),
        };
        return header_only(wire, &header).map(Some);
    }
    Ok(None)
}

/// The request-level limits checked after the client record: the §6.1
/// operation cap (`sync.too_many_operations`) and a `clientCommitId`
/// Postgres cannot store or index (`sync.invalid_request`, [`unstorable`]).
fn check_request_limits(req: &Request, total_ops: usize) -> EngineResult<()> {
    let max_operations = crate::settings::max_operations();
    if total_ops > max_operations {
        return Err(EngineError::protocol(
            ErrorCode::TooManyOperations,
            format!("request carries {total_ops} operations; the limit is {max_operations} per request (§6.1)"),
        ));
    }
    if let Some((id, why)) = req.commits.iter().find_map(|c| unstorable(&c.client_commit_id).map(|why| (&c.client_commit_id, why))) {
        return Err(EngineError::protocol(ErrorCode::InvalidRequest, format!("clientCommitId {} {why}", preview(id))));
    }
    Ok(())
}

/// The response writer with the served `RESP_HEADER` written.
fn response_head(wire: u16, served: i32, log_epoch: &str) -> EngineResult<ResponseWriter<Vec<u8>>> {
    let header = RespHeader {
        required_schema_version: None,
        latest_schema_version: Some(served),
        epoch: v2_epoch(wire, log_epoch, false),
    };
    ResponseWriter::new(Vec::with_capacity(256), wire, &header).map_err(encoding)
}

/// The push half: one `PUSH_RESULT` (and its details, if any) per commit.
fn push_half(
    ctx: &SyncContext<'_>,
    commits: &[PushCommit],
    stored: &StoredOutcomes,
    writer: &mut ResponseWriter<Vec<u8>>,
) -> EngineResult<()> {
    for answer in push::run_locked(ctx, commits, stored)? {
        writer.push_result(&answer.result).map_err(encoding)?;
        if let Some(details) = &answer.details {
            writer.push_result_details(details).map_err(encoding)?;
        }
    }
    Ok(())
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

/// A [`SyncContext`] that owns its schema, so a round can outlive the call
/// that began it (one SQL call per chunk of a streamed round).
pub(super) struct OwnedContext {
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
    pub(super) fn view(&self) -> SyncContext<'_> {
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
