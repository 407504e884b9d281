//! The micro-proposal half of the `proposals` domain: the queue (queue with dedup on the
//! exact question among pending entries, resolve, nudge, brief-cycle), `MP-YYYYMMDD-N` ids
//! allocated inside the write transaction, answer resolution, and the proposal ledger as a
//! projection of the log.
//!
//! Every verdict line upstream's `proposal.ts` prints is in the result's `verdict` field.
//! Decisions are pure functions over the queue document. Does not read config or legacy files;
//! `layout.rs` does.

use hookstate_schema::proposals::{MpSeqDoc, ProposalsEvent, QueueDoc, QUEUE_ID, QUEUE_KIND};
use hookstate_schema::{Body, ViewKey};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::Proposals;
use crate::kernel::call::fields;
use crate::kernel::call::Call;
use crate::kernel::call::Outcome;
use crate::kernel::call::Plan;
use crate::kernel::call::Refusal;
use crate::kernel::compat::stamp::{stamp_s, zoned};
use crate::kernel::doc::{doc_key, get_doc, put_doc, read_doc};
use crate::kernel::error::{Error, Result};
use crate::kernel::view::ViewAccess;

/// Document kind of the MP counter of one date (id: `YYYYMMDD`).
pub(crate) const MP_SEQ_KIND: &str = "proposals.mpseq";
/// The scope prefix of a hermit state directory: `hermit:<abs state dir>`.
pub const SCOPE_PREFIX: &str = "hermit:";
/// Fewest answer labels an entry with options has (channel-responder rules).
pub const OPTIONS_MIN: usize = 2;
/// Most answer labels an entry has (channel-responder rules).
pub const OPTIONS_MAX: usize = 4;
/// Longest question: a channel message line, with room to spare.
pub const QUESTION_BYTES_MAX: usize = 4096;
/// Longest answer label, `on_resolve` template and channel name.
pub const LABEL_BYTES_MAX: usize = 1024;
/// Entries the queue may hold: brief-cycle expires entries after two briefs, so a longer queue
/// means a runaway producer.
pub const QUEUE_ENTRIES_MAX: usize = 1000;
/// The follow-up count at which brief-cycle expires an entry.
pub const EXPIRE_AT_COUNT: i64 = 2;
/// The actions `micro resolve` accepts.
pub const ACTIONS: [&str; 4] = ["approved", "rejected", "answered", "expired"];
const MP_PREFIX: &str = "MP-";
const MP_DATE_DIGITS: usize = 8;

/// The stdin payload of `queue-micro`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MicroInput {
    /// The tier (default 1; forced to 1 with `on_resolve`).
    #[serde(default)]
    pub tier: Option<Value>,
    /// The question.
    #[serde(default)]
    pub question: Option<String>,
    /// 2–4 answer labels.
    #[serde(default)]
    pub options: Option<Vec<String>>,
    /// The skill invocation run after an answer.
    #[serde(default)]
    pub on_resolve: Option<String>,
}

/// The scope of a hermit state directory.
#[must_use]
pub fn hermit_scope(dir: &str) -> String {
    format!("{SCOPE_PREFIX}{dir}")
}

/// `todayYMD(tz)` without dashes: the MP id's date part.
///
/// # Errors
/// [`Error::Invalid`] for a time zone that is not an IANA name.
pub fn mp_date(at_ms: u64, timezone: &str) -> Result<String> {
    zoned(at_ms, timezone, "%Y%m%d")
}

/// The date and number of an `MP-YYYYMMDD-N` id; N is read as JS `parseInt` reads it (leading
/// digits).
pub(crate) fn parse_mp_id(id: &str) -> Option<(&str, u64)> {
    let rest = id.strip_prefix(MP_PREFIX)?;
    let date = rest.get(..MP_DATE_DIGITS)?;
    let tail = rest.get(MP_DATE_DIGITS..)?.strip_prefix('-')?;
    if !date.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(|n| (date, n))
}

