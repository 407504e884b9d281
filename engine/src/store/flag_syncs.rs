//! A writer's backend that skips the syncs of redb whose only unsynced change is a header flag
//! that is safe to lose (see [`FlagSyncs`]).
//!
//! Part of the redb backend (`store::redb`); does not open databases.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use redb::{BackendError, StorageBackend};

use crate::store::bounded::{REDB_HEADER_BYTES, REDB_HEADER_LOCK_END};

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
/// The flag of a primary slot written by a 2-phase commit (redb's `TWO_PHASE_COMMIT`), whose
/// slot a later open trusts without looking at the other; every multi-writer commit sets it.
const TWO_PHASE_COMMIT: u8 = 4;
/// redb's writer lock byte (its `WRITER_BYTE`, `LOCK_BASE = 1 << 62`, redb's docs/design.md
/// "Lock bytes"): held across every commit and across the clean close's header write.
const REDB_WRITER_BYTE: u64 = 1 << 62;
/// redb's consistent byte (`BASE + 4`, the same docs): every live writer holds it shared from the
/// end of its open (recovery run, allocator state loaded) to its close.
const REDB_CONSISTENT_BYTE: u64 = REDB_WRITER_BYTE + 4;

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
///
/// Its close replaces redb's (see [`Closing`]): when the file's latest commit is this handle's
/// own, a multi-writer commit that already recorded redb's allocator state and synced its slot,
/// redb's allocator-state commit, trim and clean header (three syncs, and the next call's sync
/// of regrowing the trimmed file) are skipped, and the clean header is written here, unsynced.
#[derive(Debug)]
pub(crate) struct FlagSyncs<B> {
    inner: B,
    pending: Mutex<Pending>,
    closing: Arc<Closing>,
    /// The `durability-none` drill: once set, every sync returns without syncing (redb refuses
    /// `Durability::None` in `MultiWriter` mode, so the drill plants its effect here).
    #[cfg(feature = "bugdrill")]
    skip_every_sync: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// What this handle changed since its last sync.
#[derive(Debug, Default)]
struct Pending {
    /// The file's header before this handle's first header write since its last sync: set, a
    /// header was written since (`written` is the last one).
    base: Option<Vec<u8>>,
    /// A write other than a whole header, or a `set_len` that grew the file.
    other: bool,
    /// The last header this handle wrote, kept across syncs (the close compares it with the
    /// file's).
    written: Option<Vec<u8>>,
    /// Whether the file's header was clean (neither flag set) when this handle first wrote one:
    /// its open found a file closed cleanly, which it did not repair.
    found_clean: Option<bool>,
}

/// How a writer's handle closes, shared between the store (`store::redb`) and its backend.
///
/// redb's close commits its allocator state again, trims the file and writes a clean header, with
/// three syncs; on the next call the trimmed file grows again, with a fourth. In multi-writer mode
/// every commit already records the allocator state (`set_quick_repair` cannot turn it off), so
/// when the file's latest commit is this handle's own, none of that changes what the next open
/// reads. The store marks the close `started` before it drops redb's database; the backend then
/// refuses the writer byte to redb's close, which skips its maintenance commit and its header, and
/// at its own close writes the header redb's would have held: the file's header with the recovery
/// flag cleared, under the writer byte and the header lock, and only when that header is the last
/// one this handle wrote (no other process committed since), its primary slot is a flushed 2-phase
/// commit, and this handle committed or found the file clean. The write is not synced: lost, the
/// header keeps the recovery flag, which the next writer's open clears as after a killed writer
/// (redb loads the recorded allocator state; it rebuilds it only when no commit recorded one).
/// A handle that compacted leaves the close to redb (compaction's commits record no allocator
/// state).
///
/// A handle that did not commit and found the file unclean leaves the close to redb when no other
/// writer is live: the flag is then a killed writer's, which redb's close clears, and a reader
/// refuses a flagged file with no writer live. Beside a live writer (one holding redb's
/// consistent byte), the flag is that writer's mark, the file's latest commit is another
/// handle's and recorded the allocator state: redb's close would only repeat it, trim the file
/// and clear a flag the live writer sets again, with three syncs and the writer byte taken from
/// the other writers meanwhile. The backend refuses the writer byte to it and writes nothing;
/// the file stays as this handle found it, whose open rewrote the header unchanged.
#[derive(Debug, Default)]
pub(crate) struct Closing {
    started: AtomicBool,
    committed: AtomicBool,
    compacted: AtomicBool,
}

impl Closing {
    /// The store is dropping its database: from now on the writer byte is refused to redb.
    pub(crate) fn start(&self) {
        self.started.store(true, Ordering::SeqCst);
    }

