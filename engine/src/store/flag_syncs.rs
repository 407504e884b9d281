//! A writer's backend that skips the syncs of redb whose only unsynced change is a header flag
//! that is safe to lose (see [`FlagSyncs`]).
//!
//! Part of the redb backend (`store::redb`); does not open databases.

use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use redb::{BackendError, StorageBackend};

use crate::store::bounded::REDB_HEADER_BYTES;

type Io<T> = std::result::Result<T, std::io::Error>;
type Lock<T> = std::result::Result<T, BackendError>;

/// Where redb 4.6.0 keeps its header's flags (its `GOD_BYTE_OFFSET`, after the 9-byte magic).
const FLAGS_AT: usize = 9;
/// The flag a live writer sets (redb's `RECOVERY_REQUIRED`): set, the next opener repairs.
const RECOVERY_REQUIRED: u8 = 2;
/// The flag that hides a commit not yet flushed from other processes (redb's
/// `PRIMARY_UNFLUSHED`): set, other processes serve the previous commit and the next writer's
/// open repairs.
const PRIMARY_UNFLUSHED: u8 = 8;

/// redb's file backend for a writer, which does not sync when the only change since its last
/// sync is a header write that sets the recovery flag or clears the unflushed flag, the header
/// otherwise byte-identical (slots, layout, every other flag), and the file's header is still the
/// one this handle wrote.
///
/// redb syncs such a write twice per process: the open marks the file in use (sets the recovery
/// flag), and the clean close clears the unflushed flag of its allocator-state commit and trims
/// the file before the header that clears the recovery flag. Losing either to a power cut leaves
/// a header redb already accepts: without the recovery flag, the clean header of the last close,
/// whose slots and allocator state nothing since has touched (a writer overwrites no page that a
/// durable commit holds, and its first commit's sync makes the flag durable before any header
/// names a new page); with the unflushed flag, a header whose next open repairs the file, as a
/// killed writer's does. A trim is a `set_len` to a length whose layout is already durable
/// (redb shrinks only then); a file longer than its layout is repaired on open. Every other
/// sync runs: page writes, a file grown, a slot, layout or other flag changed, a header another
/// process wrote since, or nothing written by this handle (a sync made for a dead writer's
/// header). The power-loss simulator opens its images through this backend.
#[derive(Debug)]
pub(crate) struct FlagSyncs<B> {
    inner: B,
    pending: Mutex<Pending>,
}

/// What this handle changed since its last sync.
#[derive(Debug, Default)]
struct Pending {
    /// The file's header before this handle's first header write since its last sync.
    base: Option<Vec<u8>>,
    /// The last header this handle wrote since its last sync.
    latest: Option<Vec<u8>>,
    /// A write other than a whole header, or a `set_len` that grew the file.
    other: bool,
}

impl<B: StorageBackend> FlagSyncs<B> {
    pub(crate) fn new(inner: B) -> Self {
        FlagSyncs { inner, pending: Mutex::new(Pending::default()) }
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn file_header(&self) -> Option<Vec<u8>> {
        let mut header = vec![0u8; REDB_HEADER_BYTES];
        self.inner.read(0, &mut header).ok().map(|()| header)
    }

    /// Whether the sync asked for now may be skipped.
    fn skippable(&self, pending: &Pending) -> bool {
        let (Some(base), Some(latest)) = (&pending.base, &pending.latest) else {
            return false;
        };
        !pending.other
            && only_safe_flags(base, latest)
            && self.file_header().is_some_and(|now| now == *latest)
    }
}

/// Whether `latest` is `base` with at most the recovery flag set and the unflushed flag cleared.
fn only_safe_flags(base: &[u8], latest: &[u8]) -> bool {
    if base.len() != REDB_HEADER_BYTES || latest.len() != REDB_HEADER_BYTES {
        return false;
    }
    let same_elsewhere = base
        .iter()
        .zip(latest)
        .enumerate()
        .all(|(at, (before, after))| at == FLAGS_AT || before == after);
    let (before, after) = (base[FLAGS_AT], latest[FLAGS_AT]);
    let set = after & !before;
    let cleared = before & !after;
    same_elsewhere && set & !RECOVERY_REQUIRED == 0 && cleared & !PRIMARY_UNFLUSHED == 0
}

impl<B: StorageBackend> StorageBackend for FlagSyncs<B> {
    fn len(&self) -> Io<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Io<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Io<()> {
        let mut pending = self.pending();
        if len > self.inner.len()? {
            pending.other = true;
        }
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Io<()> {
        let mut pending = self.pending();
        #[cfg(feature = "bugdrill")]
        let skip = self.skippable(&pending)
            || (crate::kernel::drill::is(crate::kernel::drill::Drill::HeaderSyncsSkipped)
                && !pending.other
                && pending.latest.is_some());
        #[cfg(not(feature = "bugdrill"))]
        let skip = self.skippable(&pending);
        if skip {
            return Ok(());
        }
        self.inner.sync_data()?;
        *pending = Pending::default();
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Io<()> {
        let mut pending = self.pending();
        if offset == 0 && data.len() == REDB_HEADER_BYTES {
            if pending.base.is_none() {
                match self.file_header() {
                    Some(header) => pending.base = Some(header),
                    None => pending.other = true,
                }
            }
            pending.latest = Some(data.to_vec());
        } else {
            pending.other = true;
        }
        self.inner.write(offset, data)
    }
    fn close(&self) -> Io<()> {
        self.inner.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<bool> {
        self.inner.try_lock_range(start, end)
    }
    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<bool> {
        self.inner.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<()> {
        self.inner.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<()> {
        self.inner.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<()> {
        self.inner.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<bool> {
        self.inner.query_lock_range(start, end)
    }
}

#[cfg(test)]
#[path = "flag_syncs_tests.rs"]
mod tests;
