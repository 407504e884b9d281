//! Safe file-system helpers every part shares: the modes hookstate creates files and
//! directories with, durable directory creation, the private-directory check and random bytes.
//!
//! Does not know the store's files or the legacy layouts; `store::dir` and `legacy::root` build
//! on these.

use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
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

/// Creates `path` and its missing ancestors (mode 0700), then makes each new directory's entry
/// durable by an fsync of its parent, so that files synced inside it later cannot vanish with
/// it in a power cut.
pub(crate) fn create_dirs_durably(path: &Path) -> Result<()> {
    // The directories about to be created, deepest first.
    let missing: Vec<&Path> = path
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err())
        .collect();
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
        .map_err(|e| Error::io("create directory", path, e))?;
    for created in missing.iter().rev() {
        let parent = match created.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = rustix::fs::open(parent, flags, Mode::empty())
            .map_err(|e| io_err("open directory", parent, e))?;
        rustix::fs::fsync(&dir).map_err(|e| io_err("fsync directory", parent, e))?;
    }
    Ok(())
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
