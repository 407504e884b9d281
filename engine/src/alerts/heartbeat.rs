//! The heartbeat half of the `alerts` domain (claude-code-hermit): budget alerts (create-only,
//! reaped by period, marked notified only by an explicit call), the heartbeat monitor's runtime
//! record (start-check, start-commit, stop, health), liveness peeks, the injection alert, and
//! the next-task ack as a compare-and-swap over `runtime.json` and `sessions/NEXT-TASK.md`.
//!
//! Every legacy file is one document holding its exact text (`heartbeat.file`, id = file name);
//! decisions parse it, and writes render it back in the file's own layout. Does not read files or
//! config; `legacy::heartbeat` does.

use hookstate_schema::heartbeat::{FileDoc, HeartbeatEvent, NextTaskRevDoc};
use hookstate_schema::{Body, ViewKey};
use serde_json::{json, Map, Value};

use super::Alerts;
use crate::kernel::call::fields;
use crate::kernel::call::Call;
use crate::kernel::call::Outcome;
use crate::kernel::call::Plan;
use crate::kernel::call::Refusal;
use crate::kernel::compat::stamp::{local_stamp, stamp_ms, stamp_s, zone};
use crate::kernel::doc::{doc_key, get_doc, put_doc, read_doc};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::view::ViewAccess;

use super::heartbeat_rules as rules;
use rules::{BudgetInput, Layout, MonitorSetup, INTERVAL_S_MAX};

/// Document kind of one legacy file (id: the file name).
pub(crate) const FILE_KIND: &str = "heartbeat.file";
/// Document kind of the next-task revision (id [`REV_ID`]).
pub(crate) const REV_KIND: &str = "heartbeat.nextrev";
const REV_ID: &str = "rev";
/// `state/budget-alerts.json`: cost-tracker's budget alerts.
pub const BUDGET_FILE: &str = "budget-alerts.json";
/// `state/telemetry-alert.json`: report-export's and the watchdog's alerts.
pub const TELEMETRY_FILE: &str = "telemetry-alert.json";
/// `state/doctor-alerts.json`: doctor-check's alerts.
pub const DOCTOR_FILE: &str = "doctor-alerts.json";
/// `state/heartbeat-monitor.runtime.json`: the monitor registration.
pub const MONITOR_FILE: &str = "heartbeat-monitor.runtime.json";
/// `state/heartbeat-liveness.json`: the monitor's last peek.
pub const LIVENESS_FILE: &str = "heartbeat-liveness.json";
/// `state/injection-alert.json`: the announced injection hash.
pub const INJECTION_FILE: &str = "injection-alert.json";
/// `state/runtime.json`: the session lifecycle.
pub const RUNTIME_FILE: &str = "runtime.json";
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
pub const ALERT_FILES: [&str; 3] = [BUDGET_FILE, TELEMETRY_FILE, DOCTOR_FILE];
/// Largest legacy file of this layout: every one is a small object; the bound keeps each event
/// under the event limit.
pub const FILE_BYTES_MAX: usize = crate::kernel::limits::VALUE_BYTES_MAX;
/// Fields `runtime set` changes at once.
pub const RUNTIME_FIELDS_MAX: usize = 64;
/// The seed of a new alerts file (alert-state's template).
const ALERTS_SEED: &str =
    "{\"alerts\":{},\"last_digest_date\":null,\"self_eval\":{},\"total_ticks\":0}";

/// Whether `file` is one of this layout's files.
#[must_use]
pub fn is_layout_file(file: &str) -> bool {
    file == NEXT_TASK_FILE || STATE_FILES.contains(&file)
}

fn tracks_next_task(file: &str) -> bool {
    file == RUNTIME_FILE || file == NEXT_TASK_FILE
}

fn file_key(scope: &str, file: &str) -> ViewKey {
    doc_key(scope, FILE_KIND, file)
}

/// The stored text of a file in a decision.
pub(crate) fn read_file(txn: &dyn ReadTxn, scope: &str, file: &str) -> Result<Option<String>> {
    Ok(read_doc::<FileDoc>(txn, scope, FILE_KIND, file)?.map(|d| d.text))
}

fn read_object(txn: &dyn ReadTxn, scope: &str, file: &str) -> Result<Option<Map<String, Value>>> {
    match read_file(txn, scope, file)? {
        Some(text) => rules::parse_object(file, &text)
            .map(Some)
            .map_err(|e| Error::Corrupt(format!("stored {file}: {e}"))),
        None => Ok(None),
    }
}

