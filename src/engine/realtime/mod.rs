//! Realtime (SPEC §8) as SQL a gateway calls: the gateway holds sockets,
//! authenticates and moves bytes; everything scope- or log-related is here.
//!
//! - [`open`]: session open and registration reload (§8.1, §8.7);
//! - [`registrations`]: effective registrations, their JSON and scope keys;
//! - [`deltas`]: one call per notification burst per partition, one answer
//!   per group of sessions with identical delivery state (§8.2, §8.3);
//! - [`ack`]: batched cursor acks (§8.2);
//! - [`error_response`]: the §8.7 `RESP_HEADER`/`ERROR`/`END` of a failed
//!   socket round;
//! - [`session`]: the session rules over those — states, `hello`, wake-ups, deltas ready to
//!   send, resume and overflow (what makes a gateway in any language thin).
//!
//! Host-initiated refreshes are a notification ([`crate::engine::notify`]).

pub mod ack;
pub mod deltas;
pub mod error_response;
pub mod open;
pub mod registrations;
pub mod session;
