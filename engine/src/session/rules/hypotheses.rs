//! `later.ts` (Hn `@d152a7c`): hypotheses in `state/hypotheses.jsonl` — `add`, `list`, `due`,
//! `cancel`, `check` (recording a result the caller produced) and `verdict`. Only `pending` rows
//! change; a change re-serialises the ledger as upstream's locked rewrite does.
//!
//! Upstream's `check` runs the row's command itself; here the command's result (or the injection
//! scan's class) comes in as an argument, and the cron `later-check` schedule's fire times too.
//! Does not read files, run commands or read a clock.

use hookstate_schema::session::{Ledger, LineFile, SessionEvent, TaskDoc};
use serde_json::{json, Map, Value};

use super::task_doc::is_conversation_key;
use super::verdict::{stderr_message, Class, Decided, Decision, Refusal, Stream, Verdict};
use crate::kernel::compat::js::parse_number as js_number;
use crate::kernel::compat::stamp;
use crate::kernel::compat::text as js;

/// `DEFAULT_TIMEOUT_S`: a check's command timeout when `--timeout-s` is not given.
pub(crate) const TIMEOUT_S_DEFAULT: u64 = 30;
/// `MAX_TIMEOUT_S`.
pub(crate) const TIMEOUT_S_MAX: u64 = 300;
/// `list` shows every pending row and this many of the last settled ones.
pub(crate) const SETTLED_ROWS_LISTED: usize = 10;
/// Without a schedule, a check is late a day after `due`.
pub(crate) const LATE_AFTER_MS: i64 = 86_400_000;
/// The verdicts a `verdict` call may record.
pub(crate) const VERDICTS: [&str; 3] = ["held", "broken", "indeterminate"];

fn fail(message: &str, class: Class) -> Refusal {
    stderr_message(message, class)
}

/// `readRows`: every non-blank line that parses as a JSON object, in order.
#[must_use]
pub(crate) fn rows(file: &LineFile) -> Vec<Map<String, Value>> {
    file.lines
        .iter()
        .filter(|l| !js::trim(l).is_empty())
        .filter_map(|l| match serde_json::from_str(l) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        })
        .collect()
}

/// `heldClaim` (lib/tasks.ts): some line is a row with this id in state `held` (the store keeps
/// [`held_ids`] for it).
#[cfg(test)]
#[must_use]
pub(crate) fn held(file: &LineFile, id: &str) -> bool {
    rows(file).iter().any(|r| r.get("id").and_then(Value::as_str) == Some(id) && state(r) == "held")
}

/// The ids of the rows in state `held`, sorted, each once (what `heldClaim` looks for).
#[must_use]
pub(crate) fn held_ids(file: &LineFile) -> Vec<String> {
    let mut ids: Vec<String> = rows(file)
        .iter()
        .filter(|r| state(r) == "held")
        .filter_map(|r| r.get("id").and_then(Value::as_str).map(str::to_owned))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

fn state(row: &Map<String, Value>) -> &str {
    row.get("state").and_then(Value::as_str).unwrap_or_default()
}

/// `flagValue(args, name)`: the argument after the first `name`.
#[must_use]
pub(crate) fn flag_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

/// `chatFlag`: `--chat <key>` narrows to one conversation; a missing value fails.
///
/// # Errors
/// `invalid-key`.
pub(crate) fn chat_flag(args: &[String]) -> Result<Option<String>, Refusal> {
    if !args.iter().any(|a| a == "--chat") {
        return Ok(None);
    }
    let chat = flag_value(args, "--chat").unwrap_or_default();
    if is_conversation_key(chat) {
        Ok(Some(chat.to_owned()))
    } else {
        Err(fail("invalid-key", Class::Invalid))
    }
}

/// What `add` was given besides the row's id and the call's time.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AddInput<'a> {
    /// The arguments after the directory.
    pub(crate) args: &'a [String],
    /// A fresh `crypto.randomUUID()`.
    pub(crate) uuid: &'a str,
    /// The next `later-check` fire after now (toISOString), when the routine is enabled.
    pub(crate) next_fire: Option<String>,
}

