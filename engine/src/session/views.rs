//! The session domain's rows: their kinds and keys, and the typed reads a decision makes of
//! them inside its transaction. One scope per hermit (`hermit:<abs state dir>`).
//!
//! `runtime.json` is kept in the heartbeat domain's row for it (`heartbeat.file` /
//! `runtime.json`, the file's exact text), which both domains write as a per-field merge; the
//! session's projection also counts the change in the heartbeat's next-task revision, as a
//! heartbeat write does (docs/decisions.md, "Session domain"). Every other row is the session's
//! own. Does not decide or project anything.

use hookstate_schema::heartbeat::FileDoc;
use hookstate_schema::session::{
    HeldDoc, JsonDoc, LedgerMeta, LineDoc, LineFile, Marker, ReportsMeta, Style, TaskDoc, TaskRef,
    TaskRow, TasksMeta, TextDoc,
};
use hookstate_schema::ViewKey;
use serde_json::Value;

use super::layout::files::MARKERS;
use super::rules::observations::Lines;
use super::rules::task_doc::Tasks;
use crate::kernel::doc::{doc_key, read_doc, scan_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;

/// The heartbeat domain's row kind for its files; `runtime.json` is one of them (shared).
pub(crate) const RUNTIME_KIND: &str = "heartbeat.file";
/// The id of `runtime.json`'s row.
pub(crate) const RUNTIME_ID: &str = "runtime.json";
/// The heartbeat's count of `runtime.json` and `NEXT-TASK.md` changes (part of its token).
pub(crate) const NEXT_REV_KIND: &str = "heartbeat.nextrev";
/// The id of that count's row.
pub(crate) const NEXT_REV_ID: &str = "rev";
/// `conversations.json` (one row, id [`ONE`]).
pub(crate) const CONVERSATIONS_KIND: &str = "session.conversations";
/// A marker, by its file name under `state/`.
pub(crate) const MARKER_KIND: &str = "session.marker";
/// `SHELL.md` and the template, by file name.
pub(crate) const TEXT_KIND: &str = hookstate_schema::session::TEXT_KIND;
/// A session report, by file name.
pub(crate) const REPORT_KIND: &str = "session.report";
/// Counts: the reports' highest number ([`REPORTS_ID`]), the open tasks ([`TASKS_ID`]), the
/// held hypotheses ([`HELD_ID`]).
pub(crate) const META_KIND: &str = "session.meta";
/// A task record, by id.
pub(crate) const TASK_KIND: &str = "session.task";
/// Open records, by `<opened_at>|<id>` (`readTasks` order).
pub(crate) const OPEN_KIND: &str = "session.task.open";
/// Runnable records (open, resident, no result, not waiting), by `<opened_at>|<id>`.
pub(crate) const RUNNABLE_KIND: &str = "session.task.runnable";
/// Open records by `dedupe_key`.
pub(crate) const DEDUPE_KIND: &str = "session.task.dedupe";
/// Open records by `handle`.
pub(crate) const HANDLE_KIND: &str = "session.task.handle";
/// Every record by `<conversation>|<opened_at>|<id>`.
pub(crate) const BY_CONVERSATION_KIND: &str = "session.task.conversation";
/// Every record by `<requester>|<opened_at>|<id>`.
pub(crate) const BY_REQUESTER_KIND: &str = "session.task.requester";
/// A ledger's document: `observations` (its [`LedgerMeta`]) or `hypotheses` (the whole file).
pub(crate) const LEDGER_KIND: &str = "session.ledger";
/// One line of `observations.jsonl`, by its position (20 digits).
pub(crate) const OBSERVATION_KIND: &str = "session.observation";
/// The id of a one-row kind.
pub(crate) const ONE: &str = "one";
/// The reports' meta row.
pub(crate) const REPORTS_ID: &str = "reports";
/// The tasks' meta row.
pub(crate) const TASKS_ID: &str = "tasks";
/// The held hypotheses' row.
pub(crate) const HELD_ID: &str = "held";
/// `observations.jsonl`'s meta row.
pub(crate) const OBSERVATIONS_ID: &str = "observations";
/// `hypotheses.jsonl`'s row.
pub(crate) const HYPOTHESES_ID: &str = "hypotheses";
/// `SHELL.md`'s row.
pub(crate) const SHELL_ID: &str = hookstate_schema::session::SHELL_ID;
/// The template's row.
pub(crate) const TEMPLATE_ID: &str = "SHELL.md.template";
/// Records `list --all` reads at most: a hermit opens a few tasks a day.
pub(crate) const TASKS_LISTED_MAX: usize = 100_000;
/// Open records one verb reads at most (a hermit keeps a handful open).
pub(crate) const OPEN_TASKS_MAX: usize = 10_000;
/// Lines of `observations.jsonl` a prune or an export reads at most.
pub(crate) const OBSERVATION_LINES_MAX: usize = 1_000_000;

/// The file name of a marker under `state/`.
pub(crate) fn marker_name(marker: Marker) -> &'static str {
    MARKERS.iter().find(|(m, _)| *m == marker).map_or("", |(_, n)| n)
}

