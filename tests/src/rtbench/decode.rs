//! Decoding of realtime deltas for the benchmark's sessions: identical deltas
//! (sessions with the same registrations share one encoding) are decoded once
//! ([`DecodeCache`]) — decoding is the client's cost, and this process shares
//! the cores with the gateway and Postgres.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::setup::pull_outcome;
use crate::wire::decode_response;

/// What a delta carried.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    /// The `commitSeq` of every `COMMIT` frame, in message order.
    pub commit_seqs: Vec<i64>,
    /// The highest `SUB_END.nextCursor` (the ack cursor).
    pub next_cursor: Option<i64>,
}

/// Decodes each distinct delta payload once.
#[derive(Debug, Default)]
pub struct DecodeCache {
    map: Mutex<HashMap<Bytes, Arc<Decoded>>>,
}

impl DecodeCache {
    /// The decoded form of `payload` (an SSP2 response without its channel tag).
    ///
    /// Errors: the reference codec's decode error.
    pub fn get(&self, payload: Bytes) -> Result<Arc<Decoded>, String> {
        if let Some(d) = self.lock().get(&payload) {
            return Ok(d.clone());
        }
        let msg = decode_response(&payload)?;
        let out = pull_outcome(&msg);
        let decoded = Arc::new(Decoded {
            commit_seqs: out.commit_seqs,
            next_cursor: out.next_cursor,
        });
        let mut map = self.lock();
        if map.len() > 8192 {
            map.clear();
        }
        map.insert(payload, decoded.clone());
        Ok(decoded)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Bytes, Arc<Decoded>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}
