//! The `hermit-session` legacy layout's files: which files of a `.claude-code-hermit` state
//! directory the session domain owns, and the codec that reads each from its bytes and writes it
//! back to the exact bytes upstream's writers produce (import → export is byte for byte).
//!
//! JSON files go through the shared ordered-object codec (`legacy::json`), line files keep their
//! lines, markdown keeps its text, task records go through `task.rs`. A file that would not come
//! back byte for byte is refused with the reason. Does not read or write files; `io.rs` and
//! `mirror.rs` do, under an opened root.

use hookstate_schema::session::{JsonDoc, Ledger, LineFile, Marker, TaskDoc};

use super::task;
use crate::kernel::error::{Error, Result};
use crate::legacy::json as legacy_json;
use crate::session::rules::task_doc::is_task_id;

/// A marker or small state file: far below this.
pub(crate) const MARKER_BYTES_MAX: usize = 64 * 1024;
/// `runtime.json`: about twenty fields.
pub(crate) const RUNTIME_BYTES_MAX: usize = 256 * 1024;
/// `conversations.json`: a few hundred bytes per binding, at most `OBJECT_KEYS_MAX` bindings.
pub(crate) const CONVERSATIONS_BYTES_MAX: usize = 1024 * 1024;
/// A JSONL ledger grows for the life of a hermit; beyond this, prune or rotate it first.
pub(crate) const LEDGER_BYTES_MAX: usize = 64 * 1024 * 1024;
/// A task record: a page of frontmatter and a body of short entries.
pub(crate) const TASK_BYTES_MAX: usize = 256 * 1024;
/// `SHELL.md`, a report or the template: a session's notes.
pub(crate) const TEXT_BYTES_MAX: usize = 1024 * 1024;
/// Directory levels under `tasks/` an import descends (readers scan `tasks/**`).
pub(crate) const TASK_DEPTH_MAX: usize = 8;

/// One file of the layout, by its path under the state directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SessionFile {
    /// `state/runtime.json`.
    Runtime,
    /// `state/conversations.json`.
    Conversations,
    /// `state/observations.jsonl` or `state/hypotheses.jsonl`.
    Ledger(Ledger),
    /// A marker under `state/`.
    Marker(Marker),
    /// A task record under `tasks/`.
    Task {
        /// The path under `tasks/` (`T-….md`, or deeper).
        path: String,
    },
    /// `sessions/SHELL.md`.
    Shell,
    /// `sessions/S-NNN-REPORT.md`.
    Report {
        /// The file name.
        name: String,
    },
    /// `templates/SHELL.md.template` (read, never written).
    ShellTemplate,
}

/// Every marker with its file name under `state/`.
pub(crate) const MARKERS: [(Marker, &str); 11] = [
    (Marker::LastOperatorAction, "last-operator-action.json"),
    (Marker::OperatorTurnOpen, "operator-turn-open.json"),
    (Marker::PendingClose, "pending-close.json"),
    (Marker::PendingCloseDrain, "pending-close-drain.json"),
    (Marker::CompactRequested, "compact-requested.json"),
    (Marker::ClearRequested, "clear-requested.json"),
    (Marker::OperatorPause, "operator-pause.json"),
    (Marker::AutoPause, "auto-pause.json"),
    (Marker::LegacyPause, "pause.json"),
    (Marker::TaskTurn, "task-turn.json"),
    (Marker::Execution, "execution.json"),
];

/// A file's content, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// A JSON object (runtime, conversations, markers).
    Json(JsonDoc),
    /// A JSONL ledger.
    Lines(LineFile),
    /// A task record.
    Task(Box<TaskDoc>),
    /// Markdown (SHELL.md, a report, the template).
    Text(String),
}

fn is_report_name(name: &str) -> bool {
    crate::session::rules::archive::report_number(name).is_some()
}

/// The layout file at `path` (relative, `/`-separated), or `None` for a file the domain does not
/// own (a quarantined `<file>.corrupt-<ms>` included).
#[must_use]
pub fn kind_of(path: &str) -> Option<SessionFile> {
    let (dir, name) = path.split_once('/')?;
    match dir {
        "state" => match name {
            "runtime.json" => Some(SessionFile::Runtime),
            "conversations.json" => Some(SessionFile::Conversations),
            "observations.jsonl" => Some(SessionFile::Ledger(Ledger::Observations)),
            "hypotheses.jsonl" => Some(SessionFile::Ledger(Ledger::Hypotheses)),
            _ => MARKERS.iter().find(|(_, n)| *n == name).map(|(m, _)| SessionFile::Marker(*m)),
        },
        "tasks" => {
            let parts: Vec<&str> = name.split('/').collect();
            let file = parts.last()?;
            let id = file.strip_suffix(".md")?;
            let depth_ok = parts.len() <= TASK_DEPTH_MAX;
            let parts_ok = parts.iter().all(|p| !p.is_empty() && *p != "." && *p != "..");
            (depth_ok && parts_ok && is_task_id(id))
                .then(|| SessionFile::Task { path: name.to_owned() })
        }
        "sessions" if name == "SHELL.md" => Some(SessionFile::Shell),
        "sessions" if is_report_name(name) => Some(SessionFile::Report { name: name.to_owned() }),
        "templates" if name == "SHELL.md.template" => Some(SessionFile::ShellTemplate),
        _ => None,
    }
}

