//! The session domain's handle, `engine.session()`: every verb of `task.ts`, `conversation.ts`,
//! `observations.ts`, `prune-observations`, `later.ts`, `session-archive.ts`,
//! `record-operator-action.ts` and `proposal.ts shell-append` is one decision (`rules/`) in one
//! write transaction over the rows it needs (`views.rs`), answered with upstream's verdict lines
//! and exit code ([`Answer`]).
//!
//! The verbs live in `api_tasks.rs`, `api_ledgers.rs` and `api_archive.rs`; this file holds the
//! handle, the answer and the plumbing they share. Does not touch legacy files except the
//! read-only `config.json`, `sessions/.status.json` and `state/session-diff.json`.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use hookstate_schema::session::SessionEvent;
use hookstate_schema::Body;
use serde_json::{json, Map, Value};

use super::rules::verdict::{Class, Decision, Refusal as SessionRefusal, Stream, Verdict};
use super::rules::{archive::Compact, chunk};
use crate::kernel::call::{Call, Outcome, Plan, Refusal};
use crate::kernel::compat::stamp;
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::write::Kernel;
use crate::legacy::root::Root;

/// claude-code-hermit's session state on an open store: `engine.session()`.
#[derive(Clone, Copy)]
pub struct Session<'a> {
    pub(super) k: &'a Kernel,
}

impl<'a> Session<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Session { k }
    }
}

/// How a session verb ends: hookstate's exit classes (`cli/src/exit.rs` maps each to its code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done (exit 0), including the `ERROR|…` lines upstream prints with exit 0.
    Ok,
    /// Refused: a lost claim, a stale revision, an illegal move, and every error upstream exits
    /// 1 or 2 for under `--format verdict` (exit 1).
    Refused,
    /// Input the rules reject (exit 3; JSON format only).
    Invalid,
    /// A call upstream would not parse (exit 64, never 2).
    Usage,
}

/// What a session verb answers: the outcome (the JSON result, with a refusal for a "no"),
/// what upstream's script prints, and the exit of each format.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The result: `verdict` (upstream's lines), `answer` (a JSON line parsed), `seq`/`hash`.
    pub outcome: Outcome,
    /// Upstream's lines and where they go.
    pub verdict: Verdict,
    /// The exit under `--format verdict`: upstream's code, its 2 as [`Exit::Usage`] for a usage
    /// error and [`Exit::Refused`] otherwise.
    pub verdict_exit: Exit,
    /// The exit of the JSON and text formats: [`Exit::Ok`] unless refused, then the class.
    pub exit: Exit,
}

/// What `config.json` says to the session verbs (upstream `readSettledConfig`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Config {
    /// `timezone`, `UTC` when unset or empty.
    pub(crate) timezone: String,
    /// `escalation` as written.
    pub(crate) escalation: Option<String>,
    /// `compact`, over the defaults.
    pub(crate) compact: Compact,
    /// `heartbeat.every` in minutes (`<n> s|m|h`; 30 when unset or unreadable, upstream's 1800 s).
    pub(crate) heartbeat_every_minutes: f64,
}

/// The heartbeat's interval when `config.heartbeat.every` does not say: upstream's 1800 s.
const HEARTBEAT_EVERY_MS_DEFAULT: u64 = 1_800_000;

/// `config.json` is a page of settings.
const CONFIG_BYTES_MAX: usize = 256 * 1024;
/// `.status.json` and `session-diff.json` are small summaries.
const SUMMARY_BYTES_MAX: usize = 1024 * 1024;

/// The scope of the hermit whose state directory is `dir` (absolute, symlinks resolved when it
/// exists), and that directory.
///
/// # Errors
/// [`Error::BadInput`] for a directory that is not UTF-8 or cannot be made absolute.
pub fn hermit_scope(dir: &Path) -> Result<(String, PathBuf)> {
    let abs = std::fs::canonicalize(dir)
        .or_else(|_| std::path::absolute(dir))
        .map_err(|e| Error::bad(format!("state directory {}", dir.display()), e.to_string()))?;
    let text = abs.to_str().ok_or_else(|| Error::bad("state directory", "is not UTF-8"))?;
    Ok((hookstate_schema::hermit::scope_of(text), abs.clone()))
}

/// The state directory of a hermit scope.
///
/// # Errors
/// [`Error::BadInput`] for a scope that is not `hermit:<abs dir>`.
pub fn scope_dir(scope: &str) -> Result<PathBuf> {
    match hookstate_schema::hermit::dir_of(scope) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => Err(Error::bad(format!("scope {scope:?}"), "is not hermit:<abs state dir>")),
    }
}

