//! Safe file-system helpers every part shares: the modes hookstate creates files and
//! directories with, the private-directory check and random bytes (`walk` opens paths).
//!
//! Does not know the store's files or the legacy layouts; `store::dir` and `legacy::root` build
//! on these.

use std::path::Path;

use rustix::io::Errno;

use crate::kernel::error::{Error, Result};

/// Mode of every file hookstate creates.
pub(crate) const FILE_MODE: u32 = 0o600;
/// Mode of every directory hookstate creates.
pub(crate) const DIR_MODE: u32 = 0o700;
/// Group- or world-writable directories let another user swap our files.
const UNSAFE_DIR_BITS: u32 = 0o022;

/// An IO error from a raw errno.
pub(crate) fn io_err(op: &'static str, path: &Path, errno: Errno) -> Error {
    Error::io(op, path, std::io::Error::from(errno))
}

/// Refuses a directory that is not owned by the effective user or is writable by others.
pub(crate) fn check_private_dir(path: &Path, uid: u32, mode: u32) -> Result<()> {
    let me = rustix::process::geteuid().as_raw();
    if uid != me {
        return Err(Error::UnsafePath {
            path: path.to_path_buf(),
            why: format!("directory is owned by uid {uid}, not {me}"),
        });
    }
    if mode & UNSAFE_DIR_BITS != 0 {
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "its group and by others",
            (true, false) => "its group",
            _ => "others",
        };
        return Err(Error::UnsafePath {
            path: path.to_path_buf(),
            why: format!("directory mode {:o} is writable by {who}", mode & 0o7777),
        });
    }
    Ok(())
}

/// Draws random bytes from the operating system.
pub(crate) fn random_bytes<const N: usize>() -> Result<[u8; N]> {
    let mut out = [0u8; N];
    getrandom::fill(&mut out)
        .map_err(|e| Error::io("draw random bytes", "", std::io::Error::other(e.to_string())))?;
    Ok(out)
}
