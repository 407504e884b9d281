//! The second anchor (`HOOKSTATE_ANCHOR_DIR`): one append-only file per store,
//! `<store id>.anchors`, in a directory kept apart from the store, to which every commit appends
//! its anchor line. Made append-only (`chattr +a`, by root) the file cannot be rolled back by the
//! store's own writer, so a copy of an old store together with its old anchor is still caught.
//!
//! Only the file's tail is read (its last two complete lines), so a call's cost does not grow
//! with the file: the last line is the anchor, and one whose seq is below the line before it
//! (an old line appended, which `chattr +a` allows) is refused. `verify` reads every line
//! (`check_history`): no line's seq may be below one before it. Appends are not fsynced: the
//! second anchor may lag after a power cut, never lead. Does not decide when to append; the
//! kernel's anchor rules do.

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use hookstate_schema::format::{parse_anchor, to_hex, STORE_ID_BYTES};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::kernel::error::{Error, Result};
use crate::kernel::fsio::{io_err, FILE_MODE};
use crate::kernel::limits::ANCHOR_BYTES_MAX;
use crate::kernel::walk;

/// Bytes read from the end of the file: three anchor lines, so the last two complete ones are in
/// them.
const TAIL_BYTES: usize = 3 * (ANCHOR_BYTES_MAX + 1);
/// Group- or world-writable: another user could replace the file.
const SHARED_WRITE_BITS: u32 = 0o022;

/// The opened directory of the second anchors.
pub(crate) struct SecondAnchor {
    dir: OwnedFd,
    dir_path: PathBuf,
}

impl SecondAnchor {
    /// Opens the directory (every component checked from the root); it must exist, be owned by
    /// root or by us, and be writable by neither its group nor others.
    pub(crate) fn open(path: &Path) -> Result<SecondAnchor> {
        let dir = walk::open_dir(path, false, walk::LastLink::Trusted)?;
        let stat = rustix::fs::fstat(&dir).map_err(|e| io_err("stat", path, e))?;
        let me = rustix::process::geteuid().as_raw();
        if stat.st_uid != 0 && stat.st_uid != me {
            let why = format!("anchor directory is owned by uid {}, not root or {me}", stat.st_uid);
            return Err(Error::UnsafePath { path: path.to_path_buf(), why });
        }
        if stat.st_mode & SHARED_WRITE_BITS != 0 {
            let why = "anchor directory is writable by its group or others".into();
            return Err(Error::UnsafePath { path: path.to_path_buf(), why });
        }
        Ok(SecondAnchor { dir, dir_path: path.to_path_buf() })
    }

