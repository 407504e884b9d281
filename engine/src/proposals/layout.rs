//! claude-code-hermit's proposal files (layout `hermit-proposals`): `state/micro-proposals.json`
//! (2-space JSON with a final newline, entries kept with their own key order, another style
//! kept), `state/proposal-metrics.jsonl` (compact lines, `ts` first), `proposals/PROP-*.md` and
//! the derived `state/proposals-index.json`: imported as events, exported byte for byte, and
//! mirrored (`ProposalsLayout`).
//!
//! The ledger is rendered from the log: every queue or resolve event stands for its ledger line,
//! so the queue and the ledger can never disagree. The mirror merges the queue per entry, the
//! ledger per line and each PROP file by its status (`merge.rs`); the index is written, never
//! adopted. Does not decide queue rules; `micro.rs` and `props.rs` do.

use std::collections::HashSet;
use std::path::Path;

use hookstate_schema::proposals::{PropDoc, ProposalsEvent, QueueDoc, PROP_KIND};
use hookstate_schema::proposals::{QUEUE_ID, QUEUE_KIND};
use hookstate_schema::signals::StoreStyle;
use hookstate_schema::Body;
use serde_json::{json, Map, Value};

use super::api::{ledger_lines, read_index, read_props as stored_props, Proposals};
use super::merge::{merge_ledger, merge_prop, merge_queue, queue_style, resolved_id};
use super::merge::{PropMerge, Resolved};
use super::micro::QUEUE_ENTRIES_MAX;
use super::props::PROP_FILE_BYTES_MAX;
use super::props::{check_prop_file, prop_doc, render_index, PROPOSALS_DIR, PROPS_MAX};
use crate::kernel::call::{fields, Call, Conflict, Outcome, Plan, Refusal};
use crate::kernel::doc::read_doc;
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::legacy::mirror::{Adoption, Change, Layout, RelPath};
use crate::legacy::root::Root;

/// The queue file: [`QUEUE_ENTRIES_MAX`] entries of a few KiB each.
pub(crate) const QUEUE_FILE_BYTES_MAX: usize = 8 * 1024 * 1024;
/// The ledger grows for the life of a hermit; beyond this, rotate it before importing.
pub(crate) const LEDGER_FILE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Ledger lines one import adopts.
pub(crate) const LEDGER_LINES_MAX: usize = 200_000;
/// The state subdirectory of a hermit state directory.
pub(crate) const STATE_DIR: &str = "state";
/// The queue file's name under `state/`.
pub const QUEUE_FILE: &str = "micro-proposals.json";
/// The ledger file's name under `state/`.
pub const LEDGER_FILE: &str = "proposal-metrics.jsonl";
/// The index file's name under `state/`.
pub const INDEX_FILE: &str = "proposals-index.json";
/// The index: a row of a few hundred bytes per proposal.
pub(crate) const INDEX_FILE_BYTES_MAX: usize = 16 * 1024 * 1024;

fn corrupt(why: &str) -> Error {
    Error::legacy(QUEUE_FILE, format!("is corrupt ({why}); refusing it, repair it first"))
}

