//! The `signals` domain (loopd): PM registration (newest wins, with history), per-turn signal
//! records kept as a history with the latest per session as a view, delivery results as their
//! own events, and the two-failed-sends cap counted per PM registration.
//!
//! Decisions are pure functions over documents already read. Does not resolve bundles or touch
//! files; `layout.rs` does.

pub mod api;
pub mod layout;
pub mod project;
pub mod rules;

pub use api::Signals;
pub use rules::{bundle_scope, turn_line, TurnInput};
