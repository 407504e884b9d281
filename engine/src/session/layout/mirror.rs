//! The `hermit-session` layout in the one mirror protocol (`legacy::mirror`): its files are
//! those the state directory holds and those the store holds, each rendered from its rows and
//! each outside change merged per record (`merge.rs`).
//!
//! A JSON file in a layout upstream does not write (a hand edit) is adopted for its content and
//! written back in upstream's layout. A file that does not parse as its kind is quarantined as
//! `<file>.corrupt-<ms>` (and the store's version written in its place), except
//! `state/conversations.json`, which upstream refuses rather than overwrites: a corrupt one fails
//! the call with every file and the store unchanged. A marker the store removed is removed from the
//! directory. Does not decide verbs.

use hookstate_schema::session::{Ledger, SessionEvent};
use hookstate_schema::Body;

use super::files::{self, Content, SessionFile};
use super::io::{rel, render, stored, task_path, walk};
use super::merge::{self, Merged};
use crate::kernel::call::Call;
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::legacy::json as legacy_json;
use crate::legacy::mirror::{Adoption, Change, Layout, RelPath};
use crate::legacy::root::Root;
use crate::session::rules::chunk;
use crate::session::views;

/// The session files of a `.claude-code-hermit` directory as a mirrored layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionLayout;

fn kind(path: &RelPath) -> Option<SessionFile> {
    files::kind_of(&path.display())
}

impl Layout for SessionLayout {
    fn name(&self) -> &'static str {
        "hermit-session"
    }

    fn files(&self, txn: &dyn ReadTxn, call: &Call, root: &Root) -> Result<Vec<RelPath>> {
        let mut found = walk(root)?;
        found.extend(stored(txn, &call.scope)?);
        found.sort();
        found.dedup();
        found.iter().map(rel).collect()
    }

    fn max_bytes(&self, path: &RelPath) -> usize {
        kind(path).map_or(0, |file| files::bytes_max(&file))
    }

    fn render(&self, txn: &dyn ReadTxn, call: &Call, path: &RelPath) -> Result<Option<Vec<u8>>> {
        let Some(file) = kind(path) else { return Ok(None) };
        Ok(render(txn, &call.scope, &file)?.map(String::into_bytes))
    }

    /// A marker's absence is a state (no open turn, no queued close, no pause): one removed
    /// outside is adopted as a removal.
    fn removable(&self, path: &RelPath) -> bool {
        matches!(kind(path), Some(SessionFile::Marker(_)))
    }

    /// A marker the store removed (the turn closed, the queued close reaped, a pause cleared)
    /// is removed from the directory: its upstream readers take its absence for the answer.
    /// The store never removes any other file.
    fn removes(&self, _: &dyn ReadTxn, _: &Call, path: &RelPath, _: &[u8]) -> Result<bool> {
        Ok(self.removable(path))
    }

    fn adopt(&self, txn: &dyn ReadTxn, call: &Call, changes: &[Change]) -> Result<Adoption> {
        let mut adoption = Adoption::default();
        let mut events = Vec::new();
        for change in changes {
            let Some(file) = kind(&change.path) else { continue };
            if change.removed {
                let merged = removed(txn, &call.scope, change, &file)?;
                events.extend(merged.events);
                adoption.conflicts.extend(merged.conflicts);
                continue;
            }
            let content = match files::parse_changed(&file, &change.now) {
                Ok(content) => content,
                // Upstream refuses a corrupt store and never overwrites it.
                Err(err) if file == SessionFile::Conversations => return Err(err),
                Err(err) => {
                    adoption.quarantine.push(change.path.clone());
                    let (file, reason) = (change.path.display(), err.to_string());
                    events.push(SessionEvent::FileQuarantined { file, reason });
                    continue;
                }
            };
            let merged = merge_file(txn, &call.scope, change, &file, &content)?;
            events.extend(merged.events);
            adoption.conflicts.extend(merged.conflicts);
        }
        let scope = &call.scope;
        adoption.events =
            chunk::split(events).into_iter().map(|e| (scope.clone(), Body::Session(e))).collect();
        Ok(adoption)
    }
}

