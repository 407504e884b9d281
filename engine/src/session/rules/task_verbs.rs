//! `task.ts note|block|close|cancel` over an open record (`mutateTask`, Hn `lib/tasks.ts@080928a`):
//! the edits each verb makes, in upstream's order, the optimistic `--result-rev` check of a
//! confirmed close, the evidence a `check` close needs, and the digest printed.
//!
//! Every check runs before any event exists, so a refused call changes nothing (upstream mutates
//! in memory and throws before its write). Does not read files or the store.

use hookstate_schema::session::{SessionEvent, TaskDoc, TaskEdit, TaskField, TaskKeys};
use serde_json::{json, Value};

use super::task_doc::{self as doc, Tasks, With};
use super::tasks::{bind_turn, card_edits, TaskCall, TurnInputs};
use super::verdict::{task_error, Class, Decided, Decision, Refusal, Verdict};
use crate::kernel::compat::stamp;
use crate::kernel::compat::text as js;

/// A record being changed, with the edits made so far.
struct Work {
    task: TaskDoc,
    edits: Vec<TaskEdit>,
    at: String,
}

impl Work {
    fn push(&mut self, edit: TaskEdit) {
        doc::apply_edit(&mut self.task, &self.at, &edit);
        self.edits.push(edit);
    }

    fn set(&mut self, field: TaskField, value: Option<String>) {
        self.push(TaskEdit::Set { field, value });
    }

    fn append(&mut self, section: &str, actor: &str, text: &str) {
        let (actor, text) = (doc::clean(actor), doc::clean(text));
        self.push(TaskEdit::Append { section: section.into(), actor, text });
    }

    fn bump(&mut self) {
        let rev = self.task.result_rev.saturating_add(1);
        self.push(TaskEdit::ResultRev(rev));
    }

    /// `finish`: the only transition that closes a record.
    fn finish(&mut self, by: &str, actor: &str, reason: &str) {
        self.set(TaskField::Status, Some("closed".into()));
        self.set(TaskField::ClosedBy, Some(by.into()));
        self.set(TaskField::ClosedAt, Some(self.at.clone()));
        self.set(TaskField::ClosedActor, Some(doc::clean(actor)));
        self.set(TaskField::ClosedReason, Some(doc::clean(reason)));
        self.set(TaskField::WaitingOn, None);
        self.set(TaskField::WaitingSince, None);
        self.append("Outcome", actor, reason);
    }
}

/// `/^(.+):\s+(.+)$/` on a cleaned line: the last `:` followed by whitespace, split there.
#[must_use]
pub(crate) fn split_approval(text: &str) -> Option<(String, String)> {
    let terminator = |c: char| matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}');
    for (i, _) in text.match_indices(':').collect::<Vec<_>>().into_iter().rev() {
        let (who, rest) = (&text[..i], &text[i + 1..]);
        if who.is_empty() || who.contains(terminator) {
            continue;
        }
        let spaces: Vec<(usize, char)> =
            rest.char_indices().take_while(|(_, c)| js::is_js_whitespace(*c)).collect();
        let Some(&(last_at, _)) = spaces.last() else { continue };
        let after = &rest[spaces.iter().map(|(_, c)| c.len_utf8()).sum::<usize>()..];
        let what = if after.is_empty() { &rest[last_at..] } else { after };
        let first_space_only = after.is_empty() && spaces.len() < 2;
        if first_space_only || what.contains(terminator) {
            continue;
        }
        return Some((who.to_owned(), what.to_owned()));
    }
    None
}