fn check_text(what: &str, text: &str, max: usize) -> Result<()> {
    if text.len() > max {
        return Err(Error::invalid(format!("{what} is {} bytes, limit is {max}", text.len())));
    }
    Ok(())
}

/// Parses and checks a `queue-micro` payload: a question is required, options are 2–4 labels,
/// the tier an integer. Returns `(tier, question, options, on_resolve, ask)`.
///
/// # Errors
/// [`Error::Invalid`] naming the broken rule.
pub fn parse_micro_input(text: &str) -> Result<MicroInput> {
    let input: MicroInput = serde_json::from_str(crate::kernel::compat::js_trim(text))
        .map_err(|e| Error::invalid(format!("Invalid JSON: {e}")))?;
    let question = input.question.as_deref().unwrap_or_default();
    if question.is_empty() {
        return Err(Error::invalid("Error: \"question\" is required"));
    }
    check_text("question", question, QUESTION_BYTES_MAX)?;
    if let Some(options) = &input.options {
        if !(OPTIONS_MIN..=OPTIONS_MAX).contains(&options.len()) {
            return Err(Error::invalid(format!(
                "options holds {} labels, expected {OPTIONS_MIN} to {OPTIONS_MAX}",
                options.len()
            )));
        }
        for label in options {
            if label.trim().is_empty() {
                return Err(Error::invalid("an option label is empty"));
            }
            check_text("option label", label, LABEL_BYTES_MAX)?;
        }
    }
    if let Some(template) = &input.on_resolve {
        check_text("on_resolve", template, LABEL_BYTES_MAX)?;
    }
    if let Some(tier) = &input.tier {
        if !tier.is_null() && tier.as_i64().is_none() {
            return Err(Error::invalid(format!("tier {tier} is not an integer")));
        }
    }
    Ok(input)
}

/// One queue entry, parsed from its JSON text.
pub(crate) fn entry_map(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

fn entry_str<'a>(entry: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    entry.get(key).and_then(Value::as_str)
}

fn is_pending(entry: &Map<String, Value>) -> bool {
    entry_str(entry, "status") == Some("pending")
}

fn follow_ups(entry: &Map<String, Value>) -> i64 {
    entry.get("follow_up_count").and_then(Value::as_i64).unwrap_or(0)
}

/// Why an answer was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerError {
    /// Several labels start with the answer.
    Ambiguous(Vec<String>),
    /// No label matches (or a number out of range, or not yes/no without options).
    NoMatch(Vec<String>),
}

/// Resolves an operator's answer against an entry's options (channel-responder rules): a bare
/// number k selects options[k-1]; a case-insensitive exact label, else a case-insensitive unique
/// prefix, selects that label; without options only yes or no is accepted.
///
/// # Errors
/// [`AnswerError`] with the candidates (ambiguous) or the labels (no match).
pub fn resolve_answer(
    options: Option<&[String]>,
    answer: &str,
) -> std::result::Result<String, AnswerError> {
    let answer = answer.trim();
    let lower = answer.to_lowercase();
    let Some(options) = options.filter(|o| !o.is_empty()) else {
        return match lower.as_str() {
            "yes" | "no" => Ok(lower),
            _ => Err(AnswerError::NoMatch(vec!["yes".into(), "no".into()])),
        };
    };
    if !answer.is_empty() && answer.bytes().all(|b| b.is_ascii_digit()) {
        let picked = answer.parse::<usize>().ok().and_then(|k| k.checked_sub(1));
        return picked
            .and_then(|i| options.get(i))
            .cloned()
            .ok_or_else(|| AnswerError::NoMatch(options.to_vec()));
    }
    if let Some(exact) = options.iter().find(|o| o.to_lowercase() == lower) {
        return Ok(exact.clone());
    }
    let candidates: Vec<String> = options
        .iter()
        .filter(|o| !lower.is_empty() && o.to_lowercase().starts_with(&lower))
        .cloned()
        .collect();
    match candidates.len() {
        1 => Ok(candidates[0].clone()),
        0 => Err(AnswerError::NoMatch(options.to_vec())),
        _ => Err(AnswerError::Ambiguous(candidates)),
    }
}

