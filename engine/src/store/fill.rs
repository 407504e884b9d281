//! A new store built whole in one transaction (a restore from a dump, a backup of a live
//! store): made in a temporary file beside the target, published at the target's name only once
//! it is complete and synced, then anchored at its head.
//!
//! A failed build leaves nothing at the target. Does not know what the events say; the caller
//! fills the transaction.

use std::path::Path;
use std::time::{Duration, Instant};

use hookstate_schema::format::{format_anchor, Head, STORE_ID_BYTES};

use crate::kernel::error::{Error, Result};
use crate::kernel::storage::WriteTxn;
use crate::kernel::write::initial_meta;

use super::dir::StoreDir;
use super::redb::RedbStore;

/// How long the build waits for its own new file's write lock: nobody else can know its name.
const OWN_FILE_WAIT: Duration = Duration::from_secs(10);

/// Builds a new store at `path` with the identity `store_id`: `fill` writes its events, views
/// and head into the one transaction and returns the head, which the anchor beside the new
/// store is set to.
///
/// # Errors
/// [`Error::Invalid`] when a store (or an anchor) is already at `path`; `fill`'s errors (nothing
/// is left at `path` then); IO and store errors.
pub(crate) fn create_filled(
    path: &Path,
    store_id: &[u8; STORE_ID_BYTES],
    fill: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Head>,
) -> Result<Head> {
    let dir = StoreDir::open(path, true)?;
    let exists = || Error::bad(format!("target {}", path.display()), "exists: name a new store");
    if dir.open_store(true)?.is_some() || dir.read_anchor()?.is_some() {
        return Err(exists());
    }
    let (file, temp) = dir.create_temp("create")?;
    let built = build(&dir, file, store_id, fill);
    let head = match built {
        Ok(head) => head,
        Err(err) => {
            let _ = dir.remove(&temp);
            return Err(err);
        }
    };
    if !dir.publish_store(&temp)? {
        return Err(exists());
    }
    if let Some(_lock) = dir.lock_anchors()? {
        dir.write_anchor(&format_anchor(store_id, &head))?;
    }
    Ok(head)
}

fn build(
    dir: &StoreDir,
    file: std::fs::File,
    store_id: &[u8; STORE_ID_BYTES],
    fill: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Head>,
) -> Result<Head> {
    let keep = file.try_clone().map_err(|e| Error::io("duplicate handle of", dir.path(), e))?;
    let meta = initial_meta(store_id);
    let meta: Vec<(&str, &[u8])> = meta.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    let store = RedbStore::create_in(file, &meta)?;
    let mut txn = store.begin_write(Instant::now() + OWN_FILE_WAIT)?;
    let head = fill(&mut *txn)?;
    txn.commit()?;
    drop(store);
    keep.sync_all().map_err(|e| Error::io("fsync", dir.path(), e))?;
    Ok(head)
}
