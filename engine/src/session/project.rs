//! The session projection: each event onto the rows of its hermit's scope, through the same
//! `apply` functions the rules decide with (`runtime::apply`, `task_doc::apply_edit`,
//! `conversations::apply`, `observations::Lines`, `hypotheses::apply_patch`, `shell::apply`), so
//! a decision and its projection agree. Task records keep their index rows here.
//!
//! Pure: no IO, no clock, no failure.

use hookstate_schema::heartbeat::{FileDoc, NextTaskRevDoc};
use hookstate_schema::session::{
    HeldDoc, JsonDoc, LedgerMeta, LineDoc, LineFile, ReportsMeta, SessionEvent, Style, TaskDoc,
    TaskKeys, TaskRef, TaskRow, TasksMeta, TextDoc,
};
use hookstate_schema::{Body, Event, ViewKey};
use serde_json::{json, Map, Value};

use super::rules::archive::report_number;
use super::rules::observations::{position, Lines};
use super::rules::task_doc::{apply_edit, is_runnable};
use super::rules::{conversations, hypotheses, runtime, shell};
use super::views::{self as v, order_id};
use crate::kernel::call::fields;
use crate::kernel::doc::{doc_key, get_doc, put_doc};
use crate::kernel::project::Projection;
use crate::kernel::view::ViewAccess;
use crate::legacy::json as legacy_json;

/// The session domain's projection.
pub(crate) struct SessionProjection;

impl Projection for SessionProjection {
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey> {
        match &event.content.body {
            Body::Session(body) => touched_keys(&event.content.scope, event.seq, body),
            _ => Vec::new(),
        }
    }

    fn apply(&self, views: &mut dyn ViewAccess, event: &Event) {
        if let Body::Session(body) = &event.content.body {
            apply(views, &event.content.scope, event.seq, body);
        }
    }

    fn render(&self, body: &Body) -> Map<String, Value> {
        match body {
            Body::Session(event) => render(event),
            _ => Map::new(),
        }
    }
}

/// The file a `JsonAdopted` event names.
enum JsonFile {
    Runtime,
    Conversations,
    Marker(hookstate_schema::session::Marker),
    Other,
}

fn json_file(file: &str) -> JsonFile {
    match super::layout::files::kind_of(file) {
        Some(super::layout::files::SessionFile::Runtime) => JsonFile::Runtime,
        Some(super::layout::files::SessionFile::Conversations) => JsonFile::Conversations,
        Some(super::layout::files::SessionFile::Marker(marker)) => JsonFile::Marker(marker),
        _ => JsonFile::Other,
    }
}

/// Every index row of a record with these keys.
fn task_keys(scope: &str, keys: &TaskKeys) -> Vec<ViewKey> {
    let order = order_id(&keys.opened_at, &keys.id);
    let mut out = vec![
        v::task_key(scope, &keys.id),
        doc_key(scope, v::OPEN_KIND, &order),
        doc_key(scope, v::RUNNABLE_KIND, &order),
        doc_key(scope, v::HANDLE_KIND, &keys.handle),
        doc_key(scope, v::BY_REQUESTER_KIND, &format!("{}|{order}", keys.requester)),
        doc_key(scope, v::META_KIND, v::TASKS_ID),
    ];
    if let Some(dedupe) = &keys.dedupe_key {
        out.push(doc_key(scope, v::DEDUPE_KIND, dedupe));
    }
    if let Some(conversation) = &keys.conversation {
        out.push(doc_key(scope, v::BY_CONVERSATION_KIND, &format!("{conversation}|{order}")));
    }
    out
}

fn line_key(scope: &str, position: u64) -> ViewKey {
    doc_key(scope, v::OBSERVATION_KIND, &v::line_id(position))
}

fn observations_meta_key(scope: &str) -> ViewKey {
    doc_key(scope, v::LEDGER_KIND, v::OBSERVATIONS_ID)
}

fn hypotheses_keys(scope: &str) -> Vec<ViewKey> {
    vec![doc_key(scope, v::LEDGER_KIND, v::HYPOTHESES_ID), doc_key(scope, v::META_KIND, v::HELD_ID)]
}

fn is_observations(event: &SessionEvent) -> bool {
    use hookstate_schema::session::Ledger::Observations;
    matches!(
        event,
        SessionEvent::LineAppended { ledger: Observations, .. }
            | SessionEvent::TailAppended { ledger: Observations, .. }
            | SessionEvent::LedgerAdopted { ledger: Observations, .. }
            | SessionEvent::LinesDropped { .. }
            | SessionEvent::ObservationsPruned { .. }
    )
}

