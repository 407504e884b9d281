//! The alert-ladder half of the `alerts` domain (claude-code-hermit heartbeat): precheck's tick counter and the alert
//! ladder of `state/alert-state.json` (`heartbeat.ts alert-state`): new keys fire, counts 2–5
//! repeat, count 6 suppresses with a one-time notice, silence above, two clean ticks resolve, a
//! daily digest of suppressed entries, frozen prefixes when a structured source is unreadable,
//! and the every-20-ticks self-evaluation.
//!
//! The whole tick runs inside one write transaction over the stored document, so overlapping
//! ticks and tick counts are serialised and no field is lost. The structured keys
//! (`micro-proposal-pending:`, `proposal-pending:`) are derived from the proposals domain's
//! documents of the same scope in that transaction. Decisions are pure functions over JSON maps
//! (key order kept, as JS object spreads keep it). Does not read or write legacy files;
//! `layout_alerts.rs` does.

use std::collections::HashSet;

use hookstate_schema::alerts::{AlertStateDoc, AlertsEvent};
use hookstate_schema::proposals::{
    frontmatter, PropDoc, QueueDoc, PROP_KIND, QUEUE_ID, QUEUE_KIND,
};
use hookstate_schema::{Body, ViewKey};
use serde_json::{json, Map, Value};

use super::Alerts;
use crate::kernel::call::fields;
use crate::kernel::call::Call;
use crate::kernel::call::Outcome;
use crate::kernel::call::Plan;
use crate::kernel::doc::{doc_key, get_doc, put_doc, read_doc};
use crate::kernel::error::{Error, Result};
use crate::kernel::view::ViewAccess;

/// Document kind of the alert state (id [`STATE_ID`]).
pub(crate) const STATE_KIND: &str = "alerts.state";
/// The one id of the alert-state document in a hermit scope.
pub(crate) const STATE_ID: &str = "state";
/// Firing entries one tick may carry: a checklist is a few dozen items.
pub const FIRING_ITEMS_MAX: usize = 256;
/// The sources a payload's `unreadable` may name (so it holds at most this many).
pub const UNREADABLE_SOURCES: [&str; 3] =
    ["micro-proposals.json", "proposals/", "sessions/SHELL.md"];
/// The alert state after a tick plus the tick's result, as one event carries them (the event
/// limit less room for names): about 250 alerts of a 100-character text.
pub const TICK_BYTES_MAX: usize = crate::kernel::limits::VALUE_BYTES_MAX;
/// Checklist items (`HEARTBEAT.md` lines) one tick may name.
pub const CHECKLIST_ITEMS_MAX: usize = 256;
/// Longest alert text, key, item or session id: a channel message line, with room to spare.
pub const ALERT_TEXT_BYTES_MAX: usize = 4096;
/// The count whose fire sets `suppressed` and sends the one-time notice (the sixth observation).
pub const SUPPRESS_AT_COUNT: i64 = 6;
/// Clean ticks after which an entry is dropped.
pub const RESOLVE_AFTER_CLEAN_TICKS: i64 = 2;
/// Self-evaluation runs when `total_ticks` is a multiple of this.
pub const SELF_EVAL_EVERY_TICKS: i64 = 20;
/// Clean (or noisy) passes after which self-evaluation proposes a change.
pub const SELF_EVAL_TICKS_THRESHOLD: i64 = 20;
/// Distinct sessions an entry must have been evaluated in before it is proposed.
pub const SELF_EVAL_SESSIONS_THRESHOLD: i64 = 3;
/// A checklist longer than this is itself a self-evaluation entry (`checklist-weight`).
pub const CHECKLIST_ITEMS_RECOMMENDED_MAX: usize = 10;
/// The micro-proposal structured prefix.
pub const MICRO_PREFIX: &str = "micro-proposal-pending:";
/// The proposal structured prefix.
pub const PROPOSAL_PREFIX: &str = "proposal-pending:";
/// The stale-session key.
pub const STALE_KEY: &str = "stale-session";
/// Legacy doctor residue, purged on every tick.
pub const DOCTOR_PREFIX: &str = "doctor:";
/// The self-evaluation entry of an over-long checklist.
pub const WEIGHT_KEY: &str = "checklist-weight";
const ITEM_KEY_CHARS: usize = 8;
/// `Number.MAX_SAFE_INTEGER`: larger integers print as the double JavaScript reads them as.
const JS_SAFE_INTEGER_MAX: u64 = 9_007_199_254_740_991;
const CUSTOM_KEY_CHARS: usize = 100;
const DECISION_READ_FAILURE: &str = "I can't read the record of decisions waiting on you — some \
    may be pending without showing up. It needs a repair before I can see them again.";
const SHELL_READ_FAILURE: &str = "I can't read my own session notes right now, so I can't tell \
    whether the current session has gone quiet. It needs a repair before I can check again.";

/// One firing alert: its key, its file text and, when different, its channel text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiringItem {
    /// The alert key.
    pub key: String,
    /// The text monitoring lines show.
    pub text: String,
    /// The id-free text for the operator channel.
    pub channel_text: Option<String>,
}

/// One entry of the payload's `firing` array.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RawFiring {
    key: Option<String>,
    item: Option<String>,
    text: String,
}

/// A validated `alerts tick` payload: upstream's `firing`, plus what upstream reads from files
/// the store does not hold (the checklist, the session id, stale-session) and the structured
/// sources' overrides.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TickInput {
    firing: Vec<RawFiring>,
    checklist: Option<Vec<String>>,
    micro: Option<Vec<FiringItem>>,
    proposals: Option<Vec<FiringItem>>,
    stale_session: Option<String>,
    session_id: Option<String>,
    micro_unreadable: bool,
    proposals_unreadable: bool,
    shell_unreadable: bool,
}

/// Why a payload was rejected: upstream's INDETERMINATE reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `invalid-json`, `missing-or-malformed-firing`, `unresolvable-firing`, or
    /// `malformed-<field>` for hookstate's own fields.
    pub reason: String,
    /// Only an unparseable payload exits 1 upstream.
    pub unparseable: bool,
}

fn reject(reason: &str) -> Rejection {
    Rejection { reason: reason.to_owned(), unparseable: false }
}

/// `checklist:<first 8 alnum>` of a checklist item (list marker and `[ ]` box stripped).
#[must_use]
pub fn item_key(item: &str) -> Option<String> {
    slug(item, ITEM_KEY_CHARS).map(|s| format!("checklist:{s}"))
}

/// `custom:<first 100 alnum>`: the fallback key of a free-form firing entry.
#[must_use]
pub fn custom_key(text: &str) -> Option<String> {
    slug(text, CUSTOM_KEY_CHARS).map(|s| format!("custom:{s}"))
}

fn strip_marker(text: &str) -> &str {
    let Some(rest) = text.strip_prefix(['-', '*', '+']) else {
        return text;
    };
    let rest = rest.trim_start();
    let mut chars = rest.chars();
    if chars.next() == Some('[') {
        if let (Some(mark), Some(']')) = (chars.next(), chars.next()) {
            if mark != '\n' && mark != '\r' {
                return chars.as_str().trim_start();
            }
        }
    }
    rest
}

fn slug(text: &str, max: usize) -> Option<String> {
    let out: String = strip_marker(text)
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .take(max)
        .collect();
    (!out.is_empty()).then_some(out)
}

/// Whether a key is one of the file-backed structured keys.
#[must_use]
pub fn is_structured(key: &str) -> bool {
    key.starts_with(MICRO_PREFIX) || key.starts_with(PROPOSAL_PREFIX)
}

