//! The `signals` domain (loopd): PM registration (newest wins, with history), per-turn signal
//! records kept as a history with the latest per session as a view, delivery results as their
//! own events, and the two-failed-sends cap counted per PM registration.
//!
//! Decisions are pure functions over documents already read. Does not resolve bundles or touch
//! files; `layout.rs` does.

pub mod layout;
pub mod project;

use hookstate_schema::signals::{PmDoc, SendsDoc, SignalDoc, SignalsEvent};
use hookstate_schema::{validate_id, Body};
use serde_json::{json, Value};

use crate::kernel::call::fields;
use crate::kernel::call::Call;
use crate::kernel::call::Outcome;
use crate::kernel::call::Plan;
use crate::kernel::compat::stamp::stamp_ms;
use crate::kernel::doc::{read_doc, read_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::write::Kernel;

/// loopd's signals on an open store: `engine.signals()`.
#[derive(Clone, Copy)]
pub struct Signals<'a> {
    k: &'a Kernel,
}

impl<'a> Signals<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Signals { k }
    }
}

/// Document kind of a bundle's PM (id [`PM_ID`]).
pub(crate) const PM_KIND: &str = "signals.pm";
/// The one id of the PM document in a bundle scope.
pub(crate) const PM_ID: &str = "pm";
/// Document kind of a session's latest signal record (id: the session).
pub(crate) const SIGNAL_KIND: &str = "signals.latest";
/// Document kind of a session's failed-send count (id: the session).
pub(crate) const SENDS_KIND: &str = "signals.sends";
/// Document kind of a kept plugin-store key (scope [`STORE_SCOPE`], id: the key).
pub(crate) const KEPT_KIND: &str = "signals.kept";
/// Document kind of the plugin-store file's style (scope [`STORE_SCOPE`], id [`STYLE_ID`]).
pub(crate) const STYLE_KIND: &str = "signals.style";
/// The one id of the style document.
pub(crate) const STYLE_ID: &str = "style";
/// The scope of what belongs to the plugin-store file as a whole.
pub const STORE_SCOPE: &str = "loopd";
/// The scope prefix of a bundle: `loopd:<bundle root>`.
pub const BUNDLE_SCOPE_PREFIX: &str = "loopd:";
/// Failed sends after which a session stops sending to the same PM (upstream's cap).
pub const FAILED_SENDS_MAX: u32 = 2;
/// PM registrations kept in the history.
pub const PM_HISTORY_MAX: usize = 32;
/// Longest reason text.
pub const REASON_BYTES_MAX: usize = 256;
/// Longest path (bundle, cwd) accepted from a payload.
pub const PATH_BYTES_MAX: usize = 4096;

/// What a finished turn reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnInput {
    /// The role session.
    pub session: String,
    /// Bundle root.
    pub bundle: String,
    /// Worktree.
    pub cwd: String,
    /// Duration in ms.
    pub duration_ms: u64,
    /// Why the turn ended.
    pub reason: String,
    /// Whether it was aborted.
    pub aborted: bool,
}

/// The scope of a bundle.
#[must_use]
pub fn bundle_scope(bundle: &str) -> String {
    format!("{BUNDLE_SCOPE_PREFIX}{bundle}")
}

fn check_path(what: &str, path: &str) -> Result<()> {
    if !path.starts_with('/') || path.len() > PATH_BYTES_MAX || path.chars().any(char::is_control) {
        let why = format!(
            "must be an absolute path of at most {PATH_BYTES_MAX} bytes without control characters"
        );
        return Err(Error::bad(what, why));
    }
    Ok(())
}

/// The line the PM receives, with control characters turned into spaces (as upstream does).
#[must_use]
pub fn turn_line(session: &str, cwd: &str, reason: &str, duration_ms: u64) -> String {
    let line = format!(
        "loopd-signal: role session {session} finished a turn in {cwd} (reason {reason}, \
         {duration_ms} ms) — settle it first at step 4 of a /loopd:dispatch tick; this line \
         orders the sweep and decides nothing"
    );
    line.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// Whether a session may send to the current PM: a PM is registered, it is another session, and
/// fewer than [`FAILED_SENDS_MAX`] sends to this registration failed.
pub(crate) fn may_send(pm: Option<&PmDoc>, sends: Option<&SendsDoc>, session: &str) -> bool {
    let Some(pm) = pm else {
        return false;
    };
    let failed = sends.filter(|s| s.pm_seq == pm.current.seq).map_or(0, |s| s.failed);
    pm.current.session != session && failed < FAILED_SENDS_MAX
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

    /// Records whether the line of the turn at `turn_seq` reached the PM.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad session; store errors.
    pub fn delivered(
        &self,
        call: &Call,
        session: &str,
        turn_seq: u64,
        delivered: bool,
    ) -> Result<Outcome> {
        validate_id("session", session)?;
        let event = SignalsEvent::DeliveryRecorded { session: session.into(), turn_seq, delivered };
        let result =
            fields(json!({ "session": session, "turn_seq": turn_seq, "delivered": delivered }));
        self.k.write(call, |_| {
            Ok(Plan {
                events: vec![Body::Signals(event.clone())],
                result: result.clone(),
                ..Plan::default()
            })
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use hookstate_schema::signals::PmEntry;

    fn pm(session: &str, seq: u64) -> PmDoc {
        PmDoc {
            bundle: "/b".into(),
            current: PmEntry { session: session.into(), at: String::new(), seq },
            history: Vec::new(),
            first_seq: 1,
        }
    }

    #[test]
    fn send_rules_table() {
        let two_failed = SendsDoc { failed: 2, pm_seq: 5 };
        let one_failed = SendsDoc { failed: 1, pm_seq: 5 };
        assert!(!may_send(None, None, "r"), "no PM: nothing is sent");
        assert!(!may_send(Some(&pm("r", 5)), None, "r"), "the PM itself is not sent to");
        assert!(may_send(Some(&pm("p", 5)), None, "r"));
        assert!(may_send(Some(&pm("p", 5)), Some(&one_failed), "r"));
        assert!(!may_send(Some(&pm("p", 5)), Some(&two_failed), "r"), "capped after 2 failures");
        assert!(may_send(Some(&pm("p2", 9)), Some(&two_failed), "r"), "a newer PM clears the cap");
    }

    #[test]
    fn turn_line_is_upstreams_text_with_controls_as_spaces() {
        assert_eq!(
            turn_line("s1", "/w/a\nb", "answer", 12),
            "loopd-signal: role session s1 finished a turn in /w/a b (reason answer, 12 ms) — \
             settle it first at step 4 of a /loopd:dispatch tick; this line orders the sweep \
             and decides nothing"
        );
    }

    #[test]
    fn iso_ms_matches_to_iso_string() {
        assert_eq!(stamp_ms(1_757_836_502_120), "2025-09-14T07:55:02.120Z");
        assert_eq!(stamp_ms(0), "1970-01-01T00:00:00.000Z");
    }
}
