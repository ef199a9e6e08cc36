//! The pull half of a sync round (SPEC §4, §1.6): one `SUB_START … SUB_END`
//! section per subscription in request order, then the `sync_clients`
//! bookkeeping.
//!
//! Per subscription, in this order:
//! 1. revoked (§3.3) → `SUB_START revoked sync.scope_revoked {}`, no data,
//!    `SUB_END.nextCursor` = the request cursor;
//! 2. no resume token and `0 ≤ cursor < horizonSeq` (§4.6) → `SUB_START reset
//!    sync.cursor_expired {}`, no data, the request cursor echoed;
//! 3. a token, `cursor < 0` or `cursor > maxCommitSeq` (§4.7) → bootstrap
//!    ([`bootstrap`]): `SUB_START active bootstrap=true`, rows
//!    segments (inline or `SEGMENT_REF`, by `accept`), `SUB_END.nextCursor = asOfCommitSeq` (+ the resume token
//!    while incomplete); `bootstrap=false` and no segment only when the byte
//!    budget defers a non-fresh bootstrap whole (the token then points at
//!    the same position);
//! 4. otherwise incremental ([`window`]): `SUB_START active`,
//!    `COMMIT` frames, `SUB_END.nextCursor` per §4.5.
//!
//! The response byte budget is [`crate::engine::budget`]'s. `maxCommitSeq` and
//! `horizonSeq` are read once, after the push half (so a client sees its own
//! commits in the same round).
//!
//! Streaming (§1.4): [`PullStream`] produces the sections one step at a
//! time (one section per step, then the bookkeeping), for
//! `syncular.sync_stream` / `pull_stream`; [`run`] drives the same steps in
//! one call, so both produce the same bytes.
//!
//! Bookkeeping (§4.5, §4.1/§8.1): `sync_clients.cursor` = the minimum
//! `nextCursor` over the active subscriptions (unchanged when none is
//! active), `subscriptions` = this pull's list `[{"id","table","scopes"}]`
//! (omission is unregistration), `updated_at_ms` = now.

//!
//! Owns, below: [`subscriptions`] (request-level validation and effective
//! scopes), [`limits`] (the pull's row / page limits), [`window`] (the
//! incremental commit window), [`bootstrap`] (snapshot pages and the
//! image lane); the section writers are in `sections`.

pub mod bootstrap;
pub mod limits;
pub mod subscriptions;
mod sections;
pub mod window;

use std::io::Write;

use syncular_protocol::frame_fields::{canonical_scope_map, ScopeMap as WireScopeMap};
use syncular_protocol::request::PullRequest;
use syncular_protocol::scopes::ScopeMap;
use syncular_protocol::response::{ResponseWriter, SubEnd};
use syncular_protocol::ProtocolError;

use crate::engine::pull::bootstrap::{BootstrapRun, BootstrapStart, Emit};
use crate::engine::budget::Budget;
use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::pull::limits::PullLimits;
use crate::engine::pull::subscriptions::{ResolvedSubscription, SubscriptionStatus};
use crate::store::clients::cursor::record_pull;
use crate::store::pull::window::{read_partition_bounds, PartitionBounds};
use sections::{bootstrap_request, section};

/// What the pull half did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PullOutcome {
    /// Minimum `nextCursor` over active subscriptions (`None`: none active).
    pub client_cursor: Option<i64>,
    /// `COMMIT` frames written.
    pub commits: usize,
    /// Segments written.
    pub segments: usize,
    /// Subscriptions the byte budget cut short.
    pub deferred: usize,
}

/// How one section ended.
struct SectionEnd {
    next_cursor: i64,
    active: bool,
}

