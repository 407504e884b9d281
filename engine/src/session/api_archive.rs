//! `session-archive.ts` (archive, open, recover, auto-close-decision), `record-operator-action`,
//! the markers' writers and readers (the Stop's turn close, the pauses, the close drain), and
//! `SHELL.md` appends (`proposal.ts shell-append`, an alerts tick's Monitoring lines, a PROP's
//! Findings line) on the store.
//!
//! Reads `config.json`, `sessions/.status.json` and `state/session-diff.json` (read-only), as
//! upstream does; the cost log is not read, so a report's cost is the payload's `Cost:` line.

use hookstate_schema::session::{JsonDoc, Marker};
use serde_json::{json, Value};

use super::api::{changed_files, config, operator_turns, scope_dir, Answer, Config, Session};
use super::rules::archive::{self, recover_target, Hermit};
use super::rules::markers::{self, RuntimeRead};
use super::rules::recover::decide_recover;
use super::rules::shell;
use super::rules::verdict::{Decided, Decision, Verdict};
use super::views;
use crate::kernel::call::Call;
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;

/// A pause flag's writer (`lib/pause.ts` `setPause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseInput {
    /// `operator`, `watchdog` or `budget`.
    pub reason: String,
    /// Who set it.
    pub by: String,
    /// `paused_until` (ISO), or a snooze (`<n>[.<d>] s|m|h|d`) from now.
    pub until: Option<String>,
}

/// The pause reasons `setPause` writes.
pub const PAUSE_REASONS: [&str; 3] = ["operator", "watchdog", "budget"];

/// What the archive verbs read from the store and the state directory.
struct Read {
    runtime: Option<JsonDoc>,
    corrupt: bool,
    shell: Option<String>,
    template: Option<String>,
    reports: Vec<String>,
    pending_close: bool,
}

fn read(txn: &dyn ReadTxn, scope: &str) -> Result<Read> {
    let (runtime, corrupt) = match views::runtime(txn, scope) {
        Ok(doc) => (doc, false),
        Err(Error::Corrupt(_)) => (None, true),
        Err(other) => return Err(other),
    };
    let max = views::reports_max(txn, scope)?;
    let reports = if max > 0 { vec![format!("S-{max:03}-REPORT.md")] } else { Vec::new() };
    Ok(Read {
        runtime,
        corrupt,
        shell: views::text(txn, scope, views::SHELL_ID)?,
        template: views::text(txn, scope, views::TEMPLATE_ID)?,
        reports,
        pending_close: views::marker(txn, scope, Marker::PendingClose)?.is_some(),
    })
}

/// The facts an archive reads outside the store.
struct Outside {
    config: Config,
    sessions_dir: String,
    operator_turns: f64,
    changed: Vec<(String, String)>,
}

fn outside(scope: &str) -> Result<Outside> {
    let dir = scope_dir(scope)?;
    Ok(Outside {
        config: config(scope)?,
        sessions_dir: dir.join("sessions").to_string_lossy().into_owned(),
        operator_turns: operator_turns(scope)?,
        changed: changed_files(scope)?,
    })
}

fn hermit<'a>(r: &'a Read, o: &'a Outside) -> Hermit<'a> {
    Hermit {
        runtime: r.runtime.as_ref(),
        shell: r.shell.as_deref(),
        reports: &r.reports,
        template: r.template.as_deref(),
        pending_close: r.pending_close,
        sessions_dir: &o.sessions_dir,
        timezone: &o.config.timezone,
        escalation: o.config.escalation.as_deref(),
        compact: o.config.compact,
        measured_cost: None,
        operator_turns: o.operator_turns,
        changed_files: &o.changed,
    }
}

fn said(value: Value) -> Decision {
    Ok(Decided { events: Vec::new(), verdict: Verdict::json(&value) })
}

