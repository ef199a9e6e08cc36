//! What a sync request reads before anything else (SPEC §1.5, §1.6, §2.1,
//! §4.5, §6.3; DESIGN §4): after taking its fences, the current schema
//! version's cache key, the partition's registry row, the client's record,
//! the NOTIFY signing key, the stored outcomes of the request's
//! `clientCommitId`s and, for a round that only pulls, the partition's log
//! bounds — primary-key probes, made without a statement
//! ([`crate::store::direct::read`]: no plan, no executor start-up; issue 29),
//! or, under Citus or with auth leases on, as one statement run through
//! [`crate::store::spi::pinned_plan`] so no sequential scan planned while a
//! table was tiny is kept.

use std::sync::OnceLock;

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::auth::leases::{self, LeaseContext};
use crate::store::direct;
use crate::store::partitions::RegistryRow;
use crate::store::pull::window::PartitionBounds;
use crate::store::push::outcomes::{StoredOutcomes, OUTCOMES_JOIN};
use crate::store::spi::pinned_plan;
use crate::store::push::locks as push_locks;
use crate::store::schema_store;
use crate::store::{StoreError, StoreResult};

/// The stored client record fields a request checks (§1.5 binding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRow {
    /// The actor the `clientId` is bound to.
    pub actor_id: String,
    /// Wire version of its last request.
    pub wire_version: i32,
    /// Last write of the record, Unix ms.
    pub updated_at_ms: i64,
}

/// One request's starting state.
#[derive(Debug, Clone)]
pub struct RequestContextRow {
    /// `(version, xmin)` of the current schema version row (the schema cache key).
    pub schema_key: Option<(i64, String)>,
    /// The partition's registry row, when the partition was seen before.
    pub registry: Option<RegistryRow>,
    /// The client's record, when it exists.
    pub client: Option<ClientRow>,
    /// The NOTIFY signing key, once created.
    pub notification_key: Option<Vec<u8>>,
    /// With leases on (§7.3): the client's stored lease and the lease key.
    pub lease: Option<LeaseContext>,
    /// The stored outcomes of the request's `clientCommitId`s (§6.3), read
    /// after the push's idempotency locks were taken.
    pub stored_outcomes: StoredOutcomes,
    /// With [`PullPart::BoundsNow`]: the partition's `(maxCommitSeq,
    /// horizonSeq)` (`(0, 0)` without a counter row), read behind the
    /// pruning fence.
    pub bounds: Option<PartitionBounds>,
}

/// What the request's pull half needs from the context read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPart {
    /// No pull half: no pruning fence.
    None,
    /// A pull half after a push half: the pruning fence now, the log bounds
    /// later (after the push, so the pull sees the request's own commits).
    BoundsLater,
    /// A round that only pulls: the pruning fence, and the log bounds with
    /// the context (one statement less).
    BoundsNow,
}

/// The reads, one statement. Under `syncular.router_statements` (Citus) it
/// carries the partition equalities, so it is routed to the partition's worker.
const CONTEXT_SQL: &str = "SELECT v.version, v.xmin::text, r.log_epoch, r.epoch_required, r.last_authenticated_at_ms, \
            c.actor_id, c.wire_version, c.updated_at_ms, \
            (SELECT k.key FROM syncular.sync_notification_key k WHERE k.id = 1) \
     FROM (SELECT 1) AS one \
     LEFT JOIN (SELECT s.version, s.xmin FROM syncular.sync_schema_versions s \
                ORDER BY s.version DESC LIMIT 1) v ON true \
     LEFT JOIN syncular.sync_partition_registry r ON r.partition = $1 \
     LEFT JOIN syncular.sync_clients c ON c.partition = $1 AND c.client_id = $2";

/// Columns of [`CONTEXT_SQL`].
const CONTEXT_COLUMNS: usize = 9;
/// Columns the lease part adds (10–18: [`leases::LEASE_COLUMNS`], the lease key).
const LEASE_PART_COLUMNS: usize = 9;
/// Columns the bounds part adds: `max_commit_seq`, `horizon_seq` of the counter row.
const BOUNDS_PART_COLUMNS: usize = 2;

/// The context statement for a request with or without auth leases (§7.3),
/// with or without the log bounds, and with or without commits. With leases:
/// [`CONTEXT_SQL`] plus the client's lease row (columns 10–17,
/// [`leases::LEASE_COLUMNS`]) and the lease key (18), a primary-key probe and
/// a one-row read. With bounds: plus the counter row's `max_commit_seq` and
/// `horizon_seq` (the next two columns), a primary-key probe. With commits:
/// plus `(client_commit_id, result)` of each stored outcome of the keys `$3`
/// ([`OUTCOMES_JOIN`], the last two columns): one row per stored outcome (at
/// least one row; the others repeat the context). No extra statement either
/// way.
fn context_sql(leases: bool, bounds: bool, outcomes: bool) -> &'static str {
    static SQL: [OnceLock<String>; 8] = [const { OnceLock::new() }; 8];
    SQL[usize::from(leases) * 4 + usize::from(bounds) * 2 + usize::from(outcomes)].get_or_init(|| {
        let (select, from) = CONTEXT_SQL.split_once(" FROM (SELECT 1) AS one").expect("CONTEXT_SQL's outer FROM");
        let mut columns = select.to_owned();
        let mut joins = format!(" FROM (SELECT 1) AS one{from}");
        if leases {
            columns.push_str(&format!(", {}, {}", leases::LEASE_COLUMNS, leases::KEY_SUBQUERY));
            joins.push_str(" LEFT JOIN syncular.sync_auth_leases l ON l.partition = $1 AND l.client_id = $2");
        }
        if bounds {
            columns.push_str(", sp.max_commit_seq, sp.horizon_seq");
            joins.push_str(" LEFT JOIN syncular.sync_partitions sp ON sp.partition = $1");
        }
        if outcomes {
            columns.push_str(", pr.client_commit_id, pr.result");
            joins.push(' ');
            joins.push_str(OUTCOMES_JOIN);
        }
        columns + &joins
    })
}

