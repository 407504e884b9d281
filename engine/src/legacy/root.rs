//! One safe seam for legacy files: a directory handle held open, every name checked, every
//! component opened without following symlinks, every write a fresh temp file (with the mode of
//! the file it replaces, or the one its upstream writer gives a new file; with no name until it
//! is complete, where the filesystem allows), fsync, rename over the target and a directory
//! fsync, every read bounded.
//!
//! Nothing is ever written outside the root: a name can never hold a separator, and
//! subdirectories are opened relative to held handles with `O_NOFOLLOW`. Does not know file
//! formats.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::kernel::error::{Error, Result};
use crate::kernel::fsio::{check_private_dir, create_unnamed, link_unnamed, DIR_MODE, FILE_MODE};
use crate::kernel::limits::{STALE_TEMP_SCAN_MAX, STALE_TEMP_SECS};
use crate::kernel::walk::{self, check_name};
use crate::legacy::durable::{self, DirOps};

/// Most entries one directory listing returns; a bigger legacy directory is refused.
pub(crate) const DIR_ENTRIES_MAX: usize = 100_000;
const TEMP_PREFIX: &str = ".hookstate-tmp-";
/// Random bytes in a temporary name (hex, after [`TEMP_PREFIX`]).
const TEMP_RANDOM_BYTES: usize = 8;

