//! Floors: what any gateway pays on this machine, measured in the same run as the gateways — the
//! figures a goal cannot go below here.
//!
//! - [`send`]: CPU of one bare write per (message, socket) to loopback sockets (the fan-out goal)
//! - [`relay`]: a bare blocking HTTP relay in front of `SELECT syncular.sync` (the round goal)

pub mod relay;
pub mod send;