fn observation_keys(scope: &str, seq: u64, event: &SessionEvent) -> Vec<ViewKey> {
    let mut keys = vec![observations_meta_key(scope)];
    match event {
        SessionEvent::LineAppended { .. } => keys.push(line_key(scope, position(seq, 0))),
        SessionEvent::LedgerAdopted { file, .. } => {
            let count = file.lines.len().saturating_sub(1);
            keys.extend((0..count).map(|i| line_key(scope, position(seq, i))));
        }
        SessionEvent::LinesDropped { positions } => {
            keys.extend(positions.iter().map(|p| line_key(scope, *p)));
        }
        SessionEvent::ObservationsPruned { dropped, .. } => {
            keys.extend(dropped.iter().map(|p| line_key(scope, *p)));
            keys.push(line_key(scope, position(seq, 0)));
        }
        _ => {}
    }
    keys
}

fn touched_keys(scope: &str, seq: u64, event: &SessionEvent) -> Vec<ViewKey> {
    if is_observations(event) {
        return observation_keys(scope, seq, event);
    }
    let runtime = || vec![v::runtime_key(scope), v::next_rev_key(scope)];
    match event {
        SessionEvent::RuntimeChanged { .. } => runtime(),
        SessionEvent::JsonAdopted { file, .. } => match json_file(file) {
            JsonFile::Runtime => runtime(),
            JsonFile::Conversations => vec![v::conversations_key(scope)],
            JsonFile::Marker(marker) => vec![v::marker_key(scope, marker)],
            JsonFile::Other => Vec::new(),
        },
        SessionEvent::TaskOpened { task, .. } => task_keys(scope, &TaskKeys::of(task)),
        SessionEvent::TaskChanged { keys, .. } => task_keys(scope, keys),
        SessionEvent::TaskAdopted { task, previous, .. } => {
            let mut keys = task_keys(scope, previous);
            keys.extend(task_keys(scope, &TaskKeys::of(task)));
            keys
        }
        SessionEvent::ConversationBound { .. }
        | SessionEvent::ConversationUpdated { .. }
        | SessionEvent::ConversationAdopted { .. }
        | SessionEvent::ConversationUnbound { .. }
        | SessionEvent::ConversationsPruned { .. } => vec![v::conversations_key(scope)],
        SessionEvent::LineAppended { .. }
        | SessionEvent::TailAppended { .. }
        | SessionEvent::LedgerAdopted { .. }
        | SessionEvent::HypothesisPatched { .. } => hypotheses_keys(scope),
        SessionEvent::MarkerWritten { marker, .. } | SessionEvent::MarkerRemoved { marker } => {
            vec![v::marker_key(scope, *marker)]
        }
        SessionEvent::ShellAppended { .. }
        | SessionEvent::ShellWritten { .. }
        | SessionEvent::ShellReset { .. } => vec![doc_key(scope, v::TEXT_KIND, v::SHELL_ID)],
        SessionEvent::TemplateAdopted { .. } => vec![doc_key(scope, v::TEXT_KIND, v::TEMPLATE_ID)],
        SessionEvent::ReportWritten { session_id, .. } => vec![
            doc_key(scope, v::REPORT_KIND, &format!("{session_id}-REPORT.md")),
            doc_key(scope, v::META_KIND, v::REPORTS_ID),
        ],
        SessionEvent::LinesDropped { .. }
        | SessionEvent::ObservationsPruned { .. }
        | SessionEvent::FileQuarantined { .. } => Vec::new(),
    }
}

