//! The §4.2 `PULL_HEADER` clamps: silent, `0` = default, negatives clamp to
//! the minimum (the response reflects the clamped behaviour, never an error).

use syncular_protocol::constants::{
    ACCEPT_EXTERNAL_ROWS, ACCEPT_INLINE_ROWS, LIMIT_COMMITS_DEFAULT, LIMIT_COMMITS_MAX,
    LIMIT_COMMITS_MIN, LIMIT_SNAPSHOT_ROWS_DEFAULT, LIMIT_SNAPSHOT_ROWS_MAX,
    LIMIT_SNAPSHOT_ROWS_MIN, MAX_SNAPSHOT_PAGES_DEFAULT, MAX_SNAPSHOT_PAGES_MAX,
    MAX_SNAPSHOT_PAGES_MIN,
};
use syncular_protocol::request::PullHeader;

/// Clamped pull limits of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullLimits {
    /// Max changes across returned commits per subscription, in [1, 1000].
    pub limit_commits: i32,
    /// Bootstrap page size in rows, in [1, 50000].
    pub limit_snapshot_rows: i32,
    /// Max bootstrap pages per subscription per pull, in [1, 50].
    pub max_snapshot_pages: i32,
    /// The `accept` bitmask as sent.
    pub accept: u8,
}

fn clamp(value: i32, min: i32, max: i32, default: i32) -> i32 {
    if value == 0 {
        default
    } else {
        value.clamp(min, max)
    }
}

impl PullLimits {
    /// Applies the §4.2 clamps to `header`.
    pub fn from_header(header: &PullHeader) -> Self {
        PullLimits {
            limit_commits: clamp(
                header.limit_commits,
                LIMIT_COMMITS_MIN,
                LIMIT_COMMITS_MAX,
                LIMIT_COMMITS_DEFAULT,
            ),
            limit_snapshot_rows: clamp(
                header.limit_snapshot_rows,
                LIMIT_SNAPSHOT_ROWS_MIN,
                LIMIT_SNAPSHOT_ROWS_MAX,
                LIMIT_SNAPSHOT_ROWS_DEFAULT,
            ),
            max_snapshot_pages: clamp(
                header.max_snapshot_pages,
                MAX_SNAPSHOT_PAGES_MIN,
                MAX_SNAPSHOT_PAGES_MAX,
                MAX_SNAPSHOT_PAGES_DEFAULT,
            ),
            accept: header.accept,
        }
    }

    /// Bit 0 or bit 1: the client takes rows segments at all (§4.2 mandatory).
    pub fn accepts_rows(&self) -> bool {
        self.accept & (ACCEPT_INLINE_ROWS | ACCEPT_EXTERNAL_ROWS) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(c: i32, r: i32, p: i32) -> PullHeader {
        PullHeader { limit_commits: c, limit_snapshot_rows: r, max_snapshot_pages: p, accept: 3 }
    }

    #[test]
    fn zero_is_default_and_out_of_range_clamps() {
        let l = PullLimits::from_header(&header(0, 0, 0));
        assert_eq!((l.limit_commits, l.limit_snapshot_rows, l.max_snapshot_pages), (1000, 1000, 4));
        let l = PullLimits::from_header(&header(i32::MAX, i32::MAX, i32::MAX));
        assert_eq!((l.limit_commits, l.limit_snapshot_rows, l.max_snapshot_pages), (1000, 50_000, 50));
        let l = PullLimits::from_header(&header(-5, -1, i32::MIN));
        assert_eq!((l.limit_commits, l.limit_snapshot_rows, l.max_snapshot_pages), (1, 1, 1));
        let l = PullLimits::from_header(&header(7, 20, 2));
        assert_eq!((l.limit_commits, l.limit_snapshot_rows, l.max_snapshot_pages), (7, 20, 2));
    }
}
