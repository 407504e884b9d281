//! Audit: verify the chain from genesis, the anchor and the views; rebuild views from the log.
//!
//! Both walk the whole log once and project it into an in-memory map, so a stored view that a
//! replay would not produce is found. Does not repair anything but views.

use std::collections::BTreeMap;

use hookstate_schema::format::{
    self, decode_view_key, decode_view_row, encode_view_key, encode_view_row, Head,
};
use hookstate_schema::{ViewKey, ViewRow};

use crate::engine::{project_in_memory, read_head, Engine};
use crate::error::{Error, Result};
use crate::storage::ReadTxn;

/// What `verify` checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Events walked.
    pub events: u64,
    /// The head.
    pub head: Head,
    /// The anchor's seq, when an anchor file exists.
    pub anchor_seq: Option<u64>,
    /// View rows compared.
    pub views: u64,
}

/// What `rebuild` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildReport {
    /// Events replayed.
    pub events: u64,
    /// View rows written.
    pub views: u64,
    /// Temporary files of killed writers removed from beside the store.
    pub stale_temps_removed: u32,
}

type Views = BTreeMap<ViewKey, ViewRow>;

/// Walks the log from genesis to the head, checking every link, and projects it.
fn replay_chain(txn: &dyn ReadTxn, genesis: [u8; 32]) -> Result<(Head, Views)> {
    let head = read_head(txn)?;
    let mut views = Views::new();
    let mut expected = Head { seq: 0, hash: genesis };
    txn.events(1, head.seq, &mut |seq, bytes| {
        if seq != expected.seq + 1 {
            return Err(broken(expected.seq + 1, "event is missing"));
        }
        let event = format::decode_event(bytes).map_err(|e| broken(seq, &e.to_string()))?;
        if event.seq != seq {
            return Err(broken(seq, &format!("record claims seq {}", event.seq)));
        }
        if event.prev != expected.hash {
            return Err(broken(seq, "prev does not match the previous event's hash"));
        }
        project_in_memory(&mut views, &event);
        expected = Head { seq, hash: event.hash };
        Ok(true)
    })?;
    if expected.seq != head.seq {
        return Err(broken(expected.seq + 1, "event is missing"));
    }
    if expected.hash != head.hash {
        return Err(broken(head.seq, "stored head hash does not match the last event"));
    }
    let mut beyond = None;
    txn.events(head.seq.saturating_add(1), u64::MAX, &mut |seq, _| {
        beyond = Some(seq);
        Ok(false)
    })?;
    if let Some(seq) = beyond {
        return Err(broken(seq, "event lies beyond the stored head"));
    }
    Ok((head, views))
}

fn broken(seq: u64, why: &str) -> Error {
    Error::ChainBroken { seq, why: why.into() }
}

/// Compares the stored views with a rebuild; returns the number of rows compared.
fn compare_views(txn: &dyn ReadTxn, rebuilt: &Views) -> Result<u64> {
    let mut expected = rebuilt.iter().map(|(k, v)| (encode_view_key(k), k, v)).collect::<Vec<_>>();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    let mut index = 0usize;
    txn.views_with_prefix(&[], &mut |key, row| {
        let stored_key = decode_view_key(key).map_err(|e| Error::Corrupt(e.to_string()))?;
        let stored_row = decode_view_row(row).map_err(|e| Error::Corrupt(e.to_string()))?;
        match expected.get(index) {
            Some((bytes, want_key, want_row)) if bytes.as_slice() == key => {
                if **want_row != stored_row {
                    return Err(Error::ViewMismatch { key: format!("{want_key:?}") });
                }
            }
            Some((bytes, want_key, _)) if bytes.as_slice() < key => {
                return Err(Error::ViewMismatch { key: format!("{want_key:?} (missing)") });
            }
            _ => return Err(Error::ViewMismatch { key: format!("{stored_key:?} (extra)") }),
        }
        index += 1;
        Ok(true)
    })?;
    if let Some((_, key, _)) = expected.get(index) {
        return Err(Error::ViewMismatch { key: format!("{key:?} (missing)") });
    }
    Ok(index as u64)
}

impl Engine {
    /// Verifies the chain from genesis, the anchor outside the store, and that the stored views
    /// equal a rebuild of the log.
    ///
    /// # Errors
    /// [`Error::ChainBroken`] naming the first bad seq, [`Error::AnchorMismatch`],
    /// [`Error::ViewMismatch`], [`Error::Corrupt`] and store errors.
    pub fn verify(&self) -> Result<VerifyReport> {
        let txn = self.begin_read()?;
        let (head, views) = replay_chain(&*txn, self.genesis())?;
        let anchor_seq = self.check_anchor(&*txn, &head)?;
        let compared = compare_views(&*txn, &views)?;
        Ok(VerifyReport { events: head.seq, head, anchor_seq, views: compared })
    }

    fn check_anchor(&self, txn: &dyn ReadTxn, head: &Head) -> Result<Option<u64>> {
        let Some(text) = self.dir()?.read_anchor()? else {
            return Ok(None);
        };
        let mismatch = |why: String| Error::AnchorMismatch { why };
        let (store_id, anchored) =
            format::parse_anchor(&text).map_err(|e| mismatch(e.to_string()))?;
        if store_id != self.store_id {
            return Err(mismatch("the anchor belongs to another store".into()));
        }
        if anchored.seq > head.seq {
            return Err(mismatch(format!(
                "the anchor is at seq {} but the log ends at seq {}: the log was truncated or \
                 rolled back",
                anchored.seq, head.seq
            )));
        }
        let hash = if anchored.seq == 0 {
            self.genesis()
        } else {
            let bytes =
                txn.event(anchored.seq)?.ok_or_else(|| broken(anchored.seq, "event is missing"))?;
            format::decode_event(&bytes).map_err(|e| broken(anchored.seq, &e.to_string()))?.hash
        };
        if hash != anchored.hash {
            return Err(mismatch(format!(
                "event {} differs from the anchored hash: the log was rewritten",
                anchored.seq
            )));
        }
        Ok(Some(anchored.seq))
    }

    /// Drops every view and recomputes it from the log, after checking the chain.
    ///
    /// # Errors
    /// [`Error::ChainBroken`] (nothing is changed then) and store errors.
    pub fn rebuild(&self) -> Result<RebuildReport> {
        let mut txn = self.begin_write()?;
        let (head, views) = replay_chain(&*txn, self.genesis())?;
        txn.clear_views()?;
        for (key, row) in &views {
            txn.put_view(&encode_view_key(key), &encode_view_row(row))?;
        }
        if let Err(err) = txn.commit() {
            self.poison();
            return Err(err);
        }
        let stale_temps_removed = self.dir()?.remove_stale_temps()?;
        Ok(RebuildReport { events: head.seq, views: views.len() as u64, stale_temps_removed })
    }
}
