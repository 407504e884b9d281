//! Import and export of moonshine `.feedback/` directories (`<home>/<project>/.feedback/`):
//! comments, `control.json`, `address.json`, `heartbeat.json`, `adapter.json`, and orphaned
//! `<id>.json.claiming.<pid>` files restored by the Stop hook's rules.
//!
//! Every file goes through [`Root`]; every file is parsed and checked before the first event is
//! appended, so a bad file changes nothing. Does not decide inbox rules.

use std::path::Path;

use hookstate_schema::feedback::{CommentRow, FeedbackEvent, FileKind, FileRow, JsonDoc};
use hookstate_schema::{validate_id, Body};
use serde_json::{json, Value};

use super::Feedback;
use crate::feedback::rules::Inbox;
use crate::feedback::{check_comment_id, project::SCOPE_PREFIX, read_inbox, COMMENTS_MAX, MODES};
use crate::kernel::call::Call;
use crate::kernel::call::Plan;
use crate::kernel::call::Refusal;
use crate::kernel::doc::read_doc;
use crate::kernel::error::{Error, Result};
use crate::legacy::json::{parse_doc, render, str_field};
use crate::legacy::root::Root;

/// One legacy file: far above any real record, below the event limit.
pub(crate) const FILE_BYTES_MAX: usize = 48 * 1024;
/// The inbox directory of a project.
const INBOX: &str = ".feedback";
const CLAIMING: &str = ".json.claiming.";

/// What a moonshine home holds, parsed and checked, ready to be adopted by
/// [`Engine::import_moonshine`]. Reading it touches no store.
#[derive(Debug, Default)]
pub struct MoonshineImport {
    projects: Vec<Parsed>,
}

impl MoonshineImport {
    /// Reads and checks every file of every project under `from` (or only `only`).
    ///
    /// # Errors
    /// [`Error::UnsafePath`] for symlinks and unsafe directories, [`Error::Invalid`] for a file
    /// that is not a valid record or would not be written back byte for byte, IO errors.
    pub fn read(from: &Path, only: Option<&str>) -> Result<MoonshineImport> {
        Ok(MoonshineImport { projects: parse_home(from, only, false)? })
    }

    /// Reads a mirror the way [`MoonshineImport::read`] reads a home, except that a missing
    /// home or project is empty rather than an error (the mirror is created by the first export).
    ///
    /// # Errors
    /// As [`MoonshineImport::read`].
    pub fn read_mirror(from: &Path, only: Option<&str>) -> Result<MoonshineImport> {
        Root::open(from, true)?;
        Ok(MoonshineImport { projects: parse_home(from, only, true)? })
    }

    /// The bytes of each file of `project` as read (`None` for a file that was absent), keyed by
    /// file name; only names hookstate writes are listed.
    fn files_of(&self, project: &str) -> std::collections::BTreeMap<String, Option<Vec<u8>>> {
        let mut files = std::collections::BTreeMap::new();
        for kind in FileKind::ALL {
            files.insert(format!("{}.json", kind.stem()), None);
        }
        let Some(parsed) = self.projects.iter().find(|p| p.project == project) else {
            return files;
        };
        for event in &parsed.events {
            let (name, doc) = match event {
                FeedbackEvent::CommentAdded { id, doc } => (format!("{id}.json"), doc),
                FeedbackEvent::FileWritten { file, doc, .. } => {
                    (format!("{}.json", file.stem()), doc)
                }
                _ => continue,
            };
            files.insert(name, Some(render(doc).into_bytes()));
        }
        files
    }

    /// A claim held right now by a live legacy process (`<id>.json.claiming.<pid>`), if any:
    /// importing now could lose its write-back, so the import is refused.
    #[must_use]
    pub fn live_claim(&self) -> Option<(String, String)> {
        self.projects
            .iter()
            .find_map(|p| p.live_claim.clone().map(|name| (p.project.clone(), name)))
    }
}

/// What one project's directory holds, parsed.
#[derive(Debug, Default)]
struct Parsed {
    project: String,
    events: Vec<FeedbackEvent>,
    restored: Vec<String>,
    ignored: Vec<String>,
    live_claim: Option<String>,
}

