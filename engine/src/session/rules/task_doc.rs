//! Task records as `lib/tasks.ts` (Hn `@080928a`) keeps them: `validateTask`, the body-section
//! `append`, the id and handle rules, the listing labels, the one function that applies a
//! [`TaskEdit`] (shared by the decisions and the projection, so both agree), and [`Tasks`], the
//! lookups a decision makes over a hermit's records.
//!
//! Pure functions over [`TaskDoc`] values. Does not parse or render the file; `layout::task` does.

use hookstate_schema::session::{TaskDoc, TaskEdit, TaskField};

use crate::kernel::compat::stamp;
use crate::kernel::compat::text as js;

/// The suffixes `allocateTaskId` tries after the bare id, in order.
pub(crate) const ID_SUFFIXES: &str = "0123456789abcdefghijklmnopqrstuvwxyz";
/// `handle` keeps this many characters of the slugged title.
pub(crate) const HANDLE_CHARS_MAX: usize = 32;
/// A conversation key's chat-id half: at most this many characters (`checkKey`).
pub(crate) const KEY_CHAT_CHARS_MAX: usize = 128;
/// The body of a new record: the five sections, empty.
pub(crate) const NEW_BODY: &str =
    "## Progress\n\n## Decisions\n\n## Approvals\n\n## Lessons\n\n## Outcome\n";

/// `TASK_ID`: `^T-\d{8}-\d{6}(-[a-z0-9])?$`.
#[must_use]
pub(crate) fn is_task_id(id: &str) -> bool {
    let b = id.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let base = b.len() >= 17 && b.starts_with(b"T-") && digits(2..10) && b[10] == b'-';
    let base = base && digits(11..17);
    match b.len() {
        17 => base,
        19 => base && b[17] == b'-' && (b[18].is_ascii_digit() || b[18].is_ascii_lowercase()),
        _ => false,
    }
}

/// `SLUG`: `^[\w.:~+@;=-]+$`.
#[must_use]
pub(crate) fn is_slug(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| js::is_word(c) || ".:~+@;=-".contains(c))
}

/// `checkKey`: `^[\w-]+:[\w.~+@;=-]{1,128}$`.
#[must_use]
pub(crate) fn is_conversation_key(key: &str) -> bool {
    let Some((source, chat)) = key.split_once(':') else {
        return false;
    };
    let source_ok = !source.is_empty() && source.chars().all(|c| js::is_word(c) || c == '-');
    let chat_len = chat.chars().count();
    source_ok
        && (1..=KEY_CHAT_CHARS_MAX).contains(&chat_len)
        && chat.chars().all(|c| js::is_word(c) || ".~+@;=-".contains(c))
}

/// `validRequester`: `operator` or a conversation key.
#[must_use]
pub(crate) fn is_requester(text: &str) -> bool {
    text == "operator" || is_conversation_key(text)
}

/// `clean`: every run of CR and LF becomes one space.
#[must_use]
pub(crate) fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_break = false;
    for c in text.chars() {
        if c == '\r' || c == '\n' {
            if !in_break {
                out.push(' ');
            }
            in_break = true;
        } else {
            in_break = false;
            out.push(c);
        }
    }
    out
}

/// `iso`: `^\d{4}-\d\d-\d\dT` and a time `Date.parse` reads (see [`stamp::parse`]).
#[must_use]
pub(crate) fn is_iso(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() > 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
        && b[10] == b'T'
        && stamp::date_parse(text).is_some()
}

