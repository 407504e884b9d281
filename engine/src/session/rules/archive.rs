//! `session-archive.ts` (Hn `@0d943da`): `archive --mode=idle|close|auto`, `open` and `recover`,
//! composed from the `runtime.json` moves (begin, report, cleaning, SHELL.md reset, end, the
//! post-archive markers), with `S-NNN` allocation over the reports the store holds.
//!
//! Upstream makes these steps as separate file writes and needs `recover` after a crash between
//! them; here one decision yields all of them for one transaction, and `recover` remains for
//! state imported mid-transition. Does not read files or the store.

use hookstate_schema::session::{JsonDoc, Marker, SessionEvent, ShellReset};
use serde_json::{json, Map, Value};

use super::markers;
use super::report::{self, Payload, ReportInput};
use super::runtime::{self, ArchiveMode, Move};
use super::shell;
use super::verdict::{Decided, Verdict};
use crate::kernel::compat::stamp;
use crate::kernel::error::Result;
use crate::legacy::json as legacy_json;

/// Zero-padding of `S-NNN`.
pub(crate) const SESSION_DIGITS: usize = 3;
/// The synthetic payload `recover` archives an interrupted `archiving` transition with.
pub(crate) const RECOVER_BLOCKER: &str =
    "Recovered from interrupted archiving transition — pre-crash \
                                   close payload was not persisted; status inferred as partial.";
/// The note a pre-upgrade transition (no `transition_mode`) adds.
pub(crate) const LEGACY_NOTE: &str =
    "Recovered via legacy transition marker (pre-upgrade); treated as full close.";

/// `compact` settings (`resolveCompactConfig`: 30/20/30/15 unless `config.compact` says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compact {
    /// Monitoring lines above which the section rolls up.
    pub(crate) monitoring_threshold: u64,
    /// Monitoring lines kept.
    pub(crate) monitoring_keep: u64,
    /// Session Summary lines above which the section rolls up.
    pub(crate) summary_threshold: u64,
    /// Session Summary lines kept.
    pub(crate) summary_keep: u64,
}

impl Default for Compact {
    fn default() -> Self {
        Compact {
            monitoring_threshold: 30,
            monitoring_keep: 20,
            summary_threshold: 30,
            summary_keep: 15,
        }
    }
}

/// What an archive reads besides the payload.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hermit<'a> {
    /// `state/runtime.json`.
    pub(crate) runtime: Option<&'a JsonDoc>,
    /// `sessions/SHELL.md`.
    pub(crate) shell: Option<&'a str>,
    /// The session report names held (`S-045-REPORT.md`, …).
    pub(crate) reports: &'a [String],
    /// `templates/SHELL.md.template`.
    pub(crate) template: Option<&'a str>,
    /// `state/pending-close.json` exists.
    pub(crate) pending_close: bool,
    /// The absolute `sessions/` directory (upstream prints `report_path` under it).
    pub(crate) sessions_dir: &'a str,
    /// `config.timezone`, `UTC` when unset.
    pub(crate) timezone: &'a str,
    /// `config.escalation` as written.
    pub(crate) escalation: Option<&'a str>,
    /// `config.compact`.
    pub(crate) compact: Compact,
    /// The measured `(cost_usd, tokens)` of the session's cost-log window, when available.
    pub(crate) measured_cost: Option<(f64, f64)>,
    /// `.status.json`'s `operator_turns`, or 0.
    pub(crate) operator_turns: f64,
    /// `session-diff.json`'s changed files as `(file, status)`.
    pub(crate) changed_files: &'a [(String, String)],
}

/// `parseArgs`: the verb, then `--key=value` (or bare `--key`) flags, a later one winning.
#[must_use]
pub(crate) fn parse_args(args: &[String]) -> (String, Map<String, Value>) {
    let verb = args.first().cloned().unwrap_or_default();
    let mut flags = Map::new();
    for arg in args.iter().skip(1) {
        let Some(body) = arg.strip_prefix("--") else { continue };
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Value::from(v)),
            None => (body, Value::Bool(true)),
        };
        if !name.is_empty()
            && name.chars().all(|c| crate::kernel::compat::text::is_word(c) || c == '-')
        {
            flags.insert(name.to_owned(), value);
        }
    }
    (verb, flags)
}

/// The `NNN` of `S-NNN-REPORT.md`.
#[must_use]
pub(crate) fn report_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("S-")?.strip_suffix("-REPORT.md")?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().unwrap_or(u64::MAX))
}

/// `nextSessionId`: one past the highest report, three digits at least.
#[must_use]
pub(crate) fn next_session_id(reports: &[String]) -> String {
    let max = reports.iter().filter_map(|r| report_number(r)).max().unwrap_or(0);
    format!("S-{:0SESSION_DIGITS$}", max.saturating_add(1))
}

/// `resolveSessionId`: `runtime.json`'s non-empty `session_id`, else the next one.
#[must_use]
pub(crate) fn resolve_session_id(runtime: Option<&JsonDoc>, reports: &[String]) -> String {
    runtime
        .and_then(|r| legacy_json::str_field(r, "session_id"))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| next_session_id(reports))
}

