//! Object-store tier statements (issue 28; docs/src/operate/object-store.md): the configuration
//! row and per-day signing keys ([`config`]), which segment and blob bytes the bucket holds
//! ([`stored`]), presigned uploads awaiting verification ([`grants`]) and the mover's work queue
//! ([`work`]). The engine ([`crate::engine::objects`]) decides; this module only moves rows.

pub mod config;
pub mod grants;
pub mod stored;
pub mod work;
