//! The one "now" of the extension, in Unix milliseconds.
//!
//! Every timestamp the engine writes or compares (commit `createdAtMs`,
//! `last_authenticated_at_ms`, TTLs, leases, retention) comes from
//! [`now_ms`]. Tests pin it with `SET syncular.now_ms = '1700000000000'`.

use crate::engine::error::{EngineError, EngineResult, HostCode};

/// The largest instant the engine accepts: 2^53 − 1 ms, the largest
/// integer every SSP2 client (JavaScript numbers) represents exactly.
pub const MAX_NOW_MS: i64 = (1 << 53) - 1;

/// The current time in Unix ms, `0 ..= MAX_NOW_MS`: `syncular.now_ms` when
/// set, else the system clock. Errors: `syncular.invalid_argument` (22023)
/// when the GUC is not an integer in that range; `syncular.internal` when
/// the system clock is past it.
pub fn now_ms() -> EngineResult<i64> {
    match crate::settings::now_ms_override() {
        Some(text) => parse_override(&text),
        None => {
            let now = system_now_ms();
            if now > MAX_NOW_MS {
                return Err(EngineError::internal(format!("system clock {now} ms is past 2^53-1")));
            }
            Ok(now)
        }
    }
}

/// Parses a `syncular.now_ms` value. Errors: `syncular.invalid_argument`.
/// Whether a stored last-seen time `last_ms` is due for a rewrite at
/// `now_ms`: at least `syncular.activity_refresh_ms` old.
pub fn activity_refresh_due(last_ms: i64, now_ms: i64) -> bool {
    now_ms.saturating_sub(last_ms) >= crate::settings::activity_refresh_ms()
}

fn parse_override(text: &str) -> EngineResult<i64> {
    match text.parse::<i64>() {
        Ok(ms) if (0..=MAX_NOW_MS).contains(&ms) => Ok(ms),
        _ => Err(EngineError::host(
            HostCode::InvalidArgument,
            format!(
                "syncular.now_ms must be an integer number of Unix milliseconds in 0..={MAX_NOW_MS}, got {text:?}"
            ),
        )),
    }
}

fn system_now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn override_accepts_only_0_to_2_pow_53_minus_1() {
        assert_eq!(parse_override("0").unwrap(), 0);
        assert_eq!(parse_override("9007199254740991").unwrap(), MAX_NOW_MS);
        for bad in ["-1", "9007199254740992", "abc", "1.5", "9223372036854775808"] {
            let err = parse_override(bad).unwrap_err();
            assert_eq!(err.code_str(), "syncular.invalid_argument", "{bad}");
            assert!(err.message().contains(&format!("{bad:?}")), "{err}");
        }
    }
}