/// Parses the queue file as upstream's tri-state reader does: a missing or null `pending` is
/// healed to `[]`; invalid JSON, a non-object, a non-array `pending` or an entry that is neither
/// an object nor `null` is corrupt, never an empty queue. The style it was written in is kept.
///
/// # Errors
/// [`Error::LegacyFile`] naming why the file is corrupt.
pub(crate) fn parse_queue(bytes: &[u8]) -> Result<QueueDoc> {
    let text = std::str::from_utf8(bytes).map_err(|_| corrupt("not UTF-8"))?;
    let value: Value = serde_json::from_str(text).map_err(|e| corrupt(&e.to_string()))?;
    let Value::Object(mut top) = value else {
        return Err(corrupt("not a JSON object"));
    };
    let pending = match top.get("pending") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err(corrupt("pending is not an array")),
    };
    if pending.len() > QUEUE_ENTRIES_MAX {
        return Err(corrupt(&format!("{} entries, limit is {QUEUE_ENTRIES_MAX}", pending.len())));
    }
    let mut entries = Vec::with_capacity(pending.len());
    let mut ids = std::collections::HashSet::with_capacity(pending.len());
    for entry in pending {
        // A hand-edited `null` entry is kept for the next brief-cycle to prune, as upstream's
        // reader keeps it (`dropped: [null]`); no other verb matches it.
        if entry.is_null() {
            entries.push(entry.to_string());
            continue;
        }
        let Value::Object(map) = &entry else {
            return Err(corrupt("an entry is not an object"));
        };
        let Some(id) = map.get("id").and_then(Value::as_str) else {
            return Err(corrupt("an entry has no string id"));
        };
        // Every verb names an entry by its id: of two with one id (upstream's unlocked writers
        // can leave them) a nudge, a resolve or an expiry reached only the first, and a
        // brief-cycle's two nudges undid each other on every pass.
        if !ids.insert(id.to_owned()) {
            return Err(corrupt(&format!("two entries have the id {id}")));
        }
        entries.push(entry.to_string());
    }
    top.insert("pending".into(), Value::Array(Vec::new()));
    let top = Value::Object(top).to_string();
    Ok(QueueDoc { top, entries, style: queue_style(text), verbatim: None })
}

/// Parses a queue file as the mirror adopts it: as [`parse_queue`], with the file's exact text
/// kept when its style's rendering would not give those bytes back.
fn parse_queue_verbatim(bytes: &[u8]) -> Result<QueueDoc> {
    let mut queue = parse_queue(bytes)?;
    if render_queue(&queue)?.as_bytes() != bytes {
        queue.verbatim = std::str::from_utf8(bytes).ok().map(str::to_owned);
    }
    Ok(queue)
}

/// Renders the queue file: the adopted file's exact text while the queue is unchanged since,
/// else `JSON.stringify(data, null, 2) + "\n"`, or the compact style the file was written in.
///
/// # Errors
/// [`Error::Corrupt`] when a stored entry is not JSON.
pub(crate) fn render_queue(queue: &QueueDoc) -> Result<String> {
    if let Some(text) = &queue.verbatim {
        return Ok(text.clone());
    }
    let parse = |text: &str| {
        serde_json::from_str::<Value>(text)
            .map_err(|e| Error::Corrupt(format!("stored queue entry: {e}")))
    };
    let mut top = match parse(&queue.top)? {
        Value::Object(map) => map,
        _ => return Err(Error::Corrupt("stored queue top is not an object".into())),
    };
    let entries = queue.entries.iter().map(|t| parse(t)).collect::<Result<Vec<_>>>()?;
    top.insert("pending".into(), Value::Array(entries));
    let style = queue.style.unwrap_or(StoreStyle { pretty: true, trailing_newline: true });
    crate::legacy::json::render_styled(&Value::Object(top), style)
}

/// Splits the ledger into its lines (without newlines), every line kept as written.
///
/// # Errors
/// [`Error::LegacyFile`] for a ledger that is not UTF-8, [`Error::TooMany`] for too many lines.
pub(crate) fn parse_ledger(bytes: &[u8]) -> Result<Vec<String>> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| Error::legacy(LEDGER_FILE, "is not UTF-8"))?;
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    if lines.len() > LEDGER_LINES_MAX {
        let count = lines.len();
        return Err(Error::TooMany { what: "ledger lines", count, max: LEDGER_LINES_MAX });
    }
    Ok(lines)
}

