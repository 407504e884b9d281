//! Opening a directory by a path checked from the root: every component is opened relative to
//! the one before it, without following a symlink, so the directory used is the directory
//! checked (a component swapped after its check cannot redirect the walk).
//!
//! A symlink on the way is followed only when nobody else could have planted or changed it, as
//! `sudo` and OpenSSH judge a path: it is owned by root or by us, in a directory owned by root or
//! by us that neither its group nor others may write. Anything else (a link another user left in
//! `/tmp`, a link in a group-writable directory) is refused. The last component is followed the
//! same way only when the caller allows it ([`LastLink`]): a legacy root must not be a symlink at
//! all. Does not check the last directory's owner or mode; callers do.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::kernel::error::{Error, Result};
use crate::kernel::fsio::{io_err, DIR_MODE};

/// Symlinks one walk may follow: the kernel's own limit for one path lookup (`MAXSYMLINKS`).
const SYMLINKS_MAX: usize = 40;
/// Components one walk may visit, symlink targets included: bounds a walk over hostile links.
const COMPONENTS_MAX: usize = 4_096;
/// Group- or world-writable: someone else may rename or replace entries in the directory.
const SHARED_WRITE_BITS: u32 = 0o022;
const ROOT_UID: u32 = 0;

fn open_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// The components still to walk, and where the walk is.
struct Walk {
    pending: VecDeque<OsString>,
    dir: OwnedFd,
    at: PathBuf,
    links: usize,
    visited: usize,
}

/// Whether the last component may be a symlink (followed only when nobody else could have
/// planted it, as any other component).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastLink {
    /// Refused: the directory itself must not be a link (a legacy root).
    Refused,
    /// Followed when trusted (a store's directory, an anchor directory).
    Trusted,
}

/// Longest file name: `NAME_MAX` on Linux file systems.
pub(crate) const FILE_NAME_BYTES_MAX: usize = 255;

/// Checks a file or directory name used under a directory the caller names (an import's
/// source, an export's target, a mirror): non-empty, at most `FILE_NAME_BYTES_MAX` (255)
/// bytes, not `.` or `..`, no `/`, NUL or control character.
///
/// # Errors
/// [`Error::BadInput`] naming the rule the name breaks.
pub fn check_name(name: &str) -> Result<()> {
    // The planted bug checks no name at all, the CLI's early check included.
    #[cfg(feature = "bugdrill")]
    if crate::kernel::drill::is(crate::kernel::drill::Drill::NaivePathJoin) {
        return Ok(());
    }
    let bad = |why: &str| Error::bad(format!("file name {name:?}"), why);
    if name.is_empty() || name == "." || name == ".." {
        return Err(bad("is empty, '.' or '..'"));
    }
    if name.len() > FILE_NAME_BYTES_MAX {
        return Err(bad("is too long"));
    }
    if name.chars().any(|c| c == '/' || c == '\\' || c.is_control()) {
        return Err(bad("holds a separator or a control character"));
    }
    Ok(())
}

/// Checks that the directory `path` exists and is reached safely (every component checked from
/// the root, as every store and legacy directory is opened), creating and writing nothing: so
/// that a call can refuse a missing or unsafe import source before it opens, or creates, the
/// store.
///
/// # Errors
/// [`Error::NoDirectory`] when it does not exist; [`Error::UnsafePath`]; [`Error::Io`].
pub fn check_source_dir(path: &Path) -> Result<()> {
    open_dir(path, false, LastLink::Refused).map(drop)
}

/// What the walk needs to know of the directory it is in and the entry it looks at.
struct Entry {
    kind: FileType,
    uid: u32,
}

/// Opens the directory `path`, checking every component from the root (see the module
/// documentation); a relative path starts at the current directory. With `create`, missing
/// directories are created (mode 0700) and each made durable by an fsync of its parent.
///
/// # Errors
/// [`Error::NoDirectory`] when a component is absent (and not created); [`Error::UnsafePath`]
/// for a symlink that is not followed, or a last component that is a symlink; [`Error::Io`].
pub(crate) fn open_dir(path: &Path, create: bool, last_link: LastLink) -> Result<OwnedFd> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io("read the current directory", path, e))?
            .join(path)
    };
    let root = rustix::fs::open("/", open_flags(), Mode::empty())
        .map_err(|e| io_err("open directory", Path::new("/"), e))?;
    let mut walk = Walk {
        pending: components(&absolute),
        dir: root,
        at: PathBuf::from("/"),
        links: 0,
        visited: 0,
    };
    while let Some(name) = walk.pending.pop_front() {
        walk.visited += 1;
        if walk.visited > COMPONENTS_MAX {
            return Err(unsafe_path(&walk.at, "has too many components or symlinks"));
        }
        let last = walk.pending.is_empty() && last_link == LastLink::Refused;
        walk.step(&name, last, create, path)?;
    }
    Ok(walk.dir)
}

/// The normal components of an absolute path (`..` kept, `.` and the root dropped).
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

fn unsafe_path(path: &Path, why: &str) -> Error {
    Error::UnsafePath { path: path.to_path_buf(), why: why.into() }
}