/// Whether `name` is one of our temporary names: [`TEMP_PREFIX`] and 16 hex digits.
fn is_temp_name(name: &str) -> bool {
    name.strip_prefix(TEMP_PREFIX).is_some_and(|hex| {
        hex.len() == TEMP_RANDOM_BYTES * 2 && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}
/// The mode a new legacy file is created with when its upstream writer leaves the mode to the
/// umask (Node's `writeFileSync`, Bun's writes, a shell `>` redirect): 0666 less the umask, 0644
/// under the usual 022, so a HUD or script running as another user reads it as before.
const UPSTREAM_FILE_MODE: u32 = 0o666;
/// The files whose upstream writer creates them that way: moonshine's `.feedback/` files (the
/// Stop hook's jq redirect, the web dev server), and hermit's queue, ledger, index, PROP files
/// and heartbeat files (`writeFileAtomic`, `heartbeat-monitor.sh`), and `state-summary.md`
/// (`generate-summary.ts`'s `writeFileSync`). Every other file gets
/// [`FILE_MODE`]: `alert-state.json` (upstream's `writeAlertState` chmods it to 0600), the loopd
/// and observer plugin-store files (written by Claude Code's plugin store, whose mode is not
/// documented), and hookstate's own sidecars, stamps and locks.
const UMASK_FILES: [&str; 16] = [
    "control.json",
    "address.json",
    "heartbeat.json",
    "adapter.json",
    "micro-proposals.json",
    "proposal-metrics.jsonl",
    "proposals-index.json",
    "budget-alerts.json",
    "telemetry-alert.json",
    "doctor-alerts.json",
    "heartbeat-monitor.runtime.json",
    "heartbeat-liveness.json",
    "injection-alert.json",
    "runtime.json",
    "NEXT-TASK.md",
    "state-summary.md",
];

/// The mode a new file `name` gets: what its upstream writer gives it (see [`UMASK_FILES`]).
fn new_file_mode(name: &str) -> u32 {
    let comment = name.starts_with("fb_") && name.ends_with(".json");
    let prop = name.starts_with("PROP-") && name.ends_with(".md");
    match comment || prop || UMASK_FILES.contains(&name) {
        true => UPSTREAM_FILE_MODE,
        false => FILE_MODE,
    }
}

/// The mode the temp file of a replace gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TempMode {
    /// Exactly this mode (set with `fchmod`, past the umask): the replaced file's own.
    Keep(u32),
    /// Created with this mode, which the umask narrows, as upstream's writer creates the file.
    New(u32),
}

/// An opened directory under which legacy files are read and written.
pub(crate) struct Root {
    dir: OwnedFd,
    path: PathBuf,
}

fn io_err(op: &'static str, path: &Path, errno: Errno) -> Error {
    Error::io(op, path, std::io::Error::from(errno))
}

impl Root {
    /// Opens `path` as a root, creating it (and its missing parents, mode 0700) when `create` is
    /// set and it is absent. Every component is checked from the root (`kernel::walk`: no
    /// symlink another user could have planted); refuses a symlink as the root itself, a
    /// non-directory, and a directory not owned by us or writable by others.
    pub(crate) fn open(path: &Path, create: bool) -> Result<Root> {
        let dir = walk::open_dir(path, create, walk::LastLink::Refused)?;
        let root = Root::checked(dir, path.to_path_buf())?;
        if create {
            root.remove_stale_temps();
        }
        Ok(root)
    }

    /// Removes the temporary files killed writers left in this directory
    /// (`.hookstate-tmp-<16 hex>` older than [`STALE_TEMP_SECS`]; at most
    /// [`STALE_TEMP_SCAN_MAX`] entries looked at). Best effort: a call that owns the directory
    /// (an export, a mirrored call) runs it when it opens the directory for writing.
    pub(crate) fn remove_stale_temps(&self) -> u32 {
        let Ok(listing) = rustix::fs::openat(
            &self.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return 0;
        };
        let Ok(entries) = rustix::fs::Dir::read_from(&listing) else {
            return 0;
        };
        let now = std::time::SystemTime::now();
        let mut removed = 0;
        for entry in entries.take(STALE_TEMP_SCAN_MAX).flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !is_temp_name(&name) {
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
            let file = FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile;
            if stale
                && file
                && rustix::fs::unlinkat(&self.dir, name.as_str(), AtFlags::empty()).is_ok()
            {
                removed += 1;
            }
        }
        removed
    }

    fn checked(dir: OwnedFd, path: PathBuf) -> Result<Root> {
        let stat = rustix::fs::fstat(&dir).map_err(|e| io_err("stat", &path, e))?;
        check_private_dir(&path, stat.st_uid, stat.st_mode)?;
        Ok(Root { dir, path })
    }

    /// The root's path, for messages.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the subdirectory `name`, creating it (0700) when `create` is set. `None` when it is
    /// absent and not created.
    pub(crate) fn subdir(&self, name: &str, create: bool) -> Result<Option<Root>> {
        check_name(name)?;
        let path = self.path.join(name);
        if create {
            durable::make_subdir(&mut RootOps::new(self, TempMode::New(FILE_MODE)), name)?;
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.dir, name, flags, Mode::empty()) {
            Ok(dir) => {
                let root = Root::checked(dir, path)?;
                if create {
                    root.remove_stale_temps();
                }
                Ok(Some(root))
            }
            Err(Errno::NOENT) => Ok(None),
            Err(other) => Err(refusal(&path, other)),
        }
    }

    /// Reads the file `name`, at most `max_bytes`. `None` when absent. Refuses a symlink, a
    /// non-regular file (a FIFO never blocks the read), a file with other hard links, and a file
    /// over the cap.
    pub(crate) fn read(&self, name: &str, max_bytes: usize) -> Result<Option<Vec<u8>>> {
        #[cfg(feature = "bugdrill")]
        if crate::kernel::drill::is(crate::kernel::drill::Drill::NaivePathJoin) {
            return drill::naive_read(&self.path.join(name));
        }
        Ok(self.read_stamped(name, max_bytes)?.map(|(bytes, _)| bytes))
    }

    /// [`Root::read`], with the [`Stamp`] of the file read (taken from the open file, so it is
    /// the stamp of those bytes).
    pub(crate) fn read_stamped(
        &self,
        name: &str,
        max_bytes: usize,
    ) -> Result<Option<(Vec<u8>, Stamp)>> {
        check_name(name)?;
        let path = self.path.join(name);
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(other) => return Err(refusal(&path, other)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", &path, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(Error::legacy(path.display().to_string(), "is not a regular file"));
        }
        if stat.st_nlink > 1 {
            let why = "the file has other hard links".to_owned();
            return Err(Error::UnsafePath { path, why });
        }
        let mut bytes = Vec::new();
        File::from(fd)
            .take(max_bytes as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("read", &path, e))?;
        if bytes.len() > max_bytes {
            let what = path.display().to_string();
            return Err(Error::TooLarge { what, len: bytes.len(), max: max_bytes });
        }
        Ok(Some((bytes, Stamp::of(&stat))))
    }

    /// Replaces (or creates) the file `name` with `bytes`: a fresh temp file (O_EXCL, random
    /// name) in the same directory, fsync, rename over the target, directory fsync. The target's
    /// old inode is never written, so a hard link to it cannot be used to write a victim file.
    /// The temp file gets the mode of the regular file it replaces (read with `fstatat` on the
    /// held directory), so a file another user's reader could read stays readable; a new file
    /// gets the mode its upstream writer gives it ([`new_file_mode`]), else 0600. The steps are
    /// [`durable::replace_file`]'s, which the export crash simulator replays on a model file
    /// system.
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> Result<()> {
        #[cfg(feature = "bugdrill")]
        if crate::kernel::drill::is(crate::kernel::drill::Drill::NaivePathJoin) {
            let path = self.path.join(name);
            return std::fs::write(&path, bytes).map_err(|e| Error::io("write", path, e));
        }
        self.write_if(name, bytes, |_| Ok(true)).map(|_| ())
    }

    /// [`Root::write`], replacing `name` only if `still` (asked once the new bytes are durable
    /// in the temp file, right before the rename) says it holds what the caller last read;
    /// `false` when it did not, and the file is left as it is.
    pub(crate) fn write_if(
        &self,
        name: &str,
        bytes: &[u8],
        still: impl FnOnce(&Root) -> Result<bool>,
    ) -> Result<bool> {
        Ok(self.write_if_stamped(name, bytes, still)?.is_some())
    }

    /// [`Root::write_if`], with the [`Stamp`] of the file written when it replaced `name`.
    pub(crate) fn write_if_stamped(
        &self,
        name: &str,
        bytes: &[u8],
        still: impl FnOnce(&Root) -> Result<bool>,
    ) -> Result<Option<Stamp>> {
        check_name(name)?;
        let suffix = hookstate_schema::format::to_hex(&crate::kernel::fsio::random_bytes::<
            TEMP_RANDOM_BYTES,
        >()?);
        let temp = format!("{TEMP_PREFIX}{suffix}");
        let mode = match rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile => {
                TempMode::Keep(stat.st_mode & 0o777)
            }
            _ => TempMode::New(new_file_mode(name)),
        };
        let mut ops = RootOps::new(self, mode);
        let replaced = durable::replace_file_if(&mut ops, &temp, name, bytes, || still(self))?;
        Ok(replaced.then_some(ops.stamp).flatten())
    }

    /// Replaces (or creates) the file `name` with `bytes` through a fresh temp file and a
    /// rename, without any fsync: for files whose loss in a power cut is harmless (the mirror's
    /// baselines). Never writes the target's old inode.
    pub(crate) fn write_unsynced(&self, name: &str, bytes: &[u8]) -> Result<()> {
        check_name(name)?;
        let suffix = hookstate_schema::format::to_hex(&crate::kernel::fsio::random_bytes::<
            TEMP_RANDOM_BYTES,
        >()?);
        let temp = format!("{TEMP_PREFIX}{suffix}");
        let mut ops = RootOps::new(self, TempMode::New(FILE_MODE));
        let mut file = ops.create_new(&temp)?;
        let written = ops.write_all(&mut file, bytes).and_then(|()| ops.rename(&temp, name));
        if written.is_err() {
            let _ = ops.remove(&temp);
        }
        written
    }

    /// Renames the file `name` to `to` inside this directory, replacing `to`, without syncing;
    /// an absent `name` is fine (nothing to move).
    pub(crate) fn rename_unsynced(&self, name: &str, to: &str) -> Result<()> {
        check_name(name)?;
        check_name(to)?;
        match rustix::fs::renameat(&self.dir, name, &self.dir, to) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(other) => Err(io_err("rename", &self.path.join(to), other)),
        }
    }

    /// Renames the file `name` to `to` inside this directory, never replacing an existing `to`
    /// (a quarantine keeps every corrupt copy), then makes the rename durable.
    pub(crate) fn rename_new(&self, name: &str, to: &str) -> Result<()> {
        check_name(name)?;
        check_name(to)?;
        rustix::fs::renameat_with(
            &self.dir,
            name,
            &self.dir,
            to,
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|e| io_err("rename", &self.path.join(to), e))?;
        self.sync()
    }

    /// Removes the file `name`; absent is fine.
    pub(crate) fn remove(&self, name: &str) -> Result<()> {
        check_name(name)?;
        match rustix::fs::unlinkat(&self.dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(other) => Err(io_err("remove", &self.path.join(name), other)),
        }
    }

    /// Takes an exclusive advisory lock on the file `name` (created 0600 when absent), trying
    /// without blocking until `wait` runs out ([`Error::Busy`]). Dropping the handle releases it.
    pub(crate) fn lock_file(&self, name: &str, wait: std::time::Duration) -> Result<OwnedFd> {
        check_name(name)?;
        let path = self.path.join(name);
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.dir, name, flags, Mode::from_raw_mode(FILE_MODE))
            .map_err(|e| refusal(&path, e))?;
        let start = std::time::Instant::now();
        let pause = std::time::Duration::from_micros(crate::kernel::limits::LOCK_BACKOFF_US_MAX);
        loop {
            match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(fd),
                Err(Errno::WOULDBLOCK | Errno::INTR) if start.elapsed() < wait => {
                    std::thread::sleep(pause);
                }
                Err(Errno::WOULDBLOCK) => {
                    let waited_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                    return Err(Error::Busy { waited_ms });
                }
                Err(other) => return Err(io_err("lock", &path, other)),
            }
        }
    }

    /// Makes the directory's entries durable.
    pub(crate) fn sync(&self) -> Result<()> {
        rustix::fs::fsync(&self.dir).map_err(|e| io_err("fsync directory", &self.path, e))
    }

    /// The names in the directory (not `.` or `..`), sorted, at most [`DIR_ENTRIES_MAX`].
    pub(crate) fn list(&self) -> Result<Vec<String>> {
        let fd = rustix::fs::openat(
            &self.dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_err("open directory", &self.path, e))?;
        let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| io_err("list", &self.path, e))?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| io_err("list", &self.path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == "." || name == ".." {
                continue;
            }
            if names.len() >= DIR_ENTRIES_MAX {
                let what = "directory entries";
                return Err(Error::TooMany { what, count: names.len() + 1, max: DIR_ENTRIES_MAX });
            }
            names.push(name);
        }
        names.sort();
        Ok(names)
    }
}