fn is_reserved(key: &str) -> bool {
    is_structured(key) || key == STALE_KEY || key.starts_with(DOCTOR_PREFIX)
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The length of an internal id (`PROP-<digits>`, `MP-<word or dash chars>`, `S-<digits>` at a
/// word end) starting at the front of `rest`, if one does.
fn id_len(rest: &str) -> Option<usize> {
    let run = |tail: &str, ok: fn(char) -> bool| -> usize {
        tail.chars().take_while(|c| ok(*c)).map(char::len_utf8).sum()
    };
    for (prefix, ok) in [
        ("PROP-", (|c: char| c.is_ascii_digit()) as fn(char) -> bool),
        ("MP-", |c: char| is_word(c) || c == '-'),
    ] {
        if let Some(tail) = rest.strip_prefix(prefix) {
            let n = run(tail, ok);
            if n > 0 {
                return Some(prefix.len() + n);
            }
        }
    }
    let tail = rest.strip_prefix("S-")?;
    let n = run(tail, |c| c.is_ascii_digit());
    let after = tail[n..].chars().next();
    (n > 0 && !after.is_some_and(is_word)).then_some(2 + n)
}

/// Removes internal ids (PROP-NNN, MP-…, S-NNN) from channel text, collapses the whitespace
/// runs the removal leaves and trims.
#[must_use]
pub fn scrub_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev: Option<char> = None;
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        if !prev.is_some_and(is_word) {
            if let Some(n) = id_len(&text[i..]) {
                prev = text[i..i + n].chars().last();
                i += n;
                continue;
            }
        }
        out.push(c);
        prev = Some(c);
        i += c.len_utf8();
    }
    let mut collapsed = String::with_capacity(out.len());
    let mut run = String::new();
    for c in out.chars() {
        if c.is_whitespace() {
            run.push(c);
            continue;
        }
        if run.chars().count() >= 2 {
            collapsed.push(' ');
        } else {
            collapsed.push_str(&run);
        }
        run.clear();
        collapsed.push(c);
    }
    collapsed.push_str(&run);
    collapsed.trim().to_owned()
}

fn check_len(what: &str, text: &str) -> std::result::Result<(), Rejection> {
    if text.len() > ALERT_TEXT_BYTES_MAX {
        return Err(reject(&format!("malformed-{what}")));
    }
    Ok(())
}

fn nonempty_str(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned)
}

fn parse_firing(raw: Option<&Value>) -> std::result::Result<Vec<RawFiring>, Rejection> {
    let malformed = || reject("missing-or-malformed-firing");
    let entries = raw.and_then(Value::as_array).ok_or_else(malformed)?;
    if entries.len() > FIRING_ITEMS_MAX {
        return Err(malformed());
    }
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let map = entry.as_object().ok_or_else(malformed)?;
        let text = map.get("text").and_then(Value::as_str).ok_or_else(malformed)?.to_owned();
        let key = nonempty_str(map.get("key"));
        let item = nonempty_str(map.get("item"));
        if key.is_none() && item.is_none() {
            return Err(malformed());
        }
        for part in [Some(&text), key.as_ref(), item.as_ref()].into_iter().flatten() {
            check_len("firing", part)?;
        }
        out.push(RawFiring { key, item, text });
    }
    Ok(out)
}

fn parse_strings(
    map: &Map<String, Value>,
    field: &str,
    max: usize,
) -> std::result::Result<Option<Vec<String>>, Rejection> {
    let bad = || reject(&format!("malformed-{field}"));
    let Some(value) = map.get(field).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let list = value.as_array().filter(|l| l.len() <= max).ok_or_else(bad)?;
    let mut out = Vec::with_capacity(list.len());
    for entry in list {
        let text = entry.as_str().ok_or_else(bad)?;
        check_len(field, text)?;
        out.push(text.to_owned());
    }
    Ok(Some(out))
}

fn parse_items(
    map: &Map<String, Value>,
    field: &str,
    prefix: &str,
) -> std::result::Result<Option<Vec<FiringItem>>, Rejection> {
    let bad = || reject(&format!("malformed-{field}"));
    let Some(value) = map.get(field).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let list = value.as_array().filter(|l| l.len() <= FIRING_ITEMS_MAX).ok_or_else(bad)?;
    let mut out = Vec::with_capacity(list.len());
    for entry in list {
        let entry = entry.as_object().ok_or_else(bad)?;
        let key = nonempty_str(entry.get("key")).filter(|k| k.starts_with(prefix));
        let text = entry.get("text").and_then(Value::as_str);
        let (Some(key), Some(text)) = (key, text) else {
            return Err(bad());
        };
        let channel_text = entry.get("channelText").and_then(Value::as_str).map(str::to_owned);
        for part in
            [Some(&key), Some(&text.to_owned()), channel_text.as_ref()].into_iter().flatten()
        {
            check_len(field, part)?;
        }
        out.push(FiringItem { key, text: text.to_owned(), channel_text });
    }
    Ok(Some(out))
}

/// Parses and validates an `alerts tick` payload as upstream's `alert-state` does (a malformed
/// `firing` rejects the whole tick rather than reading as "nothing fired"), plus hookstate's
/// fields: `checklist` (the `HEARTBEAT.md` items), `session_id` (SHELL.md's `**ID:**`),
/// `stale_session` (the stale-session text, when it fires), `micro` and `proposals` (structured
/// items replacing the store's derivation) and `unreadable` (sources to treat as unreadable:
/// `micro-proposals.json`, `proposals/`, `sessions/SHELL.md`).
///
/// # Errors
/// A [`Rejection`] with upstream's reason.
pub fn parse_tick_input(text: &str) -> std::result::Result<TickInput, Rejection> {
    // Upstream parses `buf.trim()`: JavaScript's whitespace, not Rust's (found by fuzzing).
    let value: Value = serde_json::from_str(crate::kernel::compat::js_trim(text))
        .map_err(|_| Rejection { reason: "invalid-json".into(), unparseable: true })?;
    let map = value.as_object().ok_or_else(|| reject("missing-or-malformed-firing"))?;
    let firing = parse_firing(map.get("firing"))?;
    let checklist = parse_strings(map, "checklist", CHECKLIST_ITEMS_MAX)?;
    let unreadable =
        parse_strings(map, "unreadable", UNREADABLE_SOURCES.len())?.unwrap_or_default();
    let mut input = TickInput {
        firing,
        checklist,
        micro: parse_items(map, "micro", MICRO_PREFIX)?,
        proposals: parse_items(map, "proposals", PROPOSAL_PREFIX)?,
        ..TickInput::default()
    };
    for source in &unreadable {
        match source.as_str() {
            "micro-proposals.json" => input.micro_unreadable = true,
            "proposals/" => input.proposals_unreadable = true,
            "sessions/SHELL.md" => input.shell_unreadable = true,
            _ => return Err(reject("malformed-unreadable")),
        }
    }
    for (field, slot) in
        [("stale_session", &mut input.stale_session), ("session_id", &mut input.session_id)]
    {
        match map.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.len() <= ALERT_TEXT_BYTES_MAX => *slot = Some(s.clone()),
            Some(_) => return Err(reject(&format!("malformed-{field}"))),
        }
    }
    if resolve_firing(&input).is_none() {
        return Err(reject("unresolvable-firing"));
    }
    Ok(input)
}

fn canonical_keys(input: &TickInput) -> Option<HashSet<String>> {
    input.checklist.as_ref().map(|items| items.iter().filter_map(|i| item_key(i)).collect())
}

fn entry_key(entry: &RawFiring, canonical: &HashSet<String>) -> Option<String> {
    if let Some(key) = &entry.key {
        if key == "waiting-timeout" || key.starts_with("custom:") || is_reserved(key) {
            return Some(key.clone());
        }
    }
    if let Some(derived) = entry.item.as_deref().and_then(item_key) {
        if canonical.contains(&derived) {
            return Some(derived);
        }
    }
    if let Some(key) = entry.key.as_ref().filter(|k| canonical.contains(*k)) {
        return Some(key.clone());
    }
    let fallback = entry.item.as_deref().or(entry.key.as_deref()).unwrap_or(&entry.text);
    custom_key(fallback)
}