/// A small JSON file under the state directory, parsed; `None` when absent or unreadable, as
/// upstream's readers treat both.
pub(crate) fn read_json(dir: &Path, parts: &[&str], max: usize) -> Option<Value> {
    let (name, dirs) = parts.split_last()?;
    let mut root = Root::open(dir, false).ok()?;
    for part in dirs {
        root = root.subdir(part, false).ok()??;
    }
    let bytes = root.read(name, max).ok()??;
    serde_json::from_slice(&bytes).ok()
}

/// `config.json`'s settings for `scope` (defaults when absent or unreadable).
pub(crate) fn config(scope: &str) -> Result<Config> {
    let dir = scope_dir(scope)?;
    let value = read_json(&dir, &["config.json"], CONFIG_BYTES_MAX).unwrap_or(Value::Null);
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    let timezone = text("timezone").filter(|t| !t.is_empty()).unwrap_or_else(|| "UTC".into());
    stamp::zone(&timezone)?;
    let mut compact = Compact::default();
    let number = |key: &str| value.get("compact")?.get(key)?.as_u64();
    let slots = [
        ("monitoring_threshold", &mut compact.monitoring_threshold),
        ("monitoring_keep", &mut compact.monitoring_keep),
        ("summary_threshold", &mut compact.summary_threshold),
        ("summary_keep", &mut compact.summary_keep),
    ];
    for (key, slot) in slots {
        if let Some(n) = number(key) {
            *slot = n;
        }
    }
    let every = value.get("heartbeat").and_then(|h| h.get("every")?.as_str().map(str::to_owned));
    let every_ms = every
        .as_deref()
        .and_then(super::rules::runtime::parse_duration)
        .unwrap_or(HEARTBEAT_EVERY_MS_DEFAULT);
    #[expect(clippy::cast_precision_loss, reason = "minutes of an interval, far below 2^53")]
    let heartbeat_every_minutes = every_ms as f64 / 60_000.0;
    Ok(Config { timezone, escalation: text("escalation"), compact, heartbeat_every_minutes })
}

/// `sessions/.status.json`'s `operator_turns` (0 when absent).
pub(crate) fn operator_turns(scope: &str) -> Result<f64> {
    let status = read_json(&scope_dir(scope)?, &["sessions", ".status.json"], SUMMARY_BYTES_MAX);
    Ok(status.and_then(|s| s.get("operator_turns")?.as_f64()).unwrap_or(0.0))
}

/// `state/session-diff.json`'s `changed_files` as `(file, status)`.
pub(crate) fn changed_files(scope: &str) -> Result<Vec<(String, String)>> {
    let dir = scope_dir(scope)?;
    let diff = read_json(&dir, &["state", "session-diff.json"], SUMMARY_BYTES_MAX);
    let files = diff.as_ref().and_then(|d| d.get("changed_files")?.as_array().cloned());
    Ok(files
        .unwrap_or_default()
        .iter()
        .map(|f| {
            let text = |k: &str| {
                f.get(k).map_or_else(|| "undefined".into(), crate::kernel::compat::js::value_string)
            };
            (text("file"), text("status"))
        })
        .collect())
}

fn class_exit(class: Class) -> Exit {
    match class {
        Class::Refused => Exit::Refused,
        Class::Invalid => Exit::Invalid,
        Class::Usage => Exit::Usage,
    }
}

/// The exit of a verdict under `--format verdict`.
fn verdict_exit(verdict: &Verdict, class: Option<Class>) -> Exit {
    match (verdict.upstream_exit, class) {
        (0, _) => Exit::Ok,
        (2, Some(Class::Usage)) => Exit::Usage,
        _ => Exit::Refused,
    }
}

/// The result fields of a verdict: its lines, and a single JSON line parsed.
fn verdict_fields(verdict: &Verdict) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("verdict".into(), json!(verdict.lines.join("\n")));
    if let [line] = verdict.lines.as_slice() {
        if let Ok(value @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str(line) {
            out.insert("answer".into(), value);
        }
    }
    out
}

fn refusal_reason(class: Class) -> &'static str {
    match class {
        Class::Refused => "refused",
        Class::Invalid => "invalid",
        Class::Usage => "usage",
    }
}

