//! Pure rules of the heartbeat half of the `alerts` domain (claude-code-hermit): budget alerts
//! (create-only, reaped by period, marked notified only by an explicit call), the heartbeat
//! monitor's runtime record (start-check, start-commit, stop), liveness peeks, the injection
//! alert, runtime fields, and the next-task ack as a compare-and-swap over `runtime.json` and
//! `sessions/NEXT-TASK.md`.
//!
//! Every legacy file is one document holding its exact text (`heartbeat.file`, id = file name);
//! decisions parse it, and writes render it back in the file's own layout. No IO, no clock, no
//! store: `api.rs` reads the documents and calls these.

use hookstate_schema::heartbeat::HeartbeatEvent;
use hookstate_schema::Body;
use serde::Serialize;
use serde_json::{Map, Value};

use super::heartbeat_rules as rules;
use crate::kernel::call::{fields, Plan, Refusal};
use crate::kernel::compat::stamp::stamp_ms;
use crate::kernel::error::{Error, Result};
use rules::{BudgetInput, Layout, MonitorSetup, INTERVAL_S_MAX};

/// Document kind of one legacy file (id: the file name).
pub(crate) const FILE_KIND: &str = "heartbeat.file";
/// Document kind of the next-task revision (id [`REV_ID`]).
pub(crate) const REV_KIND: &str = "heartbeat.nextrev";
/// The one id of the next-task revision document.
pub(crate) const REV_ID: &str = "rev";
/// `state/budget-alerts.json`: cost-tracker's budget alerts.
pub(crate) const BUDGET_FILE: &str = "budget-alerts.json";
/// `state/telemetry-alert.json`: report-export's and the watchdog's alerts.
pub(crate) const TELEMETRY_FILE: &str = "telemetry-alert.json";
/// `state/doctor-alerts.json`: doctor-check's alerts.
pub(crate) const DOCTOR_FILE: &str = "doctor-alerts.json";
/// `state/heartbeat-monitor.runtime.json`: the monitor registration.
pub(crate) const MONITOR_FILE: &str = "heartbeat-monitor.runtime.json";
/// `state/heartbeat-liveness.json`: the monitor's last peek.
pub(crate) const LIVENESS_FILE: &str = "heartbeat-liveness.json";
/// `state/injection-alert.json`: the announced injection hash.
pub(crate) const INJECTION_FILE: &str = "injection-alert.json";
/// `state/runtime.json`: the session lifecycle.
pub(crate) const RUNTIME_FILE: &str = "runtime.json";
/// `sessions/NEXT-TASK.md`: the queued next task.
pub const NEXT_TASK_FILE: &str = "NEXT-TASK.md";
/// The layout's files under `state/`.
pub const STATE_FILES: [&str; 7] = [
    BUDGET_FILE,
    TELEMETRY_FILE,
    DOCTOR_FILE,
    MONITOR_FILE,
    LIVENESS_FILE,
    INJECTION_FILE,
    RUNTIME_FILE,
];
/// The alert files `readMergedAlerts` combines.
pub(crate) const ALERT_FILES: [&str; 3] = [BUDGET_FILE, TELEMETRY_FILE, DOCTOR_FILE];
/// Largest legacy file of this layout: every one is a small object; the bound keeps each event
/// under the event limit.
pub const FILE_BYTES_MAX: usize = crate::kernel::limits::VALUE_BYTES_MAX;
/// Fields `runtime set` changes at once.
pub(crate) const RUNTIME_FIELDS_MAX: usize = 64;
/// The seed of a new alerts file (alert-state's template).
const ALERTS_SEED: &str =
    "{\"alerts\":{},\"last_digest_date\":null,\"self_eval\":{},\"total_ticks\":0}";

#[cfg(test)]
/// Whether `file` is one of this layout's files.
#[must_use]
pub(crate) fn is_layout_file(file: &str) -> bool {
    file == NEXT_TASK_FILE || STATE_FILES.contains(&file)
}

/// Whether a file is one the next-task token covers (its changes bump the revision).
pub(crate) fn tracks_next_task(file: &str) -> bool {
    file == RUNTIME_FILE || file == NEXT_TASK_FILE
}

pub(crate) fn event(body: HeartbeatEvent) -> Body {
    Body::Heartbeat(body)
}

pub(crate) fn written(file: &str, text: String, why: &str) -> Body {
    event(HeartbeatEvent::FileWritten { file: file.into(), text, why: why.into() })
}

pub(crate) fn removed(file: &str, why: &str) -> Body {
    event(HeartbeatEvent::FileRemoved { file: file.into(), why: why.into() })
}

