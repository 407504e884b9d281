//! Safe file-system helpers every part shares: the modes hookstate creates files and
//! directories with, the private-directory check, random bytes, and files made with no name and
//! named once complete (`walk` opens paths).
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

/// A file with no name in the directory `dir` (`O_TMPFILE`, opened with `access` and `mode`),
/// which [`link_unnamed`] can name: `None` where the filesystem has no such files, where `/proc`
/// cannot name one for that link, or on any other failure (the caller then makes a named file,
/// whose own error says what is wrong with the directory).
pub fn create_unnamed(
    dir: &impl std::os::fd::AsFd,
    access: rustix::fs::OFlags,
    mode: u32,
) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{AtFlags, Mode, OFlags, CWD};
    let flags = access | OFlags::TMPFILE | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, ".", flags, Mode::from_raw_mode(mode)).ok()?;
    let named = rustix::fs::statat(CWD, proc_path(&fd), AtFlags::empty()).ok()?;
    let held = rustix::fs::fstat(&fd).ok()?;
    ((named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)).then_some(fd)
}

/// Gives the unnamed file `fd` ([`create_unnamed`]) the name `name` in `dir`, through its
/// `/proc/self/fd` entry; fails (`EEXIST`) when the name is taken.
///
/// # Errors
/// The link's error (`EEXIST` for a taken name).
pub fn link_unnamed(
    fd: &impl std::os::fd::AsFd,
    dir: &impl std::os::fd::AsFd,
    name: impl rustix::path::Arg,
) -> std::result::Result<(), Errno> {
    let flags = rustix::fs::AtFlags::SYMLINK_FOLLOW;
    rustix::fs::linkat(rustix::fs::CWD, proc_path(fd), dir, name, flags)
}

/// The `/proc` name of an open file's handle.
fn proc_path(fd: &impl std::os::fd::AsFd) -> String {
    use std::os::fd::AsRawFd;
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}

/// A small regular file's bytes, at most `max`: opened without blocking (a FIFO named there
/// would hold the caller) and refused, saying why, when it is not a regular file or is larger
/// (`/dev/zero` would fill the memory).
pub(crate) fn read_small_file(path: &Path, max: u64) -> std::result::Result<Vec<u8>, String> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| e.to_string())?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("is larger than {max} bytes"));
    }
    Ok(bytes)
}
