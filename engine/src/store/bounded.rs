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
type BackendIoError = std::io::Error;
type LockResult<T> = std::result::Result<T, BackendError>;

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
#[derive(Debug)]
pub(crate) struct BoundedBackend {
    inner: FileBackend,
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
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::result::Result<(), BackendIoError> {
        self.inner.read(offset, out)
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
    let clone = file.try_clone().map_err(|e| Error::io("duplicate handle of", "", e))?;
    let timed_out = Arc::new(AtomicBool::new(false));
    let lockless = Arc::new(AtomicBool::new(false));
    let backend = BoundedBackend {
        inner: FileBackend::new(clone).map_err(convert)?,
        wait,
        timed_out: Arc::clone(&timed_out),
        reader,
        lockless: Arc::clone(&lockless),
    };
    Ok((backend, timed_out, lockless))
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
        redb::Error::Io(ref io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof
            ) =>
        {
            Error::StoreCorrupt(Box::new(err))
        }
        redb::Error::Io(_) | redb::Error::PreviousIo => Error::StoreIo(Box::new(err)),
        other => Error::Store(Box::new(other)),
    }
}