/// Reads the request context of `client_id` in `partition` (`None`: no
/// client record is looked up):
/// 1. the locks, taken directly ([`push_locks::take_shared_pair`],
///    [`push_locks::take_exclusive`]; no statement), in this order: the
///    schema fence `(SCHEMA_FENCE_CLASS, 0)` shared always — so the marker
///    read next is never older than a schema change this request could meet
///    later ([`schema_store::SCHEMA_FENCE_CLASS`]) — the partition's write
///    fence shared always (every round may write: the client record, the
///    registry, a push; a drop batch waits for it,
///    [`crate::store::lifecycle::fence`]) — with a `pull` part, the
///    partition's pruning fence ([`crate::store::lifecycle::fence`]) shared:
///    the pull half reads the log bounds behind it, in this statement
///    ([`PullPart::BoundsNow`]) or a later one — and `lock_keys`, the push's
///    idempotency and row-bucket locks
///    (`engine::push::lock_keys`: ascending, each once; the push then runs
///    without taking them again). The fence comes first: a push holding row
///    locks never waits behind a queued bump while a request that holds the
///    fence waits for those row locks. They are taken before the read's
///    statement starts, so its snapshot is younger than every one of them,
///    and where the function runs (under Citus, as the pruning batch's
///    exclusive fence and the bump's schema fence are);
/// 2. the reads: primary-key probes without a statement ([`read_direct`]),
///    or under Citus or with leases on one statement ([`context_sql`]) — with
///    `commit_ids`, the stored outcomes of those keys: read after their
///    idempotency locks, under a snapshot that shows the outcome of a
///    concurrent delivery of the same commit that held the lock; with
///    [`PullPart::BoundsNow`], the log bounds;
/// 3. under REPEATABLE READ / SERIALIZABLE only, the check that the marker
///    is current ([`schema_store::confirm_marker_in_snapshot`]).
///
/// Errors: SPI failures.
pub fn read(
    partition: &str,
    client_id: Option<&str>,
    pull: PullPart,
    lock_keys: Vec<i64>,
    leases: bool,
    commit_ids: &[String],
) -> StoreResult<RequestContextRow> {
    push_locks::take_shared_pair(schema_store::SCHEMA_FENCE_CLASS, 0);
    crate::store::lifecycle::fence::share_writes(partition);
    if pull != PullPart::None {
        crate::store::lifecycle::fence::share(partition)?;
    }
    push_locks::take_exclusive(&lock_keys);
    let context = if !leases && direct::available() {
        read_direct(partition, client_id, pull, commit_ids)
    } else {
        read_statement(partition, client_id, pull, leases, commit_ids)?
    };
    if let Some((version, _)) = &context.schema_key {
        schema_store::confirm_marker_in_snapshot(*version)?;
    }
    Ok(context)
}

/// The reads as primary-key probes without a statement ([`direct`]), all
/// under one snapshot: what [`context_sql`] reads, row for row (the lease
/// part excepted: with leases on, [`read_statement`] runs).
pub fn read_direct(partition: &str, client_id: Option<&str>, pull: PullPart, commit_ids: &[String]) -> RequestContextRow {
    use direct::Key::{Int4, Text};
    // One snapshot for every probe, as the statement form has.
    let snap = direct::Snapshot::take();
    let schema_key = direct::first_in(&snap, c"sync_schema_versions", c"sync_schema_versions_pkey", &[], true, |row| {
        row.and_then(|r| Some((r.int8("version")?, r.xmin_text())))
    });
    let registry = direct::first_in(&snap, c"sync_partition_registry", c"sync_partition_registry_pkey", &[Text(partition)], false, |row| {
        let r = row?;
        Some(RegistryRow {
            log_epoch: r.text("log_epoch")?,
            epoch_required: r.bool("epoch_required")?,
            last_authenticated_at_ms: r.int8("last_authenticated_at_ms")?,
        })
    });
    let client = client_id.and_then(|id| {
        direct::first_in(&snap, c"sync_clients", c"sync_clients_pkey", &[Text(partition), Text(id)], false, |row| {
            let r = row?;
            Some(ClientRow { actor_id: r.text("actor_id")?, wire_version: r.int4("wire_version")?, updated_at_ms: r.int8("updated_at_ms")? })
        })
    });
    let notification_key =
        direct::first_in(&snap, c"sync_notification_key", c"sync_notification_key_pkey", &[Int4(1)], false, |row| row.and_then(|r| r.bytes("key")));
    let bounds = (pull == PullPart::BoundsNow).then(|| {
        direct::first_in(&snap, c"sync_partitions", c"sync_partitions_pkey", &[Text(partition)], false, |row| PartitionBounds {
            max_commit_seq: row.and_then(|r| r.int8("max_commit_seq")).unwrap_or(0),
            horizon_seq: row.and_then(|r| r.int8("horizon_seq")).unwrap_or(0),
        })
    });
    let mut stored_outcomes = StoredOutcomes::new();
    if let Some(id) = client_id {
        for commit_id in commit_ids {
            let keys = [Text(partition), Text(id), Text(commit_id)];
            if let Some(result) = direct::first_in(&snap, c"sync_push_results", c"sync_push_results_pkey", &keys, false, |row| row.and_then(|r| r.jsonb_text("result"))) {
                stored_outcomes.insert(commit_id.clone(), result);
            }
        }
    }
    RequestContextRow { schema_key, registry, client, notification_key, lease: None, stored_outcomes, bounds }
}

