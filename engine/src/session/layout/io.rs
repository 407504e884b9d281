//! The `hermit-session` layout's files on disk and in the store: the walk of a state
//! directory, the files the store holds for a hermit, each file's bytes rendered from its rows,
//! and the import and export of the whole layout (every file checked before anything is
//! written; an export writes back the bytes an import read).
//!
//! Every file is reached through `legacy::root::Root`. Does not decide; the import's events
//! adopt each file as written.

use std::path::Path;

use hookstate_schema::session::{Ledger, SessionEvent, TaskKeys};
use serde_json::{json, Map, Value};

use super::files::{self, Content, SessionFile, MARKERS, TASK_DEPTH_MAX};
use super::task;
use crate::kernel::call::{Call, Outcome, Plan};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::legacy::json as legacy_json;
use crate::legacy::mirror::{read_at, RelPath};
use crate::legacy::root::Root;
use crate::session::api::{bodies, Session};
use crate::session::rules::chunk::PART_BYTES_MAX;
use crate::session::views;

/// The directories of the layout under the state directory.
const DIRS: [&str; 4] = ["state", "tasks", "sessions", "templates"];

/// A layout file's path as the mirror names it.
pub(crate) fn rel(file: &SessionFile) -> Result<RelPath> {
    let path = files::path_of(file);
    let parts: Vec<&str> = path.split('/').collect();
    RelPath::new(&parts)
}

fn walk_tasks(root: &Root, prefix: &str, depth: usize, out: &mut Vec<SessionFile>) -> Result<()> {
    for name in root.list()? {
        let path = format!("{prefix}/{name}");
        if let Some(file @ SessionFile::Task { .. }) = files::kind_of(&path) {
            out.push(file);
            continue;
        }
        if depth >= TASK_DEPTH_MAX || name.starts_with('.') {
            continue;
        }
        // Anything else is a subdirectory to descend, or a file the layout does not own.
        if let Ok(Some(sub)) = root.subdir(&name, false) {
            walk_tasks(&sub, &path, depth + 1, out)?;
        }
    }
    Ok(())
}

/// Every layout file in the state directory `root`, in path order.
pub(crate) fn walk(root: &Root) -> Result<Vec<SessionFile>> {
    let mut out = Vec::new();
    for dir in DIRS {
        let Some(sub) = root.subdir(dir, false)? else { continue };
        if dir == "tasks" {
            walk_tasks(&sub, dir, 1, &mut out)?;
            continue;
        }
        for name in sub.list()? {
            if let Some(file) = files::kind_of(&format!("{dir}/{name}")) {
                out.push(file);
            }
        }
    }
    Ok(out)
}

fn task_file(row: &hookstate_schema::session::TaskRow) -> SessionFile {
    match &row.path {
        Some(path) => SessionFile::Task { path: path.clone() },
        None => files::task_file(&row.task.id),
    }
}

/// Every layout file the store holds for `scope`.
pub(crate) fn stored(txn: &dyn ReadTxn, scope: &str) -> Result<Vec<SessionFile>> {
    let mut out = Vec::new();
    if views::runtime_text(txn, scope)?.is_some() {
        out.push(SessionFile::Runtime);
    }
    if views::conversations(txn, scope)?.is_some() {
        out.push(SessionFile::Conversations);
    }
    for (marker, _) in MARKERS {
        if views::marker(txn, scope, marker)?.is_some() {
            out.push(SessionFile::Marker(marker));
        }
    }
    if views::observations_meta(txn, scope)?.is_some() {
        out.push(SessionFile::Ledger(Ledger::Observations));
    }
    if views::hypotheses(txn, scope)?.is_some() {
        out.push(SessionFile::Ledger(Ledger::Hypotheses));
    }
    out.extend(views::all_tasks(txn, scope)?.iter().map(task_file));
    if views::text(txn, scope, views::SHELL_ID)?.is_some() {
        out.push(SessionFile::Shell);
    }
    if views::text(txn, scope, views::TEMPLATE_ID)?.is_some() {
        out.push(SessionFile::ShellTemplate);
    }
    for name in views::report_names(txn, scope)? {
        out.push(SessionFile::Report { name });
    }
    Ok(out)
}

/// The store's bytes for one file of `scope`; `None` when it holds nothing there.
pub(crate) fn render(txn: &dyn ReadTxn, scope: &str, file: &SessionFile) -> Result<Option<String>> {
    Ok(match file {
        SessionFile::Runtime => views::runtime_text(txn, scope)?,
        SessionFile::Conversations => {
            views::conversations(txn, scope)?.map(|d| legacy_json::render(&d))
        }
        SessionFile::Marker(marker) => {
            views::marker(txn, scope, *marker)?.map(|d| legacy_json::render(&d))
        }
        SessionFile::Ledger(Ledger::Observations) => {
            views::observations(txn, scope)?.map(|l| l.text())
        }
        SessionFile::Ledger(Ledger::Hypotheses) => {
            views::hypotheses(txn, scope)?.map(|f| f.lines.join("\n"))
        }
        SessionFile::Task { path } => {
            let id = path.rsplit('/').next().unwrap_or(path).trim_end_matches(".md");
            views::task(txn, scope, id)?
                .filter(|row| task_file(row) == *file)
                .map(|row| task::render(&row.task))
        }
        SessionFile::Shell => views::text(txn, scope, views::SHELL_ID)?,
        SessionFile::ShellTemplate => views::text(txn, scope, views::TEMPLATE_ID)?,
        SessionFile::Report { name } => views::report(txn, scope, name)?,
    })
}