fn read_rev(txn: &dyn ReadTxn, scope: &str) -> Result<u64> {
    Ok(read_doc::<NextTaskRevDoc>(txn, scope, REV_KIND, REV_ID)?.map_or(0, |d| d.rev))
}

fn event(body: HeartbeatEvent) -> Body {
    Body::Heartbeat(body)
}

fn written(file: &str, text: String, why: &str) -> Body {
    event(HeartbeatEvent::FileWritten { file: file.into(), text, why: why.into() })
}

fn removed(file: &str, why: &str) -> Body {
    event(HeartbeatEvent::FileRemoved { file: file.into(), why: why.into() })
}

fn verdict(line: String, extra: Value) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("verdict".into(), Value::String(line));
    out.extend(fields(extra));
    out
}

fn refusal(reason: &'static str, message: String, line: String, extra: Value) -> Plan {
    let details = verdict(line, extra);
    Plan { refusal: Some(Refusal { reason, message, details }), ..Plan::default() }
}

fn done(events: Vec<Body>, result: Map<String, Value>) -> Plan {
    Plan { events, result, ..Plan::default() }
}

fn alerts_of(map: &Map<String, Value>) -> Map<String, Value> {
    match map.get("alerts") {
        Some(Value::Object(alerts)) => alerts.clone(),
        _ => Map::new(),
    }
}

fn seed_object() -> Map<String, Value> {
    serde_json::from_str(ALERTS_SEED).unwrap_or_default()
}

/// Decides a budget record: create the key when absent (never reset it), and reap past periods.
fn decide_record(
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
            let max = rules::ALERT_ENTRIES_MAX;
            return Err(Error::invalid(format!("{BUDGET_FILE} holds {max} alerts already")));
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
    let extra = json!({ "key": key, "created": created, "notified": notified, "reaped": reaped });
    Ok(done(events, verdict(line, extra)))
}