/// The reads as one statement ([`context_sql`]; under Citus, or with leases on).
pub fn read_statement(partition: &str, client_id: Option<&str>, pull: PullPart, leases: bool, commit_ids: &[String]) -> StoreResult<RequestContextRow> {
    let outcomes = !commit_ids.is_empty();
    let bounds = pull == PullPart::BoundsNow;
    Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let mut args = vec![DatumWithOid::from(partition), DatumWithOid::from(client_id)];
        if outcomes {
            args.push(DatumWithOid::from(commit_ids.to_vec()));
        }
        let table = pinned_plan::execute(client, context_sql(leases, bounds, outcomes), if outcomes { None } else { Some(1) }, &args)?;
        let row = table.first();
        let schema_key = row.get::<i64>(1)?.zip(row.get::<String>(2)?);
        let registry = match (row.get::<String>(3)?, row.get::<bool>(4)?, row.get::<i64>(5)?) {
            (Some(log_epoch), Some(epoch_required), Some(last_authenticated_at_ms)) => {
                Some(RegistryRow { log_epoch, epoch_required, last_authenticated_at_ms })
            }
            _ => None,
        };
        let client = match (row.get::<String>(6)?, row.get::<i32>(7)?, row.get::<i64>(8)?) {
            (Some(actor_id), Some(wire_version), Some(updated_at_ms)) => {
                Some(ClientRow { actor_id, wire_version, updated_at_ms })
            }
            _ => None,
        };
        let lease = if leases {
            Some(LeaseContext { row: leases::row_at(&row, CONTEXT_COLUMNS + 1)?, key: row.get::<Vec<u8>>(CONTEXT_COLUMNS + 9)? })
        } else {
            None
        };
        let notification_key = row.get::<Vec<u8>>(9)?;
        let after_leases = CONTEXT_COLUMNS + if leases { LEASE_PART_COLUMNS } else { 0 };
        let bounds = if bounds {
            let (max, horizon) = (row.get::<i64>(after_leases + 1)?, row.get::<i64>(after_leases + 2)?);
            Some(PartitionBounds { max_commit_seq: max.unwrap_or(0), horizon_seq: horizon.unwrap_or(0) })
        } else {
            None
        };
        let mut stored_outcomes = StoredOutcomes::new();
        if outcomes {
            let first = after_leases + if bounds.is_some() { BOUNDS_PART_COLUMNS } else { 0 } + 1;
            // The first row (the cursor is on it), then the others.
            if let (Some(id), Some(result)) = (row.get::<String>(first)?, row.get::<String>(first + 1)?) {
                stored_outcomes.insert(id, result);
            }
            for other in row {
                if let (Some(id), Some(result)) = (other.get::<String>(first)?, other.get::<String>(first + 1)?) {
                    stored_outcomes.insert(id, result);
                }
            }
        }
        Ok(RequestContextRow { schema_key, registry, client, notification_key, lease, stored_outcomes, bounds })
    })
    .map_err(StoreError::spi("read_request_context"))
}

/// `EXPLAIN (FORMAT JSON)` of the context read [`read`] runs for a request
/// (without leases) with commits (`commit_ids` as the keys) or, with none,
/// for a round that only pulls (with the log bounds): the pinned plan. For
/// the plan tests. Errors: SPI failures.
pub fn explain_read(partition: &str, client_id: &str, commit_ids: &[String]) -> StoreResult<String> {
    let mut args = vec![DatumWithOid::from(partition), DatumWithOid::from(client_id)];
    let outcomes = !commit_ids.is_empty();
    if outcomes {
        args.push(DatumWithOid::from(commit_ids.to_vec()));
    }
    pinned_plan::explain(context_sql(false, !outcomes, outcomes), &args, false)
        .map_err(StoreError::spi("explain_request_context"))
}