    /// Takes the lock of the directory (an advisory lock on it) without waiting: `None` when
    /// another writer holds it. Released when dropped.
    pub(crate) fn try_lock(&self) -> Result<Option<DirLock<'_>>> {
        match rustix::fs::flock(&self.dir, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(DirLock { dir: self })),
            Err(Errno::WOULDBLOCK | Errno::INTR) => Ok(None),
            Err(other) => Err(io_err("lock", &self.dir_path, other)),
        }
    }

    fn name(store_id: &[u8; STORE_ID_BYTES]) -> String {
        format!("{}.anchors", to_hex(store_id))
    }

    /// The file of the store `store_id`, for messages.
    pub(crate) fn path(&self, store_id: &[u8; STORE_ID_BYTES]) -> PathBuf {
        self.dir_path.join(Self::name(store_id))
    }

    fn open_file(&self, store_id: &[u8; STORE_ID_BYTES], flags: OFlags) -> Result<Option<File>> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let mode = Mode::from_raw_mode(FILE_MODE);
        let fd = match rustix::fs::openat(&self.dir, Self::name(store_id), flags, mode) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(other) => return Err(io_err("open", &self.path(store_id), other)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", &self.path(store_id), e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            let why = "the second anchor is not a regular file".into();
            return Err(Error::AnchorMismatch { why });
        }
        Ok(Some(File::from(fd)))
    }

    /// The file's tail: at most [`TAIL_BYTES`] from its end.
    fn tail(file: &File, path: &Path) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let len = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
        let start = len.saturating_sub(TAIL_BYTES as u64);
        let mut out = vec![0u8; usize::try_from(len - start).unwrap_or(0)];
        file.read_exact_at(&mut out, start).map_err(|e| Error::io("read", path, e))?;
        Ok(out)
    }

    /// The last complete line (with its newline) of the store's file; `None` when the file is
    /// absent or holds no complete line. A torn last append (no newline) is skipped.
    ///
    /// # Errors
    /// [`Error::AnchorMismatch`] when the last line's seq is below the line's before it (both
    /// anchors of this store); IO errors.
    pub(crate) fn read_last(&self, store_id: &[u8; STORE_ID_BYTES]) -> Result<Option<String>> {
        let path = self.path(store_id);
        let Some(file) = self.open_file(store_id, OFlags::RDONLY)? else {
            return Ok(None);
        };
        let tail = Self::tail(&file, &path)?;
        let Some(last) = last_line(&tail) else {
            return Ok(None);
        };
        let before = last_line(&tail[..tail.len() - last.len()]);
        if let (Some(before), Some(now)) =
            (before.and_then(seq_of(store_id)), seq_of(store_id)(last))
        {
            if now < before {
                return Err(went_back(&path, before, now));
            }
        }
        Ok(Some(String::from_utf8_lossy(last).into_owned()))
    }

    /// Reads every line of the store's file: no anchor of this store may have a seq below one
    /// before it. Its cost grows with the file: `verify` runs it, no call does.
    ///
    /// # Errors
    /// [`Error::AnchorMismatch`] for a seq that went back; IO errors.
    pub(crate) fn check_history(&self, store_id: &[u8; STORE_ID_BYTES]) -> Result<()> {
        use std::io::BufRead;
        let path = self.path(store_id);
        let Some(file) = self.open_file(store_id, OFlags::RDONLY)? else {
            return Ok(());
        };
        let mut lines = std::io::BufReader::new(file);
        let mut line = Vec::with_capacity(ANCHOR_BYTES_MAX + 1);
        let mut highest: Option<u64> = None;
        loop {
            line.clear();
            // A line longer than an anchor is no anchor: read on to its end, bounded per read.
            let read = std::io::Read::take(&mut lines, ANCHOR_BYTES_MAX as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(|e| Error::io("read", &path, e))?;
            if read == 0 {
                return Ok(());
            }
            let Some(seq) = seq_of(store_id)(&line) else {
                continue;
            };
            match highest {
                Some(high) if seq < high => return Err(went_back(&path, high, seq)),
                _ => highest = Some(seq),
            }
        }
    }

    /// Appends `line` (one anchor line with its newline), after a newline when a torn append
    /// left the file without one, in one write.
    pub(crate) fn append(&self, store_id: &[u8; STORE_ID_BYTES], line: &str) -> Result<()> {
        let path = self.path(store_id);
        let flags = OFlags::RDWR | OFlags::APPEND | OFlags::CREATE;
        let Some(mut file) = self.open_file(store_id, flags)? else {
            return Err(Error::io("create", path, std::io::ErrorKind::NotFound.into()));
        };
        let torn = Self::tail(&file, &path)?.last().is_some_and(|b| *b != b'\n');
        let mut bytes = Vec::with_capacity(line.len() + 1);
        if torn {
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(line.as_bytes());
        file.write_all(&bytes).map_err(|e| Error::io("append", path, e))
    }
}

/// The lock of a second-anchor directory, held until dropped.
pub(crate) struct DirLock<'a> {
    dir: &'a SecondAnchor,
}

impl Drop for DirLock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(&self.dir.dir, rustix::fs::FlockOperation::Unlock);
    }
}

/// The seq of an anchor line of the store `store_id` (`None` for a torn line, or one of another
/// store).
fn seq_of(store_id: &[u8; STORE_ID_BYTES]) -> impl Fn(&[u8]) -> Option<u64> + '_ {
    move |line| {
        let text = std::str::from_utf8(line).ok()?;
        parse_anchor(text).ok().filter(|(id, _)| id == store_id).map(|(_, head)| head.seq)
    }
}