fn apply(views: &mut dyn ViewAccess, scope: &str, seq: u64, event: &SessionEvent) {
    if is_observations(event) {
        return apply_observations(views, scope, seq, event);
    }
    match event {
        SessionEvent::RuntimeChanged { .. } => edit_runtime(views, scope, |doc| {
            runtime::apply(doc, event);
        }),
        SessionEvent::JsonAdopted { file, doc, append } => {
            apply_json(views, scope, file, doc, *append);
        }
        SessionEvent::TaskOpened { task, path } => {
            // A decision opens only a new id; a stored record of the same keys is replaced whole.
            let before = get_doc::<TaskRow>(views, &v::task_key(scope, &task.id))
                .filter(|b| TaskKeys::of(&b.task) == TaskKeys::of(task));
            let row = TaskRow { task: (**task).clone(), path: path.clone() };
            put_task(views, scope, before.as_ref().map(|b| &b.task), row);
        }
        SessionEvent::TaskChanged { id, at, edits, keys, .. } => {
            let Some(before) = get_doc::<TaskRow>(views, &v::task_key(scope, id)) else { return };
            if TaskKeys::of(&before.task) != *keys {
                return;
            }
            let mut after = before.clone();
            for edit in edits {
                apply_edit(&mut after.task, at, edit);
            }
            put_task(views, scope, Some(&before.task), after);
        }
        SessionEvent::TaskAdopted { task, path, previous } => {
            let before = get_doc::<TaskRow>(views, &v::task_key(scope, &previous.id))
                .filter(|b| TaskKeys::of(&b.task) == *previous);
            if let Some(before) = &before {
                unindex(views, scope, &before.task);
            }
            let row = TaskRow { task: (**task).clone(), path: path.clone() };
            put_task(views, scope, None, row);
        }
        SessionEvent::MarkerWritten { marker, doc } => {
            put_doc(views, v::marker_key(scope, *marker), doc);
        }
        SessionEvent::MarkerRemoved { marker } => views.delete(&v::marker_key(scope, *marker)),
        SessionEvent::ReportWritten { session_id, text, append } => {
            apply_report(views, scope, session_id, text, *append);
        }
        SessionEvent::TemplateAdopted { text, append } => {
            let key = doc_key(scope, v::TEXT_KIND, v::TEMPLATE_ID);
            let mut current = get_doc::<TextDoc>(views, &key).map(|d| d.text);
            append_text(&mut current, text, *append);
            put_doc(views, key, &TextDoc { text: current.unwrap_or_default() });
        }
        SessionEvent::ShellAppended { .. }
        | SessionEvent::ShellWritten { .. }
        | SessionEvent::ShellReset { .. } => {
            let key = doc_key(scope, v::TEXT_KIND, v::SHELL_ID);
            let mut text = get_doc::<TextDoc>(views, &key).map(|d| d.text);
            shell::apply(&mut text, event);
            if let Some(text) = text {
                put_doc(views, key, &TextDoc { text });
            }
        }
        _ => apply_ledgers(views, scope, event),
    }
}

/// Conversations and the hypotheses ledger.
fn apply_ledgers(views: &mut dyn ViewAccess, scope: &str, event: &SessionEvent) {
    match event {
        SessionEvent::ConversationAdopted { key, record } => {
            let row = v::conversations_key(scope);
            let mut store = get_doc::<JsonDoc>(views, &row).unwrap_or_else(empty_store);
            match record {
                Some(record) => store.set(key, record.clone()),
                None => store.fields.retain(|(k, _)| k != key),
            }
            put_doc(views, row, &store);
        }
        SessionEvent::ConversationBound { .. }
        | SessionEvent::ConversationUpdated { .. }
        | SessionEvent::ConversationUnbound { .. }
        | SessionEvent::ConversationsPruned { .. } => {
            let row = v::conversations_key(scope);
            let mut store = get_doc::<JsonDoc>(views, &row).unwrap_or_else(empty_store);
            conversations::apply(&mut store, event);
            put_doc(views, row, &store);
        }
        SessionEvent::LineAppended { line, .. } => {
            edit_hypotheses(views, scope, |f| super::rules::observations::append(f, line));
        }
        SessionEvent::TailAppended { text, .. } => edit_hypotheses(views, scope, |f| {
            if let Some(tail) = f.lines.last_mut() {
                tail.push_str(text);
            }
        }),
        SessionEvent::LedgerAdopted { file, append, .. } => edit_hypotheses(views, scope, |f| {
            if *append {
                f.lines.pop();
                f.lines.extend(file.lines.iter().cloned());
            } else {
                f.clone_from(file);
            }
        }),
        SessionEvent::HypothesisPatched { id, sets } => {
            edit_hypotheses(views, scope, |f| hypotheses::apply_patch(f, id, sets));
        }
        _ => {}
    }
}

fn empty_store() -> JsonDoc {
    JsonDoc { fields: Vec::new(), style: Style::Pretty }
}

fn append_text(current: &mut Option<String>, text: &str, append: bool) {
    match current {
        Some(current) if append => current.push_str(text),
        _ => *current = Some(text.to_owned()),
    }
}

fn edit_runtime(views: &mut dyn ViewAccess, scope: &str, edit: impl FnOnce(&mut Option<JsonDoc>)) {
    let key = v::runtime_key(scope);
    let mut doc = get_doc::<FileDoc>(views, &key).and_then(|f| v::runtime_doc(&f.text));
    edit(&mut doc);
    if let Some(doc) = doc {
        put_doc(views, key, &FileDoc { text: legacy_json::render(&doc) });
    }
    // As every heartbeat write of runtime.json does: the next-task token counts the change.
    let rev_key = v::next_rev_key(scope);
    let rev = get_doc::<NextTaskRevDoc>(views, &rev_key).unwrap_or_default().rev;
    put_doc(views, rev_key, &NextTaskRevDoc { rev: rev.saturating_add(1) });
}