/// `later.ts add --claim --due --origin operator|hermit [--cmd] [--chat] [--session]
/// [--timeout-s 1..300]`: appends a pending row; prints `OK|<id>|next_fire=<ISO|none>`.
///
/// # Errors
/// `invalid-key`, `invalid add arguments`, `--timeout-s must be an integer between 1 and 300`.
pub(crate) fn decide_add(input: &AddInput<'_>, now_ms: u64) -> Decision {
    let args = input.args;
    let claim = flag_value(args, "--claim").filter(|c| !c.is_empty());
    let cmd = flag_value(args, "--cmd");
    let chat = chat_flag(args)?;
    let due = flag_value(args, "--due").filter(|d| !d.is_empty()).and_then(stamp::date_normalise);
    let origin = flag_value(args, "--origin").filter(|o| *o == "operator" || *o == "hermit");
    let (Some(claim), Some(due), Some(origin)) = (claim, due, origin) else {
        return Err(fail("invalid add arguments", Class::Invalid));
    };
    let timeout = flag_value(args, "--timeout-s").map_or(30.0, js_number);
    #[expect(clippy::cast_precision_loss, reason = "the bound is a small integer")]
    let in_range = timeout.fract() == 0.0 && (1.0..=TIMEOUT_S_MAX as f64).contains(&timeout);
    if !in_range {
        let message = format!("--timeout-s must be an integer between 1 and {TIMEOUT_S_MAX}");
        return Err(fail(&message, Class::Invalid));
    }
    let mut row = Map::new();
    row.insert("id".into(), json!(input.uuid));
    row.insert("claim".into(), json!(claim));
    row.insert("cmd".into(), json!(cmd));
    row.insert("due".into(), json!(due));
    row.insert("origin".into(), json!(origin));
    row.insert("session".into(), json!(flag_value(args, "--session")));
    row.insert("created_at".into(), json!(stamp::stamp_ms(now_ms)));
    row.insert("state".into(), json!("pending"));
    if let Some(chat) = chat {
        row.insert("chat".into(), json!(chat));
    }
    #[expect(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "1..=300")]
    let seconds = timeout as u64;
    if seconds != TIMEOUT_S_DEFAULT {
        row.insert("timeout_s".into(), json!(seconds));
    }
    let line = crate::kernel::compat::js::compact(&Value::Object(row));
    let next = input.next_fire.clone().unwrap_or_else(|| "none".into());
    let verdict = Verdict::line(format!("OK|{}|next_fire={next}", input.uuid));
    Ok(Decided {
        events: vec![SessionEvent::LineAppended { ledger: Ledger::Hypotheses, line }],
        verdict,
    })
}

/// `later.ts list [--chat]`: the pending rows, then the last [`SETTLED_ROWS_LISTED`] settled
/// ones, one JSON line each, without `cmd` and `output`.
///
/// # Errors
/// `invalid-key`.
pub(crate) fn list(file: &LineFile, args: &[String]) -> Decision {
    let chat = chat_flag(args)?;
    let visible: Vec<Map<String, Value>> = rows(file)
        .into_iter()
        .filter(|r| {
            chat.as_deref().is_none_or(|c| r.get("chat").and_then(Value::as_str) == Some(c))
        })
        .collect();
    let settled: Vec<&Map<String, Value>> =
        visible.iter().filter(|r| state(r) != "pending").collect();
    let skip = settled.len().saturating_sub(SETTLED_ROWS_LISTED);
    let shown =
        visible.iter().filter(|r| state(r) == "pending").chain(settled.into_iter().skip(skip));
    let lines = shown
        .map(|r| {
            let mut summary = r.clone();
            summary.shift_remove("cmd");
            summary.shift_remove("output");
            crate::kernel::compat::js::compact(&Value::Object(summary))
        })
        .collect();
    Ok(Decided {
        events: Vec::new(),
        verdict: Verdict { lines, stream: Stream::Stdout, upstream_exit: 0 },
    })
}

/// `later.ts due`: `WAKE` when an open task carries a result and a check, or a pending row is
/// due; else `SKIP`.
#[must_use]
pub(crate) fn due(file: &LineFile, tasks: &[TaskDoc], now_ms: u64) -> Verdict {
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let filled = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    let task_due =
        tasks.iter().any(|t| t.status == "open" && filled(&t.result) && filled(&t.check));
    let row_due = rows(file).iter().any(|r| {
        state(r) == "pending"
            && r.get("due")
                .and_then(Value::as_str)
                .and_then(stamp::date_parse)
                .is_some_and(|d| d <= now)
    });
    Verdict::line(if task_due || row_due { "WAKE" } else { "SKIP" })
}

/// `isLate`: checked at or after the second scheduled fire after `due` (when the routine has
/// fires), else more than a day after `due`.
#[must_use]
pub(crate) fn is_late(due: &str, now_ms: u64, second_fire_ms: Option<u64>) -> bool {
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    match second_fire_ms {
        Some(second) => now >= i64::try_from(second).unwrap_or(i64::MAX),
        None => stamp::date_parse(due).is_some_and(|d| now > d + LATE_AFTER_MS),
    }
}

/// What a `check` found: the injection scan's class, or the command's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckOutcome {
    /// `scanForInjection` flagged the claim or the command.
    Injection(String),
    /// The command ran (`exit` null for a row without `cmd`).
    Ran {
        /// Its exit code.
        exit: Option<i64>,
        /// Its output.
        output: String,
        /// Whether it was killed at its timeout.
        timed_out: bool,
    },
}

