//! The proposals projection: the queue document, the MP sequence counters, the PROP documents,
//! the index stamp and the ledger-derived marks; the result each event stands for; and the
//! ledger line each event stands for, so the queue and the ledger can never disagree.
//!
//! Pure: no IO, no clock, no failure.

use hookstate_schema::proposals::{
    IndexDoc, MicroQueued, MpSeqDoc, PropDoc, ProposalsEvent, QueueDoc, PROP_KIND, QUEUE_ID,
    QUEUE_KIND,
};
use hookstate_schema::{Body, Event, ViewKey};
use serde::Serialize;
use serde_json::{Map, Value};

use super::micro::{
    entry_map, entry_str, is_pending, line_kind, micro_ledger_line, parse_mp_id, render_micro,
    to_fields, MP_SEQ_KIND,
};
use super::props::{prop_doc, prop_ledger_line, render_prop, INDEX_ID, INDEX_KIND};
use crate::kernel::doc::{doc_key, edit_doc, get_doc, put_doc};
use crate::kernel::project::Projection;
use crate::kernel::view::ViewAccess;

/// The proposals domain's projection.
pub(crate) struct ProposalsProjection;

impl Projection for ProposalsProjection {
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey> {
        match &event.content.body {
            Body::Proposals(body) => {
                let mut keys = touched_keys(&event.content.scope, body);
                keys.extend(ledger_key(&event.content.scope, event.seq, body));
                keys
            }
            _ => Vec::new(),
        }
    }

    fn apply(&self, views: &mut dyn ViewAccess, event: &Event) {
        if let Body::Proposals(body) = &event.content.body {
            apply(views, &event.content.scope, body);
            if let Some(key) = ledger_key(&event.content.scope, event.seq, body) {
                put_doc(views, key, &true);
            }
        }
    }

    fn render(&self, body: &Body) -> Map<String, Value> {
        match body {
            Body::Proposals(event) => render(event),
            _ => Map::new(),
        }
    }
}

/// Row kind of the ledger index (id: the seq of an event that stands for a ledger line, 20
/// digits): the ledger file is rendered from these events, not from a walk of the whole log.
pub(crate) const LEDGER_KIND: &str = "proposals.ledger";
/// Digits of a zero-padded `u64`, so ids sort as the numbers do.
const SEQ_DIGITS: usize = 20;

/// The ledger index row of an event that stands for a ledger line.
fn ledger_key(scope: &str, seq: u64, event: &ProposalsEvent) -> Option<ViewKey> {
    ledger_line(event).map(|_| doc_key(scope, LEDGER_KIND, &format!("{seq:0w$}", w = SEQ_DIGITS)))
}

/// The ledger line an event stands for, if any: compact JSON with `ts` first, as upstream's
/// `JSON.stringify` writes it; an adopted line as it was written.
pub(crate) fn ledger_line(event: &ProposalsEvent) -> Option<String> {
    match event {
        ProposalsEvent::LedgerLineImported { line } => Some(line.clone()),
        other => micro_ledger_line(other).or_else(|| prop_ledger_line(other)),
    }
}

