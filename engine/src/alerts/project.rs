//! The alerts projection: the ladder's alert-state document, and the heartbeat files (one
//! document each, holding its exact text) with the next-task revision; and the result each event
//! stands for.
//!
//! Pure: no IO, no clock, no failure.

use hookstate_schema::alerts::{AlertStateDoc, AlertsEvent};
use hookstate_schema::heartbeat::{FileDoc, HeartbeatEvent, NextTaskRevDoc};
use hookstate_schema::{Body, Event, ViewKey};
use serde_json::{json, Map, Value};

use super::heartbeat::{alerts_of, seed_object, tracks_next_task, verdict, BUDGET_FILE};
use super::heartbeat::{FILE_KIND, REV_ID, REV_KIND, RUNTIME_FILE};
use super::heartbeat_rules::{self as rules, Layout};
use super::ladder::{seed, STATE_ID, STATE_KIND};
use crate::kernel::call::fields;
use crate::kernel::doc::{doc_key, get_doc, put_doc};
use crate::kernel::project::Projection;
use crate::kernel::view::ViewAccess;

/// The alerts domain's projection: the ladder's state and the heartbeat files.
pub(crate) struct AlertsProjection;

impl Projection for AlertsProjection {
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey> {
        let scope = &event.content.scope;
        match &event.content.body {
            Body::Alerts(_) => alerts_keys(scope),
            Body::Heartbeat(body) => heartbeat_keys(scope, body),
            _ => Vec::new(),
        }
    }

    fn apply(&self, views: &mut dyn ViewAccess, event: &Event) {
        let scope = &event.content.scope;
        match &event.content.body {
            Body::Alerts(body) => apply_alerts(views, scope, body),
            Body::Heartbeat(body) => apply_heartbeat(views, scope, body),
            _ => {}
        }
    }

    fn render(&self, body: &Body) -> Map<String, Value> {
        match body {
            Body::Alerts(event) => render_alerts(event),
            Body::Heartbeat(event) => render_heartbeat(event),
            _ => Map::new(),
        }
    }

    /// A heartbeat call rebuilds its verdict from all of its events.
    fn render_call(&self, bodies: &[&Body]) -> Map<String, Value> {
        let heartbeat: Vec<_> = bodies
            .iter()
            .filter_map(|b| match b {
                Body::Heartbeat(event) => Some(event),
                _ => None,
            })
            .collect();
        if !heartbeat.is_empty() && heartbeat.len() == bodies.len() {
            return render_heartbeat_call(&heartbeat);
        }
        bodies.last().map(|body| self.render(body)).unwrap_or_default()
    }
}

fn file_key(scope: &str, file: &str) -> ViewKey {
    doc_key(scope, FILE_KIND, file)
}

/// Every row `apply` may touch for an alerts event.
fn alerts_keys(scope: &str) -> Vec<ViewKey> {
    vec![doc_key(scope, STATE_KIND, STATE_ID)]
}

/// Applies an alerts event to the views.
fn apply_alerts(views: &mut dyn ViewAccess, scope: &str, event: &AlertsEvent) {
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
pub(crate) fn render_alerts(event: &AlertsEvent) -> Map<String, Value> {
    match event {
        AlertsEvent::TickCounted { total_ticks } => fields(json!({ "total_ticks": total_ticks })),
        AlertsEvent::Ticked { result, .. } => match serde_json::from_str(result) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        },
        AlertsEvent::StateImported { .. } => fields(json!({ "imported": true })),
    }
}

/// Every row `apply` may touch for a heartbeat event.
fn heartbeat_keys(scope: &str, event: &HeartbeatEvent) -> Vec<ViewKey> {
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
fn apply_heartbeat(views: &mut dyn ViewAccess, scope: &str, event: &HeartbeatEvent) {
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
fn render_heartbeat(event: &HeartbeatEvent) -> Map<String, Value> {
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
            "next-task queue" => ("OK".to_owned(), json!({ "bytes": text.len() })),
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
fn render_heartbeat_call(events: &[&HeartbeatEvent]) -> Map<String, Value> {
    let reaped: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            HeartbeatEvent::BudgetReaped { key } => Some(key),
            _ => None,
        })
        .collect();
    let created = events.iter().find(|e| matches!(e, HeartbeatEvent::BudgetCreated { .. }));
    if let Some(created) = created {
        let mut out = render_heartbeat(created);
        out.insert("reaped".into(), json!(reaped));
        return out;
    }
    if !reaped.is_empty() && reaped.len() == events.len() {
        return verdict(format!("OK|reaped={}", reaped.len()), json!({ "reaped": reaped }));
    }
    events.last().map(|e| render_heartbeat(e)).unwrap_or_default()
}