/// `validateTask`: the record invariants checked on every decode and encode.
#[must_use]
pub(crate) fn is_valid(t: &TaskDoc) -> bool {
    let required = [
        &t.id,
        &t.kind,
        &t.title,
        &t.created,
        &t.summary,
        &t.audience,
        &t.status,
        &t.opened_at,
        &t.requester,
        &t.handle,
        &t.owner,
    ];
    let dates = [&t.closed_at, &t.due, &t.waiting_since, &t.result_at, &t.stall_at];
    let closed = t.closed_by.is_some() && t.closed_at.is_some();
    let owner_ok = t.owner == "resident"
        || (t.owner.strip_prefix("helper:").is_some_and(is_conversation_key)
            && t.card_chat_id.is_none()
            && t.card_message_id.is_none());
    required.iter().all(|v| !v.is_empty())
        && is_task_id(&t.id)
        && t.kind == "task"
        && (t.status == "open" || t.status == "closed")
        && t.closed_by.as_deref().is_none_or(|b| ["check", "confirmed", "cancelled"].contains(&b))
        && t.tags.iter().chain(&t.claims).all(|s| is_slug(s))
        && is_iso(&t.created)
        && is_iso(&t.opened_at)
        && dates.iter().all(|d| d.as_deref().is_none_or(is_iso))
        && t.created == t.opened_at
        && (t.status == "closed") == closed
        && is_requester(&t.requester)
        && is_slug(&t.handle)
        && t.conversation.as_deref().is_none_or(is_conversation_key)
        && (t.audience == "operator" || is_conversation_key(&t.audience))
        && owner_ok
}

/// The task records a decision reads, as lookups: the store answers them from its index rows
/// (so a verb reads the rows it needs, not every record), a list of records by scanning.
pub(crate) trait Tasks {
    /// The record with this id, open or closed.
    fn by_id(&self, id: &str) -> Option<TaskDoc>;
    /// The open record holding this `dedupe_key`.
    fn open_by_dedupe(&self, key: &str) -> Option<TaskDoc>;
    /// Whether an open record holds this handle.
    fn handle_taken(&self, handle: &str) -> bool;
    /// How many records are open.
    fn open_count(&self) -> usize;
    /// The first `n` runnable records in [`sort`] order.
    fn runnable(&self, n: usize) -> Vec<TaskDoc>;
}

/// The order `readTasks` lists records in: `opened_at`, then `id`.
fn order(a: &TaskDoc, b: &TaskDoc) -> std::cmp::Ordering {
    a.opened_at.cmp(&b.opened_at).then_with(|| a.id.cmp(&b.id))
}

impl Tasks for Vec<TaskDoc> {
    fn by_id(&self, id: &str) -> Option<TaskDoc> {
        self.iter().find(|t| t.id == id).cloned()
    }
    fn open_by_dedupe(&self, key: &str) -> Option<TaskDoc> {
        self.iter().find(|t| t.status == "open" && t.dedupe_key.as_deref() == Some(key)).cloned()
    }
    fn handle_taken(&self, handle: &str) -> bool {
        self.iter().any(|t| t.status == "open" && t.handle == handle)
    }
    fn open_count(&self) -> usize {
        self.iter().filter(|t| t.status == "open").count()
    }
    fn runnable(&self, n: usize) -> Vec<TaskDoc> {
        let mut found: Vec<TaskDoc> = self.iter().filter(|t| is_runnable(t)).cloned().collect();
        found.sort_by(order);
        found.truncate(n);
        found
    }
}

/// A hermit's records with one more (a record being opened or changed), as a decision sees them
/// before its events are applied.
pub(crate) struct With<'a> {
    /// The records as stored.
    pub(crate) base: &'a dyn Tasks,
    /// The record that replaces (or joins) the stored one of its id.
    pub(crate) task: &'a TaskDoc,
}

impl Tasks for With<'_> {
    fn by_id(&self, id: &str) -> Option<TaskDoc> {
        if id == self.task.id {
            return Some(self.task.clone());
        }
        self.base.by_id(id)
    }
    fn open_by_dedupe(&self, key: &str) -> Option<TaskDoc> {
        let t = self.task;
        if t.status == "open" && t.dedupe_key.as_deref() == Some(key) {
            return Some(t.clone());
        }
        self.base.open_by_dedupe(key).filter(|found| found.id != t.id)
    }
    fn handle_taken(&self, handle: &str) -> bool {
        let t = self.task;
        let stored = self.base.by_id(&t.id).filter(|s| s.status == "open" && s.handle == handle);
        (t.status == "open" && t.handle == handle)
            || (self.base.handle_taken(handle) && stored.is_none())
    }
    fn open_count(&self) -> usize {
        let stored = self.base.by_id(&self.task.id).is_some_and(|s| s.status == "open");
        let count = self.base.open_count() - usize::from(stored);
        count + usize::from(self.task.status == "open")
    }
    fn runnable(&self, n: usize) -> Vec<TaskDoc> {
        let mut found: Vec<TaskDoc> =
            self.base.runnable(n + 1).into_iter().filter(|r| r.id != self.task.id).collect();
        if is_runnable(self.task) {
            found.push(self.task.clone());
        }
        found.sort_by(order);
        found.truncate(n);
        found
    }
}

