//! The object-store tier's SQL surface (issue 28; docs/src/operate/object-store.md): the mover's
//! configuration, keys, heartbeat, work queue and reports, and the presigned URLs the blob
//! functions answer once the bucket holds the bytes ([`tier`]).

mod tier;