/// The id a `<value>|<opened_at>|<id>` index row sorts by.
pub(crate) fn order_id(opened_at: &str, id: &str) -> String {
    format!("{opened_at}|{id}")
}

/// The id of an observation line's row.
pub(crate) fn line_id(position: u64) -> String {
    format!("{position:020}")
}

pub(crate) fn runtime_key(scope: &str) -> ViewKey {
    doc_key(scope, RUNTIME_KIND, RUNTIME_ID)
}

pub(crate) fn next_rev_key(scope: &str) -> ViewKey {
    doc_key(scope, NEXT_REV_KIND, NEXT_REV_ID)
}

pub(crate) fn conversations_key(scope: &str) -> ViewKey {
    doc_key(scope, CONVERSATIONS_KIND, ONE)
}

pub(crate) fn marker_key(scope: &str, marker: Marker) -> ViewKey {
    doc_key(scope, MARKER_KIND, marker_name(marker))
}

pub(crate) fn task_key(scope: &str, id: &str) -> ViewKey {
    doc_key(scope, TASK_KIND, id)
}

/// `runtime.json`'s text as a document: the heartbeat row's text read as an ordered object
/// (pretty unless it is compact). `None` when the row is absent or does not hold an object.
pub(crate) fn runtime_doc(text: &str) -> Option<JsonDoc> {
    if let Ok(doc) = crate::legacy::json::parse_doc(RUNTIME_ID, text.as_bytes()) {
        return Some(doc);
    }
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(text) else { return None };
    let fields = map.into_iter().map(|(k, v)| (k, crate::kernel::compat::js::compact(&v)));
    Some(JsonDoc { fields: fields.collect(), style: Style::Pretty })
}

/// The stored `runtime.json` text.
pub(crate) fn runtime_text(txn: &dyn ReadTxn, scope: &str) -> Result<Option<String>> {
    Ok(read_doc::<FileDoc>(txn, scope, RUNTIME_KIND, RUNTIME_ID)?.map(|d| d.text))
}

/// The stored `runtime.json` as a document.
///
/// # Errors
/// [`Error::Corrupt`] when the stored text is not a JSON object; store errors.
pub(crate) fn runtime(txn: &dyn ReadTxn, scope: &str) -> Result<Option<JsonDoc>> {
    match runtime_text(txn, scope)? {
        Some(text) => runtime_doc(&text)
            .map(Some)
            .ok_or_else(|| Error::Corrupt("stored runtime.json is not a JSON object".into())),
        None => Ok(None),
    }
}

pub(crate) fn conversations(txn: &dyn ReadTxn, scope: &str) -> Result<Option<JsonDoc>> {
    read_doc(txn, scope, CONVERSATIONS_KIND, ONE)
}

pub(crate) fn marker(txn: &dyn ReadTxn, scope: &str, marker: Marker) -> Result<Option<JsonDoc>> {
    read_doc(txn, scope, MARKER_KIND, marker_name(marker))
}

pub(crate) fn text(txn: &dyn ReadTxn, scope: &str, id: &str) -> Result<Option<String>> {
    Ok(read_doc::<TextDoc>(txn, scope, TEXT_KIND, id)?.map(|d| d.text))
}

pub(crate) fn report(txn: &dyn ReadTxn, scope: &str, name: &str) -> Result<Option<String>> {
    Ok(read_doc::<TextDoc>(txn, scope, REPORT_KIND, name)?.map(|d| d.text))
}

/// Every report name the store holds, in name order.
pub(crate) fn report_names(txn: &dyn ReadTxn, scope: &str) -> Result<Vec<String>> {
    let rows = scan_docs::<TextDoc>(txn, scope, REPORT_KIND, "", TASKS_LISTED_MAX)?;
    Ok(rows.into_iter().map(|(name, _)| name).collect())
}

/// The highest report number held (`S-NNN`), 0 for none.
pub(crate) fn reports_max(txn: &dyn ReadTxn, scope: &str) -> Result<u64> {
    Ok(read_doc::<ReportsMeta>(txn, scope, META_KIND, REPORTS_ID)?.unwrap_or_default().max)
}

pub(crate) fn held(txn: &dyn ReadTxn, scope: &str) -> Result<HeldDoc> {
    Ok(read_doc(txn, scope, META_KIND, HELD_ID)?.unwrap_or_default())
}

pub(crate) fn hypotheses(txn: &dyn ReadTxn, scope: &str) -> Result<Option<LineFile>> {
    read_doc(txn, scope, LEDGER_KIND, HYPOTHESES_ID)
}

pub(crate) fn observations_meta(txn: &dyn ReadTxn, scope: &str) -> Result<Option<LedgerMeta>> {
    read_doc(txn, scope, LEDGER_KIND, OBSERVATIONS_ID)
}