/// Renders `on_resolve` with the answer: inside a quoted `"{answer}"` the label is escaped;
/// elsewhere a single-word label goes bare and a multi-word label is double-quoted.
#[must_use]
pub fn render_on_resolve(template: &str, label: &str) -> String {
    let escaped = label.replace('\\', "\\\\").replace('"', "\\\"");
    if template.contains("\"{answer}\"") {
        return template.replace("\"{answer}\"", &format!("\"{escaped}\""));
    }
    let single_word = !label.is_empty() && !label.chars().any(char::is_whitespace);
    let value = if single_word { label.to_owned() } else { format!("\"{escaped}\"") };
    template.replace("{answer}", &value)
}

fn verdict_result(verdict: String, extra: Value) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("verdict".into(), Value::String(verdict));
    out.extend(fields(extra));
    out
}

fn refusal(reason: &'static str, message: String, verdict: String) -> Refusal {
    Refusal { reason, message, details: verdict_result(verdict, Value::Null) }
}

/// Decides a queue call: a duplicate of a pending question, or a new entry with id
/// `MP-<date>-<next>`.
pub(crate) fn decide_queue(
    queue: &QueueDoc,
    next: u64,
    date: &str,
    input: &MicroInput,
    ts: String,
) -> Result<Plan> {
    let question = input.question.clone().unwrap_or_default();
    for text in &queue.entries {
        let entry = entry_map(text);
        if is_pending(&entry) && entry_str(&entry, "question") == Some(question.as_str()) {
            let id = entry_str(&entry, "id").unwrap_or_default().to_owned();
            let verdict = format!("DUPLICATE|{id}");
            let message = format!("the question is already pending as {id}");
            let mut plan =
                Plan { refusal: Some(refusal("duplicate", message, verdict)), ..Plan::default() };
            plan.result.insert("id".into(), Value::String(id));
            return Ok(plan);
        }
    }
    if queue.entries.len() >= QUEUE_ENTRIES_MAX {
        return Err(Error::invalid(format!("the queue holds {QUEUE_ENTRIES_MAX} entries already")));
    }
    let ask = input.on_resolve.is_some();
    let tier = if ask { 1 } else { input.tier.as_ref().and_then(Value::as_i64).unwrap_or(1) };
    let id = format!("{MP_PREFIX}{date}-{next}");
    let event = ProposalsEvent::MicroQueued {
        id: id.clone(),
        tier,
        question,
        options: input.options.clone(),
        on_resolve: input.on_resolve.clone().filter(|t| !t.is_empty()),
        ask,
        ts,
    };
    let result = render(&event);
    Ok(Plan { events: vec![Body::Proposals(event)], result, ..Plan::default() })
}

fn find(queue: &QueueDoc, id: &str) -> Option<Map<String, Value>> {
    queue.entries.iter().map(|t| entry_map(t)).find(|e| entry_str(e, "id") == Some(id))
}

fn no_match() -> Plan {
    let verdict = "NONE|no-match".to_owned();
    let refusal = refusal("no_match", "no queued micro-proposal has that id".into(), verdict);
    Plan { refusal: Some(refusal), ..Plan::default() }
}

/// What `micro resolve` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveInput {
    /// The MP id.
    pub id: String,
    /// approved, rejected, answered or expired.
    pub action: String,
    /// The operator's answer, resolved against the entry's options.
    pub answer: Option<String>,
    /// The channel the answer came from.
    pub channel: Option<String>,
}

