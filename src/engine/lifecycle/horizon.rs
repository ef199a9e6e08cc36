//! The §4.6 pruning horizon: where it may go, and moving it there.
//!
//! `target = min(max(activeFloor, ageForced), maxCommitSeq − minRetained)`,
//! never below the current horizon nor 0 (the reference server's
//! arithmetic, SPEC §4.6):
//! - `activeFloor`: the smallest cursor (≥ 0) among clients whose record was
//!   updated within the active window; no such client → no cursor floor
//!   (the partition's newest commit). A negative cursor (a client that will
//!   bootstrap) needs no log and holds nothing;
//! - `ageForced`: the largest `commitSeq` created before `now − ageLimit`
//!   (0 when none) — the horizon may pass an active laggard up to it;
//! - `maxCommitSeq − minRetained`: the newest `minRetained` commits always stay.

use crate::engine::clock;
use crate::engine::error::EngineResult;
use crate::settings::{retention, Retention};
use crate::store::lifecycle::horizon::{self as store, HorizonInputs};

/// Where a partition's horizon stands and may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HorizonPlan {
    /// The inputs as read.
    pub inputs: HorizonInputs,
    /// The largest horizon the floors allow now (≥ the current one).
    pub target: i64,
}

/// The §4.6 target from `inputs` under `retention` (pure; module docs).
pub fn target(inputs: &HorizonInputs, retention: &Retention) -> i64 {
    let cursor_floor = inputs.laggard.as_ref().map_or(inputs.max_commit_seq, |l| l.0);
    let retain_floor = inputs.max_commit_seq - retention.min_retained_commits;
    let allowed = cursor_floor.max(inputs.age_forced_seq).min(retain_floor);
    inputs.horizon_seq.max(allowed.max(0))
}

/// Reads `partition`'s horizon inputs at `now_ms` and computes its target.
/// `None`: the partition has no counter row. Errors: store failures.
pub fn plan(partition: &str, now_ms: i64, retention: &Retention) -> EngineResult<Option<HorizonPlan>> {
    let inputs = store::read_inputs(
        partition,
        now_ms.saturating_sub(retention.active_window_ms),
        now_ms.saturating_sub(retention.age_limit_ms),
    )?;
    Ok(inputs.map(|inputs| {
        let target = target(&inputs, retention);
        HorizonPlan { inputs, target }
    }))
}

/// Raises `partition`'s horizon to its target (docs/src/sql/lifecycle.md
/// `syncular.advance_horizon`). Returns `(previous, new)`; `None` for a
/// partition without a counter row. Holds the counter row until the
/// transaction ends: commit right after. Errors: clock, store failures.
pub fn advance(partition: &str) -> EngineResult<Option<(i64, i64)>> {
    let now = clock::now_ms()?;
    let Some(plan) = plan(partition, now, &retention())? else {
        return Ok(None);
    };
    let previous = plan.inputs.horizon_seq;
    if plan.target <= previous {
        return Ok(Some((previous, previous)));
    }
    let stored = store::raise_horizon(partition, plan.target)?.unwrap_or(previous);
    Ok(Some((previous, stored)))
}

#[cfg(test)]
mod unit {
    use super::*;

    const DAY: i64 = 86_400_000;

    fn retention() -> Retention {
        Retention {
            active_window_ms: 14 * DAY,
            age_limit_ms: 30 * DAY,
            min_retained_commits: 1000,
            client_retention_ms: 30 * DAY,
            push_result_retention_ms: 180 * DAY,
        }
    }

    fn inputs(horizon: i64, max: i64, laggard: Option<i64>, forced: i64) -> HorizonInputs {
        HorizonInputs {
            horizon_seq: horizon,
            max_commit_seq: max,
            laggard: laggard.map(|c| (c, "c".to_owned(), 0)),
            age_forced_seq: forced,
        }
    }

    #[test]
    fn newest_commits_always_stay() {
        assert_eq!(target(&inputs(0, 5000, None, 0), &retention()), 4000);
        assert_eq!(target(&inputs(0, 999, None, 0), &retention()), 0);
        assert_eq!(target(&inputs(0, 5000, None, 4990), &retention()), 4000);
    }

    #[test]
    fn an_active_laggard_holds_unless_its_commits_are_past_the_age_limit() {
        assert_eq!(target(&inputs(0, 5000, Some(1200), 0), &retention()), 1200);
        assert_eq!(target(&inputs(0, 5000, Some(1200), 2500), &retention()), 2500);
        assert_eq!(target(&inputs(0, 5000, Some(0), 0), &retention()), 0);
    }

    #[test]
    fn the_horizon_never_moves_back() {
        assert_eq!(target(&inputs(3000, 5000, Some(1200), 0), &retention()), 3000);
    }
}
