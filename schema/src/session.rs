//! The `session` domain's events and documents: claude-code-hermit's session state
//! (`state/runtime.json`, `tasks/**/T-*.md`, `state/task-turn.json`, `state/conversations.json`,
//! `state/observations.jsonl`, `state/hypotheses.jsonl`, the small markers of legacy-layout §2.9,
//! `sessions/SHELL.md` and `sessions/S-NNN-REPORT.md`) of one hermit per scope.
//!
//! JSON files are kept as ordered objects whose values keep their exact text ([`JsonDoc`]), line
//! files as their exact lines ([`LineFile`]), markdown as its exact text, so an export writes back
//! the bytes upstream's writers produced. Events record what a verb decided, not whole files, so
//! an event stays small while a file grows; the rows the engine keeps them in are the document
//! types below. Does not parse, render or decide; the engine does.

use serde::{Deserialize, Serialize};

pub use crate::feedback::{JsonDoc, Style};

/// The line files of the domain: append-only JSONL ledgers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Ledger {
    /// `state/observations.jsonl`.
    Observations,
    /// `state/hypotheses.jsonl` (`later.ts`).
    Hypotheses,
}

/// A line file's exact text, split on `\n`: every element but the last was followed by a
/// newline, the last is the unterminated tail (empty when the file ends with a newline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineFile {
    /// The lines; never empty (an empty file is one empty tail).
    pub lines: Vec<String>,
}

impl Default for LineFile {
    fn default() -> Self {
        LineFile { lines: vec![String::new()] }
    }
}

/// The single-object JSON markers of legacy-layout §2.9 and the task-turn binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Marker {
    /// `state/last-operator-action.json`: `{"at":ISO}`, compact.
    LastOperatorAction,
    /// `state/operator-turn-open.json`: `{"at":ISO}`, compact.
    OperatorTurnOpen,
    /// `state/pending-close.json`: `{queued_at, queued_by}`, pretty.
    PendingClose,
    /// `state/pending-close-drain.json`: `{last_emitted_at}`, pretty.
    PendingCloseDrain,
    /// `state/compact-requested.json`: `{requested_at, reason}`.
    CompactRequested,
    /// `state/clear-requested.json`: `{requested_at, reason}`, pretty.
    ClearRequested,
    /// `state/operator-pause.json`: the operator's pause flag, pretty.
    OperatorPause,
    /// `state/auto-pause.json`: the watchdog's or the budget's pause flag, pretty.
    AutoPause,
    /// `state/pause.json`: the legacy pause flag; read, never written.
    LegacyPause,
    /// `state/task-turn.json`: the turn's task binding, compact.
    TaskTurn,
    /// `state/execution.json`: the turn's execution state (written by hooks upstream), compact.
    Execution,
}

/// The task-record fields a verb changes after `open`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaskField {
    /// `summary` (the definition of done).
    Summary,
    /// `status` (`open` | `closed`).
    Status,
    /// `closed_at`.
    ClosedAt,
    /// `closed_by` (`check` | `confirmed` | `cancelled`).
    ClosedBy,
    /// `closed_actor`.
    ClosedActor,
    /// `closed_reason`.
    ClosedReason,
    /// `due`.
    Due,
    /// `card_chat_id`.
    CardChatId,
    /// `card_message_id`.
    CardMessageId,
    /// `waiting_on`.
    WaitingOn,
    /// `waiting_since`.
    WaitingSince,
    /// `result`.
    Result,
    /// `result_at`.
    ResultAt,
    /// `stall_at`.
    StallAt,
    /// `stall_status`.
    StallStatus,
    /// `stall_next`.
    StallNext,
    /// `check`.
    Check,
}

/// One change to a task record, applied in order (upstream interleaves body appends and field
/// sets, and the order decides the body's bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskEdit {
    /// A field takes a value (`None`: null).
    Set {
        /// The field.
        field: TaskField,
        /// The new value.
        value: Option<String>,
    },
    /// `- <at> <actor>: <text>` is appended to a body section (created when absent).
    Append {
        /// The section heading without `## ` (`Progress`, `Decisions`, ...).
        section: String,
        /// The entry's actor.
        actor: String,
        /// The entry's text.
        text: String,
    },
    /// `result_rev` takes this value.
    ResultRev(u64),
}

