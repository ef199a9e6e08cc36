//! Request-level validation of a pull's subscriptions and their effective
//! scopes (SPEC §1.7, §3.2, §4.1–§4.3).
//!
//! [`validate`] runs before the push half, so a request it fails has applied
//! nothing. In request order, each fails the whole request:
//! - `accept` with neither bit 0 nor bit 1 → `sync.invalid_request` (§4.2);
//! - a duplicate subscription id → `sync.invalid_subscription` (§4.1);
//! - a table the registered schema does not declare → `sync.unknown_table` (§4.3);
//! - a requested key the table does not declare, or a requested `'*'` →
//!   `sync.invalid_subscription` (§3.2 rule 2);
//! - a NUL character in a subscription id or a requested scope value →
//!   `sync.invalid_request` (Postgres `text`/`jsonb` cannot hold it).
//!
//! Then effective = requested ∩ allowed per subscription (§3.2 rules 4–5,
//! the protocol crate's scope algebra): an active subscription carries its
//! effective map; no allowed map (the resolver raised or none is
//! configured), a requested key lost, or an empty result → revoked.
//! (Allowed keys declared by no table are rejected by the request entry when
//! it resolves the allowed map, §3.2 rule 3.)

use std::collections::HashSet;

use syncular_protocol::request::{PullRequest, Subscription};
use syncular_protocol::scopes::{effective, validate_requested, Effective, ScopeMap};
use syncular_protocol::ErrorCode;

use crate::engine::context::SyncContext;
use crate::engine::error::{EngineError, EngineResult};
use crate::engine::storable::preview;
use crate::engine::pull::limits::PullLimits;

/// §3.2 outcome of one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriptionStatus {
    /// Served with these effective scopes (non-empty, every requested key present).
    Active { effective: ScopeMap },
    /// `SUB_START.status = revoked`, `reasonCode = sync.scope_revoked` (§3.3).
    Revoked,
}

/// A validated subscription, in request order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSubscription {
    /// Client-chosen id, echoed (§4.1).
    pub id: String,
    /// A table of the registered schema.
    pub table: String,
    /// Requested scopes as sent (keys validated, no `'*'`).
    pub requested: ScopeMap,
    /// Request cursor (`-1` = never synced).
    pub cursor: i64,
    /// Round-tripped resume token, raw JSON text (§4.3), uninspected here.
    pub bootstrap_state: Option<String>,
    /// Active with effective scopes, or revoked (§3.2 rule 5).
    pub status: SubscriptionStatus,
}

impl ResolvedSubscription {
    /// True when the request alone says this subscription bootstraps (§4.7:
    /// a token, or `cursor < 0`); `cursor > maxCommitSeq` is known only
    /// when the pull runs.
    pub fn bootstraps_by_request(&self) -> bool {
        self.bootstrap_state.is_some() || self.cursor < 0
    }
}

fn invalid_subscription(message: String) -> EngineError {
    EngineError::protocol(ErrorCode::InvalidSubscription, message)
}

/// Validates `pull` against the registered schema and computes each
/// subscription's effective scopes from `ctx.allowed`. Errors (each a
/// request-level Postgres ERROR, see the module doc): `sync.invalid_request`,
/// `sync.invalid_subscription`, `sync.unknown_table`.
pub fn validate(ctx: &SyncContext<'_>, pull: &PullRequest) -> EngineResult<Vec<ResolvedSubscription>> {
    let limits = PullLimits::from_header(&pull.header);
    if !limits.accepts_rows() {
        return Err(EngineError::protocol(
            ErrorCode::InvalidRequest,
            format!(
                "PULL_HEADER.accept {:#06b} has neither bit 0 (inline rows segments) nor bit 1 \
                 (external rows segments); rows support is mandatory (§4.2)",
                limits.accept
            ),
        ));
    }
    let mut seen: HashSet<&str> = HashSet::with_capacity(pull.subscriptions.len());
    let mut out = Vec::with_capacity(pull.subscriptions.len());
    for sub in &pull.subscriptions {
        if !seen.insert(sub.id.as_str()) {
            return Err(invalid_subscription(format!("duplicate subscription id {} (§4.1)", preview(&sub.id))));
        }
        refuse_nul(sub)?;
        let requested = check_scopes(ctx, sub)?;
        let status = match effective(&requested, ctx.allowed.map()) {
            Effective::Active(effective) => SubscriptionStatus::Active { effective },
            Effective::Revoked(_) => SubscriptionStatus::Revoked,
        };
        let resolved = ResolvedSubscription {
            id: sub.id.clone(),
            table: sub.table.clone(),
            requested,
            cursor: sub.cursor,
            bootstrap_state: sub.bootstrap_state.clone(),
            status,
        };
        out.push(resolved);
    }
    Ok(out)
}

/// SSP2 `str` may carry U+0000 but Postgres `text`/`jsonb` cannot: a
/// subscription id or requested scope value containing NUL can be neither
/// recorded (`sync_clients.subscriptions`) nor matched, so the request is
/// refused with `sync.invalid_request` before anything is written. (A NUL in
/// the table name or a scope key already fails as unknown/undeclared.)
fn refuse_nul(sub: &Subscription) -> EngineResult<()> {
    let nul = |what: String| {
        Err(EngineError::protocol(
            ErrorCode::InvalidRequest,
            format!("{what} contains a NUL character, which this server cannot store"),
        ))
    };
    if sub.id.contains('\0') {
        return nul(format!("subscription id {:?}", sub.id));
    }
    for (key, values) in &sub.scopes {
        if let Some(v) = values.iter().find(|v| v.contains('\0')) {
            return nul(format!("subscription {:?}: requested scope value {v:?} of {key:?}", sub.id));
        }
    }
    Ok(())
}

/// Unknown table (§4.3), then undeclared requested key / requested `'*'`
/// (§3.2 rule 2, the protocol crate's `validate_requested`). Returns the
/// requested scopes as a map.
fn check_scopes(ctx: &SyncContext<'_>, sub: &Subscription) -> EngineResult<ScopeMap> {
    let Some(table) = ctx.schema.table(&sub.table) else {
        return Err(EngineError::protocol(
            ErrorCode::UnknownTable,
            format!("subscription {} names unknown table {} (§4.3)", preview(&sub.id), preview(&sub.table)),
        ));
    };
    let requested: ScopeMap = sub.scopes.iter().cloned().collect();
    validate_requested(&table.table, &requested).map_err(|e| {
        invalid_subscription(format!("subscription {}: {}", preview(&sub.id), e.message))
    })?;
    Ok(requested)
}