/// The model's firing entries with their keys resolved against the checklist, deduplicated
/// (first wins); `None` when there is no checklist and an entry has no key.
fn resolve_firing(input: &TickInput) -> Option<Vec<FiringItem>> {
    let canonical = canonical_keys(input);
    if canonical.is_none() && input.firing.iter().any(|e| e.key.is_none()) {
        return None;
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for entry in &input.firing {
        let key = match &canonical {
            None => entry.key.clone(),
            Some(canonical) => entry_key(entry, canonical),
        };
        let Some(key) = key else { continue };
        if seen.insert(key.clone()) {
            out.push(FiringItem { key, text: entry.text.clone(), channel_text: None });
        }
    }
    Some(out)
}

/// The clock of one tick, in `config.timezone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickClock {
    /// toISOString of now.
    pub now_iso: String,
    /// todayYMD.
    pub today: String,
    /// HH:MM for monitoring lines.
    pub hhmm: String,
}

impl TickClock {
    /// The clock at `now_ms` in `timezone`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unknown zone or a time after year 9999.
    pub fn at(now_ms: u64, timezone: &str) -> Result<TickClock> {
        crate::alerts::heartbeat_rules::check_time(now_ms)?;
        let ms = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let now_iso = chrono::DateTime::from_timestamp_millis(ms)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
            .ok_or_else(|| Error::invalid(format!("time {now_ms} ms is out of range")))?;
        Ok(TickClock {
            now_iso,
            today: crate::kernel::compat::stamp::zoned(now_ms, timezone, "%Y-%m-%d")?,
            hhmm: crate::kernel::compat::stamp::zoned(now_ms, timezone, "%H:%M")?,
        })
    }
}

/// A queue entry's fields (none when its text is not a JSON object).
fn entry_map(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// A PROP file's frontmatter value as a string: a bare word, or a JSON string decoded.
fn fm_str(text: &str, key: &str) -> Option<String> {
    let (lines, _) = frontmatter(text)?;
    let raw = lines.into_iter().find(|(k, _)| k == key).map(|(_, raw)| raw)?;
    if raw == "null" {
        return None;
    }
    if raw.starts_with('"') || raw.starts_with('[') {
        if let Ok(value) = serde_json::from_str::<Value>(&raw) {
            return value.as_str().map(str::to_owned);
        }
    }
    Some(raw)
}

/// A structured source's items, or `None` when it could not be read (its prefix is frozen).
pub(crate) type Derived = Option<Vec<FiringItem>>;

/// The `micro-proposal-pending:` items of a queue: pending tier-1 entries with a string id.
pub(crate) fn micro_items(queue: &QueueDoc) -> Vec<FiringItem> {
    let mut items = Vec::new();
    for text in &queue.entries {
        let entry = entry_map(text);
        let pending = entry.get("status").and_then(Value::as_str) == Some("pending");
        let tier_one = entry.get("tier").and_then(Value::as_f64) == Some(1.0);
        let Some(id) = entry.get("id").and_then(Value::as_str).filter(|_| pending && tier_one)
        else {
            continue;
        };
        let question = entry.get("question").and_then(Value::as_str).unwrap_or_default();
        let mut text = format!("micro-proposal '{id}' awaiting operator input — {question}");
        let mut channel = format!("a decision awaiting your input — {question}");
        if let Some(options) = entry.get("options").and_then(Value::as_array) {
            if !options.is_empty() {
                let labels: Vec<String> = options
                    .iter()
                    .enumerate()
                    .map(|(i, o)| format!("{}: {}", i + 1, js_string(Some(o))))
                    .collect();
                let suffix = format!(" [{}]", labels.join(", "));
                text.push_str(&suffix);
                channel.push_str(&suffix);
            }
        }
        items.push(FiringItem {
            key: format!("{MICRO_PREFIX}{id}"),
            text,
            channel_text: Some(channel),
        });
    }
    items
}

/// The `proposal-pending:` items of the PROP files: `status: proposed`, titled when they can be.
pub(crate) fn proposal_items(props: &[(String, PropDoc)]) -> Vec<FiringItem> {
    let mut items = Vec::new();
    for (_, doc) in props {
        if doc.status.as_deref() != Some("proposed") {
            continue;
        }
        let digits: String = doc
            .file
            .strip_prefix("PROP-")
            .unwrap_or_default()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if digits.is_empty() {
            continue;
        }
        let id = format!("PROP-{digits}");
        let title = fm_str(&doc.text, "title").filter(|t| !t.is_empty());
        let (text, channel) = match &title {
            Some(t) => (format!("{id} \"{t}\""), format!("proposal \"{t}\" awaiting review")),
            None => (id.clone(), "a proposal awaiting review".to_owned()),
        };
        items.push(FiringItem {
            key: format!("{PROPOSAL_PREFIX}{id}"),
            text,
            channel_text: Some(channel),
        });
    }
    items
}

/// A JS template-literal rendering of a JSON value (`String(v)`): strings bare, missing values
/// `undefined`, objects `[object Object]`.
fn js_string(value: Option<&Value>) -> String {
    match value {
        None => "undefined".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) => "null".into(),
        Some(Value::Array(items)) => {
            items.iter().map(|v| js_string(Some(v))).collect::<Vec<_>>().join(",")
        }
        Some(Value::Object(_)) => "[object Object]".into(),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) if i.unsigned_abs() <= JS_SAFE_INTEGER_MAX => i.to_string(),
            (_, Some(x)) => crate::kernel::compat::js::number_text(x),
            _ => n.to_string(),
        },
        Some(other) => other.to_string(),
    }
}

/// JS truthiness of a JSON value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// A counter as JavaScript reads it: any integral number (`40` and `40.0` are one number to
/// `JSON.parse`); anything else is `None`.
fn js_int(value: Option<&Value>) -> Option<i64> {
    const I64_BOUND: f64 = 9_223_372_036_854_775_807.0;
    let value = value?;
    if let Some(i) = value.as_i64() {
        return Some(i);
    }
    let x = value.as_f64().filter(|x| x.fract() == 0.0 && x.abs() < I64_BOUND)?;
    #[expect(clippy::cast_possible_truncation, reason = "integral and within i64")]
    Some(x as i64)
}

/// A counter, 0 when it is not an integral number.
fn num(value: Option<&Value>) -> i64 {
    js_int(value).unwrap_or(0)
}

fn channel_label(key: &str, text: &str, channel: Option<&str>) -> String {
    let label = channel.unwrap_or(text);
    if is_structured(key) {
        scrub_ids(label)
    } else {
        label.to_owned()
    }
}

/// What one classification produced.
#[derive(Debug, Clone, PartialEq, Default)]
struct Classified {
    alerts: Map<String, Value>,
    monitoring_lines: Vec<String>,
    notifications: Vec<String>,
    last_digest_date: Value,
}

fn with_channel(mut entry: Map<String, Value>, item: &FiringItem) -> Value {
    if let Some(channel) = item.channel_text.as_ref().filter(|c| **c != item.text) {
        entry.insert("channelText".into(), json!(channel));
    }
    Value::Object(entry)
}

fn new_entry(item: &FiringItem, today: &str) -> Value {
    let entry = json!({
        "count": 1, "consecutive_clean": 0, "suppressed": false,
        "first_seen": today, "last_seen": today, "text": item.text,
    });
    with_channel(fields(entry), item)
}

/// One key that fires again: counts 2–5 repeat, 6 suppresses with a notice, above is silent.
fn refire(prev: &Value, key: &str, item: &FiringItem, clock: &TickClock, out: &mut Classified) {
    let mut entry = prev.as_object().cloned().unwrap_or_default();
    let count = num(prev.get("count")) + 1;
    entry.insert("count".into(), json!(count));
    entry.insert("consecutive_clean".into(), json!(0));
    entry.insert("last_seen".into(), json!(clock.today));
    entry.insert("text".into(), json!(item.text));
    entry.insert("suppressed".into(), json!(count >= SUPPRESS_AT_COUNT));
    out.alerts.insert(key.to_owned(), with_channel(entry, item));
    let hhmm = &clock.hhmm;
    if count < SUPPRESS_AT_COUNT {
        out.monitoring_lines.push(format!("[{hhmm}] Heartbeat: {}", item.text));
    } else if count == SUPPRESS_AT_COUNT {
        let first = js_string(prev.get("first_seen"));
        out.monitoring_lines.push(format!(
            "[{hhmm}] Heartbeat: above alert suppressed after 5 fires (first: {first}). Daily \
             digest only."
        ));
        let label = channel_label(key, &item.text, item.channel_text.as_deref());
        out.notifications
            .push(format!("Heartbeat: \"{label}\" suppressed after 5 fires — daily digest only."));
    }
}