/// A session refusal as the kernel's.
fn refusal(r: &SessionRefusal) -> Refusal {
    let said = r.verdict.lines.join(" ");
    let message = if said == r.token { said } else { format!("{}: {said}", r.token) };
    let details = json!({ "error": r.token, "verdict": r.verdict.lines.join("\n") });
    Refusal::new(refusal_reason(r.class), message, details)
}

/// A decided `{"ok":false,…}` JSON verdict (session-archive's refusals) as a refusal class.
fn failed_json(verdict: &Verdict) -> Option<String> {
    let [line] = verdict.lines.as_slice() else { return None };
    let value: Value = serde_json::from_str(line).ok()?;
    (value.get("ok") == Some(&Value::Bool(false)))
        .then(|| value.get("reason").and_then(Value::as_str).unwrap_or("not-ok").to_owned())
}

/// A decision as a plan, and the verdict it prints with its exits.
fn plan_of(decision: Decision) -> (Plan, Verdict, Exit, Exit) {
    match decision {
        Ok(decided) => {
            let fields = verdict_fields(&decided.verdict);
            let events = chunk::split(decided.events).into_iter().map(Body::Session).collect();
            let mut plan = Plan { events, result: fields, ..Plan::default() };
            let exit = match failed_json(&decided.verdict) {
                Some(reason) if plan.events.is_empty() => {
                    let details = json!({ "error": reason, "verdict": decided.verdict.lines });
                    // Upstream prints it with exit 0.
                    plan.refusal = Some(Refusal::new("refused", reason, details).verdict_ok());
                    Exit::Refused
                }
                _ => Exit::Ok,
            };
            let verdict_exit = verdict_exit(&decided.verdict, None);
            (plan, decided.verdict, verdict_exit, exit)
        }
        Err(r) => {
            let verdict_exit = verdict_exit(&r.verdict, Some(r.class));
            let refused = refusal(&r);
            let refused = if verdict_exit == Exit::Ok { refused.verdict_ok() } else { refused };
            let plan = Plan { refusal: Some(refused), ..Plan::default() };
            (plan, r.verdict, verdict_exit, class_exit(r.class))
        }
    }
}

/// What a decision left for its answer (the write path may call it again under the drills).
type Said = RefCell<Option<(Verdict, Exit, Exit)>>;

impl Session<'_> {
    /// Runs one decision in one write transaction and answers it.
    pub(super) fn decide(
        &self,
        call: &Call,
        decide: impl Fn(&dyn ReadTxn) -> Result<Decision>,
    ) -> Result<Answer> {
        crate::kernel::write::validate_call(call)?;
        scope_dir(&call.scope)?;
        stamp::check_time(call.now_ms)?;
        let said: Said = RefCell::new(None);
        let outcome = self.k.write(call, |txn| {
            let (plan, verdict, verdict_exit, exit) = plan_of(decide(txn)?);
            *said.borrow_mut() = Some((verdict, verdict_exit, exit));
            Ok(plan)
        })?;
        Ok(answer(outcome, said.into_inner()))
    }

    /// Answers a decision that appends nothing from one read snapshot.
    pub(super) fn read(
        &self,
        scope: &str,
        decide: impl FnOnce(&dyn ReadTxn) -> Result<Decision>,
    ) -> Result<Answer> {
        hookstate_schema::validate_scope(scope)?;
        scope_dir(scope)?;
        let txn = self.k.begin_read()?;
        let (plan, verdict, verdict_exit, exit) = plan_of(decide(&*txn)?);
        let outcome = self.k.answer_read(&*txn, Plan { events: Vec::new(), ..plan })?;
        Ok(answer(outcome, Some((verdict, verdict_exit, exit))))
    }
}

fn answer(outcome: Outcome, said: Option<(Verdict, Exit, Exit)>) -> Answer {
    // A replay of an idempotent call decided nothing: it answers with its JSON.
    let (verdict, verdict_exit, exit) = said.unwrap_or_else(|| {
        let line = outcome.to_json().to_string();
        (
            Verdict { lines: vec![line], stream: Stream::Stdout, upstream_exit: 0 },
            Exit::Ok,
            Exit::Ok,
        )
    });
    Answer { outcome, verdict, verdict_exit, exit }
}

/// The events a decision made, for the write path (tests and the import build plans directly).
pub(crate) fn bodies(events: Vec<SessionEvent>) -> Vec<Body> {
    chunk::split(events).into_iter().map(Body::Session).collect()
}
