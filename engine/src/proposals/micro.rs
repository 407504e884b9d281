//! Pure rules of the micro-proposal queue: the `queue-micro` payload, `MP-YYYYMMDD-N` ids, answer
//! resolution and `on_resolve` rendering, the decisions of queue (dedup on the exact question
//! among pending entries), resolve, nudge and brief-cycle, and the ledger line each event stands
//! for.
//!
//! Every verdict line upstream's `proposal.ts` prints is in the result's `verdict` field. No IO,
//! no clock (time comes in as stamps), no store: `api.rs` reads the queue and calls these.

use hookstate_schema::proposals::{MicroQueued, ProposalsEvent, QueueDoc};
use hookstate_schema::Body;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::kernel::call::{fields, Plan, Refusal};
use crate::kernel::compat::stamp::zoned;
use crate::kernel::error::{Error, Result};

/// Document kind of the MP counter of one date (id: `YYYYMMDD`).
pub(crate) const MP_SEQ_KIND: &str = "proposals.mpseq";
/// Fewest answer labels an entry with options has (channel-responder rules).
pub(crate) const OPTIONS_MIN: usize = 2;
/// Most answer labels an entry has (channel-responder rules).
pub(crate) const OPTIONS_MAX: usize = 4;
/// Longest question: a channel message line, with room to spare.
pub(crate) const QUESTION_BYTES_MAX: usize = 4096;
/// Longest answer label, `on_resolve` template and channel name.
pub(crate) const LABEL_BYTES_MAX: usize = 1024;
/// Entries the queue may hold: brief-cycle expires entries after two briefs, so a longer queue
/// means a runaway producer.
pub(crate) const QUEUE_ENTRIES_MAX: usize = 1000;
/// The follow-up count at which brief-cycle expires an entry.
pub(crate) const EXPIRE_AT_COUNT: i64 = 2;
/// The actions `micro resolve` accepts.
pub(crate) const ACTIONS: [&str; 4] = ["approved", "rejected", "answered", "expired"];
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

/// A result struct as the fields of the caller's JSON object.
pub(crate) fn to_fields<T: Serialize>(value: &T) -> Map<String, Value> {
    serde_json::to_value(value).map(fields).unwrap_or_default()
}

/// A refusal whose verdict line upstream prints with exit 0.
pub(crate) fn answer_refusal(reason: &'static str, message: String, details: Value) -> Refusal {
    Refusal::new(reason, message, details).verdict_ok()
}

/// `{"verdict": line}`: the details of a refusal that carries only its verdict.
#[derive(Serialize)]
struct VerdictOnly<'a> {
    verdict: &'a str,
}

fn verdict_details(line: &str) -> Value {
    serde_json::to_value(VerdictOnly { verdict: line }).unwrap_or(Value::Null)
}