/// One key that did not fire: a clean tick, dropped at the second (with a resolved line unless
/// it was suppressed).
fn clean(prev: &Value, key: &str, clock: &TickClock, out: &mut Classified) {
    let consecutive = num(prev.get("consecutive_clean")) + 1;
    if consecutive >= RESOLVE_AFTER_CLEAN_TICKS {
        if prev.get("suppressed") != Some(&Value::Bool(true)) {
            let text = js_string(prev.get("text"));
            out.monitoring_lines.push(format!("[{}] Heartbeat: resolved — {text}", clock.hhmm));
        }
        return;
    }
    let mut entry = prev.as_object().cloned().unwrap_or_default();
    entry.insert("consecutive_clean".into(), json!(consecutive));
    out.alerts.insert(key.to_owned(), Value::Object(entry));
}

/// The ladder over the previous alerts and this tick's firing set (upstream `classifyTick`).
fn classify(
    prev: &Map<String, Value>,
    firing: &[FiringItem],
    silent_on_new: &HashSet<String>,
    prev_digest: Value,
    structured_read_ok: bool,
    clock: &TickClock,
) -> Classified {
    let mut seen = HashSet::new();
    let mut items: Vec<(String, &FiringItem)> = Vec::new();
    for item in firing {
        if seen.insert(item.key.clone()) {
            items.push((item.key.clone(), item));
        } else if let Some(slot) = items.iter_mut().find(|(k, _)| *k == item.key) {
            slot.1 = item;
        }
    }
    let mut out = Classified::default();
    let mut keys: Vec<&str> = prev.keys().map(String::as_str).collect();
    keys.extend(items.iter().map(|(k, _)| k.as_str()).filter(|k| !prev.contains_key(*k)));
    for key in keys {
        let item = items.iter().find(|(k, _)| k == key).map(|(_, i)| *i);
        match (item, prev.get(key).filter(|v| truthy(v))) {
            (Some(item), None) => {
                out.alerts.insert(key.to_owned(), new_entry(item, &clock.today));
                out.monitoring_lines.push(format!("[{}] Heartbeat: {}", clock.hhmm, item.text));
                if !silent_on_new.contains(key) {
                    out.notifications.push(item.text.clone());
                }
            }
            (Some(item), Some(prev)) => refire(prev, key, item, clock, &mut out),
            (None, Some(prev)) => clean(prev, key, clock, &mut out),
            (None, None) => {}
        }
    }
    out.last_digest_date = digest(&mut out, prev_digest, structured_read_ok, &clock.today);
    out
}

/// The daily digest of suppressed entries; returns the new `last_digest_date`.
fn digest(out: &mut Classified, prev: Value, structured_read_ok: bool, today: &str) -> Value {
    let suppressed: Vec<String> = out
        .alerts
        .iter()
        .filter(|(_, e)| e.get("suppressed") == Some(&Value::Bool(true)))
        .map(|(k, e)| {
            let text = js_string(e.get("text"));
            let label = channel_label(k, &text, e.get("channelText").and_then(Value::as_str));
            let count = js_string(e.get("count"));
            format!("{label} ({count}x, since {})", js_string(e.get("first_seen")))
        })
        .collect();
    let last = if prev.is_string() { prev } else { Value::Null };
    if structured_read_ok && !suppressed.is_empty() && last.as_str() != Some(today) {
        out.notifications.push(format!("Suppressed alert digest: {}", suppressed.join("; ")));
        return json!(today);
    }
    last
}

/// A PROP file as self-evaluation reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PropFacts {
    self_eval_key: Option<String>,
    source: Option<String>,
    status: Option<String>,
}

pub(crate) fn prop_facts(props: &[(String, PropDoc)]) -> Vec<PropFacts> {
    props
        .iter()
        .map(|(_, doc)| PropFacts {
            self_eval_key: fm_str(&doc.text, "self_eval_key"),
            source: fm_str(&doc.text, "source"),
            status: doc.status.clone(),
        })
        .collect()
}

/// The entry of `key` prepared for a pass (upstream `upsert`); the caller stores it back.
fn upsert(
    self_eval: &Map<String, Value>,
    text: &str,
    key: &str,
    today: &str,
) -> Map<String, Value> {
    let mut entry = self_eval.get(key).and_then(Value::as_object).cloned().unwrap_or_default();
    entry.insert("text".into(), json!(text));
    if !entry.get("first_observed").is_some_and(Value::is_string) {
        entry.insert("first_observed".into(), json!(today));
    }
    for counter in ["clean_ticks", "noise_ticks", "sessions_seen"] {
        let value = num(entry.get(counter));
        entry.insert(counter.into(), json!(value));
    }
    let proposed = entry.get("proposed") == Some(&Value::Bool(true));
    entry.insert("proposed".into(), json!(proposed));
    entry
}

fn mark_session(entry: &mut Map<String, Value>, session: Option<&str>) {
    let Some(session) = session else { return };
    if entry.get("last_session_id").and_then(Value::as_str) != Some(session) {
        let seen = num(entry.get("sessions_seen")) + 1;
        entry.insert("sessions_seen".into(), json!(seen));
        entry.insert("last_session_id".into(), json!(session));
    }
}

fn bump(entry: &mut Map<String, Value>, counter: &str) {
    let value = num(entry.get(counter)) + 1;
    entry.insert(counter.into(), json!(value));
}

/// Inputs of one self-evaluation pass.
struct SelfEvalInput<'a> {
    checklist: &'a [String],
    session: Option<&'a str>,
    alerts: &'a Map<String, Value>,
    props: &'a [PropFacts],
    today: &'a str,
}

/// One self-evaluation pass (upstream `runSelfEval`): per checklist item a clean or firing pass,
/// the checklist-weight entry, dismissed-proposal noise, and the entries crossing a threshold.
fn self_evaluate(self_eval: &mut Map<String, Value>, input: &SelfEvalInput<'_>) -> Vec<Value> {
    let mut fired = HashSet::new();
    for item in input.checklist {
        let Some(key) = item_key(item) else { continue };
        let mut entry = upsert(self_eval, item, &key, input.today);
        entry.shift_remove("alert_text");
        let in_interval = entry.shift_remove("fired_since_self_eval") == Some(Value::Bool(true));
        let alert_firing =
            input.alerts.get(&key).is_some_and(|a| num(a.get("consecutive_clean")) == 0);
        if in_interval || alert_firing {
            fired.insert(key.clone());
            entry.insert("clean_ticks".into(), json!(0));
        } else {
            bump(&mut entry, "clean_ticks");
        }
        mark_session(&mut entry, input.session);
        self_eval.insert(key, Value::Object(entry));
    }
    if input.checklist.len() > CHECKLIST_ITEMS_RECOMMENDED_MAX {
        let text = format!("Checklist weight: {} items", input.checklist.len());
        let mut entry = upsert(self_eval, &text, WEIGHT_KEY, input.today);
        bump(&mut entry, "clean_ticks");
        mark_session(&mut entry, input.session);
        self_eval.insert(WEIGHT_KEY.into(), Value::Object(entry));
    } else {
        self_eval.shift_remove(WEIGHT_KEY);
    }
    for prop in input.props {
        let Some(key) = &prop.self_eval_key else { continue };
        let Some(Value::Object(entry)) = self_eval.get_mut(key) else { continue };
        let status = prop.status.as_deref();
        let proposed = entry.get("proposed") == Some(&Value::Bool(true));
        if prop.source.as_deref() == Some("auto-detected")
            && status == Some("dismissed")
            && proposed
        {
            entry.insert("proposed".into(), json!(false));
            entry.insert("clean_ticks".into(), json!(0));
        }
        if !fired.contains(key) {
            continue;
        }
        match status {
            Some("accepted" | "resolved") => {
                entry.insert("noise_ticks".into(), json!(0));
            }
            Some("dismissed") => bump(entry, "noise_ticks"),
            _ => {}
        }
    }
    proposals_due(self_eval)
}