/// A marker removed outside: adopted while the store still holds what the mirror last saw.
fn removed(txn: &dyn ReadTxn, scope: &str, change: &Change, file: &SessionFile) -> Result<Merged> {
    let mut out = Merged::default();
    let SessionFile::Marker(marker) = file else { return Ok(out) };
    let Some(store) = views::marker(txn, scope, *marker)? else { return Ok(out) };
    let base = change.base.as_deref().and_then(|b| legacy_json::parse_doc("base", b).ok());
    if base.as_ref() == Some(&store) {
        out.events.push(SessionEvent::MarkerRemoved { marker: *marker });
    } else {
        out.conflicts.push(crate::kernel::call::Conflict {
            file: change.path.display(),
            record: "file".into(),
            why: "removed in the directory and changed in the store since the mirror last wrote it"
                .into(),
        });
    }
    Ok(out)
}

/// One changed file merged with the store's version of it.
fn merge_file(
    txn: &dyn ReadTxn,
    scope: &str,
    change: &Change,
    file: &SessionFile,
    content: &Content,
) -> Result<Merged> {
    let path = files::path_of(file);
    let base_doc = || change.base.as_deref().and_then(|b| legacy_json::parse_doc("base", b).ok());
    Ok(match (file, content) {
        (SessionFile::Runtime, Content::Json(doc)) => {
            merge::runtime(change, doc, views::runtime(txn, scope)?.as_ref())
        }
        (SessionFile::Conversations, Content::Json(doc)) => {
            merge::conversations(change, doc, views::conversations(txn, scope)?.as_ref())
        }
        (SessionFile::Marker(marker), Content::Json(doc)) => {
            let store = views::marker(txn, scope, *marker)?;
            let adopt =
                || SessionEvent::JsonAdopted { file: path, doc: doc.clone(), append: false };
            merge::whole(change, base_doc().as_ref(), doc, store.as_ref(), adopt)
        }
        (SessionFile::Ledger(Ledger::Observations), Content::Lines(lines)) => {
            let text = lines.lines.join("\n");
            merge::observations(change, &text, views::observations(txn, scope)?.as_ref())
        }
        (SessionFile::Ledger(Ledger::Hypotheses), Content::Lines(lines)) => {
            merge::hypotheses_rows(change, lines, views::hypotheses(txn, scope)?.as_ref())
        }
        (SessionFile::Task { .. }, Content::Task(task)) => {
            let store = views::task(txn, scope, &task.id)?;
            if let Err(err) = super::io::check_task(&path, task) {
                let mut out = Merged::default();
                out.conflicts.push(crate::kernel::call::Conflict {
                    file: path,
                    record: task.id.clone(),
                    why: err.to_string(),
                });
                return Ok(out);
            }
            merge::task(change, task, task_path(file, &task.id), store.as_ref())
        }
        (SessionFile::Shell, Content::Text(text)) => {
            merge::shell_text(change, text, views::text(txn, scope, views::SHELL_ID)?.as_deref())
        }
        (SessionFile::ShellTemplate, Content::Text(text)) => {
            let mut out = Merged::default();
            if views::text(txn, scope, views::TEMPLATE_ID)?.as_deref() != Some(text.as_str()) {
                let event = SessionEvent::TemplateAdopted { text: text.clone(), append: false };
                out.events.push(event);
            }
            out
        }
        (SessionFile::Report { name }, Content::Text(text)) => {
            let store = views::report(txn, scope, name)?;
            let base = change.base.as_deref().and_then(|b| std::str::from_utf8(b).ok());
            let session_id = name.trim_end_matches("-REPORT.md").to_owned();
            let adopt =
                || SessionEvent::ReportWritten { session_id, text: text.clone(), append: false };
            merge::whole(change, base.map(str::to_owned).as_ref(), text, store.as_ref(), adopt)
        }
        _ => return Err(Error::Corrupt(format!("{path} parsed as another kind"))),
    })
}
