//! The one "now" of the extension, in Unix milliseconds.
//!
//! Every timestamp the engine writes or compares (commit `createdAtMs`,
//! `last_authenticated_at_ms`, TTLs, leases, retention) comes from
//! [`now_ms`]. Tests pin it with `SET syncular.now_ms = '1700000000000'`.

use crate::engine::error::{EngineError, EngineResult};

/// The current time in Unix ms: `syncular.now_ms` when set, else the system
/// clock. Errors (`syncular.internal`) only when the GUC is set to something
/// that is not an integer.
pub fn now_ms() -> EngineResult<i64> {
    match crate::settings::now_ms_override() {
        Some(text) => text.parse::<i64>().map_err(|_| {
            EngineError::internal(format!(
                "syncular.now_ms must be an integer number of Unix milliseconds, got {text:?}"
            ))
        }),
        None => Ok(system_now_ms()),
    }
}

fn system_now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