fn proposals_due(self_eval: &mut Map<String, Value>) -> Vec<Value> {
    let mut proposals = Vec::new();
    for (key, entry) in self_eval.iter_mut() {
        let Value::Object(entry) = entry else { continue };
        let (clean, noise) = (num(entry.get("clean_ticks")), num(entry.get("noise_ticks")));
        let sessions = num(entry.get("sessions_seen"));
        if entry.get("proposed") == Some(&Value::Bool(true))
            || sessions < SELF_EVAL_SESSIONS_THRESHOLD
        {
            continue;
        }
        let kind = if noise >= SELF_EVAL_TICKS_THRESHOLD {
            "noisy"
        } else if clean >= SELF_EVAL_TICKS_THRESHOLD {
            if key == WEIGHT_KEY {
                "weight"
            } else {
                "clean"
            }
        } else {
            continue;
        };
        entry.insert("proposed".into(), json!(true));
        proposals.push(json!({
            "key": key, "kind": kind, "clean_ticks": clean, "noise_ticks": noise,
            "sessions_seen": sessions,
        }));
    }
    proposals
}

/// What the store holds for one tick's decision.
pub(crate) struct TickSources {
    /// The stored alert-state object (the seed template when absent).
    pub(crate) state: Map<String, Value>,
    /// The micro-proposal items, `None` when unreadable.
    pub(crate) micro: Derived,
    /// The proposal items, `None` when unreadable.
    pub(crate) proposals: Derived,
    /// The PROP files, for self-evaluation.
    pub(crate) props: Vec<PropFacts>,
}

/// The new alert-state object and the tick's result (upstream `alert-update`).
pub(crate) fn decide_tick(
    sources: TickSources,
    input: &TickInput,
    clock: &TickClock,
) -> (Map<String, Value>, Map<String, Value>) {
    let TickSources { mut state, micro, proposals, props } = sources;
    let model: Vec<FiringItem> = resolve_firing(input)
        .unwrap_or_default()
        .into_iter()
        .filter(|f| !is_reserved(&f.key))
        .collect();
    let stale: Derived = (!input.shell_unreadable).then(|| {
        let text = input.stale_session.clone();
        text.map(|text| FiringItem { key: STALE_KEY.into(), text, channel_text: None })
            .into_iter()
            .collect()
    });
    let (classifiable, frozen) = split_frozen(
        &state,
        [
            (MICRO_PREFIX, micro.is_none()),
            (PROPOSAL_PREFIX, proposals.is_none()),
            (STALE_KEY, stale.is_none()),
        ],
    );
    let read_failure = micro.is_none() || proposals.is_none() || stale.is_none();
    let structured: Vec<FiringItem> =
        micro.iter().chain(proposals.iter()).flatten().cloned().collect();
    let silent: HashSet<String> = structured.iter().map(|i| i.key.clone()).collect();
    let mut firing = model.clone();
    firing.extend(structured);
    firing.extend(stale.iter().flatten().cloned());
    let prev_digest = state.get("last_digest_date").cloned().unwrap_or(Value::Null);
    let mut out = classify(&classifiable, &firing, &silent, prev_digest, !read_failure, clock);
    out.alerts.extend(frozen);
    let failure_date = read_failure_date(&state, &micro, &proposals, &stale, clock, &mut out);
    let mut self_eval = marked_self_eval(&state, &model, canonical_keys(input).as_ref());
    let ticks = js_int(state.get("total_ticks"));
    let proposals_due = match ticks.filter(|t| t % SELF_EVAL_EVERY_TICKS == 0) {
        Some(_) => self_evaluate(
            &mut self_eval,
            &SelfEvalInput {
                checklist: input.checklist.as_deref().unwrap_or_default(),
                session: input.session_id.as_deref(),
                alerts: &out.alerts,
                props: &props,
                today: &clock.today,
            },
        ),
        None => Vec::new(),
    };
    let clean_eval =
        if read_failure || !firing.is_empty() { Value::Null } else { json!(clock.now_iso) };
    let result_kind = if read_failure || !firing.is_empty() { "ALERT" } else { "OK" };
    state.insert("alerts".into(), Value::Object(out.alerts));
    state.insert("self_eval".into(), Value::Object(self_eval));
    state.insert("last_clean_eval_at".into(), clean_eval);
    state.insert("last_digest_date".into(), out.last_digest_date);
    state.insert("structured_read_failure_notified_date".into(), failure_date);
    let result = json!({
        "appended": 0,
        "notifications": out.notifications,
        "self_eval_proposals": proposals_due,
        "heartbeat_result": result_kind,
        "monitoring_lines": out.monitoring_lines,
    });
    (state, fields(result))
}

/// The previous alerts without doctor residue, split into those this tick classifies and those
/// frozen because their prefix's source is unreadable (`(prefix, unreadable)`).
fn split_frozen(
    state: &Map<String, Value>,
    prefixes: [(&str, bool); 3],
) -> (Map<String, Value>, Map<String, Value>) {
    let mut classifiable =
        state.get("alerts").and_then(Value::as_object).cloned().unwrap_or_default();
    classifiable.retain(|k, _| !k.starts_with(DOCTOR_PREFIX));
    let mut frozen = Map::new();
    for (prefix, _) in prefixes.iter().filter(|(_, unreadable)| *unreadable) {
        let keys: Vec<String> =
            classifiable.keys().filter(|k| k.starts_with(prefix)).cloned().collect();
        for key in keys {
            if let Some(entry) = classifiable.shift_remove(&key) {
                frozen.insert(key, entry);
            }
        }
    }
    (classifiable, frozen)
}

/// `self_eval` with `fired_since_self_eval` set on every checklist key the model fired, so a
/// firing that recovers before the next evaluation still counts.
fn marked_self_eval(
    state: &Map<String, Value>,
    model: &[FiringItem],
    canonical: Option<&HashSet<String>>,
) -> Map<String, Value> {
    let mut self_eval =
        state.get("self_eval").and_then(Value::as_object).cloned().unwrap_or_default();
    for item in model.iter().filter(|i| canonical.is_some_and(|c| c.contains(&i.key))) {
        let mut entry =
            self_eval.get(&item.key).and_then(Value::as_object).cloned().unwrap_or_default();
        entry.insert("fired_since_self_eval".into(), json!(true));
        self_eval.insert(item.key.clone(), Value::Object(entry));
    }
    self_eval
}

/// The once-a-day notice of an unreadable structured source; returns the new
/// `structured_read_failure_notified_date`.
fn read_failure_date(
    state: &Map<String, Value>,
    micro: &Derived,
    proposals: &Derived,
    stale: &Derived,
    clock: &TickClock,
    out: &mut Classified,
) -> Value {
    let failed: Vec<&str> = [
        (micro.is_none(), "micro-proposals.json"),
        (proposals.is_none(), "proposals/"),
        (stale.is_none(), "sessions/SHELL.md"),
    ]
    .into_iter()
    .filter_map(|(failed, name)| failed.then_some(name))
    .collect();
    if failed.is_empty() {
        return Value::Null;
    }
    let previous = state.get("structured_read_failure_notified_date");
    if previous.and_then(Value::as_str) == Some(clock.today.as_str()) {
        return previous.cloned().unwrap_or(Value::Null);
    }
    let decisions = micro.is_none() || proposals.is_none();
    out.notifications
        .push(if decisions { DECISION_READ_FAILURE } else { SHELL_READ_FAILURE }.to_owned());
    out.monitoring_lines.push(format!(
        "[{}] Heartbeat: structured read failure ({}). Pending-decision alerts frozen.",
        clock.hhmm,
        failed.join(", ")
    ));
    json!(clock.today)
}

/// Upstream's INDETERMINATE line for a rejected payload: nothing was written.
#[must_use]
pub fn indeterminate(reason: &str, clock: &TickClock) -> Value {
    json!({
        "appended": 0,
        "notifications": [],
        "self_eval_proposals": [],
        "heartbeat_result": "INDETERMINATE",
        "reason": reason,
        "monitoring_lines": [format!(
            "[{}] Heartbeat: evaluation indeterminate ({reason}) — state untouched.",
            clock.hhmm
        )],
    })
}

