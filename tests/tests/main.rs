//! The one integration test binary: engine-level tests on real redb files in temporary
//! directories.
#![allow(clippy::unwrap_used, reason = "integration tests fail loudly on any unexpected error")]

mod alerts;
mod asof;
mod corpus;
mod docs;
mod exportcrash;
mod feedback_mirror;
mod feedback_model;
mod group;
mod heartbeat;
mod import;
mod mirror_race;
mod model;
mod observer;
mod powerloss;
mod proposals;
mod session;
mod session_store;
mod signals;
mod store;
mod target_cpu;
mod tidy;
