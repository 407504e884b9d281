//! `task.ts` (Hn `@1223a43`) over `lib/tasks.ts` (Hn `@080928a`): the argument rules, `open`
//! (id, handle, dedupe key, card), `list` with its labels, the `task-turn.json` binding and
//! `readExecution`. The mutations of open tasks are in `task_verbs`.
//!
//! Pure: the task records, markers and time come in as values. Does not read files or the store.

use std::collections::BTreeMap;

use hookstate_schema::session::{JsonDoc, Marker, SessionEvent, Style, TaskDoc, TaskEdit};
use serde_json::{json, Map, Value};

use super::task_doc::{self as doc, is_conversation_key, is_iso, is_requester, is_task_id};
use super::task_doc::{Tasks, With};
use super::verdict::{task_error, Class, Decided, Decision, Refusal, Verdict};
use crate::kernel::compat::stamp;
use crate::kernel::compat::text as js;
use crate::legacy::json as legacy_json;

/// Rows `list` prints (upstream's default `--limit`).
pub(crate) const LIST_ROWS_DEFAULT: usize = 20;
/// An `in_flight` execution older than this reads as `unknown`, and a turn binding older than
/// this is not extended (upstream's `HOUR`).
pub(crate) const TURN_STALE_MS: u64 = 3_600_000;

/// The verbs `task.ts` accepts, with their allowed flags (`standup` is parsed, not built).
pub(crate) const VERBS: [(&str, &[&str]); 7] = [
    (
        "open",
        &[
            "title",
            "requester",
            "done",
            "requester-name",
            "origin-message-id",
            "due",
            "conversation",
            "card",
            "owner",
            "approver",
            "dedupe-key",
            "claim",
        ],
    ),
    ("note", &["actor", "due", "card", "decision", "approval", "done", "clear-waiting"]),
    ("block", &["waiting-on", "result-stdin", "status-line", "next"]),
    ("close", &["by", "actor", "result-rev", "reason-stdin", "claim"]),
    ("cancel", &["actor", "reason-stdin"]),
    ("list", &["open", "all", "conversation", "requester", "handle", "id", "dedupe-key", "json"]),
    ("standup", &["json", "days"]),
];
/// Flags that take no value.
pub(crate) const BOOLEAN_FLAGS: [&str; 7] =
    ["decision", "clear-waiting", "result-stdin", "reason-stdin", "open", "all", "json"];
/// The verbs that name a task id before their flags.
pub(crate) const ID_VERBS: [&str; 4] = ["note", "block", "close", "cancel"];

/// One parsed flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Flag {
    /// A boolean flag, present.
    On,
    /// A flag with its value.
    Value(String),
    /// `--claim`, repeatable.
    List(Vec<String>),
}

/// A parsed `task.ts` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskCall {
    /// The verb.
    pub(crate) verb: String,
    /// The task id of `note`, `block`, `close`, `cancel`.
    pub(crate) id: Option<String>,
    /// The flags by name (without `--`).
    pub(crate) flags: BTreeMap<String, Flag>,
}

impl TaskCall {
    /// `flag()`: a flag's value when it has one.
    #[must_use]
    pub(crate) fn value(&self, name: &str) -> Option<&str> {
        match self.flags.get(name) {
            Some(Flag::Value(v)) => Some(v),
            _ => None,
        }
    }

    /// `name in flags`.
    #[must_use]
    pub(crate) fn has(&self, name: &str) -> bool {
        self.flags.contains_key(name)
    }

    /// `required()`: the value, trimmed and cleaned; `missing-<name>` when absent or blank.
    ///
    /// # Errors
    /// The refusal.
    pub(crate) fn required(&self, name: &str) -> Result<String, Refusal> {
        match self.value(name).map(js::trim) {
            Some(v) if !v.is_empty() => Ok(doc::clean(v)),
            _ => Err(task_error(format!("missing-{name}"), Class::Invalid)),
        }
    }

    /// `dateFlag()`: null when absent or empty, else the toISOString of the date;
    /// `invalid-<name>` when it does not parse.
    ///
    /// # Errors
    /// The refusal.
    pub(crate) fn date(&self, name: &str) -> Result<Option<String>, Refusal> {
        match self.value(name) {
            None | Some("") => Ok(None),
            Some(v) if is_iso(v) => Ok(stamp::date_normalise(v)),
            Some(_) => Err(task_error(format!("invalid-{name}"), Class::Invalid)),
        }
    }