fn went_back(path: &Path, from: u64, to: u64) -> Error {
    Error::AnchorMismatch {
        why: format!(
            "{}: the second anchor goes back from seq {from} to seq {to}: a line was appended \
             to roll it back",
            path.display()
        ),
    }
}

/// The last line of `tail` that ends with a newline, newline included; the part before the first
/// newline may be the end of an earlier line cut by the tail, so it counts only when the tail
/// holds no other complete line and starts the file.
fn last_line(tail: &[u8]) -> Option<&[u8]> {
    let end = tail.iter().rposition(|b| *b == b'\n')?;
    let start = tail[..end].iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    Some(&tail[start..=end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_complete_line_is_read_and_a_torn_append_is_skipped() {
        assert_eq!(last_line(b"a\nb\n"), Some(&b"b\n"[..]));
        assert_eq!(last_line(b"a\nb\nto"), Some(&b"b\n"[..]));
        assert_eq!(last_line(b"only\n"), Some(&b"only\n"[..]));
        assert_eq!(last_line(b"torn"), None);
        assert_eq!(last_line(b""), None);
    }

    fn line(id: &[u8; STORE_ID_BYTES], seq: u64) -> String {
        let head = hookstate_schema::format::Head { seq, hash: [u8::try_from(seq).unwrap(); 32] };
        hookstate_schema::format::format_anchor(id, &head)
    }

    /// An old line appended (all `chattr +a` lets anyone do) rolled the anchor back: only the
    /// last line counted. A call sees the last two lines; `verify` reads them all.
    #[test]
    fn an_anchor_line_below_one_before_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let anchors = SecondAnchor::open(dir.path()).unwrap();
        let (id, other) = ([7u8; STORE_ID_BYTES], [8u8; STORE_ID_BYTES]);
        for seq in [1, 2, 4, 4] {
            anchors.append(&id, &line(&id, seq)).unwrap();
        }
        assert_eq!(anchors.read_last(&id).unwrap(), Some(line(&id, 4)));
        anchors.check_history(&id).unwrap();
        anchors.append(&id, &line(&id, 2)).unwrap();
        let err = anchors.read_last(&id).unwrap_err().to_string();
        assert!(err.contains("goes back from seq 4 to seq 2"), "{err}");
        // Old lines in order after it: the last two agree, the whole file does not.
        for seq in [3, 3, 3] {
            anchors.append(&id, &line(&id, seq)).unwrap();
        }
        assert_eq!(anchors.read_last(&id).unwrap(), Some(line(&id, 3)));
        let err = anchors.check_history(&id).unwrap_err().to_string();
        assert!(err.contains("goes back from seq 4 to seq 2"), "{err}");
        // Torn lines, long junk and another store's lines are not anchors of this one.
        let clean = tempfile::tempdir().unwrap();
        let anchors = SecondAnchor::open(clean.path()).unwrap();
        anchors.append(&id, &line(&id, 5)).unwrap();
        anchors.append(&id, &format!("{}\n", "x".repeat(3 * ANCHOR_BYTES_MAX))).unwrap();
        anchors.append(&id, &line(&other, 1)).unwrap();
        anchors.append(&id, &line(&id, 6)).unwrap();
        anchors.check_history(&id).unwrap();
        assert_eq!(anchors.read_last(&id).unwrap(), Some(line(&id, 6)));
    }

    #[test]
    fn appends_survive_a_torn_line_and_reads_see_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let anchors = SecondAnchor::open(dir.path()).unwrap();
        let id = [7u8; STORE_ID_BYTES];
        assert_eq!(anchors.read_last(&id).unwrap(), None);
        anchors.append(&id, "one\n").unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(anchors.path(&id))
            .unwrap()
            .write_all(b"tor")
            .unwrap();
        assert_eq!(anchors.read_last(&id).unwrap().as_deref(), Some("one\n"));
        anchors.append(&id, "two\n").unwrap();
        assert_eq!(anchors.read_last(&id).unwrap().as_deref(), Some("two\n"));
        let text = std::fs::read_to_string(anchors.path(&id)).unwrap();
        assert_eq!(text, "one\ntor\ntwo\n");
    }
}