/// A verb's typed result with its upstream verdict line first.
#[derive(Serialize)]
struct Verdict<'a, T: Serialize> {
    verdict: &'a str,
    #[serde(flatten)]
    result: T,
}

/// The result fields of a verb: its verdict line, then the fields of `result`.
pub(crate) fn answer<T: Serialize>(line: &str, result: T) -> Map<String, Value> {
    serde_json::to_value(Verdict { verdict: line, result }).map(fields).unwrap_or_default()
}

/// A result of no fields but its verdict.
#[derive(Serialize)]
pub(crate) struct Nothing {}

/// The fields of a result that names one alert key.
#[derive(Serialize)]
struct Key<'a> {
    key: &'a str,
}

/// A budget record: the key, whether it was created, its `notified`, the keys reaped.
#[derive(Serialize)]
struct Recorded<'a> {
    key: &'a str,
    created: bool,
    notified: Value,
    reaped: &'a [String],
}

/// A mark: the key, marked.
#[derive(Serialize)]
struct Marked<'a> {
    key: &'a str,
    marked: bool,
}

/// A start-check that found the monitor fresh.
#[derive(Serialize)]
struct Fresh<'a> {
    fresh: bool,
    reason: &'a str,
    interval: u64,
}

/// A start-check that re-arms: its lines.
#[derive(Serialize)]
struct Rearm<'a> {
    fresh: bool,
    reason: &'a str,
    interval: u64,
    command: &'a str,
    lines: &'a [String],
}

/// A start-commit.
#[derive(Serialize)]
struct Committed<'a> {
    live: bool,
    started_at: &'a str,
    interval: u64,
}

/// An ack, parked or not (and why not).
#[derive(Serialize)]
struct Parked<'a> {
    parked: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

pub(crate) fn verdict(line: String, extra: Value) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("verdict".into(), Value::String(line));
    out.extend(fields(extra));
    out
}

/// A refusal whose verdict line upstream prints with exit 0.
pub(crate) fn refusal<T: Serialize>(
    reason: &'static str,
    message: String,
    line: &str,
    extra: T,
) -> Plan {
    let details = Value::Object(answer(line, extra));
    Plan { refusal: Some(Refusal::new(reason, message, details).verdict_ok()), ..Plan::default() }
}

pub(crate) fn done(events: Vec<Body>, result: Map<String, Value>) -> Plan {
    Plan { events, result, ..Plan::default() }
}

pub(crate) fn alerts_of(map: &Map<String, Value>) -> Map<String, Value> {
    match map.get("alerts") {
        Some(Value::Object(alerts)) => alerts.clone(),
        _ => Map::new(),
    }
}

pub(crate) fn seed_object() -> Map<String, Value> {
    serde_json::from_str(ALERTS_SEED).unwrap_or_default()
}

/// Decides a budget record: create the key when absent (never reset it), and reap past periods.
pub(crate) fn decide_record(
    budget: Option<(&Map<String, Value>, Layout)>,
    input: &BudgetInput,
    now_ms: u64,
    timezone: &str,
) -> Result<Plan> {
    let layout = budget.map_or(Layout::Pretty, |(_, layout)| layout);
    let budget = budget.map(|(map, _)| map);
    let alerts = budget.map(alerts_of).unwrap_or_default();
    let period_key = rules::period_key(&input.period, now_ms, timezone)?.unwrap_or_default();
    let key = rules::budget_key(&input.level, &input.period, &period_key);
    let mut events = Vec::new();
    // cost-tracker's `if (alerts[key]) continue`: a falsy entry (a hand-edited `null`) is no
    // alert, and is created over.
    let created = !alerts.get(&key).is_some_and(rules::truthy);
    let reaped = rules::stale_budget_keys(&alerts, now_ms, timezone)?;
    if created {
        if alerts.len() >= rules::ALERT_ENTRIES_MAX {
            let (count, max) = (alerts.len() + 1, rules::ALERT_ENTRIES_MAX);
            return Err(Error::TooMany { what: "budget alerts", count, max });
        }
        let entry = Value::Object(rules::budget_entry(input, stamp_ms(now_ms)));
        // The file as the events leave it must stay one that import and the mirror can read.
        let mut next = alerts.clone();
        next.insert(key.clone(), entry.clone());
        for stale in &reaped {
            next.shift_remove(stale);
        }
        let mut top = budget.cloned().unwrap_or_else(seed_object);
        top.insert("alerts".into(), Value::Object(next));
        check_size(BUDGET_FILE, &rules::render_object(&top, layout))?;
        events.push(event(HeartbeatEvent::BudgetCreated {
            key: key.clone(),
            entry: entry.to_string(),
        }));
    }
    events.extend(reaped.iter().map(|k| event(HeartbeatEvent::BudgetReaped { key: k.clone() })));
    let notified =
        alerts.get(&key).and_then(|e| e.get("notified")).cloned().unwrap_or(false.into());
    let line = format!("OK|{}|{key}", if created { "created" } else { "exists" });
    let result = Recorded { key: &key, created, notified, reaped: &reaped };
    Ok(done(events, answer(&line, result)))
}

