//! View access: the rows a projection reads and writes ([`ViewAccess`]), the overlay of the rows
//! one event touches on the live write path ([`Overlay`]), and point reads of stored rows and of
//! the head inside a transaction.
//!
//! Does not know any domain's rows; `doc.rs` adds typed documents on top. No IO beyond the
//! transaction it is handed.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};

use hookstate_schema::format::{
    decode_head, decode_view_key, decode_view_row, encode_view_key, Head, META_HEAD,
};
use hookstate_schema::{ViewKey, ViewRow};
use serde::Serialize;

use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;

/// Row access for a projection.
pub(crate) trait ViewAccess {
    /// The current row, if any.
    fn get(&self, key: &ViewKey) -> Option<&ViewRow>;
    /// Sets a row.
    fn put(&mut self, key: ViewKey, row: ViewRow);
    /// Removes a row.
    fn delete(&mut self, key: &ViewKey);
    /// Writes `doc` as the row of `key`: encoded at once (what this default does), or, in a
    /// replay, kept decoded in place of the row and encoded only when the row is read, moved to
    /// the spill table or compared, so that events editing one large document in turn
    /// ([`ViewAccess::edit_kept`]) neither decode nor encode it each time.
    fn put_kept(&mut self, key: ViewKey, doc: Box<dyn KeptDoc>) {
        self.put(key, doc.row());
    }
    /// Edits in place the document a replay keeps as the row of `key` ([`ViewAccess::put_kept`]),
    /// when there is one and `edit` takes it (it answers whether it did). Answers whether the row
    /// was edited; never, but in a replay.
    fn edit_kept(&mut self, _key: &ViewKey, _edit: &mut dyn FnMut(&mut dyn Any) -> bool) -> bool {
        false
    }
}

/// A decoded document that can stand for its row ([`ViewAccess::put_kept`]).
pub(crate) trait KeptDoc: Send + Sync {
    /// The row the document is stored as.
    fn row(&self) -> ViewRow;
    /// The document, for [`ViewAccess::edit_kept`] to downcast.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Serialize + Send + Sync + 'static> KeptDoc for T {
    fn row(&self) -> ViewRow {
        ViewRow::Doc {
            json: serde_json::to_string(self).expect("a schema struct serializes to JSON"),
        }
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl ViewAccess for BTreeMap<ViewKey, ViewRow> {
    fn get(&self, key: &ViewKey) -> Option<&ViewRow> {
        BTreeMap::get(self, key)
    }
    fn put(&mut self, key: ViewKey, row: ViewRow) {
        self.insert(key, row);
    }
    fn delete(&mut self, key: &ViewKey) {
        self.remove(key);
    }
}

/// The rows the events of one call read and write, each read from the store once (the first
/// event that names it) and written back once, after the last event. An event may touch only the
/// rows it named ([`Overlay::next_event`] starts a new event's list): touching any other row is a
/// bug in a projection's `touched_keys`, and panics rather than write a view that a rebuild would
/// not produce, even when an earlier event of the call loaded that row.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    rows: BTreeMap<ViewKey, Option<ViewRow>>,
    dirty: BTreeMap<ViewKey, ()>,
    /// The rows the current event named.
    named: BTreeSet<ViewKey>,
}

impl Overlay {
    /// Starts the next event: it may touch only the rows it names from now on.
    pub(crate) fn next_event(&mut self) {
        self.named.clear();
    }

    /// Records the stored value of a touched row (kept as it is when already held), and names
    /// it for the current event.
    pub(crate) fn preload(&mut self, key: ViewKey, row: Option<ViewRow>) {
        self.named.insert(key.clone());
        self.rows.entry(key).or_insert(row);
    }

    /// Names a row already held for the current event.
    pub(crate) fn name(&mut self, key: ViewKey) {
        self.named.insert(key);
    }

    /// Whether a row is already loaded.
    pub(crate) fn has(&self, key: &ViewKey) -> bool {
        self.rows.contains_key(key)
    }

