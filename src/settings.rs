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
//! | `syncular.partition` | text | `''` | the partition of plain SQL writes to app tables (docs/src/guide/plain-sql.md "Writing with plain SQL"); USERSET |
//! | `syncular.actor_id` | text | `''` | the actor of plain SQL writes; empty = the current role; USERSET |
//! | `syncular.prune_active_window` | seconds | `14d` (min `14d`) | §4.6 active window: a client whose record was updated within it holds the horizon; SUSET |
//! | `syncular.prune_age_limit` | seconds | `30d` (min `30d`) | §4.6 age force limit: commits older than this are pruned even past an active laggard; SUSET |
//! | `syncular.prune_min_commits` | int | 1000 (min 1000) | §4.6: the newest commits always kept; SUSET |
//! | `syncular.client_retention` | seconds | `30d` (min `14d`) | a client record not updated for this long is removed by pruning; SUSET |
//! | `syncular.push_result_retention` | seconds | `180d` (min `30d`) | a stored push outcome (§2.3 replay) older than this is removed by pruning; SUSET |
//! | `syncular.lease_ttl` | seconds | `0` (off) | §7.3 auth leases: the TTL of the lease a resolved round issues or slides; 0 = the feature is off (no `LEASE` frame, no lease rows, the outage signal fails with `sync.auth_lease_required`); SUSET |
//! | `syncular.blob_max_bytes` | int | 67108864 (64 MiB; 0 … 2147483647) | §5.9.3 host size cap of one blob (`blob.too_large`); SUSET |
//! | `syncular.segment_url_base` | text | `''` (off) | §5.4 native signed segment URLs: the URL prefix a segment id and `?st=` are appended to; empty = no `url` in `SEGMENT_REF`; SUSET |
//! | `syncular.segment_url_ttl_s` | seconds | 600 (1 … 900) | §5.4 lifetime of a minted signed URL (the revocation window of issued URLs); SUSET |
//! | `syncular.segment_inline_max_bytes` | int | 262144 (0 … 16777216) | §5.7: with `accept` bits 0 and 1, a rows page up to this size is inlined, a larger one sent as `SEGMENT_REF`; USERSET |
//! | `syncular.segment_ttl_s` | seconds | `86400` (1 s …) | §5.1: lifetime of a segment publication; SUSET |
//! | `syncular.router_statements` | bool | `off` | write the log with statements Citus routes to one shard (one `INSERT … VALUES` per table: the single-shard rule of `src/store/mod.rs`); `syncular.distribute()` turns it on for the database; SUSET |
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
const DAY_S: i32 = 24 * 60 * 60;
static PRUNE_ACTIVE_WINDOW_S: GucSetting<i32> = GucSetting::<i32>::new(14 * DAY_S);
static PRUNE_AGE_LIMIT_S: GucSetting<i32> = GucSetting::<i32>::new(30 * DAY_S);
static PRUNE_MIN_COMMITS: GucSetting<i32> = GucSetting::<i32>::new(1000);
static CLIENT_RETENTION_S: GucSetting<i32> = GucSetting::<i32>::new(30 * DAY_S);
static PUSH_RESULT_RETENTION_S: GucSetting<i32> = GucSetting::<i32>::new(180 * DAY_S);
static LEASE_TTL_S: GucSetting<i32> = GucSetting::<i32>::new(0);
static ROUTER_STATEMENTS: GucSetting<bool> = GucSetting::<bool>::new(false);
static BLOB_MAX_BYTES: GucSetting<i32> = GucSetting::<i32>::new(64 * 1024 * 1024);
static SEGMENT_URL_BASE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
/// Upper bound of `syncular.segment_url_ttl_s` (15 minutes, §5.4 "TTL SHOULD be ≤ 15 minutes").
pub const MAX_SEGMENT_URL_TTL_S: i32 = 900;
static SEGMENT_URL_TTL_S: GucSetting<i32> = GucSetting::<i32>::new(600);

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
    GucRegistry::define_int_guc(
        c"syncular.blob_max_bytes",
        c"Largest blob an upload may store, in bytes (SSP2 5.9.3).",
        c"A larger declared or streamed upload, or upload grant, fails with blob.too_large.",
        &BLOB_MAX_BYTES,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"syncular.router_statements",
        c"Write the log with statements a Citus router planner sends to one shard.",
        c"One INSERT ... VALUES per log table instead of one statement for the whole log; syncular.distribute() turns it on for the database.",
        &ROUTER_STATEMENTS,
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
    GucRegistry::define_int_guc(
        c"syncular.lease_ttl",
        c"TTL of the auth lease a resolved sync round issues or slides (SSP2 7.3); 0 turns leases off.",
        c"Off: no LEASE frame, no lease rows, and a resolver outage signal fails with sync.auth_lease_required.",
        &LEASE_TTL_S,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    define_retention_gucs();
    define_segment_url_gucs();
    define_segment_gucs();
    reserve_prefix();
}

/// The §4.6 pruning floors and the record retentions (docs/src/sql/lifecycle.md "The log's
/// lifecycle"). Minimums are the spec's defaults: hosts may raise them only.
fn define_retention_gucs() {
    let seconds = |name: &'static std::ffi::CStr,
                   short: &'static std::ffi::CStr,
                   long: &'static std::ffi::CStr,
                   setting: &'static GucSetting<i32>,
                   min: i32| {
        GucRegistry::define_int_guc(name, short, long, setting, min, i32::MAX, GucContext::Suset, GucFlags::UNIT_S);
    };
    seconds(
        c"syncular.prune_active_window",
        c"Pruning never passes the cursor of a client active within this window (SSP2 4.6).",
        c"A client whose record was updated within this window holds the horizon. At least 14 days.",
        &PRUNE_ACTIVE_WINDOW_S,
        14 * DAY_S,
    );
    seconds(
        c"syncular.prune_age_limit",
        c"Pruning removes commits older than this even past an active laggard (SSP2 4.6).",
        c"The age force limit. At least 30 days.",
        &PRUNE_AGE_LIMIT_S,
        30 * DAY_S,
    );
    GucRegistry::define_int_guc(
        c"syncular.prune_min_commits",
        c"Pruning always keeps this many newest commits of a partition (SSP2 4.6).",
        c"At least 1000.",
        &PRUNE_MIN_COMMITS,
        1000,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    seconds(
        c"syncular.client_retention",
        c"Pruning removes client records not updated for this long.",
        c"A removed record is recreated when the client returns. At least 14 days.",
        &CLIENT_RETENTION_S,
        14 * DAY_S,
    );
    seconds(
        c"syncular.push_result_retention",
        c"Pruning removes stored push outcomes older than this.",
        c"A replay of a removed outcome is applied again. At least 30 days.",
        &PUSH_RESULT_RETENTION_S,
        30 * DAY_S,
    );
}

/// The §5.4 native signed segment URLs (docs/src/sql/segments.md "Signed segment URLs").
fn define_segment_url_gucs() {
    GucRegistry::define_string_guc(
        c"syncular.segment_url_base",
        c"URL prefix of signed segment URLs (SSP2 5.4); empty turns them off.",
        c"A SEGMENT_REF for a client that advertised accept bit 3 carries <base><segmentId>?st=<token>.",
        &SEGMENT_URL_BASE,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"syncular.segment_url_ttl_s",
        c"Lifetime of a signed segment URL (SSP2 5.4), at most 15 minutes.",
        c"Also the revocation window of URLs already issued.",
        &SEGMENT_URL_TTL_S,
        1,
        MAX_SEGMENT_URL_TTL_S,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
}

// ---------------------------------------------------------------- segments (issue 12)

/// Largest stored rows page (bytes of one SSG2 segment, §5.2): an external
/// page stops adding rows once it reaches this size (keeping ≥ 1 row), and
/// `syncular.segment_inline_max_bytes` is capped at it.
pub const SEGMENT_PAGE_MAX_BYTES: i32 = 16 * 1024 * 1024;
static SEGMENT_INLINE_MAX_BYTES: GucSetting<i32> = GucSetting::<i32>::new(256 * 1024);
static SEGMENT_TTL_S: GucSetting<i32> = GucSetting::<i32>::new(DAY_S);

/// The stored-segment settings (SPEC §5.1, §5.7).
fn define_segment_gucs() {
    GucRegistry::define_int_guc(
        c"syncular.segment_inline_max_bytes",
        c"Largest rows segment inlined when the client accepts both inline and external rows (SSP2 5.7).",
        c"With accept bits 0 and 1, a bootstrap page up to this many bytes is sent as SEGMENT_INLINE, a larger one as SEGMENT_REF.",
        &SEGMENT_INLINE_MAX_BYTES,
        0,
        SEGMENT_PAGE_MAX_BYTES,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"syncular.segment_ttl_s",
        c"Lifetime of a stored segment publication (SSP2 5.1).",
        c"A publication expires this long after it was (last) published; downloads then fail with sync.segment_expired.",
        &SEGMENT_TTL_S,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
}

/// `syncular.segment_url_base`; `None` when unset or empty (no signed URLs).
pub fn segment_url_base() -> Option<String> {
    text_setting(&SEGMENT_URL_BASE)
}

/// `syncular.segment_url_ttl_s` in ms (1 s … 15 min).
pub fn segment_url_ttl_ms() -> i64 {
    i64::from(SEGMENT_URL_TTL_S.get().clamp(1, MAX_SEGMENT_URL_TTL_S)) * 1000
}

/// `syncular.segment_inline_max_bytes` (0 ..= [`SEGMENT_PAGE_MAX_BYTES`]).
pub fn segment_inline_max_bytes() -> usize {
    SEGMENT_INLINE_MAX_BYTES.get().clamp(0, SEGMENT_PAGE_MAX_BYTES) as usize
}

/// `syncular.segment_ttl_s` in ms (≥ 1000).
pub fn segment_ttl_ms() -> i64 {
    i64::from(SEGMENT_TTL_S.get().max(1)) * 1000
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

/// `syncular.blob_max_bytes`: the host size cap of one blob (§5.9.3), bytes.
pub fn blob_max_bytes() -> i64 {
    i64::from(BLOB_MAX_BYTES.get())
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

/// `syncular.router_statements`: write the log with single-shard statements
/// (Citus; the single-shard rule of [`crate::store`]).
pub fn router_statements() -> bool {
    ROUTER_STATEMENTS.get()
}

/// `syncular.lease_ttl` in ms; `None` when 0 (§7.3.3: the feature is off).
pub fn lease_ttl_ms() -> Option<i64> {
    let seconds = LEASE_TTL_S.get();
    (seconds > 0).then(|| i64::from(seconds) * 1000)
}

/// `syncular.response_budget_bytes` (1024 ..= 256 MiB).
pub fn response_budget_bytes() -> usize {
    RESPONSE_BUDGET_BYTES.get().clamp(1024, MAX_RESPONSE_BUDGET_BYTES) as usize
}

/// The §4.6 retention settings of one pruning call, in ms / commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// `syncular.prune_active_window`, ms.
    pub active_window_ms: i64,
    /// `syncular.prune_age_limit`, ms.
    pub age_limit_ms: i64,
    /// `syncular.prune_min_commits`.
    pub min_retained_commits: i64,
    /// `syncular.client_retention`, ms.
    pub client_retention_ms: i64,
    /// `syncular.push_result_retention`, ms.
    pub push_result_retention_ms: i64,
}

/// The retention GUCs as they stand.
pub fn retention() -> Retention {
    let ms = |s: &GucSetting<i32>| i64::from(s.get()) * 1000;
    Retention {
        active_window_ms: ms(&PRUNE_ACTIVE_WINDOW_S),
        age_limit_ms: ms(&PRUNE_AGE_LIMIT_S),
        min_retained_commits: i64::from(PRUNE_MIN_COMMITS.get()),
        client_retention_ms: ms(&CLIENT_RETENTION_S),
        push_result_retention_ms: ms(&PUSH_RESULT_RETENTION_S),
    }
}