/// A new open record: the required strings, every nullable field null, tags
/// `["task", <requester>]`, no claims, `result_rev` 0, the five empty sections.
#[must_use]
pub(crate) fn fresh(
    id: String,
    title: String,
    now: &str,
    summary: String,
    requester: String,
    handle: String,
    owner: String,
) -> TaskDoc {
    TaskDoc {
        id,
        kind: "task".into(),
        title,
        created: now.to_owned(),
        summary,
        audience: "operator".into(),
        status: "open".into(),
        opened_at: now.to_owned(),
        tags: vec!["task".into(), requester.clone()],
        requester,
        handle,
        owner,
        closed_at: None,
        closed_by: None,
        closed_actor: None,
        closed_reason: None,
        requester_name: None,
        origin_message_id: None,
        approver: None,
        due: None,
        conversation: None,
        card_chat_id: None,
        card_message_id: None,
        waiting_on: None,
        waiting_since: None,
        result: None,
        result_at: None,
        stall_at: None,
        stall_status: None,
        stall_next: None,
        dedupe_key: None,
        check: None,
        claims: Vec::new(),
        result_rev: 0,
        body: NEW_BODY.into(),
    }
}

/// The nullable slot of a field; `None` for the two required strings (`summary`, `status`).
pub(crate) fn slot(t: &mut TaskDoc, field: TaskField) -> Option<&mut Option<String>> {
    Some(match field {
        TaskField::Summary | TaskField::Status => return None,
        TaskField::ClosedAt => &mut t.closed_at,
        TaskField::ClosedBy => &mut t.closed_by,
        TaskField::ClosedActor => &mut t.closed_actor,
        TaskField::ClosedReason => &mut t.closed_reason,
        TaskField::Due => &mut t.due,
        TaskField::CardChatId => &mut t.card_chat_id,
        TaskField::CardMessageId => &mut t.card_message_id,
        TaskField::WaitingOn => &mut t.waiting_on,
        TaskField::WaitingSince => &mut t.waiting_since,
        TaskField::Result => &mut t.result,
        TaskField::ResultAt => &mut t.result_at,
        TaskField::StallAt => &mut t.stall_at,
        TaskField::StallStatus => &mut t.stall_status,
        TaskField::StallNext => &mut t.stall_next,
        TaskField::Check => &mut t.check,
    })
}

/// `append`: `- <at> <actor>: <text>` at the end of section `## <section>` (added after the body,
/// trimmed, when its heading is absent), exactly as upstream's string arithmetic places it.
#[must_use]
pub(crate) fn append_entry(body: &str, section: &str, actor: &str, text: &str, at: &str) -> String {
    let heading = format!("## {section}\n");
    let mut body = body.to_owned();
    if !body.contains(&heading) {
        body = format!("{}\n\n{heading}", js::trim_end(&body));
    }
    let start = body.find(&heading).unwrap_or(0);
    let from = start + heading.len();
    let end = body[from..].find("\n## ").map_or(body.len(), |i| from + i);
    let entry = format!("\n- {at} {}: {}\n", clean(actor), clean(text));
    format!("{}{entry}{}", js::trim_end(&body[..end]), &body[end..])
}

/// Applies one edit in place.
pub(crate) fn apply_edit(t: &mut TaskDoc, at: &str, edit: &TaskEdit) {
    match edit {
        TaskEdit::Set { field: TaskField::Summary, value } => {
            t.summary = value.clone().unwrap_or_default();
        }
        TaskEdit::Set { field: TaskField::Status, value } => {
            t.status = value.clone().unwrap_or_default();
        }
        TaskEdit::Set { field, value } => {
            if let Some(slot) = slot(t, *field) {
                slot.clone_from(value);
            }
        }
        TaskEdit::Append { section, actor, text } => {
            t.body = append_entry(&t.body, section, actor, text, at);
        }
        TaskEdit::ResultRev(rev) => t.result_rev = *rev,
    }
}