impl Walk {
    fn step(&mut self, name: &OsStr, last: bool, create: bool, asked: &Path) -> Result<()> {
        let next = self.at.join(name);
        if name == ".." {
            return self.enter(name, next);
        }
        let entry = match self.lookup(name, &next)? {
            Some(entry) => entry,
            None if create => {
                self.make(name, &next)?;
                return self.enter(name, next);
            }
            None => return Err(Error::NoDirectory { path: asked.to_path_buf() }),
        };
        match entry.kind {
            FileType::Directory => self.enter(name, next),
            FileType::Symlink if last => Err(unsafe_path(&next, "is a symlink")),
            FileType::Symlink => self.follow(name, &next, entry.uid),
            _ => Err(io_err("open directory", &next, Errno::NOTDIR)),
        }
    }

    fn lookup(&self, name: &OsStr, next: &Path) -> Result<Option<Entry>> {
        match rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => {
                Ok(Some(Entry { kind: FileType::from_raw_mode(stat.st_mode), uid: stat.st_uid }))
            }
            Err(Errno::NOENT) => Ok(None),
            Err(other) => Err(io_err("stat", next, other)),
        }
    }

    fn make(&self, name: &OsStr, next: &Path) -> Result<()> {
        match rustix::fs::mkdirat(&self.dir, name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) => {
                rustix::fs::fsync(&self.dir).map_err(|e| io_err("fsync directory", &self.at, e))
            }
            Err(Errno::EXIST) => Ok(()),
            Err(other) => Err(io_err("create directory", next, other)),
        }
    }

    fn enter(&mut self, name: &OsStr, next: PathBuf) -> Result<()> {
        let dir = rustix::fs::openat(&self.dir, name, open_flags(), Mode::empty()).map_err(
            |e| match e {
                Errno::LOOP => unsafe_path(&next, "is a symlink"),
                other => io_err("open directory", &next, other),
            },
        )?;
        self.dir = dir;
        self.at = next;
        Ok(())
    }

    /// Follows a symlink that nobody else could have planted, or refuses it.
    fn follow(&mut self, name: &OsStr, next: &Path, link_uid: u32) -> Result<()> {
        let me = rustix::process::geteuid().as_raw();
        let trusted = |uid: u32| uid == ROOT_UID || uid == me;
        let parent = rustix::fs::fstat(&self.dir).map_err(|e| io_err("stat", &self.at, e))?;
        if !trusted(link_uid) {
            return Err(unsafe_path(next, &format!("is a symlink owned by uid {link_uid}")));
        }
        if !trusted(parent.st_uid) || parent.st_mode & SHARED_WRITE_BITS != 0 {
            return Err(unsafe_path(
                next,
                "is a symlink in a directory that another user may write",
            ));
        }
        self.links += 1;
        if self.links > SYMLINKS_MAX {
            return Err(unsafe_path(next, "passes through too many symlinks"));
        }
        let target = rustix::fs::readlinkat(&self.dir, name, Vec::new())
            .map_err(|e| io_err("read symlink", next, e))?;
        let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
        let mut rest = components(&target);
        rest.extend(self.pending.drain(..));
        self.pending = rest;
        if target.is_absolute() {
            self.dir = rustix::fs::open("/", open_flags(), Mode::empty())
                .map_err(|e| io_err("open directory", Path::new("/"), e))?;
            self.at = PathBuf::from("/");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_plain_path_opens_and_a_missing_one_is_created_or_named() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        assert!(matches!(
            open_dir(&deep, false, LastLink::Refused),
            Err(Error::NoDirectory { .. })
        ));
        open_dir(&deep, true, LastLink::Refused).unwrap();
        assert!(deep.is_dir());
        open_dir(&deep.join("../c/."), false, LastLink::Refused).unwrap();
    }

    #[test]
    fn a_symlink_as_the_last_component_is_refused_and_our_own_on_the_way_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::create_dir(dir.path().join("real/inner")).unwrap();
        symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        let link = dir.path().join("link");
        assert!(matches!(open_dir(&link, false, LastLink::Refused), Err(Error::UnsafePath { .. })));
        // Our own link in our own private directory: nobody else could have planted it.
        open_dir(&link, false, LastLink::Trusted).unwrap();
        open_dir(&dir.path().join("link/inner"), false, LastLink::Refused).unwrap();
        // A link loop ends at the bound.
        symlink("loop", dir.path().join("loop")).unwrap();
        let looped = open_dir(&dir.path().join("loop/x"), false, LastLink::Refused);
        assert!(matches!(looped, Err(Error::UnsafePath { .. })));
    }

    #[test]
    fn a_symlink_in_a_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
        symlink(dir.path().join("elsewhere"), shared.join("p")).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let err = open_dir(&shared.join("p/t"), true, LastLink::Refused).unwrap_err();
        let last = open_dir(&shared.join("p"), false, LastLink::Trusted).unwrap_err();
        assert!(matches!(last, Error::UnsafePath { .. }), "{last}");
        assert!(matches!(err, Error::UnsafePath { .. }), "{err}");
        assert!(!dir.path().join("elsewhere/t").exists(), "nothing made through the link");
    }
}