fn note(w: &mut Work, call: &TaskCall, actor: &str, line: &str) -> Result<Value, Refusal> {
    let metadata = ["due", "card", "check", "decision", "approval", "done", "clear-waiting"];
    if line.is_empty() && !metadata.iter().any(|m| call.has(m)) {
        return Err(task_error("empty", Class::Invalid));
    }
    if !line.is_empty() {
        let section = if call.has("decision") { "Decisions" } else { "Progress" };
        w.append(section, actor, line);
    }
    if call.has("due") {
        let due = call.date("due")?;
        w.set(TaskField::Due, due);
    }
    for edit in card_edits(&w.task.owner, call.value("card"))? {
        w.push(edit);
    }
    if call.has("clear-waiting") {
        w.set(TaskField::WaitingOn, None);
        w.set(TaskField::WaitingSince, None);
    }
    if call.has("done") {
        let done = call.required("done")?;
        w.set(TaskField::Summary, Some(done.clone()));
        w.bump();
        w.set(TaskField::Result, None);
        w.set(TaskField::ResultAt, None);
        let by = call.required("actor")?;
        w.append("Decisions", &by, &format!("Definition of done: {done}"));
    }
    if call.has("approval") {
        let approval = call.required("approval")?;
        let (who, what) = split_approval(&approval)
            .ok_or_else(|| task_error("invalid-approval", Class::Invalid))?;
        w.append("Approvals", &who, &what);
    }
    Ok(json!({ "id": w.task.id, "result_rev": w.task.result_rev }))
}

fn block(w: &mut Work, call: &TaskCall, actor: &str, line: &str) -> Result<Value, Refusal> {
    let digest = if call.has("result-stdin") {
        if line.is_empty() {
            return Err(task_error("empty", Class::Invalid));
        }
        w.set(TaskField::Result, Some(line.to_owned()));
        w.bump();
        w.set(TaskField::ResultAt, Some(w.at.clone()));
        let waiting = call
            .value("waiting-on")
            .map(str::to_owned)
            .or_else(|| w.task.approver.clone())
            .unwrap_or_else(|| w.task.requester.clone());
        w.set(TaskField::WaitingOn, Some(doc::clean(&waiting)));
        w.append("Outcome", actor, line);
        json!({ "id": w.task.id, "listing": "unconfirmed", "result_rev": w.task.result_rev,
                "waiting_on": waiting })
    } else {
        let given = |name: &str| call.value(name).is_some_and(|v| !v.is_empty());
        if !given("status-line") || !given("next") {
            return Err(task_error("stall-needs-status-and-next", Class::Invalid));
        }
        let waiting = call.required("waiting-on")?;
        w.set(TaskField::WaitingOn, Some(waiting));
        w.set(TaskField::StallAt, Some(w.at.clone()));
        let status = call.required("status-line")?;
        w.set(TaskField::StallStatus, Some(status.clone()));
        let next = call.required("next")?;
        w.set(TaskField::StallNext, Some(next.clone()));
        w.append("Progress", actor, &format!("{status}; next: {next}"));
        json!({ "id": w.task.id,
                "post_to": { "conversation": w.task.conversation, "requester": w.task.requester },
                "status_line": status, "next_step": next })
    };
    w.set(TaskField::WaitingSince, Some(w.at.clone()));
    Ok(digest)
}

/// `--result-rev` as upstream compares it: digits only, equal to the record's revision.
fn rev_matches(given: Option<&str>, rev: u64) -> bool {
    given.is_some_and(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
        && given.and_then(|g| g.parse::<u64>().ok()) == Some(rev)
}

fn close(
    w: &mut Work,
    call: &TaskCall,
    line: &str,
    held: &dyn Fn(&str) -> bool,
) -> Result<&'static str, Refusal> {
    let by = match call.value("by") {
        Some("check") => "check",
        Some("confirmed") => "confirmed",
        _ => return Err(task_error("invalid-closed-by", Class::Invalid)),
    };
    let closer = call.required("actor")?;
    let t = &w.task;
    let reason = if by == "confirmed" {
        if t.approver.as_deref().is_some_and(|a| !a.is_empty() && a != closer) {
            return Err(task_error("approver-required", Class::Refused));
        }
        let has_result = t.result.as_deref().is_some_and(|r| !r.is_empty());
        if !has_result || !rev_matches(call.value("result-rev"), t.result_rev) {
            return Err(task_error("stale-result", Class::Refused));
        }
        if !call.has("reason-stdin") || line.is_empty() {
            return Err(task_error("empty-reason", Class::Invalid));
        }
        line.to_owned()
    } else {
        let claim = call.claims().into_iter().next();
        let duty = closer.starts_with("duty:")
            && t.dedupe_key.as_deref().is_some_and(|k| k.starts_with(&format!("{closer}:")));
        match claim {
            _ if duty => closer.clone(),
            Some(c) if closer == "hermit" && !c.is_empty() && t.claims.contains(&c) && held(&c) => {
                format!("later:{c}:held")
            }
            _ => return Err(task_error("check-needs-evidence", Class::Refused)),
        }
    };
    w.finish(by, &closer, &reason);
    Ok(by)
}