/// A task record (`tasks/<id>.md`): every frontmatter key `task.ts` writes, and the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[expect(missing_docs, reason = "each field is the frontmatter key of the same name")]
pub struct TaskDoc {
    pub id: String,
    /// The `type` key: always `task`.
    pub kind: String,
    pub title: String,
    pub created: String,
    pub summary: String,
    pub audience: String,
    pub status: String,
    pub opened_at: String,
    pub requester: String,
    pub handle: String,
    pub owner: String,
    pub closed_at: Option<String>,
    pub closed_by: Option<String>,
    pub closed_actor: Option<String>,
    pub closed_reason: Option<String>,
    pub requester_name: Option<String>,
    pub origin_message_id: Option<String>,
    pub approver: Option<String>,
    pub due: Option<String>,
    pub conversation: Option<String>,
    pub card_chat_id: Option<String>,
    pub card_message_id: Option<String>,
    pub waiting_on: Option<String>,
    pub waiting_since: Option<String>,
    pub result: Option<String>,
    pub result_at: Option<String>,
    pub stall_at: Option<String>,
    pub stall_status: Option<String>,
    pub stall_next: Option<String>,
    pub dedupe_key: Option<String>,
    pub check: Option<String>,
    pub tags: Vec<String>,
    pub claims: Vec<String>,
    pub result_rev: u64,
    /// Everything after the closing `---` line.
    pub body: String,
}

/// The fields of a task record its index rows are keyed by: a record's place in `readTasks`
/// order (`opened_at`, then `id`) and the values open records are looked up by. Events that
/// change a record carry them, so a projection names the index rows it touches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskKeys {
    /// `id`.
    pub id: String,
    /// `opened_at`.
    pub opened_at: String,
    /// `handle` (unique among open records).
    pub handle: String,
    /// `dedupe_key`.
    pub dedupe_key: Option<String>,
    /// `conversation`.
    pub conversation: Option<String>,
    /// `requester`.
    pub requester: String,
}

impl TaskKeys {
    /// The keys of a record.
    #[must_use]
    pub fn of(task: &TaskDoc) -> TaskKeys {
        TaskKeys {
            id: task.id.clone(),
            opened_at: task.opened_at.clone(),
            handle: task.handle.clone(),
            dedupe_key: task.dedupe_key.clone(),
            conversation: task.conversation.clone(),
            requester: task.requester.clone(),
        }
    }
}

/// A task record as the store keeps it (`session.task` rows): the record and where its file
/// lives under `tasks/` when not at `tasks/<id>.md`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRow {
    /// The record.
    pub task: TaskDoc,
    /// The file's path under `tasks/` when it is not `<id>.md`.
    pub path: Option<String>,
}

/// An index row naming one task record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRef {
    /// The record's id.
    pub id: String,
}

/// Counts over a hermit's task records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TasksMeta {
    /// Records whose `status` is `open`.
    pub open: u64,
}

/// The view kind of the session's markdown files (`SHELL.md`, the template), by file name.
pub const TEXT_KIND: &str = "session.text";
/// The id of `sessions/SHELL.md`'s row.
pub const SHELL_ID: &str = "SHELL.md";

/// A markdown file's exact text (`SHELL.md`, the template, a report).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextDoc {
    /// The whole file.
    pub text: String,
}

/// The highest `S-NNN` of the session reports the store holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportsMeta {
    /// The highest report number, 0 when there is none.
    pub max: u64,
}

/// What a line ledger kept as one row per line holds besides its lines: the unterminated tail
/// and the number of lines. Its presence is the file's: no row, no file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerMeta {
    /// The text after the last newline (empty when the file ends with one).
    pub tail: String,
    /// Newline-terminated lines.
    pub lines: u64,
}

/// One newline-terminated line of a ledger kept as one row per line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineDoc {
    /// The line without its newline.
    pub text: String,
}