/// The path a task record's row keeps: `None` for `tasks/<id>.md`.
pub(crate) fn task_path(file: &SessionFile, id: &str) -> Option<String> {
    match file {
        SessionFile::Task { path } if *path != format!("{id}.md") => Some(path.clone()),
        _ => None,
    }
}

/// Checks that a task record fits one event and its index keys hold no NUL.
///
/// # Errors
/// [`Error::LegacyFile`] naming the file.
pub(crate) fn check_task(path: &str, t: &hookstate_schema::session::TaskDoc) -> Result<()> {
    let len = serde_json::to_string(t).map_or(usize::MAX, |s| s.len());
    if len > PART_BYTES_MAX {
        let why = format!("is {len} bytes as a record, over the {PART_BYTES_MAX} one event holds");
        return Err(Error::legacy(path, why));
    }
    if t.dedupe_key.as_deref().is_some_and(|d| d.contains('\0')) {
        return Err(Error::legacy(path, "has a dedupe_key holding a NUL"));
    }
    Ok(())
}

/// The events that adopt one file as written (the store's version of it replaced).
pub(crate) fn adopt_file(
    txn: &dyn ReadTxn,
    scope: &str,
    file: &SessionFile,
    content: Content,
) -> Result<Vec<SessionEvent>> {
    let path = files::path_of(file);
    Ok(match content {
        Content::Json(doc) => vec![SessionEvent::JsonAdopted { file: path, doc, append: false }],
        Content::Lines(lines) => {
            let SessionFile::Ledger(ledger) = file else { return Ok(Vec::new()) };
            let mut events = Vec::new();
            if *ledger == Ledger::Observations {
                let held = views::observations(txn, scope)?.unwrap_or_default();
                let positions: Vec<u64> = held.lines.iter().map(|(p, _)| *p).collect();
                if !positions.is_empty() {
                    events.push(SessionEvent::LinesDropped { positions });
                }
            }
            events.push(SessionEvent::LedgerAdopted {
                ledger: *ledger,
                file: lines,
                append: false,
            });
            events
        }
        Content::Task(t) => {
            check_task(&path, &t)?;
            let at = task_path(file, &t.id);
            match views::task(txn, scope, &t.id)? {
                Some(row) => {
                    let previous = TaskKeys::of(&row.task);
                    vec![SessionEvent::TaskAdopted { task: t, path: at, previous }]
                }
                None => vec![SessionEvent::TaskOpened { task: t, path: at }],
            }
        }
        Content::Text(text) => match file {
            SessionFile::Shell => vec![SessionEvent::ShellWritten { text, append: false }],
            SessionFile::ShellTemplate => {
                vec![SessionEvent::TemplateAdopted { text, append: false }]
            }
            SessionFile::Report { name } => {
                let session_id = name.trim_end_matches("-REPORT.md").to_owned();
                vec![SessionEvent::ReportWritten { session_id, text, append: false }]
            }
            _ => Vec::new(),
        },
    })
}

/// Writes a layout file under `root` durably, creating its directories.
fn write_at(root: &Root, path: &RelPath, bytes: &[u8]) -> Result<()> {
    let (name, dirs) = path.parts().split_last().ok_or_else(|| Error::bad("path", "is empty"))?;
    let mut dir = Root::open(root.path(), false)?;
    for part in dirs {
        dir = dir.subdir(part, true)?.ok_or_else(|| Error::bad(part.clone(), "was not created"))?;
    }
    dir.write(name, bytes)
}

/// Every layout file under `dir`, read and parsed.
fn read_dir(dir: &Path) -> Result<Vec<(SessionFile, Content)>> {
    let root = Root::open(dir, false)?;
    let mut out = Vec::new();
    for file in walk(&root)? {
        let path = rel(&file)?;
        let Some(bytes) = read_at(&root, &path, files::bytes_max(&file))? else { continue };
        let content = files::parse(&file, &bytes)?;
        out.push((file, content));
    }
    Ok(out)
}

impl Session<'_> {
    /// Imports the `hermit-session` files of the state directory `dir` into the call's scope:
    /// each file's record replaces the store's; records the directory lacks are kept. Every file
    /// is read and checked before anything is written.
    ///
    /// # Errors
    /// [`Error::LegacyFile`] or [`Error::TooLarge`] naming the first refused file (the store
    /// unchanged); unsafe paths; store errors.
    pub fn import(&self, call: &Call, dir: &Path) -> Result<Outcome> {
        crate::kernel::write::validate_call(call)?;
        let found = read_dir(dir)?;
        let count = found.len();
        let scope = call.scope.clone();
        self.k.write(call, |txn| {
            let mut events = Vec::new();
            for (file, content) in &found {
                events.extend(adopt_file(txn, &scope, file, content.clone())?);
            }
            let result = json!({ "layout": "hermit-session", "files": count, "scope": scope });
            Ok(Plan { events: bodies(events), ..Plan::answer(result) })
        })
    }

    /// Writes every `hermit-session` file the store holds for `scope` under `dir`, byte for
    /// byte, creating its directories.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn export(&self, scope: &str, dir: &Path) -> Result<Map<String, Value>> {
        hookstate_schema::validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let root = Root::open(dir, true)?;
        let (mut count, mut bytes) = (0usize, 0usize);
        for file in stored(&*txn, scope)? {
            let Some(text) = render(&*txn, scope, &file)? else { continue };
            write_at(&root, &rel(&file)?, text.as_bytes())?;
            count += 1;
            bytes += text.len();
        }
        let out = json!({ "layout": "hermit-session", "files": count, "bytes": bytes });
        Ok(crate::kernel::call::fields(out))
    }
}