/// Decides a resolve: no match, a refused answer, or the removal with the rendered `on_resolve`.
pub(crate) fn decide_resolve(queue: &QueueDoc, input: &ResolveInput, ts: String) -> Plan {
    let Some(entry) = find(queue, &input.id) else {
        return no_match();
    };
    let options: Option<Vec<String>> =
        entry.get("options").and_then(|o| serde_json::from_value(o.clone()).ok());
    let answer = match input.answer.as_deref().map(|a| resolve_answer(options.as_deref(), a)) {
        None => None,
        Some(Ok(label)) => Some(label),
        Some(Err(AnswerError::Ambiguous(candidates))) => {
            let list = Value::from(candidates.clone()).to_string();
            let verdict = format!("ERROR|ambiguous-answer|{list}");
            let message = format!("the answer matches several options: {}", candidates.join(", "));
            let mut refusal = refusal("ambiguous_answer", message, verdict);
            refusal.details.insert("candidates".into(), Value::from(candidates));
            return Plan { refusal: Some(refusal), ..Plan::default() };
        }
        Some(Err(AnswerError::NoMatch(labels))) => {
            let list = Value::from(labels.clone()).to_string();
            let verdict = format!("ERROR|unknown-answer|{list}");
            let message = format!("the answer matches none of: {}", labels.join(", "));
            let mut refusal = refusal("unknown_answer", message, verdict);
            refusal.details.insert("options".into(), Value::from(labels));
            return Plan { refusal: Some(refusal), ..Plan::default() };
        }
    };
    let on_resolve = match (entry_str(&entry, "on_resolve"), &answer) {
        (Some(template), Some(label)) => Value::String(render_on_resolve(template, label)),
        _ => Value::Null,
    };
    let event = ProposalsEvent::MicroResolved {
        id: input.id.clone(),
        action: input.action.clone(),
        question: entry_str(&entry, "question").unwrap_or_default().to_owned(),
        answer,
        ts,
        channel: input.channel.clone(),
    };
    let mut result = render(&event);
    result.insert("on_resolve".into(), on_resolve);
    Plan { events: vec![Body::Proposals(event)], result, ..Plan::default() }
}

/// Decides a nudge: the entry's count plus one.
pub(crate) fn decide_nudge(queue: &QueueDoc, id: &str) -> Plan {
    let Some(entry) = find(queue, id) else {
        return no_match();
    };
    let event = ProposalsEvent::MicroNudged { id: id.to_owned(), count: follow_ups(&entry) + 1 };
    let result = render(&event);
    Plan { events: vec![Body::Proposals(event)], result, ..Plan::default() }
}

fn brief_row(entry: &Map<String, Value>, count: Option<i64>) -> Value {
    let mut row = Map::new();
    for key in ["id", "tier", "question", "options"] {
        if let Some(value) = entry.get(key) {
            row.insert(key.into(), value.clone());
        }
    }
    if let Some(count) = count {
        row.insert("follow_up_count".into(), Value::from(count));
    }
    Value::Object(row)
}

/// Decides one brief-cycle pass: drop non-pending entries, expire count ≥ 2, bump 1 → 2 and
/// 0 → 1. The verdict is upstream's JSON line.
pub(crate) fn decide_brief_cycle(queue: &QueueDoc, ts: &str) -> Plan {
    let (mut fresh, mut renudged, mut expired, mut dropped) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut events = Vec::new();
    for text in &queue.entries {
        let entry = entry_map(text);
        let id = entry.get("id").cloned().unwrap_or(Value::Null);
        let id_text = id.as_str().unwrap_or_default().to_owned();
        if !is_pending(&entry) {
            dropped.push(id);
            events.push(ProposalsEvent::MicroDropped { id: id_text });
            continue;
        }
        let count = follow_ups(&entry);
        if count >= EXPIRE_AT_COUNT {
            let question = entry.get("question").cloned().unwrap_or(Value::Null);
            expired.push(json!({ "id": id, "question": question }));
            events.push(ProposalsEvent::MicroResolved {
                id: id_text,
                action: "expired".into(),
                question: question.as_str().unwrap_or_default().to_owned(),
                answer: None,
                ts: ts.to_owned(),
                channel: None,
            });
        } else if count == 1 {
            renudged.push(brief_row(&entry, Some(EXPIRE_AT_COUNT)));
            events.push(ProposalsEvent::MicroNudged { id: id_text, count: EXPIRE_AT_COUNT });
        } else {
            fresh.push(brief_row(&entry, None));
            events.push(ProposalsEvent::MicroNudged { id: id_text, count: 1 });
        }
    }
    let line =
        json!({ "new": fresh, "renudged": renudged, "expired": expired, "dropped": dropped });
    let result = verdict_result(line.to_string(), json!({ "cycle": line }));
    Plan { events: events.into_iter().map(Body::Proposals).collect(), result, ..Plan::default() }
}

