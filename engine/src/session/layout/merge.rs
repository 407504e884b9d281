//! The three-way merges of the `hermit-session` mirror, per record and by the session's own
//! rules: `runtime.json` and `conversations.json` per key (a `session_state` change adopted only
//! as a legal move, a binding only when not older than the store's), the observations ledger by
//! lines (a lock-less writer's appends from a stale read are appended, an outside rewrite drops
//! only the lines it removed), hypotheses per row (only a pending row changes), a task record
//! whole (never reopened, `result_rev` never lower), `SHELL.md` per section (lines appended
//! outside join the store's sections), markers and reports whole.
//!
//! Each merge finds the version the outside writer read among the baselines (the newest the file
//! extends), so a stale rewrite never reverts a change the store acknowledged since. Pure over
//! the store's documents and the change's bytes.

use hookstate_schema::session::{
    JsonDoc, Ledger, LineFile, RuntimeCause, SessionEvent, TaskDoc, TaskKeys, TaskRow,
};
use serde_json::Value;

use crate::kernel::call::Conflict;
use crate::legacy::json as legacy_json;
use crate::legacy::mirror::{merge, Change, Merge};
use crate::session::rules::chunk::PART_BYTES_MAX;
use crate::session::rules::hypotheses;
use crate::session::rules::observations::Lines;
use crate::session::rules::shell;

/// What one file's merge adopts and leaves.
#[derive(Debug, Default)]
pub(crate) struct Merged {
    pub(crate) events: Vec<SessionEvent>,
    pub(crate) conflicts: Vec<Conflict>,
}

impl Merged {
    fn conflict(&mut self, change: &Change, record: &str, why: &str) {
        let file = change.path.display();
        self.conflicts.push(Conflict { file, record: record.into(), why: why.into() });
    }
}

/// The baselines, newest first, that `parse` reads (a torn one is skipped).
pub(crate) fn ancestors<T>(change: &Change, parse: impl Fn(&[u8]) -> Option<T>) -> Vec<T> {
    change.base.iter().chain(&change.history).filter_map(|b| parse(b)).collect()
}

/// The versions of a JSON file a writer may have read, newest first: the baselines, then no
/// file at all (a writer that read before the mirror first wrote the file).
fn json_ancestors(change: &Change, style: hookstate_schema::session::Style) -> Vec<JsonDoc> {
    let mut out = ancestors(change, |b| legacy_json::parse_doc("baseline", b).ok());
    out.push(JsonDoc { fields: Vec::new(), style });
    out
}

/// The candidate with the lowest score; the newest on a tie.
fn closest<T>(candidates: &[T], score: impl Fn(&T) -> usize) -> Option<&T> {
    let mut best: Option<(&T, usize)> = None;
    for c in candidates {
        let s = score(c);
        if best.is_none_or(|(_, b)| s < b) {
            best = Some((c, s));
        }
    }
    best.map(|(c, _)| c)
}

fn keys_of<'a>(docs: &[&'a JsonDoc]) -> Vec<&'a str> {
    let mut keys: Vec<&str> = Vec::new();
    for doc in docs {
        for (k, _) in &doc.fields {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
    }
    keys
}

/// Keys (other than `skip`) whose values differ between two documents.
fn differing(a: &JsonDoc, b: &JsonDoc, skip: &str) -> usize {
    keys_of(&[a, b]).iter().filter(|k| **k != skip && a.raw(k) != b.raw(k)).count()
}

/// The `session_state` moves of the transition table (legacy-layout §2.4).
const LEGAL_STATE_MOVES: [(&str, &str); 6] = [
    ("idle", "in_progress"),
    ("in_progress", "idle"),
    ("idle", "waiting"),
    ("waiting", "idle"),
    ("waiting", "in_progress"),
    ("in_progress", "waiting"),
];

fn legal_state_move(from: Option<&str>, to: Option<&str>) -> bool {
    let text = |raw: Option<&str>| raw.and_then(|r| serde_json::from_str::<String>(r).ok());
    match (text(from), text(to)) {
        (Some(a), Some(b)) => LEGAL_STATE_MOVES.contains(&(a.as_str(), b.as_str())),
        _ => false,
    }
}