/// Decides a mark-notified: only an existing, not yet notified key is marked; the first mark
/// wins and every later one is refused, so a key is announced at most once.
fn decide_mark(budget: Option<&Map<String, Value>>, key: &str) -> Plan {
    let alerts = budget.map(alerts_of).unwrap_or_default();
    // markAlertNotified's `entry && !entry.notified`: only an alert object can be marked, and a
    // truthy `notified` of any type is marked already.
    let Some(entry) = alerts.get(key).filter(|e| e.is_object()) else {
        let message = format!("no budget alert {key}");
        return refusal("not_found", message, "NONE|no-match".into(), json!({ "key": key }));
    };
    if entry.get("notified").is_some_and(rules::truthy) {
        let message = format!("budget alert {key} was already marked notified");
        let line = format!("NOOP|already-notified|{key}");
        return refusal("already_notified", message, line, json!({ "key": key }));
    }
    let events = vec![event(HeartbeatEvent::BudgetNotified { key: key.into() })];
    done(events, verdict(format!("OK|notified|{key}"), json!({ "key": key, "marked": true })))
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
fn decide_check(
    runtime: Option<&Map<String, Value>>,
    liveness: Option<&Map<String, Value>>,
    setup: &MonitorSetup,
    now_ms: u64,
) -> Plan {
    let (healthy, reason) = rules::monitor_health(runtime, liveness, setup, now_ms);
    let interval = setup.interval_s;
    if healthy && reason != "disabled" {
        let extra = json!({ "fresh": true, "reason": reason, "interval": interval });
        return done(Vec::new(), verdict(format!("FRESH|interval={interval}"), extra));
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
    let extra = json!({
        "fresh": false, "reason": reason, "interval": interval, "command": setup.command,
        "lines": lines,
    });
    done(events, verdict(lines.join("\n"), extra))
}

/// Decides a start-commit: overwrite the runtime record with the registration; `started_at` is
/// the liveness peek when it is no earlier than `armed_at` floored to the second, else now.
fn decide_commit(
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
    let extra = json!({ "live": live, "started_at": started, "interval": setup.interval_s });
    done(events, verdict(line, extra))
}

/// The document a next-task ack or token reads: runtime, whether the queue exists, its text.
struct NextTaskView {
    runtime: Option<Map<String, Value>>,
    queue: Option<String>,
    rev: u64,
}

fn read_next_task(txn: &dyn ReadTxn, scope: &str) -> Result<NextTaskView> {
    Ok(NextTaskView {
        runtime: read_object(txn, scope, RUNTIME_FILE)?,
        queue: read_file(txn, scope, NEXT_TASK_FILE)?,
        rev: read_rev(txn, scope)?,
    })
}

/// The token of a next-task view, or why none is issued.
fn token_of(view: &NextTaskView, enabled: bool) -> std::result::Result<String, &'static str> {
    let queued = view.queue.as_deref().is_some_and(|q| !q.is_empty());
    if let Some(reason) = rules::next_task_block(enabled, view.runtime.as_ref(), queued) {
        return Err(reason);
    }
    let runtime = view.runtime.clone().unwrap_or_default();
    Ok(rules::next_task_token(view.queue.as_deref().unwrap_or_default(), &runtime, view.rev))
}

fn not_parked(reason: &'static str) -> Plan {
    let line = json!({ "parked": false, "reason": reason }).to_string();
    let message = format!("not parked: {reason}");
    refusal(reason_code(reason), message, line, json!({ "parked": false, "reason": reason }))
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
fn decide_ack(view: &NextTaskView, enabled: bool, token: &str, stamps: (String, String)) -> Plan {
    match token_of(view, enabled) {
        Err(reason) => not_parked(reason),
        Ok(current) if current != token => not_parked("changed"),
        Ok(_) => {
            let (waiting_since, updated_at) = stamps;
            let body = HeartbeatEvent::NextTaskParked { waiting_since, updated_at };
            let line = json!({ "parked": true }).to_string();
            done(vec![event(body)], verdict(line, json!({ "parked": true })))
        }
    }
}

fn check_field(name: &str) -> Result<()> {
    rules::check_stamp("runtime field name", name)
}

/// Parses `FIELD=JSON` (a value that is not JSON is taken as a string).
///
/// # Errors
/// [`Error::Invalid`] for a missing `=` or a bad field name.
pub fn parse_runtime_set(arg: &str) -> Result<(String, Value)> {
    let (name, raw) = arg
        .split_once('=')
        .ok_or_else(|| Error::invalid(format!("runtime set {arg:?} is not FIELD=VALUE")))?;
    check_field(name)?;
    let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()));
    crate::kernel::value::validate_json("runtime value", &value.to_string())?;
    Ok((name.to_owned(), value))
}

