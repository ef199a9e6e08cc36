//! The extension's GUCs. `syncular.now_ms` is `SUSET` (superusers only: it
//! stamps every commit); the two limits are `USERSET` but bounded (a
//! gateway session may lower them, or raise them up to the bound — a host
//! decision):
//!
//! | GUC | type | default | meaning |
//! |---|---|---|---|
//! | `syncular.now_ms` | text | `''` | when non-empty, the engine's "now" in Unix ms, 0 ..= 2^53−1 (tests; SUSET); see [`crate::engine::clock`] |
//! | `syncular.max_operations` | int | 500 | §6.1 operations cap per request (`sync.too_many_operations`) |
//! | `syncular.response_budget_bytes` | int | 4194304 (max 268435456) | pull stops adding pages/commits past this many response bytes |
//!
//! Registered in `_PG_init` ([`init`]).

use std::ffi::CString;

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

static NOW_MS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static MAX_OPERATIONS: GucSetting<i32> = GucSetting::<i32>::new(500);
/// Upper bound of `syncular.response_budget_bytes` (256 MiB): far below the
/// 1 GB varlena limit even with the one-commit/one-row overshoot.
pub const MAX_RESPONSE_BUDGET_BYTES: i32 = 256 * 1024 * 1024;
static RESPONSE_BUDGET_BYTES: GucSetting<i32> = GucSetting::<i32>::new(4 * 1024 * 1024);

/// Registers every GUC; called once per backend from `_PG_init`.
pub fn init() {
    GucRegistry::define_string_guc(
        c"syncular.now_ms",
        c"Overrides the engine clock (Unix ms) when non-empty; for tests.",
        c"Every 'now' of the extension (commit createdAtMs, TTLs, leases) reads this when set.",
        &NOW_MS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"syncular.max_operations",
        c"Maximum operations in one sync request (SSP2 6.1).",
        c"A request with more operations fails with sync.too_many_operations.",
        &MAX_OPERATIONS,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"syncular.response_budget_bytes",
        c"Response byte budget of one sync call.",
        c"The pull stops adding pages or commits once the response reaches this size (a single commit is never split).",
        &RESPONSE_BUDGET_BYTES,
        1024,
        MAX_RESPONSE_BUDGET_BYTES,
        GucContext::Userset,
        GucFlags::default(),
    );
}

/// The raw `syncular.now_ms` setting; `None` when unset or empty.
pub fn now_ms_override() -> Option<String> {
    NOW_MS
        .get()
        .and_then(|c| c.into_string().ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `syncular.max_operations` (≥ 1).
pub fn max_operations() -> usize {
    MAX_OPERATIONS.get().max(1) as usize
}

/// `syncular.response_budget_bytes` (1024 ..= 256 MiB).
pub fn response_budget_bytes() -> usize {
    RESPONSE_BUDGET_BYTES.get().clamp(1024, MAX_RESPONSE_BUDGET_BYTES) as usize
}