fn read_queue(txn: &dyn crate::kernel::storage::ReadTxn, scope: &str) -> Result<QueueDoc> {
    Ok(read_doc(txn, scope, QUEUE_KIND, QUEUE_ID)?.unwrap_or_default())
}

fn check_mp_id(id: &str) -> Result<()> {
    if id.is_empty() || id.starts_with('-') {
        return Err(Error::invalid(format!("Missing <MP-id> — got {id:?} in its place")));
    }
    check_text("MP id", id, LABEL_BYTES_MAX)
}

impl Proposals<'_> {
    /// Queues a micro-proposal (`proposal.ts queue-micro`): a duplicate of a pending question is
    /// refused with `DUPLICATE|<id>`; otherwise the entry gets the next `MP-<date>-N` of the date
    /// in `timezone`, allocated in this transaction.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad payload or time zone; store errors.
    pub fn queue_micro(&self, call: &Call, timezone: &str, input: &MicroInput) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        let date = mp_date(call.now_ms, timezone)?;
        let ts = stamp_s(call.now_ms);
        self.k.write(call, |txn| {
            let queue = read_queue(txn, &call.scope)?;
            let next =
                read_doc::<MpSeqDoc>(txn, &call.scope, MP_SEQ_KIND, &date)?.map_or(0, |d| d.next);
            decide_queue(&queue, next, &date, input, ts.clone())
        })
    }

    /// Resolves a micro-proposal: the entry leaves the queue and the ledger gets its
    /// `micro-resolved` line in the same commit; the result carries the rendered `on_resolve`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad id, action or answer length; store errors.
    pub fn micro_resolve(&self, call: &Call, input: &ResolveInput) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        check_mp_id(&input.id)?;
        if !ACTIONS.contains(&input.action.as_str()) {
            return Err(Error::invalid(format!("--action must be one of: {}", ACTIONS.join(", "))));
        }
        for (what, text) in [("answer", &input.answer), ("channel", &input.channel)] {
            if let Some(text) = text {
                check_text(what, text, LABEL_BYTES_MAX)?;
            }
        }
        let ts = stamp_s(call.now_ms);
        self.k.write(call, |txn| {
            Ok(decide_resolve(&read_queue(txn, &call.scope)?, input, ts.clone()))
        })
    }

    /// Nudges a micro-proposal: its `follow_up_count` plus one.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad id; store errors.
    pub fn micro_nudge(&self, call: &Call, id: &str) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        check_mp_id(id)?;
        self.k.write(call, |txn| Ok(decide_nudge(&read_queue(txn, &call.scope)?, id)))
    }

    /// One brief-cycle pass over the queue.
    ///
    /// # Errors
    /// Store errors.
    pub fn brief_cycle(&self, call: &Call) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        let ts = stamp_s(call.now_ms);
        self.k.write(call, |txn| Ok(decide_brief_cycle(&read_queue(txn, &call.scope)?, &ts)))
    }

    /// The queue of a hermit scope (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn queue(&self, scope: &str) -> Result<QueueDoc> {
        hookstate_schema::validate_scope(scope)?;
        read_queue(&*self.k.begin_read()?, scope)
    }
}