/// `todayYMD(tz)` without dashes: the MP id's date part.
///
/// # Errors
/// [`Error::BadTimeZone`] for a zone that is not an IANA name.
pub(crate) fn mp_date(at_ms: u64, timezone: &str) -> Result<String> {
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

pub(crate) fn check_text(what: &str, text: &str, max: usize) -> Result<()> {
    if text.len() > max {
        return Err(Error::TooLarge { what: what.into(), len: text.len(), max });
    }
    Ok(())
}

/// Parses and checks a `queue-micro` payload: a question is required, options are 2–4 labels,
/// the tier an integer.
///
/// # Errors
/// [`Error::Upstream`] with upstream's message for a payload that is not JSON or has no
/// question; [`Error::OutOfRange`], [`Error::Empty`], [`Error::TooLarge`] or
/// [`Error::BadInput`] naming the broken rule.
pub fn parse_micro_input(text: &str) -> Result<MicroInput> {
    let input: MicroInput = serde_json::from_str(crate::kernel::compat::js_trim(text))
        .map_err(|e| Error::upstream(format!("Invalid JSON: {e}")))?;
    let question = input.question.as_deref().unwrap_or_default();
    if question.is_empty() {
        return Err(Error::upstream("Error: \"question\" is required"));
    }
    check_text("question", question, QUESTION_BYTES_MAX)?;
    if let Some(options) = &input.options {
        if !(OPTIONS_MIN..=OPTIONS_MAX).contains(&options.len()) {
            return Err(Error::OutOfRange {
                what: "options labels",
                value: options.len() as u64,
                min: OPTIONS_MIN as u64,
                max: OPTIONS_MAX as u64,
                unit: "",
            });
        }
        for label in options {
            if label.trim().is_empty() {
                return Err(Error::Empty { what: "an option label".into() });
            }
            check_text("option label", label, LABEL_BYTES_MAX)?;
        }
    }
    if let Some(template) = &input.on_resolve {
        check_text("on_resolve", template, LABEL_BYTES_MAX)?;
    }
    if let Some(tier) = &input.tier {
        if !tier.is_null() && tier.as_i64().is_none() {
            return Err(Error::bad(format!("tier {tier}"), "is not an integer"));
        }
    }
    Ok(input)
}

/// Checks a `micro resolve` request: the id, the action, the answer and channel lengths.
///
/// # Errors
/// [`Error::Upstream`] for a missing or flag-shaped id, [`Error::NotOneOf`] for an unknown
/// action, [`Error::TooLarge`].
pub(crate) fn check_resolve(input: &ResolveInput) -> Result<()> {
    check_mp_id(&input.id)?;
    if !ACTIONS.contains(&input.action.as_str()) {
        let value = input.action.clone();
        return Err(Error::NotOneOf { what: "--action", value, allowed: &ACTIONS });
    }
    for (what, text) in [("answer", &input.answer), ("channel", &input.channel)] {
        if let Some(text) = text {
            check_text(what, text, LABEL_BYTES_MAX)?;
        }
    }
    Ok(())
}

/// Checks an MP id argument as upstream does: present and not flag-shaped.
///
/// # Errors
/// [`Error::Upstream`] with upstream's message, [`Error::TooLarge`].
pub(crate) fn check_mp_id(id: &str) -> Result<()> {
    if id.is_empty() || id.starts_with('-') {
        return Err(Error::upstream(format!("Missing <MP-id> — got {id:?} in its place")));
    }
    check_text("MP id", id, LABEL_BYTES_MAX)
}

/// One queue entry, parsed from its JSON text.
pub(crate) fn entry_map(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

pub(crate) fn entry_str<'a>(entry: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    entry.get(key).and_then(Value::as_str)
}

pub(crate) fn is_pending(entry: &Map<String, Value>) -> bool {
    entry_str(entry, "status") == Some("pending")
}

/// An entry's `follow_up_count`, as upstream's JavaScript reads it: a whole number written as
/// `3.0` (by another JSON library) is 3, not absent.
pub(crate) fn follow_ups(entry: &Map<String, Value>) -> i64 {
    let Some(Value::Number(count)) = entry.get("follow_up_count") else {
        return 0;
    };
    count.as_i64().unwrap_or_else(|| {
        let text = count.to_string();
        text.strip_suffix(".0").and_then(|whole| whole.parse().ok()).unwrap_or(0)
    })
}

/// Why an answer was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AnswerError {
    /// Several labels start with the answer.
    Ambiguous(Vec<String>),
    /// No label matches (or a number out of range).
    NoMatch(Vec<String>),
}

/// Resolves an operator's answer against an entry's options (channel-responder rules): a bare
/// number k selects options[k-1]; a case-insensitive exact label, else a case-insensitive unique
/// prefix, selects that label. Without options the answer is the operator's own text (trimmed;
/// yes and no in lower case), as upstream records it (issue 19).
///
/// # Errors
/// [`AnswerError`] with the candidates (ambiguous) or the labels (no match).
pub(crate) fn resolve_answer(
    options: Option<&[String]>,
    answer: &str,
) -> std::result::Result<String, AnswerError> {
    let answer = answer.trim();
    let lower = answer.to_lowercase();
    let Some(options) = options.filter(|o| !o.is_empty()) else {
        return Ok(match lower.as_str() {
            "yes" | "no" => lower,
            _ => answer.to_owned(),
        });
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
pub(crate) fn render_on_resolve(template: &str, label: &str) -> String {
    let escaped = label.replace('\\', "\\\\").replace('"', "\\\"");
    if template.contains("\"{answer}\"") {
        return template.replace("\"{answer}\"", &format!("\"{escaped}\""));
    }
    let single_word = !label.is_empty() && !label.chars().any(char::is_whitespace);
    let value = if single_word { label.to_owned() } else { format!("\"{escaped}\"") };
    template.replace("{answer}", &value)
}

/// `queue-micro`'s duplicate: the refusal carries the verdict, the result the pending id.
#[derive(Serialize)]
struct Duplicate<'a> {
    id: &'a str,
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
            let id = entry_str(&entry, "id").unwrap_or_default();
            let verdict = verdict_details(&format!("DUPLICATE|{id}"));
            let message = format!("the question is already pending as {id}");
            let refusal = answer_refusal("duplicate", message, verdict);
            let result = to_fields(&Duplicate { id });
            return Ok(Plan { refusal: Some(refusal), result, ..Plan::default() });
        }
    }
    if queue.entries.len() >= QUEUE_ENTRIES_MAX {
        let count = queue.entries.len() + 1;
        return Err(Error::TooMany { what: "queue entries", count, max: QUEUE_ENTRIES_MAX });
    }
    let ask = input.on_resolve.is_some();
    let tier = if ask { 1 } else { input.tier.as_ref().and_then(Value::as_i64).unwrap_or(1) };
    let id = format!("{MP_PREFIX}{date}-{next}");
    let event = ProposalsEvent::MicroQueued(MicroQueued {
        id,
        tier,
        question,
        options: input.options.clone(),
        on_resolve: input.on_resolve.clone(),
        ts,
    });
    let result = render(&event);
    Ok(Plan { events: vec![Body::Proposals(event)], result, ..Plan::default() })
}

