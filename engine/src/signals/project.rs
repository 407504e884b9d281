//! The signals projection: the bundle's PM with its history, each role session's latest turn,
//! failed-send counts, kept foreign store keys and the store's style.
//!
//! Pure: no IO, no clock, no failure.

use hookstate_schema::signals::{
    KeptKeyDoc, PmDoc, PmEntry, SendsDoc, SignalDoc, SignalsEvent, StoreStyle,
};
use hookstate_schema::{Body, Event, ViewKey};
use serde_json::{json, Map, Value};

use super::rules::{
    KEPT_KIND, PM_HISTORY_MAX, PM_ID, PM_KIND, SENDS_KIND, SIGNAL_KIND, STYLE_ID, STYLE_KIND,
};
use crate::kernel::call::fields;
use crate::kernel::doc::{doc_key, get_doc, put_doc};
use crate::kernel::project::Projection;
use crate::kernel::view::ViewAccess;

/// The signals domain's projection.
pub(crate) struct SignalsProjection;

impl Projection for SignalsProjection {
    fn touched_keys(&self, event: &Event) -> Vec<ViewKey> {
        match &event.content.body {
            Body::Signals(body) => touched_keys(&event.content.scope, body),
            _ => Vec::new(),
        }
    }

    fn apply(&self, views: &mut dyn ViewAccess, event: &Event) {
        if let Body::Signals(body) = &event.content.body {
            apply(views, &event.content.scope, event.seq, body);
        }
    }

    fn render(&self, body: &Body) -> Map<String, Value> {
        match body {
            Body::Signals(event) => render(event),
            _ => Map::new(),
        }
    }
}

/// Every row `apply` may touch for a signals event.
fn touched_keys(scope: &str, event: &SignalsEvent) -> Vec<ViewKey> {
    match event {
        SignalsEvent::PmRegistered { .. } => vec![doc_key(scope, PM_KIND, PM_ID)],
        SignalsEvent::TurnSignaled { session, .. } => vec![doc_key(scope, SIGNAL_KIND, session)],
        SignalsEvent::DeliveryRecorded { session, .. } => vec![
            doc_key(scope, SIGNAL_KIND, session),
            doc_key(scope, SENDS_KIND, session),
            doc_key(scope, PM_KIND, PM_ID),
        ],
        SignalsEvent::StoreKeyKept { key, .. } => vec![doc_key(scope, KEPT_KIND, key)],
        SignalsEvent::StoreStyleSet { .. } => vec![doc_key(scope, STYLE_KIND, STYLE_ID)],
    }
}

/// Applies a signals event to the views.
fn apply(views: &mut dyn ViewAccess, scope: &str, seq: u64, event: &SignalsEvent) {
    match event {
        SignalsEvent::PmRegistered { bundle, session, at } => {
            let key = doc_key(scope, PM_KIND, PM_ID);
            let entry = PmEntry { session: session.clone(), at: at.clone(), seq };
            let doc = match get_doc::<PmDoc>(views, &key) {
                Some(mut doc) => {
                    let old = std::mem::replace(&mut doc.current, entry);
                    doc.history.push(old);
                    let excess = doc.history.len().saturating_sub(PM_HISTORY_MAX);
                    doc.history.drain(..excess);
                    doc
                }
                None => PmDoc {
                    bundle: bundle.clone(),
                    current: entry,
                    history: Vec::new(),
                    first_seq: seq,
                },
            };
            put_doc(views, key, &doc);
        }
        SignalsEvent::TurnSignaled { session, .. } => apply_turn(views, scope, seq, session, event),
        SignalsEvent::DeliveryRecorded { session, turn_seq, delivered } => {
            apply_delivery(views, scope, seq, (session, *turn_seq, *delivered));
        }
        SignalsEvent::StoreKeyKept { key, json } => {
            let doc_key = doc_key(scope, KEPT_KIND, key);
            let first_seq = get_doc::<KeptKeyDoc>(views, &doc_key).map_or(seq, |d| d.first_seq);
            put_doc(
                views,
                doc_key,
                &KeptKeyDoc { json: json.clone(), first_seq, updated_seq: seq },
            );
        }
        SignalsEvent::StoreStyleSet { pretty, trailing_newline } => {
            let style = StoreStyle { pretty: *pretty, trailing_newline: *trailing_newline };
            put_doc(views, doc_key(scope, STYLE_KIND, STYLE_ID), &style);
        }
    }
}

fn apply_turn(
    views: &mut dyn ViewAccess,
    scope: &str,
    seq: u64,
    session: &str,
    event: &SignalsEvent,
) {
    let SignalsEvent::TurnSignaled {
        bundle,
        cwd,
        at,
        turns,
        duration_ms,
        reason,
        aborted,
        delivered,
        ..
    } = event
    else {
        return;
    };
    let key = doc_key(scope, SIGNAL_KIND, session);
    let first_seq = get_doc::<SignalDoc>(views, &key).map_or(seq, |d| d.first_seq);
    let doc = SignalDoc {
        bundle: bundle.clone(),
        cwd: cwd.clone(),
        at: at.clone(),
        turns: *turns,
        duration_ms: *duration_ms,
        reason: reason.clone(),
        aborted: *aborted,
        delivered: *delivered,
        turn_seq: seq,
        first_seq,
        updated_seq: seq,
    };
    put_doc(views, key, &doc);
}

fn apply_delivery(
    views: &mut dyn ViewAccess,
    scope: &str,
    seq: u64,
    (session, turn_seq, delivered): (&str, u64, bool),
) {
    let signal_key = doc_key(scope, SIGNAL_KIND, session);
    if let Some(mut doc) = get_doc::<SignalDoc>(views, &signal_key) {
        if doc.turn_seq == turn_seq {
            doc.delivered = Some(delivered);
            doc.updated_seq = seq;
            put_doc(views, signal_key, &doc);
        }
    }
    if delivered {
        return;
    }
    let pm_seq =
        get_doc::<PmDoc>(views, &doc_key(scope, PM_KIND, PM_ID)).map_or(0, |pm| pm.current.seq);
    let sends_key = doc_key(scope, SENDS_KIND, session);
    let failed = match get_doc::<SendsDoc>(views, &sends_key) {
        // The same failed turn reported again (a retried report) counts once.
        Some(sends) if sends.pm_seq == pm_seq && sends.last_failed_turn_seq >= turn_seq => return,
        Some(sends) if sends.pm_seq == pm_seq => sends.failed.saturating_add(1),
        _ => 1,
    };
    put_doc(views, sends_key, &SendsDoc { failed, pm_seq, last_failed_turn_seq: turn_seq });
}

/// The result fields a signals event stands for.
pub(crate) fn render(event: &SignalsEvent) -> Map<String, Value> {
    fields(match event {
        SignalsEvent::PmRegistered { bundle, session, at } => {
            json!({ "bundle": bundle, "pm": session, "at": at })
        }
        SignalsEvent::TurnSignaled {
            session, cwd, turns, duration_ms, reason, aborted, ..
        } => {
            json!({
                "session": session, "cwd": cwd, "turns": turns, "duration_ms": duration_ms,
                "reason": reason, "aborted": aborted,
            })
        }
        SignalsEvent::DeliveryRecorded { session, turn_seq, delivered } => {
            json!({ "session": session, "turn_seq": turn_seq, "delivered": delivered })
        }
        SignalsEvent::StoreKeyKept { key, .. } => json!({ "key": key }),
        SignalsEvent::StoreStyleSet { pretty, trailing_newline } => {
            json!({ "pretty": pretty, "trailing_newline": trailing_newline })
        }
    })
}
