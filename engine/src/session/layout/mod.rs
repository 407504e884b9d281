//! The `hermit-session` legacy layout: the files of a `.claude-code-hermit` state directory the
//! session domain owns and their byte-for-byte codec (`files.rs`, task records in `task.rs`),
//! import and export (`io.rs`), and the layout as the one mirror protocol keeps it (`mirror.rs`,
//! with its per-record merges in `merge.rs`).

pub(crate) mod files;
pub(crate) mod io;
mod merge;
pub(crate) mod mirror;
pub(crate) mod task;
