//! The redb backend: with the two backends beside it (`bounded`, `scratch`) and a replay's spill
//! table (`spill`), the only code that imports redb.
//!
//! Opens files handed to it (already opened safely by `store::dir`), in `MultiWriter` mode with
//! `Durability::Immediate`, and converts every redb error into `Error` here. Does not choose
//! paths or create files.

use std::fs::File;
use std::thread;
use std::time::{Duration, Instant};

use hookstate_schema::format::{BLOBS_TABLE, BLOB_KEYS, LOG_TABLE, META_TABLE, VIEWS_TABLE};
use std::ops::Bound;
use std::sync::atomic::Ordering;

use redb::backends::FileBackend;
use redb::{
    ConcurrencyMode, Database, Durability, ReadableDatabase, ReadableTable, StorageBackend,
    TableDefinition, TransactionError,
};

/// The storage seam a test backend implements (for the `testing` feature's
/// `hookstate_engine::open_on_backend`).
#[cfg(feature = "testing")]
pub use redb::StorageBackend as Backend;

use crate::kernel::call::store_clock;
use crate::kernel::error::{Error, Result};
use crate::kernel::limits::{CACHE_BYTES, READ_ONLY_REPAIR_WAIT_MS, READ_TORN_RETRIES};
use crate::kernel::storage::{EventVisitor, ReadTxn, RowVisitor, WriteTxn};
use crate::store::bounded::{backoff, bounded, convert, REDB_HEADER_LOCK_END};
use crate::store::flag_syncs::{Closing, FlagSyncs};
use crate::store::scratch::ScratchBackend;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new(LOG_TABLE);
const VIEWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new(VIEWS_TABLE);
const META: TableDefinition<&str, &[u8]> = TableDefinition::new(META_TABLE);
const BLOBS: TableDefinition<&str, &[u8]> = TableDefinition::new(BLOBS_TABLE);

/// A redb database file in multi-writer mode, opened for writing or only for reading.
pub(crate) struct RedbStore {
    /// A writer on a [`FlagSyncs`] backend: how its close runs (see [`Closing`]). Declared
    /// before `db`, so it drops first: the close is marked started before redb's runs.
    closing: Option<StartsClose>,
    db: Db,
}

/// Marks a writer's close started when it drops (see [`Closing`]).
struct StartsClose(std::sync::Arc<Closing>);

impl Drop for StartsClose {
    fn drop(&mut self) {
        self.0.start();
    }
}

enum Db {
    Write(Database),
    /// A read-only handle shares the file with writers and never writes, not even the header.
    Read(redb::ReadOnlyDatabase),
    /// An empty store in memory, the stand-in for an absent store that a read sees: written once
    /// when it is initialised, never after.
    Empty(Database),
    /// `verify`'s view: the file through a copy-on-write overlay (`store::scratch`), checked by
    /// redb's full integrity check, with a reader's transaction on the real file pinning the
    /// pages it reads. Never writes the file.
    Scratch {
        db: Database,
        _pin: Option<(redb::ReadOnlyDatabase, redb::ReadTransaction)>,
    },
}

fn builder(check_integrity: bool) -> redb::Builder {
    let mut builder = Database::builder();
    builder
        .set_concurrency_mode(ConcurrencyMode::MultiWriter)
        .set_check_integrity_on_open(check_integrity)
        .set_cache_size(CACHE_BYTES);
    builder
}