/// The stored alert-state object of a scope, the seed template when absent.
pub(crate) fn read_state(
    txn: &dyn crate::kernel::storage::ReadTxn,
    scope: &str,
) -> Result<Option<Map<String, Value>>> {
    let Some(doc) = read_doc::<AlertStateDoc>(txn, scope, STATE_KIND, STATE_ID)? else {
        return Ok(None);
    };
    match serde_json::from_str(&doc.state) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        _ => Err(Error::Corrupt(format!("alert state of {scope} is not a JSON object"))),
    }
}

/// The seed template of a new alert state.
pub(crate) fn seed() -> Map<String, Value> {
    match serde_json::from_str(&AlertStateDoc::default().state) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

impl Alerts<'_> {
    /// One evaluation tick (`heartbeat.ts alert-state`): reads the alert state, derives the
    /// structured keys from the scope's micro-proposal queue and PROP files (unless the payload
    /// gives or disowns them), runs the ladder and self-evaluation, and appends the new state,
    /// all in one write transaction.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unknown zone or a state over the event limit; store errors.
    pub fn tick(&self, call: &Call, timezone: &str, input: &TickInput) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        let clock = TickClock::at(call.now_ms, timezone)?;
        self.k.write(call, |txn| {
            let state = read_state(txn, &call.scope)?.unwrap_or_else(seed);
            let props = crate::kernel::doc::read_docs::<PropDoc>(txn, &call.scope, PROP_KIND)?;
            let micro = match (&input.micro, input.micro_unreadable) {
                (_, true) => None,
                (Some(items), false) => Some(items.clone()),
                (None, false) => Some(
                    read_doc::<QueueDoc>(txn, &call.scope, QUEUE_KIND, QUEUE_ID)?
                        .map(|q| micro_items(&q))
                        .unwrap_or_default(),
                ),
            };
            let proposals = match (&input.proposals, input.proposals_unreadable) {
                (_, true) => None,
                (Some(items), false) => Some(items.clone()),
                (None, false) => Some(proposal_items(&props)),
            };
            let sources = TickSources { state, micro, proposals, props: prop_facts(&props) };
            let (state, result) = decide_tick(sources, input, &clock);
            let file = super::layout_alerts::render_alert_state(&state)?.len();
            let file_max = super::layout_alerts::ALERT_STATE_FILE_BYTES_MAX;
            if file > file_max {
                return Err(Error::invalid(format!(
                    "the alert state after this tick would be a {file}-byte alert-state.json, \
                     more than the {file_max} bytes import and the mirror read; the tick was not \
                     applied"
                )));
            }
            let (state, result) =
                (Value::Object(state).to_string(), Value::Object(result).to_string());
            let bytes = state.len() + result.len();
            if bytes > TICK_BYTES_MAX {
                return Err(Error::invalid(format!(
                    "the alert state and result after this tick would take {bytes} bytes, more \
                     than the {TICK_BYTES_MAX} one event holds; the tick was not applied"
                )));
            }
            let event = AlertsEvent::Ticked { state, result };
            Ok(Plan {
                result: render(&event),
                events: vec![Body::Alerts(event)],
                ..Plan::default()
            })
        })
    }

    /// precheck's tick count: `total_ticks` plus one, in one write transaction.
    ///
    /// # Errors
    /// Store errors.
    pub fn count_tick(&self, call: &Call) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        self.k.write(call, |txn| {
            let state = read_state(txn, &call.scope)?.unwrap_or_else(seed);
            let total_ticks = num(state.get("total_ticks")).saturating_add(1);
            let event = AlertsEvent::TickCounted { total_ticks };
            Ok(Plan {
                result: render(&event),
                events: vec![Body::Alerts(event)],
                ..Plan::default()
            })
        })
    }

    /// The alert-state object of a scope (the seed template when there is none), read-only.
    ///
    /// # Errors
    /// Store errors; [`Error::Corrupt`] for a stored state that is not an object.
    pub fn state(&self, scope: &str) -> Result<Map<String, Value>> {
        hookstate_schema::validate_scope(scope)?;
        Ok(read_state(&*self.k.begin_read()?, scope)?.unwrap_or_else(seed))
    }
}

/// Every row `apply` may touch for an alerts event.
pub(crate) fn touched_keys(scope: &str) -> Vec<ViewKey> {
    vec![doc_key(scope, STATE_KIND, STATE_ID)]
}

/// Applies an alerts event to the views.
pub(crate) fn apply(views: &mut dyn ViewAccess, scope: &str, event: &AlertsEvent) {
    let key = doc_key(scope, STATE_KIND, STATE_ID);
    let state = match event {
        AlertsEvent::TickCounted { total_ticks } => {
            let doc = get_doc::<AlertStateDoc>(views, &key).unwrap_or_default();
            let mut state = match serde_json::from_str(&doc.state) {
                Ok(Value::Object(map)) => map,
                _ => seed(),
            };
            state.insert("total_ticks".into(), json!(total_ticks));
            Value::Object(state).to_string()
        }
        AlertsEvent::Ticked { state, .. } | AlertsEvent::StateImported { state } => state.clone(),
    };
    put_doc(views, key, &AlertStateDoc { state });
}