/// The result of an adopted queue, ledger line or dropped entry.
#[derive(Serialize)]
#[serde(untagged)]
enum Adopted<'a> {
    Dropped { id: &'a str, dropped: bool },
    Queue { entries: usize },
    Line { line: &'a str },
}

/// The result fields a proposals event stands for, with its upstream verdict line.
pub(crate) fn render(event: &ProposalsEvent) -> Map<String, Value> {
    if let Some(fields) = render_micro(event).or_else(|| render_prop(event)) {
        return fields;
    }
    match event {
        ProposalsEvent::MicroDropped { id } => to_fields(&Adopted::Dropped { id, dropped: true }),
        ProposalsEvent::QueueImported { entries, .. } => {
            to_fields(&Adopted::Queue { entries: entries.len() })
        }
        ProposalsEvent::LedgerLineImported { line } => to_fields(&Adopted::Line { line }),
        _ => Map::new(),
    }
}

fn entry_id(entry: &Map<String, Value>) -> Option<String> {
    entry_str(entry, "id").map(str::to_owned)
}

fn seq_key(scope: &str, id: &str) -> Option<ViewKey> {
    parse_mp_id(id).map(|(date, _)| doc_key(scope, MP_SEQ_KIND, date))
}

/// The key of a PROP document, when `id` is a valid id (ledger lines come from outside).
pub(crate) fn prop_key(scope: &str, id: &str) -> Option<ViewKey> {
    hookstate_schema::validate_id("PROP id", id).ok().map(|()| doc_key(scope, PROP_KIND, id))
}

/// The MP id a `micro-queued` ledger line queues, or the PROP a `responded` line responds to.
fn line_target(line: &str, kind: &str) -> Option<String> {
    line_kind(line).filter(|(k, _)| k == kind).map(|(_, id)| id)
}

/// Every row `apply` may touch for a proposals event.
pub(crate) fn touched_keys(scope: &str, event: &ProposalsEvent) -> Vec<ViewKey> {
    let queue = doc_key(scope, QUEUE_KIND, QUEUE_ID);
    let prop = |file: &str| doc_key(scope, PROP_KIND, file.trim_end_matches(".md"));
    match event {
        ProposalsEvent::MicroQueued(MicroQueued { id, .. }) => {
            let mut keys = vec![queue];
            keys.extend(seq_key(scope, id));
            keys
        }
        ProposalsEvent::LedgerLineImported { line } => {
            let seq = line_target(line, "micro-queued").and_then(|id| seq_key(scope, &id));
            let responded = line_target(line, "responded").and_then(|id| prop_key(scope, &id));
            seq.into_iter().chain(responded).collect()
        }
        ProposalsEvent::QueueImported { entries, .. } => {
            let mut keys = vec![queue];
            for id in entries.iter().map(|e| entry_map(e)).filter_map(|e| entry_id(&e)) {
                match seq_key(scope, &id) {
                    Some(key) if !keys.contains(&key) => keys.push(key),
                    _ => {}
                }
            }
            keys
        }
        ProposalsEvent::MicroResolved { .. }
        | ProposalsEvent::MicroNudged { .. }
        | ProposalsEvent::MicroDropped { .. } => vec![queue],
        ProposalsEvent::PropImported { file, .. } => vec![prop(file)],
        ProposalsEvent::PropWritten { file, .. } => {
            vec![prop(file), doc_key(scope, INDEX_KIND, INDEX_ID)]
        }
        ProposalsEvent::IndexImported { .. } => vec![doc_key(scope, INDEX_KIND, INDEX_ID)],
        ProposalsEvent::PropResponded { id, .. } => prop_key(scope, id).into_iter().collect(),
        ProposalsEvent::PropCreated { .. } | ProposalsEvent::PropResolved { .. } => Vec::new(),
    }
}

fn bump_seq(views: &mut dyn ViewAccess, scope: &str, id: &str) {
    let (Some(key), Some((_, n))) = (seq_key(scope, id), parse_mp_id(id)) else {
        return;
    };
    let current = get_doc::<MpSeqDoc>(views, &key).unwrap_or_default();
    put_doc(views, key, &MpSeqDoc { next: current.next.max(n.saturating_add(1)) });
}

/// A queued entry as upstream writes it, in its key order.
#[derive(Serialize)]
struct NewEntry<'a> {
    id: &'a str,
    tier: i64,
    status: &'static str,
    follow_up_count: i64,
    ts: &'a str,
    question: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_resolve: Option<&'a str>,
}

fn new_entry(event: &ProposalsEvent) -> String {
    let ProposalsEvent::MicroQueued(queued) = event else {
        return String::new();
    };
    let MicroQueued { id, tier, question, options, ts, .. } = queued;
    let entry = NewEntry {
        id,
        tier: *tier,
        status: "pending",
        follow_up_count: 0,
        ts,
        question,
        options: options.as_deref(),
        on_resolve: queued.skill(),
    };
    serde_json::to_string(&entry).unwrap_or_default()
}

fn position(entries: &[String], id: &str, skip_pending: bool) -> Option<usize> {
    entries.iter().position(|text| {
        let entry = entry_map(text);
        // An entry without a string id (a hand-edited `null`) is dropped by the id "".
        entry_str(&entry, "id").unwrap_or_default() == id && !(skip_pending && is_pending(&entry))
    })
}