fn union<'a>(docs: &[Option<&'a JsonDoc>]) -> Vec<&'a str> {
    let present: Vec<&JsonDoc> = docs.iter().flatten().copied().collect();
    keys_of(&present)
}

const BOTH: &str = "changed in the file and in the store since the mirror last wrote it";

/// `runtime.json` per key: a key the writer changed since the version it read is adopted when
/// the store still holds that version's value (a `session_state` change only as a legal move);
/// a key the writer did not change keeps the store's value; a key it deleted is deleted.
pub(crate) fn runtime(change: &Change, file: &JsonDoc, store: Option<&JsonDoc>) -> Merged {
    let mut out = Merged::default();
    let Some(store) = store else {
        let path = change.path.display();
        out.events.push(SessionEvent::JsonAdopted { file: path, doc: file.clone(), append: false });
        return out;
    };
    let parsed = json_ancestors(change, file.style);
    let ancestor = closest(&parsed, |a| differing(a, file, "updated_at"));
    let (mut sets, mut unset) = (Vec::new(), Vec::new());
    for key in union(&[Some(file), Some(store), ancestor]) {
        if key == "updated_at" {
            continue;
        }
        let (a, f, s) = (ancestor.and_then(|d| d.raw(key)), file.raw(key), store.raw(key));
        match merge(a.as_ref(), f.as_ref(), s.as_ref()) {
            Merge::Same => {}
            Merge::Dropped(_) if a == s => unset.push(key.to_owned()),
            Merge::Dropped(_) => {}
            Merge::Outside(value) if a == s => {
                if key == "session_state" && s.is_some() && !legal_state_move(s, f) {
                    out.conflict(change, key, "not a legal session_state move");
                } else if value.len() > PART_BYTES_MAX {
                    out.conflict(change, key, "larger than one event holds");
                } else {
                    sets.push((key.to_owned(), (*value).to_owned()));
                }
            }
            Merge::Outside(_) | Merge::Both { .. } => out.conflict(change, key, BOTH),
        }
    }
    if !sets.is_empty() || !unset.is_empty() {
        let updated_at = legacy_json::str_field(file, "updated_at")
            .or_else(|| legacy_json::str_field(store, "updated_at"))
            .unwrap_or_default();
        let cause = RuntimeCause::Adopted;
        out.events.push(SessionEvent::RuntimeChanged { cause, sets, unset, updated_at });
    }
    out
}

fn last_activity(raw: &str) -> Option<String> {
    let value: Value = serde_json::from_str(raw).ok()?;
    value.get("last_activity")?.as_str().map(str::to_owned)
}

/// `conversations.json` per binding: an outside bind, update or unbind is adopted when the store
/// still holds the version the writer read and the binding is not older than the store's.
pub(crate) fn conversations(change: &Change, file: &JsonDoc, store: Option<&JsonDoc>) -> Merged {
    let mut out = Merged::default();
    let Some(store) = store else {
        let path = change.path.display();
        out.events.push(SessionEvent::JsonAdopted { file: path, doc: file.clone(), append: false });
        return out;
    };
    let parsed = json_ancestors(change, file.style);
    let ancestor = closest(&parsed, |a| differing(a, file, ""));
    for key in union(&[Some(file), Some(store), ancestor]) {
        let (a, f, s) = (ancestor.and_then(|d| d.raw(key)), file.raw(key), store.raw(key));
        match merge(a.as_ref(), f.as_ref(), s.as_ref()) {
            Merge::Same => {}
            Merge::Dropped(_) if a != s => {}
            Merge::Outside(record) if a == s => {
                let older = s.is_some_and(|s| last_activity(record) < last_activity(s));
                if older {
                    out.conflict(change, key, "older than the store's binding: a stale rewrite");
                } else {
                    let record = Some((*record).to_owned());
                    out.events.push(SessionEvent::ConversationAdopted { key: key.into(), record });
                }
            }
            Merge::Dropped(_) => {
                out.events
                    .push(SessionEvent::ConversationAdopted { key: key.into(), record: None });
            }
            Merge::Outside(_) | Merge::Both { .. } => out.conflict(change, key, BOTH),
        }
    }
    out
}

