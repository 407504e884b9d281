//! `state/runtime.json`'s lifecycle (legacy-layout §2.4) as a transition table: each move names
//! the state it expects (`session_state`, `transition`, an optional `updated_at` the caller saw),
//! is refused when the file is elsewhere, and otherwise becomes one per-field merge.
//!
//! The merge is the whole hazard fix: a move records only the fields it writes, and the next
//! state is the current one with those fields set, so a concurrent writer's field is never lost
//! (upstream's four writers overwrite the whole object). Does not read files or the store.

use hookstate_schema::session::{JsonDoc, RuntimeCause, SessionEvent, Style};
use serde_json::Value;

use super::verdict::{error_line, Class, Refusal};
use crate::kernel::compat::stamp;
use crate::kernel::compat::text as js;
use crate::kernel::error::{Error, Result};
use crate::legacy::json as legacy_json;

/// Fields one merge may write: `runtime.json` has about twenty.
pub(crate) const MERGE_FIELDS_MAX: usize = 64;
/// The fields only the lifecycle moves write; a generic merge that names one is refused, so the
/// transition table cannot be bypassed (upstream's model edits `session_state` by hand).
pub(crate) const LIFECYCLE_FIELDS: [&str; 6] = [
    "session_state",
    "session_id",
    "transition",
    "transition_target",
    "transition_started_at",
    "transition_mode",
];
/// The fields an archive's last step clears.
pub(crate) const TRANSITION_FIELDS: [&str; 4] =
    ["transition", "transition_target", "transition_started_at", "transition_mode"];

/// `session-archive archive --mode=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArchiveMode {
    /// Between tasks: the next session id is pre-assigned, a compaction is requested.
    Idle,
    /// The operator closes the session.
    Close,
    /// The daily auto-close.
    Auto,
}

impl ArchiveMode {
    /// Parses `idle`, `close`, `auto`.
    #[must_use]
    pub(crate) fn parse(text: &str) -> Option<ArchiveMode> {
        match text {
            "idle" => Some(ArchiveMode::Idle),
            "close" => Some(ArchiveMode::Close),
            "auto" => Some(ArchiveMode::Auto),
            _ => None,
        }
    }

    /// The mode's name.
    #[must_use]
    pub(crate) fn name(self) -> &'static str {
        match self {
            ArchiveMode::Idle => "idle",
            ArchiveMode::Close => "close",
            ArchiveMode::Auto => "auto",
        }
    }
}

/// A lifecycle move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Move {
    /// `hermit-start` on a missing file: the seed document.
    Seed {
        /// `tmux` | `docker` | `interactive`.
        runtime_mode: String,
        /// The tmux session, when there is one.
        tmux_session: Option<String>,
    },
    /// `session-archive open`.
    Open {
        /// The session id (`resolveSessionId`).
        session_id: String,
    },
    /// Archive step 1.
    ArchiveBegin {
        /// The archived session.
        session_id: String,
        /// The mode.
        mode: ArchiveMode,
        /// `recover` re-running an archive that stopped in `archiving` (the one case a begin
        /// may overwrite a transition in flight).
        recovering: bool,
    },
    /// Archive step 3.
    ArchiveCleaning,
    /// Archive step 5 (and 6: `shutdown_completed_at` when a shutdown was requested).
    ArchiveEnd {
        /// The mode.
        mode: ArchiveMode,
        /// For `idle`: the next session id.
        next_session_id: String,
        /// `recover` finishing an interrupted archive from either step.
        recovering: bool,
    },
    /// `recover` when nothing is left to reset: markers cleared, `idle`.
    RecoverClear,
    /// The next-task ack: an idle session parks.
    Wait,
    /// The tick: a wait past its timeout ends.
    WaitTimeout {
        /// `heartbeat.waiting_timeout` in ms.
        timeout_ms: u64,
    },
    /// The operator answered a waiting session.
    Resume,
    /// An emergency halt.
    Halt,
    /// `hermit-stop` asked for a shutdown.
    ShutdownRequested,
    /// `hermit-stop` with no session running.
    ShutdownCompleted,
    /// A writer merges fields it owns.
    Merge {
        /// Fields written (key, compact JSON text).
        sets: Vec<(String, String)>,
        /// Fields deleted.
        unset: Vec<String>,
    },
}

