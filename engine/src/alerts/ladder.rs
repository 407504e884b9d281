//! Pure rules of the alert ladder (claude-code-hermit heartbeat, `heartbeat.ts alert-state`):
//! new keys fire, counts 2–5 repeat, count 6 suppresses with a one-time notice, silence above,
//! two clean ticks resolve, a daily digest of suppressed entries, frozen prefixes when a
//! structured source is unreadable, and the every-20-ticks self-evaluation; and the structured
//! items derived from the proposals queue and PROP documents of the same scope.
//!
//! Decisions are pure functions over JSON maps (key order kept, as JS object spreads keep it).
//! No IO, no clock, no store: `api.rs` runs a tick in one write transaction over the stored
//! document, so overlapping ticks and tick counts are serialised and no field is lost.

use std::collections::HashSet;

use hookstate_schema::proposals::{PropDoc, QueueDoc};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::heartbeat_rules::{check_time, fm_str, js_int, num, truthy};
use super::self_eval::{self_evaluate, PropFacts, SelfEvalInput};
use super::tick_input::{
    canonical_keys, is_reserved, is_structured, resolve_firing, scrub_ids, FiringItem, TickInput,
    DOCTOR_PREFIX, MICRO_PREFIX, PROPOSAL_PREFIX, STALE_KEY,
};
use crate::kernel::call::fields;
use crate::kernel::compat::stamp::{stamp_ms, zoned};
use crate::kernel::error::Result;

/// Document kind of the alert state (id [`STATE_ID`]).
pub(crate) const STATE_KIND: &str = "alerts.state";
/// The one id of the alert-state document in a hermit scope.
pub(crate) const STATE_ID: &str = "state";
/// The alert state after a tick plus the tick's result, as one event carries them (the event
/// limit less room for names): about 250 alerts of a 100-character text.
pub(crate) const TICK_BYTES_MAX: usize = crate::kernel::limits::VALUE_BYTES_MAX;
/// The count whose fire sets `suppressed` and sends the one-time notice (the sixth observation).
pub(crate) const SUPPRESS_AT_COUNT: i64 = 6;
/// Clean ticks after which an entry is dropped.
pub(crate) const RESOLVE_AFTER_CLEAN_TICKS: i64 = 2;
/// Self-evaluation runs when `total_ticks` is a multiple of this.
pub(crate) const SELF_EVAL_EVERY_TICKS: i64 = 20;
/// `Number.MAX_SAFE_INTEGER`: larger integers print as the double JavaScript reads them as.
const JS_SAFE_INTEGER_MAX: u64 = 9_007_199_254_740_991;
const DECISION_READ_FAILURE: &str = "I can't read the record of decisions waiting on you — some \
    may be pending without showing up. It needs a repair before I can see them again.";
const SHELL_READ_FAILURE: &str = "I can't read my own session notes right now, so I can't tell \
    whether the current session has gone quiet. It needs a repair before I can check again.";

