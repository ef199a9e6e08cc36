//! `sync_clients` (SPEC §1.5, §4.5, §8.1): one row per `(partition,
//! clientId)`. The round's client binding writes it ([`binding`]); the pull
//! half records the cursor and subscriptions ([`cursor`]).

pub mod binding;
pub mod cursor;
