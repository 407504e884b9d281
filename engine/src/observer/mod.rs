//! The `observer` domain (claude-management): rows observed into a capped window, turn counters,
//! sweeps that subtract what they read (so increments made during the model call survive),
//! delivered finding keys as a bounded dedup list, and `pending` cleared only by
//! compare-and-clear on the version that was injected.
//!
//! Decisions are pure functions over the one observer document of a scope. Does not call models
//! or read the inbox file; the caller passes its length.

pub(crate) mod api;
pub(crate) mod layout;
pub(crate) mod project;
pub(crate) mod rules;

pub use api::Observer;
pub use layout::STATE_FILE_DEFAULT;
pub use rules::{parse_findings, parse_rows, Finding, RowInput, SweepRead};
