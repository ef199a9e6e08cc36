//! Realtime (SPEC §8) as SQL: session open, deltas, acks, the calls a gateway makes, and the
//! session rules (`realtime_connect`, `realtime_reload`, `realtime_pass`).

pub mod support;
mod ack;
mod deltas;
mod gateway_calls;
mod open;
mod session;