fn read_doc_file(dir: &Root, name: &str) -> Result<Option<JsonDoc>> {
    let where_ = format!("{}/{name}", dir.path().display());
    match dir.read(name, FILE_BYTES_MAX)? {
        Some(bytes) => parse_doc(&where_, &bytes).map(Some),
        None => Ok(None),
    }
}

pub(crate) fn check_comment(name: &str, id: &str, doc: &JsonDoc) -> Result<()> {
    let bad = |why: &str| Error::invalid(format!("legacy comment {name}: {why}"));
    if str_field(doc, "id").as_deref() != Some(id) {
        return Err(bad("its id field does not match the file name"));
    }
    if crate::feedback::rules::status(doc).is_none() {
        return Err(bad("status is not pending, delivered, addressed or dismissed"));
    }
    if str_field(doc, "comment").is_none() {
        return Err(bad("comment is not a string"));
    }
    let target = doc.raw("target").and_then(|t| serde_json::from_str::<Value>(t).ok());
    if !target.as_ref().is_some_and(|t| t["kind"].is_string() && t["path"].is_string()) {
        return Err(bad("target is not an object with kind and path"));
    }
    Ok(())
}

pub(crate) fn check_file(name: &str, kind: FileKind, doc: &JsonDoc) -> Result<()> {
    let ok = match kind {
        FileKind::Control => str_field(doc, "mode").is_some_and(|m| MODES.contains(&m.as_str())),
        FileKind::Address => str_field(doc, "requestedAt").is_some(),
        FileKind::Heartbeat | FileKind::Adapter => str_field(doc, "harness").is_some(),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "legacy file {name}: missing or bad fields for {}",
            kind.stem()
        )))
    }
}

fn pid_alive(suffix: &str) -> bool {
    let Ok(pid) = suffix.parse::<i32>() else {
        return false;
    };
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok())
}

fn add_comment(parsed: &mut Parsed, inbox: &Root, name: &str, id: &str) -> Result<()> {
    check_comment_id(id)?;
    let doc = read_doc_file(inbox, name)?
        .ok_or_else(|| Error::invalid(format!("legacy comment {name} vanished while importing")))?;
    check_comment(name, id, &doc)?;
    parsed.events.push(FeedbackEvent::CommentAdded { id: id.into(), doc });
    Ok(())
}

fn parse_project(project: &str, inbox: &Root) -> Result<Parsed> {
    let mut parsed = Parsed { project: project.into(), ..Parsed::default() };
    let names = inbox.list()?;
    for name in &names {
        if let Some(kind) = FileKind::ALL.iter().find(|k| format!("{}.json", k.stem()) == *name) {
            let Some(doc) = read_doc_file(inbox, name)? else { continue };
            check_file(name, *kind, &doc)?;
            let request = u64::from(*kind == FileKind::Address);
            parsed.events.push(FeedbackEvent::FileWritten { file: *kind, doc, request });
        } else if let Some((base, suffix)) = name.split_once(CLAIMING) {
            if suffix.ends_with(".tmp") || names.contains(&format!("{base}.json")) {
                parsed.ignored.push(name.clone());
            } else if pid_alive(suffix) {
                parsed.live_claim = Some(name.clone());
            } else {
                add_comment(&mut parsed, inbox, name, base)?;
                parsed.restored.push(name.clone());
            }
        } else if let Some(id) = name.strip_suffix(".json") {
            add_comment(&mut parsed, inbox, name, id)?;
        } else {
            parsed.ignored.push(name.clone());
        }
    }
    let comments =
        parsed.events.iter().filter(|e| matches!(e, FeedbackEvent::CommentAdded { .. })).count();
    if comments > COMMENTS_MAX {
        let path = inbox.path().display();
        return Err(Error::invalid(format!(
            "{path} holds {comments} comments, limit is {COMMENTS_MAX}"
        )));
    }
    Ok(parsed)
}

fn is_plain_file(root: &Root, name: &str) -> bool {
    std::fs::symlink_metadata(root.path().join(name)).is_ok_and(|m| m.file_type().is_file())
}