fn find(queue: &QueueDoc, id: &str) -> Option<Map<String, Value>> {
    queue.entries.iter().map(|t| entry_map(t)).find(|e| entry_str(e, "id") == Some(id))
}

fn no_match() -> Plan {
    let message = "no queued micro-proposal has that id".to_owned();
    let refusal = answer_refusal("no_match", message, verdict_details("NONE|no-match"));
    Plan { refusal: Some(refusal), ..Plan::default() }
}

/// An answer refused: the verdict line with the candidates or the labels.
#[derive(Serialize)]
struct AnswerRefused<'a> {
    verdict: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidates: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<&'a [String]>,
}

/// The refusal of an answer that resolves to no single label. Upstream has no verdict for it,
/// so it fails in verdict mode too.
fn answer_refused(error: &AnswerError) -> Plan {
    let (reason, token, message, labels) = match error {
        AnswerError::Ambiguous(c) => {
            ("ambiguous_answer", "ambiguous-answer", "matches several options", c)
        }
        AnswerError::NoMatch(l) => ("unknown_answer", "unknown-answer", "matches none of", l),
    };
    let list = Value::from(labels.clone()).to_string();
    let details = AnswerRefused {
        verdict: format!("ERROR|{token}|{list}"),
        candidates: matches!(error, AnswerError::Ambiguous(_)).then_some(labels.as_slice()),
        options: matches!(error, AnswerError::NoMatch(_)).then_some(labels.as_slice()),
    };
    let message = format!("the answer {message}: {}", labels.join(", "));
    let details = serde_json::to_value(details).unwrap_or(Value::Null);
    Plan { refusal: Some(Refusal::new(reason, message, details)), ..Plan::default() }
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
        Some(Err(error)) => return answer_refused(&error),
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

/// One brief-cycle pass, as upstream's JSON line lists it.
#[derive(Serialize, Default)]
struct Cycle {
    new: Vec<Value>,
    renudged: Vec<Value>,
    expired: Vec<Value>,
    dropped: Vec<Value>,
}

/// An expired entry as the brief-cycle line lists it.
#[derive(Serialize)]
struct Expired {
    id: Value,
    question: Value,
}

/// The result of a brief-cycle: its verdict line and the same pass as an object.
#[derive(Serialize)]
struct CycleResult<'a> {
    verdict: String,
    cycle: &'a Cycle,
}

/// Decides one brief-cycle pass: drop non-pending entries, expire count ≥ 2, bump 1 → 2 and
/// 0 → 1. The verdict is upstream's JSON line.
pub(crate) fn decide_brief_cycle(queue: &QueueDoc, ts: &str) -> Plan {
    let mut cycle = Cycle::default();
    let mut events = Vec::new();
    for text in &queue.entries {
        let entry = entry_map(text);
        let id = entry.get("id").cloned().unwrap_or(Value::Null);
        let id_text = id.as_str().unwrap_or_default().to_owned();
        if !is_pending(&entry) {
            cycle.dropped.push(id);
            events.push(ProposalsEvent::MicroDropped { id: id_text });
            continue;
        }
        let count = follow_ups(&entry);
        if count >= EXPIRE_AT_COUNT {
            let question = entry.get("question").cloned().unwrap_or(Value::Null);
            events.push(ProposalsEvent::MicroResolved {
                id: id_text,
                action: "expired".into(),
                question: question.as_str().unwrap_or_default().to_owned(),
                answer: None,
                ts: ts.to_owned(),
                channel: None,
            });
            let expired = Expired { id, question };
            cycle.expired.push(serde_json::to_value(expired).unwrap_or(Value::Null));
        } else if count == 1 {
            cycle.renudged.push(brief_row(&entry, Some(EXPIRE_AT_COUNT)));
            events.push(ProposalsEvent::MicroNudged { id: id_text, count: EXPIRE_AT_COUNT });
        } else {
            cycle.new.push(brief_row(&entry, None));
            events.push(ProposalsEvent::MicroNudged { id: id_text, count: 1 });
        }
    }
    let line = serde_json::to_string(&cycle).unwrap_or_default();
    let result = to_fields(&CycleResult { verdict: line, cycle: &cycle });
    Plan { events: events.into_iter().map(Body::Proposals).collect(), result, ..Plan::default() }
}