/// The ledger line an event stands for, if any: compact JSON with `ts` first, as upstream's
/// `JSON.stringify` writes it.
#[must_use]
pub fn ledger_line(event: &ProposalsEvent) -> Option<String> {
    let mut line = Map::new();
    match event {
        ProposalsEvent::MicroQueued { id, tier, question, ask, ts, .. } => {
            line.insert("ts".into(), json!(ts));
            line.insert("type".into(), json!("micro-queued"));
            line.insert("micro_id".into(), json!(id));
            line.insert("tier".into(), json!(tier));
            line.insert("question".into(), json!(question));
            if *ask {
                line.insert("kind".into(), json!("ask"));
            }
        }
        ProposalsEvent::MicroResolved { id, action, question, answer, ts, .. } => {
            line.insert("ts".into(), json!(ts));
            line.insert("type".into(), json!("micro-resolved"));
            line.insert("micro_id".into(), json!(id));
            line.insert("action".into(), json!(action));
            line.insert("question".into(), json!(question));
            if let Some(answer) = answer {
                line.insert("answer".into(), json!(answer));
            }
        }
        ProposalsEvent::LedgerLineImported { line } => return Some(line.clone()),
        other => return super::props::ledger_fields(other).map(|m| Value::Object(m).to_string()),
    }
    Some(Value::Object(line).to_string())
}

/// The MP id a ledger line queues, if it is a `micro-queued` line.
fn queued_id(line: &str) -> Option<String> {
    let value: Value = serde_json::from_str(line).ok()?;
    if value.get("type")?.as_str()? != "micro-queued" {
        return None;
    }
    value.get("micro_id")?.as_str().map(str::to_owned)
}

/// The proposal a ledger line records a response for, if it is a `responded` line.
fn responded_id(line: &str) -> Option<String> {
    let value: Value = serde_json::from_str(line).ok()?;
    if value.get("type")?.as_str()? != "responded" {
        return None;
    }
    value.get("proposal_id")?.as_str().map(str::to_owned)
}

fn seq_key(scope: &str, id: &str) -> Option<ViewKey> {
    parse_mp_id(id).map(|(date, _)| doc_key(scope, MP_SEQ_KIND, date))
}

/// Every row `apply` may touch for a proposals event.
pub(crate) fn touched_keys(scope: &str, event: &ProposalsEvent) -> Vec<ViewKey> {
    let queue = doc_key(scope, QUEUE_KIND, QUEUE_ID);
    match event {
        ProposalsEvent::MicroQueued { id, .. } => {
            let mut keys = vec![queue];
            keys.extend(seq_key(scope, id));
            keys
        }
        ProposalsEvent::LedgerLineImported { line } => {
            let seq = queued_id(line).and_then(|id| seq_key(scope, &id));
            let prop = responded_id(line).and_then(|id| super::props::prop_key(scope, &id));
            seq.into_iter().chain(prop).collect()
        }
        ProposalsEvent::MicroResolved { .. }
        | ProposalsEvent::MicroNudged { .. }
        | ProposalsEvent::MicroDropped { .. }
        | ProposalsEvent::QueueImported { .. } => vec![queue],
        other => super::props::touched_keys(scope, other),
    }
}

fn bump_seq(views: &mut dyn ViewAccess, scope: &str, id: &str) {
    let (Some(key), Some((_, n))) = (seq_key(scope, id), parse_mp_id(id)) else {
        return;
    };
    let current = get_doc::<MpSeqDoc>(views, &key).unwrap_or_default();
    put_doc(views, key, &MpSeqDoc { next: current.next.max(n.saturating_add(1)) });
}

fn new_entry(event: &ProposalsEvent) -> String {
    let ProposalsEvent::MicroQueued { id, tier, question, options, on_resolve, ts, .. } = event
    else {
        return String::new();
    };
    let mut entry = Map::new();
    entry.insert("id".into(), json!(id));
    entry.insert("tier".into(), json!(tier));
    entry.insert("status".into(), json!("pending"));
    entry.insert("follow_up_count".into(), json!(0));
    entry.insert("ts".into(), json!(ts));
    entry.insert("question".into(), json!(question));
    if let Some(options) = options {
        entry.insert("options".into(), json!(options));
    }
    if let Some(template) = on_resolve {
        entry.insert("on_resolve".into(), json!(template));
    }
    Value::Object(entry).to_string()
}