fn apply_json(views: &mut dyn ViewAccess, scope: &str, file: &str, doc: &JsonDoc, append: bool) {
    let merged = |current: Option<JsonDoc>| match current {
        Some(mut current) if append => {
            current.fields.extend(doc.fields.iter().cloned());
            current
        }
        _ => doc.clone(),
    };
    match json_file(file) {
        JsonFile::Runtime => edit_runtime(views, scope, |current| {
            *current = Some(merged(current.take()));
        }),
        JsonFile::Conversations => {
            let key = v::conversations_key(scope);
            let next = merged(get_doc(views, &key));
            put_doc(views, key, &next);
        }
        JsonFile::Marker(marker) => {
            let key = v::marker_key(scope, marker);
            let next = merged(get_doc(views, &key));
            put_doc(views, key, &next);
        }
        JsonFile::Other => {}
    }
}

fn apply_report(
    views: &mut dyn ViewAccess,
    scope: &str,
    session_id: &str,
    text: &str,
    append: bool,
) {
    let name = format!("{session_id}-REPORT.md");
    let key = doc_key(scope, v::REPORT_KIND, &name);
    let mut current = get_doc::<TextDoc>(views, &key).map(|d| d.text);
    append_text(&mut current, text, append);
    put_doc(views, key, &TextDoc { text: current.unwrap_or_default() });
    let meta_key = doc_key(scope, v::META_KIND, v::REPORTS_ID);
    let mut meta = get_doc::<ReportsMeta>(views, &meta_key).unwrap_or_default();
    meta.max = meta.max.max(report_number(&name).unwrap_or(0));
    put_doc(views, meta_key, &meta);
}

fn edit_hypotheses(views: &mut dyn ViewAccess, scope: &str, edit: impl FnOnce(&mut LineFile)) {
    let key = doc_key(scope, v::LEDGER_KIND, v::HYPOTHESES_ID);
    let mut file = get_doc::<LineFile>(views, &key).unwrap_or_default();
    edit(&mut file);
    let held = HeldDoc { ids: hypotheses::held_ids(&file) };
    put_doc(views, key, &file);
    put_doc(views, doc_key(scope, v::META_KIND, v::HELD_ID), &held);
}

/// An observations event over the rows it touches: the meta row and the lines it names.
fn apply_observations(views: &mut dyn ViewAccess, scope: &str, seq: u64, event: &SessionEvent) {
    let meta_key = observations_meta_key(scope);
    let meta = get_doc::<LedgerMeta>(views, &meta_key);
    let fresh = matches!(event, SessionEvent::LedgerAdopted { append: false, .. });
    let meta = if fresh { LedgerMeta::default() } else { meta.unwrap_or_default() };
    let named: Vec<u64> = observation_keys(scope, seq, event)
        .iter()
        .skip(1)
        .filter_map(|key| match key {
            ViewKey::Doc { id, .. } => id.parse().ok(),
            _ => None,
        })
        .collect();
    let lines: Vec<(u64, String)> = named
        .iter()
        .filter_map(|p| get_doc::<LineDoc>(views, &line_key(scope, *p)).map(|l| (*p, l.text)))
        .collect();
    let before = lines.len() as u64;
    let mut ledger = Lines { lines, tail: meta.tail };
    ledger.apply(event, seq);
    for p in &named {
        if !ledger.lines.iter().any(|(q, _)| q == p) {
            views.delete(&line_key(scope, *p));
        }
    }
    for (p, text) in &ledger.lines {
        put_doc(views, line_key(scope, *p), &LineDoc { text: text.clone() });
    }
    let after = ledger.lines.len() as u64;
    let lines = (meta.lines + after).saturating_sub(before);
    put_doc(views, meta_key, &LedgerMeta { tail: ledger.tail, lines });
}