/// Which file a name held when it was read or written: its inode and modification time. Equal
/// bytes under another stamp were written again since: a writer's rename brings a new inode, an
/// in-place write a new modification time (at the file system's timestamp granularity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    ino: u64,
    mtime_ns: i128,
}

impl Stamp {
    fn of(stat: &rustix::fs::Stat) -> Stamp {
        let mtime_ns = i128::from(stat.st_mtime) * 1_000_000_000 + i128::from(stat.st_mtime_nsec);
        Stamp { ino: stat.st_ino, mtime_ns }
    }

    /// The stamp as one line of text (`<inode> <mtime in ns>`), as the mirror keeps it.
    pub(crate) fn to_text(self) -> String {
        format!("{} {}\n", self.ino, self.mtime_ns)
    }

    /// A stamp [`Stamp::to_text`] wrote; `None` for anything else.
    pub(crate) fn parse(text: &[u8]) -> Option<Stamp> {
        let text = std::str::from_utf8(text).ok()?.strip_suffix('\n')?;
        let (ino, mtime_ns) = text.split_once(' ')?;
        Some(Stamp { ino: ino.parse().ok()?, mtime_ns: mtime_ns.parse().ok()? })
    }
}

/// The real directory operations of a root, for [`durable`]'s steps, with the mode a created file
/// gets. The temp file is made with no name (`O_TMPFILE`) where the filesystem allows, and gets
/// its temp name only when it is renamed over its target, so a writer killed while writing or
/// syncing it leaves nothing in the directory.
struct RootOps<'a> {
    root: &'a Root,
    mode: TempMode,
    /// The stamp of the last file synced: the temp file, which keeps it through the rename.
    stamp: Option<Stamp>,
    /// The temp file made with no name, by the name it stands for, until it gets that name.
    unnamed: Option<(String, OwnedFd)>,
}

