//! redb's file backend with every lock wait bounded, and a reader's header lock that never waits
//! for a writer (see [`BoundedBackend`]).
//!
//! Part of the redb backend (`store::redb`); does not open databases.

use std::fs::File;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use crate::kernel::error::{Error, Result};
use crate::kernel::limits::{LOCK_BACKOFF_US_MAX, LOCK_BACKOFF_US_MIN, READ_HEADER_WAIT_MS};

/// The IO error type of redb's `StorageBackend` (without its `experimental-api-5` feature).
pub(crate) type BackendIoError = std::io::Error;
/// What redb's `StorageBackend` lock calls return.
pub(crate) type LockResult<T> = std::result::Result<T, BackendError>;

/// The end of redb's header lock bytes (`0..320`, redb's docs/design.md "Lock bytes", fixed for
/// the pinned release): a reader takes them shared to read the header, a writer exclusively to
/// write it, and redb's writer holds them across the fsyncs of its open and its clean close.
pub(crate) const REDB_HEADER_LOCK_END: u64 = 320;

/// redb's file backend with every blocking lock turned into a bounded wait. In multi-writer mode
/// redb's open takes the writer lock blocking, so a writer that stalls (a hook stopped with
/// SIGSTOP) would hang every later opener; here the wait ends after `wait` and the call reports
/// busy instead.
///
/// A reader's handle (`reader`) goes further: it never waits for a writer. When the header lock
/// stays held past [`READ_HEADER_WAIT_MS`] (a writer stopped or stalled inside a commit, an open
/// or a close), it reads the header without the lock. That is safe while the holder is stopped
/// (it writes nothing), and a header write that a read races is caught by the header's slot
/// checksums (the open is retried, [`READ_TORN_RETRIES`]); the pages of the commit it names are
/// pinned by the reader's transaction byte like any reader's, and every row and event it reads
/// is checked (row checksums, event hashes).
///
/// It answers the file's length with `lseek(SEEK_END)`, not redb's `statx` (see
/// [`BoundedBackend::file`]).
#[derive(Debug)]
pub(crate) struct BoundedBackend {
    inner: FileBackend,
    /// A duplicate of the file's handle, asked for the file's length by `lseek(SEEK_END)`, which
    /// reads the same size `statx` does. A `statx` also marks the file's times as seen, and the
    /// kernel (multigrain timestamps, Linux 6.13 on) then stamps the next write with a fresh
    /// fine-grained time, which dirties the inode; `fdatasync` on ext4 without a journal writes a
    /// dirty inode as one more synchronous IO. redb asked for the length about 5 times a commit,
    /// so nearly every sync of a commit paid that IO (docs/decisions.md, "The store's length
    /// without statx"). Every read and write of the store is positional, so moving this shared
    /// handle's offset changes nothing.
    file: File,
    wait: Duration,
    timed_out: Arc<AtomicBool>,
    reader: bool,
    lockless: Arc<AtomicBool>,
}

impl BoundedBackend {
    fn is_header(start: Bound<u64>, end: Bound<u64>) -> bool {
        start == Bound::Included(0) && end == Bound::Excluded(REDB_HEADER_LOCK_END)
    }

    /// A reader's shared header lock: taken within [`READ_HEADER_WAIT_MS`], else read without.
    fn reader_header_lock(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<()> {
        let wait = if self.lockless.load(Ordering::SeqCst) {
            Duration::ZERO
        } else {
            Duration::from_millis(READ_HEADER_WAIT_MS)
        };
        let deadline = Instant::now() + wait;
        let mut attempt = 0;
        loop {
            if self.inner.try_lock_shared_range(start, end)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.lockless.store(true, Ordering::SeqCst);
                return Ok(());
            }
            thread::sleep(backoff(attempt));
            attempt += 1;
        }
    }

    fn wait_for(
        &self,
        mut try_lock: impl FnMut() -> std::result::Result<bool, BackendError>,
    ) -> std::result::Result<(), BackendError> {
        let deadline = Instant::now() + self.wait;
        let mut attempt = 0;
        loop {
            if try_lock()? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.timed_out.store(true, Ordering::SeqCst);
                return Err(BackendError::Io(std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    "lock wait timed out",
                )));
            }
            thread::sleep(backoff(attempt));
            attempt += 1;
        }
    }
}