/// Decides a mark-notified: only an existing, not yet notified key is marked; the first mark
/// wins and every later one is refused, so a key is announced at most once.
pub(crate) fn decide_mark(budget: Option<&Map<String, Value>>, key: &str) -> Plan {
    let alerts = budget.map(alerts_of).unwrap_or_default();
    // markAlertNotified's `entry && !entry.notified`: only an alert object can be marked, and a
    // truthy `notified` of any type is marked already.
    let Some(entry) = alerts.get(key).filter(|e| e.is_object()) else {
        let message = format!("no budget alert {key}");
        return refusal("not_found", message, "NONE|no-match", Key { key });
    };
    if entry.get("notified").is_some_and(rules::truthy) {
        let message = format!("budget alert {key} was already marked notified");
        let line = format!("NOOP|already-notified|{key}");
        return refusal("already_notified", message, &line, Key { key });
    }
    let events = vec![event(HeartbeatEvent::BudgetNotified { key: key.into() })];
    done(events, answer(&format!("OK|notified|{key}"), Marked { key, marked: true }))
}

fn monitor_lines(
    runtime: Option<&Map<String, Value>>,
    reason: &str,
    setup: &MonitorSetup,
) -> Vec<String> {
    let mut lines = vec![format!("REARM|{reason}")];
    if let Some(task) = runtime.and_then(|r| r.get("task_id")).and_then(Value::as_str) {
        if !task.is_empty() {
            lines.push(format!("OLD_TASK:{task}"));
        }
    }
    let started = runtime.and_then(|r| r.get("started_at")).is_some_and(Value::is_string);
    if !started {
        lines.push("FIRST_START:1".into());
    }
    lines.push(format!("INTERVAL:{}", setup.interval_s));
    lines.push(format!("CMD:{}", setup.command));
    lines
}

/// Decides a start-check: FRESH when the registered monitor is healthy (and not disabled);
/// otherwise REARM: delete the liveness record and stamp `armed_at` into the runtime record.
pub(crate) fn decide_check(
    runtime: Option<&Map<String, Value>>,
    liveness: Option<&Map<String, Value>>,
    setup: &MonitorSetup,
    now_ms: u64,
) -> Plan {
    let (healthy, reason) = rules::monitor_health(runtime, liveness, setup, now_ms);
    let interval = setup.interval_s;
    if healthy && reason != "disabled" {
        let result = Fresh { fresh: true, reason: &reason, interval };
        return done(Vec::new(), answer(&format!("FRESH|interval={interval}"), result));
    }
    let lines = monitor_lines(runtime, &reason, setup);
    let mut next = runtime.cloned().unwrap_or_default();
    next.insert("armed_at".into(), Value::String(stamp_ms(now_ms)));
    let mut events = Vec::new();
    if liveness.is_some() {
        events.push(removed(LIVENESS_FILE, "monitor start-check"));
    }
    let text = rules::render_object(&next, Layout::Pretty);
    events.push(written(MONITOR_FILE, text, "monitor start-check"));
    let command = setup.command.as_str();
    let result = Rearm { fresh: false, reason: &reason, interval, command, lines: &lines };
    done(events, answer(&lines.join("\n"), result))
}

/// Decides a start-commit: overwrite the runtime record with the registration; `started_at` is
/// the liveness peek when it is no earlier than `armed_at` floored to the second, else now.
pub(crate) fn decide_commit(
    runtime: Option<&Map<String, Value>>,
    liveness: Option<&Map<String, Value>>,
    setup: &MonitorSetup,
    task_id: &str,
    now_ms: u64,
) -> Plan {
    let armed = runtime.and_then(|r| r.get("armed_at")).and_then(Value::as_str);
    let peek = liveness.and_then(|l| l.get("last_peek_at")).and_then(Value::as_str);
    let live = liveness.is_some();
    let started = match peek {
        Some(peek) if live && rules::adopt_peek(Some(peek), armed) => peek.to_owned(),
        _ => stamp_ms(now_ms),
    };
    let mut next = Map::new();
    next.insert("description".into(), "heartbeat-monitor".into());
    next.insert("task_id".into(), task_id.into());
    next.insert("command".into(), setup.command.clone().into());
    next.insert("interval".into(), setup.interval_s.into());
    next.insert("started_at".into(), started.clone().into());
    next.insert("boot_id".into(), setup.boot_id.clone().map_or(Value::Null, Value::String));
    let text = rules::render_object(&next, Layout::Pretty);
    let events = vec![written(MONITOR_FILE, text, "monitor start-commit")];
    let line = if live {
        format!("OK|registered|interval={}", setup.interval_s)
    } else {
        "DEAD|liveness-absent".to_owned()
    };
    let result = Committed { live, started_at: &started, interval: setup.interval_s };
    done(events, answer(&line, result))
}