impl<'a> RootOps<'a> {
    fn new(root: &'a Root, mode: TempMode) -> RootOps<'a> {
        RootOps { root, mode, stamp: None, unnamed: None }
    }
}

impl DirOps for RootOps<'_> {
    /// The file and its path, for messages.
    type File = (File, PathBuf);

    fn create_new(&mut self, name: &str) -> Result<(File, PathBuf)> {
        let path = self.root.path.join(name);
        let (TempMode::Keep(mode) | TempMode::New(mode)) = self.mode;
        let fd = match create_unnamed(&self.root.dir, OFlags::WRONLY, mode) {
            Some(fd) => {
                let held =
                    fd.try_clone().map_err(|e| Error::io("duplicate handle of", &path, e))?;
                self.unnamed = Some((name.to_owned(), held));
                fd
            }
            None => {
                let flags = OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC;
                rustix::fs::openat(&self.root.dir, name, flags, Mode::from_raw_mode(mode))
                    .map_err(|e| io_err("create", &path, e))?
            }
        };
        if let TempMode::Keep(mode) = self.mode {
            if let Err(e) = rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)) {
                let _ = self.remove(name);
                return Err(io_err("chmod", &path, e));
            }
        }
        Ok((File::from(fd), path))
    }

    fn write_all(&mut self, (file, path): &mut (File, PathBuf), bytes: &[u8]) -> Result<()> {
        file.write_all(bytes).map_err(|e| Error::io("write", path.clone(), e))
    }

    fn sync_file(&mut self, (file, path): &mut (File, PathBuf)) -> Result<()> {
        file.sync_all().map_err(|e| Error::io("write", path.clone(), e))?;
        let stat = rustix::fs::fstat(&*file).map_err(|e| io_err("stat", path, e))?;
        self.stamp = Some(Stamp::of(&stat));
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        if let Some((_, fd)) = self.unnamed.take_if(|(temp, _)| temp == from) {
            link_unnamed(&fd, &self.root.dir, from)
                .map_err(|e| io_err("link", &self.root.path.join(from), e))?;
        }
        rustix::fs::renameat(&self.root.dir, from, &self.root.dir, to)
            .map_err(|e| io_err("rename", &self.root.path.join(to), e))
    }

    fn remove(&mut self, name: &str) -> Result<()> {
        // A temp file that never got its name goes with its handles.
        if self.unnamed.take_if(|(temp, _)| temp == name).is_some() {
            return Ok(());
        }
        rustix::fs::unlinkat(&self.root.dir, name, AtFlags::empty())
            .map_err(|e| io_err("remove", &self.root.path.join(name), e))
    }

    fn sync_dir(&mut self) -> Result<()> {
        self.root.sync()
    }

    fn make_dir(&mut self, name: &str) -> Result<bool> {
        match rustix::fs::mkdirat(&self.root.dir, name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) => Ok(true),
            Err(Errno::EXIST) => Ok(false),
            Err(other) => Err(io_err("create directory", &self.root.path.join(name), other)),
        }
    }
}