pub(super) fn failed(reason: &str) -> Decided {
    Decided {
        events: Vec::new(),
        verdict: Verdict::json(&json!({ "ok": false, "reason": reason })),
    }
}

/// Runtime moves made one after another over a working copy.
pub(super) struct Steps {
    pub(super) runtime: Option<JsonDoc>,
    pub(super) events: Vec<SessionEvent>,
    pub(super) now_ms: u64,
}

impl Steps {
    /// Makes a move; `Err(reason)` when the table refuses it.
    pub(super) fn step(
        &mut self,
        mv: &Move,
        timezone: &str,
    ) -> Result<std::result::Result<(), String>> {
        match runtime::decide(self.runtime.as_ref(), mv, None, self.now_ms, timezone)? {
            Ok(event) => {
                runtime::apply(&mut self.runtime, &event);
                self.events.push(event);
                Ok(Ok(()))
            }
            Err(refusal) => Ok(Err(refusal.token)),
        }
    }
}

/// `applyPostArchiveMarkers`: the mode's marker writes (skipped when `suppress`) and the
/// queued-close reap.
pub(super) fn post_archive_markers(
    h: &Hermit<'_>,
    mode: ArchiveMode,
    suppress: bool,
    steps: &mut Steps,
) -> Result<Value> {
    let mut out = Map::new();
    let (now, tz) = (steps.now_ms, h.timezone);
    if mode == ArchiveMode::Idle {
        out.insert("compact_requested".into(), json!(if suppress { "skipped" } else { "written" }));
        if !suppress {
            steps.events.push(markers::compact_request_after_archive(now, tz)?);
        }
    } else {
        out.insert(
            "pending_close".into(),
            json!(if h.pending_close { "deleted" } else { "absent" }),
        );
        if h.pending_close {
            steps.events.push(SessionEvent::MarkerRemoved { marker: Marker::PendingClose });
        }
    }
    if mode == ArchiveMode::Auto {
        out.insert("clear_requested".into(), json!(if suppress { "skipped" } else { "written" }));
        if !suppress {
            steps.events.push(markers::clear_request(now, tz)?);
        }
    }
    Ok(Value::Object(out))
}

pub(super) fn report_text(
    h: &Hermit<'_>,
    payload: &Payload,
    shell: &str,
    session_id: &str,
    mode: ArchiveMode,
    now_ms: u64,
) -> Result<(String, f64)> {
    let date = stamp::zoned_stamp(now_ms, h.timezone)?;
    let started = report::started(shell).and_then(|s| stamp::parse_local_minute(s, h.timezone));
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let duration = started.map_or_else(|| "0m".to_owned(), |s| report::format_duration(now - s));
    let cost = report::cost(payload, h.measured_cost);
    let escalation = h.escalation.filter(|e| report::ESCALATIONS.contains(e)).unwrap_or("balanced");
    let input = ReportInput {
        session_id,
        mode: mode.name(),
        payload,
        shell,
        date: &date,
        duration: &duration,
        cost,
        escalation,
        operator_turns: h.operator_turns,
        changed_files: h.changed_files,
    };
    Ok((report::render(&input), cost.0))
}

pub(super) fn shell_reset(
    h: &Hermit<'_>,
    mode: ArchiveMode,
    session_id: &str,
    status: &str,
    cost: f64,
    now_ms: u64,
) -> Result<ShellReset> {
    Ok(match mode {
        ArchiveMode::Idle => ShellReset::Idle {
            session_id: session_id.to_owned(),
            date: stamp::zoned(now_ms, h.timezone, "%Y-%m-%d")?,
            status: report::normalise_status(if status.is_empty() { "partial" } else { status }).0,
            cost: report::to_fixed_2(cost),
            monitoring_threshold: h.compact.monitoring_threshold,
            monitoring_keep: h.compact.monitoring_keep,
            summary_threshold: h.compact.summary_threshold,
            summary_keep: h.compact.summary_keep,
        },
        ArchiveMode::Close | ArchiveMode::Auto => {
            ShellReset::Close { template: h.template.map(str::to_owned) }
        }
    })
}