fn waited_ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl RedbStore {
    /// Initializes a new database in `file`, which must be empty, with its tables and `meta`.
    pub(crate) fn create_in(file: File, meta: &[(&str, &[u8])]) -> Result<Self> {
        RedbStore::create_on(FileBackend::new(file).map_err(convert)?, meta)
    }

    /// Initializes a new database on an empty `backend` with its tables and `meta`.
    fn create_on(backend: impl StorageBackend, meta: &[(&str, &[u8])]) -> Result<Self> {
        RedbStore::create_with(&builder(false), backend, meta)
    }

    fn create_with(
        builder: &redb::Builder,
        backend: impl StorageBackend,
        meta: &[(&str, &[u8])],
    ) -> Result<Self> {
        let db = builder.create_with_backend(backend).map_err(convert)?;
        let store = RedbStore { db: Db::Write(db), closing: None };
        let mut txn = store.begin_write(Instant::now() + Duration::from_secs(1))?;
        for (key, value) in meta {
            txn.put_meta(key, value)?;
        }
        txn.clear_views()?;
        txn.events(1, 0, &mut |_, _| Ok(false))?;
        txn.commit()?;
        Ok(store)
    }

    /// An empty database in memory with its tables and `meta`, which refuses writes afterwards.
    pub(crate) fn empty(meta: &[(&str, &[u8])]) -> Result<Self> {
        // Single-writer mode: the in-memory backend has no file locks, and no other process
        // can reach it.
        let memory = redb::backends::InMemoryBackend::new();
        let store = RedbStore::create_with(&Database::builder(), memory, meta)?;
        Ok(store.into_empty())
    }

    /// A database in memory with its tables and `meta`, filled by `fill` in one transaction,
    /// which refuses writes afterwards (an as-of view of a store).
    pub(crate) fn in_memory_filled(
        meta: &[(&str, &[u8])],
        fill: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<()>,
    ) -> Result<Self> {
        let memory = redb::backends::InMemoryBackend::new();
        let store = RedbStore::create_with(&Database::builder(), memory, meta)?;
        let mut txn = store.begin_write(Instant::now() + Duration::from_secs(1))?;
        fill(&mut *txn)?;
        txn.commit()?;
        Ok(store.into_empty())
    }

    /// This store's database, made read-only (an in-memory store once filled).
    fn into_empty(self) -> Self {
        match self.db {
            Db::Write(db) => RedbStore { db: Db::Empty(db), closing: self.closing },
            other => RedbStore { db: other, closing: self.closing },
        }
    }

    /// Opens an existing, non-empty database file. Every lock wait, including the writer lock
    /// redb takes while opening, ends after `wait` with [`Error::Busy`].
    pub(crate) fn open(file: &File, check_integrity: bool, wait: Duration) -> Result<Self> {
        let start = Instant::now();
        let (backend, timed_out, _) = bounded(file, wait, false)?;
        let backend = FlagSyncs::new(backend);
        let closing = Some(StartsClose(backend.closing()));
        match builder(check_integrity).create_with_backend(backend) {
            Ok(db) => Ok(RedbStore { db: Db::Write(db), closing }),
            Err(_) if timed_out.load(Ordering::SeqCst) => {
                Err(Error::Busy { waited_ms: waited_ms(start) })
            }
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                Err(Error::Busy { waited_ms: waited_ms(start) })
            }
            Err(other) => Err(convert(other)),
        }
    }

    /// Opens the database on `backend`, or creates it there with `meta` when the backend is
    /// empty and `meta` is given: the seam the power-loss simulator opens its images through.
    #[cfg(feature = "testing")]
    pub(crate) fn on_backend(
        backend: impl StorageBackend,
        meta: Option<&[(&str, &[u8])]>,
        check_integrity: bool,
    ) -> Result<Self> {
        let backend = FlagSyncs::new(backend);
        let closing = backend.closing();
        // The planted bug: once the store exists (a real store is created, synced and published
        // before any drill can touch it), commits return without a sync.
        #[cfg(feature = "bugdrill")]
        let skip = backend.drill_skips_every_sync();
        let store = match meta {
            Some(meta) if backend.len().map_err(|e| convert(redb::StorageError::from(e)))? == 0 => {
                RedbStore::create_on(backend, meta)
            }
            _ => match builder(check_integrity).create_with_backend(backend) {
                Ok(db) => Ok(RedbStore { db: Db::Write(db), closing: None }),
                Err(err) => Err(convert(err)),
            },
        }
        .map(|mut store| {
            store.closing = Some(StartsClose(closing));
            store
        });
        #[cfg(feature = "bugdrill")]
        skip.store(
            crate::kernel::drill::is(crate::kernel::drill::Drill::DurabilityNone),
            Ordering::SeqCst,
        );
        store
    }

    /// Opens an existing database file for reading only: a reader's locks, never a write, and
    /// never a wait for a writer (see [`BoundedBackend`]).
    ///
    /// redb refuses a read-only open while the file's recovery flag is set without a live writer:
    /// for a moment while another process is opening it for writing, and for good after a writer
    /// was killed before its clean close. The refusal is retried for at most
    /// [`READ_ONLY_REPAIR_WAIT_MS`] (bounded by `wait`); `Ok(None)` then means the file needs a
    /// repair that only a writer can do.
    pub(crate) fn open_read_only(file: &File, wait: Duration) -> Result<Option<Self>> {
        let start = Instant::now();
        let repair_wait = wait.min(Duration::from_millis(READ_ONLY_REPAIR_WAIT_MS));
        let (mut attempt, mut torn) = (0, 0);
        loop {
            let (backend, timed_out, lockless) = bounded(file, wait, true)?;
            match builder(false).open_read_only_with_backend(backend) {
                Ok(db) => return Ok(Some(RedbStore { db: Db::Read(db), closing: None })),
                Err(_) if timed_out.load(Ordering::SeqCst) => {
                    return Err(Error::Busy { waited_ms: waited_ms(start) })
                }
                Err(redb::DatabaseError::RepairAborted) if start.elapsed() < repair_wait => {
                    thread::sleep(backoff(attempt));
                    attempt += 1;
                }
                Err(redb::DatabaseError::RepairAborted) => return Ok(None),
                // A header read without its lock raced a header write: read it again.
                Err(ref err)
                    if lockless.load(Ordering::SeqCst)
                        && torn < READ_TORN_RETRIES
                        && is_torn_header(err) =>
                {
                    torn += 1;
                    thread::sleep(backoff(torn));
                }
                Err(other) => return Err(convert(other)),
            }
        }
    }
}

