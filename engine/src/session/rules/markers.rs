//! The small markers of legacy-layout §2.9: the operator clock and open turn
//! (`record-operator-action.ts`, Hn `@02364de`; `lib/auto-close.ts`, Hn `@3f82ab6`), the queued
//! daily close and its drain (`session-archive.ts auto-close-decision`, Hn `@0d943da`), the
//! compaction and `/clear` requests, and the pause flags with their precedence.
//!
//! Each writer becomes an event carrying the marker's whole (small) document. Does not read
//! files or the store, nor read a clock.

use hookstate_schema::session::{JsonDoc, Marker, SessionEvent, Style};
use serde_json::{json, Value};

use super::verdict::{Decided, Verdict};
use crate::kernel::compat::stamp;
use crate::kernel::compat::text as js;
use crate::kernel::error::Result;
use crate::legacy::json as legacy_json;

/// `TURN_OPEN_TTL_MS`: an open-turn marker older than this is orphaned (its Stop never ran).
pub(crate) const TURN_OPEN_TTL_MS: i64 = 60 * 60 * 1000;
/// `AUTO_CLOSE_LULL_MINUTES`: operator silence that lets the daily close run now.
pub(crate) const AUTO_CLOSE_LULL_MINUTES: f64 = 10.0;
/// `PENDING_CLOSE_DRAIN_COOLDOWN_MINUTES`: the routine poll's backoff between drain nudges.
pub(crate) const DRAIN_COOLDOWN_MINUTES: f64 = 30.0;
/// A queued close older than this is not trusted without an operator clock.
pub(crate) const PENDING_CLOSE_TRUST_HOURS: f64 = 24.0;
/// `MAX_SNOOZE_MS`: ten years.
pub(crate) const SNOOZE_MS_MAX: f64 = 10.0 * 365.0 * 86_400_000.0;
/// The prompts hermit injects itself (tmux send-keys): not operator activity.
pub(crate) const INJECTED_EXACT: [&str; 5] = [
    "/claude-code-hermit:heartbeat run",
    "/claude-code-hermit:heartbeat start",
    "/claude-code-hermit:heartbeat stop",
    "/claude-code-hermit:hermit-routines load",
    "/claude-code-hermit:session-close --shutdown",
];
/// Trimmed-prompt prefixes that are scheduler or harness traffic, not the operator.
pub(crate) const ROUTINE_PREFIXES: [&str; 8] = [
    "<channel",
    "<task-notification",
    "HEARTBEAT_ERROR: ",
    "ROUTINE_DUE [hermit-routine:",
    "ROUTINE_MONITOR_ERROR: ",
    "/compact",
    "/model ",
    "/effort ",
];

fn doc(fields: Vec<(&str, String)>, style: Style) -> JsonDoc {
    JsonDoc { fields: fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(), style }
}

fn write(marker: Marker, doc: JsonDoc) -> SessionEvent {
    SessionEvent::MarkerWritten { marker, doc }
}

/// `isRoutinePrompt`: routine, scheduler and injected prompts, which do not count as operator
/// activity (`<task-notification` as legacy-layout §2.10 lists it).
#[must_use]
pub(crate) fn is_routine_prompt(prompt: &str) -> bool {
    let t = js::trim(prompt);
    prompt.starts_with("[hermit-routine:")
        || INJECTED_EXACT.contains(&t)
        || t == "HEARTBEAT_EVALUATE"
        || t == "/clear"
        || ROUTINE_PREFIXES.iter().any(|p| t.starts_with(p))
}

fn at_doc(now_ms: u64) -> JsonDoc {
    doc(vec![("at", legacy_json::string(&stamp::stamp_ms(now_ms)))], Style::Compact)
}

/// `record-operator-action.ts [--force]`: with `--force`, or a kept prompt, both markers; with no
/// prompt (SessionStart), the action clock only when it is absent. Prints nothing.
#[must_use]
pub(crate) fn record_operator_action(
    prompt: Option<&str>,
    force: bool,
    clock_present: bool,
    now_ms: u64,
) -> Decided {
    let both = vec![
        write(Marker::LastOperatorAction, at_doc(now_ms)),
        write(Marker::OperatorTurnOpen, at_doc(now_ms)),
    ];
    let events = match (force, prompt) {
        (true, _) => both,
        (false, None) if clock_present => Vec::new(),
        (false, None) => vec![write(Marker::LastOperatorAction, at_doc(now_ms))],
        (false, Some(p)) if is_routine_prompt(p) => Vec::new(),
        (false, Some(_)) => both,
    };
    Decided { events, verdict: Verdict { lines: Vec::new(), ..Verdict::line("") } }
}