impl StorageBackend for BoundedBackend {
    fn len(&self) -> std::result::Result<u64, BackendIoError> {
        file_len(&self.file)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::result::Result<(), BackendIoError> {
        self.inner.read(offset, out)?;
        if offset == 0 && out.len() == REDB_HEADER_BYTES {
            check_header_roots(out, file_len(&self.file)?)?;
        }
        Ok(())
    }
    fn set_len(&self, len: u64) -> std::result::Result<(), BackendIoError> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> std::result::Result<(), BackendIoError> {
        #[cfg(feature = "bugdrill")]
        if crate::kernel::drill::is(crate::kernel::drill::Drill::DurabilityNone) {
            return Ok(());
        }
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::result::Result<(), BackendIoError> {
        self.inner.write(offset, data)
    }
    fn close(&self) -> std::result::Result<(), BackendIoError> {
        self.inner.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<bool> {
        self.inner.try_lock_range(start, end)
    }
    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<bool> {
        self.inner.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<()> {
        self.wait_for(|| self.inner.try_lock_range(start, end))
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<()> {
        if self.reader && Self::is_header(start, end) {
            return self.reader_header_lock(start, end);
        }
        self.wait_for(|| self.inner.try_lock_shared_range(start, end))
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<()> {
        self.inner.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<bool> {
        self.inner.query_lock_range(start, end)
    }
}

/// The length of redb's header, the first read of every open (`DB_HEADER_SIZE` in redb's
/// `header.rs`: 64 bytes of header, then two commit slots of [`SLOT_BYTES`]).
pub(crate) const REDB_HEADER_BYTES: usize = 320;
/// Where the header keeps its page size, its regions' header pages and their most data pages
/// (little-endian `u32`s).
const PAGE_SIZE_AT: usize = 12;
const REGION_HEADER_PAGES_AT: usize = 16;
const REGION_PAGES_AT: usize = 20;
/// The page size of redb 4.6.0 (its `PAGE_SIZE`; it refuses a file with another), and the data
/// pages of a region in every file it creates without `set_region_size` (its
/// `MAX_USABLE_REGION_SPACE` of 4 GiB), as every store of this project is, with no region header
/// pages (its file format 3): the header's geometry, written once at creation and never again.
const PAGE_BYTES: u64 = 4096;
const REGION_DATA_PAGES: u64 = (4 << 30) / PAGE_BYTES;
const _: () = assert!(REDB_HEADER_BYTES as u64 == REDB_HEADER_LOCK_END);
/// Where the two commit slots start, and the bytes of each.
const SLOTS_AT: usize = 64;
const SLOT_BYTES: usize = 128;
/// In a slot: the user tree's and the system tree's non-null flags (one byte each), and where
/// each root's page number (a little-endian `u64`) sits.
const ROOTS: [(usize, usize); 2] = [(1, 8), (2, 40)];
/// A page number keeps the page's order (its size is the page size times 2^order) in its top
/// bits. (Its index within its region, in the low 20 bits shifted right by the order, cannot
/// reach past a region of the geometry checked here.)
const PAGE_ORDER_SHIFT: u32 = 59;

/// Refuses a header whose region geometry is not the one every store is created with, or whose
/// commit slot names a root page larger than the whole file, before redb reads anything it
/// describes (an `InvalidData` error: a damaged store).
///
/// redb 4.6.0 allocates and zero-fills a buffer of the page's size before it reads the page (up
/// to 4 GiB for the largest order it accepts) and only then finds it past the end of the file:
/// a file damaged in those bits made every call, hooks included, take gigabytes, or abort where
/// the allocation failed. A region smaller than the one the file was created with puts pages
/// past the end of their region: redb's debug assertion, and a writer's recovery that rewrote
/// the header before it met an `unreachable!()`. No page of a database is larger than its file,
/// and the geometry is written when the file is created and never again, so this refuses only
/// damage. Both slots are checked, since redb may fall back on either; where in the file
/// the page lies is left to redb, which reports a page past the end without such a buffer.
pub(crate) fn check_header_roots(header: &[u8], file_len: u64) -> std::io::Result<()> {
    let word = |at: usize, n: usize| -> u64 {
        header
            .get(at..at + n)
            .map_or(0, |b| b.iter().rev().fold(0, |v, x| (v << 8) | u64::from(*x)))
    };
    let page_size = word(PAGE_SIZE_AT, 4);
    let region_pages = word(REGION_PAGES_AT, 4);
    let region_header_pages = word(REGION_HEADER_PAGES_AT, 4);
    let damaged = |why: String| Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
    if page_size != PAGE_BYTES || region_header_pages != 0 || region_pages != REGION_DATA_PAGES {
        return damaged(format!(
            "the header's region geometry ({region_header_pages} header and {region_pages} data \
             pages of {page_size} bytes) is not the one the store was created with"
        ));
    }
    for slot in 0..2 {
        let base = SLOTS_AT + slot * SLOT_BYTES;
        for (flag_at, root_at) in ROOTS {
            if word(base + flag_at, 1) == 0 {
                continue;
            }
            let number = word(base + root_at, 8);
            // Five bits, at most 31: the shift of a 4 KiB page size cannot overflow a `u64`.
            let order = u32::try_from(number >> PAGE_ORDER_SHIFT).unwrap_or(u32::MAX);
            let bytes = page_size.checked_shl(order).unwrap_or(u64::MAX);
            if bytes > file_len {
                return damaged(format!(
                    "commit slot {slot} names a root page of {bytes} bytes in a file of \
                     {file_len} bytes"
                ));
            }
        }
    }
    Ok(())
}

/// The pause before lock attempt `attempt`: doubling from [`LOCK_BACKOFF_US_MIN`] up to
/// [`LOCK_BACKOFF_US_MAX`].
pub(crate) fn backoff(attempt: u32) -> Duration {
    let us = LOCK_BACKOFF_US_MIN.saturating_mul(1u64 << attempt.min(8)).min(LOCK_BACKOFF_US_MAX);
    Duration::from_micros(us)
}

/// A bounded backend on a duplicate of `file`, with its timed-out flag and (for a `reader`) the
/// flag that says a header was read without its lock.
pub(crate) fn bounded(
    file: &File,
    wait: Duration,
    reader: bool,
) -> Result<(BoundedBackend, Arc<AtomicBool>, Arc<AtomicBool>)> {
    let duplicate = || file.try_clone().map_err(|e| Error::io("duplicate handle of", "", e));
    let timed_out = Arc::new(AtomicBool::new(false));
    let lockless = Arc::new(AtomicBool::new(false));
    let backend = BoundedBackend {
        inner: FileBackend::new(duplicate()?).map_err(convert)?,
        file: duplicate()?,
        wait,
        timed_out: Arc::clone(&timed_out),
        reader,
        lockless: Arc::clone(&lockless),
    };
    Ok((backend, timed_out, lockless))
}

/// The length of `file` by `lseek(SEEK_END)`: the size `statx` reads, without marking the
/// file's times as seen (see [`BoundedBackend::file`]).
pub(crate) fn file_len(file: &File) -> std::result::Result<u64, BackendIoError> {
    rustix::fs::seek(file, rustix::fs::SeekFrom::End(0)).map_err(BackendIoError::from)
}

/// Every redb error as the engine's: a damaged file, a failing disk, or another store failure.
pub(crate) fn convert(err: impl Into<redb::Error>) -> Error {
    let err: redb::Error = err.into();
    match err {
        redb::Error::Corrupted(_)
        | redb::Error::UpgradeRequired(_)
        | redb::Error::TableTypeMismatch { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::TableIsNotMultimap(_)
        | redb::Error::TypeDefinitionChanged { .. }
        | redb::Error::TableDoesNotExist(_) => Error::StoreCorrupt(Box::new(err)),
        // redb reports a file that is not a database ("magic number mismatch") as invalid data,
        // and a read past the end of a truncated file as an unexpected end of file: both are a
        // damaged store, not a failing disk.
        // The cause is the IO error itself: redb's wrapper would add "I/O error: " to a message
        // that already follows "damaged store file" or "store IO failed".
        redb::Error::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            Error::StoreCorrupt(Box::new(io))
        }
        redb::Error::Io(io) => Error::StoreIo(Box::new(io)),
        redb::Error::PreviousIo => Error::StoreIo(Box::new(err)),
        other => Error::Store(Box::new(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_follows_the_file_as_another_handle_grows_and_shrinks_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = File::create_new(dir.path().join("f")).unwrap();
        let other = File::options().write(true).open(dir.path().join("f")).unwrap();
        let (backend, _, _) = bounded(&file, Duration::ZERO, false).unwrap();
        assert_eq!(StorageBackend::len(&backend).unwrap(), 0);
        for len in [4096, 1 << 20, 12_288, 0, 7] {
            other.set_len(len).unwrap();
            assert_eq!(StorageBackend::len(&backend).unwrap(), len);
            assert_eq!(StorageBackend::len(&backend).unwrap(), file.metadata().unwrap().len());
        }
        StorageBackend::set_len(&backend, 65_536).unwrap();
        assert_eq!(other.metadata().unwrap().len(), 65_536);
        // Positional IO does not care where the length query left the shared offset.
        StorageBackend::write(&backend, 100, b"abc").unwrap();
        let mut back = [0u8; 3];
        StorageBackend::read(&backend, 100, &mut back).unwrap();
        assert_eq!(&back, b"abc");
    }
}