/// A marker, a report or the template, whole: adopted when the store still holds the baseline.
pub(crate) fn whole<T: PartialEq>(
    change: &Change,
    base: Option<&T>,
    file: &T,
    store: Option<&T>,
    adopt: impl FnOnce() -> SessionEvent,
) -> Merged {
    let mut out = Merged::default();
    match merge(base, Some(file), store) {
        Merge::Same | Merge::Dropped(_) => {}
        Merge::Outside(_) => out.events.push(adopt()),
        Merge::Both { .. } => out.conflict(change, "file", BOTH),
    }
    out
}

fn text_of(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

/// The observations ledger: appends made outside (the file extends a version the writer read:
/// a baseline, or the baseline's first lines, absent file included) are appended; an outside
/// rewrite (a legacy prune) drops the baseline's lines it removed and appends the ones it added;
/// lines only the store holds are kept.
///
/// Lines are compared as the records upstream's line-by-line `JSON.parse` reads: a line that
/// parses is the same line as another of the same JSON value, whatever its spacing, escapes,
/// key order or carriage return at its end (a file converted to CRLF, or rewritten by another
/// JSON library, holds the same records); a line appended with a carriage return is adopted
/// without it.
pub(crate) fn observations(change: &Change, file: &str, store: Option<&Lines>) -> Merged {
    let mut out = Merged::default();
    let file = &without_cr(file);
    let Some(store) = store else {
        let lines = LineFile { lines: file.split('\n').map(str::to_owned).collect() };
        out.events.push(SessionEvent::LedgerAdopted {
            ledger: Ledger::Observations,
            file: lines,
            append: false,
        });
        return out;
    };
    let read: Vec<String> = change
        .base
        .iter()
        .chain(&change.history)
        .filter_map(|b| text_of(b))
        .map(without_cr)
        .collect();
    // The file extends the latest version it holds whole: a baseline, or what a killed call of
    // the mirror announced and wrote (its lines are the store's already).
    let announced = change.announced.as_deref().and_then(text_of).map(without_cr);
    let extended = read.iter().chain(&announced).filter(|r| file.starts_with(r.as_str()));
    if let Some(read) = extended.max_by_key(|r| r.len()) {
        out.events.extend(appended(&file[read.len()..]));
        return out;
    }
    let base_lines: Vec<Line> = read.first().map(|b| terminated(b)).unwrap_or_default();
    let file_lines = terminated(file);
    let kept = without(&file_lines, &without(&file_lines, &base_lines));
    let stale = base_lines.starts_with(&kept);
    let stored = || store.lines.iter().map(|(p, l)| (*p, Line::of(l))).collect::<Vec<_>>();
    if !stale {
        // A rewrite: the baseline's lines the file no longer holds are dropped from the store.
        let mut pool = stored();
        let mut dropped = Vec::new();
        for line in without(&base_lines, &file_lines) {
            if let Some(at) = pool.iter().position(|(_, l)| l.key == line.key) {
                dropped.push(pool.remove(at).0);
            }
        }
        if !dropped.is_empty() {
            out.events.push(SessionEvent::LinesDropped { positions: dropped });
        }
    }
    let mut known: Vec<Line> = if read.is_empty() {
        stored().into_iter().map(|(_, l)| l).collect()
    } else {
        base_lines.clone()
    };
    // The lines a killed call announced beyond its baseline are the store's own.
    if let Some(announced) = &announced {
        known.extend(without(&terminated(announced), &base_lines));
    }
    for line in without(&file_lines, &known) {
        let line = line.text.to_owned();
        out.events.push(SessionEvent::LineAppended { ledger: Ledger::Observations, line });
    }
    out
}

/// `text` with the carriage return before each line feed removed.
fn without_cr(text: &str) -> String {
    text.replace("\r\n", "\n")
}

/// A ledger line as the merge compares it: by the record it holds
/// ([`crate::legacy::json::record_key`]), its text kept (without a carriage return at its end).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line<'a> {
    key: String,
    text: &'a str,
}

impl<'a> Line<'a> {
    fn of(text: &'a str) -> Line<'a> {
        let text = text.strip_suffix('\r').unwrap_or(text);
        Line { key: crate::legacy::json::record_key(text), text }
    }
}

/// The newline-terminated lines of a text.
fn terminated(text: &str) -> Vec<Line<'_>> {
    let mut lines: Vec<Line> = text.split('\n').map(Line::of).collect();
    lines.pop();
    lines
}

