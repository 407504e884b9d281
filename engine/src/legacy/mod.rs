//! Legacy layouts: the exact JSON files the upstream plugins read and write, imported as events
//! and exported (or mirrored) back byte for byte.
//!
//! Every legacy file is reached through [`root::Root`], never by joining raw ids into paths.
//! Does not decide domain rules; the domain modules do.

pub mod hermit;
pub mod loopd;
pub mod observer;
#[allow(dead_code, reason = "subdir, list and remove serve the moonshine codec")]
pub(crate) mod root;
