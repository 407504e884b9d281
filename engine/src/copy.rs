//! Copying a store into another place or onto another backend (`hookstate copy`): the log record
//! by record, at the same seqs and with the same bytes, so with the same hashes; the views
//! rebuilt from it; the destination's anchors moved to its head; then the destination verified.
//!
//! The destination is a new store with the source's identity (its store id, so its genesis),
//! written in one transaction: it holds the whole copy or nothing. Does not change the source.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hookstate_schema::format::{
    self, encode_head, encode_view_key, encode_view_row, Head, META_DOMAIN_EVENTS, META_HEAD,
};
use hookstate_schema::{ViewKey, ViewRow, BODY_VARIANTS};

use crate::audit::{self, VerifyOptions};
use crate::kernel::counts;
use crate::kernel::error::{Error, Result};
use crate::kernel::project;
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
    let storage = store::open_for_copy(to, &options, source.store_id())?;
    let dest = Kernel::new(storage, source.table(), wait)?;
    assert_eq!(dest.genesis(), source.genesis(), "the destination takes the source's identity");
    let mut txn = dest.begin_write()?;
    let start = read_head(&*txn)?;
    if start.seq != 0 {
        return Err(Error::Invalid(format!(
            "the destination {} already holds {} events",
            dest.path().display(),
            start.seq
        )));
    }
    let mut views = BTreeMap::<ViewKey, ViewRow>::new();
    let mut counted: counts::Counts = [0; BODY_VARIANTS];
    let mut expected = Head { seq: 0, hash: dest.genesis() };
    read.events(1, head.seq, &mut |seq, bytes| {
        let broken = |why: &str| Error::ChainBroken { seq, why: why.into() };
        if seq != expected.seq + 1 {
            return Err(broken("event is missing"));
        }
        let event = format::decode_event(bytes).map_err(|e| broken(&e.to_string()))?;
        if event.seq != seq || event.prev != expected.hash {
            return Err(broken("the record does not follow the previous event"));
        }
        txn.append_event(seq, bytes)?;
        project::apply(source.table(), &mut views, &event);
        counted[event.content.body.variant_index()] += 1;
        expected = Head { seq, hash: event.hash };
        Ok(true)
    })?;
    if expected != head {
        return Err(Error::ChainBroken {
            seq: expected.seq + 1,
            why: "the log ends before the stored head".into(),
        });
    }
    for (key, row) in &views {
        let key_bytes = encode_view_key(key);
        txn.put_view(&key_bytes, &encode_view_row(&key_bytes, row))?;
    }
    txn.put_meta(META_DOMAIN_EVENTS, &counts::encode(&counted))?;
    txn.put_meta(META_HEAD, &encode_head(&head))?;
    txn.commit()?;
    drop(read);
    dest.move_anchors(&head, false);
    let verified = audit::verify(&dest, VerifyOptions::default())?;
    assert_eq!(verified.head, head, "the verified destination ends at the source's head");
    Ok(CopyReport { events: head.seq, head, views: views.len() as u64, to: dest.path() })
}