    /// The `--claim` values, in order.
    #[must_use]
    pub(crate) fn claims(&self) -> Vec<String> {
        match self.flags.get("claim") {
            Some(Flag::List(v)) => v.clone(),
            _ => Vec::new(),
        }
    }
}

/// Parses `task.ts <verb> <dir> [id] [--flags]` after the directory, as upstream's `main` does.
///
/// # Errors
/// `invalid-verb`, `invalid-id`, `invalid-flag`, `missing-<flag>`, `duplicate-flag`.
pub(crate) fn parse_args(verb: &str, args: &[String]) -> Result<TaskCall, Refusal> {
    let Some((_, allowed)) = VERBS.iter().find(|(v, _)| *v == verb) else {
        return Err(task_error("invalid-verb", Class::Usage));
    };
    let mut rest = args.iter();
    let id = if ID_VERBS.contains(&verb) {
        match rest.next() {
            Some(id) if is_task_id(id) => Some(id.clone()),
            _ => return Err(task_error("invalid-id", Class::Invalid)),
        }
    } else {
        None
    };
    let mut flags: BTreeMap<String, Flag> = BTreeMap::new();
    while let Some(token) = rest.next() {
        let name = token.strip_prefix("--").filter(|n| allowed.contains(n));
        let Some(name) = name else {
            return Err(task_error("invalid-flag", Class::Usage));
        };
        if BOOLEAN_FLAGS.contains(&name) {
            flags.insert(name.to_owned(), Flag::On);
            continue;
        }
        let value = match rest.next() {
            Some(v) if !v.starts_with("--") => v.clone(),
            _ => return Err(task_error(format!("missing-{name}"), Class::Invalid)),
        };
        let entry = match (name, flags.get_mut(name)) {
            ("claim", Some(Flag::List(list))) => {
                list.push(value);
                continue;
            }
            ("claim", _) => Flag::List(vec![value]),
            (_, Some(_)) => return Err(task_error("duplicate-flag", Class::Usage)),
            (_, None) => Flag::Value(value),
        };
        flags.insert(name.to_owned(), entry);
    }
    let call = TaskCall { verb: verb.to_owned(), id, flags };
    if call.value("id").is_some_and(|v| !is_task_id(v)) {
        return Err(task_error("invalid-id", Class::Invalid));
    }
    Ok(call)
}

/// What `bindTaskTurn` reads besides the task id: `execution.json`, the current binding, and the
/// `observed_at` of the session's last non-subagent cost row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TurnInputs {
    /// `state/execution.json`, when present.
    pub(crate) execution: Option<JsonDoc>,
    /// `state/task-turn.json`, when present.
    pub(crate) binding: Option<JsonDoc>,
    /// The last cost row's `observed_at` for the execution's session.
    pub(crate) last_observed_at: Option<String>,
}

fn raw_value(doc: &JsonDoc, key: &str) -> Option<Value> {
    doc.raw(key).and_then(|raw| serde_json::from_str(raw).ok())
}

fn truthy(value: Option<&Value>) -> bool {
    value.is_some_and(crate::kernel::compat::js::truthy)
}

/// `readExecution` (without the session-registry fallback): `execution.json` over the empty
/// record, or the empty record when it is missing, of an unknown state or without an ISO `at`;
/// an `in_flight` state older than [`TURN_STALE_MS`] reads as `unknown`.
#[must_use]
pub(crate) fn read_execution(execution: Option<&JsonDoc>, now_ms: u64) -> Map<String, Value> {
    let mut out = Map::new();
    for key in ["state", "turn_id", "at", "source", "cc_session_id", "reason"] {
        out.insert(key.into(), if key == "state" { json!("unknown") } else { Value::Null });
    }
    let Some(Value::Object(raw)) = execution.map(legacy_json::to_value) else {
        return out;
    };
    let state = raw.get("state").and_then(Value::as_str).unwrap_or_default().to_owned();
    let at = raw.get("at").and_then(Value::as_str).unwrap_or_default().to_owned();
    if !["in_flight", "idle", "unknown"].contains(&state.as_str()) || !is_iso(&at) {
        return out;
    }
    out.extend(raw);
    let age = i64::try_from(now_ms).unwrap_or(i64::MAX) - stamp::date_parse(&at).unwrap_or(0);
    let stale = state == "in_flight" && age > i64::try_from(TURN_STALE_MS).unwrap_or(i64::MAX);
    out.insert("state".into(), json!(if stale { "unknown" } else { state.as_str() }));
    out
}