/// Writes every subscription section of `pull` (validated by
/// [`subscriptions::validate`] into `subs`, same order) to `writer`
/// and records the client's cursor and subscription list — [`PullStream`]
/// run to the end in one call; it reads the partition bounds itself, so the
/// caller must already hold the partition's pruning fence (§4.6,
/// `store::lifecycle::fence`). Errors: store or encoder failures
/// (`syncular.internal`).
pub fn run<W: Write>(
    ctx: &SyncContext<'_>,
    pull: &PullRequest,
    subs: Vec<ResolvedSubscription>,
    writer: &mut ResponseWriter<W>,
) -> EngineResult<PullOutcome> {
    let mut stream = PullStream::start(ctx, pull, subs, None)?;
    while stream.step(ctx, writer)? {}
    Ok(stream.outcome)
}

/// The pull half as a resumable state machine (§1.4 streaming): each
/// [`PullStream::step`] writes one subscription section (`SUB_START …
/// SUB_END`) to the writer, and the step after the last section records the
/// client's cursor and subscription list (the §4.5 watermark, §8.1). A
/// caller that drains the writer's sink between steps never holds more than
/// one section of the response; the bytes are the same however the steps are
/// driven ([`run`] drives them all at once). The byte budget, the partition
/// bounds (`maxCommitSeq`, `horizonSeq`, read once, by [`PullStream::start`]
/// or with the request's context)
/// and the request-order echo are shared by all steps exactly as in one call.
///
/// Granularity: one step per incremental or inactive section; a bootstrap
/// section takes one step per segment (its `SUB_START` travels with its
/// first segment, its `SUB_END` with its last), so a streamed bootstrap holds
/// one page — at most `limitSnapshotRows` rows and 16 MiB of segment bytes,
/// or the budget for an inline-only client — never the whole section.
pub struct PullStream {
    limits: PullLimits,
    bounds: PartitionBounds,
    subs: Vec<ResolvedSubscription>,
    next: usize,
    /// The bootstrap section of `subs[next]` while it has pages to write.
    open: Option<OpenBootstrap>,
    budget: Budget,
    outcome: PullOutcome,
    recorded: bool,
}

/// A bootstrap section whose `SUB_START` is written and whose pages are not
/// all written yet.
struct OpenBootstrap {
    start: BootstrapStart,
    fresh: bool,
    run: BootstrapRun,
}

/// What writing the start of a section did.
enum Section {
    /// The whole section is written.
    Ended(SectionEnd),
    /// A bootstrap section is open: its pages follow.
    Open(OpenBootstrap),
}

impl PullStream {
    /// Prepares the sections of `subs` (the validated subscriptions of
    /// `pull`, same order) under `bounds`, the partition's log bounds read
    /// behind the pruning fence (`None`: read them now; the caller holds the
    /// fence). Nothing is written. Errors: store failures.
    pub fn start(
        ctx: &SyncContext<'_>,
        pull: &PullRequest,
        subs: Vec<ResolvedSubscription>,
        bounds: Option<PartitionBounds>,
    ) -> EngineResult<Self> {
        let bounds = match bounds {
            Some(b) => b,
            None => read_partition_bounds(&ctx.partition)?,
        };
        Ok(PullStream {
            limits: PullLimits::from_header(&pull.header),
            bounds,
            subs,
            next: 0,
            open: None,
            budget: Budget::new(ctx.response_budget_bytes),
            outcome: PullOutcome::default(),
            recorded: false,
        })
    }

    /// Writes the next section, or — after the last one — the bookkeeping
    /// (nothing written). Returns `false` once everything is done (the caller
    /// then writes `END`). Errors: as [`run`].
    pub fn step<W: Write>(&mut self, ctx: &SyncContext<'_>, writer: &mut ResponseWriter<W>) -> EngineResult<bool> {
        if self.open.is_none() {
            let Some(sub) = self.subs.get(self.next) else {
                if !self.recorded {
                    self.record(ctx)?;
                    self.recorded = true;
                }
                return Ok(false);
            };
            match section(ctx, &self.limits, self.bounds, sub, writer, &mut self.budget, &mut self.outcome)? {
                Section::Ended(end) => {
                    self.close(end);
                    return Ok(true);
                }
                Section::Open(open) => self.open = Some(open),
            }
        }
        self.bootstrap_segment(ctx, writer)?;
        Ok(true)
    }