/// The Stop pipeline closes the turn.
#[must_use]
pub(crate) fn close_turn() -> SessionEvent {
    SessionEvent::MarkerRemoved { marker: Marker::OperatorTurnOpen }
}

fn at_ms(doc: Option<&JsonDoc>, key: &str) -> Option<i64> {
    doc.and_then(|d| legacy_json::str_field(d, key)).and_then(|s| stamp::date_parse(&s))
}

fn now_i64(now_ms: u64) -> i64 {
    i64::try_from(now_ms).unwrap_or(i64::MAX)
}

/// `operatorTurnOpen`: the marker is between 0 and [`TURN_OPEN_TTL_MS`] old (absent, malformed
/// or future-dated reads as closed).
#[must_use]
pub(crate) fn turn_open(marker: Option<&JsonDoc>, now_ms: u64) -> bool {
    at_ms(marker, "at").is_some_and(|at| (0..=TURN_OPEN_TTL_MS).contains(&(now_i64(now_ms) - at)))
}

/// How `session-archive` read `runtime.json` (its tri-state reader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RuntimeRead<'a> {
    /// Read and parsed.
    Ok(&'a JsonDoc),
    /// No file.
    Missing,
    /// Bytes that are not a JSON object.
    Corrupt,
}

/// `session-archive auto-close-decision`: `noop` (reaping a stale queued close), `close-now` or
/// `queued` (writing `pending-close.json`), as upstream's branch table decides.
///
/// # Errors
/// [`crate::kernel::error::Error`] for a bad zone or time.
pub(crate) fn auto_close_decision(
    runtime: &RuntimeRead<'_>,
    last_action: Option<&JsonDoc>,
    pending_present: bool,
    now_ms: u64,
    timezone: &str,
) -> Result<Decided> {
    let say = |events: Vec<SessionEvent>, value: Value| Decided {
        events,
        verdict: Verdict::json(&value),
    };
    let noop = |reason: String, resting: bool| {
        let events: Vec<SessionEvent> = if pending_present {
            vec![SessionEvent::MarkerRemoved { marker: Marker::PendingClose }]
        } else {
            Vec::new()
        };
        let tail = if pending_present { "; stale pending-close deleted" } else { "" };
        let reason = format!("{reason}{tail}");
        say(events, json!({ "ok": true, "decision": "noop", "resting": resting, "reason": reason }))
    };
    let doc = match runtime {
        // Upstream also reads an I/O error here ("ioerror"); the store's read fails the call.
        RuntimeRead::Corrupt => {
            let reason = "runtime unreadable (corrupt)".to_owned();
            return Ok(say(
                Vec::new(),
                json!({ "ok": true, "decision": "noop", "reason": reason }),
            ));
        }
        RuntimeRead::Missing => return Ok(noop("session_state=missing".into(), false)),
        RuntimeRead::Ok(doc) => *doc,
    };
    let session = match doc.raw("session_state").map(serde_json::from_str::<Value>) {
        None | Some(Ok(Value::Null)) => "unset".to_owned(),
        Some(Ok(Value::String(s))) => s,
        Some(other) => other.map(|v| v.to_string()).unwrap_or_default(),
    };
    if session != "in_progress" && session != "idle" {
        return Ok(noop(format!("session_state={session}"), false));
    }
    if session == "idle" && doc.raw("session_id").is_none_or(|r| r == "null") {
        return Ok(noop("idle, no active session".into(), true));
    }
    by_clock(last_action, now_ms, timezone)
}

/// The daily close's last branches: by the operator clock.
fn by_clock(last_action: Option<&JsonDoc>, now_ms: u64, timezone: &str) -> Result<Decided> {
    let say = |events: Vec<SessionEvent>, value: Value| Decided {
        events,
        verdict: Verdict::json(&value),
    };
    let close_now = |reason: &str| {
        say(Vec::new(), json!({ "ok": true, "decision": "close-now", "reason": reason }))
    };
    let Some(at) = at_ms(last_action, "at") else {
        return Ok(close_now("last-operator-action missing/invalid"));
    };
    let now = now_i64(now_ms);
    if at > now {
        return Ok(close_now("last-operator-action is in the future (clock skew)"));
    }
    #[expect(clippy::cast_precision_loss, reason = "minutes of a lull, far below 2^53")]
    let lull = (now - at) as f64 / 60_000.0;
    if lull > AUTO_CLOSE_LULL_MINUTES {
        return Ok(close_now(&format!("lull {}min", crate::kernel::compat::js::math_round(lull))));
    }
    let pending = doc_of(vec![
        ("queued_at", legacy_json::string(&stamp::local_stamp(now_ms, timezone)?)),
        ("queued_by", legacy_json::string("daily-auto-close")),
    ]);
    let reason = format!("operator active {}min ago", crate::kernel::compat::js::math_round(lull));
    Ok(say(
        vec![write(Marker::PendingClose, pending)],
        json!({ "ok": true, "decision": "queued", "reason": reason }),
    ))
}

