//! The directory of a redb store, opened once: the store file, its atomic creation, and the
//! head anchor beside it.
//!
//! Every file is reached relative to a held directory handle, opened with `O_NOFOLLOW`, created
//! with `O_EXCL` and mode 0600; replacements go temp file, fsync, rename, directory fsync; a new
//! store is built in a file with no name (`O_TMPFILE`) and linked at its name; the anchor moves
//! by one unsynced write into a slot of its file (`hookstate_schema::anchor_file`). Does not know
//! the store's format; callers hand bytes in and out.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use hookstate_schema::anchor_file::{self, Slotted, ANCHOR_FILE_BYTES};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::kernel::error::{Error, Result};
use crate::kernel::fsio::{
    check_private_dir, create_unnamed, io_err, link_unnamed, random_bytes, FILE_MODE,
};
use crate::kernel::limits::{ANCHOR_BYTES_MAX, STALE_TEMP_SCAN_MAX, STALE_TEMP_SECS};
use crate::kernel::walk;

/// A file's device and inode: which file a name led to when it was opened.
pub(crate) type FileId = (u64, u64);

/// How a store being built is reached until it is published ([`StoreDir::create_draft`]).
pub(crate) enum Draft {
    /// No name: published by linking its handle's `/proc/self/fd` entry.
    Unnamed,
    /// A temporary name beside the store.
    Named(OsString),
}

/// The anchor file is the store file's name with this suffix, beside it.
pub(crate) const ANCHOR_SUFFIX: &str = ".head";
const TEMP_NAME_RANDOM_BYTES: usize = 8;

const TEMP_PURPOSES: [&str; 3] = ["create", "head", "spill"];

/// The store file's name in `path`, refusing a path that names a directory: one that ends with a
/// separator, `.` or `..` (`Path::file_name` would silently drop a trailing `/`).
fn store_name(path: &Path) -> Result<OsString> {
    let bytes = path.as_os_str().as_bytes();
    let last = bytes.rsplit(|b| *b == b'/').next().unwrap_or_default();
    let bad = |why: &str| Error::bad(format!("store path {}", path.display()), why);
    if bytes.ends_with(b"/") {
        return Err(bad("ends with a slash: name the store file, not a directory"));
    }
    if last == b"." || last == b".." {
        return Err(bad("ends with '.' or '..': name the store file, not a directory"));
    }
    match path.file_name() {
        Some(name) if !name.is_empty() => Ok(name.to_os_string()),
        _ => Err(bad("has no file name")),
    }
}

/// Whether `name` is one of our temporary names: `<prefix>.<purpose>-<16 hex>`.
pub(crate) fn is_temp_name(name: &str, prefix: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')) else {
        return false;
    };
    TEMP_PURPOSES.iter().any(|purpose| {
        rest.strip_prefix(purpose).and_then(|r| r.strip_prefix('-')).is_some_and(|hex| {
            hex.len() == TEMP_NAME_RANDOM_BYTES * 2 && hex.bytes().all(|b| b.is_ascii_hexdigit())
        })
    })
}

/// The directory that holds a store file, opened once and used for every path below it.
pub(crate) struct StoreDir {
    dir: OwnedFd,
    dir_path: PathBuf,
    name: OsString,
}

impl StoreDir {
    /// Opens the directory of `path`, creating it (mode 0700) when `create` is set, with every
    /// component checked from the root (`kernel::walk`), and checks that it is owned by us and
    /// not writable by others.
    pub(crate) fn open(path: &Path, create: bool) -> Result<Self> {
        let name = store_name(path)?;
        let dir_path = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let dir =
            walk::open_dir(&dir_path, create, walk::LastLink::Trusted).map_err(|e| match e {
                Error::NoDirectory { .. } => Error::NoStore { path: path.to_path_buf() },
                other => other,
            })?;
        let stat = rustix::fs::fstat(&dir).map_err(|e| io_err("stat", &dir_path, e))?;
        check_private_dir(&dir_path, stat.st_uid, stat.st_mode)?;
        Ok(StoreDir { dir, dir_path, name })
    }