    /// Writes the next segment of the open bootstrap section, and its
    /// `SUB_END` once it has no more.
    fn bootstrap_segment<W: Write>(&mut self, ctx: &SyncContext<'_>, writer: &mut ResponseWriter<W>) -> EngineResult<()> {
        let (Some(open), Some(sub)) = (self.open.as_mut(), self.subs.get(self.next)) else {
            return Err(EngineError::internal("no open bootstrap section to continue"));
        };
        let SubscriptionStatus::Active { effective } = &sub.status else {
            return Err(EngineError::internal("an open bootstrap section of an inactive subscription"));
        };
        let req = bootstrap_request(ctx, &self.limits, sub, effective, open.start.clone(), open.fresh)?;
        let written = bytes_written(writer);
        let more = open.run.step(&req, &mut self.budget, written, &mut |segment| {
            match segment {
                Emit::Inline(bytes) => writer.segment_inline(bytes),
                Emit::Ref(descriptor) => writer.segment_ref(descriptor),
            }
            .map_err(encoder)?;
            Ok(bytes_written(writer))
        })?;
        if more {
            return Ok(());
        }
        let result = open.run.outcome(&req);
        let as_of = req.start.as_of_commit_seq;
        self.outcome.segments += result.segments;
        writer
            .sub_end(&SubEnd { next_cursor: as_of, bootstrap_state: result.resume_token })
            .map_err(encoder)?;
        self.open = None;
        self.close(SectionEnd { next_cursor: as_of, active: true });
        Ok(())
    }

    /// Accounts a finished section and moves to the next.
    fn close(&mut self, end: SectionEnd) {
        if end.active {
            self.outcome.client_cursor = Some(match self.outcome.client_cursor {
                Some(c) => c.min(end.next_cursor),
                None => end.next_cursor,
            });
        }
        self.next += 1;
    }

    /// What the pull did so far.
    pub fn outcome(&self) -> PullOutcome {
        self.outcome
    }

    fn record(&mut self, ctx: &SyncContext<'_>) -> EngineResult<()> {
        self.outcome.deferred = self.budget.deferred();
        let subscriptions_json = subscriptions_json(&self.subs);
        let updated = record_pull(
            &ctx.partition,
            &ctx.client_id,
            self.outcome.client_cursor,
            &subscriptions_json,
            ctx.now_ms,
        )?;
        if !updated {
            return Err(EngineError::internal(format!(
                "sync_clients has no record for client {:?} in partition {:?} at pull time",
                ctx.client_id, ctx.partition
            )));
        }
        Ok(())
    }
}

/// An effective map in the wire's canonical key order (§4.4).
pub(crate) fn wire_scope_map(effective: &ScopeMap) -> EngineResult<WireScopeMap> {
    canonical_scope_map(effective.iter().map(|(k, v)| (k.clone(), v.clone())))
        .map_err(|e| EngineError::internal(format!("effective scopes: {}", e.message)))
}

/// A frame the response encoder refused: the engine built an illegal frame
/// (a bug or corrupt stored data), never the client's fault.
fn encoder(e: ProtocolError) -> EngineError {
    EngineError::internal(format!("response encoder refused a pull frame: {}", e.message))
}

fn bytes_written<W: Write>(writer: &ResponseWriter<W>) -> usize {
    usize::try_from(writer.bytes_written()).unwrap_or(usize::MAX)
}

/// The persisted subscription list (§8.1): `[{"id","table","scopes"}]` with
/// the requested scopes, in request order.
fn subscriptions_json(subs: &[ResolvedSubscription]) -> String {
    let list: Vec<serde_json::Value> = subs
        .iter()
        .map(|s| {
            let scopes: serde_json::Map<String, serde_json::Value> = s
                .requested
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::json!(v)))
                .collect();
            serde_json::json!({ "id": s.id, "table": s.table, "scopes": scopes })
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}