fn parse_home(from: &Path, only: Option<&str>, mirror: bool) -> Result<Vec<Parsed>> {
    let home = Root::open(from, false)?;
    let names = match only {
        Some(project) => vec![project.to_owned()],
        None => home.list()?.into_iter().filter(|n| !is_plain_file(&home, n)).collect(),
    };
    let mut out = Vec::new();
    for name in names {
        validate_id("project", &name)?;
        let Some(dir) = home.subdir(&name, false)? else {
            if mirror {
                continue;
            }
            return Err(Error::invalid(format!("no project {name} under {}", from.display())));
        };
        let Some(inbox) = dir.subdir(INBOX, false)? else { continue };
        out.push(parse_project(&name, &inbox)?);
    }
    Ok(out)
}

fn refusal(reason: &'static str, message: String, project: &str) -> Refusal {
    let details = json!({ "project": project });
    let details = details.as_object().cloned().unwrap_or_default();
    Refusal { reason, message, details, verdict_ok: false }
}

impl Feedback<'_> {
    /// Adopts parsed `.feedback/` inboxes as events, one transaction per project.
    ///
    /// # Errors
    /// Store errors. A project that already has state, or a claim held by a live legacy process,
    /// is a refusal and nothing more is written.
    pub fn import(&self, call: &Call, import: MoonshineImport) -> Result<(Value, Option<Refusal>)> {
        if let Some((project, name)) = import.live_claim() {
            let message =
                format!("{name} of project {project} is claimed by a live process; retry");
            let refused = refusal("claim_in_progress", message, &project);
            return Ok((json!({ "imported": [] }), Some(refused)));
        }
        let parsed = import.projects;
        let mut done = Vec::new();
        for p in parsed {
            let call = Call { scope: format!("{SCOPE_PREFIX}{}", p.project), ..call.clone() };
            let count = p.events.len();
            let outcome = self.k.write(&call, |txn| {
                let present = read_doc::<bool>(
                    txn,
                    crate::feedback::project::INDEX_SCOPE,
                    crate::feedback::project::PROJECT,
                    &p.project,
                )?;
                if present.is_some() {
                    let message =
                        format!("project {} already has feedback state in the store", p.project);
                    return Ok(Plan {
                        refusal: Some(refusal("exists", message, &p.project)),
                        ..Plan::default()
                    });
                }
                Ok(Plan {
                    events: p.events.iter().cloned().map(Body::Feedback).collect(),
                    ..Plan::default()
                })
            })?;
            if let Some(refused) = outcome.refusal {
                return Ok((json!({ "imported": done }), Some(refused)));
            }
            done.push(json!({
                "project": p.project, "events": count, "restored": p.restored,
                "ignored": p.ignored, "seq": outcome.head.seq,
            }));
        }
        Ok((json!({ "imported": done }), None))
    }

    /// Writes the legacy files of every project (or `only`) under `to`, byte for byte, through
    /// the safe writer; files whose bytes are already right are not rewritten. A consumed
    /// address request removes `address.json`. For a mirror, `seen` is what the mirror held when
    /// its changes were adopted: a file changed since then (by a writer racing this call) is
    /// left alone for the next adoption instead of being overwritten.
    ///
    /// # Errors
    /// [`Error::UnsafePath`], IO and store errors.
    pub fn export(
        &self,
        to: &Path,
        only: Option<&str>,
        seen: Option<&MoonshineImport>,
    ) -> Result<Value> {
        let projects = match only {
            Some(project) => vec![project.to_owned()],
            None => self.projects()?,
        };
        let mut inboxes = Vec::new();
        {
            let txn = self.k.begin_read()?;
            for project in projects {
                validate_id("project", &project)?;
                let inbox = read_inbox(&*txn, &format!("{SCOPE_PREFIX}{project}"))?;
                inboxes.push((project, inbox));
            }
        }
        let home = Root::open(to, true)?;
        let (mut written, mut unchanged) = (0u64, 0u64);
        for (project, inbox) in &inboxes {
            let dir = home
                .subdir(project, true)?
                .ok_or_else(|| Error::invalid("project directory vanished"))?;
            let fb = dir
                .subdir(INBOX, true)?
                .ok_or_else(|| Error::invalid("inbox directory vanished"))?;
            let mut files: Vec<(String, &JsonDoc)> = inbox
                .comments
                .iter()
                .map(|(id, row): &(String, CommentRow)| (format!("{id}.json"), &row.doc))
                .collect();
            files.extend(
                inbox.files.iter().map(|(kind, row)| (format!("{}.json", kind.stem()), &row.doc)),
            );
            let before = seen.map(|seen| seen.files_of(project));
            for (name, doc) in files {
                let bytes = render(doc);
                let current = fb.read(&name, FILE_BYTES_MAX).ok().flatten();
                let raced =
                    before.as_ref().is_some_and(|b| b.get(&name).unwrap_or(&None) != &current);
                if current.as_deref() == Some(bytes.as_bytes()) || raced {
                    unchanged += 1;
                } else {
                    fb.write(&name, bytes.as_bytes())?;
                    written += 1;
                }
            }
            let address = "address.json".to_owned();
            let current = fb.read(&address, FILE_BYTES_MAX).ok().flatten();
            let raced =
                before.as_ref().is_some_and(|b| b.get(&address).unwrap_or(&None) != &current);
            if !inbox.files.contains_key(&FileKind::Address) && !raced {
                fb.remove(&address)?;
            }
        }
        let projects: Vec<&String> = inboxes.iter().map(|(p, _)| p).collect();
        Ok(json!({ "projects": projects, "written": written, "unchanged": unchanged }))
    }
}

