//! A store held in memory, built once and read-only afterwards: what an as-of read answers
//! from (the log replayed to a past seq, with its views).
//!
//! It has no anchor of its own: what vouches for its reads is the real store's anchors, which
//! the caller checks on the real store (an anchor of its own, at the head it was built at, only
//! agreed with itself, and had no event to agree with at a compaction's base), and the chain
//! checked while building it. Does not know what the events say; the caller fills it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hookstate_schema::format::STORE_ID_BYTES;

use crate::kernel::error::{Error, Result};
use crate::kernel::storage::{ReadTxn, Storage, WriteTxn};
use crate::kernel::write::initial_meta;

use super::redb::RedbStore;

/// A read-only store in memory standing for the store at `path` as of `head`.
struct MemoryStore {
    db: RedbStore,
    path: PathBuf,
    anchor_path: PathBuf,
}

/// Builds a store in memory with the identity `store_id`: `fill` writes its events, views and
/// head into the one transaction.
///
/// # Errors
/// `fill`'s errors; store errors.
pub(crate) fn memory_filled(
    path: &Path,
    anchor_path: &Path,
    store_id: &[u8; STORE_ID_BYTES],
    fill: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<()>,
) -> Result<Box<dyn Storage>> {
    let meta = initial_meta(store_id);
    let meta: Vec<(&str, &[u8])> = meta.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    let db = RedbStore::in_memory_filled(&meta, fill)?;
    Ok(Box::new(MemoryStore {
        db,
        path: path.to_path_buf(),
        anchor_path: anchor_path.to_path_buf(),
    }))
}

impl Storage for MemoryStore {
    fn path(&self) -> PathBuf {
        self.path.clone()
    }
    fn anchor_path(&self) -> PathBuf {
        self.anchor_path.clone()
    }
    fn read_anchor(&self) -> Result<Option<String>> {
        Ok(None)
    }
    fn anchor_required(&self) -> bool {
        false
    }
    fn update_anchors(
        &self,
        _: &[u8; STORE_ID_BYTES],
        _: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> Result<bool> {
        Err(Error::ReadOnly)
    }
    fn remove_stale_temps(&self) -> Result<u32> {
        Ok(0)
    }
    fn begin_write(&self, _: Instant) -> Result<Box<dyn WriteTxn + '_>> {
        Err(Error::ReadOnly)
    }
    fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        self.db.begin_read()
    }
}