impl RedbStore {
    /// Takes the single write transaction, waiting at most until `deadline`.
    pub(crate) fn begin_write(&self, deadline: Instant) -> Result<Box<dyn WriteTxn + '_>> {
        Ok(Box::new(self.take_write(deadline)?))
    }

    /// [`RedbStore::begin_write`], owned: a redb transaction borrows nothing, so a server's
    /// writer may hold it across a batch of calls.
    pub(crate) fn begin_batch(&self, deadline: Instant) -> Result<Box<dyn WriteTxn + Send>> {
        Ok(Box::new(self.take_write(deadline)?))
    }

    fn take_write(&self, deadline: Instant) -> Result<RedbWrite> {
        let Db::Write(db) = &self.db else {
            return Err(Error::ReadOnly);
        };
        let start = Instant::now();
        let mut attempt = 0;
        let mut txn = loop {
            match db.try_begin_write() {
                Ok(txn) => break txn,
                Err(TransactionError::WouldBlock) if Instant::now() < deadline => {
                    thread::sleep(backoff(attempt));
                    attempt += 1;
                }
                Err(TransactionError::WouldBlock) => {
                    return Err(Error::Busy { waited_ms: waited_ms(start) })
                }
                Err(other) => return Err(convert(other)),
            }
        };
        txn.set_durability(Durability::Immediate)
            .map_err(|e| Error::Store(Box::new(redb::Error::from(e))))?;
        txn.set_quick_repair(true);
        let closing = self.closing.as_ref().map(|close| std::sync::Arc::clone(&close.0));
        let clock_ms = store_clock(crate::kernel::call::now_ms(), last_event_ms(&txn));
        Ok(RedbWrite { txn, closing, clock_ms })
    }

    /// Compacts the file (redb takes the writer lock and the header lock for it); `false` when
    /// there was nothing to give back or the handle cannot write.
    pub(crate) fn compact_file(&mut self) -> Result<bool> {
        match &mut self.db {
            Db::Write(db) => {
                if let Some(closing) = &self.closing {
                    closing.0.compacted();
                }
                db.compact().map_err(|e| Error::Store(Box::new(redb::Error::from(e))))
            }
            _ => Ok(false),
        }
    }

    /// Opens a read snapshot.
    pub(crate) fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        let txn = match &self.db {
            Db::Write(db) | Db::Empty(db) | Db::Scratch { db, .. } => db.begin_read(),
            Db::Read(db) => db.begin_read(),
        }
        .map_err(convert)?;
        Ok(Box::new(RedbRead { txn }))
    }
}

