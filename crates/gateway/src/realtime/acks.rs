//! Batched §8.2 ack persistence (contract §4): acks are merged in memory (MAX per client)
//! and written with one `syncular.realtime_ack` call per partition per flush interval —
//! never one UPDATE per ack. A transiently failed flush keeps its acks for the next one;
//! shutdown drains the buffer before the pool closes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use deadpool_postgres::Pool;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::lock;
use crate::db::realtime::realtime_ack;
use crate::metrics::Metrics;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    actor_id: String,
    cursor: i64,
    log_epoch: String,
}

/// Acks waiting to be written: partition → clientId → newest ack.
#[derive(Debug, Default)]
pub struct AckBuffer {
    pending: Mutex<HashMap<String, HashMap<String, Pending>>>,
}

impl AckBuffer {
    /// Buffers an ack (MAX semantics per client and epoch).
    pub fn add(&self, partition: &str, client_id: &str, actor_id: &str, cursor: i64, log_epoch: &str) {
        let mut map = lock(&self.pending);
        // Allocates only for a partition or client not buffered yet (most acks update one that is).
        let clients = match map.get_mut(partition) {
            Some(clients) => clients,
            None => map.entry(partition.to_owned()).or_default(),
        };
        match clients.get_mut(client_id) {
            Some(p) if p.log_epoch == log_epoch && p.actor_id == actor_id => p.cursor = p.cursor.max(cursor),
            _ => {
                clients.insert(
                    client_id.to_owned(),
                    Pending { actor_id: actor_id.to_owned(), cursor, log_epoch: log_epoch.to_owned() },
                );
            }
        }
    }

    /// Writes every buffered ack: one call per partition. Returns the number of records
    /// updated.
    pub async fn flush(&self, pool: &Pool, metrics: &Metrics) -> usize {
        let batch = std::mem::take(&mut *lock(&self.pending));
        let mut updated = 0;
        for (partition, clients) in batch {
            let acks: Vec<Value> = clients
                .iter()
                .map(|(client, p)| json!({"clientId": client, "actorId": p.actor_id, "cursor": p.cursor, "logEpoch": p.log_epoch}))
                .collect();
            match realtime_ack(pool, &partition, &Value::Array(acks)).await {
                Ok(n) => {
                    let n = usize::try_from(n).unwrap_or(0);
                    metrics.acks_persisted.inc_by(n as u64);
                    updated += n;
                }
                Err(e) => {
                    metrics.error(e.code_str());
                    tracing::warn!(code = e.code_str(), clients = clients.len(), "realtime_ack failed");
                    if e.transient {
                        for (client, p) in clients {
                            self.add(&partition, &client, &p.actor_id, p.cursor, &p.log_epoch);
                        }
                    }
                }
            }
        }
        updated
    }

    /// Flushes every `interval` until `stop` is cancelled.
    pub async fn run(&self, pool: Pool, metrics: std::sync::Arc<Metrics>, interval: Duration, stop: CancellationToken) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.cancelled() => return,
            }
            self.flush(&pool, &metrics).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_with_max_per_client_and_epoch() {
        let b = AckBuffer::default();
        b.add("p", "c1", "u1", 5, "e1");
        b.add("p", "c1", "u1", 3, "e1");
        b.add("p", "c2", "u2", 1, "e1");
        b.add("q", "c1", "u1", 9, "e1");
        let map = b.pending.lock().unwrap();
        assert_eq!(map.values().map(HashMap::len).sum::<usize>(), 3);
        assert_eq!(map["p"]["c1"].cursor, 5);
        drop(map);
        // A new epoch replaces the old ack (an ack for a rotated log is meaningless).
        b.add("p", "c1", "u1", 2, "e2");
        assert_eq!(b.pending.lock().unwrap()["p"]["c1"], Pending { actor_id: "u1".into(), cursor: 2, log_epoch: "e2".into() });
    }
}