/// What an external writer did to one comment file, judged against the store's record.
fn adopt_comment(
    id: &str,
    file: &JsonDoc,
    row: Option<&CommentRow>,
) -> Result<Option<FeedbackEvent>, String> {
    use crate::feedback::rules::{status, Status};
    let Some(row) = row else {
        return Ok(Some(FeedbackEvent::CommentAdded { id: id.into(), doc: file.clone() }));
    };
    if *file == row.doc {
        return Ok(None);
    }
    let (from, to) = (status(&row.doc), status(file));
    let conflict = || {
        let state = str_field(&row.doc, "status").unwrap_or_default();
        let found = str_field(file, "status").unwrap_or_default();
        format!(
            "{id}.json was changed outside hookstate ({found}) against a newer state in the store \
             ({state}); export the store's version or undo the edit"
        )
    };
    let mut expected = row.doc.clone();
    let event = match (from, to) {
        (Some(Status::Pending | Status::Delivered), Some(Status::Dismissed)) => {
            expected.set("status", crate::legacy::json::string("dismissed"));
            FeedbackEvent::CommentDismissed { id: id.into() }
        }
        (Some(Status::Delivered), Some(Status::Addressed)) => {
            let reply = str_field(file, "reply").filter(|r| !r.trim().is_empty());
            let (Some(reply), Some(at)) = (reply, str_field(file, "addressedAt")) else {
                return Err(format!("{id}.json is addressed without a reply and an addressedAt"));
            };
            for (key, value) in [("status", "addressed"), ("addressedAt", &at), ("reply", &reply)] {
                expected.set(key, crate::legacy::json::string(value));
            }
            FeedbackEvent::CommentReplied {
                id: id.into(),
                token: row.token,
                reply,
                addressed_at: at,
            }
        }
        // The file is behind the store (an export will catch it up), not changed by someone.
        (Some(Status::Pending), Some(Status::Pending | Status::Delivered))
        | (Some(Status::Delivered), Some(Status::Pending | Status::Delivered))
        | (
            Some(Status::Addressed | Status::Dismissed),
            Some(Status::Pending | Status::Delivered),
        ) => return Ok(None),
        _ => return Err(conflict()),
    };
    if expected != *file {
        return Err(conflict());
    }
    Ok(Some(event))
}

/// Whether a web-written file (control, address) is newer than the store's copy.
fn newer_file(kind: FileKind, file: &JsonDoc, row: Option<&FileRow>) -> bool {
    let field = if kind == FileKind::Control { "updatedAt" } else { "requestedAt" };
    let stamp =
        |doc: &JsonDoc| str_field(doc, field).and_then(|t| crate::kernel::compat::stamp::parse(&t));
    match row {
        None => true,
        Some(row) if row.doc == *file => false,
        Some(row) => stamp(file) >= stamp(&row.doc),
    }
}