/// Changes the queue; any change drops the adopted file's verbatim text.
fn edit_queue(views: &mut dyn ViewAccess, key: &ViewKey, edit: impl FnOnce(&mut QueueDoc)) {
    // A replay keeps the decoded queue as its row between its events: decoding it whole (up to
    // 1,000 entries) on every micro event was 22 % of a replay of live hermit work, and encoding
    // it again most of the rest of the hermit events' share.
    edit_doc::<QueueDoc>(views, key, |queue| {
        edit(queue);
        queue.verbatim = None;
    });
}

/// Marks a PROP as having its `responded` line, when the PROP is known.
fn mark_responded(views: &mut dyn ViewAccess, scope: &str, id: &str) {
    let Some(key) = prop_key(scope, id) else {
        return;
    };
    if let Some(mut doc) = get_doc::<PropDoc>(views, &key) {
        doc.responded_logged = true;
        put_doc(views, key, &doc);
    }
}

/// A PROP document for new text, keeping what the log recorded about it.
fn rewritten(views: &dyn ViewAccess, key: &ViewKey, file: &str, text: &str) -> PropDoc {
    let logged = get_doc::<PropDoc>(views, key).is_some_and(|d| d.responded_logged);
    PropDoc { responded_logged: logged, ..prop_doc(file, text) }
}

/// Applies a proposals event to the views.
pub(crate) fn apply(views: &mut dyn ViewAccess, scope: &str, event: &ProposalsEvent) {
    let key = doc_key(scope, QUEUE_KIND, QUEUE_ID);
    match event {
        ProposalsEvent::MicroQueued(MicroQueued { id, .. }) => {
            edit_queue(views, &key, |queue| queue.entries.push(new_entry(event)));
            bump_seq(views, scope, id);
        }
        ProposalsEvent::MicroResolved { id, .. } | ProposalsEvent::MicroDropped { id } => {
            let skip_pending = matches!(event, ProposalsEvent::MicroDropped { .. });
            edit_queue(views, &key, |queue| {
                if let Some(index) = position(&queue.entries, id, skip_pending) {
                    queue.entries.remove(index);
                }
            });
        }
        ProposalsEvent::MicroNudged { id, count } => edit_queue(views, &key, |queue| {
            if let Some(index) = position(&queue.entries, id, false) {
                let mut entry = entry_map(&queue.entries[index]);
                entry.insert("follow_up_count".into(), Value::from(*count));
                queue.entries[index] = Value::Object(entry).to_string();
            }
        }),
        ProposalsEvent::QueueImported { top, entries, style, verbatim } => {
            let queue = QueueDoc {
                top: top.clone(),
                entries: entries.clone(),
                style: *style,
                verbatim: verbatim.clone(),
            };
            put_doc(views, key, &queue);
            // An entry written outside keeps its number: later ids of its date come after it.
            for id in entries.iter().map(|e| entry_map(e)).filter_map(|e| entry_id(&e)) {
                bump_seq(views, scope, &id);
            }
        }
        ProposalsEvent::LedgerLineImported { line } => {
            if let Some(id) = line_target(line, "micro-queued") {
                bump_seq(views, scope, &id);
            }
            if let Some(id) = line_target(line, "responded") {
                mark_responded(views, scope, &id);
            }
        }
        _ => apply_prop(views, scope, event),
    }
}

/// Applies a PROP event.
fn apply_prop(views: &mut dyn ViewAccess, scope: &str, event: &ProposalsEvent) {
    let index = doc_key(scope, INDEX_KIND, INDEX_ID);
    match event {
        ProposalsEvent::PropImported { file, text } => {
            let key = doc_key(scope, PROP_KIND, file.trim_end_matches(".md"));
            let doc = rewritten(views, &key, file, text);
            put_doc(views, key, &doc);
        }
        ProposalsEvent::PropWritten { file, text, updated } => {
            let key = doc_key(scope, PROP_KIND, file.trim_end_matches(".md"));
            let doc = rewritten(views, &key, file, text);
            put_doc(views, key, &doc);
            put_doc(views, index, &IndexDoc { updated: updated.clone() });
        }
        ProposalsEvent::IndexImported { updated } => {
            put_doc(views, index, &IndexDoc { updated: updated.clone() });
        }
        ProposalsEvent::PropResponded { id, .. } => mark_responded(views, scope, id),
        _ => {}
    }
}
