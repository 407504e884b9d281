//! Audit: verify the chain from genesis, the anchors and the views (a scan against a rebuild,
//! and a point lookup of every row); rebuild views from the log (and upgrade an older format).
//!
//! Both walk the whole stored log once (from the checkpoint it was compacted to, if it was) and
//! project it into an in-memory map, so a stored view that a
//! replay would not produce is found. Does not repair anything but views.

use std::collections::BTreeMap;

use hookstate_schema::format::{
    self, encode_view_key, encode_view_row, Head, FORMAT_VERSION, META_DOMAIN_EVENTS, META_FORMAT,
};
use hookstate_schema::{ViewKey, ViewRow};

use crate::kernel::anchor::{self, AnchorState};
use crate::kernel::counts::Counts;
use crate::kernel::error::{Error, Result};
use crate::kernel::project::{self, Table};
use crate::kernel::storage::ReadTxn;
use crate::kernel::view::{decode_row, decode_stored, read_head};
use crate::kernel::write::Kernel;

/// What `verify` checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Events walked.
    pub events: u64,
    /// The head.
    pub head: Head,
    /// The anchor's seq, when an anchor file exists.
    pub anchor_seq: Option<u64>,
    /// The second anchor's seq, when one is kept and has a line.
    pub second_anchor_seq: Option<u64>,
    /// View rows compared with a rebuild, in a scan.
    pub views: u64,
    /// View rows found by a point lookup of their key.
    pub lookups: u64,
    /// Whether a missing anchor was written (`accept_missing_anchor`).
    pub re_anchored: bool,
    /// The checkpoint the chain was proved from, when the log was compacted (events up to it
    /// were dropped); `None`: proved from genesis.
    pub from_checkpoint: Option<u64>,
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
    /// The format the store was upgraded to, when it was older.
    pub upgraded_to: Option<u16>,
}

type Views = BTreeMap<ViewKey, ViewRow>;

/// Rows looked up (verify) or written (rebuild) per visit of the views table: bounds the keys and
/// rows held at once beside the rebuilt views.
const VIEW_CHUNK_ROWS: usize = 4096;

/// A rebuilt row with its encoded key, in the stored table's order.
type Expected<'v> = Vec<(Vec<u8>, &'v ViewKey, &'v ViewRow)>;

/// The rebuilt rows in the order of their encoded keys (the stored table's order).
fn expected(rebuilt: &Views) -> Expected<'_> {
    let mut expected = rebuilt.iter().map(|(k, v)| (encode_view_key(k), k, v)).collect::<Vec<_>>();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    expected
}

/// Walks the log from genesis to the head, checking every link, and projects it.
fn replay_chain(txn: &dyn ReadTxn, table: &Table, genesis: [u8; 32]) -> Result<Replayed> {
    let head = read_head(txn)?;
    let start = crate::ops::snapshot::log_start(txn, genesis)?;
    let (mut views, mut counts) = (start.views, start.counts);
    let mut expected = start.head;
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
        project::apply(table, &mut views, &event);
        counts[event.content.body.variant_index()] += 1;
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
    Ok(Replayed { head, views, counts, from_checkpoint: start.checkpoint })
}

/// What a replay of the stored log found.
struct Replayed {
    head: Head,
    views: Views,
    counts: Counts,
    /// The checkpoint the stored log starts after, when it was compacted.
    from_checkpoint: Option<u64>,
}

fn broken(seq: u64, why: &str) -> Error {
    Error::ChainBroken { seq, why: why.into() }
}