impl RedbStore {
    /// Opens `file` through a copy-on-write view (`store::scratch`), so nothing is ever written
    /// to the file: a reader's transaction on the real file first (it pins the pages of the
    /// commit read next and of every later one), then the header, read once under redb's shared
    /// header lock, then redb's open on the view, with its full integrity check when
    /// `check_integrity` (verify). A file that needs a repair (a killed writer) is repaired in the
    /// view only: this is how a read serves such a file without writing it.
    ///
    /// # Errors
    /// [`Error::StoreCorrupt`] for a page that fails its checksum; IO and store errors.
    pub(crate) fn open_view(file: &File, wait: Duration, check_integrity: bool) -> Result<Self> {
        // A file that needs a repair has no live writer, so nothing moves its pages meanwhile.
        let pin = match RedbStore::open_read_only(file, wait)? {
            Some(RedbStore { db: Db::Read(db), .. }) => {
                let txn = db.begin_read().map_err(convert)?;
                Some((db, txn))
            }
            _ => None,
        };
        let header = read_header(file)?;
        let view = file.try_clone().map_err(|e| Error::io("duplicate handle of", "", e))?;
        let scratch =
            ScratchBackend::new(view, &header).map_err(|e| convert(redb::StorageError::from(e)))?;
        let mut builder = Database::builder();
        builder.set_check_integrity_on_open(check_integrity).set_cache_size(CACHE_BYTES);
        let db = builder.create_with_backend(scratch).map_err(convert)?;
        Ok(RedbStore { db: Db::Scratch { db, _pin: pin }, closing: None })
    }
}

#[cfg(test)]
impl RedbStore {
    /// Whether this is a view whose pages a reader's transaction on the real file pins.
    pub(crate) fn is_pinned_view(&self) -> bool {
        matches!(&self.db, Db::Scratch { _pin: Some(_), .. })
    }
}

/// Whether an open's error is one a header read without its lock may cause by racing a header
/// write: a slot that fails its checksum, or one whose roots fail `check_header_roots`.
fn is_torn_header(err: &redb::DatabaseError) -> bool {
    match err {
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(_)) => true,
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) => {
            io.kind() == std::io::ErrorKind::InvalidData
        }
        _ => false,
    }
}

/// The time of the log's last event, read in the write transaction that will append after it;
/// `None` for an empty log, or one whose last record cannot be read (the write path and `verify`
/// report that one).
fn last_event_ms(txn: &redb::WriteTransaction) -> Option<u64> {
    let log = txn.open_table(LOG).ok()?;
    let (_, record) = log.last().ok()??;
    let event = hookstate_schema::format::decode_event(record.value()).ok()?;
    Some(event.content.at_ms)
}

/// The header bytes of `file`, read under redb's shared header lock (taken within
/// [`READ_HEADER_WAIT_MS`], else read without it, as a reader does).
fn read_header(file: &File) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let (backend, _, _) = bounded(file, Duration::ZERO, true)?;
    let (start, end) = (Bound::Included(0), Bound::Excluded(REDB_HEADER_LOCK_END));
    backend.lock_shared_range(start, end).map_err(|e| convert(redb::StorageError::from(e)))?;
    let mut header = vec![0u8; usize::try_from(REDB_HEADER_LOCK_END).unwrap_or(0)];
    let read = file.read_exact_at(&mut header, 0);
    let _ = backend.unlock_range(start, end);
    read.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => convert(redb::StorageError::from(e)),
        _ => Error::io("read", "", e),
    })?;
    Ok(header)
}