impl Alerts<'_> {
    fn heartbeat_write(
        &self,
        call: &Call,
        decide: impl Fn(&dyn ReadTxn) -> Result<Plan>,
    ) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        rules::check_time(call.now_ms)?;
        self.k.write(call, decide)
    }

    /// `cost-tracker` budget check for one threshold crossing: creates the alert key of the
    /// current period (in `timezone`) unless it exists (an existing key is never reset), and reaps
    /// the keys of past periods, in one transaction.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input or zone; store errors.
    pub fn budget_record(
        &self,
        call: &Call,
        timezone: &str,
        input: &BudgetInput,
    ) -> Result<Outcome> {
        rules::check_budget(input)?;
        zone(timezone)?;
        self.heartbeat_write(call, |txn| {
            let layout = read_file(txn, &call.scope, BUDGET_FILE)?.map(|t| rules::layout_of(&t));
            let budget = read_object(txn, &call.scope, BUDGET_FILE)?;
            let stored = budget.as_ref().zip(layout);
            decide_record(stored, input, call.now_ms, timezone)
        })
    }

    /// `cost-tracker --mark-budget-notified KEY`, after a confirmed send: sets `notified` in the
    /// same transaction that checks it, so a concurrent record or reap can neither lose the mark
    /// nor let a second marker win. Refused (`not_found`, `already_notified`) otherwise.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad key; store errors.
    pub fn budget_mark(&self, call: &Call, key: &str) -> Result<Outcome> {
        rules::check_stamp("alert key", key)?;
        self.heartbeat_write(call, |txn| {
            Ok(decide_mark(read_object(txn, &call.scope, BUDGET_FILE)?.as_ref(), key))
        })
    }

    /// Removes the budget alerts of past periods.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad zone; store errors.
    pub fn budget_reap(&self, call: &Call, timezone: &str) -> Result<Outcome> {
        zone(timezone)?;
        self.heartbeat_write(call, |txn| {
            let alerts = read_object(txn, &call.scope, BUDGET_FILE)?.map(|b| alerts_of(&b));
            let stale =
                rules::stale_budget_keys(&alerts.unwrap_or_default(), call.now_ms, timezone)?;
            let events = stale
                .iter()
                .map(|k| event(HeartbeatEvent::BudgetReaped { key: k.clone() }))
                .collect();
            let line = format!("OK|reaped={}", stale.len());
            Ok(done(events, verdict(line, json!({ "reaped": stale }))))
        })
    }

    /// `readMergedAlerts`: the `alerts` of the budget, telemetry and doctor files in one map.
    ///
    /// # Errors
    /// Store errors.
    pub fn budget_alerts(&self, scope: &str) -> Result<Map<String, Value>> {
        hookstate_schema::validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let mut merged = Map::new();
        for file in ALERT_FILES {
            if let Some(map) = read_object(&*txn, scope, file)? {
                merged.extend(alerts_of(&map));
            }
        }
        Ok(merged)
    }

    /// `heartbeat.ts start-check`: FRESH, or REARM with its lines (deletes the liveness record and
    /// stamps `armed_at` into `{...previous}`).
    ///
    /// # Errors
    /// Store errors.
    pub fn monitor_check(&self, call: &Call, setup: &MonitorSetup) -> Result<Outcome> {
        check_setup(setup)?;
        self.heartbeat_write(call, |txn| {
            let runtime = read_object(txn, &call.scope, MONITOR_FILE)?;
            let liveness = read_object(txn, &call.scope, LIVENESS_FILE)?;
            Ok(decide_check(runtime.as_ref(), liveness.as_ref(), setup, call.now_ms))
        })
    }

    /// `heartbeat.ts start-commit`: writes the registration; `OK|registered|interval=N` when a
    /// liveness record exists, else `DEAD|liveness-absent` (the registration is written either
    /// way, as upstream does). The caller polls [`Engine::heartbeat_liveness`] first.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad task id; store errors.
    pub fn monitor_commit(
        &self,
        call: &Call,
        setup: &MonitorSetup,
        task_id: &str,
    ) -> Result<Outcome> {
        check_setup(setup)?;
        rules::check_stamp("task id", task_id)?;
        self.heartbeat_write(call, |txn| {
            let runtime = read_object(txn, &call.scope, MONITOR_FILE)?;
            let liveness = read_object(txn, &call.scope, LIVENESS_FILE)?;
            Ok(decide_commit(runtime.as_ref(), liveness.as_ref(), setup, task_id, call.now_ms))
        })
    }

    /// The skill's stop: the runtime record becomes `{}` and the liveness record is deleted.
    ///
    /// # Errors
    /// Store errors.
    pub fn monitor_stop(&self, call: &Call) -> Result<Outcome> {
        self.heartbeat_write(call, |txn| {
            let mut events = vec![written(MONITOR_FILE, "{}\n".into(), "monitor stop")];
            if read_file(txn, &call.scope, LIVENESS_FILE)?.is_some() {
                events.push(removed(LIVENESS_FILE, "monitor stop"));
            }
            Ok(done(events, verdict("OK|stopped".into(), json!({ "stopped": true }))))
        })
    }

    /// `heartbeatHealth` of the registered monitor (read-only): `(healthy, reason)`.
    ///
    /// # Errors
    /// Store errors.
    pub fn monitor_status(
        &self,
        scope: &str,
        setup: &MonitorSetup,
        now_ms: u64,
    ) -> Result<(bool, String)> {
        hookstate_schema::validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let runtime = read_object(&*txn, scope, MONITOR_FILE)?;
        let liveness = read_object(&*txn, scope, LIVENESS_FILE)?;
        Ok(rules::monitor_health(runtime.as_ref(), liveness.as_ref(), setup, now_ms))
    }

    /// The liveness record (read-only), `None` when absent.
    ///
    /// # Errors
    /// Store errors.
    pub fn liveness(&self, scope: &str) -> Result<Option<Map<String, Value>>> {
        hookstate_schema::validate_scope(scope)?;
        read_object(&*self.k.begin_read()?, scope, LIVENESS_FILE)
    }

    /// `lib/liveness.ts` on the liveness record: `(alive, age_s)`; alive when the last peek is
    /// at most [`rules::LIVENESS_FRESH_S`] old. A stale or absent record is unknown, never dead.
    ///
    /// # Errors
    /// Store errors.
    pub fn liveness_read(&self, scope: &str, now_ms: u64) -> Result<(bool, Option<u64>)> {
        let age = rules::peek_age_s(self.liveness(scope)?.as_ref(), now_ms);
        Ok((age.is_some_and(|a| a <= rules::LIVENESS_FRESH_S), age))
    }

    /// One `heartbeat-monitor.sh` poll: writes `{"last_peek_at":"<UTC, whole seconds>"}`.
    ///
    /// # Errors
    /// Store errors.
    pub fn liveness_peek(&self, call: &Call) -> Result<Outcome> {
        let stamp = stamp_s(call.now_ms);
        let mut map = Map::new();
        map.insert("last_peek_at".into(), stamp.clone().into());
        let text = rules::render_object(&map, Layout::Compact);
        self.heartbeat_write(call, |_| {
            let events = vec![written(LIVENESS_FILE, text.clone(), "liveness peek")];
            Ok(done(events, verdict(format!("OK|peek|{stamp}"), json!({ "last_peek_at": stamp }))))
        })
    }

    /// The skill's ALERT branch: overwrites the injection alert with `{hash, announced_at}`
    /// (default: now, toISOString), in the stored file's layout (compact when new).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad hash or stamp; store errors.
    pub fn injection_record(
        &self,
        call: &Call,
        hash: &str,
        announced_at: Option<&str>,
    ) -> Result<Outcome> {
        rules::check_hash(hash)?;
        rules::check_time(call.now_ms)?;
        let stamp = announced_at.map_or_else(|| stamp_ms(call.now_ms), str::to_owned);
        rules::check_stamp("announced_at", &stamp)?;
        let mut map = Map::new();
        map.insert("hash".into(), hash.into());
        map.insert("announced_at".into(), stamp.clone().into());
        self.heartbeat_write(call, |txn| {
            let layout = read_file(txn, &call.scope, INJECTION_FILE)?
                .map_or(Layout::Compact, |t| rules::layout_of(&t));
            let events = vec![written(
                INJECTION_FILE,
                rules::render_object(&map, layout),
                "injection record",
            )];
            let extra = json!({ "hash": hash, "announced_at": stamp });
            Ok(done(events, verdict(format!("OK|recorded|{hash}"), extra)))
        })
    }

    /// The precheck's damping (read-only): whether `hash` is the announced one.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad hash; store errors.
    pub fn injection_check(&self, scope: &str, hash: &str) -> Result<(bool, Option<String>)> {
        rules::check_hash(hash)?;
        hookstate_schema::validate_scope(scope)?;
        let stored = read_object(&*self.k.begin_read()?, scope, INJECTION_FILE)?;
        let stored = stored.and_then(|m| m.get("hash").and_then(Value::as_str).map(str::to_owned));
        Ok((stored.as_deref() == Some(hash), stored))
    }

    /// Per-field merge into `runtime.json` (pretty, `updated_at` re-stamped with localISOStamp in
    /// `timezone`), as `writeRuntimeJson` does; `unset` fields are deleted.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad fields, too many fields or a bad zone; store errors.
    pub fn runtime_set(
        &self,
        call: &Call,
        timezone: &str,
        sets: &[(String, Value)],
        unset: &[String],
    ) -> Result<Outcome> {
        if sets.len() + unset.len() > RUNTIME_FIELDS_MAX {
            return Err(Error::invalid(format!("more than {RUNTIME_FIELDS_MAX} runtime fields")));
        }
        for name in unset {
            check_field(name)?;
        }
        let updated_at = local_stamp(call.now_ms, timezone)?;
        self.heartbeat_write(call, |txn| {
            let mut runtime = read_object(txn, &call.scope, RUNTIME_FILE)?.unwrap_or_default();
            for (name, value) in sets {
                runtime.insert(name.clone(), value.clone());
            }
            for name in unset {
                runtime.shift_remove(name);
            }
            runtime.insert("updated_at".into(), updated_at.clone().into());
            let text = rules::render_object(&runtime, Layout::Pretty);
            check_size(RUNTIME_FILE, &text)?;
            let extra = json!({ "runtime": runtime });
            Ok(done(
                vec![written(RUNTIME_FILE, text, "runtime set")],
                verdict("OK|runtime".into(), extra),
            ))
        })
    }

    /// The stored `runtime.json` object (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn runtime(&self, scope: &str) -> Result<Option<Map<String, Value>>> {
        hookstate_schema::validate_scope(scope)?;
        read_object(&*self.k.begin_read()?, scope, RUNTIME_FILE)
    }

    /// `proposal.ts next-task`: queues `sessions/NEXT-TASK.md`, exclusively unless `replace`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty or oversized text; store errors.
    pub fn next_task_queue(&self, call: &Call, text: &str, replace: bool) -> Result<Outcome> {
        if text.is_empty() {
            return Err(Error::invalid("the next task is empty"));
        }
        check_size(NEXT_TASK_FILE, text)?;
        self.heartbeat_write(call, |txn| {
            if !replace && read_file(txn, &call.scope, NEXT_TASK_FILE)?.is_some() {
                let message = "sessions/NEXT-TASK.md is already queued".to_owned();
                let line = "ERROR|next-task-exists".to_owned();
                return Ok(refusal("next_task_exists", message, line, Value::Null));
            }
            let events = vec![written(NEXT_TASK_FILE, text.to_owned(), "next-task queue")];
            Ok(done(events, verdict("OK|queued".into(), json!({ "bytes": text.len() }))))
        })
    }

    /// session-start's consumption of the queued task: deletes it.
    ///
    /// # Errors
    /// Store errors.
    pub fn next_task_consume(&self, call: &Call) -> Result<Outcome> {
        self.heartbeat_write(call, |txn| {
            let Some(text) = read_file(txn, &call.scope, NEXT_TASK_FILE)? else {
                let message = "no next task is queued".to_owned();
                return Ok(refusal("queue_missing", message, "NONE|no-queue".into(), Value::Null));
            };
            let events = vec![removed(NEXT_TASK_FILE, "next-task consume")];
            Ok(done(events, verdict("OK|consumed".into(), json!({ "text": text }))))
        })
    }

    /// The tick's `ack_next_task` token for the current queue and runtime (read-only), or why
    /// none is issued (`disabled`, `not-idle`, `queue-missing`). `enabled` is `config.always_on
    /// && config.escalation == "conservative"`.
    ///
    /// # Errors
    /// Store errors.
    pub fn next_task_token(
        &self,
        scope: &str,
        enabled: bool,
    ) -> Result<std::result::Result<String, &'static str>> {
        hookstate_schema::validate_scope(scope)?;
        Ok(token_of(&read_next_task(&*self.k.begin_read()?, scope)?, enabled))
    }

    /// `heartbeat.ts ack-next-task`: parks the idle session (`waiting`, `conservative_pickup`,
    /// `waiting_since`, `updated_at` re-stamped) only if the queue, the runtime and their revision
    /// are what the token was issued for; checked and applied in one write transaction.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad token or zone; store errors.
    pub fn next_task_ack(
        &self,
        call: &Call,
        enabled: bool,
        timezone: &str,
        token: &str,
    ) -> Result<Outcome> {
        rules::check_stamp("token", token)?;
        let stamps = (stamp_ms(call.now_ms), local_stamp(call.now_ms, timezone)?);
        self.heartbeat_write(call, |txn| {
            let view = read_next_task(txn, &call.scope)?;
            Ok(decide_ack(&view, enabled, token, stamps.clone()))
        })
    }

    /// Every stored file of the layout in a scope, `(name, text)`, in layout order (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn heartbeat_files(&self, scope: &str) -> Result<Vec<(String, Option<String>)>> {
        hookstate_schema::validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let mut out = Vec::new();
        for file in STATE_FILES.iter().chain(std::iter::once(&NEXT_TASK_FILE)) {
            out.push(((*file).to_owned(), read_file(&*txn, scope, file)?));
        }
        Ok(out)
    }
}