/// Every line of `observations.jsonl` with its position, and the tail; `None` without a file.
pub(crate) fn observations(txn: &dyn ReadTxn, scope: &str) -> Result<Option<Lines>> {
    let Some(meta) = observations_meta(txn, scope)? else { return Ok(None) };
    let rows = scan_docs::<LineDoc>(txn, scope, OBSERVATION_KIND, "", OBSERVATION_LINES_MAX)?;
    let mut lines = Vec::with_capacity(rows.len());
    for (id, row) in rows {
        let position =
            id.parse().map_err(|_| Error::Corrupt(format!("observation row id {id:?}")))?;
        lines.push((position, row.text));
    }
    Ok(Some(Lines { lines, tail: meta.tail }))
}

pub(crate) fn task(txn: &dyn ReadTxn, scope: &str, id: &str) -> Result<Option<TaskRow>> {
    read_doc(txn, scope, TASK_KIND, id)
}

/// The records an index kind names, in its order (at most `limit`), from the rows whose id
/// starts with `prefix`.
pub(crate) fn indexed(
    txn: &dyn ReadTxn,
    scope: &str,
    kind: &str,
    prefix: &str,
    limit: usize,
) -> Result<Vec<TaskRow>> {
    let mut out = Vec::new();
    for (_, entry) in scan_docs::<TaskRef>(txn, scope, kind, prefix, limit)? {
        let row = task(txn, scope, &entry.id)?
            .ok_or_else(|| Error::Corrupt(format!("{kind} names a missing task {}", entry.id)))?;
        out.push(row);
    }
    Ok(out)
}

/// Every record, in `readTasks` order.
pub(crate) fn all_tasks(txn: &dyn ReadTxn, scope: &str) -> Result<Vec<TaskRow>> {
    let mut rows: Vec<TaskRow> = scan_docs::<TaskRow>(txn, scope, TASK_KIND, "", TASKS_LISTED_MAX)?
        .into_iter()
        .map(|(_, row)| row)
        .collect();
    rows.sort_by(|a, b| {
        a.task.opened_at.cmp(&b.task.opened_at).then_with(|| a.task.id.cmp(&b.task.id))
    });
    Ok(rows)
}

/// The open records, in `readTasks` order.
pub(crate) fn open_tasks(txn: &dyn ReadTxn, scope: &str) -> Result<Vec<TaskDoc>> {
    let rows = indexed(txn, scope, OPEN_KIND, "", OPEN_TASKS_MAX)?;
    Ok(rows.into_iter().map(|r| r.task).collect())
}

/// [`Tasks`] answered from the index rows inside a transaction. The lookups cannot fail in the
/// rules' signature, so the first store error is kept and [`StoreTasks::finish`] returns it;
/// a decision taken after an error is discarded.
pub(crate) struct StoreTasks<'t> {
    txn: &'t dyn ReadTxn,
    scope: &'t str,
    error: std::cell::RefCell<Option<Error>>,
}

impl<'t> StoreTasks<'t> {
    pub(crate) fn new(txn: &'t dyn ReadTxn, scope: &'t str) -> StoreTasks<'t> {
        StoreTasks { txn, scope, error: std::cell::RefCell::new(None) }
    }

    fn keep<T: Default>(&self, result: Result<T>) -> T {
        result.unwrap_or_else(|err| {
            self.error.borrow_mut().get_or_insert(err);
            T::default()
        })
    }

    /// The decision's value, or the first store error a lookup met.
    pub(crate) fn finish<T>(self, value: T) -> Result<T> {
        match self.error.into_inner() {
            Some(err) => Err(err),
            None => Ok(value),
        }
    }

    fn by_index(&self, kind: &str, id: &str) -> Option<TaskDoc> {
        let found = read_doc::<TaskRef>(self.txn, self.scope, kind, id);
        let entry = self.keep(found)?;
        self.by_id(&entry.id)
    }
}

impl Tasks for StoreTasks<'_> {
    fn by_id(&self, id: &str) -> Option<TaskDoc> {
        self.keep(task(self.txn, self.scope, id)).map(|r| r.task)
    }
    fn open_by_dedupe(&self, key: &str) -> Option<TaskDoc> {
        self.by_index(DEDUPE_KIND, key)
    }
    fn handle_taken(&self, handle: &str) -> bool {
        let found = read_doc::<TaskRef>(self.txn, self.scope, HANDLE_KIND, handle);
        self.keep(found).is_some()
    }
    fn open_count(&self) -> usize {
        let meta = read_doc::<TasksMeta>(self.txn, self.scope, META_KIND, TASKS_ID);
        let open = self.keep(meta).unwrap_or_default().open;
        usize::try_from(open).unwrap_or(usize::MAX)
    }
    fn runnable(&self, n: usize) -> Vec<TaskDoc> {
        let rows = self.keep(indexed(self.txn, self.scope, RUNNABLE_KIND, "", n));
        rows.into_iter().map(|r| r.task).collect()
    }
}