/// The clock of one tick, in `config.timezone`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TickClock {
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
    /// [`crate::Error::BadTimeZone`] for an unknown zone, [`crate::Error::TimeOutOfRange`] for a time after
    /// year 9999.
    pub(crate) fn at(now_ms: u64, timezone: &str) -> Result<TickClock> {
        check_time(now_ms)?;
        Ok(TickClock {
            now_iso: stamp_ms(now_ms),
            today: zoned(now_ms, timezone, "%Y-%m-%d")?,
            hhmm: zoned(now_ms, timezone, "%H:%M")?,
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
    /// The stale-session item derived from the stored runtime.json and SHELL.md, when it fires.
    pub(crate) stale: Option<FiringItem>,
}

/// The new alert-state object and the tick's result (upstream `alert-update`).
pub(crate) fn decide_tick(
    sources: TickSources,
    input: &TickInput,
    clock: &TickClock,
) -> (Map<String, Value>, Map<String, Value>) {
    let TickSources { mut state, micro, proposals, props, stale: derived_stale } = sources;
    let model: Vec<FiringItem> = resolve_firing(input)
        .unwrap_or_default()
        .into_iter()
        .filter(|f| !is_reserved(&f.key))
        .collect();
    // The payload's `stale_session` (precheck's text) wins; else the derivation from the store.
    let stale: Derived = (!input.shell_unreadable).then(|| {
        let text = input.stale_session.clone();
        text.map(|text| FiringItem { key: STALE_KEY.into(), text, channel_text: None })
            .or(derived_stale)
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
    let failure_date = read_failure_date(
        &state,
        [&micro, &proposals, &stale],
        input.micro_error.as_deref(),
        clock,
        &mut out,
    );
    let mut self_eval =
        marked_self_eval(&state, &input.self_eval_updates, &model, canonical_keys(input).as_ref());
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
    let result = TickResult {
        appended: 0,
        notifications: &out.notifications,
        self_eval_proposals: &proposals_due,
        heartbeat_result: result_kind,
        monitoring_lines: &out.monitoring_lines,
    };
    (state, serde_json::to_value(result).map(fields).unwrap_or_default())
}

/// A tick's result: what it appended (always 0: the caller appends the monitoring lines),
/// notified, proposed and concluded. `--format verdict` prints the three fields of upstream's
/// `update-alert-state` line (`tick_line`).
#[derive(Serialize)]
struct TickResult<'a> {
    appended: u64,
    notifications: &'a [String],
    self_eval_proposals: &'a [Value],
    heartbeat_result: &'a str,
    monitoring_lines: &'a [String],
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

/// `self_eval` with the payload's `self_eval_updates` laid over it (entry by entry, as
/// upstream's object spread does) and `fired_since_self_eval` set on every checklist key the
/// model fired, so a firing that recovers before the next evaluation still counts.
fn marked_self_eval(
    state: &Map<String, Value>,
    updates: &Map<String, Value>,
    model: &[FiringItem],
    canonical: Option<&HashSet<String>>,
) -> Map<String, Value> {
    let mut self_eval =
        state.get("self_eval").and_then(Value::as_object).cloned().unwrap_or_default();
    self_eval.extend(updates.iter().map(|(k, v)| (k.clone(), v.clone())));
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
    [micro, proposals, stale]: [&Derived; 3],
    micro_error: Option<&str>,
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
    // The parse detail goes to the file only; the operator's notice stays plain.
    let detail = micro_error.filter(|_| micro.is_none()).map(|e| format!(" — {e}"));
    out.monitoring_lines.push(format!(
        "[{}] Heartbeat: structured read failure ({}){}. Pending-decision alerts frozen.",
        clock.hhmm,
        failed.join(", "),
        detail.unwrap_or_default()
    ));
    json!(clock.today)
}

/// Parses `state/alert-state.json` as upstream's reader does: anything but one JSON object is
/// corrupt.
///
/// # Errors
/// Why the bytes are corrupt.
pub(crate) fn parse_alert_state(bytes: &[u8]) -> std::result::Result<Map<String, Value>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The alert-state file's bytes: `JSON.stringify(state, null, 2) + "\n"` (numbers as
/// JavaScript prints them).
///
/// # Errors
/// [`crate::Error::Corrupt`] if the value does not serialise (it always does).
pub(crate) fn render_alert_state(state: &Map<String, Value>) -> Result<String> {
    let text = crate::kernel::compat::js::pretty(&Value::Object(state.clone()));
    if text.is_empty() {
        return Err(crate::kernel::error::Error::Corrupt("alert state does not serialise".into()));
    }
    Ok(text + "\n")
}

/// The seed template of a new alert state.
pub(crate) fn seed() -> Map<String, Value> {
    match serde_json::from_str(&hookstate_schema::alerts::AlertStateDoc::default().state) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::self_eval::WEIGHT_KEY;
    use crate::alerts::tick_input::{custom_key, item_key, parse_tick_input};

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
            stale: None,
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