    /// The identity of the file at the store's name now (`None` when the name holds nothing),
    /// to tell a store moved over or removed while a handle holds the old file open.
    ///
    /// # Errors
    /// A `stat` that fails otherwise.
    pub(crate) fn store_id_now(&self) -> Result<Option<FileId>> {
        match rustix::fs::statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some((stat.st_dev, stat.st_ino))),
            Err(Errno::NOENT) => Ok(None),
            Err(other) => Err(io_err("stat", &self.path(), other)),
        }
    }

    /// The store file's full path, for messages.
    pub(crate) fn path(&self) -> PathBuf {
        self.dir_path.join(&self.name)
    }

    /// Opens the store file (read-write, or read-only for readers) without following a symlink.
    /// `None` when it is absent.
    pub(crate) fn open_store(&self, read_only: bool) -> Result<Option<File>> {
        Ok(self.open_store_with_id(read_only)?.map(|(file, _)| file))
    }

    /// [`StoreDir::open_store`], with the file's identity, from the `fstat` its checks make.
    pub(crate) fn open_store_with_id(&self, read_only: bool) -> Result<Option<(File, FileId)>> {
        let access = if read_only { OFlags::RDONLY } else { OFlags::RDWR };
        let flags = access | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(&self.dir, &self.name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => return Err(self.unsafe_path("is a symlink")),
            Err(Errno::ISDIR) => return Err(self.not_a_store("it is a directory")),
            Err(Errno::NXIO) => return Err(self.not_a_store("it is a special file")),
            Err(other) => return Err(io_err("open", &self.path(), other)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", &self.path(), e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(self.not_a_store("it is not a regular file"));
        }
        if stat.st_size == 0 {
            return Err(self.not_a_store("the file is empty"));
        }
        // O_NONBLOCK (set only so that the open could not block on a FIFO) cleared; O_NOATIME
        // set where the kernel allows it (the file is ours): a read never dirties the inode,
        // which the next `fdatasync` on ext4 without a journal would write as one more
        // synchronous IO (docs/decisions.md, "The store's length without statx").
        let quiet = rustix::fs::fcntl_setfl(&fd, OFlags::NOATIME);
        if quiet.is_err() {
            rustix::fs::fcntl_setfl(&fd, OFlags::empty())
                .map_err(|e| io_err("clear O_NONBLOCK on", &self.path(), e))?;
        }
        Ok(Some((File::from(fd), (stat.st_dev, stat.st_ino))))
    }

    /// Creates a fresh temporary file (O_EXCL, 0600) beside the store and returns it and its name.
    pub(crate) fn create_temp(&self, purpose: &str) -> Result<(File, OsString)> {
        let mut name = OsString::from(".");
        name.push(&self.name);
        name.push(format!(".{purpose}-{}", random_hex()?));
        let flags =
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, &name, flags, Mode::from_raw_mode(FILE_MODE))
            .map_err(|e| io_err("create", &self.dir_path.join(&name), e))?;
        Ok((File::from(fd), name))
    }

    /// A new file with no name in the store's directory (`O_TMPFILE`; where the filesystem has
    /// none, a temporary name unlinked at once, which a kill between the two leaves for
    /// [`StoreDir::remove_stale_temps`]): its blocks are freed when the last handle closes.
    pub(crate) fn unnamed_file(&self) -> Result<File> {
        let flags = OFlags::RDWR | OFlags::TMPFILE | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.dir, ".", flags, Mode::from_raw_mode(FILE_MODE)) {
            Ok(fd) => return Ok(File::from(fd)),
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {}
            Err(other) => return Err(io_err("create an unnamed file in", &self.dir_path, other)),
        }
        let (file, name) = self.create_temp("spill")?;
        self.remove(&name)?;
        Ok(file)
    }

    /// The `non-atomic-create` drill: opens (creating, 0600) the store file itself, the way
    /// redb's `Database::create` does.
    #[cfg(feature = "bugdrill")]
    pub(crate) fn create_in_place(&self) -> Result<File> {
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, &self.name, flags, Mode::from_raw_mode(FILE_MODE))
            .map_err(|e| io_err("create", &self.path(), e))?;
        Ok(File::from(fd))
    }

    /// A new file in which a store is built before it is published at the store's name: with
    /// no name at all (`O_TMPFILE`), so that a process killed while building leaves nothing in
    /// the directory; where the filesystem has no unnamed files, or `/proc` cannot name one for
    /// the link that publishes it, a temporary name (`.<name>.<purpose>-<hex>`) that a kill
    /// leaves for [`StoreDir::remove_stale_temps`].
    pub(crate) fn create_draft(&self, purpose: &str) -> Result<(File, Draft)> {
        if let Some(fd) = create_unnamed(&self.dir, OFlags::RDWR, FILE_MODE) {
            return Ok((File::from(fd), Draft::Unnamed));
        }
        let (file, name) = self.create_temp(purpose)?;
        Ok((file, Draft::Named(name)))
    }

    /// Publishes a finished draft (`file`, made by [`StoreDir::create_draft`]) as the store: links
    /// it at the store name (which fails if another process published first), removes its
    /// temporary name if it has one and fsyncs the directory. Returns whether this call
    /// published.
    pub(crate) fn publish_store(&self, draft: &Draft, file: &File) -> Result<bool> {
        let linked = match draft {
            Draft::Unnamed => link_unnamed(file, &self.dir, self.name.as_os_str()),
            Draft::Named(temp) => {
                rustix::fs::linkat(&self.dir, temp, &self.dir, &self.name, AtFlags::empty())
            }
        };
        let published = match linked {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(other) => return Err(io_err("link", &self.path(), other)),
        };
        self.discard(draft)?;
        self.sync_dir()?;
        Ok(published)
    }

    /// Removes a draft's temporary name, if it has one (an unnamed draft goes with its handles).
    pub(crate) fn discard(&self, draft: &Draft) -> Result<()> {
        match draft {
            Draft::Unnamed => Ok(()),
            Draft::Named(temp) => self.remove(temp),
        }
    }

    /// Removes a name in the directory.
    pub(crate) fn remove(&self, name: &OsStr) -> Result<()> {
        rustix::fs::unlinkat(&self.dir, name, AtFlags::empty())
            .map_err(|e| io_err("remove", &self.dir_path.join(name), e))
    }

    /// Makes the directory's entries durable.
    pub(crate) fn sync_dir(&self) -> Result<()> {
        rustix::fs::fsync(&self.dir).map_err(|e| io_err("fsync directory", &self.dir_path, e))
    }

    fn anchor_name(&self) -> OsString {
        let mut name = self.name.clone();
        name.push(ANCHOR_SUFFIX);
        name
    }

    /// The anchor file's path, for messages.
    pub(crate) fn anchor_path(&self) -> PathBuf {
        self.dir_path.join(self.anchor_name())
    }

    /// Reads the anchor file: the line of its newest intact slot, or the whole text of a file of
    /// another shape (the single line earlier releases wrote, or whatever an edit left, which the
    /// caller's parse judges); `None` when it is absent.
    pub(crate) fn read_anchor(&self) -> Result<Option<String>> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(&self.dir, self.anchor_name(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(other) => return Err(io_err("open", &self.anchor_path(), other)),
        };
        let mut bytes = Vec::with_capacity(ANCHOR_FILE_BYTES + 1);
        File::from(fd)
            .take(ANCHOR_FILE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("read", self.anchor_path(), e))?;
        if bytes.len() == ANCHOR_FILE_BYTES {
            return match anchor_file::read_slots(&bytes) {
                Slotted::Newest { line, .. } => Ok(Some(line)),
                Slotted::Unusable(why) => {
                    Err(Error::AnchorMismatch { why: format!("anchor file: {why}") })
                }
            };
        }
        if bytes.len() > ANCHOR_BYTES_MAX {
            return Err(Error::AnchorMismatch { why: "anchor file is oversized".into() });
        }
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| Error::AnchorMismatch { why: "anchor file is not UTF-8".into() })
    }

    /// Takes the anchor lock (an advisory lock on the directory) without waiting: `None` when
    /// another writer holds it. Every anchor move reads, compares and writes under it, so two
    /// writers finishing at once never move an anchor backwards. Released when dropped.
    pub(crate) fn lock_anchors(&self) -> Result<Option<AnchorLock<'_>>> {
        match rustix::fs::flock(&self.dir, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(AnchorLock { dir: self })),
            Err(Errno::WOULDBLOCK | Errno::INTR) => Ok(None),
            Err(other) => Err(io_err("lock", &self.dir_path, other)),
        }
    }

    /// Moves the anchor file to what `next` makes of the line it holds now (`None` when absent),
    /// unless `next` says `None`. A slotted file (`schema::anchor_file`) that is a regular file
    /// with one link is read and written through one handle: the write goes, in place, into the
    /// slot that does not hold the newest anchor, with no sync: a cut that loses or tears it
    /// leaves the slot before, an anchor that lags, which is allowed. Any other file (absent, the
    /// single line of an earlier release, hard-linked elsewhere) is read as
    /// [`StoreDir::read_anchor`] reads it and replaced whole: temp file, write, fsync, rename, so
    /// a cut never leaves an empty anchor beside a store that moved on. The directory is not
    /// fsynced: a lost rename leaves an older anchor too. The caller holds the anchor lock.
    ///
    /// # Errors
    /// As [`StoreDir::read_anchor`] for the current anchor; IO errors of the write.
    pub(crate) fn update_anchor(
        &self,
        next: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> Result<()> {
        if let Some((file, bytes)) = self.open_slotted()? {
            let line = match anchor_file::read_slots(&bytes) {
                Slotted::Newest { line, .. } => line,
                Slotted::Unusable(why) => {
                    return Err(Error::AnchorMismatch { why: format!("anchor file: {why}") })
                }
            };
            let Some(text) = next(Some(&line)) else {
                return Ok(());
            };
            return self.write_slotted(&file, &bytes, &text);
        }
        let current = self.read_anchor()?;
        next(current.as_deref()).map_or(Ok(()), |text| self.replace_anchor(&text))
    }

    /// Moves the anchor file to `line`, whatever it holds now: in place into a slot of a slotted
    /// file whose newest slot is intact, otherwise replaced whole ([`StoreDir::update_anchor`]).
    pub(crate) fn write_anchor(&self, line: &str) -> Result<()> {
        match self.open_slotted()? {
            Some((file, bytes)) => self.write_slotted(&file, &bytes, line),
            None => self.replace_anchor(line),
        }
    }

    /// Moves the slotted anchor `file`, which holds `bytes`, to `line`: into the slot that does not
    /// hold the newest anchor, or the file replaced whole when no slot is intact or the line does
    /// not fit one.
    fn write_slotted(&self, file: &File, bytes: &[u8], line: &str) -> Result<()> {
        match anchor_file::next_write(bytes, line) {
            Some((offset, slot)) => file
                .write_all_at(&slot, offset as u64)
                .map_err(|e| Error::io("write", self.anchor_path(), e)),
            None => self.replace_anchor(line),
        }
    }

    /// Replaces the anchor file whole with a slotted file holding `line`: temp file, write, fsync,
    /// rename.
    fn replace_anchor(&self, line: &str) -> Result<()> {
        let bytes = anchor_file::encode_file(line).ok_or_else(|| Error::AnchorMismatch {
            why: "the anchor line is longer than a slot".into(),
        })?;
        let (mut file, temp) = self.create_temp("head")?;
        let written = file
            .write_all(&bytes)
            .and_then(|()| file.sync_data())
            .map_err(|e| Error::io("write", self.dir_path.join(&temp), e));
        let renamed = written.and_then(|()| {
            rustix::fs::renameat(&self.dir, &temp, &self.dir, self.anchor_name())
                .map_err(|e| io_err("rename", &self.anchor_path(), e))
        });
        if renamed.is_err() {
            let _ = self.remove(&temp);
        }
        renamed
    }

    /// The anchor file opened for writing, and its bytes, when it is a slotted file this store
    /// alone names (a regular file, one link, a slotted file's length); `None` otherwise.
    fn open_slotted(&self) -> Result<Option<(File, Vec<u8>)>> {
        let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(&self.dir, self.anchor_name(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::LOOP | Errno::ISDIR | Errno::NXIO) => return Ok(None),
            Err(other) => return Err(io_err("open", &self.anchor_path(), other)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", &self.anchor_path(), e))?;
        let plain = FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
            && stat.st_nlink == 1
            && u64::try_from(stat.st_size).is_ok_and(|len| len == ANCHOR_FILE_BYTES as u64);
        if !plain {
            return Ok(None);
        }
        let file = File::from(fd);
        let mut bytes = vec![0; ANCHOR_FILE_BYTES];
        file.read_exact_at(&mut bytes, 0).map_err(|e| Error::io("read", self.anchor_path(), e))?;
        Ok(Some((file, bytes)))
    }

    /// Removes temporary files that killed writers left beside the store (`.<name>.create-<hex>`,
    /// `.<name>.head-<hex>`) once they are older than [`STALE_TEMP_SECS`]: no live writer keeps a
    /// temporary file that long. Returns how many were removed.
    pub(crate) fn remove_stale_temps(&self) -> Result<u32> {
        let listing = rustix::fs::openat(
            &self.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open directory", &self.dir_path, e))?;
        let entries =
            rustix::fs::Dir::read_from(&listing).map_err(|e| io_err("list", &self.dir_path, e))?;
        let mut prefix = OsString::from(".");
        prefix.push(&self.name);
        let prefix = prefix.to_string_lossy().into_owned();
        let now = std::time::SystemTime::now();
        let mut removed = 0;
        for entry in entries.take(STALE_TEMP_SCAN_MAX) {
            let entry = entry.map_err(|e| io_err("list", &self.dir_path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_temp_name(&name, &prefix) {
                continue;
            }
            let Ok(stat) = rustix::fs::statat(&self.dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            let modified = std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(u64::try_from(stat.st_mtime).unwrap_or(0));
            let stale =
                now.duration_since(modified).is_ok_and(|age| age.as_secs() > STALE_TEMP_SECS);
            if stale && rustix::fs::unlinkat(&self.dir, name.as_str(), AtFlags::empty()).is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }

    fn not_a_store(&self, why: &str) -> Error {
        Error::NotAStore { path: self.path(), why: why.into() }
    }

    fn unsafe_path(&self, why: &str) -> Error {
        Error::UnsafePath { path: self.path(), why: why.into() }
    }
}

/// The anchor lock of a store directory, held until dropped.
pub(crate) struct AnchorLock<'a> {
    dir: &'a StoreDir,
}

impl Drop for AnchorLock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(&self.dir.dir, rustix::fs::FlockOperation::Unlock);
    }
}

fn random_hex() -> Result<String> {
    Ok(hookstate_schema::format::to_hex(&random_bytes::<TEMP_NAME_RANDOM_BYTES>()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_file_opens_without_access_times_and_blocking_reads() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("s.redb");
        let created = StoreDir::open(&store, true).unwrap();
        std::fs::write(&store, b"not empty").unwrap();
        for read_only in [false, true] {
            let file = created.open_store(read_only).unwrap().unwrap();
            let flags = rustix::fs::fcntl_getfl(&file).unwrap();
            assert!(flags.contains(OFlags::NOATIME), "{flags:?}");
            assert!(!flags.contains(OFlags::NONBLOCK), "{flags:?}");
        }
    }

    /// What `update_anchor` shows its `next` for each shape of anchor file, and what it leaves:
    /// a slotted file is moved in place (same inode); any other is replaced whole; a file a
    /// second name also links is replaced without touching the other name.
    #[test]
    fn an_anchor_update_sees_the_current_line_and_keeps_its_file_where_it_can() {
        use std::os::unix::fs::MetadataExt;
        let line = |seq: u64| {
            let head = hookstate_schema::format::Head {
                seq,
                hash: *blake3::hash(&seq.to_be_bytes()).as_bytes(),
            };
            hookstate_schema::format::format_anchor(&[9; 16], &head)
        };
        let tmp = tempfile::tempdir().unwrap();
        let dir = StoreDir::open(&tmp.path().join("s.redb"), true).unwrap();
        let path = dir.anchor_path();
        let mut seen = Vec::new();
        let mut to = |seq: u64| {
            dir.update_anchor(&mut |current| {
                seen.push(current.map(str::to_owned));
                Some(line(seq))
            })
        };
        // Absent: `next` sees nothing; a slotted file is written.
        to(1).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), ANCHOR_FILE_BYTES as u64);
        let inode = std::fs::metadata(&path).unwrap().ino();
        // Slotted: `next` sees the newest line; the file is moved in place.
        to(2).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        assert_eq!(dir.read_anchor().unwrap(), Some(line(2)));
        // `next` says no: nothing changes.
        let before = std::fs::read(&path).unwrap();
        dir.update_anchor(&mut |current| {
            assert_eq!(current, Some(line(2).as_str()));
            None
        })
        .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before);
        // The single line of an earlier release: seen whole, replaced by a slotted file.
        std::fs::write(&path, line(3)).unwrap();
        to(4).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), ANCHOR_FILE_BYTES as u64);
        // Linked under a second name: replaced, the other name keeps its bytes.
        let other = tmp.path().join("elsewhere");
        std::fs::hard_link(&path, &other).unwrap();
        let linked = std::fs::read(&other).unwrap();
        to(5).unwrap();
        assert_eq!(std::fs::read(&other).unwrap(), linked);
        assert_eq!(dir.read_anchor().unwrap(), Some(line(5)));
        let expected = [None, Some(line(1)), Some(line(3)), Some(line(4))];
        assert_eq!(seen, expected);
        // No intact slot: the update refuses, as a read does; a plain write replaces the file.
        std::fs::remove_file(&other).unwrap();
        std::fs::write(&path, vec![0xee; ANCHOR_FILE_BYTES]).unwrap();
        assert!(dir.update_anchor(&mut |_| Some(line(6))).is_err());
        assert!(dir.read_anchor().is_err());
        dir.write_anchor(&line(6)).unwrap();
        assert_eq!(dir.read_anchor().unwrap(), Some(line(6)));
    }

    #[test]
    fn only_our_temporary_names_are_recognised() {
        let prefix = ".state.redb";
        assert!(is_temp_name(".state.redb.create-0123456789abcdef", prefix));
        assert!(is_temp_name(".state.redb.head-0123456789abcdef", prefix));
        for other in [
            "state.redb",
            "state.redb.head",
            ".state.redb.head-0123",
            ".state.redb.other-0123456789abcdef",
            ".other.redb.head-0123456789abcdef",
            ".state.redb.head-0123456789abcdeg",
        ] {
            assert!(!is_temp_name(other, prefix), "{other}");
        }
    }
}