impl Session<'_> {
    /// `session-archive.ts <verb> [--mode=…]`: `archive` (stdin: the payload), `open` (stdin:
    /// `Task: …`), `recover`, `auto-close-decision`; `args` start with the verb. Every answer is
    /// one JSON line and exit 0 under `--format verdict`; `{"ok":false,…}` is a refusal otherwise.
    ///
    /// # Errors
    /// [`Error::BadTimeZone`] for `config.timezone`; store errors.
    pub fn session_archive(&self, call: &Call, args: &[String], stdin: &str) -> Result<Answer> {
        let (verb, flags) = archive::parse_args(args);
        let scope = call.scope.as_str();
        let out = outside(scope)?;
        let now = call.now_ms;
        let mode = flags.get("mode").map(|m| m.as_str().map_or("true".to_owned(), str::to_owned));
        self.decide(call, |txn| {
            let r = read(txn, scope)?;
            let h = hermit(&r, &out);
            let decided = match verb.as_str() {
                "archive" => archive::decide_archive(&h, mode.as_deref(), stdin, false, now)?,
                "open" => archive::decide_open(&h, stdin, now)?,
                "recover" => {
                    let runtime = match (&r.runtime, r.corrupt) {
                        (_, true) => RuntimeRead::Corrupt,
                        (Some(doc), false) => RuntimeRead::Ok(doc),
                        (None, false) => RuntimeRead::Missing,
                    };
                    let target = recover_target(r.runtime.as_ref(), &r.reports);
                    let text = views::report(txn, scope, &target)?;
                    decide_recover(&h, &runtime, text.as_deref(), now)?
                }
                "auto-close-decision" => {
                    let runtime = r.runtime.as_ref().map_or(RuntimeRead::Missing, RuntimeRead::Ok);
                    let last = views::marker(txn, scope, Marker::LastOperatorAction)?;
                    let tz = &out.config.timezone;
                    markers::auto_close_decision(&runtime, last.as_ref(), r.pending_close, now, tz)?
                }
                other => {
                    // Upstream names a missing verb `(none)`.
                    let other = if other.is_empty() { "(none)" } else { other };
                    let reason = format!(
                        "unknown verb: {other}. Valid verbs: archive, open, recover, \
                         auto-close-decision"
                    );
                    return Ok(said(json!({ "ok": false, "reason": reason })));
                }
            };
            Ok(Ok(decided))
        })
    }

    /// `record-operator-action.ts [--force]` with the hook payload on stdin: a kept prompt (or
    /// `--force`) stamps the operator clock and opens the turn; a payload without `prompt`
    /// (SessionStart) seeds the clock when it is absent. Prints nothing.
    ///
    /// # Errors
    /// Store errors.
    pub fn record_operator_action(&self, call: &Call, force: bool, stdin: &str) -> Result<Answer> {
        let payload: Value = serde_json::from_str(stdin).unwrap_or(Value::Null);
        let prompt = payload.get("prompt").and_then(Value::as_str).map(str::to_owned);
        let scope = call.scope.as_str();
        self.decide(call, |txn| {
            let present = views::marker(txn, scope, Marker::LastOperatorAction)?.is_some();
            Ok(Ok(markers::record_operator_action(prompt.as_deref(), force, present, call.now_ms)))
        })
    }

    /// The Stop pipeline's close of the operator turn (`operator-turn-open.json` removed).
    ///
    /// # Errors
    /// Store errors.
    pub fn close_turn(&self, call: &Call) -> Result<Answer> {
        let scope = call.scope.as_str();
        self.decide(call, |txn| {
            let events = match views::marker(txn, scope, Marker::OperatorTurnOpen)? {
                Some(_) => vec![markers::close_turn()],
                None => Vec::new(),
            };
            Ok(Ok(Decided { events, verdict: Verdict { lines: Vec::new(), ..Verdict::line("") } }))
        })
    }

    /// The markers' readers (read-only): `operatorTurnOpen` (60-minute TTL), the pause in force
    /// (operator, then the automatic one, then the legacy `pause.json`), whether the queued
    /// close should be drained, as one JSON object.
    ///
    /// # Errors
    /// Store errors.
    pub fn markers(&self, scope: &str, now_ms: u64) -> Result<Answer> {
        let every = config(scope)?.heartbeat_every_minutes;
        self.read(scope, |txn| {
            let marker = |m| views::marker(txn, scope, m);
            let turn = markers::turn_open(marker(Marker::OperatorTurnOpen)?.as_ref(), now_ms);
            let (operator, auto) = (marker(Marker::OperatorPause)?, marker(Marker::AutoPause)?);
            let legacy = marker(Marker::LegacyPause)?;
            let pause = markers::paused(operator.as_ref(), auto.as_ref(), legacy.as_ref(), now_ms);
            let pause = pause.map(|p| {
                json!({ "reason": p.reason, "until": p.until,
                        "file": views::marker_name(p.marker) })
            });
            let runtime = views::runtime(txn, scope)?;
            let pending = marker(Marker::PendingClose)?;
            let last = marker(Marker::LastOperatorAction)?;
            let drain = markers::pending_close_drain_due(
                pending.as_ref(),
                runtime.as_ref(),
                last.as_ref(),
                now_ms,
            );
            let stamp = marker(Marker::PendingCloseDrain)?;
            let cooled = |minutes| markers::drain_cooldown_expired(stamp.as_ref(), now_ms, minutes);
            let routine = cooled(markers::DRAIN_COOLDOWN_MINUTES);
            let precheck = cooled(markers::precheck_cooldown_minutes(every));
            Ok(said(json!({ "turn_open": turn, "paused": pause, "pending_close_drain_due": drain,
                            "drain_cooldown_expired": routine,
                            "precheck_drain_cooldown_expired": precheck })))
        })
    }

    /// `setPause` (`operator` writes `operator-pause.json`; `watchdog` and `budget` write
    /// `auto-pause.json`, where a budget pause never replaces an active watchdog pause).
    ///
    /// # Errors
    /// [`Error::NotOneOf`] for a reason, [`Error::BadInput`] for an `until` that is neither a
    /// time nor a snooze; store errors.
    pub fn pause(&self, call: &Call, input: &PauseInput) -> Result<Answer> {
        if !PAUSE_REASONS.contains(&input.reason.as_str()) {
            let value = input.reason.clone();
            return Err(Error::NotOneOf { what: "pause reason", value, allowed: &PAUSE_REASONS });
        }
        let until = match input.until.as_deref() {
            None => None,
            Some(text) => Some(until_of(text, call.now_ms)?),
        };
        let scope = call.scope.as_str();
        self.decide(call, |txn| {
            let auto = views::marker(txn, scope, Marker::AutoPause)?;
            let events = markers::set_pause(
                &input.reason,
                &input.by,
                until.as_deref(),
                auto.as_ref(),
                call.now_ms,
            );
            let verdict =
                Verdict::line(if events.is_empty() { "NOOP|watchdog" } else { "OK|pause" });
            Ok(Ok(Decided { events, verdict }))
        })
    }

    /// `clearPause`: `operator` removes `operator-pause.json`, `auto` `auto-pause.json`.
    ///
    /// # Errors
    /// [`Error::NotOneOf`]; store errors.
    pub fn unpause(&self, call: &Call, which: &str) -> Result<Answer> {
        let marker = match which {
            "operator" => Marker::OperatorPause,
            "auto" => Marker::AutoPause,
            _ => {
                let allowed = &["operator", "auto"];
                return Err(Error::NotOneOf { what: "pause", value: which.into(), allowed });
            }
        };
        let scope = call.scope.as_str();
        self.decide(call, |txn| {
            let events = match views::marker(txn, scope, marker)? {
                Some(_) => vec![markers::clear_pause(marker)],
                None => Vec::new(),
            };
            Ok(Ok(Decided { events, verdict: Verdict::line("OK|unpause") }))
        })
    }

    /// `proposal.ts patch --request-compact`'s `compact-requested.json` (`proposal-resolve`,
    /// zonedISOStamp, compact).
    ///
    /// # Errors
    /// [`Error::BadTimeZone`]; store errors.
    pub fn compact_request(&self, call: &Call) -> Result<Answer> {
        let event =
            markers::compact_request_after_resolve(call.now_ms, &config(&call.scope)?.timezone)?;
        self.decide(call, |_| {
            Ok(Ok(Decided { events: vec![event.clone()], verdict: Verdict::line("OK|compact") }))
        })
    }

    /// `stampDrainCooldown`: a drain nudge was emitted now.
    ///
    /// # Errors
    /// Store errors.
    pub fn stamp_drain(&self, call: &Call) -> Result<Answer> {
        let event = markers::stamp_drain(call.now_ms);
        self.decide(call, |_| {
            Ok(Ok(Decided { events: vec![event.clone()], verdict: Verdict::line("OK|drain") }))
        })
    }

    /// `proposal.ts shell-append <dir> --section findings|progress|monitoring|blockers` with the
    /// line on stdin: `OK` or `ERROR|…` (exit 0).
    ///
    /// # Errors
    /// Store errors.
    pub fn shell_append(&self, call: &Call, section: Option<&str>, stdin: &str) -> Result<Answer> {
        let scope = call.scope.as_str();
        self.decide(call, |txn| {
            let text = views::text(txn, scope, views::SHELL_ID)?;
            Ok(shell::decide_append(text.as_deref(), section, stdin))
        })
    }

    /// The Monitoring lines an alerts tick returned (`monitoring_lines`), appended to
    /// `SHELL.md` in order: prints `{"appended":N,"append_error":…}` as the tick's caller does.
    ///
    /// # Errors
    /// Store errors.
    pub fn shell_monitoring(&self, call: &Call, lines: &[String]) -> Result<Answer> {
        let scope = call.scope.as_str();
        self.decide(call, |txn| {
            let text = views::text(txn, scope, views::SHELL_ID)?;
            let (events, appended, error) = shell::monitoring_lines(text.as_deref(), lines);
            let value = json!({ "appended": appended, "append_error": error });
            Ok(Ok(Decided { events, verdict: Verdict::json(&value) }))
        })
    }

    /// The Findings line `proposal.ts create` appends for a new PROP: `- <id>: <findings or
    /// title>`; `OK`, or `ERROR|shell-unreadable` / `ERROR|shell-append-failed` (exit 0).
    ///
    /// # Errors
    /// Store errors.
    pub fn shell_findings(
        &self,
        call: &Call,
        id: &str,
        findings: &str,
        title: &str,
    ) -> Result<Answer> {
        let event = shell::findings_line(id, findings, title);
        let hookstate_schema::session::SessionEvent::ShellAppended { line, .. } = &event else {
            return Err(Error::Corrupt("a findings line is an append".into()));
        };
        let line = line.clone();
        self.shell_append(call, Some("findings"), &line)
    }
}

/// A pause's `paused_until`: an ISO time as given, or a snooze from now as `toISOString`.
fn until_of(text: &str, now_ms: u64) -> Result<String> {
    if crate::kernel::compat::stamp::date_parse(text).is_some() {
        return Ok(text.to_owned());
    }
    let snooze = markers::parse_snooze(text).ok_or_else(|| {
        Error::bad(format!("until {text:?}"), "is neither a time nor <n> s|m|h|d")
    })?;
    Ok(crate::kernel::compat::stamp::stamp_ms(now_ms.saturating_add(snooze)))
}
