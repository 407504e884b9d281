//! The views a replay of the whole log rebuilds (`verify`, `rebuild`), in bounded memory.
//!
//! Rows are held in memory until there are more than [`SPILL_HELD_ROWS_MAX`]; then a writer
//! thread moves them to the store's spill table ([`SpillRows`], an unnamed file beside the
//! store) while the replay goes on, and from there on each event first loads the rows it names
//! (`touched_keys`, then `derived_keys`, as the live write path does) from the held rows, the
//! rows in flight or the table, so memory holds at most twice the bound plus one event's rows
//! whatever the store holds. A store with no place for a spill table keeps every row in memory,
//! as before. The rebuilt rows come back in the stored table's order ([`RebuiltRows`]), encoded
//! as stored.
//!
//! Does not read the log or compare anything: `audit.rs` does.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use hookstate_schema::format::{decode_view_key, encode_view_key, encode_view_row};
use hookstate_schema::{Event, ViewKey, ViewRow};

use crate::kernel::error::{Error, Result};
use crate::kernel::key_filter::{Hashing, KeyFilter};
use crate::kernel::limits::{SPILL_CHUNK_ROWS, SPILL_FILTER_BITS};
use crate::kernel::project::{self, Table};
use crate::kernel::storage::{SpillRows, Storage};
use crate::kernel::view::{decode_stored, KeptDoc, ViewAccess};

/// A held row and whether it changed since it was loaded from the spill table.
struct Held {
    value: Value,
    dirty: bool,
}

/// What a held row holds.
enum Value {
    /// The row (`None`: deleted, over a spilled row).
    Row(Option<ViewRow>),
    /// The decoded document that stands for the row ([`ViewAccess::put_kept`]), and its
    /// encoding once something needed it.
    Kept(Box<dyn KeptDoc>, OnceLock<ViewRow>),
}

impl Held {
    fn clean(row: Option<ViewRow>) -> Held {
        Held { value: Value::Row(row), dirty: false }
    }

    fn changed(value: Value) -> Held {
        Held { value, dirty: true }
    }

    /// The row, encoding a kept document the first time it is asked for.
    fn row(&self) -> Option<&ViewRow> {
        match &self.value {
            Value::Kept(doc, encoded) => Some(encoded.get_or_init(|| doc.row())),
            Value::Row(row) => row.as_ref(),
        }
    }

    fn into_row(self) -> Option<ViewRow> {
        match self.value {
            Value::Kept(doc, encoded) => Some(encoded.into_inner().unwrap_or_else(|| doc.row())),
            Value::Row(row) => row,
        }
    }
}

type HeldRows = HashMap<ViewKey, Held, Hashing>;

/// Rows on their way to the spill table: a thread writes them while the replay goes on, and
/// until it is joined they are read from here.
struct InFlight {
    rows: Arc<HeldRows>,
    /// Answers the filter hashes of the rows it wrote.
    writer: JoinHandle<Result<Vec<u64>>>,
}

/// The spill table, a filter of the keys it may hold (a key it has never seen is not looked up,
/// as most keys an event names first, a new comment, a new item, an idempotency key, are not),
/// and the rows being written to it.
struct Spill {
    table: Arc<dyn SpillRows>,
    filter: KeyFilter,
    hashing: Hashing,
    in_flight: Option<InFlight>,
}

impl Spill {
    /// Waits for the rows in flight to be written, and adds their keys to the filter.
    fn land(&mut self) -> Result<()> {
        let Some(in_flight) = self.in_flight.take() else {
            return Ok(());
        };
        let hashes =
            in_flight.writer.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        for hash in hashes {
            self.filter.insert(hash);
        }
        Ok(())
    }
}

/// Encodes the changed rows of `rows` as the views table stores them and writes them to `table`
/// in key order; returns the filter hashes (by `hashing`) of the keys that now hold a row.
fn write_rows(table: &dyn SpillRows, rows: &HeldRows, hashing: &Hashing) -> Result<Vec<u64>> {
    let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = rows
        .iter()
        .filter(|(_, held)| held.dirty)
        .map(|(key, held)| {
            let key_bytes = encode_view_key(key);
            let row = held.row().map(|row| encode_view_row(&key_bytes, row));
            (key_bytes, row)
        })
        .collect();
    changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    table.write(&changes)?;
    Ok(changes
        .iter()
        .filter(|(_, row)| row.is_some())
        .map(|(key, _)| hashing.hash_one(key.as_slice()))
        .collect())
}

/// The rows a replay has rebuilt so far.
pub(crate) struct ReplayViews<'s> {
    storage: &'s dyn Storage,
    held: HeldRows,
    held_max: usize,
    spill: Option<Spill>,
    /// The store has no place for a spill table: every row stays held.
    unbounded: bool,
    /// The most rows held in memory at once, those in flight included.
    held_peak: usize,
}

