//! The log's lifecycle statements (SPEC §4.6 pruning, §2.1 epoch rotation;
//! docs/src/sql/lifecycle.md): the pruning fence, the horizon inputs and
//! advance, the bounded deletion batches, epoch rotation, partition removal
//! and the operator's statistics.
//!
//! Every deletion statement is bounded (`LIMIT` on a primary-key walk or a
//! `commitSeq` range of the partition), so a procedure that commits between
//! calls never holds anything a request waits on for longer than one batch.

pub mod drop;
pub mod fence;
pub mod horizon;
pub mod prune;
pub mod rotate;
pub mod stats;