/// The result fields an alerts event stands for.
pub(crate) fn render(event: &AlertsEvent) -> Map<String, Value> {
    match event {
        AlertsEvent::TickCounted { total_ticks } => fields(json!({ "total_ticks": total_ticks })),
        AlertsEvent::Ticked { result, .. } => match serde_json::from_str(result) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        },
        AlertsEvent::StateImported { .. } => fields(json!({ "imported": true })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_trimmed_as_javascript_trims_it() {
        // Upstream runs `JSON.parse(buf.trim())`: a byte-order mark or a form feed around the
        // payload is taken away there, so the payload is valid; NEL is not JS whitespace.
        assert!(parse_tick_input("\u{feff}\u{c}{\"firing\":[]}\u{b}\n").is_ok());
        let nel = parse_tick_input("\u{85}{\"firing\":[]}").unwrap_err();
        assert_eq!((nel.reason.as_str(), nel.unparseable), ("invalid-json", true));
    }

    const D1: &str = "2026-11-29";
    const D2: &str = "2026-11-30";

    fn clock(day: &str) -> TickClock {
        TickClock {
            now_iso: format!("{day}T17:00:00.000Z"),
            today: day.into(),
            hhmm: "12:00".into(),
        }
    }

    fn input(payload: Value) -> TickInput {
        parse_tick_input(&payload.to_string()).unwrap()
    }

    fn firing(keys: &[(&str, &str)]) -> TickInput {
        let firing: Vec<Value> = keys.iter().map(|(k, t)| json!({ "key": k, "text": t })).collect();
        input(json!({ "firing": firing }))
    }

    /// One tick over `state` with the structured sources given (`None` = unreadable).
    fn tick(
        state: &Map<String, Value>,
        input: &TickInput,
        day: &str,
        micro: Derived,
    ) -> (Map<String, Value>, Map<String, Value>) {
        let sources = TickSources {
            state: state.clone(),
            micro,
            proposals: Some(Vec::new()),
            props: Vec::new(),
        };
        decide_tick(sources, input, &clock(day))
    }

    fn strings(value: &Value) -> Vec<String> {
        value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect()
    }

    /// One row of the ladder table: the day, the keys firing, the notifications and monitoring
    /// lines expected.
    struct Step {
        day: &'static str,
        firing: &'static [(&'static str, &'static str)],
        notes: &'static [&'static str],
        lines: &'static [&'static str],
    }

    const DISK: (&str, &str) = ("custom:disk", "disk 90% full");
    const CPU: (&str, &str) = ("custom:cpu", "cpu pegged");
    const LINE: &str = "[12:00] Heartbeat: disk 90% full";
    const SUPPRESSED_LINE: &str = "[12:00] Heartbeat: above alert suppressed after 5 fires \
                                   (first: 2026-11-29). Daily digest only.";
    const SUPPRESSED_NOTE: &str =
        "Heartbeat: \"disk 90% full\" suppressed after 5 fires — daily digest only.";

    #[test]
    fn counters_written_as_floats_count_on() {
        // `"count": 5.0` and `"total_ticks": 40.0` (a foreign writer) are 5 and 40 to JSON.parse:
        // the sixth fire suppresses and tick 40 runs the self-evaluation.
        let state: Map<String, Value> = serde_json::from_str(
            r#"{"alerts":{"custom:disk":{"count":5.0,"consecutive_clean":0.0,"suppressed":false,
                "first_seen":"2026-11-29","last_seen":"2026-11-29","text":"disk 90% full"}},
                "last_digest_date":null,"self_eval":{},"total_ticks":40.0}"#,
        )
        .unwrap();
        let mut input = firing(&[DISK]);
        input.checklist = Some((0..11).map(|i| format!("- item {i}")).collect());
        let (next, result) = tick(&state, &input, D1, Some(Vec::new()));
        assert_eq!(next["alerts"]["custom:disk"]["count"], 6);
        assert_eq!(next["alerts"]["custom:disk"]["suppressed"], true);
        assert!(strings(&result["notifications"]).contains(&SUPPRESSED_NOTE.to_owned()));
        assert!(next["self_eval"].get(WEIGHT_KEY).is_some(), "tick 40 evaluated: {next:?}");
    }

    #[test]
    fn digest_numbers_print_as_a_template_literal_prints_them() {
        // A foreign writer's `7.0` and `1e21` read as `${e.count}` reads them: 7 and 1e+21.
        let state: Map<String, Value> = serde_json::from_str(
            r#"{"alerts":{
                "custom:disk":{"count":7.0,"consecutive_clean":0,"suppressed":true,
                               "first_seen":"2026-11-29","text":"disk 90% full"},
                "custom:cpu":{"count":1e21,"consecutive_clean":0,"suppressed":true,
                              "first_seen":"2026-11-29","text":"cpu pegged"}},
                "last_digest_date":"2026-11-29","self_eval":{},"total_ticks":1}"#,
        )
        .unwrap();
        let (_, result) = tick(&state, &firing(&[]), D2, Some(Vec::new()));
        assert_eq!(
            strings(&result["notifications"]),
            ["Suppressed alert digest: disk 90% full (7x, since 2026-11-29); cpu pegged (1e+21x, \
              since 2026-11-29)"]
        );
    }

    #[test]
    fn the_ladder_fires_repeats_suppresses_digests_and_resolves() {
        let table = [
            Step { day: D1, firing: &[DISK], notes: &["disk 90% full"], lines: &[LINE] },
            Step { day: D1, firing: &[DISK], notes: &[], lines: &[LINE] },
            Step { day: D1, firing: &[DISK], notes: &[], lines: &[LINE] },
            Step { day: D1, firing: &[DISK], notes: &[], lines: &[LINE] },
            Step { day: D1, firing: &[DISK], notes: &[], lines: &[LINE] },
            Step {
                day: D1,
                firing: &[DISK],
                notes: &[
                    SUPPRESSED_NOTE,
                    "Suppressed alert digest: disk 90% full (6x, since 2026-11-29)",
                ],
                lines: &[SUPPRESSED_LINE],
            },
            Step { day: D1, firing: &[DISK], notes: &[], lines: &[] },
            Step {
                day: D2,
                firing: &[DISK, CPU],
                notes: &[
                    "cpu pegged",
                    "Suppressed alert digest: disk 90% full (8x, since 2026-11-29)",
                ],
                lines: &["[12:00] Heartbeat: cpu pegged"],
            },
            Step { day: D2, firing: &[], notes: &[], lines: &[] },
            Step {
                day: D2,
                firing: &[],
                notes: &[],
                lines: &["[12:00] Heartbeat: resolved — cpu pegged"],
            },
        ];
        let mut state = seed();
        for (i, step) in table.iter().enumerate() {
            let (next, result) = tick(&state, &firing(step.firing), step.day, Some(Vec::new()));
            assert_eq!(strings(&result["notifications"]), step.notes, "tick {}", i + 1);
            assert_eq!(strings(&result["monitoring_lines"]), step.lines, "tick {}", i + 1);
            let expected = if step.firing.is_empty() { "OK" } else { "ALERT" };
            assert_eq!(result["heartbeat_result"], expected, "tick {}", i + 1);
            state = next;
        }
        assert_eq!(state["alerts"], json!({}), "the suppressed key resolved silently");
        assert_eq!(state["last_digest_date"], D2);
        assert_eq!(state["last_clean_eval_at"], "2026-11-30T17:00:00.000Z");
    }

    #[test]
    fn entries_keep_their_key_order_and_count_exactly() {
        let mut state = seed();
        for _ in 0..7 {
            state = tick(&state, &firing(&[DISK]), D1, Some(Vec::new())).0;
        }
        let entry = &state["alerts"]["custom:disk"];
        let expected = "{\"count\":7,\"consecutive_clean\":0,\"suppressed\":true,\"first_seen\":\
                        \"2026-11-29\",\"last_seen\":\"2026-11-29\",\"text\":\"disk 90% full\"}";
        assert_eq!(entry.to_string(), expected, "no channelText when it equals text");
        let keys: Vec<&String> = state.keys().collect();
        assert_eq!(
            keys,
            [
                "alerts",
                "last_digest_date",
                "self_eval",
                "total_ticks",
                "last_clean_eval_at",
                "structured_read_failure_notified_date"
            ]
        );
    }

    fn micro_item(id: &str) -> FiringItem {
        FiringItem {
            key: format!("{MICRO_PREFIX}{id}"),
            text: format!("micro-proposal '{id}' awaiting operator input — Ship it?"),
            channel_text: Some("a decision awaiting your input — Ship it?".into()),
        }
    }

    #[test]
    fn structured_keys_are_silent_on_first_fire_and_keep_their_channel_text() {
        let (state, result) =
            tick(&seed(), &firing(&[]), D1, Some(vec![micro_item("MP-20261129-0")]));
        assert_eq!(strings(&result["notifications"]), Vec::<String>::new());
        assert_eq!(
            strings(&result["monitoring_lines"]),
            ["[12:00] Heartbeat: micro-proposal 'MP-20261129-0' awaiting operator input — Ship it?"]
        );
        let entry = &state["alerts"]["micro-proposal-pending:MP-20261129-0"];
        assert_eq!(entry["channelText"], "a decision awaiting your input — Ship it?");
        assert_eq!(result["heartbeat_result"], "ALERT");
        assert_eq!(state["last_clean_eval_at"], Value::Null, "something fired");
    }

    #[test]
    fn an_unreadable_structured_source_freezes_its_prefix_and_notifies_once_a_day() {
        let mut state = seed();
        for _ in 0..2 {
            state = tick(&state, &firing(&[]), D1, Some(vec![micro_item("MP-20261129-0")])).0;
        }
        state = tick(&state, &firing(&[DISK]), D1, Some(vec![micro_item("MP-20261129-0")])).0;
        let frozen = state["alerts"]["micro-proposal-pending:MP-20261129-0"].clone();
        let (next, result) = tick(&state, &firing(&[]), D1, None);
        assert_eq!(next["alerts"]["micro-proposal-pending:MP-20261129-0"], frozen, "untouched");
        let keys: Vec<&String> = next["alerts"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["custom:disk", "micro-proposal-pending:MP-20261129-0"], "frozen last");
        assert_eq!(next["alerts"]["custom:disk"]["consecutive_clean"], 1, "others still age");
        assert_eq!(strings(&result["notifications"]), [DECISION_READ_FAILURE]);
        assert_eq!(
            strings(&result["monitoring_lines"]),
            ["[12:00] Heartbeat: structured read failure (micro-proposals.json). Pending-decision \
              alerts frozen."]
        );
        assert_eq!(result["heartbeat_result"], "ALERT", "never OK over an unverified decision");
        assert_eq!(next["last_clean_eval_at"], Value::Null);
        assert_eq!(next["structured_read_failure_notified_date"], D1);
        let (again, result) = tick(&next, &firing(&[]), D1, None);
        assert!(strings(&result["notifications"]).is_empty(), "once a day");
        assert_eq!(again["alerts"]["micro-proposal-pending:MP-20261129-0"], frozen);
        let (recovered, _) = tick(&again, &firing(&[]), D1, Some(Vec::new()));
        assert_eq!(recovered["structured_read_failure_notified_date"], Value::Null);
        assert_eq!(
            recovered["alerts"]["micro-proposal-pending:MP-20261129-0"]["consecutive_clean"],
            1
        );
        let shell = input(json!({ "firing": [], "unreadable": ["sessions/SHELL.md"] }));
        let (_, result) = tick(&recovered, &shell, D2, Some(Vec::new()));
        assert_eq!(strings(&result["notifications"]), [SHELL_READ_FAILURE]);
    }

    #[test]
    fn a_suppressed_digest_waits_while_a_source_is_unreadable() {
        let mut state = seed();
        for _ in 0..7 {
            state = tick(&state, &firing(&[DISK]), D1, Some(Vec::new())).0;
        }
        let (state, result) = tick(&state, &firing(&[DISK]), D2, None);
        assert!(!strings(&result["notifications"]).iter().any(|n| n.starts_with("Suppressed")));
        assert_eq!(state["last_digest_date"], D1, "not consumed on a partial view");
        let (_, result) = tick(&state, &firing(&[DISK]), D2, Some(Vec::new()));
        assert!(strings(&result["notifications"]).iter().any(|n| n.starts_with("Suppressed")));
    }

    #[test]
    fn doctor_residue_is_purged_and_foreign_fields_survive() {
        let state = fields(json!({
            "alerts": { "doctor:disk": { "count": 3, "detail": "x" } },
            "total_ticks": 7, "last_stale_wake_at": "2026-11-29T09:00:00.004Z", "note": [1],
        }));
        let (next, result) = tick(&state, &firing(&[]), D1, Some(Vec::new()));
        assert_eq!(next["alerts"], json!({}));
        assert!(strings(&result["monitoring_lines"]).is_empty(), "dropped silently");
        assert_eq!(next["last_stale_wake_at"], "2026-11-29T09:00:00.004Z");
        assert_eq!(next["note"], json!([1]));
        assert_eq!(next["total_ticks"], 7);
    }

    #[test]
    fn stale_session_comes_from_the_payload() {
        let stale = input(json!({ "firing": [], "stale_session": "session quiet since [09:10]" }));
        let (state, result) = tick(&seed(), &stale, D1, Some(Vec::new()));
        assert_eq!(strings(&result["notifications"]), ["session quiet since [09:10]"]);
        assert_eq!(state["alerts"][STALE_KEY]["count"], 1);
        let model = input(json!({ "firing": [{ "key": "stale-session", "text": "phantom" }] }));
        let (state, _) = tick(&state, &model, D1, Some(Vec::new()));
        assert_eq!(state["alerts"][STALE_KEY]["consecutive_clean"], 1, "model phantom dropped");
    }

    fn self_eval_state(ticks: i64) -> Map<String, Value> {
        fields(json!({
            "alerts": {},
            "self_eval": { "checklist:checkdis": {
                "text": "- Check disk usage on /var", "first_observed": "2026-08-30",
                "clean_ticks": 19, "noise_ticks": 0, "sessions_seen": 2, "proposed": false,
                "last_session_id": "S-1",
            }},
            "total_ticks": ticks,
        }))
    }

    #[test]
    fn self_evaluation_runs_every_20_ticks_and_proposes_a_clean_item() {
        let payload = json!({
            "firing": [], "checklist": ["- Check disk usage on /var"], "session_id": "S-2",
        });
        let (state, result) = tick(&self_eval_state(21), &input(payload.clone()), D1, Some(vec![]));
        assert_eq!(result["self_eval_proposals"], json!([]));
        assert_eq!(state["self_eval"]["checklist:checkdis"]["clean_ticks"], 19, "not a boundary");
        let (state, result) = tick(&self_eval_state(20), &input(payload), D1, Some(vec![]));
        assert_eq!(
            result["self_eval_proposals"],
            json!([{ "key": "checklist:checkdis", "kind": "clean", "clean_ticks": 20,
                     "noise_ticks": 0, "sessions_seen": 3 }])
        );
        let entry = &state["self_eval"]["checklist:checkdis"];
        assert_eq!(
            (entry["proposed"].clone(), entry["last_session_id"].clone()),
            (json!(true), json!("S-2"))
        );
    }

    #[test]
    fn a_firing_item_resets_its_clean_streak_at_the_next_evaluation() {
        let fire = json!({
            "firing": [{ "item": "- Check disk usage on /var", "text": "disk high" }],
            "checklist": ["- Check disk usage on /var"],
        });
        let (state, _) = tick(&self_eval_state(21), &input(fire), D1, Some(vec![]));
        assert_eq!(state["alerts"]["checklist:checkdis"]["count"], 1, "item resolved to its key");
        assert_eq!(state["self_eval"]["checklist:checkdis"]["fired_since_self_eval"], true);
        let mut state = state;
        state.insert("total_ticks".into(), json!(40));
        let mut items: Vec<String> = (0..11).map(|i| format!("- item number {i}")).collect();
        items[0] = "- Check disk usage on /var".into();
        let quiet = input(json!({ "firing": [], "checklist": items }));
        let (state, _) = tick(&state, &quiet, D2, Some(vec![]));
        let entry = &state["self_eval"]["checklist:checkdis"];
        assert_eq!(entry["clean_ticks"], 0, "fired in the interval");
        assert!(entry.get("fired_since_self_eval").is_none(), "evidence consumed");
        assert_eq!(state["self_eval"][WEIGHT_KEY]["text"], "Checklist weight: 11 items");
        assert_eq!(state["self_eval"][WEIGHT_KEY]["clean_ticks"], 1);
    }

    #[test]
    fn keys_normalise_like_upstream() {
        assert_eq!(item_key("- [x] Check disk usage").as_deref(), Some("checklist:checkdis"));
        assert_eq!(item_key("* Ünïcode 1-2").as_deref(), Some("checklist:ncode12"));
        assert_eq!(item_key("- !!"), None);
        assert_eq!(custom_key("Disk: 90%").as_deref(), Some("custom:disk90"));
        assert_eq!(
            scrub_ids("proposal PROP-012 \"x\"  MP-20261129-3 in S-5 and S-5x"),
            "proposal \"x\" in and S-5x"
        );
        assert_eq!(scrub_ids("XPROP-1 keeps"), "XPROP-1 keeps");
    }

    #[test]
    fn payloads_are_rejected_with_upstream_reasons() {
        let check = |text: &str, reason: &str| {
            let got = parse_tick_input(text).unwrap_err();
            assert_eq!(got.reason, reason, "{text}");
            assert_eq!(got.unparseable, reason == "invalid-json", "{text}");
        };
        check("", "invalid-json");
        check("{\"firing\":", "invalid-json");
        check("null", "missing-or-malformed-firing");
        check("{}", "missing-or-malformed-firing");
        check("{\"firing\":{}}", "missing-or-malformed-firing");
        check("{\"firing\":[{\"key\":\"a\",\"text\":1}]}", "missing-or-malformed-firing");
        check("{\"firing\":[{\"text\":\"t\"}]}", "missing-or-malformed-firing");
        check("{\"firing\":[{\"item\":\"x\",\"text\":\"t\"}]}", "unresolvable-firing");
        check("{\"firing\":[],\"unreadable\":[\"x\"]}", "malformed-unreadable");
        check(
            "{\"firing\":[],\"micro\":[{\"key\":\"proposal-pending:1\",\"text\":\"t\"}]}",
            "malformed-micro",
        );
        assert!(parse_tick_input(
            "{\"firing\":[{\"item\":\"x\",\"text\":\"t\"}],\"checklist\":[]}"
        )
        .is_ok());
    }

    proptest::proptest! {
        #[test]
        fn hostile_payloads_never_panic(text in "\\PC{0,64}") {
            let _ = parse_tick_input(&text);
            let _ = scrub_ids(&text);
            let _ = item_key(&text);
        }
    }
}
