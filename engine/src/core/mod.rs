//! The core primitives (records with revision, claim queues with leases and fencing tokens,
//! counters, dedup sets, capped lists): the [`Command`]s hooks run through `Engine::execute`,
//! checked before any store is opened and decided inside the write transaction.
//!
//! Does not touch legacy files; the core primitives have no legacy layout.

pub(crate) mod api;
pub(crate) mod project;
pub(crate) mod query;
pub(crate) mod rules;

pub use rules::{Command, Expect};
