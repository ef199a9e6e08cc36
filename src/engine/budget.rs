//! The pull's response byte budget (issue item 7; DESIGN §4).
//!
//! A pull stops adding commits (§4.5) or bootstrap pages/rows (§4.7) once the
//! response has reached `ctx.response_budget_bytes`, so no legal request —
//! even at the maximum §4.2 clamps — builds a response near Postgres's 1 GB
//! value limit. Two exceptions keep every pull making progress:
//!
//! - nothing is ever deferred before this pull has delivered at least one
//!   `COMMIT` or segment (a single commit larger than the budget is delivered
//!   whole and alone);
//! - a fresh bootstrap (request `cursor = -1`, no resume token) always gets
//!   a first segment, because the §5.6 first-page clear happens only in the
//!   response that answers the fresh request — an empty one (header bytes
//!   only) when the budget is already spent.
//!
//! So a response passes the budget by at most one commit or one row, plus a
//! few framing bytes per subscription, whatever the §4.2 clamps.
//!
//! A deferred subscription gets a legal "come back" section: incremental →
//! `SUB_END.nextCursor` = the last delivered `commitSeq` (the §4.5
//! truncation rule, the request cursor when nothing was delivered);
//! bootstrap → the resume token at the last delivered row (§4.7). The client
//! pulls again because the response carried commits or segments, or a token.

/// Budget state of one pull. Byte counts are response bytes as reported by
/// the response writer (`bytes_written()`).
#[derive(Debug, Clone)]
pub struct Budget {
    limit_bytes: usize,
    delivered_any: bool,
    deferred: usize,
}

impl Budget {
    /// A fresh budget of `limit_bytes` bytes (the whole response, push half
    /// included, counts against it).
    pub fn new(limit_bytes: usize) -> Self {
        Budget { limit_bytes, delivered_any: false, deferred: 0 }
    }

    /// True when the next commit or page must be deferred: the response
    /// (`written` bytes, plus `pending` bytes built but not yet written) has
    /// reached the budget and this pull already delivered something.
    pub fn exhausted(&self, written: usize, pending: usize) -> bool {
        self.delivered_any && written.saturating_add(pending) >= self.limit_bytes
    }

    /// True when a page under construction must stop adding rows: the
    /// response plus the page's `pending` bytes reached the budget (a page
    /// always keeps at least its first row — the caller checks that).
    pub fn page_full(&self, written: usize, pending: usize) -> bool {
        written.saturating_add(pending) >= self.limit_bytes
    }

    /// Records that a `COMMIT` or segment frame was written.
    pub fn note_delivered(&mut self) {
        self.delivered_any = true;
    }

    /// Records that one subscription was cut short by the budget.
    pub fn note_deferred(&mut self) {
        self.deferred += 1;
    }

    /// Subscriptions cut short so far.
    pub fn deferred(&self) -> usize {
        self.deferred
    }

    /// The configured limit in bytes.
    pub fn limit_bytes(&self) -> usize {
        self.limit_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_deferred_before_the_first_delivery() {
        let mut b = Budget::new(100);
        assert!(!b.exhausted(500, 0));
        b.note_delivered();
        assert!(b.exhausted(500, 0));
        assert!(b.exhausted(60, 40));
        assert!(!b.exhausted(60, 39));
    }

    #[test]
    fn page_full_ignores_delivery_state() {
        let b = Budget::new(100);
        assert!(b.page_full(100, 0));
        assert!(!b.page_full(10, 89));
    }
}
