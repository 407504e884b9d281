//! Legacy layouts: the exact JSON files the upstream plugins read and write, imported as events
//! and exported (or mirrored) back byte for byte.
//!
//! Every legacy file is reached through [`root::Root`], never by joining raw ids into paths.
//! Does not decide domain rules; the domain modules do.

pub mod durable;
pub mod files;
pub mod heartbeat;
pub mod hermit;
pub mod hermit_alerts;
pub mod js;
pub(crate) mod json;
pub mod loopd;
pub mod mirror;
pub mod moonshine;
pub mod observer;
pub(crate) mod root;