pub(crate) fn render_ledger(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Whether `name` is a PROP file name the layout keeps (`PROP-<digits>….md`, a valid id).
fn is_prop_file(name: &str) -> bool {
    name.starts_with("PROP-") && name.ends_with(".md") && check_prop_file(name).is_ok()
}

/// Reads every `PROP-*.md` of `proposals/` (other names are not proposals and are left alone).
fn read_prop_files(dir: &Path) -> Result<Vec<(String, String)>> {
    let Some(root) = Root::open(dir, false)?.subdir(PROPOSALS_DIR, false)? else {
        return Ok(Vec::new());
    };
    let mut props = Vec::new();
    for name in root.list()? {
        if !(name.starts_with("PROP-") && name.ends_with(".md")) {
            continue;
        }
        check_prop_file(&name)?;
        if props.len() >= PROPS_MAX {
            return Err(Error::TooMany {
                what: "PROP files",
                count: props.len() + 1,
                max: PROPS_MAX,
            });
        }
        let bytes = root
            .read(&name, PROP_FILE_BYTES_MAX)?
            .ok_or_else(|| Error::NoStore { path: dir.join(PROPOSALS_DIR).join(&name) })?;
        let text = String::from_utf8(bytes).map_err(|_| Error::legacy(&name, "is not UTF-8"))?;
        props.push((name, text));
    }
    Ok(props)
}

/// The index's `updated`, and whether a rebuild from `props` reproduces the file.
///
/// # Errors
/// [`Error::LegacyFile`] for an index that is not JSON or has no string `updated`.
pub(crate) fn parse_index(bytes: &[u8], props: &[(String, String)]) -> Result<(String, bool)> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::legacy(INDEX_FILE, format!("is not JSON: {e}")))?;
    let updated = value
        .get("updated")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::legacy(INDEX_FILE, "has no string updated"))?
        .to_owned();
    let docs: Vec<_> = props.iter().map(|(f, t)| (f.clone(), prop_doc(f, t))).collect();
    let rendered = render_pretty(&render_index(&docs, &updated))?;
    Ok((updated, rendered.as_bytes() == bytes))
}

fn render_pretty(value: &Value) -> Result<String> {
    serde_json::to_string_pretty(value)
        .map(|t| t + "\n")
        .map_err(|e| Error::Corrupt(format!("value does not serialise: {e}")))
}

/// The hermit proposal files read and checked, ready to import: nothing is opened or written
/// before they parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HermitFiles {
    queue: Option<QueueDoc>,
    lines: Vec<String>,
    props: Vec<(String, String)>,
    index_updated: Option<String>,
    round_trip: bool,
}

/// Reads and checks `DIR/state/micro-proposals.json`, `DIR/state/proposal-metrics.jsonl`,
/// `DIR/state/proposals-index.json` and `DIR/proposals/PROP-*.md`.
///
/// # Errors
/// [`Error::LegacyFile`] for a corrupt file, [`Error::TooMany`] or [`Error::TooLarge`] for an
/// oversized one; unsafe or missing paths.
pub fn read_hermit_files(dir: &Path) -> Result<HermitFiles> {
    let state = Root::open(dir, false)?
        .subdir(STATE_DIR, false)?
        .ok_or_else(|| Error::NoStore { path: dir.join(STATE_DIR) })?;
    let queue_bytes = state.read(QUEUE_FILE, QUEUE_FILE_BYTES_MAX)?;
    let ledger_bytes = state.read(LEDGER_FILE, LEDGER_FILE_BYTES_MAX)?;
    let queue = queue_bytes.as_deref().map(parse_queue).transpose()?;
    let lines = ledger_bytes.as_deref().map(parse_ledger).transpose()?.unwrap_or_default();
    let queue_round_trip = match (&queue, &queue_bytes) {
        (Some(q), Some(bytes)) => render_queue(q)?.as_bytes() == bytes.as_slice(),
        _ => true,
    };
    let ledger_round_trip =
        ledger_bytes.as_ref().is_none_or(|b| render_ledger(&lines).as_bytes() == b.as_slice());
    let props = read_prop_files(dir)?;
    let (index_updated, index_round_trip) = match state.read(INDEX_FILE, INDEX_FILE_BYTES_MAX)? {
        Some(bytes) => parse_index(&bytes, &props).map(|(u, ok)| (Some(u), ok))?,
        None => (None, true),
    };
    let round_trip = queue_round_trip && ledger_round_trip && index_round_trip;
    Ok(HermitFiles { queue, lines, props, index_updated, round_trip })
}

/// The events an import of checked files appends: the queue, the PROP files (first, so that
/// imported `responded` lines mark them), the ledger lines, the index stamp.
fn import_events(files: HermitFiles) -> Vec<Body> {
    let HermitFiles { queue, lines, props, index_updated, .. } = files;
    let mut events = Vec::with_capacity(lines.len() + props.len() + 2);
    if let Some(QueueDoc { top, entries, style, verbatim }) = queue {
        events.push(ProposalsEvent::QueueImported { top, entries, style, verbatim });
    }
    events
        .extend(props.into_iter().map(|(file, text)| ProposalsEvent::PropImported { file, text }));
    events.extend(lines.into_iter().map(|line| ProposalsEvent::LedgerLineImported { line }));
    events.extend(index_updated.map(|updated| ProposalsEvent::IndexImported { updated }));
    events.into_iter().map(Body::Proposals).collect()
}