/// Compares the stored views with a rebuild; returns the number of rows compared.
fn compare_views(txn: &dyn ReadTxn, expected: &Expected<'_>) -> Result<u64> {
    let mut index = 0usize;
    txn.views_with_prefix(&[], &mut |key, row| {
        let (stored_key, stored_row) = decode_row(key, row)?;
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

/// Checks that every rebuilt row is found by a point lookup of its key, and equal: a scan can
/// agree with a rebuild while a damaged branch page routes lookups past rows (the rows every
/// reader and writer reaches by key). With `compare_views`, every stored row is then reachable.
fn check_lookups(txn: &dyn ReadTxn, expected: &Expected<'_>) -> Result<u64> {
    // The planted bug: verify trusts the scans and skips the lookups.
    #[cfg(feature = "bugdrill")]
    if crate::kernel::drill::is(crate::kernel::drill::Drill::VerifyScansOnly) {
        return Ok(0);
    }
    let mut found = 0u64;
    for chunk in expected.chunks(VIEW_CHUNK_ROWS) {
        let keys: Vec<&[u8]> = chunk.iter().map(|(bytes, _, _)| bytes.as_slice()).collect();
        for ((bytes, key, want), stored) in chunk.iter().zip(txn.views(&keys)?) {
            let Some(stored) = stored else {
                return Err(Error::ViewMismatch {
                    key: format!("{key:?} (in the table but not found by a lookup of its key)"),
                });
            };
            if decode_stored(key, bytes, &stored)? != **want {
                return Err(Error::ViewMismatch { key: format!("{key:?} (lookup)") });
            }
            found += 1;
        }
    }
    Ok(found)
}

/// What `verify` may do beyond checking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyOptions {
    /// A missing anchor on a store with events is accepted, and the anchor written at the head
    /// (the operator vouches for the store); without this it is a failure.
    pub accept_missing_anchor: bool,
}

/// Verifies the chain from genesis, the anchors outside the store, that the stored views equal
/// a rebuild of the log, and that every rebuilt row is found by a point lookup. Writes nothing,
/// except the anchor when `options.accept_missing_anchor` re-anchors a store.
///
/// # Errors
/// [`Error::ChainBroken`] naming the first bad seq, [`Error::AnchorMismatch`],
/// [`Error::AnchorMissing`], [`Error::ViewMismatch`], [`Error::Corrupt`] and store errors.
pub(crate) fn verify(kernel: &Kernel, options: VerifyOptions) -> Result<VerifyReport> {
    let anchors = kernel.read_anchors();
    let txn = kernel.begin_read()?;
    let Replayed { head, views, counts, from_checkpoint } =
        replay_chain(&*txn, kernel.table(), kernel.genesis())?;
    let states = kernel.check_anchors(&*txn, &head, anchors)?;
    if let Some(stored) = crate::kernel::counts::read(&*txn)? {
        if stored != counts {
            return Err(Error::Corrupt(format!(
                "the stored events per domain {stored:?} are not the log's {counts:?}"
            )));
        }
    }
    let expected = expected(&views);
    let compared = compare_views(&*txn, &expected)?;
    let lookups = check_lookups(&*txn, &expected)?;
    drop(expected);
    let missing = states.iter().find(|(_, state)| *state == AnchorState::Missing);
    let mut re_anchored = false;
    let required = kernel.storage().anchor_required();
    if let Some((path, _)) = missing.filter(|_| required && head.seq > 0) {
        if !options.accept_missing_anchor {
            return Err(anchor::missing(path, &head));
        }
        re_anchored = kernel.re_anchor(&head);
    }
    let seq_of = |state: &AnchorState| match state {
        AnchorState::At(seq) => Some(*seq),
        AnchorState::Missing => None,
    };
    let anchor_seq = states.first().and_then(|(_, state)| seq_of(state));
    let second_anchor_seq = states.get(1).and_then(|(_, state)| seq_of(state));
    Ok(VerifyReport {
        events: head.seq - from_checkpoint.map_or(0, |seq| seq + 1)
            + u64::from(from_checkpoint.is_some()),
        head,
        anchor_seq,
        second_anchor_seq,
        views: compared,
        lookups,
        re_anchored,
        from_checkpoint,
    })
}

/// Drops every view and recomputes it from the log, after checking the chain; a store of an
/// older format is upgraded (its views rewritten in this format, its version moved) in the same
/// transaction.
///
/// # Errors
/// [`Error::ChainBroken`] (nothing is changed then) and store errors.
pub(crate) fn rebuild(kernel: &Kernel) -> Result<RebuildReport> {
    let mut txn = kernel.begin_write()?;
    let Replayed { head, views, counts, .. } =
        replay_chain(&*txn, kernel.table(), kernel.genesis())?;
    txn.clear_views()?;
    txn.put_meta(META_DOMAIN_EVENTS, &crate::kernel::counts::encode(&counts))?;
    let mut chunk = Vec::with_capacity(VIEW_CHUNK_ROWS.min(views.len()));
    for (key, row) in &views {
        let key_bytes = encode_view_key(key);
        let row = encode_view_row(&key_bytes, row);
        chunk.push((key_bytes, Some(row)));
        if chunk.len() == VIEW_CHUNK_ROWS {
            txn.write_views(&chunk)?;
            chunk.clear();
        }
    }
    txn.write_views(&chunk)?;
    let upgraded = kernel.needs_upgrade();
    if upgraded {
        txn.put_meta(META_FORMAT, &FORMAT_VERSION.to_be_bytes())?;
    }
    if let Err(err) = txn.commit() {
        kernel.poison();
        return Err(err);
    }
    let stale_temps_removed = kernel.storage().remove_stale_temps()?;
    Ok(RebuildReport {
        events: head.seq,
        views: views.len() as u64,
        stale_temps_removed,
        upgraded_to: upgraded.then_some(FORMAT_VERSION),
    })
}