fn doc_of(fields: Vec<(&str, String)>) -> JsonDoc {
    doc(fields, Style::Pretty)
}

/// `drainCooldownExpired`: no drain nudge within `cooldown_minutes` (absent, malformed or
/// future-dated reads as expired).
#[must_use]
pub(crate) fn drain_cooldown_expired(
    marker: Option<&JsonDoc>,
    now_ms: u64,
    cooldown_minutes: f64,
) -> bool {
    let Some(at) = at_ms(marker, "last_emitted_at") else { return true };
    #[expect(clippy::cast_precision_loss, reason = "milliseconds of a cooldown")]
    let age = (now_i64(now_ms) - at) as f64 / 60_000.0;
    age < 0.0 || age > cooldown_minutes
}

/// The precheck's cooldown for a heartbeat every `every_minutes` (legacy-layout §2.9): 30 min
/// below a 30-minute heartbeat, else `min(30, every / 2)`.
#[must_use]
pub(crate) fn precheck_cooldown_minutes(every_minutes: f64) -> f64 {
    if every_minutes < DRAIN_COOLDOWN_MINUTES {
        DRAIN_COOLDOWN_MINUTES
    } else {
        DRAIN_COOLDOWN_MINUTES.min(every_minutes / 2.0)
    }
}

/// `stampDrainCooldown`.
#[must_use]
pub(crate) fn stamp_drain(now_ms: u64) -> SessionEvent {
    write(
        Marker::PendingCloseDrain,
        doc_of(vec![("last_emitted_at", legacy_json::string(&stamp::stamp_ms(now_ms)))]),
    )
}

/// `pendingCloseDrainDue`: a queued close, a closeable session, and either an operator lull
/// past [`AUTO_CLOSE_LULL_MINUTES`] or (no valid clock) a queued close under a day old.
#[must_use]
pub(crate) fn pending_close_drain_due(
    pending: Option<&JsonDoc>,
    runtime: Option<&JsonDoc>,
    last_action: Option<&JsonDoc>,
    now_ms: u64,
) -> bool {
    let Some(pending) = pending else { return false };
    let state = runtime.and_then(|r| legacy_json::str_field(r, "session_state"));
    if !matches!(state.as_deref(), Some("in_progress" | "idle")) {
        return false;
    }
    let now = now_i64(now_ms);
    #[expect(clippy::cast_precision_loss, reason = "milliseconds of a lull")]
    let minutes = |at: i64| (now - at) as f64 / 60_000.0;
    match at_ms(last_action, "at") {
        Some(at) => minutes(at) > AUTO_CLOSE_LULL_MINUTES,
        None => at_ms(Some(pending), "queued_at")
            .is_some_and(|q| minutes(q) / 60.0 <= PENDING_CLOSE_TRUST_HOURS),
    }
}

/// `compact-requested.json` from an idle archive: localISO, pretty.
///
/// # Errors
/// [`crate::kernel::error::Error`] for a bad zone or time.
pub(crate) fn compact_request_after_archive(now_ms: u64, timezone: &str) -> Result<SessionEvent> {
    let at = legacy_json::string(&stamp::local_stamp(now_ms, timezone)?);
    Ok(write(
        Marker::CompactRequested,
        doc_of(vec![("requested_at", at), ("reason", legacy_json::string("session-work-done"))]),
    ))
}

/// `compact-requested.json` from `proposal.ts patch --request-compact`: zonedISO, compact.
///
/// # Errors
/// [`crate::kernel::error::Error`] for a bad zone or time.
pub(crate) fn compact_request_after_resolve(now_ms: u64, timezone: &str) -> Result<SessionEvent> {
    let at = legacy_json::string(&stamp::zoned_stamp(now_ms, timezone)?);
    let fields = vec![("requested_at", at), ("reason", legacy_json::string("proposal-resolve"))];
    Ok(write(Marker::CompactRequested, doc(fields, Style::Compact)))
}