/// The ids of `hypotheses.jsonl` rows in state `held` (`heldClaim`), sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldDoc {
    /// The ids.
    pub ids: Vec<String>,
}

/// Why `runtime.json` changed: the lifecycle move (legacy-layout §2.4) a verb made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RuntimeCause {
    /// `hermit-start` seeded a missing file.
    Seed,
    /// `session-archive open`: `in_progress`, a session id, a new cost arc.
    Open,
    /// Archive step 1: `transition=archiving`.
    ArchiveBegin,
    /// Archive step 3: `transition=cleaning`.
    ArchiveCleaning,
    /// Archive step 5: transition cleared, `idle`, the next id (or null).
    ArchiveEnd,
    /// `session-archive recover` cleared an interrupted transition.
    Recover,
    /// The next-task ack parked an idle session (`waiting`, `conservative_pickup`).
    Wait,
    /// The heartbeat tick ended a wait past its timeout (`idle`).
    WaitTimeout,
    /// The operator answered a waiting session (`in_progress`).
    Resume,
    /// An emergency halt (`waiting`, `operator_input`).
    Halt,
    /// `hermit-stop` asked for a shutdown.
    ShutdownRequested,
    /// `hermit-stop` found no session and completed the shutdown.
    ShutdownCompleted,
    /// A writer merged fields it owns (watchdog, cost tracker, stop pipeline, PreCompact).
    Merge,
    /// A mirror adopted fields a legacy writer changed in the file.
    Adopted,
}

/// How `session-archive archive` resets `SHELL.md`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShellReset {
    /// `--mode=idle`: sections emptied, Monitoring compacted, a Session Summary line added.
    Idle {
        /// The archived session (`S-NNN`).
        session_id: String,
        /// The local date of the archive (`YYYY-MM-DD`).
        date: String,
        /// The normalised payload status (`completed` | `partial` | `blocked`).
        status: String,
        /// The session's cost in USD, as `toFixed(2)` prints it.
        cost: String,
        /// Monitoring lines above which the section is rolled up.
        monitoring_threshold: u64,
        /// Monitoring lines kept below the roll-up.
        monitoring_keep: u64,
        /// Summary lines above which the section is rolled up.
        summary_threshold: u64,
        /// Summary lines kept below the roll-up.
        summary_keep: u64,
    },
    /// `--mode=close|auto`: the template, keeping the Blockers section.
    Close {
        /// `templates/SHELL.md.template`, or `None` for upstream's built-in fallback.
        template: Option<String>,
    },
}