/// What a replay's memory did: whether rows moved to the spill table, and the most rows it held
/// at once (in flight included), which the bound keeps near twice `held_max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplayMemory {
    pub(crate) spilled: bool,
    pub(crate) held_peak: usize,
}

impl<'s> ReplayViews<'s> {
    /// Empty views that spill beside `storage` past `held_max` rows.
    pub(crate) fn new(storage: &'s dyn Storage, held_max: usize) -> ReplayViews<'s> {
        let held = HashMap::default();
        ReplayViews { storage, held, held_max, spill: None, unbounded: false, held_peak: 0 }
    }

    /// What the replay's memory did so far.
    pub(crate) fn memory(&self) -> ReplayMemory {
        ReplayMemory { spilled: self.spill.is_some(), held_peak: self.held_peak }
    }

    /// Starts from the views of a checkpoint.
    pub(crate) fn start_from(&mut self, views: BTreeMap<ViewKey, ViewRow>) -> Result<()> {
        for (key, row) in views {
            self.put(key, row);
            self.bound()?;
        }
        Ok(())
    }

    /// Applies one event, loading the rows it names first when rows were spilled.
    pub(crate) fn apply(&mut self, table: &Table, event: &Event) -> Result<()> {
        if self.spill.is_some() {
            self.load(project::touched_keys(table, event))?;
            let derived = project::derived_keys(table, event, self);
            self.load(derived)?;
        }
        project::apply(table, self, event);
        self.bound()
    }

    /// Holds the rows of `keys` that are not held yet: from the rows in flight, else from the
    /// spill table (unless the filter says it never held the key).
    fn load(&mut self, keys: Vec<ViewKey>) -> Result<()> {
        let Some(spill) = self.spill.as_ref() else {
            return Ok(());
        };
        let mut wanted: Vec<(ViewKey, Vec<u8>)> = Vec::with_capacity(keys.len());
        for key in keys {
            if self.held.contains_key(&key) || wanted.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let flying = spill.in_flight.as_ref().and_then(|f| f.rows.get(&key));
            if let Some(held) = flying {
                self.held.insert(key, Held::clean(held.row().cloned()));
                continue;
            }
            let encoded = encode_view_key(&key);
            if spill.filter.may_hold(spill.hashing.hash_one(encoded.as_slice())) {
                wanted.push((key, encoded));
            } else {
                self.held.insert(key, Held::clean(None));
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let keys: Vec<&[u8]> = wanted.iter().map(|(_, k)| k.as_slice()).collect();
        let stored = spill.table.get(&keys)?;
        for ((key, key_bytes), bytes) in wanted.into_iter().zip(stored) {
            let row = match bytes {
                Some(bytes) => Some(decode_stored(&key, &key_bytes, &bytes)?),
                None => None,
            };
            self.held.insert(key, Held::clean(row));
        }
        Ok(())
    }

    /// Moves the held rows to the spill table once there are more than the bound (making the
    /// table the first time; a store without one keeps holding them).
    fn bound(&mut self) -> Result<()> {
        let flying =
            self.spill.as_ref().and_then(|s| s.in_flight.as_ref()).map_or(0, |f| f.rows.len());
        self.held_peak = self.held_peak.max(self.held.len() + flying);
        if self.held.len() <= self.held_max || self.unbounded {
            return Ok(());
        }
        if self.spill.is_none() {
            self.spill = self.storage.spill().map(|table| Spill {
                table,
                filter: KeyFilter::with_bits(SPILL_FILTER_BITS),
                hashing: Hashing::default(),
                in_flight: None,
            });
            self.unbounded = self.spill.is_none();
            if self.unbounded {
                return Ok(());
            }
        }
        self.flush()
    }

    /// Lets go of every held row: a writer thread writes the changed ones to the spill table (in
    /// key order, in one transaction) while the replay goes on, once the rows of the previous
    /// flush have landed.
    fn flush(&mut self) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        spill.land()?;
        let rows = Arc::new(std::mem::take(&mut self.held));
        let (table, to_write) = (Arc::clone(&spill.table), Arc::clone(&rows));
        let hashing = spill.hashing.clone();
        let writer = std::thread::Builder::new()
            .name("replay-spill".into())
            .spawn(move || write_rows(&*table, &to_write, &hashing))
            .map_err(|e| Error::io("start a thread for", "the replay's spill table", e))?;
        spill.in_flight = Some(InFlight { rows, writer });
        Ok(())
    }

    /// The rebuilt rows, in the stored table's order.
    pub(crate) fn finish(mut self) -> Result<RebuiltRows> {
        self.flush()?;
        let source = match self.spill.take() {
            Some(mut spill) => {
                spill.land()?;
                Source::Spilled(spill.table)
            }
            None => {
                // Encoded once here, not once per pass over them (each decoded row is let go
                // as it is encoded).
                let mut rows: Vec<(Vec<u8>, Vec<u8>)> = std::mem::take(&mut self.held)
                    .into_iter()
                    .filter_map(|(key, held)| {
                        let key = encode_view_key(&key);
                        let row = encode_view_row(&key, &held.into_row()?);
                        Some((key, row))
                    })
                    .collect();
                rows.sort_by(|a, b| a.0.cmp(&b.0));
                Source::Held(rows)
            }
        };
        Ok(RebuiltRows { source, next: Position::Start })
    }
}

impl ViewAccess for ReplayViews<'_> {
    fn get(&self, key: &ViewKey) -> Option<&ViewRow> {
        match self.held.get(key) {
            Some(held) => held.row(),
            None => {
                // Spilled rows are loaded by name: reading another is a projection bug, which
                // the live path's overlay refuses the same way.
                assert!(self.spill.is_none(), "projection read {key:?}, which it did not name");
                None
            }
        }
    }
    fn put(&mut self, key: ViewKey, row: ViewRow) {
        self.held.insert(key, Held::changed(Value::Row(Some(row))));
    }
    fn put_kept(&mut self, key: ViewKey, doc: Box<dyn KeptDoc>) {
        self.held.insert(key, Held::changed(Value::Kept(doc, OnceLock::new())));
    }
    fn edit_kept(&mut self, key: &ViewKey, edit: &mut dyn FnMut(&mut dyn Any) -> bool) -> bool {
        let Some(held) = self.held.get_mut(key) else {
            return false;
        };
        let Value::Kept(doc, encoded) = &mut held.value else {
            return false;
        };
        if !edit(doc.as_any_mut()) {
            return false;
        }
        *encoded = OnceLock::new();
        held.dirty = true;
        true
    }
    fn delete(&mut self, key: &ViewKey) {
        if self.spill.is_some() {
            self.held.insert(key.clone(), Held::changed(Value::Row(None)));
        } else {
            self.held.remove(key);
        }
    }
}

/// Where the rebuilt rows are.
enum Source {
    Held(Vec<(Vec<u8>, Vec<u8>)>),
    Spilled(Arc<dyn SpillRows>),
}

/// How far a pass over the rebuilt rows has come.
enum Position {
    Start,
    /// In the held rows, the index of the next one.
    At(usize),
    /// In the spill table, the last key handed out.
    After(Vec<u8>),
    Done,
}

/// A replay's rebuilt rows, encoded key and row as the views table stores them, in key order,
/// handed out a chunk at a time; [`RebuiltRows::rewind`] starts another pass.
pub(crate) struct RebuiltRows {
    source: Source,
    next: Position,
}

impl RebuiltRows {
    /// Rows as a replay held them (`rows` in key order), for tests of a pass over them.
    #[cfg(test)]
    pub(crate) fn held(rows: Vec<(Vec<u8>, Vec<u8>)>) -> RebuiltRows {
        RebuiltRows { source: Source::Held(rows), next: Position::Start }
    }