/// `clear-requested.json` from an auto archive: localISO, pretty.
///
/// # Errors
/// [`crate::kernel::error::Error`] for a bad zone or time.
pub(crate) fn clear_request(now_ms: u64, timezone: &str) -> Result<SessionEvent> {
    let at = legacy_json::string(&stamp::local_stamp(now_ms, timezone)?);
    Ok(write(
        Marker::ClearRequested,
        doc_of(vec![("requested_at", at), ("reason", legacy_json::string("daily-auto-close"))]),
    ))
}

/// A pause flag as read: active, with who set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pause {
    /// `operator` | `watchdog` | `budget` (as written).
    pub(crate) reason: Option<String>,
    /// `paused_until`, when set.
    pub(crate) until: Option<String>,
    /// Which file holds it.
    pub(crate) marker: Marker,
}

/// `isPaused` for one flag: `paused: true`, and `paused_until` absent, unparseable or ahead.
fn active(flag: Option<&JsonDoc>, marker: Marker, now_ms: u64) -> Option<Pause> {
    let flag = flag?;
    if flag.raw("paused") != Some("true") {
        return None;
    }
    let until = legacy_json::str_field(flag, "paused_until").filter(|u| !u.is_empty());
    if until.as_deref().and_then(stamp::date_parse).is_some_and(|u| u <= now_i64(now_ms)) {
        return None;
    }
    Some(Pause { reason: legacy_json::str_field(flag, "reason"), until, marker })
}

/// The pause in force: the operator's flag first, then the automatic one, then the legacy
/// `pause.json`; `None` when none is active.
#[must_use]
pub(crate) fn paused(
    operator: Option<&JsonDoc>,
    auto: Option<&JsonDoc>,
    legacy: Option<&JsonDoc>,
    now_ms: u64,
) -> Option<Pause> {
    active(operator, Marker::OperatorPause, now_ms)
        .or_else(|| active(auto, Marker::AutoPause, now_ms))
        .or_else(|| active(legacy, Marker::LegacyPause, now_ms))
}

/// `setPause`: `operator` writes `operator-pause.json`; `watchdog` and `budget` write
/// `auto-pause.json`, where a budget pause never replaces an active watchdog pause.
#[must_use]
pub(crate) fn set_pause(
    reason: &str,
    by: &str,
    until: Option<&str>,
    auto: Option<&JsonDoc>,
    now_ms: u64,
) -> Vec<SessionEvent> {
    let marker = if reason == "operator" { Marker::OperatorPause } else { Marker::AutoPause };
    let held = active(auto, Marker::AutoPause, now_ms);
    if reason == "budget" && held.is_some_and(|p| p.reason.as_deref() == Some("watchdog")) {
        return Vec::new();
    }
    let flag = doc_of(vec![
        ("paused", "true".into()),
        ("paused_until", until.map_or_else(|| "null".into(), legacy_json::string)),
        ("reason", legacy_json::string(reason)),
        ("by", legacy_json::string(by)),
        ("ts", legacy_json::string(&stamp::stamp_ms(now_ms))),
    ]);
    vec![write(marker, flag)]
}

/// `clearPause`: the flag file is removed.
#[must_use]
pub(crate) fn clear_pause(marker: Marker) -> SessionEvent {
    SessionEvent::MarkerRemoved { marker }
}

/// `parseSnoozeDuration`: `<n>[.<d>] s|m|h|d` in ms, positive and at most [`SNOOZE_MS_MAX`].
#[must_use]
pub(crate) fn parse_snooze(text: &str) -> Option<u64> {
    let t = js::trim(text);
    let unit = t.chars().last()?;
    let scale = match unit.to_ascii_lowercase() {
        's' => 1000.0,
        'm' => 60_000.0,
        'h' => 3_600_000.0,
        'd' => 86_400_000.0,
        _ => return None,
    };
    let number = js::trim_end(&t[..t.len() - unit.len_utf8()]);
    let (int, frac) = number.split_once('.').unwrap_or((number, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(int) || !digits(frac) {
        return None;
    }
    let ms = crate::kernel::compat::js::math_round(number.parse::<f64>().ok()? * scale);
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "bounded above")]
    (ms > 0.0 && ms <= SNOOZE_MS_MAX).then_some(ms as u64)
}

#[cfg(test)]
mod tests;