fn position(entries: &[String], id: &str, skip_pending: bool) -> Option<usize> {
    entries.iter().position(|text| {
        let entry = entry_map(text);
        entry_str(&entry, "id") == Some(id) && !(skip_pending && is_pending(&entry))
    })
}

fn load_queue(views: &dyn ViewAccess, key: &ViewKey) -> QueueDoc {
    get_doc::<QueueDoc>(views, key).unwrap_or_default()
}

/// Applies a proposals event to the views.
pub(crate) fn apply(views: &mut dyn ViewAccess, scope: &str, event: &ProposalsEvent) {
    let key = doc_key(scope, QUEUE_KIND, QUEUE_ID);
    match event {
        ProposalsEvent::MicroQueued { id, .. } => {
            let mut queue = load_queue(views, &key);
            queue.entries.push(new_entry(event));
            put_doc(views, key.clone(), &queue);
            bump_seq(views, scope, id);
        }
        ProposalsEvent::MicroResolved { id, .. } | ProposalsEvent::MicroDropped { id } => {
            let skip_pending = matches!(event, ProposalsEvent::MicroDropped { .. });
            let mut queue = load_queue(views, &key);
            if let Some(index) = position(&queue.entries, id, skip_pending) {
                queue.entries.remove(index);
            }
            put_doc(views, key.clone(), &queue);
        }
        ProposalsEvent::MicroNudged { id, count } => {
            let mut queue = load_queue(views, &key);
            if let Some(index) = position(&queue.entries, id, false) {
                let mut entry = entry_map(&queue.entries[index]);
                entry.insert("follow_up_count".into(), json!(count));
                queue.entries[index] = Value::Object(entry).to_string();
            }
            put_doc(views, key.clone(), &queue);
        }
        ProposalsEvent::QueueImported { top, entries } => {
            put_doc(views, key.clone(), &QueueDoc { top: top.clone(), entries: entries.clone() });
        }
        ProposalsEvent::LedgerLineImported { line } => {
            if let Some(id) = queued_id(line) {
                bump_seq(views, scope, &id);
            }
            if let Some(id) = responded_id(line) {
                super::props::mark_responded(views, scope, &id);
            }
        }
        other => super::props::apply(views, scope, other),
    }
}

