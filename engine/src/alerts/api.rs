//! The alerts domain's handle, `engine.alerts()`: the ladder's tick and tick count, and the
//! heartbeat verbs (budget alerts, runtime fields, the next-task queue and ack; the monitor,
//! liveness and injection verbs are `monitor.rs`). Each verb validates its input, reads what it needs of the
//! scope's `config.json` (`config.rs`), then decides in one write transaction over the scope's
//! documents (`ladder.rs`, `heartbeat.rs`); and the reads, each with its verdict line.
//!
//! The scope is `hermit:<abs state dir>`. Does not touch legacy files; the layouts do.

use hookstate_schema::alerts::{AlertStateDoc, AlertsEvent};
use hookstate_schema::heartbeat::{FileDoc, HeartbeatEvent, NextTaskRevDoc};
use hookstate_schema::proposals::{PropDoc, QueueDoc, PROP_KIND, QUEUE_ID, QUEUE_KIND};
use hookstate_schema::session::{TextDoc, SHELL_ID, TEXT_KIND};
use hookstate_schema::{validate_scope, Body};
use serde::Serialize;
use serde_json::{Map, Value};

use super::config::scope_config;
use super::heartbeat::{alerts_of, check_field, check_size, decide_ack};
use super::heartbeat::{answer, removed, token_of, written, NextTaskView, Nothing, ALERT_FILES};
use super::heartbeat::{decide_mark, decide_record, done, event};
use super::heartbeat::{refusal, STATE_FILES};
use super::heartbeat::{BUDGET_FILE, FILE_KIND};
use super::heartbeat::{NEXT_TASK_FILE, REV_ID, REV_KIND, RUNTIME_FIELDS_MAX, RUNTIME_FILE};
use super::heartbeat_rules::num;
use super::heartbeat_rules::{self as rules, BudgetInput, Layout};
use super::ladder::{decide_tick, micro_items, proposal_items};
use super::ladder::{render_alert_state, seed, TickClock, TickSources};
use super::ladder::{STATE_ID, STATE_KIND, TICK_BYTES_MAX};
use super::project::render_alerts;
use super::self_eval::prop_facts;
use super::stale::derive_stale;
use super::tick_input::{FiringItem, TickInput};
use crate::kernel::call::{Call, Outcome, Plan};
use crate::kernel::compat::stamp::{local_stamp, stamp_ms, zone};
use crate::kernel::doc::{read_doc, read_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::write::Kernel;

/// The alert-state file is carried whole by one event, so it is bounded like an event's value.
pub(crate) const ALERT_STATE_FILE_BYTES_MAX: usize = crate::kernel::limits::VALUE_BYTES_MAX;
/// The fields of upstream's tick line, in its order (the rest of the result is hookstate's).
const TICK_LINE_FIELDS: [&str; 3] = ["monitoring_lines", "notifications", "heartbeat_result"];

/// claude-code-hermit's heartbeat state on an open store: `engine.alerts()`.
#[derive(Clone, Copy)]
pub struct Alerts<'a> {
    pub(super) k: &'a Kernel,
}

impl<'a> Alerts<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Alerts { k }
    }
}

/// The stored alert-state object of a scope, `None` when it holds none.
pub(crate) fn read_state(txn: &dyn ReadTxn, scope: &str) -> Result<Option<Map<String, Value>>> {
    let Some(doc) = read_doc::<AlertStateDoc>(txn, scope, STATE_KIND, STATE_ID)? else {
        return Ok(None);
    };
    match serde_json::from_str(&doc.state) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        _ => Err(Error::Corrupt(format!("alert state of {scope} is not a JSON object"))),
    }
}

/// The stored text of a heartbeat file.
pub(crate) fn read_file(txn: &dyn ReadTxn, scope: &str, file: &str) -> Result<Option<String>> {
    Ok(read_doc::<FileDoc>(txn, scope, FILE_KIND, file)?.map(|d| d.text))
}