/// The result of a queued entry.
#[derive(Serialize)]
struct Queued<'a> {
    verdict: String,
    id: &'a str,
    tier: i64,
    ts: &'a str,
}

/// The result of a resolved entry (a fresh call adds `on_resolve`).
#[derive(Serialize)]
struct Resolved<'a> {
    verdict: String,
    id: &'a str,
    action: &'a str,
    answer: Option<&'a str>,
    channel: Option<&'a str>,
}

/// The result of a nudge.
#[derive(Serialize)]
struct Nudged<'a> {
    verdict: String,
    id: &'a str,
    follow_up_count: i64,
}

/// The result fields a queue event stands for, with its upstream verdict line; `None` for the
/// other proposals events.
pub(crate) fn render_micro(event: &ProposalsEvent) -> Option<Map<String, Value>> {
    Some(match event {
        ProposalsEvent::MicroQueued(MicroQueued { id, tier, ts, .. }) => {
            to_fields(&Queued { verdict: format!("QUEUED|{id}"), id, tier: *tier, ts })
        }
        ProposalsEvent::MicroResolved { id, action, answer, channel, .. } => to_fields(&Resolved {
            verdict: format!("RESOLVED|{id}|{action}"),
            id,
            action,
            answer: answer.as_deref(),
            channel: channel.as_deref(),
        }),
        ProposalsEvent::MicroNudged { id, count } => to_fields(&Nudged {
            verdict: format!("NUDGED|{id}|{count}"),
            id,
            follow_up_count: *count,
        }),
        _ => return None,
    })
}

/// The result fields of a queue event (the PROP events render in `props.rs`).
fn render(event: &ProposalsEvent) -> Map<String, Value> {
    render_micro(event).unwrap_or_default()
}

/// The `micro-queued` ledger line of a queued entry: compact JSON with `ts` first.
#[derive(Serialize)]
struct QueuedLine<'a> {
    ts: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    micro_id: &'a str,
    tier: i64,
    question: &'a str,
    #[serde(rename = "kind", skip_serializing_if = "Option::is_none")]
    ask: Option<&'static str>,
}

/// The `micro-resolved` ledger line of an entry that left the queue.
#[derive(Serialize)]
struct ResolvedLine<'a> {
    ts: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    micro_id: &'a str,
    action: &'a str,
    question: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer: Option<&'a str>,
}

/// The ledger line a queue event stands for: compact JSON with `ts` first, as upstream's
/// `JSON.stringify` writes it. `None` for other events.
pub(crate) fn micro_ledger_line(event: &ProposalsEvent) -> Option<String> {
    match event {
        ProposalsEvent::MicroQueued(queued) => {
            let MicroQueued { id, tier, question, ts, .. } = queued;
            let line = QueuedLine {
                ts,
                kind: "micro-queued",
                micro_id: id,
                tier: *tier,
                question,
                ask: queued.is_ask().then_some("ask"),
            };
            serde_json::to_string(&line).ok()
        }
        ProposalsEvent::MicroResolved { id, action, question, answer, ts, .. } => {
            let line = ResolvedLine {
                ts,
                kind: "micro-resolved",
                micro_id: id,
                action,
                question,
                answer: answer.as_deref(),
            };
            serde_json::to_string(&line).ok()
        }
        _ => None,
    }
}

/// A ledger line's `type` and the id it names (`micro_id`, else `proposal_id`).
pub(crate) fn line_kind(line: &str) -> Option<(String, String)> {
    let value: Value = serde_json::from_str(line).ok()?;
    let kind = value.get("type")?.as_str()?.to_owned();
    let id = value.get("micro_id").or_else(|| value.get("proposal_id"))?.as_str()?.to_owned();
    Some((kind, id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::compat::stamp::stamp_s;

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
        check(None, "1", Ok("1"));
        check(None, " the blue one ", Ok("the blue one"));
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

    #[test]
    fn ledger_lines_are_upstreams_compact_json_with_ts_first() {
        let queued = ProposalsEvent::MicroQueued(MicroQueued {
            id: "MP-20261129-4".into(),
            tier: 1,
            question: "Ship?".into(),
            options: None,
            on_resolve: Some("/x {answer}".into()),
            ts: "2026-11-29T22:00:00Z".into(),
        });
        assert_eq!(
            micro_ledger_line(&queued).unwrap(),
            "{\"ts\":\"2026-11-29T22:00:00Z\",\"type\":\"micro-queued\",\"micro_id\":\
             \"MP-20261129-4\",\"tier\":1,\"question\":\"Ship?\",\"kind\":\"ask\"}"
        );
        let line = micro_ledger_line(&queued).unwrap();
        assert_eq!(line_kind(&line), Some(("micro-queued".into(), "MP-20261129-4".into())));
    }
}