/// The pending row a `cancel|check|verdict <id> [--chat]` acts on, or what upstream prints.
fn target(
    file: &LineFile,
    args: &[String],
) -> Result<Result<Map<String, Value>, Verdict>, Refusal> {
    let chat = chat_flag(args)?;
    let id = args.first().map(String::as_str);
    let row = rows(file).into_iter().find(|r| {
        r.get("id").and_then(Value::as_str) == id
            && chat.as_deref().is_none_or(|c| r.get("chat").and_then(Value::as_str) == Some(c))
    });
    let Some(row) = row else { return Err(fail("unknown id", Class::Invalid)) };
    if state(&row) != "pending" {
        return Ok(Err(Verdict::line(format!("NOOP|{}", state(&row)))));
    }
    Ok(Ok(row))
}

fn patch(row: &Map<String, Value>, sets: Vec<(&str, Value)>) -> SessionEvent {
    let id = row.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
    let sets = sets
        .into_iter()
        .map(|(k, v)| (k.to_owned(), crate::kernel::compat::js::compact(&v)))
        .collect();
    SessionEvent::HypothesisPatched { id, sets }
}

/// `later.ts cancel|check|verdict <id> …` on a pending row. `late` is [`is_late`]'s answer
/// for the row; `reason` is stdin (for `verdict`); `outcome` what the check found.
///
/// # Errors
/// `unknown verb`, `invalid-key`, `unknown id`, `invalid verdict arguments`, `reason required`.
pub(crate) fn decide_settle(
    verb: &str,
    file: &LineFile,
    args: &[String],
    outcome: Option<&CheckOutcome>,
    reason: &str,
    late: bool,
    now_ms: u64,
) -> Decision {
    if !["cancel", "check", "verdict"].contains(&verb) {
        return Err(fail("unknown verb", Class::Usage));
    }
    let row = match target(file, args)? {
        Ok(row) => row,
        Err(noop) => return Ok(Decided { events: Vec::new(), verdict: noop }),
    };
    let id = row.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
    let at = json!(stamp::stamp_ms(now_ms));
    let (event, verdict) = match (verb, outcome) {
        ("cancel", _) => {
            (patch(&row, vec![("state", json!("cancelled"))]), format!("OK|{id}|cancelled"))
        }
        ("check", Some(CheckOutcome::Injection(class))) => {
            let why = format!("injection-suspect:{class}");
            let sets = vec![
                ("state", json!("indeterminate")),
                ("reason", json!(why)),
                ("checked_at", at),
                ("late", json!(late)),
            ];
            (patch(&row, sets), why)
        }
        ("check", Some(CheckOutcome::Ran { exit, output, timed_out })) => {
            let event = patch(&row, vec![("exit", json!(exit)), ("output", json!(output))]);
            let mut shown = row.clone();
            shown.insert("exit".into(), json!(exit));
            shown.insert("output".into(), json!(output));
            shown.insert("timed_out".into(), json!(timed_out));
            shown.insert("late".into(), json!(late));
            (event, crate::kernel::compat::js::compact(&Value::Object(shown)))
        }
        ("check", None) => return Err(fail("check needs its result", Class::Usage)),
        _ => {
            let state = args.get(1).map(String::as_str).filter(|s| VERDICTS.contains(s));
            let Some(state) = state.filter(|_| args.iter().any(|a| a == "--reason-stdin")) else {
                return Err(fail("invalid verdict arguments", Class::Invalid));
            };
            let first = js::trim(reason).split('\n').next().unwrap_or_default();
            let first = first.strip_suffix('\r').unwrap_or(first);
            if first.is_empty() {
                return Err(fail("reason required", Class::Invalid));
            }
            let sets = vec![
                ("state", json!(state)),
                ("reason", json!(first)),
                ("checked_at", at),
                ("late", json!(late)),
            ];
            (patch(&row, sets), format!("OK|{id}|{state}"))
        }
    };
    Ok(Decided { events: vec![event], verdict: Verdict::line(verdict) })
}

/// The ledger after a `HypothesisPatched` event: the first row with the id, when pending, gets
/// the fields assigned; every parseable line is re-serialised, blank and unparseable lines are
/// dropped, one row per line.
pub(crate) fn apply_patch(file: &mut LineFile, id: &str, sets: &[(String, String)]) {
    let mut lines: Vec<String> = Vec::new();
    let mut found = false;
    for line in file.lines.iter().filter(|l| !js::trim(l).is_empty()) {
        let Ok(mut value) = serde_json::from_str::<Value>(line) else { continue };
        if let Value::Object(row) = &mut value {
            if !found && row.get("id").and_then(Value::as_str) == Some(id) {
                found = true;
                if state(row) == "pending" {
                    for (key, raw) in sets {
                        row.insert(key.clone(), serde_json::from_str(raw).unwrap_or(Value::Null));
                    }
                }
            }
        }
        lines.push(crate::kernel::compat::js::compact(&js::object_order(value)));
    }
    lines.push(String::new());
    file.lines = lines;
}

#[cfg(test)]
mod tests;
