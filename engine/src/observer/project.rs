//! The observer projection: the scope's one state document.
//!
//! Pure: no IO, no clock, no failure.

use hookstate_schema::observer::{ObserverDoc, ObserverEvent};
use hookstate_schema::{Body, Event, ViewKey};
use serde_json::{json, Map, Value};

use super::rules::{push_rows, DELIVERED_KEYS_MAX, STATE_ID, STATE_KIND};
use crate::kernel::call::fields;
use crate::kernel::doc::{doc_key, get_doc, put_doc};
use crate::kernel::project::Projection;
use crate::kernel::view::ViewAccess;

/// The observer domain's projection.
pub(crate) struct ObserverProjection;

impl Projection for ObserverProjection {
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey> {
        match &event.content.body {
            Body::Observer(_) => touched_keys(&event.content.scope),
            _ => Vec::new(),
        }
    }

    fn apply(&self, views: &mut dyn ViewAccess, event: &Event) {
        if let Body::Observer(body) = &event.content.body {
            apply(views, &event.content.scope, event.seq, body);
        }
    }

    fn render(&self, body: &Body) -> Map<String, Value> {
        match body {
            Body::Observer(event) => render(event),
            _ => Map::new(),
        }
    }
}

fn touched_keys(scope: &str) -> Vec<ViewKey> {
    vec![doc_key(scope, STATE_KIND, STATE_ID)]
}

/// Applies an observer event.
fn apply(views: &mut dyn ViewAccess, scope: &str, seq: u64, event: &ObserverEvent) {
    let key = doc_key(scope, STATE_KIND, STATE_ID);
    let mut doc: ObserverDoc = get_doc(views, &key).unwrap_or_default();
    let state = &mut doc.state;
    match event {
        ObserverEvent::RowsAppended { rows, follow_ups } => {
            push_rows(&mut state.buffer, rows, state.turn);
            state.user_follow_ups += follow_ups;
        }
        ObserverEvent::TurnCompleted => {
            state.turn += 1;
            state.turns_since_sweep += 1;
        }
        ObserverEvent::InboxReset => state.inbox_offset = 0,
        ObserverEvent::SweepCommitted {
            read_turns,
            read_follow_ups,
            inbox_offset,
            delivered,
            pending,
        } => {
            state.turns_since_sweep = state.turns_since_sweep.saturating_sub(*read_turns);
            state.user_follow_ups = state.user_follow_ups.saturating_sub(*read_follow_ups);
            state.inbox_offset = *inbox_offset;
            state.delivered.extend(delivered.iter().cloned());
            let excess = state.delivered.len().saturating_sub(DELIVERED_KEYS_MAX);
            state.delivered.drain(..excess);
            if let Some(text) = pending {
                state.pending = Some(text.clone());
                doc.pending_version = seq;
            }
        }
        ObserverEvent::PendingCleared => {
            state.pending = None;
            doc.pending_version = seq;
        }
        ObserverEvent::StateImported { state: imported, style } => {
            *state = imported.clone();
            doc.pending_version = seq;
            doc.style = Some(*style);
        }
    }
    doc.updated_seq = seq;
    put_doc(views, key, &doc);
}

/// The result fields an observer event stands for.
fn render(event: &ObserverEvent) -> Map<String, Value> {
    fields(match event {
        ObserverEvent::RowsAppended { rows, follow_ups } => {
            json!({ "rows": rows.len(), "follow_ups": follow_ups })
        }
        ObserverEvent::TurnCompleted => json!({ "turn_completed": true }),
        ObserverEvent::InboxReset => json!({ "inbox_reset": true }),
        ObserverEvent::SweepCommitted { delivered, pending, inbox_offset, .. } => json!({
            "kept": delivered, "pending_changed": pending.is_some(), "inboxOffset": inbox_offset,
        }),
        ObserverEvent::PendingCleared => json!({ "cleared": true }),
        ObserverEvent::StateImported { .. } => json!({ "imported": true }),
    })
}