/// The lines of `a` not matched one for one in `b` (by record), in `a`'s order.
fn without<'a>(a: &[Line<'a>], b: &[Line]) -> Vec<Line<'a>> {
    let mut pool: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for line in b {
        *pool.entry(line.key.as_str()).or_insert(0) += 1;
    }
    let mut out = Vec::new();
    for line in a {
        match pool.get_mut(line.key.as_str()).filter(|n| **n > 0) {
            Some(n) => *n -= 1,
            None => out.push(line.clone()),
        }
    }
    out
}

/// The events that append `text` (lines, then an unterminated rest) to the observations.
fn appended(text: &str) -> Vec<SessionEvent> {
    let mut events: Vec<SessionEvent> = Vec::new();
    let mut pieces: Vec<&str> = text.split('\n').collect();
    let rest = pieces.pop().unwrap_or_default();
    for line in pieces {
        events.push(SessionEvent::LineAppended {
            ledger: Ledger::Observations,
            line: line.to_owned(),
        });
    }
    if !rest.is_empty() {
        events.push(SessionEvent::TailAppended {
            ledger: Ledger::Observations,
            text: rest.to_owned(),
        });
    }
    events
}

fn row_id(row: &serde_json::Map<String, Value>) -> Option<&str> {
    row.get("id").and_then(Value::as_str)
}

fn rows_by_id(file: &LineFile) -> Vec<(String, serde_json::Map<String, Value>)> {
    let mut out: Vec<(String, serde_json::Map<String, Value>)> = Vec::new();
    for row in hypotheses::rows(file) {
        if let Some(id) = row_id(&row).map(str::to_owned) {
            if !out.iter().any(|(k, _)| *k == id) {
                out.push((id, row));
            }
        }
    }
    out
}

/// `hypotheses.jsonl` per row: a row added outside is appended; a pending row settled outside
/// is patched (only pending rows change, as `later.ts` changes them); rows only the store holds
/// are kept.
pub(crate) fn hypotheses_rows(
    change: &Change,
    file: &LineFile,
    store: Option<&LineFile>,
) -> Merged {
    let mut out = Merged::default();
    let Some(store) = store else {
        out.events.push(SessionEvent::LedgerAdopted {
            ledger: Ledger::Hypotheses,
            file: file.clone(),
            append: false,
        });
        return out;
    };
    let parse = |b: &[u8]| {
        text_of(b).map(|t| LineFile { lines: t.split('\n').map(str::to_owned).collect() })
    };
    let parsed: Vec<Vec<(String, serde_json::Map<String, Value>)>> =
        ancestors(change, parse).iter().map(rows_by_id).collect();
    let (file_rows, store_rows) = (rows_by_id(file), rows_by_id(store));
    let ancestor = closest(&parsed, |a| {
        file_rows
            .iter()
            .filter(|(id, r)| a.iter().find(|(k, _)| k == id).map(|(_, x)| x) != Some(r))
            .count()
    });
    for (id, f) in &file_rows {
        let a = ancestor.and_then(|rows| rows.iter().find(|(k, _)| k == id)).map(|(_, r)| r);
        let s = store_rows.iter().find(|(k, _)| k == id).map(|(_, r)| r);
        match merge(a, Some(f), s) {
            Merge::Outside(row) if s.is_none() => {
                let line = crate::kernel::compat::js::compact(&Value::Object(row.clone()));
                out.events.push(SessionEvent::LineAppended { ledger: Ledger::Hypotheses, line });
            }
            Merge::Outside(row)
                if a == s && s.is_some_and(|s| s.get("state") == Some(&Value::from("pending"))) =>
            {
                let sets = row
                    .iter()
                    .filter(|(k, v)| s.and_then(|s| s.get(*k)) != Some(*v))
                    .map(|(k, v)| (k.clone(), crate::kernel::compat::js::compact(v)))
                    .collect();
                out.events.push(SessionEvent::HypothesisPatched { id: id.clone(), sets });
            }
            Merge::Same | Merge::Dropped(_) => {}
            _ => out.conflict(change, id, "settled in the store, or changed in both"),
        }
    }
    out
}