    /// A commit of this handle returned.
    pub(crate) fn committed(&self) {
        self.committed.store(true, Ordering::SeqCst);
    }

    /// This handle compacted the file: redb's own close runs.
    pub(crate) fn compacted(&self) {
        self.compacted.store(true, Ordering::SeqCst);
    }

    fn replaces_redbs(&self) -> bool {
        self.started.load(Ordering::SeqCst)
            && !self.compacted.load(Ordering::SeqCst)
            && !std::thread::panicking()
    }
}

/// What a writer's close does (see [`Closing`]).
enum CloseWay {
    /// redb's own close: its allocator-state commit, trim and clean header.
    Redbs,
    /// The clean header, written by this backend: the handle committed or found the file clean.
    CleanHeader,
    /// Nothing: the handle did neither, and another writer is live.
    Nothing,
}

impl<B: StorageBackend> FlagSyncs<B> {
    pub(crate) fn new(inner: B) -> Self {
        FlagSyncs {
            inner,
            pending: Mutex::new(Pending::default()),
            closing: Arc::default(),
            #[cfg(feature = "bugdrill")]
            skip_every_sync: std::sync::Arc::default(),
        }
    }

    /// The switch of the `durability-none` drill, set once the store exists (on the simulator's
    /// backend, the only one the drill plants its bug on).
    #[cfg(all(feature = "bugdrill", feature = "testing"))]
    pub(crate) fn drill_skips_every_sync(&self) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        std::sync::Arc::clone(&self.skip_every_sync)
    }

    /// How this handle closes, for the store to mark.
    pub(crate) fn closing(&self) -> Arc<Closing> {
        Arc::clone(&self.closing)
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
        let (Some(base), Some(latest)) = (&pending.base, &pending.written) else {
            return false;
        };
        !pending.other
            && only_safe_flags(base, latest)
            && self.file_header().is_some_and(|now| now == *latest)
    }

    /// How this handle's close goes (see [`Closing`]). Asks the file about other writers only
    /// for a handle that neither committed nor found the file clean.
    fn close_way(&self) -> CloseWay {
        if !self.closing.replaces_redbs() {
            return CloseWay::Redbs;
        }
        if self.closing.committed.load(Ordering::SeqCst) || self.pending().found_clean == Some(true)
        {
            return CloseWay::CleanHeader;
        }
        let byte = Bound::Included(REDB_CONSISTENT_BYTE);
        match self.inner.query_lock_range(byte, byte) {
            Ok(true) => CloseWay::Nothing,
            _ => CloseWay::Redbs,
        }
    }