/// The stored object of a heartbeat JSON file.
pub(crate) fn read_object(
    txn: &dyn ReadTxn,
    scope: &str,
    file: &str,
) -> Result<Option<Map<String, Value>>> {
    match read_file(txn, scope, file)? {
        Some(text) => rules::parse_object(file, &text)
            .map(Some)
            .map_err(|e| Error::Corrupt(format!("stored {file}: {e}"))),
        None => Ok(None),
    }
}

fn read_next_task(txn: &dyn ReadTxn, scope: &str) -> Result<NextTaskView> {
    Ok(NextTaskView {
        runtime: read_object(txn, scope, RUNTIME_FILE)?,
        queue: read_file(txn, scope, NEXT_TASK_FILE)?,
        rev: read_doc::<NextTaskRevDoc>(txn, scope, REV_KIND, REV_ID)?.map_or(0, |d| d.rev),
    })
}

/// Checks a next-task text: 1 to [`super::heartbeat::FILE_BYTES_MAX`] bytes.
///
/// # Errors
/// [`Error::Empty`], [`Error::TooLarge`].
pub fn check_next_task(text: &str) -> Result<()> {
    if next_task_refused(text).is_some() {
        return Err(Error::Empty { what: "the next task".into() });
    }
    check_size(NEXT_TASK_FILE, text)
}

/// Upstream's verdict for a next task it refuses before writing anything: content that is
/// empty or only whitespace is `ERROR|empty-content`, printed with exit 0.
#[must_use]
pub fn next_task_refused(text: &str) -> Option<&'static str> {
    text.trim().is_empty().then_some("ERROR|empty-content")
}

/// Upstream's tick line: the result's fields upstream prints, in its order.
#[must_use]
pub fn tick_line(outcome: &Outcome) -> String {
    let mut line = Map::new();
    for field in TICK_LINE_FIELDS {
        if let Some(value) = outcome.result.get(field) {
            line.insert(field.into(), value.clone());
        }
    }
    Value::Object(line).to_string()
}

/// A reap's result: the keys it removed.
#[derive(Serialize)]
struct Reaped<'a> {
    reaped: &'a [String],
}

/// A runtime set's result: the whole runtime record after it.
#[derive(Serialize)]
struct RuntimeSet<'a> {
    runtime: &'a Map<String, Value>,
}

/// A queued next task's result: its size.
#[derive(Serialize)]
struct Queued {
    bytes: usize,
}

/// A consumed next task's result: its text.
#[derive(Serialize)]
struct Consumed<'a> {
    text: &'a str,
}

/// `next-task token`: the token of the current queue and runtime, or why none is issued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenRead {
    /// The token, when one is issued.
    pub token: Option<String>,
    /// Why none is issued (`disabled`, `not-idle`, `queue-missing`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// The token, or `NONE|<reason>`.
    pub verdict: String,
}