/// `readBinding`: the binding when its session is a string, `at` an ISO time and `task_ids` a
/// non-empty list of task ids.
fn read_binding(binding: Option<&JsonDoc>) -> Option<(Value, String, Vec<String>)> {
    let binding = binding?;
    let session = raw_value(binding, "cc_session_id").filter(Value::is_string)?;
    let at = legacy_json::str_field(binding, "at").filter(|at| is_iso(at))?;
    let ids: Vec<String> = serde_json::from_str(binding.raw("task_ids")?).ok()?;
    (!ids.is_empty() && ids.iter().all(|id| is_task_id(id))).then_some((session, at, ids))
}

/// `bindTaskTurn`: after a write that carried progress, `task-turn.json` binds the execution's
/// session to the task (extending a fresh binding of the same session).
#[must_use]
pub(crate) fn bind_turn(id: &str, inputs: &TurnInputs, now_ms: u64) -> Option<SessionEvent> {
    let execution = read_execution(inputs.execution.as_ref(), now_ms);
    let session = execution.get("cc_session_id").filter(|v| truthy(Some(v)))?.clone();
    let previous = read_binding(inputs.binding.as_ref());
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let keep = previous.as_ref().filter(|(s, at, _)| {
        *s == session
            && now - stamp::date_parse(at).unwrap_or(0) <= i64::try_from(TURN_STALE_MS).unwrap_or(0)
            && inputs.last_observed_at.as_deref().is_none_or(|o| o.is_empty() || at.as_str() > o)
    });
    let (mut ids, at) = match keep {
        Some((_, at, ids)) => (ids.clone(), at.clone()),
        None => (Vec::new(), stamp::stamp_ms(now_ms)),
    };
    if !ids.iter().any(|t| t == id) {
        ids.push(id.to_owned());
    }
    let turn = execution.get("turn_id").cloned().unwrap_or(Value::Null);
    let fields = vec![
        ("cc_session_id".to_owned(), crate::kernel::compat::js::compact(&session)),
        ("task_ids".to_owned(), crate::kernel::compat::js::compact(&json!(ids))),
        ("at".to_owned(), legacy_json::string(&at)),
        ("turn_id".to_owned(), crate::kernel::compat::js::compact(&turn)),
    ];
    let doc = JsonDoc { fields, style: Style::Compact };
    Some(SessionEvent::MarkerWritten { marker: Marker::TaskTurn, doc })
}

/// `openDigest`.
fn open_digest(task: &TaskDoc, tasks: &dyn Tasks, created: bool, now_ms: u64) -> Value {
    let open_count = tasks.open_count();
    let queued = doc::listing(task, tasks, now_ms).iter().any(|l| l == "queued");
    json!({ "id": task.id, "handle": task.handle, "created": created,
            "open_count": open_count, "queued": queued })
}

/// `card()`: the resident-only `{"chat_id","message_id"}` card, both non-empty strings.
///
/// # Errors
/// `card-on-helper-task`, `invalid-card`.
pub(crate) fn card_edits(owner: &str, card: Option<&str>) -> Result<Vec<TaskEdit>, Refusal> {
    let Some(card) = card else { return Ok(Vec::new()) };
    if owner != "resident" {
        return Err(task_error("card-on-helper-task", Class::Invalid));
    }
    let invalid = || task_error("invalid-card", Class::Invalid);
    let Ok(Value::Object(input)) = serde_json::from_str::<Value>(js::trim(card)) else {
        return Err(invalid());
    };
    let text = |k: &str| input.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let (Some(chat), Some(message)) = (text("chat_id"), text("message_id")) else {
        return Err(invalid());
    };
    if input.keys().any(|k| k != "chat_id" && k != "message_id") {
        return Err(invalid());
    }
    use hookstate_schema::session::TaskField::{CardChatId, CardMessageId};
    Ok(vec![
        TaskEdit::Set { field: CardChatId, value: Some(chat.to_owned()) },
        TaskEdit::Set { field: CardMessageId, value: Some(message.to_owned()) },
    ])
}