struct RedbRead {
    txn: redb::ReadTransaction,
}

struct RedbWrite {
    txn: redb::WriteTransaction,
    closing: Option<std::sync::Arc<Closing>>,
    /// The host's clock, read once this transaction held the write lock and raised to the log's
    /// last event time when a step back put it behind that (`store_clock`): the time of every
    /// call it runs that does not pin its own (`Call::now_pinned`), so event times follow log
    /// order.
    clock_ms: u64,
}

/// Both transaction kinds open tables the same way; this runs the shared read logic on any
/// table type that can be read.
macro_rules! read_impl {
    ($ty:ty $(, $extra:item)*) => {
        impl ReadTxn for $ty {
            $($extra)*

            fn meta(&self, key: &str) -> Result<Option<Vec<u8>>> {
                // A checkpoint's rows in their own table, else where a store before format 5
                // keeps them.
                if BLOB_KEYS.contains(&key) {
                    match self.txn.open_table(BLOBS) {
                        Ok(table) => {
                            if let Some(value) = table.get(key).map_err(convert)? {
                                return Ok(Some(value.value().to_vec()));
                            }
                        }
                        Err(redb::TableError::TableDoesNotExist(_)) => {}
                        Err(other) => return Err(convert(other)),
                    }
                }
                let table = self.txn.open_table(META).map_err(convert)?;
                let value = table.get(key).map_err(convert)?;
                Ok(value.map(|v| v.value().to_vec()))
            }

            fn event(&self, seq: u64) -> Result<Option<Vec<u8>>> {
                let table = self.txn.open_table(LOG).map_err(convert)?;
                let value = table.get(seq).map_err(convert)?;
                Ok(value.map(|v| v.value().to_vec()))
            }

            fn events(&self, from: u64, to: u64, visit: &mut EventVisitor<'_>) -> Result<()> {
                visit_events(&self.txn.open_table(LOG).map_err(convert)?, from, to, visit)
            }

            fn view(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
                let table = self.txn.open_table(VIEWS).map_err(convert)?;
                let value = table.get(key).map_err(convert)?;
                Ok(value.map(|v| v.value().to_vec()))
            }

            fn views(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
                let table = self.txn.open_table(VIEWS).map_err(convert)?;
                keys.iter()
                    .map(|key| {
                        let value = table.get(*key).map_err(convert)?;
                        Ok(value.map(|v| v.value().to_vec()))
                    })
                    .collect()
            }

            fn views_with_prefix(&self, prefix: &[u8], visit: &mut RowVisitor<'_>) -> Result<()> {
                visit_prefix(&self.txn.open_table(VIEWS).map_err(convert)?, prefix, visit)
            }
        }
    };
}

/// Removes the records of a log table up to `seq`; returns how many were removed.
fn drop_through(table: &mut redb::Table<'_, u64, &'static [u8]>, seq: u64) -> Result<u64> {
    let mut dropped = 0u64;
    table
        .retain_in(..=seq, |_, _| {
            dropped += 1;
            false
        })
        .map_err(convert)?;
    Ok(dropped)
}

/// Visits the records of `from..=to` of a log table in order until `visit` returns `false`.
fn visit_events(
    table: &impl ReadableTable<u64, &'static [u8]>,
    from: u64,
    to: u64,
    visit: &mut EventVisitor<'_>,
) -> Result<()> {
    if from > to {
        return Ok(());
    }
    for row in table.range(from..=to).map_err(convert)? {
        let (seq, record) = row.map_err(convert)?;
        if !visit(seq.value(), record.value())? {
            break;
        }
    }
    Ok(())
}