/// The handle of a title: lowercased, non-alphanumeric runs as `-`, one leading and trailing
/// `-` dropped, [`HANDLE_CHARS_MAX`] characters, `task` when empty; then `-2`, `-3`, … until no
/// open record holds it.
#[must_use]
pub(crate) fn handle_for(title: &str, tasks: &dyn Tasks) -> String {
    let mut slug = String::new();
    for c in title.to_lowercase().chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            slug.push(c);
        } else if !slug.ends_with('-') || slug.is_empty() {
            slug.push('-');
        }
    }
    let slug = slug.strip_prefix('-').unwrap_or(&slug);
    let slug = slug.strip_suffix('-').unwrap_or(slug);
    let mut base: String = slug.chars().take(HANDLE_CHARS_MAX).collect();
    if base.is_empty() {
        base = "task".into();
    }
    let mut handle = base.clone();
    // Each round skips one open record's handle, so this ends within `open_count()` rounds.
    for n in 2..=tasks.open_count() + 2 {
        if !tasks.handle_taken(&handle) {
            break;
        }
        handle = format!("{base}-{n}");
    }
    handle
}

/// `allocateTaskId`: `T-YYYYMMDD-HHMMSS` from the toISOString `now`, then the first free
/// suffix; `None` (upstream's `id-collision`) when all 37 are taken.
#[must_use]
pub(crate) fn allocate_id(tasks: &dyn Tasks, now_iso: &str) -> Option<String> {
    let date = now_iso.get(0..10)?.replace('-', "");
    let time = now_iso.get(11..19)?.replace(':', "");
    let base = format!("T-{date}-{time}");
    let free = |id: &String| tasks.by_id(id).is_none();
    std::iter::once(base.clone())
        .chain(ID_SUFFIXES.chars().map(|c| format!("{base}-{c}")))
        .find(free)
}

/// `isRunnable`: open, resident, no result and not waiting.
#[must_use]
pub(crate) fn is_runnable(t: &TaskDoc) -> bool {
    t.status == "open" && t.owner == "resident" && t.result.is_none() && !waiting(t)
}

/// JavaScript truthiness of `waiting_on` (an empty string is not waiting).
fn waiting(t: &TaskDoc) -> bool {
    t.waiting_on.as_deref().is_some_and(|w| !w.is_empty())
}

/// `taskListing`: `closed`, or `late`, `unconfirmed` / `waiting on <x>`, `queued`; `open` when
/// none applies.
#[must_use]
pub(crate) fn listing(t: &TaskDoc, tasks: &dyn Tasks, now_ms: u64) -> Vec<String> {
    if t.status == "closed" {
        return vec!["closed".into()];
    }
    let mut labels = Vec::new();
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    if t.due.as_deref().and_then(stamp::date_parse).is_some_and(|due| due < now) {
        labels.push("late".to_owned());
    }
    if t.result.as_deref().is_some_and(|r| !r.is_empty()) {
        labels.push("unconfirmed".into());
    } else if waiting(t) {
        labels.push(format!("waiting on {}", t.waiting_on.as_deref().unwrap_or_default()));
    }
    let earlier =
        |r: &TaskDoc| r.opened_at < t.opened_at || (r.opened_at == t.opened_at && r.id < t.id);
    // The first runnable record is the earliest: any earlier one exists only if it is.
    if is_runnable(t) && tasks.runnable(1).first().is_some_and(earlier) {
        labels.push("queued".into());
    }
    if labels.is_empty() {
        labels.push("open".into());
    }
    labels
}

/// `readTasks`' order: `opened_at`, then `id` (the store's index rows keep it).
#[cfg(test)]
pub(crate) fn sort(tasks: &mut [TaskDoc]) {
    tasks.sort_by(order);
}