fn open_checks(call: &TaskCall) -> Result<(String, Option<String>, String), Refusal> {
    let requester = call.required("requester")?;
    if !is_requester(&requester) {
        return Err(task_error("invalid-requester", Class::Invalid));
    }
    let conversation = call.value("conversation").map(str::to_owned);
    if conversation.as_deref().is_some_and(|c| !is_conversation_key(c)) {
        return Err(task_error("invalid-conversation", Class::Invalid));
    }
    let owner = call.value("owner").unwrap_or("resident").to_owned();
    if owner != "resident" && !owner.strip_prefix("helper:").is_some_and(is_conversation_key) {
        return Err(task_error("invalid-owner", Class::Invalid));
    }
    Ok((requester, conversation, owner))
}

/// `task.ts open`: a new record, or (dedupe key of an open record) that record's digest with
/// `created:false` and nothing written.
///
/// # Errors
/// Upstream's tokens: `missing-requester`, `invalid-requester`, `invalid-conversation`,
/// `invalid-owner`, `missing-title`, `id-collision`, `missing-done`, `invalid-due`,
/// `card-on-helper-task`, `invalid-card`, `invalid-record`.
pub(crate) fn decide_open(
    tasks: &dyn Tasks,
    call: &TaskCall,
    turn: &TurnInputs,
    now_ms: u64,
) -> Decision {
    let (requester, conversation, owner) = open_checks(call)?;
    let dedupe = call.value("dedupe-key").map(str::to_owned);
    let existing =
        dedupe.as_deref().filter(|d| !d.is_empty()).and_then(|d| tasks.open_by_dedupe(d));
    if let Some(existing) = existing {
        let digest = open_digest(&existing, tasks, false, now_ms);
        return Ok(Decided { events: Vec::new(), verdict: Verdict::json(&digest) });
    }
    let title = call.required("title")?;
    let handle = doc::handle_for(&title, tasks);
    let now = stamp::stamp_ms(now_ms);
    let id =
        doc::allocate_id(tasks, &now).ok_or_else(|| task_error("id-collision", Class::Refused))?;
    let summary = match call.value("done") {
        Some(done) => doc::clean(done),
        None => call.required("done")?,
    };
    let due = call.date("due")?;
    let cleaned = |name: &str| call.value(name).map(doc::clean);
    let mut task = doc::fresh(id, title, &now, summary, requester.clone(), handle, owner);
    task.requester_name = cleaned("requester-name");
    task.origin_message_id = cleaned("origin-message-id");
    task.approver = cleaned("approver");
    task.due = due;
    task.conversation.clone_from(&conversation);
    task.dedupe_key = dedupe.as_deref().map(doc::clean);
    task.claims = call.claims();
    task.audience = conversation.unwrap_or_else(|| "operator".into());
    let mut edits = card_edits(&task.owner, call.value("card"))?;
    let opened = format!("Opened: {}", task.summary);
    edits.push(TaskEdit::Append { section: "Progress".into(), actor: requester, text: opened });
    for edit in &edits {
        doc::apply_edit(&mut task, &now, edit);
    }
    if !doc::is_valid(&task) {
        return Err(task_error("invalid-record", Class::Invalid));
    }
    let digest = open_digest(&task, &With { base: tasks, task: &task }, true, now_ms);
    let mut events = vec![SessionEvent::TaskOpened { task: Box::new(task.clone()), path: None }];
    events.extend(bind_turn(&task.id, turn, now_ms));
    Ok(Decided { events, verdict: Verdict::json(&digest) })
}

/// A record field a `list` filter compares.
type Field = fn(&TaskDoc) -> Option<&str>;