/// Visits the rows of a views table whose key starts with `prefix`, in key order, until `visit`
/// returns `false`.
fn visit_prefix(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    prefix: &[u8],
    visit: &mut RowVisitor<'_>,
) -> Result<()> {
    for row in table.range(prefix..).map_err(convert)? {
        let (key, value) = row.map_err(convert)?;
        if !key.value().starts_with(prefix) || !visit(key.value(), value.value())? {
            break;
        }
    }
    Ok(())
}

read_impl!(
    RedbRead,
    fn shared(&self) -> Option<&(dyn ReadTxn + Sync)> {
        Some(self)
    },
    // Only a read snapshot can tell: a write transaction's `open_table` creates what is missing.
    fn check_tables(&self) -> Result<()> {
        self.txn.open_table(LOG).map_err(convert)?;
        self.txn.open_table(VIEWS).map_err(convert)?;
        Ok(())
    }
);
read_impl!(
    RedbWrite,
    fn clock_ms(&self) -> Option<u64> {
        Some(self.clock_ms)
    }
);

impl WriteTxn for RedbWrite {
    fn put_meta(&mut self, key: &str, value: &[u8]) -> Result<()> {
        let mut table = self.txn.open_table(META).map_err(convert)?;
        if BLOB_KEYS.contains(&key) {
            table.remove(key).map_err(convert)?;
            let mut blobs = self.txn.open_table(BLOBS).map_err(convert)?;
            blobs.insert(key, value).map_err(convert)?;
            return Ok(());
        }
        table.insert(key, value).map_err(convert)?;
        Ok(())
    }

    fn move_blobs(&mut self) -> Result<()> {
        let mut table = self.txn.open_table(META).map_err(convert)?;
        for key in BLOB_KEYS {
            let Some(value) = table.remove(key).map_err(convert)?.map(|v| v.value().to_vec())
            else {
                continue;
            };
            let mut blobs = self.txn.open_table(BLOBS).map_err(convert)?;
            blobs.insert(key, value.as_slice()).map_err(convert)?;
        }
        Ok(())
    }

    fn append_event(&mut self, seq: u64, record: &[u8]) -> Result<()> {
        let mut table = self.txn.open_table(LOG).map_err(convert)?;
        let previous = table.insert(seq, record).map_err(convert)?;
        assert!(previous.is_none(), "event {seq} appended twice");
        Ok(())
    }

    fn put_view(&mut self, key: &[u8], row: &[u8]) -> Result<()> {
        let mut table = self.txn.open_table(VIEWS).map_err(convert)?;
        table.insert(key, row).map_err(convert)?;
        Ok(())
    }

    fn delete_view(&mut self, key: &[u8]) -> Result<()> {
        let mut table = self.txn.open_table(VIEWS).map_err(convert)?;
        table.remove(key).map_err(convert)?;
        Ok(())
    }

    fn write_views(&mut self, changes: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        let mut table = self.txn.open_table(VIEWS).map_err(convert)?;
        write_rows(&mut table, changes).map_err(convert)
    }

    fn clear_views(&mut self) -> Result<()> {
        self.txn.delete_table(VIEWS).map_err(convert)?;
        self.txn.open_table(VIEWS).map_err(convert)?;
        Ok(())
    }

    fn drop_events_through(&mut self, seq: u64) -> Result<u64> {
        drop_through(&mut self.txn.open_table(LOG).map_err(convert)?, seq)
    }

    fn with_tables(&mut self, body: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<()>) -> Result<()> {
        let mut tables = RedbTables {
            clock_ms: self.clock_ms,
            log: self.txn.open_table(LOG).map_err(convert)?,
            views: self.txn.open_table(VIEWS).map_err(convert)?,
            meta: self.txn.open_table(META).map_err(convert)?,
        };
        body(&mut tables)
    }

    fn commit(self: Box<Self>) -> Result<()> {
        self.txn.commit().map_err(convert)?;
        if let Some(closing) = &self.closing {
            closing.committed();
        }
        Ok(())
    }
}