/// The `naive-path-join` drill's read: the raw path, no checks.
#[cfg(feature = "bugdrill")]
mod drill {
    use std::path::Path;

    use crate::kernel::error::{Error, Result};

    pub(super) fn naive_read(path: &Path) -> Result<Option<Vec<u8>>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("read", path, e)),
        }
    }
}

fn refusal(path: &Path, errno: Errno) -> Error {
    match errno {
        Errno::LOOP | Errno::NOTDIR => Error::UnsafePath {
            path: path.to_path_buf(),
            why: "is a symlink or not a directory".into(),
        },
        Errno::NOENT => Error::NoDirectory { path: path.to_path_buf() },
        other => io_err("open", path, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn private_dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// The mode a file created the way upstream's writers create one gets under this process's
    /// umask (0666 less the umask).
    fn umask_mode(dir: &Path) -> u32 {
        let probe = dir.join("probe");
        std::fs::write(&probe, b"").unwrap();
        let mode = std::fs::metadata(&probe).unwrap().permissions().mode() & 0o777;
        std::fs::remove_file(probe).unwrap();
        mode
    }

    #[test]
    fn write_then_read_round_trips_with_upstream_modes_and_no_temp_left() {
        let dir = private_dir();
        let root = Root::open(&dir.path().join("export"), true).unwrap();
        let sub = root.subdir(".feedback", true).unwrap().unwrap();
        sub.write("fb_a.json", b"{\n  \"x\": 1\n}\n").unwrap();
        sub.write("fb_a.json", b"{}\n").unwrap();
        sub.write(".hookstate-mirror.fb_a.json", b"{}").unwrap();
        sub.write("alert-state.json", b"{}").unwrap();
        sub.write("loopd.json", b"{}").unwrap();
        assert_eq!(sub.read("fb_a.json", 64).unwrap().unwrap(), b"{}\n");
        let names = [".hookstate-mirror.fb_a.json", "alert-state.json", "fb_a.json", "loopd.json"];
        assert_eq!(sub.list().unwrap(), names);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let feedback = dir.path().join("export/.feedback");
        assert_eq!(mode(&feedback.join("fb_a.json")), umask_mode(dir.path()));
        assert_eq!(mode(&feedback.join(".hookstate-mirror.fb_a.json")), 0o600, "our own file");
        assert_eq!(mode(&feedback.join("alert-state.json")), 0o600, "upstream forces 0600");
        assert_eq!(mode(&feedback.join("loopd.json")), 0o600, "upstream mode unknown");
        assert_eq!(mode(&dir.path().join("export/.feedback")), 0o700);
        assert_eq!(mode(&dir.path().join("export")), 0o700);
    }

    /// Whether `dir`'s filesystem makes files with no name (`O_TMPFILE`).
    fn unnamed_files_in(dir: &Path) -> bool {
        rustix::fs::open(dir, OFlags::WRONLY | OFlags::TMPFILE, Mode::from_raw_mode(0o600)).is_ok()
    }

    /// A file being written has no name until it replaces its target, so a writer killed while
    /// it writes or syncs leaves nothing in the directory; a replace its check refuses leaves
    /// nothing either.
    #[test]
    fn a_file_being_written_has_no_name_until_it_replaces_its_target() {
        let dir = private_dir();
        let root = Root::open(dir.path(), false).unwrap();
        let names = || {
            let mut names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        root.write("a.json", b"old").unwrap();
        let mut during = Vec::new();
        let replaced = root.write_if("a.json", b"new", |_| {
            during = names();
            Ok(true)
        });
        assert!(replaced.unwrap());
        assert_eq!(std::fs::read(dir.path().join("a.json")).unwrap(), b"new");
        let mut refused = Vec::new();
        let replaced = root.write_if("b.json", b"b", |_| {
            refused = names();
            Ok(false)
        });
        assert!(!replaced.unwrap());
        root.write_unsynced("c.json", b"c").unwrap();
        if unnamed_files_in(dir.path()) {
            assert_eq!(during, ["a.json"], "a name while being written");
            assert_eq!(refused, ["a.json"], "a name while being written");
        } else {
            assert!(during.iter().any(|n| is_temp_name(n)), "{during:?}");
        }
        assert_eq!(names(), ["a.json", "c.json"]);
    }

    #[test]
    fn a_replaced_file_keeps_its_mode_whatever_the_umask_allows() {
        let dir = private_dir();
        let root = Root::open(dir.path(), false).unwrap();
        let mode = |name: &str| {
            std::fs::metadata(dir.path().join(name)).unwrap().permissions().mode() & 0o777
        };
        for (name, kept) in [("a.json", 0o644), ("runtime.json", 0o640), ("c.json", 0o666)] {
            root.write(name, b"old").unwrap();
            let path = dir.path().join(name);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(kept)).unwrap();
            root.write(name, b"new").unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), b"new");
            assert_eq!(mode(name), kept, "{name}");
        }
        // A planted symlink is replaced, never followed for its target's mode.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"v").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o604)).unwrap();
        symlink(&victim, dir.path().join("control.json")).unwrap();
        root.write("control.json", b"new").unwrap();
        assert_eq!(mode("control.json"), umask_mode(dir.path()));
        assert_eq!(std::fs::read(&victim).unwrap(), b"v");
    }

    #[test]
    fn names_that_could_escape_are_refused() {
        let dir = private_dir();
        let root = Root::open(dir.path(), false).unwrap();
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", "a\0b", "a\nb", &"x".repeat(256)] {
            assert!(root.write(bad, b"x").is_err(), "{bad:?}");
            assert!(root.read(bad, 8).is_err(), "{bad:?}");
            assert!(root.subdir(bad, true).is_err(), "{bad:?}");
        }
        assert_eq!(root.list().unwrap().len(), 0);
    }

    #[test]
    fn symlinks_fifos_hard_links_and_oversized_files_are_refused() {
        let dir = private_dir();
        let outside = private_dir();
        std::fs::write(outside.path().join("victim"), b"keep").unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        symlink(outside.path(), dir.path().join("linkdir")).unwrap();
        assert!(matches!(root.subdir("linkdir", true), Err(Error::UnsafePath { .. })));
        symlink(outside.path().join("victim"), dir.path().join("linkfile")).unwrap();
        assert!(root.read("linkfile", 64).is_err());
        root.write("linkfile", b"new").unwrap();
        assert_eq!(std::fs::read(outside.path().join("victim")).unwrap(), b"keep");
        std::fs::hard_link(outside.path().join("victim"), dir.path().join("hard")).unwrap();
        assert!(matches!(root.read("hard", 64), Err(Error::UnsafePath { .. })));
        root.write("hard", b"replaced").unwrap();
        assert_eq!(std::fs::read(outside.path().join("victim")).unwrap(), b"keep");
        assert!(std::process::Command::new("mkfifo")
            .arg(dir.path().join("fifo"))
            .status()
            .unwrap()
            .success());
        assert!(matches!(root.read("fifo", 64), Err(Error::LegacyFile { .. })));
        std::fs::write(dir.path().join("big"), vec![b'x'; 65]).unwrap();
        assert!(matches!(root.read("big", 64), Err(Error::TooLarge { .. })));
        let link_root = dir.path().join("linkdir");
        assert!(matches!(Root::open(&link_root, false), Err(Error::UnsafePath { .. })));
    }

    #[test]
    fn a_root_writable_by_others_is_refused() {
        let dir = private_dir();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(Root::open(dir.path(), false), Err(Error::UnsafePath { .. })));
    }
}