/// `task.ts list`: open records (all with `--all` and no `--open`), filtered by exact
/// `--conversation`, `--requester`, `--handle`, `--id`, `--dedupe-key`, the first
/// [`LIST_ROWS_DEFAULT`] as rows with their labels. `candidates` are the records the filters
/// run over, in `readTasks` order (every record, or those an index row names); `tasks` answers
/// the labels' lookups. `execution` is `readExecution`'s value (see [`read_execution`]; the
/// session-registry fallback is the caller's).
#[must_use]
pub(crate) fn list(
    candidates: &[TaskDoc],
    tasks: &dyn Tasks,
    call: &TaskCall,
    execution: &Value,
    now_ms: u64,
) -> Value {
    let open_only = !call.has("all") || call.has("open");
    let filters: [(&str, Field); 5] = [
        ("conversation", |t| t.conversation.as_deref()),
        ("requester", |t| Some(&t.requester)),
        ("handle", |t| Some(&t.handle)),
        ("id", |t| Some(&t.id)),
        ("dedupe-key", |t| t.dedupe_key.as_deref()),
    ];
    let selected: Vec<&TaskDoc> = candidates
        .iter()
        .filter(|t| !open_only || t.status == "open")
        .filter(|t| {
            filters.iter().all(|(name, get)| match call.value(name).filter(|v| !v.is_empty()) {
                Some(v) => get(t) == Some(v),
                None => true,
            })
        })
        .collect();
    let rows: Vec<Value> = selected
        .iter()
        .take(LIST_ROWS_DEFAULT)
        .map(|t| {
            json!({ "id": t.id, "handle": t.handle, "listing": doc::listing(t, tasks, now_ms),
                    "requester": t.requester, "title": t.title, "due": t.due,
                    "result_rev": t.result_rev, "owner": t.owner, "result": t.result,
                    "waiting_on": t.waiting_on, "closed_by": t.closed_by, "check": t.check })
        })
        .collect();
    let omitted = selected.len() - rows.len();
    json!({ "rows": rows, "total": selected.len(), "omitted": omitted, "execution": execution })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn check(verb: &str, list: &[&str], expected: Result<(), &str>) {
        let got = parse_args(verb, &args(list)).map(|_| ()).map_err(|r| r.token);
        assert_eq!(got, expected.map_err(str::to_owned), "{verb} {list:?}");
    }

    #[test]
    fn arguments_are_refused_with_upstreams_tokens() {
        check("open", &["--title", "t", "--claim", "a", "--claim", "b"], Ok(()));
        check("frob", &[], Err("invalid-verb"));
        check("note", &[], Err("invalid-id"));
        check("note", &["T-1"], Err("invalid-id"));
        check("note", &["T-20260914-081502", "--title", "x"], Err("invalid-flag"));
        check("note", &["T-20260914-081502", "actor"], Err("invalid-flag"));
        check("note", &["T-20260914-081502", "--actor"], Err("missing-actor"));
        check("note", &["T-20260914-081502", "--actor", "--due"], Err("missing-actor"));
        check("open", &["--title", "a", "--title", "b"], Err("duplicate-flag"));
        check("list", &["--open", "--open", "--id", "T-1"], Err("invalid-id"));
        let call = parse_args("open", &args(&["--claim", "a", "--claim", "b"])).unwrap();
        assert_eq!(call.claims(), ["a", "b"]);
    }

    #[test]
    fn execution_reads_fall_back_to_the_empty_record() {
        let parse = |t: &str| legacy_json::parse_doc("execution.json", t.as_bytes()).unwrap();
        let fresh = parse("{\"state\":\"in_flight\",\"turn_id\":\"u\",\"at\":\"2026-09-14T08:00:00.000Z\",\"source\":\"s\",\"cc_session_id\":\"c\",\"reason\":null,\"x\":1}\n");
        let now = 1_789_373_702_118; // 08:15:02Z
        let read = Value::Object(read_execution(Some(&fresh), now));
        assert_eq!(read["state"], "in_flight");
        assert_eq!(read["x"], 1);
        let stale = Value::Object(read_execution(Some(&fresh), now + TURN_STALE_MS));
        assert_eq!(stale["state"], "unknown");
        let bad = parse("{\"state\":\"busy\",\"at\":\"2026-09-14T08:00:00.000Z\"}\n");
        assert_eq!(Value::Object(read_execution(Some(&bad), now))["cc_session_id"], Value::Null);
    }
}