impl Proposals<'_> {
    /// Imports checked hermit proposal files into the call's scope, in one transaction.
    /// Refused (a value) when the scope already holds a queue.
    ///
    /// # Errors
    /// Store errors.
    pub fn import(&self, call: &Call, files: HermitFiles) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        let result = fields(json!({
            "layout": "hermit-proposals",
            "entries": files.queue.as_ref().map_or(0, |q| q.entries.len()),
            "ledger_lines": files.lines.len(),
            "proposals": files.props.len(),
            "round_trip": files.round_trip,
        }));
        let events = import_events(files);
        self.k.write(call, |txn| {
            if read_doc::<QueueDoc>(txn, &call.scope, QUEUE_KIND, QUEUE_ID)?.is_some() {
                let message = "this scope already holds a micro-proposal queue".to_owned();
                let refusal = Refusal::new("already_imported", message, Value::Null);
                return Ok(Plan { refusal: Some(refusal), ..Plan::default() });
            }
            Ok(Plan { events: events.clone(), result: result.clone(), ..Plan::default() })
        })
    }

    /// Writes `DIR/state/micro-proposals.json`, `DIR/state/proposal-metrics.jsonl`, and when
    /// there are proposals `DIR/state/proposals-index.json` and `DIR/proposals/PROP-*.md`, for
    /// `scope` (directories created 0700, files 0600).
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn export(&self, scope: &str, dir: &Path) -> Result<Map<String, Value>> {
        hookstate_schema::validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let queue: QueueDoc = read_doc(&*txn, scope, QUEUE_KIND, QUEUE_ID)?.unwrap_or_default();
        let lines = ledger_lines(&*txn, scope)?;
        let state = Root::open(dir, true)?
            .subdir(STATE_DIR, true)?
            .ok_or_else(|| Error::NoStore { path: dir.join(STATE_DIR) })?;
        state.write(QUEUE_FILE, render_queue(&queue)?.as_bytes())?;
        state.write(LEDGER_FILE, render_ledger(&lines).as_bytes())?;
        let props = stored_props(&*txn, scope)?;
        let index = read_index(&*txn, scope)?;
        if !props.is_empty() || index.is_some() {
            let updated = index.map(|i| i.updated).unwrap_or_default();
            state.write(INDEX_FILE, render_pretty(&render_index(&props, &updated))?.as_bytes())?;
        }
        if !props.is_empty() {
            let root = Root::open(dir, false)?
                .subdir(PROPOSALS_DIR, true)?
                .ok_or_else(|| Error::NoStore { path: dir.join(PROPOSALS_DIR) })?;
            for (_, doc) in &props {
                root.write(&doc.file, doc.text.as_bytes())?;
            }
        }
        Ok(fields(json!({
            "entries": queue.entries.len(), "ledger_lines": lines.len(), "proposals": props.len(),
        })))
    }
}

/// The proposal files of a hermit state directory as a mirrored layout: the queue merged per
/// entry, the ledger per line, each PROP file by its status; the index written, never adopted
/// (but for its `updated` stamp, on a first sight).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ProposalsLayout;

fn state_path(name: &str) -> Result<RelPath> {
    RelPath::new(&[STATE_DIR, name])
}

/// Which file of the layout a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum File<'a> {
    Queue,
    Ledger,
    Index,
    Prop(&'a str),
}

fn file_of(path: &RelPath) -> Option<File<'_>> {
    match path.parts() {
        [dir, name] if dir == STATE_DIR && name == QUEUE_FILE => Some(File::Queue),
        [dir, name] if dir == STATE_DIR && name == LEDGER_FILE => Some(File::Ledger),
        [dir, name] if dir == STATE_DIR && name == INDEX_FILE => Some(File::Index),
        [dir, name] if dir == PROPOSALS_DIR && is_prop_file(name) => Some(File::Prop(name)),
        _ => None,
    }
}

