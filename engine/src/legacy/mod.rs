//! The legacy-file machinery every layout shares: the one safe seam for files under a held root
//! directory ([`root`]), the durable replace and mkdir steps ([`durable`]), JSON objects kept in
//! their upstream key order and style ([`json`]), and the one mirror protocol ([`mirror`]).
//!
//! Knows no domain: each domain brings its own layout (its files, how to adopt them and how to
//! render them). Every legacy file is reached through [`root::Root`], never by joining raw ids
//! into paths.

pub mod durable;
pub(crate) mod json;
pub(crate) mod mirror;
pub(crate) mod root;
