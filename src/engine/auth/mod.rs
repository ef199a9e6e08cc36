//! Who may do what (SPEC §1.5, §3.2, §7.3): the caller's identity
//! arguments ([`caller`]), the allowed map and its outage signal
//! ([`allowed`]), the host scope resolver ([`resolver`]), auth leases
//! ([`leases`]) and the `clientId` → actor binding ([`client_id`]).
//!
//! Inside, [`allowed`] is the floor: [`resolver`] and [`leases`] both build
//! on it and never on each other.

pub mod allowed;
pub mod caller;
pub mod client_id;
pub mod leases;
pub mod resolver;