fn next_queued(tasks: &dyn Tasks, changed: &TaskDoc) -> Value {
    match doc::next_queued(&With { base: tasks, task: changed }) {
        Some(t) => json!({ "id": t.id, "handle": t.handle, "title": t.title }),
        None => Value::Null,
    }
}

/// `task.ts note|block|close|cancel <id>` on `tasks` (in `readTasks` order). `input` is stdin
/// (read for `note`, `--result-stdin`, `--reason-stdin`; empty otherwise); `held` tells whether a
/// `later.ts` claim has a `held` row in `hypotheses.jsonl`.
///
/// # Errors
/// Upstream's tokens: `not-found`, `not-open`, `empty`, `invalid-due`, `card-on-helper-task`,
/// `invalid-card`, `missing-<flag>`, `invalid-approval`, `stall-needs-status-and-next`,
/// `invalid-closed-by`, `approver-required`, `stale-result`, `empty-reason`,
/// `check-needs-evidence`, `invalid-record`, `invalid-verb`.
pub(crate) fn decide_change(
    tasks: &dyn Tasks,
    call: &TaskCall,
    input: &str,
    held: &dyn Fn(&str) -> bool,
    turn: &TurnInputs,
    now_ms: u64,
) -> Decision {
    let id = call.id.clone().unwrap_or_default();
    let found = tasks.by_id(&id).ok_or_else(|| task_error("not-found", Class::Invalid))?;
    if found.status != "open" {
        return Err(task_error("not-open", Class::Refused));
    }
    let mut w = Work { task: found.clone(), edits: Vec::new(), at: stamp::stamp_ms(now_ms) };
    let actor = call.value("actor").unwrap_or("hermit").to_owned();
    let line = doc::clean(js::trim(input));
    let digest = match call.verb.as_str() {
        "note" => note(&mut w, call, &actor, &line)?,
        "block" => block(&mut w, call, &actor, &line)?,
        "close" => {
            let by = close(&mut w, call, &line, held)?;
            json!({ "id": id, "closed_by": by, "result_rev": w.task.result_rev,
                    "next_queued": next_queued(tasks, &w.task) })
        }
        "cancel" => {
            let closer = call.required("actor")?;
            if !call.has("reason-stdin") || line.is_empty() {
                return Err(task_error("empty-reason", Class::Invalid));
            }
            w.finish("cancelled", &closer, &line);
            let next = next_queued(tasks, &w.task);
            json!({ "id": id, "closed_by": "cancelled", "next_queued": next })
        }
        _ => return Err(task_error("invalid-verb", Class::Usage)),
    };
    if !doc::is_valid(&w.task) {
        return Err(task_error("invalid-record", Class::Invalid));
    }
    let progress = call.verb != "note" || !line.is_empty();
    let mut events = vec![SessionEvent::TaskChanged {
        keys: TaskKeys::of(&w.task),
        id: id.clone(),
        verb: call.verb.clone(),
        at: w.at.clone(),
        edits: w.edits,
    }];
    if progress {
        events.extend(bind_turn(&id, turn, now_ms));
    }
    Ok(Decided { events, verdict: Verdict::json(&digest) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approvals_split_at_the_last_colon_followed_by_space() {
        let check = |t: &str, e: Option<(&str, &str)>| {
            assert_eq!(split_approval(t), e.map(|(a, b)| (a.into(), b.into())), "{t:?}");
        };
        check("discord:1: ok go", Some(("discord:1", "ok go")));
        check("a: b: c", Some(("a: b", "c")));
        check("a:b", None);
        check(": b", None);
        check("a:  ", Some(("a", " ")));
        check("a: ", None);
        check("a:\u{2028}b", Some(("a", "b")));
        check("a: b\u{2028}", None);
    }
}

#[cfg(test)]
mod verb_tests;
