//! The head anchor's rules: what an anchor proves about the log a transaction sees ([`check`]),
//! and when a commit may move it ([`advance`]). One set of rules for every caller: the write path
//! refuses on a failed check, reads are marked, `verify` reports it.
//!
//! An anchor is the head (seq and hash) copied outside the store after a commit. It may lag the
//! log (a lost rename, a killed writer), it must never lead it, name another store, or disagree
//! with the event at its seq. Does not read or write files; the storage hands the text in.

use std::path::Path;

use hookstate_schema::format::{self, Head, STORE_ID_BYTES};

use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;

/// What one anchor says about the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AnchorState {
    /// There is no anchor file.
    Missing,
    /// The anchor agrees with the log, at this seq (at or behind the head).
    At(u64),
}

/// The store an anchor must belong to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity<'a> {
    /// The store's id.
    pub(crate) store_id: &'a [u8; STORE_ID_BYTES],
    /// Its genesis hash (the anchored hash of seq 0).
    pub(crate) genesis: [u8; 32],
}

fn mismatch(path: &Path, why: String) -> Error {
    Error::AnchorMismatch { why: format!("{}: {why}", path.display()) }
}

/// Checks the anchor `read` gave (its text, absent, or the error reading it) against the log
/// as `txn` sees it, whose head is `head`.
///
/// # Errors
/// [`Error::AnchorMismatch`] for an anchor that cannot be read or parsed, belongs to another
/// store, is ahead of the log, or names a hash the event at its seq does not have; store errors
/// reading that event.
pub(crate) fn check(
    identity: Identity<'_>,
    txn: &dyn ReadTxn,
    head: &Head,
    path: &Path,
    read: Result<Option<String>>,
) -> Result<AnchorState> {
    let text = match read {
        Ok(Some(text)) => text,
        Ok(None) => return Ok(AnchorState::Missing),
        // A mismatch the read found itself (a second anchor that went back) says so whole.
        Err(err @ Error::AnchorMismatch { .. }) => return Err(err),
        Err(err) => return Err(mismatch(path, format!("the anchor cannot be read ({err})"))),
    };
    let (store_id, anchored) = format::parse_anchor(&text)
        .map_err(|e| mismatch(path, format!("the anchor does not parse ({e})")))?;
    if store_id != *identity.store_id {
        return Err(mismatch(
            path,
            "the anchor belongs to another store: the store file was replaced".into(),
        ));
    }
    if anchored.seq > head.seq {
        return Err(mismatch(
            path,
            format!(
                "the anchor is at seq {} but the log ends at seq {}: the log was truncated or \
                 rolled back",
                anchored.seq, head.seq
            ),
        ));
    }
    let hash = if anchored.seq == 0 {
        identity.genesis
    } else {
        let seq = anchored.seq;
        let bytes = txn
            .event(seq)?
            .ok_or_else(|| Error::ChainBroken { seq, why: "event is missing".into() })?;
        format::decode_event(&bytes)
            .map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?
            .hash
    };
    if hash != anchored.hash {
        return Err(mismatch(
            path,
            format!("event {} differs from the anchored hash: the log was rewritten", anchored.seq),
        ));
    }
    Ok(AnchorState::At(anchored.seq))
}

/// The refusal for a missing anchor on a store that holds events: the anchor was deleted (or
/// never written), so a rollback before this call cannot be ruled out.
pub(crate) fn missing(path: &Path, head: &Head) -> Error {
    Error::AnchorMissing { path: path.to_path_buf(), seq: head.seq }
}

/// The anchor text a commit that moved the head to `head` writes over `current`, or `None` to
/// leave it: an anchor is written when absent or behind, never moved backwards, never written
/// over one of another store or one that does not parse (that evidence stays for `verify`).
pub(crate) fn advance(
    current: Option<&str>,
    store_id: &[u8; STORE_ID_BYTES],
    head: &Head,
) -> Option<String> {
    let behind = match current.map(format::parse_anchor) {
        None => true,
        Some(Ok((id, anchored))) => id == *store_id && anchored.seq < head.seq,
        Some(Err(_)) => false,
    };
    behind.then(|| format::format_anchor(store_id, head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_moves_only_forward_and_only_its_own_store() {
        let ours = [1u8; STORE_ID_BYTES];
        let theirs = [2u8; STORE_ID_BYTES];
        let at = |seq: u64| Head { seq, hash: [u8::try_from(seq).unwrap(); 32] };
        let text = |id, seq| format::format_anchor(id, &at(seq));
        assert_eq!(advance(None, &ours, &at(0)), Some(text(&ours, 0)));
        assert_eq!(advance(Some(&text(&ours, 3)), &ours, &at(4)), Some(text(&ours, 4)));
        assert_eq!(advance(Some(&text(&ours, 4)), &ours, &at(4)), None, "not rewritten");
        assert_eq!(advance(Some(&text(&ours, 5)), &ours, &at(4)), None, "never backwards");
        assert_eq!(advance(Some(&text(&theirs, 1)), &ours, &at(4)), None, "never across stores");
        assert_eq!(advance(Some("garbage\n"), &ours, &at(4)), None, "evidence kept");
    }
}
