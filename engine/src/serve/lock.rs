//! One server per store: an advisory lock on `<db>.serve` beside the store, holding the pid of
//! the server that took it.
//!
//! The kernel releases the lock when the process ends, killed or not, so a crashed server never
//! blocks the next one. Does not touch the store or the socket.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation};

use crate::Error;

/// Suffix of the lock file beside the store.
pub(crate) const LOCK_SUFFIX: &str = ".serve";
/// The lock file holds one pid: a few bytes; more is not ours.
const LOCK_BYTES_MAX: u64 = 32;

/// The held lock; dropping it releases it.
pub(crate) struct ServeLock {
    _file: File,
}

/// The lock file of the store at `db`.
pub(crate) fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(LOCK_SUFFIX);
    PathBuf::from(name)
}

/// Takes the server lock of the store at `db` without waiting and writes our pid into it.
///
/// # Errors
/// [`Error::ServerRunning`] naming the holder's pid when another server holds it; IO errors.
pub(crate) fn take(db: &Path) -> Result<ServeLock, Error> {
    let path = lock_path(db);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(|e| Error::io("open the server lock", &path, e))?;
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        let mut text = String::new();
        let _ = (&file).take(LOCK_BYTES_MAX).read_to_string(&mut text);
        return Err(Error::ServerRunning { db: db.to_path_buf(), pid: text.trim().parse().ok() });
    }
    let pid = std::process::id().to_string();
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(pid.as_bytes()))
        .map_err(|e| Error::io("write the server lock", &path, e))?;
    Ok(ServeLock { _file: file })
}