impl Layout for ProposalsLayout {
    fn name(&self) -> &'static str {
        "hermit-proposals"
    }

    fn files(&self, txn: &dyn ReadTxn, call: &Call, root: &Root) -> Result<Vec<RelPath>> {
        let mut files = vec![state_path(QUEUE_FILE)?, state_path(LEDGER_FILE)?];
        let mut names: Vec<String> =
            stored_props(txn, &call.scope)?.into_iter().map(|(_, doc)| doc.file).collect();
        if let Some(dir) = root.subdir(PROPOSALS_DIR, false)? {
            names.extend(dir.list()?.into_iter().filter(|n| is_prop_file(n)).take(PROPS_MAX));
        }
        names.sort();
        names.dedup();
        for name in names {
            files.push(RelPath::new(&[PROPOSALS_DIR, &name])?);
        }
        // The index last: it is rendered from the PROP files.
        files.push(state_path(INDEX_FILE)?);
        Ok(files)
    }

    fn max_bytes(&self, path: &RelPath) -> usize {
        match file_of(path) {
            Some(File::Queue) => QUEUE_FILE_BYTES_MAX,
            Some(File::Ledger) => LEDGER_FILE_BYTES_MAX,
            Some(File::Index) => INDEX_FILE_BYTES_MAX,
            Some(File::Prop(_)) | None => PROP_FILE_BYTES_MAX,
        }
    }

    fn render(&self, txn: &dyn ReadTxn, call: &Call, path: &RelPath) -> Result<Option<Vec<u8>>> {
        let scope = &call.scope;
        Ok(match file_of(path) {
            Some(File::Queue) => read_doc::<QueueDoc>(txn, scope, QUEUE_KIND, QUEUE_ID)?
                .map(|queue| render_queue(&queue))
                .transpose()?
                .map(String::into_bytes),
            Some(File::Ledger) => {
                let lines = ledger_lines(txn, scope)?;
                (!lines.is_empty()).then(|| render_ledger(&lines).into_bytes())
            }
            Some(File::Index) => {
                let props = stored_props(txn, scope)?;
                match read_index(txn, scope)? {
                    None if props.is_empty() => None,
                    index => {
                        let updated = index.map(|i| i.updated).unwrap_or_default();
                        Some(render_pretty(&render_index(&props, &updated))?.into_bytes())
                    }
                }
            }
            Some(File::Prop(name)) => {
                let stem = name.trim_end_matches(".md");
                read_doc::<PropDoc>(txn, scope, PROP_KIND, stem)?.map(|doc| doc.text.into_bytes())
            }
            None => None,
        })
    }

    fn adopt(&self, txn: &dyn ReadTxn, call: &Call, changes: &[Change]) -> Result<Adoption> {
        let mut adoption = Adoption::default();
        let find = |wanted: File<'_>| changes.iter().find(|c| file_of(&c.path) == Some(wanted));
        let stored_lines = ledger_lines(txn, &call.scope)?;
        let mut resolved = Resolved {
            stored: stored_lines.iter().filter_map(|l| resolved_id(l)).collect(),
            outside: HashSet::new(),
        };
        let mut events = adopt_props(txn, call, changes, &mut adoption)?;
        if let Some(change) = find(File::Ledger) {
            let lines = adopt_ledger(change, &stored_lines)?;
            resolved.outside = lines.iter().filter_map(|l| resolved_id(l)).collect();
            events
                .extend(lines.into_iter().map(|line| ProposalsEvent::LedgerLineImported { line }));
        }
        if let Some(change) = find(File::Queue) {
            events.extend(adopt_queue(txn, call, change, &resolved, &mut adoption)?);
        } else if !resolved.outside.is_empty() {
            // Entries resolved outside leave the queue even when its file did not change (a
            // resolve seen between its queue write and its ledger append).
            events.extend(drop_resolved(txn, call, &resolved)?);
        }
        if let Some(change) = find(File::Index) {
            events.extend(adopt_index(txn, call, change)?);
        }
        let scope = &call.scope;
        adoption.events = events.into_iter().map(|e| (scope.clone(), Body::Proposals(e))).collect();
        Ok(adoption)
    }
}