/// Where `runtime.json` stands, as the table reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    /// The file exists.
    pub(crate) present: bool,
    /// `session_state`, when a string.
    pub(crate) session_state: Option<String>,
    /// `transition`, when truthy (a non-empty string).
    pub(crate) transition: Option<String>,
}

/// Reads the table's view of a document.
#[must_use]
pub(crate) fn state(doc: Option<&JsonDoc>) -> State {
    let field = |key| doc.and_then(|d| legacy_json::str_field(d, key)).filter(|s| !s.is_empty());
    State {
        present: doc.is_some(),
        session_state: field("session_state"),
        transition: field("transition"),
    }
}

fn refuse(reason: &str) -> Refusal {
    let mut refusal = error_line(reason, Class::Refused, 0);
    refusal.verdict.lines = vec![crate::kernel::compat::js::compact(&serde_json::json!({
        "ok": false, "reason": reason,
    }))];
    refusal
}

/// The table: whether `mv` may be made from `state`, or the reason it may not.
///
/// # Errors
/// `runtime-exists`, `transition-in-progress`, `not-archiving`, `not-cleaning`,
/// `no-interrupted-transition`, `not-idle`, `not-waiting`, `not-in-progress`,
/// `lifecycle-field:<key>`.
pub(crate) fn allowed(state: &State, mv: &Move) -> std::result::Result<(), String> {
    let session = state.session_state.as_deref();
    let transition = state.transition.as_deref();
    let fail = |reason: &str| Err(reason.to_owned());
    match mv {
        Move::Seed { .. } if state.present => fail("runtime-exists"),
        Move::ArchiveBegin { recovering: true, .. } if transition != Some("archiving") => {
            fail("not-archiving")
        }
        Move::Open { .. } | Move::ArchiveBegin { recovering: false, .. }
            if transition.is_some() =>
        {
            fail("transition-in-progress")
        }
        Move::ArchiveCleaning if transition != Some("archiving") => fail("not-archiving"),
        Move::ArchiveEnd { recovering: true, .. } if transition.is_none() => {
            fail("no-interrupted-transition")
        }
        Move::ArchiveEnd { recovering: false, .. } if transition != Some("cleaning") => {
            fail("not-cleaning")
        }
        Move::RecoverClear if transition.is_none() => fail("no-interrupted-transition"),
        Move::Wait if session != Some("idle") || transition.is_some() => fail("not-idle"),
        Move::WaitTimeout { .. } | Move::Resume if session != Some("waiting") => {
            fail("not-waiting")
        }
        Move::Halt if session != Some("in_progress") => fail("not-in-progress"),
        Move::Merge { sets, unset } => {
            let named = sets.iter().map(|(k, _)| k).chain(unset);
            match named.into_iter().find(|k| LIFECYCLE_FIELDS.contains(&k.as_str())) {
                Some(key) => Err(format!("lifecycle-field:{key}")),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// `parseDuration`: `<digits> s|m|h` (any case, spaces between) in ms; `None` otherwise.
#[must_use]
pub(crate) fn parse_duration(text: &str) -> Option<u64> {
    let text = js::trim(text);
    let unit = text.chars().last()?;
    let scale = match unit.to_ascii_lowercase() {
        's' => 1000,
        'm' => 60_000,
        'h' => 3_600_000,
        _ => return None,
    };
    let digits = js::trim_end(&text[..text.len() - unit.len_utf8()]);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

fn string(text: &str) -> String {
    legacy_json::string(text)
}

const NULL: &str = "null";

fn sets_of(
    mv: &Move,
    doc: Option<&JsonDoc>,
    now_ms: u64,
    local: &str,
) -> Option<Vec<(String, String)>> {
    let pairs =
        |list: &[(&str, String)]| list.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    let iso = string(&stamp::stamp_ms(now_ms));
    Some(match mv {
        Move::Seed { runtime_mode, tmux_session } => {
            seed(runtime_mode, tmux_session.as_deref(), local)
        }
        Move::Open { session_id } => pairs(&[
            ("session_state", string("in_progress")),
            ("session_id", string(session_id)),
            ("opened_at", string(local)),
            ("closed_at", NULL.into()),
        ]),
        Move::ArchiveBegin { session_id, mode, .. } => pairs(&[
            ("transition", string("archiving")),
            ("transition_target", string(&format!("{session_id}-REPORT.md"))),
            ("transition_started_at", string(local)),
            ("transition_mode", string(mode.name())),
            ("session_id", string(session_id)),
        ]),
        Move::ArchiveCleaning => pairs(&[("transition", string("cleaning"))]),
        Move::ArchiveEnd { mode, next_session_id, .. } => {
            let mut list = clear_transition();
            let id = if *mode == ArchiveMode::Idle { string(next_session_id) } else { NULL.into() };
            list.push(("session_id".into(), id));
            let requested = doc.and_then(|d| d.raw("shutdown_requested_at")).is_some_and(truthy);
            if *mode != ArchiveMode::Idle && requested {
                list.push(("shutdown_completed_at".into(), string(local)));
            }
            list
        }
        Move::RecoverClear => clear_transition(),
        Move::Wait => pairs(&[
            ("session_state", string("waiting")),
            ("waiting_reason", string("conservative_pickup")),
            ("waiting_since", iso),
        ]),
        Move::WaitTimeout { .. } => pairs(&[("session_state", string("idle"))]),
        Move::Resume => {
            pairs(&[("session_state", string("in_progress")), ("waiting_reason", NULL.into())])
        }
        Move::Halt => pairs(&[
            ("session_state", string("waiting")),
            ("waiting_reason", string("operator_input")),
        ]),
        Move::ShutdownRequested => pairs(&[("shutdown_requested_at", string(local))]),
        Move::ShutdownCompleted => pairs(&[
            ("shutdown_completed_at", string(local)),
            ("transition", NULL.into()),
            ("transition_target", NULL.into()),
            ("transition_started_at", NULL.into()),
        ]),
        Move::Merge { sets, .. } => sets.clone(),
    })
}

/// `hermit-start`'s seed document, in its key order.
fn seed(runtime_mode: &str, tmux_session: Option<&str>, local: &str) -> Vec<(String, String)> {
    let mut list: Vec<(String, String)> = vec![
        ("version".into(), "1".into()),
        ("session_state".into(), string("idle")),
        ("session_id".into(), NULL.into()),
        ("created_at".into(), string(local)),
        ("runtime_mode".into(), string(runtime_mode)),
        ("tmux_session".into(), tmux_session.map_or_else(|| NULL.into(), string)),
    ];
    let nulls = [
        "transition",
        "transition_target",
        "transition_started_at",
        "shutdown_requested_at",
        "shutdown_completed_at",
        "last_error",
        "last_shell_snapshot_at",
    ];
    list.extend(nulls.iter().map(|k| ((*k).to_owned(), NULL.to_owned())));
    list
}

fn clear_transition() -> Vec<(String, String)> {
    let mut list: Vec<(String, String)> =
        TRANSITION_FIELDS.iter().map(|k| ((*k).to_owned(), NULL.to_owned())).collect();
    list.push(("session_state".into(), string("idle")));
    list
}

/// JavaScript truthiness of a raw JSON value.
fn truthy(raw: &str) -> bool {
    !matches!(raw, "null" | "false" | "0" | "\"\"" | "-0")
}

fn cause(mv: &Move) -> RuntimeCause {
    match mv {
        Move::Seed { .. } => RuntimeCause::Seed,
        Move::Open { .. } => RuntimeCause::Open,
        Move::ArchiveBegin { .. } => RuntimeCause::ArchiveBegin,
        Move::ArchiveCleaning => RuntimeCause::ArchiveCleaning,
        Move::ArchiveEnd { .. } => RuntimeCause::ArchiveEnd,
        Move::RecoverClear => RuntimeCause::Recover,
        Move::Wait => RuntimeCause::Wait,
        Move::WaitTimeout { .. } => RuntimeCause::WaitTimeout,
        Move::Resume => RuntimeCause::Resume,
        Move::Halt => RuntimeCause::Halt,
        Move::ShutdownRequested => RuntimeCause::ShutdownRequested,
        Move::ShutdownCompleted => RuntimeCause::ShutdownCompleted,
        Move::Merge { .. } => RuntimeCause::Merge,
    }
}

fn timed_out(doc: Option<&JsonDoc>, timeout_ms: u64, now_ms: u64) -> bool {
    let since = doc
        .and_then(|d| legacy_json::str_field(d, "waiting_since"))
        .and_then(|s| stamp::date_parse(&s));
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let timeout = i64::try_from(timeout_ms).unwrap_or(i64::MAX);
    timeout_ms > 0 && since.is_some_and(|since| now - since > timeout)
}

/// Decides a move over the current document (`None`: no file): the event, or the refusal as
/// `session-archive` prints it (`{"ok":false,"reason":…}`). `expect_updated_at` is a
/// compare-and-swap on the `updated_at` the caller read.
///
/// # Errors
/// [`crate::kernel::error::Error`] for a bad zone, time or merge; the refusal is `Ok(Err(_))`.
pub(crate) fn decide(
    doc: Option<&JsonDoc>,
    mv: &Move,
    expect_updated_at: Option<&str>,
    now_ms: u64,
    timezone: &str,
) -> Result<std::result::Result<SessionEvent, Refusal>> {
    stamp::check_time(now_ms)?;
    if let Move::Merge { sets, unset } = mv {
        check_merge(sets, unset)?;
    }
    let local = stamp::local_stamp(now_ms, timezone)?;
    if let Some(expected) = expect_updated_at {
        let current = doc.and_then(|d| legacy_json::str_field(d, "updated_at"));
        if current.as_deref() != Some(expected) {
            return Ok(Err(refuse("changed")));
        }
    }
    if let Err(reason) = allowed(&state(doc), mv) {
        return Ok(Err(refuse(&reason)));
    }
    if let Move::WaitTimeout { timeout_ms } = mv {
        if !timed_out(doc, *timeout_ms, now_ms) {
            return Ok(Err(refuse("not-timed-out")));
        }
    }
    let sets = sets_of(mv, doc, now_ms, &local).unwrap_or_default();
    let unset = match mv {
        Move::WaitTimeout { .. } => vec!["waiting_reason".into(), "waiting_since".into()],
        Move::Merge { unset, .. } => unset.clone(),
        _ => Vec::new(),
    };
    check_keys(doc, &sets, &unset)?;
    Ok(Ok(SessionEvent::RuntimeChanged { cause: cause(mv), sets, unset, updated_at: local }))
}

/// Refuses a write that would leave `runtime.json` with more keys than the legacy codec reads
/// back ([`legacy_json::OBJECT_KEYS_MAX`]): the file would then be refused as corrupt.
fn check_keys(doc: Option<&JsonDoc>, sets: &[(String, String)], unset: &[String]) -> Result<()> {
    let mut keys: std::collections::HashSet<&str> =
        doc.map(|d| d.fields.iter().map(|(k, _)| k.as_str()).collect()).unwrap_or_default();
    keys.extend(sets.iter().map(|(k, _)| k.as_str()));
    keys.insert("updated_at");
    for key in unset {
        keys.remove(key.as_str());
    }
    let (count, max) = (keys.len(), legacy_json::OBJECT_KEYS_MAX);
    if count > max {
        return Err(Error::TooMany { what: "runtime.json keys", count, max });
    }
    Ok(())
}

fn check_merge(sets: &[(String, String)], unset: &[String]) -> Result<()> {
    let count = sets.len() + unset.len();
    if count > MERGE_FIELDS_MAX {
        return Err(Error::TooMany { what: "runtime fields", count, max: MERGE_FIELDS_MAX });
    }
    for (key, raw) in sets {
        if key.is_empty() || key == "updated_at" {
            let why = "cannot be set: every write stamps updated_at itself";
            return Err(Error::bad(format!("runtime field {key:?}"), why));
        }
        crate::kernel::value::validate_json(&format!("runtime field {key}"), raw)?;
    }
    Ok(())
}

/// The document after a `RuntimeChanged` event: upstream's `Object.assign` (set in place, new
/// keys appended), the deletions, `updated_at` stamped, every value re-serialised as
/// `JSON.stringify(obj, null, 2)` writes the whole object.
pub(crate) fn apply(doc: &mut Option<JsonDoc>, event: &SessionEvent) {
    let SessionEvent::RuntimeChanged { sets, unset, updated_at, .. } = event else { return };
    let mut current = doc.take().unwrap_or(JsonDoc { fields: Vec::new(), style: Style::Pretty });
    let whole = js::object_order(legacy_json::to_value(&current));
    current.fields = match whole {
        Value::Object(map) => {
            map.into_iter().map(|(k, v)| (k, crate::kernel::compat::js::compact(&v))).collect()
        }
        _ => Vec::new(),
    };
    current.style = Style::Pretty;
    for (key, raw) in sets {
        current.set(key, js::reparse(raw).unwrap_or_else(|| raw.clone()));
    }
    current.fields.retain(|(k, _)| !unset.contains(k));
    current.set("updated_at", legacy_json::string(updated_at));
    *doc = Some(current);
}

#[cfg(test)]
mod tests;
