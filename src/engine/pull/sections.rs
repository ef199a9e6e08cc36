//! The pull's `SUB_START … SUB_END` sections (SPEC §4.4–§4.7), one per
//! subscription in the order the module docs of [`super`] give: revoked,
//! reset, bootstrap ([`super::bootstrap`]) or incremental ([`super::window`]).

use std::io::Write;

use syncular_protocol::scopes::ScopeMap;
use syncular_protocol::response::{ResponseWriter, SubEnd, SubStart, SubStatus};
use syncular_protocol::ErrorCode;

use super::bootstrap::{
    bootstrap_start, delivers_segments, resume_token, BootstrapRequest, BootstrapRun, BootstrapStart,
};
use super::limits::PullLimits;
use super::subscriptions::{ResolvedSubscription, SubscriptionStatus};
use super::window::{run_window, WindowRequest};
use super::{bytes_written, encoder, wire_scope_map, OpenBootstrap, PullOutcome, Section, SectionEnd};
use crate::engine::budget::Budget;
use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult};
use crate::store::pull::window::PartitionBounds;

pub(super) fn section<W: Write>(
    ctx: &SyncContext<'_>,
    limits: &PullLimits,
    bounds: PartitionBounds,
    sub: &ResolvedSubscription,
    writer: &mut ResponseWriter<W>,
    budget: &mut Budget,
    outcome: &mut PullOutcome,
) -> EngineResult<Section> {
    let effective = match &sub.status {
        SubscriptionStatus::Revoked => {
            return inactive(writer, sub, SubStatus::Revoked, ErrorCode::ScopeRevoked).map(Section::Ended);
        }
        SubscriptionStatus::Active { effective } => effective,
    };
    if sub.bootstrap_state.is_none() && sub.cursor >= 0 && sub.cursor < bounds.horizon_seq {
        return inactive(writer, sub, SubStatus::Reset, ErrorCode::CursorExpired).map(Section::Ended);
    }
    let bootstrapping = sub.bootstraps_by_request() || sub.cursor > bounds.max_commit_seq;
    if bootstrapping {
        bootstrap_section(ctx, limits, bounds, sub, effective, writer, budget)
    } else {
        incremental_section(ctx, limits, bounds, sub, effective, writer, budget, outcome).map(Section::Ended)
    }
}

/// A revoked or reset section: empty effective map, no data, cursor echoed.
pub(super) fn inactive<W: Write>(
    writer: &mut ResponseWriter<W>,
    sub: &ResolvedSubscription,
    status: SubStatus,
    reason: ErrorCode,
) -> EngineResult<SectionEnd> {
    writer
        .sub_start(&SubStart {
            id: sub.id.clone(),
            status,
            reason_code: reason.as_str().to_owned(),
            effective_scopes: Vec::new(),
            bootstrap: false,
        })
        .map_err(encoder)?;
    writer.sub_end(&SubEnd { next_cursor: sub.cursor, bootstrap_state: None }).map_err(encoder)?;
    Ok(SectionEnd { next_cursor: sub.cursor, active: false })
}

pub(super) fn active_start<W: Write>(
    writer: &mut ResponseWriter<W>,
    sub: &ResolvedSubscription,
    effective: &ScopeMap,
    bootstrap: bool,
) -> EngineResult<()> {
    writer
        .sub_start(&SubStart {
            id: sub.id.clone(),
            status: SubStatus::Active,
            reason_code: String::new(),
            effective_scopes: wire_scope_map(effective)?,
            bootstrap,
        })
        .map_err(encoder)?;
    Ok(())
}

/// The [`BootstrapRequest`] of `sub`'s section at `start`.
pub(super) fn bootstrap_request<'a>(
    ctx: &'a SyncContext<'_>,
    limits: &PullLimits,
    sub: &ResolvedSubscription,
    effective: &'a ScopeMap,
    start: BootstrapStart,
    fresh: bool,
) -> EngineResult<BootstrapRequest<'a>> {
    let table = ctx.schema.table(&sub.table).ok_or_else(|| {
        EngineError::internal(format!("validated table {:?} vanished from the schema", sub.table))
    })?;
    Ok(BootstrapRequest {
        partition: &ctx.partition,
        log_epoch: &ctx.log_epoch,
        now_ms: ctx.now_ms,
        schema_version: ctx.schema.version,
        table,
        effective,
        start,
        fresh,
        limits: *limits,
    })
}

/// Writes the start of a bootstrap section: the whole section when the
/// budget defers it, else its `SUB_START` — the pages follow
/// ([`PullStream::bootstrap_segment`]).
pub(super) fn bootstrap_section<W: Write>(
    ctx: &SyncContext<'_>,
    limits: &PullLimits,
    bounds: PartitionBounds,
    sub: &ResolvedSubscription,
    effective: &ScopeMap,
    writer: &mut ResponseWriter<W>,
    budget: &mut Budget,
) -> EngineResult<Section> {
    let start = bootstrap_start(
        sub.bootstrap_state.as_deref(),
        &sub.table,
        bounds.max_commit_seq,
        bounds.horizon_seq,
    );
    let fresh = sub.cursor < 0 && sub.bootstrap_state.is_none();
    let req = bootstrap_request(ctx, limits, sub, effective, start.clone(), fresh)?;
    let delivers = delivers_segments(req.fresh, budget, bytes_written(writer));
    active_start(writer, sub, effective, delivers)?;
    if !delivers {
        // Deferred whole by the budget: come back at the same position.
        budget.note_deferred();
        let as_of = req.start.as_of_commit_seq;
        let token = resume_token(&req, req.start.row_cursor.clone());
        writer
            .sub_end(&SubEnd { next_cursor: as_of, bootstrap_state: Some(token) })
            .map_err(encoder)?;
        return Ok(Section::Ended(SectionEnd { next_cursor: as_of, active: true }));
    }
    let run = BootstrapRun::new(&req);
    Ok(Section::Open(OpenBootstrap { start, fresh, run }))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn incremental_section<W: Write>(
    ctx: &SyncContext<'_>,
    limits: &PullLimits,
    bounds: PartitionBounds,
    sub: &ResolvedSubscription,
    effective: &ScopeMap,
    writer: &mut ResponseWriter<W>,
    budget: &mut Budget,
    outcome: &mut PullOutcome,
) -> EngineResult<SectionEnd> {
    active_start(writer, sub, effective, false)?;
    let req = WindowRequest {
        partition: &ctx.partition,
        table: &sub.table,
        effective,
        cursor: sub.cursor,
        max_commit_seq: bounds.max_commit_seq,
        limit_changes: limits.limit_commits,
    };
    let written = bytes_written(writer);
    let result = run_window(&req, budget, written, |commit| {
        writer.commit(commit.frame()).map_err(encoder)?;
        Ok(bytes_written(writer))
    })?;
    outcome.commits += result.commits;
    writer
        .sub_end(&SubEnd { next_cursor: result.next_cursor, bootstrap_state: None })
        .map_err(encoder)?;
    Ok(SectionEnd { next_cursor: result.next_cursor, active: true })
}
