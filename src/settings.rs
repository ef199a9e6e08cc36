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
//! | `syncular.partition` | text | `''` | the partition of plain SQL writes to app tables (README "Writing with plain SQL"); USERSET |
//! | `syncular.actor_id` | text | `''` | the actor of plain SQL writes; empty = the current role; USERSET |
//!
//! Registered in `_PG_init` ([`init`]), which then reserves the `syncular.`
//! prefix (Postgres 15+ `MarkGUCPrefixReserved`): `SET syncular.partiton = …`
//! (a typo) fails once the library is loaded, and a placeholder set before it
//! was loaded is removed with a WARNING. On Postgres 13/14, which cannot
//! reserve a prefix, such placeholders are only warned about at load
//! (`EmitWarningsOnPlaceholders`) and a later mistyped `SET` is accepted.

use std::ffi::CString;

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

static NOW_MS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static MAX_OPERATIONS: GucSetting<i32> = GucSetting::<i32>::new(500);
/// Upper bound of `syncular.response_budget_bytes` (256 MiB): far below the
/// 1 GB varlena limit even with the one-commit/one-row overshoot.
pub const MAX_RESPONSE_BUDGET_BYTES: i32 = 256 * 1024 * 1024;
static RESPONSE_BUDGET_BYTES: GucSetting<i32> = GucSetting::<i32>::new(4 * 1024 * 1024);
static ACTIVITY_REFRESH_MS: GucSetting<i32> = GucSetting::<i32>::new(60_000);
static PARTITION: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static ACTOR_ID: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

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
    GucRegistry::define_int_guc(
        c"syncular.activity_refresh_ms",
        c"How often a request refreshes last-seen times, in milliseconds.",
        c"The partition registry's last_authenticated_at_ms and a client record's updated_at_ms are rewritten at most once per this interval (0: on every request).",
        &ACTIVITY_REFRESH_MS,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"syncular.partition",
        c"The partition of plain SQL writes to synced app tables.",
        c"INSERT, UPDATE, DELETE and COPY on an app table become commits of this partition; unset, they fail.",
        &PARTITION,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"syncular.actor_id",
        c"The actor recorded for plain SQL writes to synced app tables.",
        c"Empty: the current role's name. The commit's client id is sql:<actor>.",
        &ACTOR_ID,
        GucContext::Userset,
        GucFlags::default(),
    );
    reserve_prefix();
}

/// Reserves the `syncular.` GUC prefix (module docs).
fn reserve_prefix() {
    #[cfg(feature = "pg13")]
    // SAFETY: called from _PG_init after the GUCs are defined.
    unsafe {
        pgrx::pg_sys::EmitWarningsOnPlaceholders(c"syncular".as_ptr());
    }
    #[cfg(not(feature = "pg13"))]
    // SAFETY: called from _PG_init after the GUCs are defined.
    unsafe {
        pgrx::pg_sys::MarkGUCPrefixReserved(c"syncular".as_ptr());
    }
}

fn text_setting(setting: &GucSetting<Option<CString>>) -> Option<String> {
    setting.get().and_then(|c| c.into_string().ok()).filter(|s| !s.is_empty())
}

/// `syncular.partition`; `None` when unset or empty.
pub fn partition() -> Option<String> {
    text_setting(&PARTITION)
}

/// `syncular.actor_id`; `None` when unset or empty.
pub fn actor_id() -> Option<String> {
    text_setting(&ACTOR_ID)
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

/// `syncular.activity_refresh_ms` (≥ 0, default 60 000): the least age, in
/// ms, at which a request rewrites a stored last-seen time.
pub fn activity_refresh_ms() -> i64 {
    i64::from(ACTIVITY_REFRESH_MS.get().max(0))
}

/// `syncular.response_budget_bytes` (1024 ..= 256 MiB).
pub fn response_budget_bytes() -> usize {
    RESPONSE_BUDGET_BYTES.get().clamp(1024, MAX_RESPONSE_BUDGET_BYTES) as usize
}