    /// The clean header of a close that replaces redb's (see [`Closing`]); a close that cannot
    /// take the writer byte or the header lock, or finds the file not as this handle left it,
    /// writes nothing and leaves the recovery flag for the next open.
    fn write_clean_header(&self) {
        let writer = (Bound::Included(REDB_WRITER_BYTE), Bound::Included(REDB_WRITER_BYTE));
        if !matches!(self.inner.try_lock_range(writer.0, writer.1), Ok(true)) {
            return;
        }
        let header_lock = (Bound::Included(0), Bound::Excluded(REDB_HEADER_LOCK_END));
        if self.inner.lock_range(header_lock.0, header_lock.1).is_ok() {
            let written = self.pending().written.clone();
            // The planted bug: the header this handle wrote last, whatever the file holds now.
            #[cfg(feature = "bugdrill")]
            let file = if crate::kernel::drill::is(crate::kernel::drill::Drill::CloseHeaderStale) {
                written.clone()
            } else {
                self.file_header()
            };
            #[cfg(not(feature = "bugdrill"))]
            let file = self.file_header();
            if let Some(header) = file.filter(|header| written.as_ref() == Some(header)) {
                if let Some(clean) = cleared(&header) {
                    // Unsynced by design (see `Closing`); an error leaves the flag set.
                    let _ = self.inner.write(0, &clean);
                }
            }
            let _ = self.inner.unlock_range(header_lock.0, header_lock.1);
        }
        let _ = self.inner.unlock_range(writer.0, writer.1);
    }
}