fn check_size(file: &str, text: &str) -> Result<()> {
    if text.len() > FILE_BYTES_MAX {
        return Err(Error::invalid(format!(
            "{file} would be {} bytes, limit is {FILE_BYTES_MAX}",
            text.len()
        )));
    }
    Ok(())
}

/// Checks what the monitor verbs compare with: an interval of 1 to [`INTERVAL_S_MAX`] seconds,
/// a command without control characters and within the value limit, a short boot id.
///
/// # Errors
/// [`Error::Invalid`] naming the broken rule.
pub fn check_setup(setup: &MonitorSetup) -> Result<()> {
    if !(1..=INTERVAL_S_MAX).contains(&setup.interval_s) {
        return Err(Error::invalid(format!("interval must be 1 to {INTERVAL_S_MAX} seconds")));
    }
    let command = &setup.command;
    if command.len() > crate::kernel::limits::VALUE_BYTES_MAX
        || command.chars().any(char::is_control)
    {
        return Err(Error::invalid("the monitor command is too long or holds control characters"));
    }
    if let Some(boot) = &setup.boot_id {
        rules::check_stamp("boot id", boot)?;
    }
    Ok(())
}

/// Every row `apply` may touch for a heartbeat event.
pub(crate) fn touched_keys(scope: &str, event: &HeartbeatEvent) -> Vec<ViewKey> {
    let rev = doc_key(scope, REV_KIND, REV_ID);
    match event {
        HeartbeatEvent::FileAdopted { file, .. }
        | HeartbeatEvent::FileWritten { file, .. }
        | HeartbeatEvent::FileRemoved { file, .. } => {
            let mut keys = vec![file_key(scope, file)];
            if tracks_next_task(file) {
                keys.push(rev);
            }
            keys
        }
        HeartbeatEvent::BudgetCreated { .. }
        | HeartbeatEvent::BudgetNotified { .. }
        | HeartbeatEvent::BudgetReaped { .. } => vec![file_key(scope, BUDGET_FILE)],
        HeartbeatEvent::NextTaskParked { .. } => vec![file_key(scope, RUNTIME_FILE), rev],
    }
}

