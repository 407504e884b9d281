//! `task.ts` and `conversation.ts` on the store: each verb one decision over the rows it needs
//! (a task by id, the index rows of open records, the turn markers, the conversations row).
//!
//! Does not read legacy files.

use hookstate_schema::session::{JsonDoc, Marker, Style, TaskRow};
use serde_json::Value;

use super::api::{Answer, Session};
use super::rules::conversations;
use super::rules::task_verbs::decide_change;
use super::rules::tasks::{self, decide_open, parse_args, read_execution, TaskCall, TurnInputs};
use super::rules::verdict::{error_line, Class, Decided, Verdict};
use super::views::{self, StoreTasks};
use crate::kernel::call::Call;
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;

/// `task.ts` verbs that read stdin: `note` always, any verb given `--result-stdin` or
/// `--reason-stdin`.
#[must_use]
pub fn task_reads_stdin(verb: &str, args: &[String]) -> bool {
    verb == "note" || args.iter().any(|a| a == "--result-stdin" || a == "--reason-stdin")
}

/// `conversation.ts` verbs that read stdin: `prune` (`claude agents --json`).
#[must_use]
pub fn conversation_reads_stdin(verb: &str) -> bool {
    verb == "prune"
}

fn turn_inputs(txn: &dyn ReadTxn, scope: &str) -> Result<TurnInputs> {
    Ok(TurnInputs {
        execution: views::marker(txn, scope, Marker::Execution)?,
        binding: views::marker(txn, scope, Marker::TaskTurn)?,
        // The cost log's last row is not kept by hookstate: a binding is extended while fresh.
        last_observed_at: None,
    })
}

/// The records a `list` runs its filters over, in `readTasks` order: one by id, those an index
/// row names for a conversation or a requester, the open ones, or every one.
fn list_candidates(txn: &dyn ReadTxn, scope: &str, call: &TaskCall) -> Result<Vec<TaskRow>> {
    let given = |name: &str| call.value(name).filter(|v| !v.is_empty());
    let open_only = !call.has("all") || call.has("open");
    if let Some(id) = given("id") {
        return Ok(views::task(txn, scope, id)?.into_iter().collect());
    }
    let by =
        [("conversation", views::BY_CONVERSATION_KIND), ("requester", views::BY_REQUESTER_KIND)];
    for (name, kind) in by {
        if let Some(value) = given(name) {
            let prefix = format!("{value}|");
            return views::indexed(txn, scope, kind, &prefix, views::TASKS_LISTED_MAX);
        }
    }
    if open_only {
        return views::indexed(txn, scope, views::OPEN_KIND, "", views::OPEN_TASKS_MAX);
    }
    views::all_tasks(txn, scope)
}

fn task_list(txn: &dyn ReadTxn, scope: &str, call: &TaskCall, now_ms: u64) -> Result<Decided> {
    let candidates: Vec<_> =
        list_candidates(txn, scope, call)?.into_iter().map(|row| row.task).collect();
    let execution = Value::Object(read_execution(
        views::marker(txn, scope, Marker::Execution)?.as_ref(),
        now_ms,
    ));
    let tasks = StoreTasks::new(txn, scope);
    let value = tasks::list(&candidates, &tasks, call, &execution, now_ms);
    tasks.finish(Decided { events: Vec::new(), verdict: Verdict::json(&value) })
}

impl Session<'_> {
    /// `task.ts <verb> <dir> [id] [--flags]`: `open`, `note`, `block`, `close`, `cancel` and
    /// `list`, with `args` the words after the directory and `stdin` what
    /// [`task_reads_stdin`] says to read (empty otherwise).
    ///
    /// # Errors
    /// [`Error::BadInput`] for `standup` (not built) and a scope that is not a hermit's;
    /// [`Error::TimeOutOfRange`], [`Error::BadId`]; store errors. Upstream's refusals are
    /// answers.
    pub fn task(&self, call: &Call, verb: &str, args: &[String], stdin: &str) -> Result<Answer> {
        if verb == "standup" {
            let why = "is not built: it sums the cost index, which hookstate does not keep";
            return Err(Error::bad("task standup", why));
        }
        let parsed = match parse_args(verb, args) {
            Ok(parsed) => parsed,
            Err(refusal) => return self.read(&call.scope, |_| Ok(Err(refusal))),
        };
        let scope = call.scope.as_str();
        if verb == "list" {
            return self.read(scope, |txn| Ok(Ok(task_list(txn, scope, &parsed, call.now_ms)?)));
        }
        self.decide(call, |txn| {
            let tasks = StoreTasks::new(txn, scope);
            let turn = turn_inputs(txn, scope)?;
            let decision = if verb == "open" {
                decide_open(&tasks, &parsed, &turn, call.now_ms)
            } else {
                let held = views::held(txn, scope)?;
                let is_held = |claim: &str| held.ids.iter().any(|id| id == claim);
                decide_change(&tasks, &parsed, stdin, &is_held, &turn, call.now_ms)
            };
            tasks.finish(decision)
        })
    }

    /// `conversation.ts <dir> <verb> [key] [--options]`: `lookup`, `bind`, `update`, `unbind`,
    /// `list` and `prune` (stdin: `claude agents --json`), with `args` the words after the verb.
    ///
    /// # Errors
    /// [`Error::BadInput`] for `await-agent` and the channel verbs (not built); store errors.
    /// Upstream's refusals (`ERROR|…`, exit 1) are answers.
    pub fn conversation(
        &self,
        call: &Call,
        verb: &str,
        args: &[String],
        stdin: &str,
    ) -> Result<Answer> {
        let scope = call.scope.as_str();
        if ["await-agent", "history", "chat-lookup", "thread-create", "is-trusted"].contains(&verb)
        {
            let why = "is not built: it runs `claude` or a channel library, not session state";
            return Err(Error::bad(format!("conversation {verb}"), why));
        }
        if let Err(refusal) = conversations::check_words(verb, args) {
            return self.read(scope, |_| Ok(Err(refusal)));
        }
        let key = args.first().map_or("", String::as_str);
        let options = match conversations::parse_options(args.get(1..).unwrap_or_default()) {
            Ok(options) => options,
            Err(refusal) => return self.read(scope, |_| Ok(Err(refusal))),
        };
        let store = |txn: &dyn ReadTxn| -> Result<JsonDoc> {
            Ok(views::conversations(txn, scope)?
                .unwrap_or(JsonDoc { fields: Vec::new(), style: Style::Pretty }))
        };
        match verb {
            "lookup" => self.read(scope, |txn| Ok(conversations::lookup(&store(txn)?, key))),
            "list" => self.read(scope, |txn| Ok(Ok(conversations::list(&store(txn)?)))),
            "bind" => self.decide(call, |txn| {
                Ok(conversations::decide_bind(&store(txn)?, key, &options, call.now_ms))
            }),
            "update" => self.decide(call, |txn| {
                Ok(conversations::decide_update(&store(txn)?, key, &options, call.now_ms))
            }),
            "unbind" => self.decide(call, |_| Ok(conversations::decide_unbind(key))),
            "prune" => {
                self.decide(call, |txn| Ok(conversations::decide_prune(&store(txn)?, stdin)))
            }
            _ => self.read(scope, |_| Ok(Err(error_line("unknown-verb", Class::Usage, 1)))),
        }
    }
}