/// `header` with its recovery flag cleared, when it has one to clear over a flushed 2-phase
/// primary slot.
fn cleared(header: &[u8]) -> Option<Vec<u8>> {
    let flags = *header.get(FLAGS_AT)?;
    let clearable = header.len() == REDB_HEADER_BYTES
        && flags & RECOVERY_REQUIRED != 0
        && flags & PRIMARY_UNFLUSHED == 0
        && flags & TWO_PHASE_COMMIT != 0;
    clearable.then(|| {
        let mut clean = header.to_vec();
        clean[FLAGS_AT] = flags & !RECOVERY_REQUIRED;
        clean
    })
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
        let skip = self.skip_every_sync.load(std::sync::atomic::Ordering::SeqCst)
            || self.skippable(&pending)
            || (crate::kernel::drill::is(crate::kernel::drill::Drill::HeaderSyncsSkipped)
                && !pending.other
                && pending.base.is_some());
        #[cfg(not(feature = "bugdrill"))]
        let skip = self.skippable(&pending);
        if skip {
            return Ok(());
        }
        self.inner.sync_data()?;
        *pending = Pending {
            written: pending.written.take(),
            found_clean: pending.found_clean,
            ..Pending::default()
        };
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
            if pending.found_clean.is_none() {
                let flags = pending.base.as_ref().and_then(|base| base.get(FLAGS_AT).copied());
                pending.found_clean =
                    Some(flags.is_some_and(|f| f & (RECOVERY_REQUIRED | PRIMARY_UNFLUSHED) == 0));
            }
            pending.written = Some(data.to_vec());
        } else {
            pending.other = true;
        }
        self.inner.write(offset, data)
    }
    fn close(&self) -> Io<()> {
        if matches!(self.close_way(), CloseWay::CleanHeader) {
            self.write_clean_header();
        }
        self.inner.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Lock<bool> {
        // redb's close asks for the writer byte to commit its allocator state and write its clean
        // header; refused, it does neither, and this backend's close writes the header instead
        // (or, beside a live writer, nothing).
        let writer = Bound::Included(REDB_WRITER_BYTE);
        if start == writer && end == writer && !matches!(self.close_way(), CloseWay::Redbs) {
            return Ok(false);
        }
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
mod tests {
    use std::ops::Bound;
    use std::sync::{Arc, Mutex};

    use redb::{
        ConcurrencyMode, Database, ReadableDatabase, ReadableTable, StorageBackend, TableDefinition,
    };

    use super::*;

    /// A file in memory that counts the syncs that reach it; every lock is granted (one process).
    #[derive(Debug, Clone, Default)]
    struct Counted(Arc<Mutex<(Vec<u8>, u64)>>);

    impl Counted {
        fn syncs(&self) -> u64 {
            self.0.lock().unwrap().1
        }
    }

    impl StorageBackend for Counted {
        fn len(&self) -> Io<u64> {
            Ok(self.0.lock().unwrap().0.len() as u64)
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> Io<()> {
            let file = self.0.lock().unwrap();
            let start = usize::try_from(offset).unwrap();
            let bytes = file.0.get(start..start + out.len()).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end")
            })?;
            out.copy_from_slice(bytes);
            Ok(())
        }
        fn set_len(&self, len: u64) -> Io<()> {
            self.0.lock().unwrap().0.resize(usize::try_from(len).unwrap(), 0);
            Ok(())
        }
        fn sync_data(&self) -> Io<()> {
            self.0.lock().unwrap().1 += 1;
            Ok(())
        }
        fn write(&self, offset: u64, data: &[u8]) -> Io<()> {
            let mut file = self.0.lock().unwrap();
            let start = usize::try_from(offset).unwrap();
            if file.0.len() < start + data.len() {
                file.0.resize(start + data.len(), 0);
            }
            file.0[start..start + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn try_lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Lock<bool> {
            Ok(true)
        }
        fn try_lock_shared_range(&self, _: Bound<u64>, _: Bound<u64>) -> Lock<bool> {
            Ok(true)
        }
        fn lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Lock<()> {
            Ok(())
        }
        fn lock_shared_range(&self, _: Bound<u64>, _: Bound<u64>) -> Lock<()> {
            Ok(())
        }
        fn unlock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Lock<()> {
            Ok(())
        }
        fn query_lock_range(&self, _: Bound<u64>, _: Bound<u64>) -> Lock<bool> {
            Ok(false)
        }
    }

    const TABLE: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("t");

    fn multi_writer() -> redb::Builder {
        let mut builder = Database::builder();
        builder.set_concurrency_mode(ConcurrencyMode::MultiWriter);
        builder
    }

    /// One hook call on `backend`: open, one committed write, clean close.
    fn one_call(backend: impl StorageBackend, n: u64) {
        let db = multi_writer().create_with_backend(backend).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE).unwrap().insert(n, b"a hook's record".as_slice()).unwrap();
        txn.commit().unwrap();
    }

    fn header(flags: u8) -> Vec<u8> {
        let mut header = vec![0u8; REDB_HEADER_BYTES];
        header[..FLAGS_AT].copy_from_slice(b"redb\x1a\n\xa9\r\n");
        header[FLAGS_AT] = flags;
        header[100] = 7;
        header
    }

    /// A backend holding `base` as its header, wrapped.
    fn holding(base: &[u8]) -> (Counted, FlagSyncs<Counted>) {
        let file = Counted::default();
        file.write(0, base).unwrap();
        file.write(8192, &[1; 4096]).unwrap();
        (file.clone(), FlagSyncs::new(file))
    }

    #[test]
    fn a_call_skips_the_open_and_close_flag_syncs_and_its_commits_stay() {
        let (plain, wrapped) = (Counted::default(), Counted::default());
        one_call(plain.clone(), 0);
        one_call(FlagSyncs::new(wrapped.clone()), 0);
        let created = (plain.syncs(), wrapped.syncs());
        for n in 1..=3 {
            one_call(plain.clone(), n);
            one_call(FlagSyncs::new(wrapped.clone()), n);
        }
        let per_call = ((plain.syncs() - created.0) / 3, (wrapped.syncs() - created.1) / 3);
        println!("flag_syncs per_call_plain={} per_call_wrapped={}", per_call.0, per_call.1);
        // The open's recovery mark and the close's sync before its clean header are skipped.
        assert_eq!(per_call.1 + 2, per_call.0, "{per_call:?}");
        // The file the wrapper left is what redb left: the same rows, a clean close.
        let db = multi_writer().create_with_backend(wrapped.clone()).unwrap();
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(TABLE).unwrap();
        for n in 0..=3 {
            assert_eq!(table.get(n).unwrap().unwrap().value(), b"a hook's record");
        }
        drop((table, txn, db));
        assert_eq!(wrapped.0.lock().unwrap().0[FLAGS_AT] & RECOVERY_REQUIRED, 0);
    }

    #[test]
    fn only_a_set_recovery_flag_or_a_cleared_unflushed_flag_is_skipped() {
        let cases: [(u8, u8, bool); 7] = [
            (0b0101, 0b0111, true),  // the open's mark
            (0b1111, 0b0111, true),  // the unflushed flag cleared
            (0b1101, 0b0111, true),  // both
            (0b0111, 0b0101, false), // the recovery flag cleared: the clean close
            (0b0111, 0b1111, false), // a primary marked unflushed: a commit's
            (0b0101, 0b0100, false), // the primary slot swapped
            (0b0101, 0b0001, false), // the two-phase flag
        ];
        for (before, after, skipped) in cases {
            let (file, wrapped) = holding(&header(before));
            wrapped.write(0, &header(after)).unwrap();
            wrapped.sync_data().unwrap();
            assert_eq!(file.syncs(), u64::from(!skipped), "{before:#06b} -> {after:#06b}");
        }
    }

    #[test]
    fn a_sync_runs_after_a_slot_change_a_page_write_a_grown_file_or_another_writers_header() {
        let mark = |file: &FlagSyncs<Counted>| file.write(0, &header(0b0111)).unwrap();
        // A slot byte changed beside the flag.
        let (file, wrapped) = holding(&header(0b0101));
        let mut slot = header(0b0111);
        slot[100] = 8;
        wrapped.write(0, &slot).unwrap();
        wrapped.sync_data().unwrap();
        assert_eq!(file.syncs(), 1, "slot changed");
        // A page written.
        let (file, wrapped) = holding(&header(0b0101));
        mark(&wrapped);
        wrapped.write(8192, &[2; 4096]).unwrap();
        wrapped.sync_data().unwrap();
        assert_eq!(file.syncs(), 1, "page written");
        // The file grown; a trim is not a reason.
        let (file, wrapped) = holding(&header(0b0101));
        mark(&wrapped);
        wrapped.set_len(16384).unwrap();
        wrapped.sync_data().unwrap();
        assert_eq!(file.syncs(), 1, "file grown");
        let (file, wrapped) = holding(&header(0b1111));
        wrapped.write(0, &header(0b0111)).unwrap();
        wrapped.set_len(4096).unwrap();
        wrapped.sync_data().unwrap();
        assert_eq!(file.syncs(), 0, "file trimmed");
        // Another process wrote the header after this handle did.
        let (file, wrapped) = holding(&header(0b0101));
        mark(&wrapped);
        file.write(0, &header(0b1111)).unwrap();
        wrapped.sync_data().unwrap();
        assert_eq!(file.syncs(), 1, "header written by another process");
        // Nothing written by this handle: a sync made for a dead writer's header.
        let (file, wrapped) = holding(&header(0b1111));
        wrapped.sync_data().unwrap();
        assert_eq!(file.syncs(), 1, "nothing written");
        // A skipped change still counts against the header before it: clearing the recovery flag
        // afterwards is the clean close, which syncs.
        let (file, wrapped) = holding(&header(0b0101));
        mark(&wrapped);
        wrapped.sync_data().unwrap();
        wrapped.write(0, &header(0b0101)).unwrap();
        wrapped.sync_data().unwrap();
        assert_eq!(file.syncs(), 0, "back to the synced header: nothing to lose");
        let (file, wrapped) = holding(&header(0b1111));
        wrapped.write(0, &header(0b0111)).unwrap();
        wrapped.sync_data().unwrap();
        wrapped.write(0, &header(0b0101)).unwrap();
        wrapped.sync_data().unwrap();
        assert_eq!(file.syncs(), 1, "the clean header after a skipped flag change");
    }

    /// A writer's handle on `file` with row `n` committed, marked committed as `store::redb`
    /// marks it.
    fn committed(file: &Counted, n: u64) -> (Database, Arc<Closing>) {
        let backend = FlagSyncs::new(file.clone());
        let closing = backend.closing();
        let db = multi_writer().create_with_backend(backend).unwrap();
        commit_row(&db, &closing, n);
        (db, closing)
    }

    /// One hook call whose close replaces redb's, as `store::redb` runs it: open, one committed
    /// write, the close marked started, the database dropped.
    fn replaced_call(file: &Counted, n: u64) {
        let (db, closing) = committed(file, n);
        closing.start();
        drop(db);
    }

    fn flags(file: &Counted) -> u8 {
        file.0.lock().unwrap().0[FLAGS_AT]
    }

    fn rows(file: &Counted) -> Vec<u64> {
        rows_of(&multi_writer().create_with_backend(file.clone()).unwrap())
    }

    fn rows_of(db: &impl ReadableDatabase) -> Vec<u64> {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(TABLE).unwrap();
        let rows = table.iter().unwrap().map(|row| row.unwrap().0.value()).collect();
        drop((table, txn));
        rows
    }

    #[test]
    fn a_replaced_close_costs_no_sync_and_leaves_a_clean_file_that_opens_fast() {
        let file = Counted::default();
        one_call(FlagSyncs::new(file.clone()), 0);
        let (syncs, len) = (file.syncs(), file.len().unwrap());
        for n in 1..=20 {
            replaced_call(&file, n);
            // A reader beside no live writer refuses a file with the recovery flag set.
            assert_eq!(flags(&file) & RECOVERY_REQUIRED, 0, "call {n}");
        }
        let per_call = (file.syncs() - syncs) / 20;
        println!(
            "flag_syncs replaced_close per_call={per_call} len={len}->{}",
            file.len().unwrap()
        );
        // The commit's two syncs, nothing of the open's or the close's.
        assert_eq!(per_call, 2);
        assert!(multi_writer().open_read_only_with_backend(file.clone()).is_ok());
        assert_eq!(rows(&file), (0..=20).collect::<Vec<_>>());
        // No trim, so no regrowth either: the file stays within the length redb's closes leave
        // for the same rows, give or take a region's allocation.
        let plain = Counted::default();
        for n in 0..=20 {
            one_call(plain.clone(), n);
        }
        let (ours, redbs) = (file.len().unwrap(), plain.len().unwrap());
        assert!(ours <= redbs * 2, "{ours} bytes against redb's {redbs}");
    }

    #[test]
    fn a_close_after_another_handles_commit_leaves_its_header_alone() {
        let file = Counted::default();
        one_call(FlagSyncs::new(file.clone()), 0);
        let (db, closing) = committed(&file, 1);
        // Another handle commits after this one; its header is the file's now.
        let (other, second_closing) = committed(&file, 2);
        let after_second = file.0.lock().unwrap().0[..REDB_HEADER_BYTES].to_vec();
        closing.start();
        drop(db);
        assert_eq!(file.0.lock().unwrap().0[..REDB_HEADER_BYTES], after_second[..]);
        second_closing.start();
        drop(other);
        assert_eq!(flags(&file) & RECOVERY_REQUIRED, 0);
        assert_eq!(rows(&file), vec![0, 1, 2]);
    }

    #[test]
    fn redb_closes_a_file_its_handle_found_unclean_and_did_not_commit_to_or_compacted() {
        // Found unclean (a killed writer's flag), no commit: redb's close, a clean file.
        let file = Counted::default();
        one_call(FlagSyncs::new(file.clone()), 0);
        file.0.lock().unwrap().0[FLAGS_AT] |= RECOVERY_REQUIRED;
        let backend = FlagSyncs::new(file.clone());
        let closing = backend.closing();
        let db = multi_writer().create_with_backend(backend).unwrap();
        let before = file.syncs();
        closing.start();
        drop(db);
        assert!(file.syncs() > before, "redb's close syncs");
        assert_eq!(flags(&file) & RECOVERY_REQUIRED, 0);
        // Compacted: redb's close, whose allocator-state commit the compaction's commits lack.
        let (mut db, closing) = committed(&file, 1);
        closing.compacted();
        db.compact().unwrap();
        let before = file.syncs();
        closing.start();
        drop(db);
        assert!(file.syncs() > before, "redb's close syncs");
        assert_eq!(flags(&file) & RECOVERY_REQUIRED, 0);
        assert_eq!(rows(&file), vec![0, 1]);
    }

    /// A writer's handle on the file at `path` through redb's file backend: its locks are the
    /// file's own (OFD locks), so two handles in this process are two processes to each other.
    fn on_file(path: &std::path::Path) -> (Database, Arc<Closing>) {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap();
        let backend = FlagSyncs::new(redb::backends::FileBackend::new(file).unwrap());
        let closing = backend.closing();
        (multi_writer().create_with_backend(backend).unwrap(), closing)
    }

    fn commit_row(db: &Database, closing: &Closing, n: u64) {
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE).unwrap().insert(n, b"a hook's record".as_slice()).unwrap();
        txn.commit().unwrap();
        closing.committed();
    }

    /// A call that opens the store for writing and commits nothing: its transaction aborts.
    fn call_without_a_commit(path: &std::path::Path) {
        let (db, closing) = on_file(path);
        drop(db.begin_write().unwrap());
        closing.start();
        drop(db);
    }

    fn file_header(path: &std::path::Path) -> Vec<u8> {
        std::fs::read(path).unwrap()[..REDB_HEADER_BYTES].to_vec()
    }

    fn rows_on_file(path: &std::path::Path) -> Vec<u64> {
        let file = std::fs::File::open(path).unwrap();
        let backend = redb::backends::FileBackend::new(file).unwrap();
        rows_of(&multi_writer().open_read_only_with_backend(backend).unwrap())
    }

    #[test]
    fn a_call_beside_a_live_writer_that_commits_nothing_leaves_the_file_as_it_found_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        // A live writer (a server) holding the file, with a committed row.
        let (server, server_closing) = on_file(&path);
        commit_row(&server, &server_closing, 0);
        let found = file_header(&path);
        assert_ne!(found[FLAGS_AT] & RECOVERY_REQUIRED, 0, "the live writer's mark");
        let len = std::fs::metadata(&path).unwrap().len();
        // Calls beside it that commit nothing (a claim with nothing to claim): no allocator-state
        // commit, no trim, no clean header: the file's bytes stay the live writer's.
        for _ in 0..3 {
            call_without_a_commit(&path);
            assert_eq!(file_header(&path), found, "the header changed");
            assert_eq!(std::fs::metadata(&path).unwrap().len(), len, "the file was trimmed");
        }
        // The server goes on, and its own close leaves a clean file that a reader opens.
        commit_row(&server, &server_closing, 1);
        server_closing.start();
        drop(server);
        assert_eq!(file_header(&path)[FLAGS_AT] & RECOVERY_REQUIRED, 0);
        assert_eq!(rows_on_file(&path), vec![0, 1]);
        // A call that opened beside a live writer which then left closes with no writer live:
        // the file ends clean either way.
        let (server, server_closing) = on_file(&path);
        commit_row(&server, &server_closing, 2);
        let (call, call_closing) = on_file(&path);
        server_closing.start();
        drop(server);
        call_closing.start();
        drop(call);
        assert_eq!(file_header(&path)[FLAGS_AT] & RECOVERY_REQUIRED, 0);
        assert_eq!(rows_on_file(&path), vec![0, 1, 2]);
    }

    #[test]
    fn only_a_flushed_two_phase_header_with_the_recovery_flag_is_cleared() {
        assert_eq!(cleared(&header(0b0111)), Some(header(0b0101)));
        assert_eq!(cleared(&header(0b0110)), Some(header(0b0100)));
        assert_eq!(cleared(&header(0b0101)), None, "already clean");
        assert_eq!(cleared(&header(0b1111)), None, "primary unflushed");
        assert_eq!(cleared(&header(0b0011)), None, "not a 2-phase primary");
        assert_eq!(cleared(&header(0b0111)[..100]), None, "not a whole header");
    }
}
