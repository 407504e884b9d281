//! Copying a store into another place or onto another backend (`hookstate copy`): the log record
//! by record, at the same seqs and with the same bytes, so with the same hashes; the views
//! rebuilt from it; the destination's anchors moved to its head; then the destination verified.
//!
//! The destination is a new store with the source's identity (its store id, so its genesis),
//! written in one transaction: it holds the whole copy or nothing. Does not change the source.

use std::path::{Path, PathBuf};

use hookstate_schema::format::{Head, META_CHECKPOINT, META_CHECKPOINT_VIEWS};

use crate::audit::{self, VerifyOptions};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::{ReadTxn, WriteTxn};
use crate::kernel::view::read_head;
use crate::kernel::write::Kernel;
use crate::store::{self, OpenOptions};

/// What `copy` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    /// Events copied.
    pub events: u64,
    /// The head of both stores.
    pub head: Head,
    /// View rows rebuilt in the destination.
    pub views: u64,
    /// The destination, as it may be shown (an address without its password).
    pub to: PathBuf,
}

/// Copies the store of `source` into a new store at `to` (opened with `options`), checking every
/// link of the chain on the way, and verifies the destination.
///
/// # Errors
/// [`Error::Invalid`] for a destination that exists or holds events; [`Error::ChainBroken`] for
/// a source whose chain does not verify (nothing is committed then); what verifying the
/// destination finds; store errors of either side.
pub(crate) fn copy(source: &Kernel, to: &Path, options: OpenOptions) -> Result<CopyReport> {
    let read = source.begin_read()?;
    let head = read_head(&*read)?;
    let wait = options.wait()?;
    let (mut views, mut events) = (0, 0);
    let mut fill = |txn: &mut dyn WriteTxn| {
        (views, events) = fill_copy(source, &*read, &head, txn)?;
        Ok(head)
    };
    let dest = match store::remote_address(to) {
        // On PostgreSQL the destination's tables are made, then filled in one transaction.
        Some(_) => {
            let storage = store::open_for_copy(to, &options, source.store_id())?;
            let dest = Kernel::new(storage, source.table(), wait)?;
            let mut txn = dest.begin_write()?;
            fill(&mut *txn)?;
            txn.commit()?;
            dest.move_anchors(&head, false);
            dest
        }
        // A file is built whole beside its name and published once complete, anchors and all,
        // as a restore's is: a killed copy leaves nothing, never an empty store under the
        // source's id.
        None => {
            let anchor_dir = options.anchor_dir.as_deref();
            store::create_filled(to, source.store_id(), anchor_dir, &mut fill)?;
            let opened = OpenOptions { create: false, read_only: false, ..options.clone() };
            Kernel::new(store::open(to, opened)?, source.table(), wait)?
        }
    };
    drop(read);
    if dest.genesis() != source.genesis() {
        return Err(Error::Corrupt("the copy does not carry the source's identity".into()));
    }
    let verified = audit::verify(&dest, VerifyOptions::default())?;
    if verified.head != head {
        return Err(Error::Corrupt("the verified copy does not end at the source's head".into()));
    }
    Ok(CopyReport { events, head, views, to: dest.path() })
}

/// Fills the new store's transaction with the source's log up to `head` (every link checked)
/// and the views rebuilt from it; returns the view rows written and the events copied.
fn fill_copy(
    source: &Kernel,
    read: &dyn ReadTxn,
    head: &Head,
    txn: &mut dyn WriteTxn,
) -> Result<(u64, u64)> {
    let start = read_head(txn)?;
    if start.seq != 0 {
        return Err(Error::Invalid(format!("the destination already holds {} events", start.seq)));
    }
    // A compacted log starts after its base: the copy starts there too, from the base's views
    // (checked against the digest its record holds), and keeps the base beside the log, and the
    // latest checkpoint, as a backup does.
    let start = crate::ops::snapshot::log_start(read, source.genesis())?;
    let base = start.head.seq;
    let (reached, views) =
        crate::ops::snapshot::copy_log(read, start, head.seq, source.table(), txn)?;
    if reached != *head {
        return Err(Error::ChainBroken {
            seq: reached.seq + 1,
            why: "the log ends before the stored head".into(),
        });
    }
    for key in [META_CHECKPOINT, META_CHECKPOINT_VIEWS] {
        if let Some(value) = read.meta(key)? {
            txn.put_meta(key, &value)?;
        }
    }
    Ok((views, head.seq - base))
}