/// What happened to one hermit's session state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionEvent {
    /// `runtime.json` changed field by field: the `sets` (key, compact JSON text) are written in
    /// place or appended, the `unset` keys deleted, `updated_at` stamped last.
    RuntimeChanged {
        /// The lifecycle move.
        cause: RuntimeCause,
        /// Fields written.
        sets: Vec<(String, String)>,
        /// Fields deleted.
        unset: Vec<String>,
        /// The localISOStamp written to `updated_at`.
        updated_at: String,
    },
    /// A whole JSON file was adopted as written (import, or a mirror adopting an outside write).
    JsonAdopted {
        /// The file's path under the state directory (`state/runtime.json`, ...).
        file: String,
        /// Its content.
        doc: JsonDoc,
        /// The fields continue the previous event's (a file too large for one event).
        #[serde(default)]
        append: bool,
    },
    /// A task was opened (or adopted from its file).
    TaskOpened {
        /// The whole record.
        task: Box<TaskDoc>,
        /// Where an adopted file lives under `tasks/` when not at `tasks/<id>.md` (readers scan
        /// `tasks/**`); `None` for `tasks/<id>.md`.
        path: Option<String>,
    },
    /// A verb changed an open task.
    TaskChanged {
        /// The task id.
        id: String,
        /// The record's index keys.
        keys: TaskKeys,
        /// The verb (`note`, `block`, `close`, `cancel`).
        verb: String,
        /// The entries' timestamp (toISOString of the call).
        at: String,
        /// The changes, in order.
        edits: Vec<TaskEdit>,
    },
    /// A task record was replaced by its file's version (a mirror adopting an outside write).
    TaskAdopted {
        /// The whole record.
        task: Box<TaskDoc>,
        /// Where the file lives under `tasks/` when not at `tasks/<id>.md`.
        path: Option<String>,
        /// The index keys of the record it replaces.
        previous: TaskKeys,
    },
    /// A conversation key was bound to a helper session (a claim: the key was free).
    ConversationBound {
        /// `<sourceKey>:<chat_id>`.
        key: String,
        /// The new record, compact JSON text.
        record: String,
    },
    /// A binding's fields were merged; `generation` rose by `generation_delta`.
    ConversationUpdated {
        /// The key.
        key: String,
        /// Fields written (key, compact JSON text), in the caller's order.
        sets: Vec<(String, String)>,
        /// 1 for `--generation +1`, else 0.
        generation_delta: u64,
        /// toISOString written to `last_activity`.
        last_activity: String,
    },
    /// One binding was adopted from the file as written (`None`: the file removed it).
    ConversationAdopted {
        /// The key.
        key: String,
        /// The record, compact JSON text.
        record: Option<String>,
    },
    /// A binding was removed (a missing key is no error, as upstream).
    ConversationUnbound {
        /// The key.
        key: String,
    },
    /// `prune` marked these running or idle bindings `unknown`.
    ConversationsPruned {
        /// The keys, in store order.
        keys: Vec<String>,
    },
    /// A line was appended to a ledger (`appendFileSync(line + "\n")`).
    LineAppended {
        /// Which ledger.
        ledger: Ledger,
        /// The line, without its newline.
        line: String,
    },
    /// Text was appended to a ledger without a newline (an outside writer's torn line).
    TailAppended {
        /// Which ledger.
        ledger: Ledger,
        /// The text.
        text: String,
    },
    /// A whole ledger was adopted as written.
    LedgerAdopted {
        /// Which ledger.
        ledger: Ledger,
        /// Its content (with `append`: lines continuing the previous event's, which ended at a
        /// line break).
        file: LineFile,
        /// The lines continue the previous event's (a file too large for one event).
        #[serde(default)]
        append: bool,
    },
    /// Lines of `observations.jsonl` were removed, named by their positions (a mirror adopting
    /// an outside rewrite, or an import replacing the ledger).
    LinesDropped {
        /// The positions (see `LineDoc` rows).
        positions: Vec<u64>,
    },
    /// `prune-observations`: the lines the 30-day rule drops and the blank ones, named by their
    /// positions among the lines the prune saw; later appends are untouched.
    ObservationsPruned {
        /// toISOString of now minus the retention: a row is fresh when its `ts` is not below.
        cutoff: String,
        /// The positions of the dropped lines.
        dropped: Vec<u64>,
        /// The unterminated tail the prune saw: `Some(true)` kept (it gets its newline),
        /// `Some(false)` dropped, `None` when there was none.
        tail: Option<bool>,
    },
    /// `later.ts` patched a pending hypothesis (`Object.assign`) and rewrote the ledger, which
    /// drops blank and unparseable lines and re-serialises every row.
    HypothesisPatched {
        /// The row's id.
        id: String,
        /// Fields written (key, compact JSON text), in order.
        sets: Vec<(String, String)>,
    },
    /// A marker file was written whole.
    MarkerWritten {
        /// Which marker.
        marker: Marker,
        /// Its content.
        doc: JsonDoc,
    },
    /// A marker file was removed.
    MarkerRemoved {
        /// Which marker.
        marker: Marker,
    },
    /// A line was appended to a `SHELL.md` section (`appendToSection`).
    ShellAppended {
        /// The heading without `## ` (`Findings`, `Progress Log`, `Monitoring`, `Blockers`).
        section: String,
        /// The line (it may hold newlines, as upstream's trimmed stdin may).
        line: String,
    },
    /// `SHELL.md` was written whole (adopted, or opened from the template).
    ShellWritten {
        /// The whole file (with `append`: the text continuing the previous event's).
        text: String,
        /// The text continues the previous event's (a file too large for one event).
        #[serde(default)]
        append: bool,
    },
    /// `SHELL.md` was reset by an archive.
    ShellReset {
        /// How.
        reset: ShellReset,
    },
    /// A session report `sessions/S-NNN-REPORT.md` was written (or adopted).
    ReportWritten {
        /// `S-NNN`.
        session_id: String,
        /// The whole file (with `append`: the text continuing the previous event's).
        text: String,
        /// The text continues the previous event's (a file too large for one event).
        #[serde(default)]
        append: bool,
    },
    /// `templates/SHELL.md.template` was adopted as written (read, never written by hermit).
    TemplateAdopted {
        /// The whole file (with `append`: the text continuing the previous event's).
        text: String,
        /// The text continues the previous event's.
        #[serde(default)]
        append: bool,
    },
    /// A legacy file that could not be read as its kind was set aside as `<file>.corrupt-<ms>`.
    FileQuarantined {
        /// The file's path under the state directory.
        file: String,
        /// Why it was refused.
        reason: String,
    },
}