/// `nextQueued`: the first runnable record, in [`sort`] order.
#[must_use]
pub(crate) fn next_queued(tasks: &dyn Tasks) -> Option<TaskDoc> {
    tasks.runnable(1).into_iter().next()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid open resident task opened at `at`.
    pub(crate) fn task(id: &str, at: &str) -> TaskDoc {
        let (title, summary) = ("Rotate the cert".to_owned(), "done".to_owned());
        let (requester, handle) = ("operator".to_owned(), "rotate-the-cert".to_owned());
        fresh(id.into(), title, at, summary, requester, handle, "resident".into())
    }

    fn check(body: &str, section: &str, expected: &str) {
        assert_eq!(append_entry(body, section, "a\nb", "x\r\ny", "T"), expected);
    }

    #[test]
    fn append_places_entries_as_upstream() {
        check(NEW_BODY, "Progress", "## Progress\n- T a b: x y\n\n## Decisions\n\n## Approvals\n\n## Lessons\n\n## Outcome\n");
        check(NEW_BODY, "Outcome", "## Progress\n\n## Decisions\n\n## Approvals\n\n## Lessons\n\n## Outcome\n- T a b: x y\n");
        check("## Progress\n", "Notes", "## Progress\n\n## Notes\n- T a b: x y\n");
        check("", "Notes", "\n\n## Notes\n- T a b: x y\n");
    }

    #[test]
    fn ids_handles_and_keys_follow_upstreams_patterns() {
        assert!(is_task_id("T-20260914-081502"));
        assert!(is_task_id("T-20260914-081502-z"));
        assert!(!is_task_id("T-20260914-081502-Z"));
        assert!(!is_task_id("T-2026091-0815020"));
        assert!(is_conversation_key("discord:1187734401122"));
        assert!(is_conversation_key("imessage:iMessage;-;+1555"));
        assert!(!is_conversation_key("discord:a:b"));
        assert!(!is_conversation_key(&format!("d:{}", "x".repeat(129))));
        let tasks = vec![task("T-20260914-081502", "2026-09-14T08:15:02.118Z")];
        assert_eq!(handle_for("Rotate the cert!", &tasks), "rotate-the-cert-2");
        assert_eq!(handle_for("  Ünïcode  ", &Vec::new()), "n-code");
        assert_eq!(handle_for("!!!", &Vec::new()), "task");
        assert_eq!(handle_for(&"a".repeat(40), &Vec::new()).len(), HANDLE_CHARS_MAX);
        assert_eq!(clean("a\r\n\nb\rc"), "a b c");
    }

    #[test]
    fn allocation_walks_the_suffixes_then_collides() {
        let at = "2026-09-14T08:15:02.118Z";
        let mut tasks = vec![task("T-20260914-081502", at)];
        assert_eq!(allocate_id(&tasks, at).as_deref(), Some("T-20260914-081502-0"));
        for c in ID_SUFFIXES.chars() {
            tasks.push(task(&format!("T-20260914-081502-{c}"), at));
        }
        assert_eq!(allocate_id(&tasks, at), None);
    }

    #[test]
    fn listing_labels_follow_upstream() {
        let a = task("T-20260914-081502", "2026-09-14T08:15:02.118Z");
        let mut b = task("T-20260914-091502", "2026-09-14T09:15:02.118Z");
        let now = 1_789_400_000_000;
        assert_eq!(listing(&b, &vec![a.clone(), b.clone()], now), ["queued"]);
        b.due = Some("2026-09-14T10:00:00.000Z".into());
        b.waiting_on = Some("operator".into());
        assert_eq!(listing(&b, &vec![a.clone(), b.clone()], now), ["late", "waiting on operator"]);
        b.result = Some("r".into());
        assert_eq!(listing(&b, &vec![a.clone(), b.clone()], now), ["late", "unconfirmed"]);
        assert_eq!(listing(&a, &vec![a.clone()], now), ["open"]);
        assert!(is_valid(&a));
        let mut bad = a.clone();
        bad.status = "closed".into();
        assert!(!is_valid(&bad));
    }
}
