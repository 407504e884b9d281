//! The kernel every domain stands on: the write-path values ([`call`]), the write path itself
//! ([`write`]), the anchor's rules ([`anchor`]), view access and the overlay ([`view`]), typed
//! documents ([`doc`]), the one projection trait ([`project`]), the storage traits
//! ([`storage`]), errors, limits, JSON value checks, safe file-system helpers and paths checked
//! from the root ([`walk`]), and the upstream-compatible spellings (JavaScript numbers,
//! timestamps).
//!
//! Knows no domain and no backend: domains import the kernel, never the other way round.

pub(crate) mod anchor;
pub(crate) mod batch;
pub(crate) mod batch_state;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod bulk;
pub(crate) mod call;
pub(crate) mod compat;
pub(crate) mod counts;
pub(crate) mod doc;
#[cfg(feature = "bugdrill")]
pub mod drill;
pub(crate) mod error;
pub(crate) mod fsio;
pub(crate) mod hook;
pub(crate) mod key_filter;
pub mod limits;
pub(crate) mod project;
pub(crate) mod replay;
pub(crate) mod storage;
pub(crate) mod value;
pub(crate) mod view;
pub(crate) mod walk;
pub(crate) mod write;
