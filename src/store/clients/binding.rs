//! `sync_clients` binding statement (SPEC §1.5, §8.1): binds a `clientId` to
//! its actor in a partition and records the accepted wire version. The pull
//! half updates the cursor and subscriptions of the same row
//! (`store::clients::cursor`).

use pgrx::datum::DatumWithOid;
use pgrx::spi::Spi;

use crate::store::spi::plan_cache;
use crate::store::{StoreError, StoreResult};

/// Binds `client_id` to `actor_id` in `partition`: inserts the record when
/// absent (`cursor = -1`, `subscriptions = []`), and for a record bound to
/// the same actor sets `wire_version` and `updated_at_ms`. Returns `false`
/// when the client id is bound to a different actor (nothing written) —
/// `sync.invalid_client_id` for the caller. Errors: SPI failures.
pub fn bind_client(
    partition: &str,
    client_id: &str,
    actor_id: &str,
    wire_version: i32,
    now_ms: i64,
) -> StoreResult<bool> {
    Spi::connect_mut(|client| {
        let t = plan_cache::execute(client,
            "INSERT INTO syncular.sync_clients AS c \
               (partition, client_id, actor_id, wire_version, cursor, subscriptions, updated_at_ms) \
             VALUES ($1, $2, $3, $4, -1, '[]'::jsonb, $5) \
             ON CONFLICT (partition, client_id) DO UPDATE \
               SET wire_version = EXCLUDED.wire_version, updated_at_ms = EXCLUDED.updated_at_ms \
               WHERE c.actor_id = EXCLUDED.actor_id \
             RETURNING 1",
            None,
            &[
                DatumWithOid::from(partition),
                DatumWithOid::from(client_id),
                DatumWithOid::from(actor_id),
                DatumWithOid::from(wire_version),
                DatumWithOid::from(now_ms),
            ],
        )?;
        Ok(!t.is_empty())
    })
    .map_err(StoreError::spi("bind_client"))
}