    /// The rows changed since loading, with their new values (`None` = deleted).
    pub(crate) fn changes(&self) -> impl Iterator<Item = (&ViewKey, Option<&ViewRow>)> {
        self.dirty.keys().map(|key| (key, self.rows.get(key).and_then(Option::as_ref)))
    }
}

impl ViewAccess for Overlay {
    fn get(&self, key: &ViewKey) -> Option<&ViewRow> {
        assert!(
            self.named.contains(key),
            "projection read {key:?}, which touched_keys did not name"
        );
        self.rows.get(key).and_then(Option::as_ref)
    }
    fn put(&mut self, key: ViewKey, row: ViewRow) {
        assert!(self.named.contains(&key), "projection wrote unnamed {key:?}");
        self.dirty.insert(key.clone(), ());
        self.rows.insert(key, Some(row));
    }
    fn delete(&mut self, key: &ViewKey) {
        assert!(self.named.contains(key), "projection deleted unnamed {key:?}");
        self.dirty.insert(key.clone(), ());
        self.rows.insert(key.clone(), None);
    }
}

/// The head (last seq and hash) as the transaction sees it.
///
/// # Errors
/// [`Error::Corrupt`] when the head is missing or does not decode; store errors.
pub(crate) fn read_head(txn: &dyn ReadTxn) -> Result<Head> {
    let bytes = txn.meta(META_HEAD)?.ok_or_else(|| Error::Corrupt("the head is missing".into()))?;
    decode_head(&bytes).map_err(|e| Error::Corrupt(e.to_string()))
}

/// One stored view row, checked against its checksum: a damaged row is an error, never served.
///
/// # Errors
/// [`Error::Corrupt`] when the row fails its checksum or does not decode; store errors.
pub(crate) fn read_row(txn: &dyn ReadTxn, key: &ViewKey) -> Result<Option<ViewRow>> {
    let key_bytes = encode_view_key(key);
    let Some(bytes) = txn.view(&key_bytes)? else {
        return Ok(None);
    };
    decode_stored(key, &key_bytes, &bytes).map(Some)
}

/// Names `keys` for the overlay's current event, reading the rows it does not hold yet in one
/// visit of the views table (each checked as [`read_row`] checks one).
///
/// # Errors
/// As [`read_row`].
pub(crate) fn preload_rows(
    txn: &dyn ReadTxn,
    overlay: &mut Overlay,
    keys: Vec<ViewKey>,
) -> Result<()> {
    let mut wanted: Vec<ViewKey> = Vec::with_capacity(keys.len());
    for key in keys {
        if overlay.has(&key) {
            overlay.name(key);
        } else if !wanted.contains(&key) {
            wanted.push(key);
        }
    }
    if wanted.is_empty() {
        return Ok(());
    }
    let encoded: Vec<Vec<u8>> = wanted.iter().map(encode_view_key).collect();
    let stored = txn.views(&encoded.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
    for ((key, key_bytes), bytes) in wanted.into_iter().zip(&encoded).zip(stored) {
        let row = match bytes {
            Some(bytes) => Some(decode_stored(&key, key_bytes, &bytes)?),
            None => None,
        };
        overlay.preload(key, row);
    }
    Ok(())
}

/// Decodes and checks the stored row of `key` (encoded `key_bytes`).
///
/// # Errors
/// [`Error::Corrupt`] when the row fails its checksum or does not decode.
pub(crate) fn decode_stored(key: &ViewKey, key_bytes: &[u8], bytes: &[u8]) -> Result<ViewRow> {
    decode_view_row(key_bytes, bytes).map_err(|e| Error::Corrupt(format!("view {key:?}: {e}")))
}

/// Decodes a stored row met in a scan (its key and its checked value).
///
/// # Errors
/// [`Error::Corrupt`] when the key does not decode or the row fails its checksum or does not
/// decode.
pub(crate) fn decode_row(key: &[u8], row: &[u8]) -> Result<(ViewKey, ViewRow)> {
    let view_key = decode_view_key(key).map_err(|e| Error::Corrupt(format!("view key: {e}")))?;
    let view_row =
        decode_view_row(key, row).map_err(|e| Error::Corrupt(format!("view {view_key:?}: {e}")))?;
    Ok((view_key, view_row))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ViewKey {
        ViewKey::Record { scope: "s".into(), key: name.into() }
    }

    fn row(value: &str) -> ViewRow {
        ViewRow::Record { value: value.into(), rev: 1 }
    }

    #[test]
    fn a_shared_overlay_keeps_what_earlier_events_wrote_and_reads_each_row_once() {
        let mut overlay = Overlay::default();
        overlay.next_event();
        overlay.preload(key("a"), None);
        overlay.put(key("a"), row("1"));
        overlay.next_event();
        assert!(overlay.has(&key("a")), "held: not read from the store again");
        // A stored value met again does not replace what the call wrote.
        overlay.preload(key("a"), Some(row("stale")));
        assert_eq!(overlay.get(&key("a")), Some(&row("1")));
        overlay.delete(&key("a"));
        let changes: Vec<_> = overlay.changes().collect();
        assert_eq!(changes, vec![(&key("a"), None)]);
    }

    #[test]
    #[should_panic(expected = "which touched_keys did not name")]
    fn an_event_may_not_read_a_row_only_an_earlier_event_named() {
        let mut overlay = Overlay::default();
        overlay.next_event();
        overlay.preload(key("a"), Some(row("1")));
        overlay.next_event();
        overlay.preload(key("b"), None);
        let _ = overlay.get(&key("a"));
    }

    #[test]
    #[should_panic(expected = "projection wrote unnamed")]
    fn an_event_may_not_write_a_row_only_an_earlier_event_named() {
        let mut overlay = Overlay::default();
        overlay.next_event();
        overlay.preload(key("a"), None);
        overlay.next_event();
        overlay.put(key("a"), row("2"));
    }
}