/// The path of a layout file under the state directory.
#[must_use]
pub fn path_of(file: &SessionFile) -> String {
    match file {
        SessionFile::Runtime => "state/runtime.json".into(),
        SessionFile::Conversations => "state/conversations.json".into(),
        SessionFile::Ledger(Ledger::Observations) => "state/observations.jsonl".into(),
        SessionFile::Ledger(Ledger::Hypotheses) => "state/hypotheses.jsonl".into(),
        SessionFile::Marker(marker) => {
            let name = MARKERS.iter().find(|(m, _)| m == marker).map_or("", |(_, n)| n);
            format!("state/{name}")
        }
        SessionFile::Task { path } => format!("tasks/{path}"),
        SessionFile::Shell => "sessions/SHELL.md".into(),
        SessionFile::Report { name } => format!("sessions/{name}"),
        SessionFile::ShellTemplate => "templates/SHELL.md.template".into(),
    }
}

/// Where a task lives when nothing else is known: `tasks/<id>.md` (where `task.ts` writes it).
#[must_use]
pub(crate) fn task_file(id: &str) -> SessionFile {
    SessionFile::Task { path: format!("{id}.md") }
}

/// The byte bound of a file kind.
#[must_use]
pub(crate) fn bytes_max(file: &SessionFile) -> usize {
    match file {
        SessionFile::Runtime => RUNTIME_BYTES_MAX,
        SessionFile::Conversations => CONVERSATIONS_BYTES_MAX,
        SessionFile::Ledger(_) => LEDGER_BYTES_MAX,
        SessionFile::Marker(_) => MARKER_BYTES_MAX,
        SessionFile::Task { .. } => TASK_BYTES_MAX,
        SessionFile::Shell | SessionFile::Report { .. } | SessionFile::ShellTemplate => {
            TEXT_BYTES_MAX
        }
    }
}

fn text<'a>(path: &str, bytes: &'a [u8]) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| Error::legacy(path, "is not UTF-8"))
}

/// Reads a file's bytes as its kind.
///
/// # Errors
/// [`Error::LegacyFile`] (or [`Error::TooLarge`]) naming the file and the reason: over its bound, not UTF-8, not one JSON
/// object in a layout written back byte for byte, not a valid task record.
pub fn parse(file: &SessionFile, bytes: &[u8]) -> Result<Content> {
    parse_as(file, bytes, true)
}

/// Reads the bytes of a file changed outside the store, as [`parse`] does, except that a JSON
/// object in a layout upstream does not write (another indent, CRLF line ends, no final newline:
/// a hand edit, which upstream's `JSON.parse` reads) is read for its content, and the mirror
/// writes it back in upstream's layout.
///
/// # Errors
/// As [`parse`], but for the layout.
pub(crate) fn parse_changed(file: &SessionFile, bytes: &[u8]) -> Result<Content> {
    parse_as(file, bytes, false)
}

fn parse_as(file: &SessionFile, bytes: &[u8], exact: bool) -> Result<Content> {
    let path = path_of(file);
    let max = bytes_max(file);
    if bytes.len() > max {
        return Err(Error::TooLarge { what: path, len: bytes.len(), max });
    }
    Ok(match file {
        SessionFile::Runtime | SessionFile::Conversations | SessionFile::Marker(_) if exact => {
            Content::Json(legacy_json::parse_doc(&path, bytes)?)
        }
        SessionFile::Runtime | SessionFile::Conversations | SessionFile::Marker(_) => {
            Content::Json(legacy_json::parse_doc_any(&path, bytes)?.0)
        }
        SessionFile::Ledger(_) => Content::Lines(LineFile {
            lines: text(&path, bytes)?.split('\n').map(str::to_owned).collect(),
        }),
        SessionFile::Task { .. } if exact => Content::Task(Box::new(task::parse(&path, bytes)?)),
        SessionFile::Task { .. } => Content::Task(Box::new(task::parse_changed(&path, bytes)?)),
        SessionFile::Shell | SessionFile::Report { .. } | SessionFile::ShellTemplate => {
            Content::Text(text(&path, bytes)?.to_owned())
        }
    })
}

/// The bytes of a content, as upstream writes it.
#[must_use]
pub fn render(content: &Content) -> String {
    match content {
        Content::Json(doc) => legacy_json::render(doc),
        Content::Lines(file) => file.lines.join("\n"),
        Content::Task(t) => task::render(t),
        Content::Text(text) => text.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_kinds_and_back() {
        for path in [
            "state/runtime.json",
            "state/conversations.json",
            "state/observations.jsonl",
            "state/hypotheses.jsonl",
            "state/pause.json",
            "state/task-turn.json",
            "tasks/T-20260914-081502.md",
            "tasks/2026/09/T-20260914-081502-a.md",
            "sessions/SHELL.md",
            "sessions/S-045-REPORT.md",
            "templates/SHELL.md.template",
        ] {
            let kind = kind_of(path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(path_of(&kind), path);
        }
        for path in [
            "state/runtime.json.corrupt-1789377123554",
            "state/alert-state.json",
            "tasks/notes.md",
            "tasks/../T-20260914-081502.md",
            "sessions/S-45x-REPORT.md",
            "runtime.json",
            "tasks//T-20260914-081502.md",
        ] {
            assert_eq!(kind_of(path), None, "{path}");
        }
    }

    #[test]
    fn oversized_and_non_utf8_files_are_refused() {
        let big = vec![b' '; MARKER_BYTES_MAX + 1];
        let marker = SessionFile::Marker(Marker::PendingClose);
        assert!(parse(&marker, &big).unwrap_err().to_string().contains("limit is"));
        assert!(parse(&SessionFile::Shell, b"\xc3").unwrap_err().to_string().contains("UTF-8"));
        let ledger = SessionFile::Ledger(Ledger::Observations);
        let torn = b"{\"a\":1}\n{\"b\":";
        assert_eq!(render(&parse(&ledger, torn).unwrap()).as_bytes(), torn);
    }
}
