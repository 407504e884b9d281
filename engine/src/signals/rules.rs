//! The signals domain's rules (loopd): bundle scopes, the PM line and who may send to the PM
//! (the two-failed-sends cap per PM registration), path checks, and the domain's bounds and
//! document kinds.
//!
//! Pure functions: no IO, no clock.

use hookstate_schema::signals::{PmDoc, SendsDoc};

use crate::kernel::error::{Error, Result};

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
pub(crate) const STORE_SCOPE: &str = "loopd";
/// The scope prefix of a bundle: `loopd:<bundle root>`.
pub(crate) const BUNDLE_SCOPE_PREFIX: &str = "loopd:";
/// Failed sends after which a session stops sending to the same PM (upstream's cap).
pub(crate) const FAILED_SENDS_MAX: u32 = 2;
/// PM registrations kept in the history.
pub(crate) const PM_HISTORY_MAX: usize = 32;
/// Longest reason text.
pub(crate) const REASON_BYTES_MAX: usize = 256;
/// Longest path (bundle, cwd) accepted from a payload.
pub(crate) const PATH_BYTES_MAX: usize = 4096;

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

pub(crate) fn check_path(what: &str, path: &str) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::compat::stamp::stamp_ms;
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
        let two_failed = SendsDoc { failed: 2, pm_seq: 5, last_failed_turn_seq: 9 };
        let one_failed = SendsDoc { failed: 1, pm_seq: 5, last_failed_turn_seq: 7 };
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
