//! `syncular.distribute` (docs/src/operate/citus.md): distributes
//! every log table on `partition`, makes the partition-less tables reference
//! tables and distributes the registered app tables — the tables and guards
//! are [`crate::engine::distribution`]'s.

use crate::engine::distribution::{
    distribute_app_table, require_coordinator, ANCHOR, DISTRIBUTED_TABLES, REFERENCE_TABLES,
};
use crate::engine::error::EngineResult;
use crate::engine::schema;
use crate::store::citus;

/// What [`distribute`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Distributed {
    /// Log tables newly distributed (0 when run again).
    pub log_tables: i32,
    /// Reference tables newly created.
    pub reference_tables: i32,
    /// App tables newly distributed.
    pub app_tables: i32,
}

/// Distributes every table (idempotent) and turns
/// `syncular.router_statements` on for the database.
pub fn distribute() -> EngineResult<Distributed> {
    require_coordinator()?;
    // The NOTIFY key is created on first use; created here, while the table is
    // still local, the first commit does not write a reference table (a write
    // to every node: a two-phase commit).
    crate::store::notifications::notification_key()?;
    // The same for the lease signing key (§7.3), even while leases are off.
    crate::engine::auth::leases::ensure_key()?;
    // And the signed segment URL key (§5.4), even while signed URLs are off.
    crate::engine::segments::signed_url::ensure_key()?;
    let mut done = Distributed::default();
    for (i, table) in DISTRIBUTED_TABLES.iter().enumerate() {
        if !citus::is_citus_table(table)? {
            citus::distribute_table(table, "partition", if i == 0 { "none" } else { ANCHOR })?;
            done.log_tables += 1;
        }
    }
    for table in REFERENCE_TABLES {
        if !citus::is_citus_table(table)? {
            citus::reference_table(table)?;
            done.reference_tables += 1;
        }
    }
    if let Some(registered) = schema::load_registered_schema()? {
        for t in &registered.tables {
            if distribute_app_table(&registered.app_schema, &t.table.name, &t.qualified_name)? {
                done.app_tables += 1;
            }
        }
    }
    citus::set_router_statements(true)?;
    Ok(done)
}
