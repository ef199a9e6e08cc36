//! The statements behind who may do what (engine side:
//! [`crate::engine::auth`]): the registered scope resolver and host-function
//! catalog checks ([`resolver`]) and the auth lease records and key
//! ([`leases`]).

pub mod leases;
pub mod resolver;
