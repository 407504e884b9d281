//! The `signals` domain (loopd): PM registration (newest wins, with history), per-turn signal
//! records kept as a history with the latest per session as a view, delivery results as their
//! own events, and the two-failed-sends cap counted per PM registration.
//!
//! Decisions are pure functions over documents already read. Does not resolve bundles or touch
//! files; `layout.rs` does.

pub(crate) mod api;
pub(crate) mod layout;
pub(crate) mod project;
pub(crate) mod rules;

pub use api::Signals;
pub use layout::{is_bundle_root, lexical_join, resolve_bundle, STORE_FILE_DEFAULT};
pub use rules::{bundle_scope, turn_line, TurnInput};