/// A checkpoint's rows asked for inside one call's tables, which do not hold their table: no
/// call reads or writes them (checkpoint, compaction and copies use the transaction itself).
fn blob_in_call(key: &str) -> Error {
    Error::Invalid(format!("meta {key:?} is not among a call's tables"))
}

/// The three tables of a write transaction, each opened once for one call's reads and writes
/// ([`WriteTxn::with_tables`]): redb's `open_table` looks the table up in its table tree and its
/// handle writes the root back when dropped, which per row read or written was a tenth of a
/// claim's CPU inside a group commit.
struct RedbTables<'t> {
    /// The transaction's clock ([`RedbWrite::clock_ms`]).
    clock_ms: u64,
    log: redb::Table<'t, u64, &'static [u8]>,
    views: redb::Table<'t, &'static [u8], &'static [u8]>,
    meta: redb::Table<'t, &'static str, &'static [u8]>,
}

impl ReadTxn for RedbTables<'_> {
    fn clock_ms(&self) -> Option<u64> {
        Some(self.clock_ms)
    }

    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>> {
        if BLOB_KEYS.contains(&key) {
            return Err(blob_in_call(key));
        }
        let value = self.meta.get(key).map_err(convert)?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    fn event(&self, seq: u64) -> Result<Option<Vec<u8>>> {
        let value = self.log.get(seq).map_err(convert)?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    fn events(&self, from: u64, to: u64, visit: &mut EventVisitor<'_>) -> Result<()> {
        visit_events(&self.log, from, to, visit)
    }

    fn view(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let value = self.views.get(key).map_err(convert)?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    fn views_with_prefix(&self, prefix: &[u8], visit: &mut RowVisitor<'_>) -> Result<()> {
        visit_prefix(&self.views, prefix, visit)
    }
}

impl WriteTxn for RedbTables<'_> {
    fn put_meta(&mut self, key: &str, value: &[u8]) -> Result<()> {
        if BLOB_KEYS.contains(&key) {
            return Err(blob_in_call(key));
        }
        self.meta.insert(key, value).map_err(convert)?;
        Ok(())
    }

    fn append_event(&mut self, seq: u64, record: &[u8]) -> Result<()> {
        let previous = self.log.insert(seq, record).map_err(convert)?;
        assert!(previous.is_none(), "event {seq} appended twice");
        Ok(())
    }

    fn put_view(&mut self, key: &[u8], row: &[u8]) -> Result<()> {
        self.views.insert(key, row).map_err(convert)?;
        Ok(())
    }

    fn delete_view(&mut self, key: &[u8]) -> Result<()> {
        self.views.remove(key).map_err(convert)?;
        Ok(())
    }

    fn write_views(&mut self, changes: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        write_rows(&mut self.views, changes).map_err(convert)
    }

    fn clear_views(&mut self) -> Result<()> {
        self.views.retain(|_, _| false).map_err(convert)
    }

    fn drop_events_through(&mut self, seq: u64) -> Result<u64> {
        drop_through(&mut self.log, seq)
    }

    /// Already inside the tables' scope.
    fn with_tables(&mut self, body: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<()>) -> Result<()> {
        body(self)
    }

    /// Never reached: the scope hands its body `&mut dyn WriteTxn`, which cannot be moved out to
    /// commit; the transaction that opened the tables commits after the scope.
    fn commit(self: Box<Self>) -> Result<()> {
        Err(Error::Invalid("a transaction's tables cannot commit; the transaction does".into()))
    }
}

/// Sets (`Some`) or removes (`None`) rows of a bytes-to-bytes table, in order: the views table's
/// writes, and a replay's spill table's (`store::spill`).
pub(crate) fn write_rows(
    table: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    changes: &[(Vec<u8>, Option<Vec<u8>>)],
) -> std::result::Result<(), redb::StorageError> {
    for (key, row) in changes {
        match row {
            Some(row) => table.insert(key.as_slice(), row.as_slice())?,
            None => table.remove(key.as_slice())?,
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &std::path::Path) -> RedbStore {
        let path = dir.join("s.redb");
        let file = File::options().read(true).write(true).create_new(true).open(&path).unwrap();
        drop(RedbStore::create_in(file, &[("m", b"0")]).unwrap());
        let file = File::options().read(true).write(true).open(&path).unwrap();
        RedbStore::open(&file, false, Duration::from_secs(1)).unwrap()
    }

    fn rows(txn: &dyn ReadTxn, prefix: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        txn.views_with_prefix(prefix, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .unwrap();
        out
    }

    #[test]
    fn a_write_through_the_open_tables_reads_and_commits_as_one_through_the_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut txn = store.begin_write(deadline).unwrap();
        txn.put_view(b"a.1", b"before").unwrap();
        let mut runs = 0;
        txn.with_tables(&mut |t| {
            runs += 1;
            // The transaction's own writes before the scope are seen inside it.
            assert_eq!(t.view(b"a.1")?, Some(b"before".to_vec()));
            t.append_event(1, b"one")?;
            t.append_event(2, b"two")?;
            t.put_meta("m", b"1")?;
            t.write_views(&[
                (b"a.1".to_vec(), None),
                (b"a.2".to_vec(), Some(b"x".to_vec())),
                (b"a.3".to_vec(), Some(b"y".to_vec())),
                (b"b.1".to_vec(), Some(b"z".to_vec())),
            ])?;
            assert_eq!(t.meta("m")?, Some(b"1".to_vec()));
            assert_eq!(t.event(2)?, Some(b"two".to_vec()));
            assert_eq!(t.views(&[b"a.1", b"a.3"])?, vec![None, Some(b"y".to_vec())]);
            assert_eq!(rows(&*t, b"a.").len(), 2);
            let mut seen = Vec::new();
            t.events(1, 2, &mut |seq, _| {
                seen.push(seq);
                Ok(true)
            })?;
            assert_eq!(seen, vec![1, 2]);
            Ok(())
        })
        .unwrap();
        assert_eq!(runs, 1);
        // And the scope's writes are the transaction's after it.
        assert_eq!(txn.event(1).unwrap(), Some(b"one".to_vec()));
        txn.commit().unwrap();
        let read = store.begin_read().unwrap();
        assert_eq!(read.meta("m").unwrap(), Some(b"1".to_vec()));
        assert_eq!(
            rows(&*read, b"a."),
            vec![(b"a.2".to_vec(), b"x".to_vec()), (b"a.3".to_vec(), b"y".to_vec())]
        );
        assert_eq!(read.view(b"b.1").unwrap(), Some(b"z".to_vec()));
        assert_eq!(read.event(2).unwrap(), Some(b"two".to_vec()));
    }

    #[test]
    fn a_scope_that_fails_leaves_nothing_once_its_transaction_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let mut txn = store.begin_write(Instant::now() + Duration::from_secs(1)).unwrap();
        let failed = txn.with_tables(&mut |t| {
            t.put_view(b"k", b"v")?;
            t.append_event(1, b"one")?;
            Err(Error::Invalid("stop".into()))
        });
        assert!(matches!(failed, Err(Error::Invalid(_))));
        drop(txn);
        let read = store.begin_read().unwrap();
        assert_eq!(read.view(b"k").unwrap(), None);
        assert_eq!(read.event(1).unwrap(), None);
        // The tables are whole after a clear and a drop of events inside a scope.
        let mut txn = store.begin_write(Instant::now() + Duration::from_secs(1)).unwrap();
        txn.with_tables(&mut |t| {
            t.put_view(b"k", b"v")?;
            t.append_event(1, b"one")?;
            t.append_event(2, b"two")?;
            assert_eq!(t.drop_events_through(1)?, 1);
            t.clear_views()
        })
        .unwrap();
        txn.commit().unwrap();
        let read = store.begin_read().unwrap();
        assert_eq!(read.view(b"k").unwrap(), None);
        assert_eq!(read.event(1).unwrap(), None);
        assert_eq!(read.event(2).unwrap(), Some(b"two".to_vec()));
    }
}
