//! The signals domain's handle, `engine.signals()`: PM registration, turn signals and delivery
//! results, each decided in one write transaction over the bundle's documents; and reads of the
//! PM and the latest records.
//!
//! Does not resolve bundles or touch files; `layout.rs` does.

use hookstate_schema::format;
use hookstate_schema::signals::{PmDoc, SendsDoc, SignalDoc, SignalsEvent};
use hookstate_schema::{validate_id, Body};
use serde_json::{json, Value};

use super::rules::{check_path, may_send, turn_line, TurnInput, PM_ID, PM_KIND, REASON_BYTES_MAX};
use super::rules::{SENDS_KIND, SIGNAL_KIND};
use crate::kernel::call::{fields, Call, Outcome, Plan};
use crate::kernel::compat::stamp::stamp_ms;
use crate::kernel::doc::{read_doc, read_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::write::Kernel;

/// loopd's signals on an open store: `engine.signals()`.
#[derive(Clone, Copy)]
pub struct Signals<'a> {
    pub(super) k: &'a Kernel,
}

impl<'a> Signals<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Signals { k }
    }
}

impl Signals<'_> {
    /// Registers `session` as the PM of `bundle` (newest wins).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad session or path; store errors.
    pub fn register_pm(&self, call: &Call, bundle: &str, session: &str) -> Result<Outcome> {
        validate_id("session", session)?;
        check_path("bundle", bundle)?;
        let event = SignalsEvent::PmRegistered {
            bundle: bundle.into(),
            session: session.into(),
            at: stamp_ms(call.now_ms),
        };
        let result = fields(json!({ "bundle": bundle, "pm": session }));
        self.k.write(call, |_| {
            Ok(Plan {
                events: vec![Body::Signals(event.clone())],
                result: result.clone(),
                ..Plan::default()
            })
        })
    }

    /// Records a finished turn and decides whether to send the PM a line; the result carries
    /// `send: {to, text}` or `send: null`. The turn's seq is the outcome's head seq.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input; store errors.
    pub fn turn(&self, call: &Call, turn: &TurnInput) -> Result<Outcome> {
        validate_id("session", &turn.session)?;
        check_path("bundle", &turn.bundle)?;
        check_path("cwd", &turn.cwd)?;
        if turn.reason.len() > REASON_BYTES_MAX {
            let (len, max) = (turn.reason.len(), REASON_BYTES_MAX);
            return Err(Error::TooLarge { what: "reason".into(), len, max });
        }
        let scope = call.scope.clone();
        self.k.write(call, |txn| {
            let latest: Option<SignalDoc> = read_doc(txn, &scope, SIGNAL_KIND, &turn.session)?;
            let pm: Option<PmDoc> = read_doc(txn, &scope, PM_KIND, PM_ID)?;
            let sends: Option<SendsDoc> = read_doc(txn, &scope, SENDS_KIND, &turn.session)?;
            let turns = latest.map_or(0, |l| l.turns) + 1;
            let send = match pm
                .as_ref()
                .filter(|_| may_send(pm.as_ref(), sends.as_ref(), &turn.session))
            {
                Some(pm) => json!({
                    "to": pm.current.session,
                    "text": turn_line(&turn.session, &turn.cwd, &turn.reason, turn.duration_ms),
                }),
                None => Value::Null,
            };
            let event = SignalsEvent::TurnSignaled {
                session: turn.session.clone(),
                bundle: turn.bundle.clone(),
                cwd: turn.cwd.clone(),
                at: stamp_ms(call.now_ms),
                turns,
                duration_ms: turn.duration_ms,
                reason: turn.reason.clone(),
                aborted: turn.aborted,
                delivered: None,
            };
            let result = fields(json!({ "session": turn.session, "turns": turns, "send": send }));
            Ok(Plan {
                events: vec![Body::Signals(event.clone())],
                result: result.clone(),
                ..Plan::default()
            })
        })
    }

    /// Records whether the line of the turn at `turn_seq` of `session` in `bundle` reached the
    /// PM. The turn must be one `hook turn-complete` recorded for that session in that bundle.
    ///
    /// # Errors
    /// [`Error::BadInput`] for a relative bundle or a seq that is not a turn of the session;
    /// [`Error::NotFound`] for a session that never signalled in the bundle; bad ids; store
    /// errors.
    pub fn delivered(
        &self,
        call: &Call,
        bundle: &str,
        session: &str,
        turn_seq: u64,
        delivered: bool,
    ) -> Result<Outcome> {
        validate_id("session", session)?;
        check_path("bundle", bundle)?;
        let scope = call.scope.clone();
        let event = SignalsEvent::DeliveryRecorded { session: session.into(), turn_seq, delivered };
        let result =
            fields(json!({ "session": session, "turn_seq": turn_seq, "delivered": delivered }));
        self.k.write(call, |txn| {
            check_turn(txn, &scope, session, turn_seq)?;
            Ok(Plan {
                events: vec![Body::Signals(event.clone())],
                result: result.clone(),
                ..Plan::default()
            })
        })
    }
}

/// Checks that `turn_seq` is a turn `session` signalled in `scope` (the seq `hook turn-complete`
/// printed), not any other event.
fn check_turn(txn: &dyn ReadTxn, scope: &str, session: &str, turn_seq: u64) -> Result<()> {
    let latest: Option<SignalDoc> = read_doc(txn, scope, SIGNAL_KIND, session)?;
    if latest.is_none() {
        let id = format!("{session} (it never signalled a turn in this bundle)");
        return Err(Error::NotFound { what: "session", id });
    }
    let bytes = txn.event(turn_seq)?;
    let event = bytes
        .map(|bytes| {
            format::decode_event(&bytes)
                .map_err(|e| Error::ChainBroken { seq: turn_seq, why: e.to_string() })
        })
        .transpose()?;
    let is_turn = event.is_some_and(|event| {
        event.content.scope == scope
            && matches!(&event.content.body,
                Body::Signals(SignalsEvent::TurnSignaled { session: s, .. }) if s == session)
    });
    if !is_turn {
        let what = format!("--turn-seq {turn_seq}");
        return Err(Error::bad(what, format!("is not a turn of session {session} in this bundle")));
    }
    Ok(())
}

impl Signals<'_> {
    /// The bundle's PM document, if a PM ever registered (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn pm(&self, scope: &str) -> Result<Option<PmDoc>> {
        hookstate_schema::validate_scope(scope)?;
        read_doc(&*self.k.begin_read()?, scope, PM_KIND, PM_ID)
    }

    /// The latest signal record of every role session of the bundle, by session id.
    ///
    /// # Errors
    /// Store errors.
    pub fn latest(&self, scope: &str) -> Result<Vec<(String, SignalDoc)>> {
        hookstate_schema::validate_scope(scope)?;
        read_docs(&*self.k.begin_read()?, scope, SIGNAL_KIND)
    }
}
