//! What a sync request reads before anything else (SPEC §1.5, §1.6, §2.1;
//! DESIGN §4): after taking its fences, in one statement, the current
//! schema version's cache key, the partition's registry row, the client's
//! record and the NOTIFY signing key — primary-key probes, run through
//! [`crate::store::pinned_plan`] so no sequential scan planned while a table
//! was tiny is kept.

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::leases::{self, LeaseContext};
use crate::store::partitions::RegistryRow;
use crate::store::{pinned_plan, plan_cache};
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

/// [`CONTEXT_SQL`] plus, with auth leases on (§7.3), the client's lease row
/// (columns 10–17, [`leases::LEASE_COLUMNS`]) and the lease key (18): a
/// primary-key probe and a one-row read, no extra statement.
fn context_lease_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let (select, from) = CONTEXT_SQL.split_once(" FROM (SELECT 1) AS one").expect("CONTEXT_SQL's outer FROM");
        format!(
            "{select}, {}, {} FROM (SELECT 1) AS one{from} \
             LEFT JOIN syncular.sync_auth_leases l ON l.partition = $1 AND l.client_id = $2",
            leases::LEASE_COLUMNS,
            leases::KEY_SUBQUERY
        )
    })
}

/// The request's locks, one statement, taken in this order (target-list
/// order): the schema fence `($1, 0)` shared, the partition's pruning fence
/// `($2, $3)` shared when `$4`, then the push's advisory locks `$5`
/// (ascending, [`crate::store::push_locks`]; empty for a request without
/// pushes). The fence comes first: a push holding row locks never waits
/// behind a queued bump while a request that holds the fence waits for
/// those row locks.
const REQUEST_LOCKS_SQL: &str = "SELECT pg_catalog.pg_advisory_xact_lock_shared($1, 0), \
     (SELECT pg_catalog.pg_advisory_xact_lock_shared($2, $3) WHERE $4), \
     (SELECT count(pg_catalog.pg_advisory_xact_lock(k.key)) \
        FROM (SELECT u.key FROM unnest($5::int8[]) AS u(key) ORDER BY u.key) k)";

/// Reads the request context of `client_id` in `partition` (`None`: no
/// client record is looked up). Two statements:
/// 1. the locks ([`REQUEST_LOCKS_SQL`]): the schema fence always — so the
///    marker read next is never older than a schema change this request
///    could meet later ([`schema_store::SCHEMA_FENCE_CLASS`]) — with
///    `fence`, the partition's pruning fence
///    ([`crate::store::lifecycle::fence`]): a request with a pull half reads
///    the log bounds in a later statement — and `push_locks`, the push's
///    idempotency and row-bucket locks (`engine::push::lock_keys`: ascending,
///    each once; the push then runs without taking them again). It is its own statement because
///    a lock taken inside a statement does not refresh that statement's
///    snapshot, and it runs where the function runs (under Citus, as the
///    pruning batch's exclusive fence and the bump's schema fence do);
/// 2. the reads ([`CONTEXT_SQL`]; with `leases`, [`context_lease_sql`]);
/// 3. under REPEATABLE READ / SERIALIZABLE only, the check that the marker
///    is current ([`schema_store::confirm_marker_in_snapshot`]).
///
/// Errors: SPI failures.
pub fn read(
    partition: &str,
    client_id: Option<&str>,
    fence: bool,
    push_locks: Vec<i64>,
    leases: bool,
) -> StoreResult<RequestContextRow> {
    Spi::connect_mut(|client| {
        plan_cache::execute(
            client,
            REQUEST_LOCKS_SQL,
            Some(1),
            &[
                DatumWithOid::from(schema_store::SCHEMA_FENCE_CLASS),
                DatumWithOid::from(crate::store::lifecycle::fence::FENCE_CLASS),
                DatumWithOid::from(crate::store::lifecycle::fence::fence_key(partition)),
                DatumWithOid::from(fence),
                DatumWithOid::from(push_locks),
            ],
        )
        .map(|_| ())
    })
    .map_err(StoreError::spi("take_request_locks"))?;
    let context = Spi::connect_mut(|client| -> Result<_, pgrx::spi::Error> {
        let table = pinned_plan::execute(
            client,
            if leases { context_lease_sql() } else { CONTEXT_SQL },
            Some(1),
            &[DatumWithOid::from(partition), DatumWithOid::from(client_id)],
        )?;
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
            Some(LeaseContext { row: leases::row_at(&row, 10)?, key: row.get::<Vec<u8>>(18)? })
        } else {
            None
        };
        Ok(RequestContextRow { schema_key, registry, client, notification_key: row.get::<Vec<u8>>(9)?, lease })
    })
    .map_err(StoreError::spi("read_request_context"))?;
    if let Some((version, _)) = &context.schema_key {
        schema_store::confirm_marker_in_snapshot(*version)?;
    }
    Ok(context)
}