fn conflict(path: &RelPath, record: &str, why: &str) -> Conflict {
    Conflict { file: path.display(), record: record.to_owned(), why: why.to_owned() }
}

/// The PROP files changed outside that are adopted (new ones, and legal status moves).
fn adopt_props(
    txn: &dyn ReadTxn,
    call: &Call,
    changes: &[Change],
    adoption: &mut Adoption,
) -> Result<Vec<ProposalsEvent>> {
    let mut events = Vec::new();
    for change in changes {
        let Some(File::Prop(name)) = file_of(&change.path) else { continue };
        let Ok(text) = std::str::from_utf8(&change.now) else {
            adoption.conflicts.push(conflict(&change.path, name, "is not UTF-8; not adopted"));
            continue;
        };
        let stem = name.trim_end_matches(".md");
        let store: Option<PropDoc> = read_doc(txn, &call.scope, PROP_KIND, stem)?;
        let base = change.base.as_deref().and_then(|b| std::str::from_utf8(b).ok());
        let file_status = prop_doc(name, text).status;
        let store_view = store.as_ref().map(|d| (d.text.as_str(), d.status.as_deref()));
        match merge_prop(base, (text, file_status.as_deref()), store_view) {
            PropMerge::Adopt => events.push(ProposalsEvent::PropImported {
                file: name.to_owned(),
                text: text.to_owned(),
            }),
            PropMerge::Conflict(why) => adoption.conflicts.push(conflict(&change.path, name, why)),
            PropMerge::Keep => {}
        }
    }
    Ok(events)
}

/// The ledger lines appended outside.
///
/// # Errors
/// [`Error::LegacyFile`] for a ledger that is not UTF-8 or lost lines the mirror wrote.
fn adopt_ledger(change: &Change, stored: &[String]) -> Result<Vec<String>> {
    let file = parse_ledger(&change.now)?;
    let base = change.base.as_deref().and_then(|b| parse_ledger(b).ok());
    merge_ledger(base.as_deref(), &file, stored).map_err(|_| {
        Error::legacy(
            change.path.display(),
            "was rewritten since the mirror last wrote it (lines it wrote are gone), so none of \
             it is adopted: restore the lost lines, or delete the file and the next mirrored \
             call writes it from the store",
        )
    })
}

/// The queue adopted from a changed queue file, merged per entry.
///
/// # Errors
/// [`Error::LegacyFile`] for a corrupt file (upstream refuses it too; nothing is changed).
fn adopt_queue(
    txn: &dyn ReadTxn,
    call: &Call,
    change: &Change,
    resolved: &Resolved,
    adoption: &mut Adoption,
) -> Result<Option<ProposalsEvent>> {
    let file = parse_queue_verbatim(&change.now)?;
    let Some(store) = read_doc::<QueueDoc>(txn, &call.scope, QUEUE_KIND, QUEUE_ID)? else {
        // Nothing in the store yet: the file is adopted whole, as an import would.
        let QueueDoc { top, entries, style, verbatim } = file;
        return Ok(Some(ProposalsEvent::QueueImported { top, entries, style, verbatim }));
    };
    // A baseline that does not parse (torn by a power cut) is read as never seen.
    let base = change.base.as_deref().and_then(|b| parse_queue(b).ok());
    let merged = merge_queue(base.as_ref(), &file, &store, resolved);
    for kept in merged.kept {
        adoption.conflicts.push(conflict(&change.path, &kept.record, kept.why));
    }
    Ok(merged.queue.map(|QueueDoc { top, entries, style, verbatim }| {
        ProposalsEvent::QueueImported { top, entries, style, verbatim }
    }))
}

/// The store's queue without the entries outside lines resolved, when it holds any of them.
fn drop_resolved(
    txn: &dyn ReadTxn,
    call: &Call,
    resolved: &Resolved,
) -> Result<Option<ProposalsEvent>> {
    let Some(store) = read_doc::<QueueDoc>(txn, &call.scope, QUEUE_KIND, QUEUE_ID)? else {
        return Ok(None);
    };
    let merged = merge_queue(Some(&store), &store, &store, resolved);
    Ok(merged.queue.map(|QueueDoc { top, entries, style, verbatim }| {
        ProposalsEvent::QueueImported { top, entries, style, verbatim }
    }))
}

