//! The observer's legacy surface: the claude-management `$.state` keys as one JSON object
//! (`buffer`, `turn`, `turnsSinceSweep`, `userFollowUps`, `delivered`, `inboxOffset`,
//! `pending`), imported as one event and exported in the imported file's style.
//!
//! An import replaces the scope's state. A mirror merges an outside change field by field
//! ([`ObserverLayout`]): counters add the outside writer's increments, rows appended outside
//! join the window, `delivered` takes the union, and `inboxOffset` and `pending` are adopted
//! when only the outside writer changed them (a conflict when both did).

use std::path::Path;

use hookstate_schema::observer::{ObservedRow, ObserverEvent, ObserverState};
use hookstate_schema::signals::StoreStyle;
use hookstate_schema::Body;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::api::Observer;
use super::rules::push_rows;
use crate::kernel::call::Call;
use crate::kernel::call::Conflict;
use crate::kernel::call::Outcome;
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::legacy::json::{detect_style, render_styled};
use crate::legacy::mirror::{merge, Adoption, Change, Layout, Merge, RelPath};
use crate::legacy::root::Root;

/// The largest observer state file: 60 clipped rows, 1000 keys and a pending text fit easily.
pub(crate) const STATE_FILE_BYTES_MAX: usize = 1024 * 1024;
/// Default name of the exported observer state file.
pub const STATE_FILE_DEFAULT: &str = "claude-management.json";
/// The style of an export whose state was never imported: 2-space JSON with a final newline.
const DEFAULT_STYLE: StoreStyle = StoreStyle { pretty: true, trailing_newline: true };

pub(crate) fn render(state: &ObserverState, style: StoreStyle) -> Result<String> {
    render_styled(state, style)
}

/// Parses an observer state file: the state, the style it was written in, and whether an
/// export in that style writes back the very same bytes.
pub(crate) fn parse_state(name: &str, bytes: &[u8]) -> Result<(ObserverState, StoreStyle, bool)> {
    let (state, style, round_trip, _) = parse_state_keys(name, bytes)?;
    Ok((state, style, round_trip))
}

/// The keys of the state, as upstream writes every one of them.
const STATE_KEYS: [&str; 7] =
    ["buffer", "turn", "turnsSinceSweep", "userFollowUps", "delivered", "inboxOffset", "pending"];

/// [`parse_state`], and whether the file holds every key of the state. A state is one JSON
/// object: an array (which a derived struct would read by position) or any other value is
/// refused. A key left out reads as its default.
fn parse_state_keys(name: &str, bytes: &[u8]) -> Result<(ObserverState, StoreStyle, bool, bool)> {
    let text = std::str::from_utf8(bytes).map_err(|_| Error::legacy(name, "is not UTF-8"))?;
    let not_state = |e: String| Error::legacy(name, format!("is not an observer state: {e}"));
    let value: Value = serde_json::from_str(text).map_err(|e| not_state(e.to_string()))?;
    let Value::Object(keys) = &value else {
        return Err(not_state("it is not one JSON object".into()));
    };
    let whole = STATE_KEYS.iter().all(|key| keys.contains_key(*key));
    let state = ObserverState::deserialize(&value).map_err(|e| not_state(e.to_string()))?;
    let style = detect_style(text);
    let round_trip = render(&state, style)?.as_bytes() == bytes;
    Ok((state, style, round_trip, whole))
}

impl Observer<'_> {
    /// Imports the observer state file `DIR/NAME` into the call's scope, replacing its state.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a malformed file (unknown keys, wrong types); unsafe paths; store
    /// errors.
    pub fn import(&self, call: &Call, dir: &Path, name: &str) -> Result<Outcome> {
        let root = Root::open(dir, false)?;
        let bytes = root
            .read(name, STATE_FILE_BYTES_MAX)?
            .ok_or_else(|| Error::NoStore { path: dir.join(name) })?;
        let (state, style, round_trip) = parse_state(name, &bytes)?;
        let mut outcome = self.import_state(call, state, style)?;
        outcome.result.insert("layout".into(), Value::from("observer"));
        outcome.result.insert("round_trip".into(), Value::Bool(round_trip));
        Ok(outcome)
    }

    /// Writes the observer state of `scope` to `DIR/NAME`.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn export(&self, scope: &str, dir: &Path, name: &str) -> Result<Map<String, Value>> {
        let doc = self.doc(scope)?;
        let text = render(&doc.state, doc.style.unwrap_or(DEFAULT_STYLE))?;
        Root::open(dir, true)?.write(name, text.as_bytes())?;
        let mut out = Map::new();
        out.insert("bytes".into(), Value::from(text.len()));
        Ok(out)
    }
}

/// The observer state file as a mirrored layout: one file, `NAME` in the mirror directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObserverLayout {
    /// The state file's name.
    pub(crate) file: String,
}

impl ObserverLayout {
    fn path(&self) -> Result<RelPath> {
        RelPath::new(&[&self.file])
    }
}