/// Writes a record and its index rows; `before` is the stored version the record replaces.
fn put_task(views: &mut dyn ViewAccess, scope: &str, before: Option<&TaskDoc>, row: TaskRow) {
    if let Some(before) = before {
        unindex(views, scope, before);
    }
    let t = &row.task;
    let keys = TaskKeys::of(t);
    let order = order_id(&t.opened_at, &t.id);
    let entry = TaskRef { id: t.id.clone() };
    let open = t.status == "open";
    if open {
        put_doc(views, doc_key(scope, v::OPEN_KIND, &order), &entry);
        put_doc(views, doc_key(scope, v::HANDLE_KIND, &t.handle), &entry);
        if let Some(dedupe) = &t.dedupe_key {
            put_doc(views, doc_key(scope, v::DEDUPE_KIND, dedupe), &entry);
        }
    }
    if is_runnable(t) {
        put_doc(views, doc_key(scope, v::RUNNABLE_KIND, &order), &entry);
    }
    put_doc(
        views,
        doc_key(scope, v::BY_REQUESTER_KIND, &format!("{}|{order}", keys.requester)),
        &entry,
    );
    if let Some(conversation) = &keys.conversation {
        let id = format!("{conversation}|{order}");
        put_doc(views, doc_key(scope, v::BY_CONVERSATION_KIND, &id), &entry);
    }
    count_open(views, scope, i64::from(open));
    put_doc(views, v::task_key(scope, &t.id), &row);
}

/// Removes the index rows of a stored record (the record's own row is overwritten or kept).
fn unindex(views: &mut dyn ViewAccess, scope: &str, t: &TaskDoc) {
    let order = order_id(&t.opened_at, &t.id);
    let mut own = |kind: &str, id: &str| {
        let key = doc_key(scope, kind, id);
        if get_doc::<TaskRef>(views, &key).is_some_and(|r| r.id == t.id) {
            views.delete(&key);
        }
    };
    own(v::OPEN_KIND, &order);
    own(v::RUNNABLE_KIND, &order);
    own(v::HANDLE_KIND, &t.handle);
    if let Some(dedupe) = &t.dedupe_key {
        own(v::DEDUPE_KIND, dedupe);
    }
    own(v::BY_REQUESTER_KIND, &format!("{}|{order}", t.requester));
    if let Some(conversation) = &t.conversation {
        own(v::BY_CONVERSATION_KIND, &format!("{conversation}|{order}"));
    }
    count_open(views, scope, -i64::from(t.status == "open"));
}

fn count_open(views: &mut dyn ViewAccess, scope: &str, delta: i64) {
    if delta == 0 {
        return;
    }
    let key = doc_key(scope, v::META_KIND, v::TASKS_ID);
    let mut meta = get_doc::<TasksMeta>(views, &key).unwrap_or_default();
    meta.open = meta.open.saturating_add_signed(delta);
    put_doc(views, key, &meta);
}

/// What an event stands for in a replayed result and in `hookstate log`.
fn render(event: &SessionEvent) -> Map<String, Value> {
    let mut out = fields(json!({ "session": event.kind() }));
    let named = match event {
        SessionEvent::TaskOpened { task, .. } | SessionEvent::TaskAdopted { task, .. } => {
            Some(("id", task.id.clone()))
        }
        SessionEvent::TaskChanged { id, verb, .. } => {
            out.insert("verb".into(), json!(verb));
            Some(("id", id.clone()))
        }
        SessionEvent::ConversationBound { key, .. }
        | SessionEvent::ConversationUpdated { key, .. }
        | SessionEvent::ConversationAdopted { key, .. }
        | SessionEvent::ConversationUnbound { key } => Some(("key", key.clone())),
        SessionEvent::HypothesisPatched { id, .. } => Some(("id", id.clone())),
        SessionEvent::ReportWritten { session_id, .. } => Some(("session_id", session_id.clone())),
        SessionEvent::JsonAdopted { file, .. } | SessionEvent::FileQuarantined { file, .. } => {
            Some(("file", file.clone()))
        }
        SessionEvent::ShellAppended { section, .. } => Some(("section", section.clone())),
        SessionEvent::MarkerWritten { marker, .. } | SessionEvent::MarkerRemoved { marker } => {
            Some(("file", format!("state/{}", v::marker_name(*marker))))
        }
        SessionEvent::LineAppended { ledger, .. }
        | SessionEvent::TailAppended { ledger, .. }
        | SessionEvent::LedgerAdopted { ledger, .. } => {
            let name = match ledger {
                hookstate_schema::session::Ledger::Observations => "state/observations.jsonl",
                hookstate_schema::session::Ledger::Hypotheses => "state/hypotheses.jsonl",
            };
            Some(("file", name.to_owned()))
        }
        SessionEvent::RuntimeChanged { cause, .. } => Some(("cause", format!("{cause:?}"))),
        _ => None,
    };
    if let Some((name, value)) = named {
        out.insert(name.into(), json!(value));
    }
    out
}
