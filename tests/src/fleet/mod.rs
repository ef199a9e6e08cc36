//! The fleet harness: real published clients of **both generations** against one real gateway,
//! each in a driver process of its own (the two client crates link different `sqlite3`s and
//! cannot share a cargo graph, let alone a process):
//! - [`Generation::V2`] — `syncular-client` 0.15.48 (wire versions 1/2, the apps already
//!   shipped), driver `syncular-client-v2-driver`, a binary of this crate;
//! - [`Generation::V3`] — `syncular-client` 0.49.2 (wire version 3, what people install
//!   today), driver `syncular-client-v3-driver`, the workspace `tests/client-v3`.
//!
//! Both drivers speak one line protocol ([`protocol`]) and use the client's own native
//! HTTP/WebSocket transport, exactly as the in-process [`crate::gateway::Peer`] does, so a
//! scenario is written once and run per generation through [`FleetClient`]. [`proxy`] is a TCP
//! relay between a client and the gateway that can lose one `/sync` response (idempotent
//! replay, round-failure reports). [`Stage`] is a scenario's gateway and partition, and
//! [`fleet_scenarios!`](crate::fleet_scenarios) turns a scenario into one test per generation.
//!
//! Driver binaries: `$SYNCULAR_CLIENT_V2_DRIVER` / `$SYNCULAR_CLIENT_V3_DRIVER` when set,
//! else next to the test executable's `deps/` folder (`<target>/debug/`): cargo builds the v2
//! driver with the tests; the v3 driver is built by `scripts/test` (`cargo build
//! --manifest-path tests/client-v3/Cargo.toml`, into the same target dir unless
//! `SYNCULAR_CLIENT_V3_DRIVER` points elsewhere).

pub mod client;
pub mod protocol;
pub mod proxy;
pub mod records;
pub mod stage;

use std::path::PathBuf;

pub use client::{values, FleetClient, Open};
pub use protocol::Limits;
pub use records::{Completed, Conflict, Rejection, Report, RoundFailure, Row};
pub use stage::{as_server_tasks, seed_rows, Stage};

/// A published client generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// `syncular-client` 0.15.48: wire versions 1/2.
    V2,
    /// `syncular-client` 0.49.2: wire version 3.
    V3,
}

impl Generation {
    /// `v2` / `v3`, as the driver reports it on `open`.
    pub fn label(self) -> &'static str {
        match self {
            Generation::V2 => "v2",
            Generation::V3 => "v3",
        }
    }

    /// The environment variable that overrides the driver's path.
    pub fn driver_env(self) -> &'static str {
        match self {
            Generation::V2 => "SYNCULAR_CLIENT_V2_DRIVER",
            Generation::V3 => "SYNCULAR_CLIENT_V3_DRIVER",
        }
    }

    fn binary_name(self) -> &'static str {
        match self {
            Generation::V2 => "syncular-client-v2-driver",
            Generation::V3 => "syncular-client-v3-driver",
        }
    }

    /// The driver binary: [`Generation::driver_env`] when set, else `<target>/debug/<name>`
    /// (the folder above the test executable's `deps/`).
    pub fn driver_path(self) -> PathBuf {
        if let Some(p) = std::env::var_os(self.driver_env()).filter(|p| !p.is_empty()) {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("current test executable");
        let dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>/deps");
        dir.join(self.binary_name())
    }

    /// How to build the driver (for the error when it is missing).
    pub fn build_hint(self) -> &'static str {
        match self {
            Generation::V2 => "build it: cargo build -p syncular-integration-tests --bin syncular-client-v2-driver",
            Generation::V3 => {
                "build it: cargo build --manifest-path tests/client-v3/Cargo.toml (scripts/test does), \
                 or set SYNCULAR_CLIENT_V3_DRIVER"
            }
        }
    }
}