/// The index's `updated` stamp, adopted only while the store holds none (a first sight, as an
/// import adopts it); the index is otherwise derived, and written over.
fn adopt_index(txn: &dyn ReadTxn, call: &Call, change: &Change) -> Result<Option<ProposalsEvent>> {
    if read_index(txn, &call.scope)?.is_some() {
        return Ok(None);
    }
    Ok(parse_index(&change.now, &[])
        .ok()
        .map(|(updated, _)| ProposalsEvent::IndexImported { updated }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_queue_files_are_refused_never_empty() {
        for bad in [
            &b"{\"pending\": [}"[..],
            b"[]",
            b"{\"pending\": {}}",
            b"{\"pending\": [1]}",
            b"{\"pending\": [{\"question\": \"no id\"}]}",
            b"\xff",
            b"",
        ] {
            assert!(parse_queue(bad).as_ref().is_err_and(Error::is_invalid), "{bad:?}");
        }
        for healed in [&b"{}"[..], b"{\"pending\": null}"] {
            assert!(parse_queue(healed).unwrap().entries.is_empty());
        }
    }

    proptest::proptest! {
        #[test]
        fn hostile_bytes_never_panic_and_never_read_as_an_empty_queue(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
        ) {
            if let Ok(queue) = parse_queue(&bytes) {
                let text = render_queue(&queue).unwrap();
                proptest::prop_assert_eq!(parse_queue(text.as_bytes()).unwrap(), queue);
            }
            let _ = parse_ledger(&bytes);
        }

        #[test]
        fn exported_queues_parse_back_to_themselves(
            questions in proptest::collection::vec("\\PC{0,12}", 0..6),
            extra in proptest::option::of("[a-z]{1,6}"),
        ) {
            let entries: Vec<String> = questions
                .iter()
                .enumerate()
                .map(|(i, q)| json!({ "id": format!("MP-20261129-{i}"), "question": q }).to_string())
                .collect();
            let mut top = Map::new();
            if let Some(key) = &extra {
                top.insert(key.clone(), json!(1));
            }
            top.insert("pending".into(), json!([]));
            let queue = QueueDoc { top: Value::Object(top).to_string(), entries, ..QueueDoc::default() };
            let text = render_queue(&queue).unwrap();
            proptest::prop_assert_eq!(render_queue(&parse_queue(text.as_bytes()).unwrap()).unwrap(), text);
        }
    }

    /// Two entries with one id are refused as corrupt: every verb names an entry by its id, and
    /// a brief-cycle's nudges of the two undid each other on every pass.
    #[test]
    fn a_queue_with_two_entries_of_one_id_is_corrupt() {
        let twice = r#"{"pending":[{"id":"MP-1","question":"a"},{"id":"MP-1","question":"b"}]}"#;
        let err = parse_queue(twice.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("two entries have the id MP-1"), "{err}");
        let two = "{\"pending\":[{\"id\":\"MP-1\"},{\"id\":\"MP-2\"},null,null]}";
        assert_eq!(parse_queue(two.as_bytes()).unwrap().entries.len(), 4);
    }

    #[test]
    fn queue_keeps_top_level_keys_and_entry_key_order() {
        let text = "{\n  \"note\": \"x\",\n  \"pending\": [\n    {\n      \"question\": \"q\",\n      \"id\": \"MP-20261129-0\"\n    }\n  ],\n  \"after\": []\n}\n";
        let queue = parse_queue(text.as_bytes()).unwrap();
        assert_eq!(render_queue(&queue).unwrap(), text);
    }

    #[test]
    fn a_queue_keeps_its_style_and_an_odd_one_its_exact_text() {
        let compact = "{\"pending\":[{\"id\":\"MP-20261129-0\"}]}\n";
        assert_eq!(render_queue(&parse_queue(compact.as_bytes()).unwrap()).unwrap(), compact);
        let seed = "{\"pending\": []}\n";
        assert_ne!(render_queue(&parse_queue(seed.as_bytes()).unwrap()).unwrap(), seed);
        assert_eq!(render_queue(&parse_queue_verbatim(seed.as_bytes()).unwrap()).unwrap(), seed);
    }
}
