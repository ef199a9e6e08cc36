//! The per-request context of one sync round (SPEC §1.5, §2.1, §3.2 rule 3,
//! §6.1): who is asking, in which partition, under which registered schema,
//! with which allowed scopes, and the request's limits. Built once by
//! [`crate::engine::round`] after the partition, epoch and client gates;
//! both halves (push and pull) read it.

use crate::engine::auth::allowed::Allowed;
use crate::engine::schema::RegisteredSchema;

/// Everything the push and pull halves need about the request.
#[derive(Debug)]
pub struct SyncContext<'s> {
    /// The host partition (never on the wire).
    pub partition: String,
    /// The authenticated actor (`sync_commits.actor_id`, client binding).
    pub actor_id: String,
    /// `REQ_HEADER.clientId` (non-empty, bound to `actor_id`).
    pub client_id: String,
    /// The request's wire version (1, 2 or 3); the response answers in it (§9).
    pub wire_version: u16,
    /// The registered schema being served (its version equals the request's
    /// `schemaVersion`, else the round ended at the schema floor).
    pub schema: &'s RegisteredSchema,
    /// The §3.2 allowed map, resolved at most once per request: the
    /// gateway's `allowed_scopes` argument, else the registered resolver.
    /// `Denied` revokes every subscription and forbids every write.
    pub allowed: Allowed,
    /// The partition's current `logEpoch` (§2.1).
    pub log_epoch: String,
    /// "Now" for this request, Unix ms, read once (`engine::clock::now_ms`).
    pub now_ms: i64,
    /// Response byte budget (GUC `syncular.response_budget_bytes`, default
    /// 4 MiB): the pull stops adding commits/pages past it.
    pub response_budget_bytes: usize,
    /// Operation cap per request (GUC `syncular.max_operations`, default 500, §6.1).
    pub max_operations: usize,
    /// The NOTIFY signing key when the caller already read it (`None`: read
    /// — or created — at the first notification).
    pub notification_key: Option<Vec<u8>>,
}
