//! The spill table of a replay (`kernel::storage::SpillRows`) as a private redb database in an
//! unnamed file: no durability, no locks another process could meet, no name left behind.
//!
//! Written by one thread while another reads it: a read view of the table is kept until the
//! next write commits. Never synced ([`Unsynced`]): nothing reads the file after the process.
//! Does not choose where the file lives (`store::dir` makes it) and does not know what the rows
//! are: bytes by bytes, in key order.

use std::fs::File;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use redb::backends::FileBackend;
use redb::{
    Database, Durability, ReadOnlyTable, ReadableDatabase, StorageBackend, TableDefinition,
};

use super::bounded::{BackendIoError, LockResult};
use crate::kernel::error::{Error, Result};
use crate::kernel::limits::{SPILL_CACHE_BYTES, SPILL_CHUNK_ROWS};
use crate::kernel::storage::SpillRows;

/// Any error of the spill table is a failing scratch file, never a damaged store: an IO error
/// (exit 6) that says which file.
fn convert(err: impl Into<redb::Error>) -> Error {
    let err: redb::Error = err.into();
    Error::io(
        "use",
        "the replay's spill table (an unnamed file beside the store)",
        std::io::Error::other(err),
    )
}

const ROWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("spill");

type Reader = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// redb's file backend without its syncs: the spill file has no name and no reader after this
/// process (a crash loses it with the replay that wrote it), so redb's syncs of its commits and
/// of its close (about half a second at 1M events) buy nothing.
#[derive(Debug)]
struct Unsynced(FileBackend);

type Io<T> = std::result::Result<T, BackendIoError>;

impl StorageBackend for Unsynced {
    fn len(&self) -> Io<u64> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Io<()> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Io<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Io<()> {
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Io<()> {
        self.0.write(offset, data)
    }
    fn close(&self) -> Io<()> {
        self.0.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<bool> {
        self.0.try_lock_range(start, end)
    }
    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<bool> {
        self.0.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<()> {
        self.0.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<()> {
        self.0.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<()> {
        self.0.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> LockResult<bool> {
        self.0.query_lock_range(start, end)
    }
}

/// The database, and a read view of its table kept until the next write.
pub(crate) struct RedbSpill {
    db: Database,
    reader: Mutex<Option<Reader>>,
}

impl RedbSpill {
    /// A new, empty spill table in `file`, which must be empty.
    pub(crate) fn create(file: File) -> Result<RedbSpill> {
        let mut builder = Database::builder();
        builder.set_cache_size(SPILL_CACHE_BYTES);
        let backend = Unsynced(FileBackend::new(file).map_err(convert)?);
        let db = builder.create_with_backend(backend).map_err(convert)?;
        let spill = RedbSpill { db, reader: Mutex::new(None) };
        spill.write(&[])?;
        Ok(spill)
    }

    fn lock(&self) -> Result<MutexGuard<'_, Option<Reader>>> {
        self.reader.lock().map_err(|_| Error::Store("a replay's spill thread panicked".into()))
    }

    /// Runs `read` on the read view of the table as last written.
    fn read<T>(&self, read: impl FnOnce(&Reader) -> Result<T>) -> Result<T> {
        let mut guard = self.lock()?;
        let reader = match guard.take() {
            Some(reader) => reader,
            None => self.db.begin_read().map_err(convert)?.open_table(ROWS).map_err(convert)?,
        };
        read(guard.insert(reader))
    }
}

impl SpillRows for RedbSpill {
    fn write(&self, rows: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        let mut txn = self.db.begin_write().map_err(convert)?;
        txn.set_durability(Durability::None).map_err(convert)?;
        {
            let mut table = txn.open_table(ROWS).map_err(convert)?;
            crate::store::redb::write_rows(&mut table, rows).map_err(convert)?;
        }
        txn.commit().map_err(convert)?;
        *self.lock()? = None;
        Ok(())
    }

    fn get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.read(|table| {
            keys.iter()
                .map(|key| Ok(table.get(*key).map_err(convert)?.map(|v| v.value().to_vec())))
                .collect()
        })
    }

    fn after(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.read(|table| {
            let start = after.map_or(Bound::Unbounded, Bound::Excluded);
            let mut out = Vec::with_capacity(limit.min(SPILL_CHUNK_ROWS));
            let range = table.range::<&[u8]>((start, Bound::Unbounded)).map_err(convert)?;
            for entry in range.take(limit) {
                let (key, row) = entry.map_err(convert)?;
                out.push((key.value().to_vec(), row.value().to_vec()));
            }
            Ok(out)
        })
    }
}
