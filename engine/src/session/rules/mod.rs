//! The session domain's rules as pure decisions over documents already read: each returns the
//! events to append and the verdict line upstream's script prints, or a refusal carrying
//! upstream's error token.
//!
//! Time comes in as UTC milliseconds and the zone as `config.timezone`; randomness (a UUID) comes
//! in as an argument. Does not read or write the store or files, nor read a clock.

pub(crate) mod archive;
pub(crate) mod chunk;
pub(crate) mod conversations;
pub(crate) mod hypotheses;
pub(crate) mod markers;
pub(crate) mod observations;
pub(crate) mod recover;
pub(crate) mod report;
pub(crate) mod runtime;
pub(crate) mod shell;
pub(crate) mod signal;
pub(crate) mod task_doc;
pub(crate) mod task_verbs;
pub(crate) mod tasks;
pub(crate) mod verdict;