fn bump_rev(views: &mut dyn ViewAccess, scope: &str) {
    let key = doc_key(scope, REV_KIND, REV_ID);
    let rev = get_doc::<NextTaskRevDoc>(views, &key).unwrap_or_default().rev;
    put_doc(views, key, &NextTaskRevDoc { rev: rev.saturating_add(1) });
}

fn stored_object(views: &dyn ViewAccess, key: &ViewKey) -> Option<(Map<String, Value>, Layout)> {
    let doc = get_doc::<FileDoc>(views, key)?;
    let map = serde_json::from_str::<Map<String, Value>>(&doc.text).ok()?;
    Some((map, rules::layout_of(&doc.text)))
}

/// Changes the `alerts` object of the budget file (a new file is the pretty alert-state seed).
fn edit_alerts(
    views: &mut dyn ViewAccess,
    scope: &str,
    edit: impl FnOnce(&mut Map<String, Value>),
) {
    let key = file_key(scope, BUDGET_FILE);
    let (mut top, layout) =
        stored_object(views, &key).unwrap_or_else(|| (seed_object(), Layout::Pretty));
    let mut alerts = alerts_of(&top);
    edit(&mut alerts);
    top.insert("alerts".into(), Value::Object(alerts));
    put_doc(views, key, &FileDoc { text: rules::render_object(&top, layout) });
}