fn decide_adopt(inbox: &Inbox, parsed: &[FeedbackEvent]) -> Result<Vec<FeedbackEvent>, String> {
    let mut events = Vec::new();
    let mut requests = inbox.meta.requests;
    for event in parsed {
        match event {
            FeedbackEvent::CommentAdded { id, doc } => {
                let row = inbox.comments.iter().find(|(c, _)| c == id).map(|(_, r)| r);
                events.extend(adopt_comment(id, doc, row)?);
            }
            FeedbackEvent::FileWritten { file, doc, .. }
                if matches!(file, FileKind::Control | FileKind::Address)
                    && newer_file(*file, doc, inbox.files.get(file)) =>
            {
                let request = if *file == FileKind::Address { requests + 1 } else { 0 };
                requests = requests.max(request);
                events.push(FeedbackEvent::FileWritten { file: *file, doc: doc.clone(), request });
            }
            _ => {}
        }
    }
    Ok(events)
}

impl Feedback<'_> {
    /// Adopts changes that programs still writing the files directly (the web dev server, a
    /// session editing a comment file) made to a mirror: new comments, dismissals, replies, a
    /// new control mode or address request, as events. A file that is merely behind the store
    /// is left for the next export; a change that conflicts with a newer state in the store is
    /// refused and nothing is written.
    ///
    /// # Errors
    /// Store errors.
    pub fn adopt(&self, call: &Call, mirror: &MoonshineImport) -> Result<(Value, Option<Refusal>)> {
        let mut adopted = Vec::new();
        for p in &mirror.projects {
            // Never the caller's idempotency key: it names the verb's own write (a feedback verb
            // runs in this very scope), see `adopt_call`.
            let scope = format!("{SCOPE_PREFIX}{}", p.project);
            let call = Call { scope, ..call.without_idem_key() };
            let outcome = self.k.write(&call, |txn| {
                let inbox = read_inbox(txn, &call.scope)?;
                Ok(match decide_adopt(&inbox, &p.events) {
                    Ok(events) => Plan {
                        events: events.into_iter().map(Body::Feedback).collect(),
                        ..Plan::default()
                    },
                    Err(message) => Plan {
                        refusal: Some(refusal("mirror_conflict", message, &p.project)),
                        ..Plan::default()
                    },
                })
            })?;
            if let Some(refused) = outcome.refusal {
                return Ok((json!({ "adopted": adopted }), Some(refused)));
            }
            adopted.push(json!({ "project": p.project, "events": outcome.appended }));
        }
        Ok((json!({ "adopted": adopted }), None))
    }
}

/// A source file a comment targets: big articles fit, a runaway file is not read whole.
pub(crate) const CONTENT_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Directory levels of a `target.path` under `content/`.
const CONTENT_DEPTH_MAX: usize = 16;

fn read_content(home: &Path, project: &str, path: &str) -> Result<Option<Vec<u8>>> {
    let parts: Vec<&str> = path.split('/').collect();
    if parts.len() > CONTENT_DEPTH_MAX {
        return Ok(None);
    }
    let Some((file, dirs)) = parts.split_last() else {
        return Ok(None);
    };
    let Some(mut dir) = Root::open(home, false)?.subdir(project, false)? else {
        return Ok(None);
    };
    for name in std::iter::once(&"content").chain(dirs) {
        match dir.subdir(name, false)? {
            Some(next) => dir = next,
            None => return Ok(None),
        }
    }
    dir.read(file, CONTENT_BYTES_MAX)
}

/// Whether a claimed comment's `excerpt` is still where the comment points: inside
/// `content/<path>` within `range` (`[start, end)` in UTF-16 code units, as the web's offsets
/// are), or anywhere in the file without a range. `None` when the file or the excerpt is missing
/// or unreadable. The excerpt is checked, not `anchorHash`, whose FNV-1a variant is unknown.
#[must_use]
pub fn anchor_matches(home: &Path, project: &str, target: &Value) -> Option<bool> {
    let path = target["path"].as_str()?;
    let excerpt = target["excerpt"].as_str().filter(|e| !e.is_empty())?;
    let bytes = read_content(home, project, path).ok().flatten()?;
    let text = String::from_utf8(bytes).ok()?;
    let Some(range) = target["range"].as_array() else {
        return Some(text.contains(excerpt));
    };
    let bound =
        |i: usize| range.get(i).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
    let (start, end) = (bound(0)?, bound(1)?);
    let units: Vec<u16> = text.encode_utf16().collect();
    let slice = units.get(start..end.min(units.len()))?;
    Some(String::from_utf16_lossy(slice).contains(excerpt))
}