impl SessionEvent {
    /// The kind name, as `hookstate log --kind` matches it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            SessionEvent::RuntimeChanged { .. } => "runtime_changed",
            SessionEvent::JsonAdopted { .. } => "json_adopted",
            SessionEvent::TaskOpened { .. } => "task_opened",
            SessionEvent::TaskChanged { .. } => "task_changed",
            SessionEvent::TaskAdopted { .. } => "task_adopted",
            SessionEvent::ConversationBound { .. } => "conversation_bound",
            SessionEvent::ConversationUpdated { .. } => "conversation_updated",
            SessionEvent::ConversationAdopted { .. } => "conversation_adopted",
            SessionEvent::ConversationUnbound { .. } => "conversation_unbound",
            SessionEvent::ConversationsPruned { .. } => "conversations_pruned",
            SessionEvent::LineAppended { .. } => "line_appended",
            SessionEvent::TailAppended { .. } => "tail_appended",
            SessionEvent::LedgerAdopted { .. } => "ledger_adopted",
            SessionEvent::LinesDropped { .. } => "lines_dropped",
            SessionEvent::ObservationsPruned { .. } => "observations_pruned",
            SessionEvent::HypothesisPatched { .. } => "hypothesis_patched",
            SessionEvent::MarkerWritten { .. } => "marker_written",
            SessionEvent::MarkerRemoved { .. } => "marker_removed",
            SessionEvent::ShellAppended { .. } => "shell_appended",
            SessionEvent::ShellWritten { .. } => "shell_written",
            SessionEvent::ShellReset { .. } => "shell_reset",
            SessionEvent::ReportWritten { .. } => "report_written",
            SessionEvent::TemplateAdopted { .. } => "template_adopted",
            SessionEvent::FileQuarantined { .. } => "file_quarantined",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_the_record_encoding() {
        let keys = TaskKeys {
            id: "T-20260914-081502".into(),
            opened_at: "2026-09-14T08:15:02.118Z".into(),
            handle: "h".into(),
            dedupe_key: None,
            conversation: None,
            requester: "operator".into(),
        };
        let event = SessionEvent::TaskChanged {
            keys,
            id: "T-20260914-081502".into(),
            verb: "note".into(),
            at: "2026-09-14T08:15:02.118Z".into(),
            edits: vec![
                TaskEdit::Append {
                    section: "Progress".into(),
                    actor: "a".into(),
                    text: "b".into(),
                },
                TaskEdit::Set { field: TaskField::Due, value: None },
                TaskEdit::ResultRev(2),
            ],
        };
        let bytes = rmp_serde::to_vec_named(&event).unwrap();
        let back: SessionEvent = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, event);
        assert_eq!(back.kind(), "task_changed");
    }

    #[test]
    fn an_empty_line_file_is_one_empty_tail() {
        assert_eq!(LineFile::default().lines, vec![String::new()]);
    }
}
