//! The observer domain's handle, `engine.observer()`: every verb validates its input, then
//! decides in one write transaction over the scope's document (`rules.rs`).
//!
//! Does not touch legacy files; `layout.rs` does.

use hookstate_schema::observer::{ObserverDoc, ObserverEvent, ObserverState};
use hookstate_schema::Body;
use serde_json::{json, Value};

use super::rules::{decide_append, merge_findings, Finding, RowInput, SweepRead};
use super::rules::{DELIVERED_SHOWN_MAX, STATE_ID, STATE_KIND, SWEEP_TURNS_MIN};
use crate::kernel::call::{fields, Call, Outcome, Plan, Refusal};
use crate::kernel::doc::read_doc;
use crate::kernel::error::{Error, Result};
use crate::kernel::write::Kernel;

/// claude-management's observer state on an open store: `engine.observer()`.
#[derive(Clone, Copy)]
pub struct Observer<'a> {
    pub(super) k: &'a Kernel,
}

impl<'a> Observer<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Observer { k }
    }
}

/// The scope's observer document, if it was ever written.
pub(crate) fn read(
    txn: &dyn crate::kernel::storage::ReadTxn,
    scope: &str,
) -> Result<Option<ObserverDoc>> {
    read_doc(txn, scope, STATE_KIND, STATE_ID)
}

fn load(txn: &dyn crate::kernel::storage::ReadTxn, scope: &str) -> Result<ObserverDoc> {
    Ok(read(txn, scope)?.unwrap_or_default())
}

fn plan(event: ObserverEvent, result: Value) -> Plan {
    Plan::one(Body::Observer(event), result)
}

impl Observer<'_> {
    /// Observes rows into the capped window.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an unknown row kind or too many rows; store errors.
    pub fn append(&self, call: &Call, rows: &[RowInput]) -> Result<Outcome> {
        let scope = call.scope.clone();
        self.k.write(call, |txn| {
            let doc = load(txn, &scope)?;
            let event = decide_append(&doc.state, rows)?;
            let ObserverEvent::RowsAppended { follow_ups, .. } = &event else {
                return Err(Error::Corrupt("an append decided another event".into()));
            };
            let result = json!({ "rows": rows.len(), "follow_ups": follow_ups });
            Ok(plan(event, result))
        })
    }

    /// Counts one completed main-loop turn; a subagent's turn (`agent_id`) counts nothing.
    ///
    /// # Errors
    /// Store errors.
    pub fn turn(&self, call: &Call, agent_id: Option<&str>) -> Result<Outcome> {
        if agent_id.is_some() {
            // A subagent's turn is not a main-loop turn: nothing is counted.
            let plan = Plan::answer(json!({ "skipped": "subagent turn" }));
            return self.k.answer_read(&*self.k.begin_read()?, plan);
        }
        let scope = call.scope.clone();
        self.k.write(call, |txn| {
            let state = load(txn, &scope)?.state;
            let result =
                json!({ "turn": state.turn + 1, "turnsSinceSweep": state.turns_since_sweep + 1 });
            Ok(plan(ObserverEvent::TurnCompleted, result))
        })
    }

    /// Starts a sweep: resets the inbox offset when the inbox shrank below it, and returns what
    /// the sweep reads (counters, offset, the last delivered keys, the window) and whether a
    /// sweep is due.
    ///
    /// # Errors
    /// Store errors.
    pub fn sweep_begin(&self, call: &Call, inbox_len: u64) -> Result<Outcome> {
        let scope = call.scope.clone();
        self.k.write(call, |txn| {
            let state = load(txn, &scope)?.state;
            let reset = inbox_len < state.inbox_offset;
            let offset = if reset { 0 } else { state.inbox_offset };
            let due = inbox_len > offset
                || (state.turns_since_sweep >= SWEEP_TURNS_MIN && state.user_follow_ups > 0);
            let shown = state.delivered.len().saturating_sub(DELIVERED_SHOWN_MAX);
            let result = fields(json!({
                "due": due, "inbox_reset": reset, "turn": state.turn,
                "turnsSinceSweep": state.turns_since_sweep, "userFollowUps": state.user_follow_ups,
                "inboxOffset": offset, "delivered": state.delivered[shown..],
                "buffer": state.buffer,
            }));
            let events =
                if reset { vec![Body::Observer(ObserverEvent::InboxReset)] } else { Vec::new() };
            Ok(Plan { events, result, ..Plan::default() })
        })
    }

    /// Commits a sweep whose model call answered: subtracts the counters it read, moves the
    /// inbox offset, marks the kept findings delivered and merges them into `pending`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a malformed finding; store errors.
    pub fn sweep_commit(
        &self,
        call: &Call,
        read: SweepRead,
        findings: &[Finding],
    ) -> Result<Outcome> {
        let scope = call.scope.clone();
        self.k.write(call, |txn| {
            let doc = load(txn, &scope)?;
            let (kept, pending) = merge_findings(&doc.state, findings)?;
            let result = json!({ "kept": kept, "pending_changed": pending.is_some() });
            let event = ObserverEvent::SweepCommitted {
                read_turns: read.turns,
                read_follow_ups: read.follow_ups,
                inbox_offset: read.inbox_offset,
                delivered: kept,
                pending,
            };
            Ok(plan(event, result))
        })
    }

    /// Clears `pending` only if it is still the version that was injected.
    ///
    /// # Errors
    /// Store errors.
    pub fn pending_clear(&self, call: &Call, version: u64) -> Result<Outcome> {
        let scope = call.scope.clone();
        self.k.write(call, |txn| {
            let doc = load(txn, &scope)?;
            if doc.state.pending.is_none() || doc.pending_version != version {
                let details =
                    fields(json!({ "version": version, "current_version": doc.pending_version }));
                let refusal = Refusal {
                    reason: "pending_changed",
                    message: format!(
                        "pending is at version {}, not {version}: a sweep changed it after the \
                         injection, so it is kept",
                        doc.pending_version
                    ),
                    details,
                    verdict_ok: false,
                };
                return Ok(Plan { refusal: Some(refusal), ..Plan::default() });
            }
            Ok(plan(ObserverEvent::PendingCleared, json!({ "cleared": true, "version": version })))
        })
    }

    /// Imports a whole legacy state.
    ///
    /// # Errors
    /// Store errors.
    pub fn import_state(
        &self,
        call: &Call,
        state: ObserverState,
        style: hookstate_schema::signals::StoreStyle,
    ) -> Result<Outcome> {
        let event = ObserverEvent::StateImported { state, style };
        self.k.write(call, |_| Ok(plan(event.clone(), json!({ "imported": true }))))
    }

    /// The observer document of the call's scope (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn doc(&self, scope: &str) -> Result<ObserverDoc> {
        hookstate_schema::validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        load(&*txn, scope)
    }
}