impl Alerts<'_> {
    /// A heartbeat verb's write: the scope and the time checked, then one transaction.
    pub(super) fn heartbeat_write(
        &self,
        call: &Call,
        decide: impl Fn(&dyn ReadTxn) -> Result<Plan>,
    ) -> Result<Outcome> {
        validate_scope(&call.scope)?;
        rules::check_time(call.now_ms)?;
        self.k.write(call, decide)
    }

    /// One evaluation tick (`heartbeat.ts alert-state`) in the scope's `config.timezone`: reads
    /// the alert state, derives the structured keys from the scope's micro-proposal queue and
    /// PROP files (unless the payload gives or disowns them) and the stale-session alert from
    /// the stored `runtime.json` and SHELL.md (unless the payload's `stale_session` gives it),
    /// runs the ladder and self-evaluation, and appends the new state, all in one write
    /// transaction.
    ///
    /// # Errors
    /// [`Error::BadTimeZone`], [`Error::TimeOutOfRange`], [`Error::BadInput`] for a state over
    /// the limits; store errors.
    pub fn tick(&self, call: &Call, input: &TickInput) -> Result<Outcome> {
        validate_scope(&call.scope)?;
        let config = scope_config(&call.scope)?;
        let clock = TickClock::at(call.now_ms, &config.timezone)?;
        let stale = |txn: &dyn ReadTxn| -> Result<Option<FiringItem>> {
            let runtime = read_file(txn, &call.scope, RUNTIME_FILE)?;
            let shell = read_doc::<TextDoc>(txn, &call.scope, TEXT_KIND, SHELL_ID)?;
            let shell = shell.map(|d| d.text);
            Ok(derive_stale(
                runtime.as_deref(),
                shell.as_deref(),
                &clock.hhmm,
                config.stale_threshold_s,
            ))
        };
        self.k.write(call, |txn| {
            let mut sources = tick_sources(txn, &call.scope, input)?;
            sources.stale = stale(txn)?;
            let (state, result) = decide_tick(sources, input, &clock);
            check_tick_size(&state, &result)?;
            let (state, result) =
                (Value::Object(state).to_string(), Value::Object(result).to_string());
            let event = AlertsEvent::Ticked { state, result };
            Ok(Plan {
                result: render_alerts(&event),
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
        validate_scope(&call.scope)?;
        self.k.write(call, |txn| {
            let state = read_state(txn, &call.scope)?.unwrap_or_else(seed);
            let total_ticks = num(state.get("total_ticks")).saturating_add(1);
            let event = AlertsEvent::TickCounted { total_ticks };
            Ok(Plan {
                result: render_alerts(&event),
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
        validate_scope(scope)?;
        Ok(read_state(&*self.k.begin_read()?, scope)?.unwrap_or_else(seed))
    }

    /// `cost-tracker` budget check for one threshold crossing: creates the alert key of the
    /// current period (in the scope's `config.timezone`) unless it exists (an existing key is
    /// never reset), and reaps the keys of past periods, in one transaction.
    ///
    /// # Errors
    /// [`Error::NotOneOf`], [`Error::BadInput`] for bad input, [`Error::BadTimeZone`],
    /// [`Error::TooMany`] for a full file; store errors.
    pub fn budget_record(&self, call: &Call, input: &BudgetInput) -> Result<Outcome> {
        rules::check_budget(input)?;
        validate_scope(&call.scope)?;
        let timezone = scope_config(&call.scope)?.timezone;
        zone(&timezone)?;
        self.heartbeat_write(call, |txn| {
            let layout = read_file(txn, &call.scope, BUDGET_FILE)?.map(|t| rules::layout_of(&t));
            let budget = read_object(txn, &call.scope, BUDGET_FILE)?;
            let stored = budget.as_ref().zip(layout);
            decide_record(stored, input, call.now_ms, &timezone)
        })
    }

    /// `cost-tracker --mark-budget-notified KEY`, after a confirmed send: sets `notified` in the
    /// same transaction that checks it, so a concurrent record or reap can neither lose the mark
    /// nor let a second marker win. Refused (`not_found`, `already_notified`) otherwise.
    ///
    /// # Errors
    /// [`Error::BadInput`] for a bad key; store errors.
    pub fn budget_mark(&self, call: &Call, key: &str) -> Result<Outcome> {
        rules::check_stamp("alert key", key)?;
        self.heartbeat_write(call, |txn| {
            Ok(decide_mark(read_object(txn, &call.scope, BUDGET_FILE)?.as_ref(), key))
        })
    }

    /// Removes the budget alerts of past periods (in the scope's `config.timezone`).
    ///
    /// # Errors
    /// [`Error::BadTimeZone`]; store errors.
    pub fn budget_reap(&self, call: &Call) -> Result<Outcome> {
        validate_scope(&call.scope)?;
        let timezone = scope_config(&call.scope)?.timezone;
        zone(&timezone)?;
        self.heartbeat_write(call, |txn| {
            let alerts = read_object(txn, &call.scope, BUDGET_FILE)?.map(|b| alerts_of(&b));
            let stale =
                rules::stale_budget_keys(&alerts.unwrap_or_default(), call.now_ms, &timezone)?;
            let events = stale
                .iter()
                .map(|k| event(HeartbeatEvent::BudgetReaped { key: k.clone() }))
                .collect();
            let line = format!("OK|reaped={}", stale.len());
            Ok(done(events, answer(&line, Reaped { reaped: &stale })))
        })
    }

    /// `readMergedAlerts`: the `alerts` of the budget, telemetry and doctor files in one map.
    ///
    /// # Errors
    /// Store errors.
    pub fn budget_alerts(&self, scope: &str) -> Result<Map<String, Value>> {
        validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let mut merged = Map::new();
        for file in ALERT_FILES {
            if let Some(map) = read_object(&*txn, scope, file)? {
                merged.extend(alerts_of(&map));
            }
        }
        Ok(merged)
    }

    /// Per-field merge into `runtime.json` (pretty, `updated_at` re-stamped with localISOStamp in
    /// the scope's `config.timezone`), as `writeRuntimeJson` does; `unset` fields are deleted.
    ///
    /// # Errors
    /// [`Error::BadInput`] for bad fields, [`Error::TooMany`], [`Error::BadTimeZone`]; store
    /// errors.
    pub fn runtime_set(
        &self,
        call: &Call,
        sets: &[(String, Value)],
        unset: &[String],
    ) -> Result<Outcome> {
        let count = sets.len() + unset.len();
        if count > RUNTIME_FIELDS_MAX {
            return Err(Error::TooMany { what: "runtime fields", count, max: RUNTIME_FIELDS_MAX });
        }
        for name in unset {
            check_field(name)?;
        }
        validate_scope(&call.scope)?;
        rules::check_time(call.now_ms)?;
        let updated_at = local_stamp(call.now_ms, &scope_config(&call.scope)?.timezone)?;
        self.heartbeat_write(call, |txn| {
            let mut runtime = read_object(txn, &call.scope, RUNTIME_FILE)?.unwrap_or_default();
            for (name, value) in sets {
                runtime.insert(name.clone(), value.clone());
            }
            for name in unset {
                runtime.shift_remove(name);
            }
            runtime.insert("updated_at".into(), updated_at.clone().into());
            // The session layout reads the file back with the legacy codec's bound.
            let (count, max) = (runtime.len(), crate::legacy::json::OBJECT_KEYS_MAX);
            if count > max {
                return Err(Error::TooMany { what: "runtime.json keys", count, max });
            }
            let text = rules::render_object(&runtime, Layout::Pretty);
            check_size(RUNTIME_FILE, &text)?;
            let result = RuntimeSet { runtime: &runtime };
            let events = vec![written(RUNTIME_FILE, text, "runtime set")];
            Ok(done(events, answer("OK|runtime", result)))
        })
    }

    /// The stored `runtime.json` object (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn runtime(&self, scope: &str) -> Result<Option<Map<String, Value>>> {
        validate_scope(scope)?;
        read_object(&*self.k.begin_read()?, scope, RUNTIME_FILE)
    }

    /// `proposal.ts next-task`: queues `sessions/NEXT-TASK.md`, exclusively unless `replace`.
    ///
    /// # Errors
    /// [`Error::Empty`], [`Error::TooLarge`]; store errors.
    pub fn next_task_queue(&self, call: &Call, text: &str, replace: bool) -> Result<Outcome> {
        check_next_task(text)?;
        self.heartbeat_write(call, |txn| {
            if !replace && read_file(txn, &call.scope, NEXT_TASK_FILE)?.is_some() {
                let message = "sessions/NEXT-TASK.md is already queued".to_owned();
                let line = "ERROR|next-task-exists";
                return Ok(refusal("next_task_exists", message, line, Nothing {}));
            }
            let events = vec![written(NEXT_TASK_FILE, text.to_owned(), "next-task queue")];
            Ok(done(events, answer("OK", Queued { bytes: text.len() })))
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
                return Ok(refusal("queue_missing", message, "NONE|no-queue", Nothing {}));
            };
            let events = vec![removed(NEXT_TASK_FILE, "next-task consume")];
            Ok(done(events, answer("OK|consumed", Consumed { text: &text })))
        })
    }

    /// The tick's `ack_next_task` token for the current queue and runtime (read-only), or why
    /// none is issued (`disabled`, `not-idle`, `queue-missing`). The ack is enabled by the
    /// scope's `config.always_on && config.escalation == "conservative"`.
    ///
    /// # Errors
    /// [`Error::LegacyFile`] for a bad config; store errors.
    pub fn next_task_token(&self, scope: &str) -> Result<TokenRead> {
        validate_scope(scope)?;
        let enabled = scope_config(scope)?.next_task_ack;
        Ok(match token_of(&read_next_task(&*self.k.begin_read()?, scope)?, enabled) {
            Ok(token) => TokenRead { verdict: token.clone(), token: Some(token), reason: None },
            Err(reason) => {
                TokenRead { token: None, reason: Some(reason), verdict: format!("NONE|{reason}") }
            }
        })
    }

    /// `heartbeat.ts ack-next-task`: parks the idle session (`waiting`, `conservative_pickup`,
    /// `waiting_since`, `updated_at` re-stamped) only if the queue, the runtime and their revision
    /// are what the token was issued for; checked and applied in one write transaction.
    ///
    /// # Errors
    /// [`Error::BadInput`] for a bad token, [`Error::BadTimeZone`]; store errors.
    pub fn next_task_ack(&self, call: &Call, token: &str) -> Result<Outcome> {
        rules::check_stamp("token", token)?;
        validate_scope(&call.scope)?;
        rules::check_time(call.now_ms)?;
        let config = scope_config(&call.scope)?;
        let stamps = (stamp_ms(call.now_ms), local_stamp(call.now_ms, &config.timezone)?);
        self.heartbeat_write(call, |txn| {
            let view = read_next_task(txn, &call.scope)?;
            Ok(decide_ack(&view, config.next_task_ack, token, stamps.clone()))
        })
    }

    /// Every stored file of the layout in a scope, `(name, text)`, in layout order (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn heartbeat_files(&self, scope: &str) -> Result<Vec<(String, Option<String>)>> {
        validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let mut out = Vec::new();
        for file in STATE_FILES.iter().chain(std::iter::once(&NEXT_TASK_FILE)) {
            out.push(((*file).to_owned(), read_file(&*txn, scope, file)?));
        }
        Ok(out)
    }
}

/// What the store holds for one tick: the alert state and the structured sources.
fn tick_sources(txn: &dyn ReadTxn, scope: &str, input: &TickInput) -> Result<TickSources> {
    let state = read_state(txn, scope)?.unwrap_or_else(seed);
    let props = read_docs::<PropDoc>(txn, scope, PROP_KIND)?;
    let micro = match (&input.micro, input.micro_unreadable) {
        (_, true) => None,
        (Some(items), false) => Some(items.clone()),
        (None, false) => Some(
            read_doc::<QueueDoc>(txn, scope, QUEUE_KIND, QUEUE_ID)?
                .map(|q| micro_items(&q))
                .unwrap_or_default(),
        ),
    };
    let proposals = match (&input.proposals, input.proposals_unreadable) {
        (_, true) => None,
        (Some(items), false) => Some(items.clone()),
        (None, false) => Some(proposal_items(&props)),
    };
    Ok(TickSources { state, micro, proposals, props: prop_facts(&props), stale: None })
}

/// Refuses a tick whose state would not fit the file import and the mirror read, or one event.
fn check_tick_size(state: &Map<String, Value>, result: &Map<String, Value>) -> Result<()> {
    let file = render_alert_state(state)?.len();
    let max = ALERT_STATE_FILE_BYTES_MAX;
    if file > max {
        let why = format!(
            "would leave a {file}-byte alert-state.json, more than the {max} bytes import and \
             the mirror read; the tick was not applied"
        );
        return Err(Error::bad("the tick", why));
    }
    let bytes = Value::Object(state.clone()).to_string().len()
        + Value::Object(result.clone()).to_string().len();
    if bytes > TICK_BYTES_MAX {
        let why = format!(
            "would take {bytes} bytes of alert state and result, more than the {TICK_BYTES_MAX} \
             one event holds; the tick was not applied"
        );
        return Err(Error::bad("the tick", why));
    }
    Ok(())
}