/// The document a next-task ack or token reads: runtime, whether the queue exists, its text.
pub(crate) struct NextTaskView {
    pub(crate) runtime: Option<Map<String, Value>>,
    pub(crate) queue: Option<String>,
    pub(crate) rev: u64,
}

pub(crate) fn token_of(
    view: &NextTaskView,
    enabled: bool,
) -> std::result::Result<String, &'static str> {
    let queued = view.queue.as_deref().is_some_and(|q| !q.is_empty());
    if let Some(reason) = rules::next_task_block(enabled, view.runtime.as_ref(), queued) {
        return Err(reason);
    }
    let runtime = view.runtime.clone().unwrap_or_default();
    Ok(rules::next_task_token(view.queue.as_deref().unwrap_or_default(), &runtime, view.rev))
}

fn not_parked(reason: &'static str) -> Plan {
    let parked = Parked { parked: false, reason: Some(reason) };
    let line = serde_json::to_string(&parked).unwrap_or_default();
    let message = format!("not parked: {reason}");
    refusal(reason_code(reason), message, &line, parked)
}

fn reason_code(reason: &str) -> &'static str {
    match reason {
        "disabled" => "disabled",
        "not-idle" => "not_idle",
        "queue-missing" => "queue_missing",
        _ => "changed",
    }
}

/// Decides an ack: park only if the gate still holds and the token matches the current queue,
/// runtime and revision.
pub(crate) fn decide_ack(
    view: &NextTaskView,
    enabled: bool,
    token: &str,
    stamps: (String, String),
) -> Plan {
    match token_of(view, enabled) {
        Err(reason) => not_parked(reason),
        Ok(current) if current != token => not_parked("changed"),
        Ok(_) => {
            let (waiting_since, updated_at) = stamps;
            let body = HeartbeatEvent::NextTaskParked { waiting_since, updated_at };
            let parked = Parked { parked: true, reason: None };
            let line = serde_json::to_string(&parked).unwrap_or_default();
            done(vec![event(body)], answer(&line, parked))
        }
    }
}

pub(crate) fn check_field(name: &str) -> Result<()> {
    rules::check_stamp("runtime field name", name)
}

/// Parses `FIELD=JSON` (a value that is not JSON is taken as a string).
///
/// # Errors
/// [`Error::BadInput`] for a missing `=` or a bad field name.
pub fn parse_runtime_set(arg: &str) -> Result<(String, Value)> {
    let (name, raw) = arg
        .split_once('=')
        .ok_or_else(|| Error::bad(format!("runtime set {arg:?}"), "is not FIELD=VALUE"))?;
    check_field(name)?;
    let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()));
    crate::kernel::value::validate_json("runtime value", &value.to_string())?;
    Ok((name.to_owned(), value))
}

pub(crate) fn check_size(file: &str, text: &str) -> Result<()> {
    if text.len() > FILE_BYTES_MAX {
        return Err(Error::TooLarge {
            what: file.to_owned(),
            len: text.len(),
            max: FILE_BYTES_MAX,
        });
    }
    Ok(())
}

/// Checks what the monitor verbs compare with: an interval of 1 to [`INTERVAL_S_MAX`] seconds,
/// a command without control characters and within the value limit, a short boot id.
///
/// # Errors
/// [`Error::OutOfRange`] for the interval, [`Error::BadInput`] for the command or boot id.
pub(crate) fn check_setup(setup: &MonitorSetup) -> Result<()> {
    if !(1..=INTERVAL_S_MAX).contains(&setup.interval_s) {
        let (what, value, max) = ("interval", setup.interval_s, INTERVAL_S_MAX);
        return Err(Error::OutOfRange { what, value, min: 1, max, unit: " s" });
    }
    let command = &setup.command;
    if command.len() > crate::kernel::limits::VALUE_BYTES_MAX
        || command.chars().any(char::is_control)
    {
        return Err(Error::bad("the monitor command", "is too long or holds control characters"));
    }
    if let Some(boot) = &setup.boot_id {
        rules::check_stamp("boot id", boot)?;
    }
    Ok(())
}
