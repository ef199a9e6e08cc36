//! Citus support without Citus (README "Scaling out with Citus"): the
//! router-shaped log write writes exactly what the one-statement write
//! writes, and `syncular.distribute()` refuses clearly where it cannot run.

mod drop_guard;
mod router_log;
