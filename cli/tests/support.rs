//! Helpers shared by the CLI test modules: a seeded generator, the `hookstate` command with a
//! store, and a snapshot of a directory tree.
//!
//! Does not run any test itself.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) use hookstate_testkit::Rng;

/// The `hookstate` binary on the store `db`, with the caller's session and scope variables
/// cleared so that the environment cannot change what a call does.
pub(crate) fn hookstate(db: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hookstate"));
    command.arg("--db").arg(db).env_remove("HOOKSTATE_SESSION").env_remove("HOOKSTATE_SCOPE");
    command
}

/// Every entry below a directory with its mode and bytes (or link target).
pub(crate) type Tree = BTreeMap<PathBuf, (u32, Vec<u8>)>;

/// Snapshots every entry below `root`: two equal snapshots mean nothing changed.
pub(crate) fn tree(root: &Path) -> Tree {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.file_type().is_symlink() {
                std::fs::read_link(&path).unwrap().into_os_string().into_encoded_bytes()
            } else if meta.is_dir() {
                stack.push(path.clone());
                Vec::new()
            } else {
                std::fs::read(&path).unwrap()
            };
            out.insert(path, (meta.mode(), content));
        }
    }
    out
}
