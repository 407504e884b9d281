//! The spill table of a replay (`kernel::storage::SpillRows`) as a private redb database in an
//! unnamed file: no durability, no locks another process could meet, no name left behind.
//!
//! Does not choose where the file lives (`store::dir` makes it) and does not know what the rows
//! are: bytes by bytes, in key order.

use std::fs::File;
use std::ops::Bound;

use redb::backends::FileBackend;
use redb::{Database, Durability, ReadOnlyTable, ReadableDatabase, TableDefinition};

use crate::kernel::error::Result;
use crate::kernel::limits::{SPILL_CACHE_BYTES, SPILL_CHUNK_ROWS};
use crate::kernel::storage::SpillRows;
use crate::store::bounded::convert;

const ROWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("spill");

/// The database, and a read view of its table kept until the next write.
pub(crate) struct RedbSpill {
    db: Database,
    reader: Option<ReadOnlyTable<&'static [u8], &'static [u8]>>,
}

impl RedbSpill {
    /// A new, empty spill table in `file`, which must be empty.
    pub(crate) fn create(file: File) -> Result<RedbSpill> {
        let mut builder = Database::builder();
        builder.set_cache_size(SPILL_CACHE_BYTES);
        let backend = FileBackend::new(file).map_err(convert)?;
        let db = builder.create_with_backend(backend).map_err(convert)?;
        let mut spill = RedbSpill { db, reader: None };
        spill.write(&[])?;
        Ok(spill)
    }

    /// The read view of the table as last written.
    fn reader(&mut self) -> Result<&ReadOnlyTable<&'static [u8], &'static [u8]>> {
        let reader = match self.reader.take() {
            Some(reader) => reader,
            None => self.db.begin_read().map_err(convert)?.open_table(ROWS).map_err(convert)?,
        };
        Ok(self.reader.insert(reader))
    }
}

impl SpillRows for RedbSpill {
    fn write(&mut self, rows: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        self.reader = None;
        let mut txn = self.db.begin_write().map_err(convert)?;
        txn.set_durability(Durability::None).map_err(convert)?;
        {
            let mut table = txn.open_table(ROWS).map_err(convert)?;
            for (key, row) in rows {
                match row {
                    Some(row) => {
                        table.insert(key.as_slice(), row.as_slice()).map_err(convert)?;
                    }
                    None => {
                        table.remove(key.as_slice()).map_err(convert)?;
                    }
                }
            }
        }
        txn.commit().map_err(convert)
    }

    fn get(&mut self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let table = self.reader()?;
        keys.iter()
            .map(|key| Ok(table.get(*key).map_err(convert)?.map(|v| v.value().to_vec())))
            .collect()
    }

    fn after(&mut self, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let table = self.reader()?;
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::with_capacity(limit.min(SPILL_CHUNK_ROWS));
        for entry in table.range::<&[u8]>((start, Bound::Unbounded)).map_err(convert)?.take(limit) {
            let (key, row) = entry.map_err(convert)?;
            out.push((key.value().to_vec(), row.value().to_vec()));
        }
        Ok(out)
    }
}