/// `archive --mode=…` (stdin: the payload): begin, report, cleaning, SHELL.md reset, end, then
/// the markers; prints `{"ok":true,"archived":true,…}` or `{"ok":false,"reason":…}`. `mode` is
/// the flag's value (`"true"` for a bare `--mode`); `recovering` marks `recover`'s re-run.
///
/// # Errors
/// [`crate::kernel::error::Error`] for a bad zone or time; refusals are verdicts.
pub(crate) fn decide_archive(
    h: &Hermit<'_>,
    mode: Option<&str>,
    stdin: &str,
    recovering: bool,
    now_ms: u64,
) -> Result<Decided> {
    let Some(mode) = mode.and_then(ArchiveMode::parse) else {
        let got = mode.unwrap_or("(none)");
        return Ok(failed(&format!("archive requires --mode=idle|close|auto, got: {got}")));
    };
    let Some(shell_text) = h.shell else { return Ok(failed("shell-missing")) };
    let payload = report::parse_payload(stdin);
    if payload.is_empty() {
        return Ok(failed("payload-unparseable"));
    }
    let session_id = resolve_session_id(h.runtime, h.reports);
    // The report is `sessions/<id>-REPORT.md`, and `runtime.json` is edited by hand: an id that
    // is not `S-NNN` names no report file the layout has (`../x` named one outside the state
    // directory, which the writer refused after the archive had committed), so nothing is done.
    if report_number(&format!("{session_id}-REPORT.md")).is_none() {
        return Ok(failed("invalid-session-id"));
    }
    let mut steps = Steps { runtime: h.runtime.cloned(), events: Vec::new(), now_ms };
    let begin = Move::ArchiveBegin { session_id: session_id.clone(), mode, recovering };
    if let Err(reason) = steps.step(&begin, h.timezone)? {
        return Ok(failed(&reason));
    }
    let (text, cost) = report_text(h, &payload, shell_text, &session_id, mode, now_ms)?;
    steps.events.push(SessionEvent::ReportWritten {
        session_id: session_id.clone(),
        text,
        append: false,
    });
    if let Err(reason) = steps.step(&Move::ArchiveCleaning, h.timezone)? {
        return Ok(failed(&reason));
    }
    let reset = shell_reset(h, mode, &session_id, payload.get("Status"), cost, now_ms)?;
    steps.events.push(SessionEvent::ShellReset { reset });
    let mut reports = h.reports.to_vec();
    reports.push(format!("{session_id}-REPORT.md"));
    let end =
        Move::ArchiveEnd { mode, next_session_id: next_session_id(&reports), recovering: false };
    if let Err(reason) = steps.step(&end, h.timezone)? {
        return Ok(failed(&reason));
    }
    let marker_map = post_archive_markers(h, mode, recovering, &mut steps)?;
    let report_path = format!("{}/{session_id}-REPORT.md", h.sessions_dir.trim_end_matches('/'));
    let verdict = json!({ "ok": true, "archived": true, "session_id": session_id,
        "report_path": report_path, "mode": mode.name(), "markers": marker_map });
    Ok(Decided { events: steps.events, verdict: Verdict::json(&verdict) })
}

/// `open` (stdin: `Task: <text>`): SHELL.md (or the template, its `YYYY-MM-DD HH:MM` stamped)
/// gets the session id and the task; `runtime.json` turns `in_progress` with a new cost arc.
///
/// # Errors
/// [`crate::kernel::error::Error`] for a bad zone or time; refusals are verdicts.
pub(crate) fn decide_open(h: &Hermit<'_>, stdin: &str, now_ms: u64) -> Result<Decided> {
    let payload = report::parse_payload(stdin);
    let session_id = resolve_session_id(h.runtime, h.reports);
    let mut text = match (h.shell, h.template) {
        (Some(shell), _) => shell.to_owned(),
        (None, Some(template)) => {
            let local = stamp::local_stamp(now_ms, h.timezone)?;
            template.replacen("YYYY-MM-DD HH:MM", &local[..16].replacen('T', " ", 1), 1)
        }
        (None, None) => return Ok(failed("shell-template-missing")),
    };
    text = replace_session_id(&text, &session_id);
    let task = payload.get("Task");
    if !task.is_empty() {
        text = shell::replace_section(&text, "Task", &format!("\n{task}\n\n"));
    }
    let mut steps = Steps {
        runtime: h.runtime.cloned(),
        events: vec![SessionEvent::ShellWritten { text, append: false }],
        now_ms,
    };
    if let Err(reason) = steps.step(&Move::Open { session_id: session_id.clone() }, h.timezone)? {
        return Ok(failed(&reason));
    }
    Ok(Decided {
        events: steps.events,
        verdict: Verdict::json(&json!({ "ok": true, "session_id": session_id })),
    })
}

/// `/\*\*ID:\*\*\s*S-NNN \(assigned on close\)/` replaced by `**ID:** <id>` (the first match).
fn replace_session_id(text: &str, id: &str) -> String {
    const HEAD: &str = "**ID:**";
    const TAIL: &str = "S-NNN (assigned on close)";
    for (at, _) in text.match_indices(HEAD) {
        let rest = &text[at + HEAD.len()..];
        let spaced = crate::kernel::compat::text::trim_start(rest);
        if spaced.starts_with(TAIL) {
            let end = text.len() - spaced.len() + TAIL.len();
            return format!("{}**ID:** {id}{}", &text[..at], &text[end..]);
        }
    }
    text.to_owned()
}

/// The report `recover` looks for: `transition_target`, else `<session id>-REPORT.md`.
#[must_use]
pub(crate) fn recover_target(runtime: Option<&JsonDoc>, reports: &[String]) -> String {
    let id = resolve_session_id(runtime, reports);
    runtime
        .and_then(|r| legacy_json::str_field(r, "transition_target"))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| format!("{id}-REPORT.md"))
}

#[cfg(test)]
pub(crate) mod tests;