impl Layout for ObserverLayout {
    fn name(&self) -> &'static str {
        "observer"
    }

    fn files(&self, _: &dyn ReadTxn, _: &Call, _: &Root) -> Result<Vec<RelPath>> {
        Ok(vec![self.path()?])
    }

    fn max_bytes(&self, _: &RelPath) -> usize {
        STATE_FILE_BYTES_MAX
    }

    fn render(&self, txn: &dyn ReadTxn, call: &Call, _: &RelPath) -> Result<Option<Vec<u8>>> {
        let Some(doc) = super::api::read(txn, &call.scope)? else {
            return Ok(None);
        };
        Ok(Some(render(&doc.state, doc.style.unwrap_or(DEFAULT_STYLE))?.into_bytes()))
    }

    fn adopt(&self, txn: &dyn ReadTxn, call: &Call, changes: &[Change]) -> Result<Adoption> {
        let mut adoption = Adoption::default();
        for change in changes {
            let (file, style, _, whole) = parse_state_keys(&change.path.display(), &change.now)?;
            // A writer that left keys out did not mean them at their defaults (a file of `{}`
            // read as a cleared `pending` and a rewound `inboxOffset`): the store's state stays.
            if !whole {
                adoption.conflicts.push(Conflict {
                    file: change.path.display(),
                    record: "state".into(),
                    why: format!("the file lacks some of the keys {}", STATE_KEYS.join(", ")),
                });
                continue;
            }
            let base = read_ancestor(change, &file);
            let store = super::api::read(txn, &call.scope)?.map(|d| d.state);
            let (merged, conflicts) = merge_state(base.as_ref(), &file, store.as_ref());
            adoption.conflicts.extend(conflicts.into_iter().map(|record| Conflict {
                file: change.path.display(),
                record: record.into(),
                why: "changed in the file and in the store since the mirror last wrote it".into(),
            }));
            if store.as_ref() != Some(&merged) {
                let event = ObserverEvent::StateImported { state: merged, style };
                adoption.events.push((call.scope.clone(), Body::Observer(event)));
            }
        }
        Ok(adoption)
    }
}

/// The version the outside writer read: the newest baseline (the current one, then the history)
/// that the file extends — counters no higher, its newest row and its delivered keys still in the
/// file. A writer that read before the mirror's last writes wrote back an older version plus its
/// own change, and its increments count from there (a version the writer's new rows are stamped
/// older than is not the one it read). A baseline that does not parse (torn by a
/// power cut) is skipped; with none, the file is merged as a first sight.
fn read_ancestor(change: &Change, file: &ObserverState) -> Option<ObserverState> {
    let candidates = change.base.iter().chain(&change.history);
    let parsed: Vec<ObserverState> =
        candidates.filter_map(|b| parse_state("baseline", b).ok().map(|p| p.0)).collect();
    // Rows are stamped with the turn they were observed in, so rows the writer appended carry
    // a turn no lower than the one it read.
    let extends = |v: &ObserverState| {
        v.turn <= file.turn
            && v.user_follow_ups <= file.user_follow_ups
            && v.buffer.last().is_none_or(|row| file.buffer.contains(row))
            && v.delivered.iter().all(|key| file.delivered.contains(key))
            && file
                .buffer
                .iter()
                .filter(|row| !v.buffer.contains(row))
                .all(|row| row.turn >= v.turn)
    };
    let newest = parsed.first().cloned();
    parsed.into_iter().find(extends).or(newest)
}

/// The field-by-field merge of an outside change: the state to keep and the fields in conflict.
fn merge_state(
    base: Option<&ObserverState>,
    file: &ObserverState,
    store: Option<&ObserverState>,
) -> (ObserverState, Vec<&'static str>) {
    let Some(store) = store else {
        // Nothing in the store yet: the file is adopted as an import would.
        return (file.clone(), Vec::new());
    };
    let mut merged = store.clone();
    let mut conflicts = Vec::new();
    // Counters: the outside writer's increments since the baseline are added to the store's.
    let added = |b: Option<u64>, f: u64, s: u64| match b {
        Some(b) if f >= b => s.saturating_add(f - b),
        _ => s,
    };
    merged.turn = added(base.map(|b| b.turn), file.turn, store.turn);
    merged.user_follow_ups =
        added(base.map(|b| b.user_follow_ups), file.user_follow_ups, store.user_follow_ups);
    merged.turns_since_sweep = match base {
        // A sweep outside reset the counter: take its reset, plus what the store counted since.
        Some(b) if file.turns_since_sweep < b.turns_since_sweep => file
            .turns_since_sweep
            .saturating_add(store.turns_since_sweep.saturating_sub(b.turns_since_sweep)),
        b => added(b.map(|b| b.turns_since_sweep), file.turns_since_sweep, store.turns_since_sweep),
    };
    // Delivered keys only grow: the union, in the store's order, then the file's new ones.
    for key in &file.delivered {
        if !merged.delivered.contains(key) {
            merged.delivered.push(key.clone());
        }
    }
    // Rows only grow (the window drops the oldest): the rows the file holds that the baseline
    // (or, never seen, the store) does not are the outside writer's, appended to the store's.
    let known = base.map_or(&store.buffer, |b| &b.buffer);
    let appended: Vec<ObservedRow> =
        file.buffer.iter().filter(|row| !known.contains(row)).cloned().collect();
    let appended: Vec<ObservedRow> =
        appended.into_iter().filter(|row| !store.buffer.contains(row)).collect();
    if !appended.is_empty() {
        push_rows(&mut merged.buffer, &appended, merged.turn);
    }
    match merge(base.map(|b| &b.inbox_offset), Some(&file.inbox_offset), Some(&store.inbox_offset))
    {
        Merge::Outside(offset) => merged.inbox_offset = *offset,
        Merge::Both { .. } => conflicts.push("inboxOffset"),
        Merge::Same | Merge::Dropped(_) => {}
    }
    match merge(base.map(|b| &b.pending), Some(&file.pending), Some(&store.pending)) {
        Merge::Outside(pending) => merged.pending.clone_from(pending),
        Merge::Both { .. } => conflicts.push("pending"),
        Merge::Same | Merge::Dropped(_) => {}
    }
    (merged, conflicts)
}
