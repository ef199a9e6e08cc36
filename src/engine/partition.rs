//! The partition registry and the log-epoch gate (SPEC §2.1, §1.5, §1.6, §9).
//!
//! Every request first [`touch`]es its partition: the registry row is created
//! on first sight with a fresh unpredictable `logEpoch`, and its last-seen
//! time is refreshed (never waiting on a concurrent refresher). Then
//! [`gate`] decides, before any other request work, whether the request is
//! served, refused, or answered with the reset response.

use syncular_protocol::constants::WIRE_VERSION_1;
use syncular_protocol::ErrorCode;

use crate::engine::error::{EngineError, EngineResult};
use crate::store::partitions::{self, RegistryRow};
use crate::store::spi::subtransaction;

/// Creates the registry row of `partition` on first sight (fresh
/// `logEpoch`, `epoch_required = false`, plus its `sync_partitions` counter
/// row) or refreshes `last_authenticated_at_ms` to `now_ms`. Returns the
/// registry row as it stands for this request. Errors: store failures.
pub fn touch(partition: &str, now_ms: i64) -> EngineResult<RegistryRow> {
    touch_read(partition, partitions::select_partition_registry(partition)?, now_ms)
}

/// [`touch`] with the registry row already read by the caller (`existing`,
/// `None` when absent). The last-seen time is rewritten only once it is at
/// least `syncular.activity_refresh_ms` old, so a busy partition's registry
/// row is not rewritten by every request. Errors: store failures.
pub fn touch_read(partition: &str, existing: Option<RegistryRow>, now_ms: i64) -> EngineResult<RegistryRow> {
    if let Some(existing) = existing {
        if existing.last_authenticated_at_ms < now_ms
            && crate::engine::clock::activity_refresh_due(existing.last_authenticated_at_ms, now_ms)
        {
            refresh_last_seen(partition, now_ms)?;
        }
        return Ok(existing);
    }
    match partitions::insert_partition_registry(partition, now_ms)? {
        Some(created) => {
            partitions::insert_partition_counter(partition)?;
            Ok(created)
        }
        // A concurrent request created it between our read and insert.
        None => partitions::select_partition_registry(partition)?.ok_or_else(|| {
            EngineError::internal(format!("partition registry row of {partition:?} vanished"))
        }),
    }
}

/// Creates the registry row (and counter row) of `partition` when it does
/// not exist yet — [`touch`] without the last-seen refresh, for captured
/// plain SQL writes (no client authenticated). Errors: store failures.
pub fn ensure_registered(partition: &str, now_ms: i64) -> EngineResult<()> {
    if partitions::select_partition_registry(partition)?.is_none()
        && partitions::insert_partition_registry(partition, now_ms)?.is_some()
    {
        partitions::insert_partition_counter(partition)?;
    }
    Ok(())
}

/// Refreshes last-seen without ever waiting or failing the request: under
/// REPEATABLE READ / SERIALIZABLE, locking a registry row a concurrent
/// request refreshed after this transaction's snapshot raises a
/// serialization failure, so there the refresh runs in a subtransaction and
/// a failed refresh is skipped (a concurrent request refreshed it anyway).
fn refresh_last_seen(partition: &str, now_ms: i64) -> EngineResult<()> {
    // SAFETY: a plain read of a backend-global int.
    let snapshot_per_transaction =
        unsafe { pgrx::pg_sys::XactIsoLevel } >= pgrx::pg_sys::XACT_REPEATABLE_READ as i32;
    if snapshot_per_transaction {
        if let Ok(refreshed) =
            subtransaction::run(|| partitions::refresh_partition_last_seen(partition, now_ms))
        {
            refreshed?;
        }
    } else {
        partitions::refresh_partition_last_seen(partition, now_ms)?;
    }
    Ok(())
}

/// What the epoch gate decided for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochGate {
    /// The request's `logEpoch` matches (or wire v1 while epochs are not
    /// required): proceed.
    Proceed,
    /// Wire v2 with an absent or different `logEpoch`: answer
    /// `RESP_HEADER{logEpoch, resetRequired = true}` + `END`, nothing else.
    Reset,
}

/// The §2.1/§1.5 checks that precede every other request check:
/// 1. a wire-version-1 request while the registry requires epoch validation
///    (after a rotation) → `sync.client_wire_unsupported`;
/// 2. a wire-version-2 request without `logEpoch` that carries
///    `PUSH_COMMIT` frames → `sync.invalid_request` (epoch acquisition must
///    carry no push, §1.5);
/// 3. otherwise `Reset` when a v2 `logEpoch` is absent or differs, else
///    `Proceed`.
///
/// The schema floor (§1.6) is checked by the caller between steps 2 and 3:
/// it takes precedence over the reset response but still reports
/// `resetRequired` in its header.
pub fn gate(
    registry: &RegistryRow,
    wire_version: u16,
    request_epoch: Option<&str>,
    push_commits: usize,
) -> EngineResult<EpochGate> {
    if wire_version == WIRE_VERSION_1 {
        if registry.epoch_required {
            return Err(EngineError::protocol(
                ErrorCode::ClientWireUnsupported,
                "this partition's log epoch was rotated; wire version 1 requests are no longer served \
                 (upgrade to wire version 2, §1.5)",
            ));
        }
        return Ok(EpochGate::Proceed);
    }
    match request_epoch {
        None if push_commits > 0 => Err(EngineError::protocol(
            ErrorCode::InvalidRequest,
            format!(
                "REQ_HEADER.logEpoch is absent (epoch acquisition) but the request carries {push_commits} \
                 PUSH_COMMIT frame(s); acquire the epoch first (§1.5, §2.1)"
            ),
        )),
        None => Ok(EpochGate::Reset),
        Some(epoch) if epoch == registry.log_epoch => Ok(EpochGate::Proceed),
        Some(_) => Ok(EpochGate::Reset),
    }
}

/// Whether a v2 header must carry `resetRequired = true` (absent or different
/// `logEpoch`). Always `false` for wire version 1 (no such field).
pub fn reset_required(
    registry: &RegistryRow,
    wire_version: u16,
    request_epoch: Option<&str>,
) -> bool {
    wire_version != WIRE_VERSION_1 && request_epoch != Some(registry.log_epoch.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(required: bool) -> RegistryRow {
        RegistryRow {
            log_epoch: "E1".into(),
            epoch_required: required,
            last_authenticated_at_ms: 0,
        }
    }

    #[test]
    fn v1_is_served_only_while_epochs_are_not_required() {
        assert_eq!(gate(&row(false), 1, None, 3).unwrap(), EpochGate::Proceed);
        let err = gate(&row(true), 1, None, 0).unwrap_err();
        assert_eq!(err.code_str(), "sync.client_wire_unsupported");
    }

    #[test]
    fn v2_epoch_rules() {
        assert_eq!(
            gate(&row(false), 2, Some("E1"), 2).unwrap(),
            EpochGate::Proceed
        );
        assert_eq!(
            gate(&row(true), 2, Some("E0"), 2).unwrap(),
            EpochGate::Reset
        );
        assert_eq!(gate(&row(false), 2, None, 0).unwrap(), EpochGate::Reset);
        assert_eq!(
            gate(&row(false), 2, None, 1).unwrap_err().code_str(),
            "sync.invalid_request"
        );
        assert!(reset_required(&row(false), 2, None));
        assert!(!reset_required(&row(false), 2, Some("E1")));
        assert!(!reset_required(&row(false), 1, None));
    }
}