/// Applies a heartbeat event to the views.
pub(crate) fn apply(views: &mut dyn ViewAccess, scope: &str, event: &HeartbeatEvent) {
    match event {
        HeartbeatEvent::FileAdopted { file, text }
        | HeartbeatEvent::FileWritten { file, text, .. } => {
            put_doc(views, file_key(scope, file), &FileDoc { text: text.clone() });
            if tracks_next_task(file) {
                bump_rev(views, scope);
            }
        }
        HeartbeatEvent::FileRemoved { file, .. } => {
            views.delete(&file_key(scope, file));
            if tracks_next_task(file) {
                bump_rev(views, scope);
            }
        }
        HeartbeatEvent::BudgetCreated { key, entry } => {
            let entry = serde_json::from_str(entry).unwrap_or(Value::Null);
            edit_alerts(views, scope, |alerts| {
                if !alerts.get(key).is_some_and(rules::truthy) {
                    alerts.insert(key.clone(), entry);
                }
            });
        }
        HeartbeatEvent::BudgetNotified { key } => edit_alerts(views, scope, |alerts| {
            if let Some(Value::Object(entry)) = alerts.get_mut(key) {
                entry.insert("notified".into(), Value::Bool(true));
            }
        }),
        HeartbeatEvent::BudgetReaped { key } => edit_alerts(views, scope, |alerts| {
            alerts.shift_remove(key);
        }),
        HeartbeatEvent::NextTaskParked { waiting_since, updated_at } => {
            let key = file_key(scope, RUNTIME_FILE);
            let mut runtime = stored_object(views, &key).map(|(m, _)| m).unwrap_or_default();
            runtime.insert("session_state".into(), "waiting".into());
            runtime.insert("waiting_reason".into(), "conservative_pickup".into());
            runtime.insert("waiting_since".into(), waiting_since.clone().into());
            runtime.insert("updated_at".into(), updated_at.clone().into());
            put_doc(views, key, &FileDoc { text: rules::render_object(&runtime, Layout::Pretty) });
            bump_rev(views, scope);
        }
    }
}

