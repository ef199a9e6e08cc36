//! `syncular.partition_stats` (docs/src/sql/lifecycle.md): per partition,
//! what an operator needs to see why its horizon does or does not move.

use crate::engine::clock;
use crate::engine::error::EngineResult;
use crate::engine::lifecycle::horizon;
use crate::engine::schema;
use crate::settings::retention;
use crate::store::lifecycle::stats::{self as store, PartitionRow};

/// One partition's statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStats {
    /// The stored state.
    pub row: PartitionRow,
    /// Rows of the partition across every app table.
    pub app_rows: i64,
    /// The horizon pruning would set now (= `horizon_seq` when it cannot move).
    pub prune_target: i64,
    /// The active client with the smallest cursor: `(client_id, cursor,
    /// updated_at_ms)`.
    pub laggard: Option<(String, i64, i64)>,
    /// Age of the oldest retained commit at `now`, ms.
    pub oldest_commit_age_ms: Option<i64>,
}

/// Statistics of every partition (or only `partition`). Errors: clock, store failures.
pub fn stats(partition: Option<&str>) -> EngineResult<Vec<PartitionStats>> {
    let now = clock::now_ms()?;
    let retention = retention();
    // Behind the schema fence: a bump never retires a table between this read and its count.
    let tables = schema::load_fenced_schema()?;
    store::partition_rows(partition, now.saturating_sub(retention.active_window_ms))?
        .into_iter()
        .map(|row| {
            let mut app_rows = 0;
            if let Some(schema) = &tables {
                for t in &schema.tables {
                    app_rows += store::app_rows(&t.qualified_name, &row.partition)?;
                }
            }
            let plan = horizon::plan(&row.partition, now, &retention)?;
            Ok(PartitionStats {
                app_rows,
                prune_target: plan.as_ref().map_or(row.horizon_seq, |p| p.target),
                laggard: plan.and_then(|p| p.inputs.laggard).map(|(c, id, seen)| (id, c, seen)),
                oldest_commit_age_ms: row.oldest_commit_ms.map(|t| now.saturating_sub(t)),
                row,
            })
        })
        .collect()
}
