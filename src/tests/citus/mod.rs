//! Citus support without Citus (docs/src/operate/citus.md): the
//! router-shaped log write writes exactly what the one-statement write
//! writes, and `syncular.distribute()` refuses clearly where it cannot run.

mod drop_guard;
mod router_log;