/// The result fields a heartbeat event stands for (`hookstate log`'s body), with the verdict line
/// of the verb whose last event it is, where the event alone carries it.
pub(crate) fn render(event: &HeartbeatEvent) -> Map<String, Value> {
    let (line, extra) = match event {
        HeartbeatEvent::FileAdopted { file, text } => {
            return fields(json!({ "file": file, "bytes": text.len() }));
        }
        HeartbeatEvent::FileWritten { file, why, text } => match why.as_str() {
            "liveness peek" => {
                let stamp = written_field(text, "last_peek_at");
                (format!("OK|peek|{stamp}"), json!({ "last_peek_at": stamp }))
            }
            "injection record" => {
                let (hash, at) = (written_field(text, "hash"), written_field(text, "announced_at"));
                (format!("OK|recorded|{hash}"), json!({ "hash": hash, "announced_at": at }))
            }
            "runtime set" => ("OK|runtime".to_owned(), Value::Null),
            "monitor stop" => ("OK|stopped".to_owned(), json!({ "stopped": true })),
            "next-task queue" => ("OK|queued".to_owned(), json!({ "bytes": text.len() })),
            _ => return fields(json!({ "file": file, "why": why })),
        },
        HeartbeatEvent::FileRemoved { file, why } => match why.as_str() {
            "monitor stop" => ("OK|stopped".to_owned(), json!({ "stopped": true })),
            "next-task consume" => ("OK|consumed".to_owned(), Value::Null),
            _ => return fields(json!({ "file": file, "removed": true, "why": why })),
        },
        HeartbeatEvent::BudgetCreated { key, .. } => {
            (format!("OK|created|{key}"), json!({ "key": key, "created": true, "notified": false }))
        }
        HeartbeatEvent::BudgetNotified { key } => {
            (format!("OK|notified|{key}"), json!({ "key": key, "marked": true, "notified": true }))
        }
        HeartbeatEvent::BudgetReaped { key } => {
            ("OK|reaped=1".to_owned(), json!({ "key": key, "reaped": [key] }))
        }
        HeartbeatEvent::NextTaskParked { waiting_since, .. } => (
            json!({ "parked": true }).to_string(),
            json!({ "parked": true, "waiting_since": waiting_since }),
        ),
    };
    verdict(line, extra)
}

/// A string field of a written file's object, empty when it has none.
fn written_field(text: &str, field: &str) -> String {
    serde_json::from_str::<Map<String, Value>>(text)
        .ok()
        .and_then(|m| m.get(field).and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default()
}

/// The replayed result of a heartbeat call (an idempotent repeat) from all of its events: a
/// budget record is its created key with the keys it reaped, a reap the count of its keys (a
/// record that found its key and only reaped replays as that reap: no event names the key);
/// otherwise the call's last event stands for it (start-check and start-commit, whose lines the
/// events do not carry, replay without a verdict).
pub(crate) fn render_call(events: &[&HeartbeatEvent]) -> Map<String, Value> {
    let reaped: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            HeartbeatEvent::BudgetReaped { key } => Some(key),
            _ => None,
        })
        .collect();
    let created = events.iter().find(|e| matches!(e, HeartbeatEvent::BudgetCreated { .. }));
    if let Some(created) = created {
        let mut out = render(created);
        out.insert("reaped".into(), json!(reaped));
        return out;
    }
    if !reaped.is_empty() && reaped.len() == events.len() {
        return verdict(format!("OK|reaped={}", reaped.len()), json!({ "reaped": reaped }));
    }
    events.last().map(|e| render(e)).unwrap_or_default()
}