fn body_lines(t: &TaskDoc) -> Vec<&str> {
    t.body.lines().filter(|l| !l.trim().is_empty()).collect()
}

/// A task record, whole: the version the writer read is the newest baseline whose body lines
/// the file still holds (entries are only appended); the file is adopted when the store still
/// holds that version, never reopening a closed record or lowering `result_rev`.
pub(crate) fn task(
    change: &Change,
    file: &TaskDoc,
    at: Option<String>,
    store: Option<&TaskRow>,
) -> Merged {
    let mut out = Merged::default();
    let record = file.id.clone();
    let Some(store) = store else {
        out.events.push(SessionEvent::TaskOpened { task: Box::new(file.clone()), path: at });
        return out;
    };
    if store.task == *file {
        return out;
    }
    if store.path != at {
        out.conflict(change, &record, "the store keeps this task in another file");
        return out;
    }
    let name = change.path.display();
    let parsed = ancestors(change, |b| crate::session::layout::task::parse(&name, b).ok());
    let lines = body_lines(file);
    let read = parsed.iter().find(|a| body_lines(a).iter().all(|l| lines.contains(l)));
    let why = match read {
        Some(read) if *read == store.task => {
            if store.task.status == "closed" && file.status == "open" {
                Some("reopens a closed task")
            } else if file.result_rev < store.task.result_rev {
                Some("lowers result_rev: a stale rewrite")
            } else {
                None
            }
        }
        Some(read) if read == file => return out,
        _ => Some(BOTH),
    };
    match why {
        Some(why) => out.conflict(change, &record, why),
        None => {
            let previous = TaskKeys::of(&store.task);
            let task = Box::new(file.clone());
            out.events.push(SessionEvent::TaskAdopted { task, path: at, previous });
        }
    }
    out
}

/// The sections of a `SHELL.md` text: `(heading, body)` in order, the preamble first as `""`.
fn sections(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![(String::new(), String::new())];
    for line in text.split_inclusive('\n') {
        match line.strip_prefix("## ") {
            Some(heading) => out.push((heading.trim_end().to_owned(), String::new())),
            None => {
                if let Some(last) = out.last_mut() {
                    last.1.push_str(line);
                }
            }
        }
    }
    out
}

/// The lines a section body gained over a version (its body a prefix of the new one, trailing
/// blank lines aside); `None` when it changed otherwise.
fn gained<'a>(read: &str, now: &'a str) -> Option<Vec<&'a str>> {
    let head = read.trim_end_matches('\n');
    let rest = now.strip_prefix(head)?;
    Some(rest.split('\n').map(str::trim_end).filter(|l| !l.is_empty()).collect())
}

/// `SHELL.md` per section: when the file only appended lines to sections of a version the
/// writer read, those lines are appended to the store's sections; any other outside edit is
/// adopted whole only while the store still holds the baseline.
pub(crate) fn shell_text(change: &Change, file: &str, store: Option<&str>) -> Merged {
    let mut out = Merged::default();
    let adopt = || SessionEvent::ShellWritten { text: file.to_owned(), append: false };
    let Some(store) = store else {
        out.events.push(adopt());
        return out;
    };
    let read: Vec<&str> =
        change.base.iter().chain(&change.history).filter_map(|b| text_of(b)).collect();
    let now = sections(file);
    let extends = |r: &&str| {
        let was = sections(r);
        was.len() == now.len()
            && was.iter().zip(&now).all(|(a, b)| a.0 == b.0 && gained(&a.1, &b.1).is_some())
    };
    let Some(read) = read.iter().find(|r| extends(r)) else {
        return whole(
            change,
            change.base.as_deref().and_then(text_of).as_ref(),
            &file,
            Some(&store),
            adopt,
        );
    };
    let mut merged = store.to_owned();
    for ((heading, was), (_, body)) in sections(read).iter().zip(&now) {
        for line in gained(was, body).unwrap_or_default() {
            if heading.is_empty() {
                continue;
            }
            match shell::append_to_section(&merged, heading, line) {
                Some(next) => merged = next,
                None => out.conflict(change, heading, "the store's SHELL.md has no such section"),
            }
        }
    }
    if merged != store {
        out.events.push(SessionEvent::ShellWritten { text: merged, append: false });
    }
    out
}
