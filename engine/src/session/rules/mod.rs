//! The session domain's rules as pure decisions over documents already read: each returns the
//! events to append and the verdict line upstream's script prints, or a [`Refusal`] carrying
//! upstream's error token.
//!
//! Time comes in as UTC milliseconds and the zone as `config.timezone`; randomness (a UUID) comes
//! in as an argument. Does not read or write the store or files, nor read a clock.

pub mod archive;
pub mod chunk;
pub mod conversations;
pub mod hypotheses;
pub mod markers;
pub mod observations;
pub mod recover;
pub mod report;
pub mod runtime;
pub mod shell;
pub mod task_doc;
pub mod task_verbs;
pub mod tasks;
pub mod verdict;

pub use verdict::{Class, Decided, Decision, Refusal, Stream, Verdict};