    /// Starts again from the first row.
    pub(crate) fn rewind(&mut self) {
        self.next = Position::Start;
    }

    /// The next rows (at most [`SPILL_CHUNK_ROWS`]); empty when every row was handed out.
    pub(crate) fn next_chunk(&mut self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let next = std::mem::replace(&mut self.next, Position::Done);
        let (chunk, next) = match (&mut self.source, next) {
            (_, Position::Done) => (Vec::new(), Position::Done),
            (Source::Held(rows), next) => {
                let from = match next {
                    Position::At(index) => index,
                    _ => 0,
                };
                let to = rows.len().min(from + SPILL_CHUNK_ROWS);
                (rows[from..to].to_vec(), Position::At(to))
            }
            (Source::Spilled(spill), next) => {
                let after = match &next {
                    Position::After(key) => Some(key.as_slice()),
                    _ => None,
                };
                let chunk = spill.after(after, SPILL_CHUNK_ROWS)?;
                let next =
                    chunk.last().map_or(Position::Done, |(key, _)| Position::After(key.clone()));
                (chunk, next)
            }
        };
        self.next = if chunk.is_empty() { Position::Done } else { next };
        Ok(chunk)
    }
}

/// A stored key for a message: its decoded form, or its bytes when it does not decode.
pub(crate) fn shown_key(key: &[u8]) -> String {
    decode_view_key(key).map_or_else(|_| format!("{key:02x?}"), |key| format!("{key:?}"))
}