/// The result fields a proposals event stands for, with its upstream verdict line.
pub(crate) fn render(event: &ProposalsEvent) -> Map<String, Value> {
    match event {
        ProposalsEvent::MicroQueued { id, tier, ts, .. } => {
            verdict_result(format!("QUEUED|{id}"), json!({ "id": id, "tier": tier, "ts": ts }))
        }
        ProposalsEvent::MicroResolved { id, action, answer, channel, .. } => verdict_result(
            format!("RESOLVED|{id}|{action}"),
            json!({ "id": id, "action": action, "answer": answer, "channel": channel }),
        ),
        ProposalsEvent::MicroNudged { id, count } => verdict_result(
            format!("NUDGED|{id}|{count}"),
            json!({ "id": id, "follow_up_count": count }),
        ),
        ProposalsEvent::MicroDropped { id } => fields(json!({ "id": id, "dropped": true })),
        ProposalsEvent::QueueImported { entries, .. } => {
            fields(json!({ "entries": entries.len() }))
        }
        ProposalsEvent::LedgerLineImported { line } => fields(json!({ "line": line })),
        ProposalsEvent::PropImported { file, .. } | ProposalsEvent::PropWritten { file, .. } => {
            fields(json!({ "file": file }))
        }
        ProposalsEvent::PropCreated { id, .. } => verdict_result(id.clone(), json!({ "id": id })),
        ProposalsEvent::PropResponded { id, action, .. } => {
            verdict_result("OK".into(), json!({ "id": id, "action": action }))
        }
        ProposalsEvent::PropResolved { id, .. } => verdict_result("OK".into(), json!({ "id": id })),
        ProposalsEvent::IndexImported { updated } => fields(json!({ "updated": updated })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn check(
        options: Option<&[&str]>,
        answer: &str,
        expected: std::result::Result<&str, AnswerError>,
    ) {
        let options = options.map(labels);
        let got = resolve_answer(options.as_deref(), answer);
        assert_eq!(got, expected.map(str::to_owned), "answer {answer:?} against {options:?}");
    }

    #[test]
    fn answer_resolution_table() {
        let pin = ["yes, pin 20.x", "no, track latest LTS", "ask again next week"];
        let styles = ["Keep a Changelog", "conventional commits"];
        let near = ["deploy now", "deploy later", "skip"];
        check(Some(&pin), "1", Ok("yes, pin 20.x"));
        check(Some(&pin), "3", Ok("ask again next week"));
        check(Some(&pin), "4", Err(AnswerError::NoMatch(labels(&pin))));
        check(Some(&pin), "0", Err(AnswerError::NoMatch(labels(&pin))));
        check(Some(&pin), "yes", Ok("yes, pin 20.x"));
        check(Some(&pin), "NO", Ok("no, track latest LTS"));
        check(Some(&styles), "Conventional", Ok("conventional commits"));
        check(Some(&styles), "conventional commits", Ok("conventional commits"));
        check(Some(&near), "deploy", Err(AnswerError::Ambiguous(labels(&near[..2]))));
        check(Some(&near), "Deploy L", Ok("deploy later"));
        check(Some(&near), "maybe", Err(AnswerError::NoMatch(labels(&near))));
        check(Some(&near), "", Err(AnswerError::NoMatch(labels(&near))));
        check(None, "Yes", Ok("yes"));
        check(None, " no ", Ok("no"));
        check(None, "1", Err(AnswerError::NoMatch(labels(&["yes", "no"]))));
        check(None, "sure", Err(AnswerError::NoMatch(labels(&["yes", "no"]))));
    }

    proptest::proptest! {
        #[test]
        fn answers_resolve_to_an_option_or_are_refused(
            options in proptest::collection::vec("[a-zA-Z ]{1,10}", 2..=4),
            answer in "\\PC{0,12}",
        ) {
            match resolve_answer(Some(&options), &answer) {
                Ok(label) => proptest::prop_assert!(options.contains(&label)),
                Err(AnswerError::Ambiguous(c)) => proptest::prop_assert!(c.len() > 1),
                Err(AnswerError::NoMatch(labels)) => proptest::prop_assert_eq!(labels, options),
            }
            let _ = parse_micro_input(&answer);
        }
    }

    #[test]
    fn on_resolve_quotes_multi_word_labels_only() {
        let bare = "/hermit:proposal-act accept PROP-031 --answer {answer}";
        assert_eq!(render_on_resolve(bare, "manual"), bare.replace("{answer}", "manual"));
        assert_eq!(
            render_on_resolve(bare, "session task"),
            bare.replace("{answer}", "\"session task\"")
        );
        let quoted = "/x --answer \"{answer}\"";
        assert_eq!(render_on_resolve(quoted, "a \"b\""), "/x --answer \"a \\\"b\\\"\"");
        assert_eq!(render_on_resolve(quoted, "manual"), "/x --answer \"manual\"");
    }

    #[test]
    fn mp_dates_follow_the_configured_zone() {
        // 2025-11-30T03:00:00Z is still the 29th in New York (UTC-5).
        let at = 1_764_471_600_000;
        assert_eq!(mp_date(at, "UTC").unwrap(), "20251130");
        assert_eq!(mp_date(at, "America/New_York").unwrap(), "20251129");
        assert!(mp_date(at, "Mars/Olympus").is_err());
        assert_eq!(stamp_s(at), "2025-11-30T03:00:00Z");
    }

    #[test]
    fn mp_ids_parse_like_parse_int() {
        assert_eq!(parse_mp_id("MP-20261129-3"), Some(("20261129", 3)));
        assert_eq!(parse_mp_id("MP-20261129-12x"), Some(("20261129", 12)));
        assert_eq!(parse_mp_id("MP-2026112-3"), None);
        assert_eq!(parse_mp_id("MP-20261129-"), None);
        assert_eq!(parse_mp_id("PROP-001"), None);
    }
}
