//! hookstate-engine: one redb file holding an append-only, blake3-chained event log and the views
//! projected from it, with the core primitives every domain builds on.
//!
//! Start at [`Engine`]. Does not print, read arguments or exit; the `hookstate` binary does.

pub mod alerts;
mod audit;
pub mod core;
mod doc;
#[cfg(feature = "bugdrill")]
pub mod drill;
mod engine;
pub mod error;
pub mod feedback;
mod fsio;
pub mod heartbeat;
pub mod legacy;
pub mod limits;
pub mod observer;
mod project;
pub mod proposals;
pub mod props;
mod query;
pub mod session;
pub mod signals;
pub mod stdin;
mod storage;
mod store;
mod value;

pub use crate::audit::{RebuildReport, VerifyReport};
pub use crate::core::{Command, Expect, Refusal};
pub use crate::engine::{creation_is_atomic, Call, Engine, OpenOptions, Outcome};
pub use crate::error::{Error, Result};
pub use crate::legacy::moonshine::MoonshineImport;
pub use crate::query::{event_to_json, LogFilter, Query, Stats};
#[cfg(feature = "testing")]
pub use crate::store::Backend;
pub use crate::value::validate_json;
pub use hookstate_schema as schema;
