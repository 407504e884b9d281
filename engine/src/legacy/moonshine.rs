//! Import and export of moonshine `.feedback/` directories (`<home>/<project>/.feedback/`):
//! comments, `control.json`, `address.json`, `heartbeat.json`, `adapter.json`, and orphaned
//! `<id>.json.claiming.<pid>` files restored by the Stop hook's rules.
//!
//! Every file goes through [`Root`]; every file is parsed and checked before the first event is
//! appended, so a bad file changes nothing. Does not decide inbox rules.

use std::path::Path;

use hookstate_schema::feedback::{CommentRow, FeedbackEvent, FileKind, JsonDoc};
use hookstate_schema::{validate_id, Body};
use serde_json::{json, Value};

use crate::core::Refusal;
use crate::doc::read_doc;
use crate::engine::{Call, Engine, Plan};
use crate::error::{Error, Result};
use crate::feedback::{check_comment_id, project::SCOPE_PREFIX, read_inbox, MODES};
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
        Ok(MoonshineImport { projects: parse_home(from, only)? })
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

fn check_comment(name: &str, id: &str, doc: &JsonDoc) -> Result<()> {
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

fn check_file(name: &str, kind: FileKind, doc: &JsonDoc) -> Result<()> {
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
    Ok(parsed)
}

fn is_plain_file(root: &Root, name: &str) -> bool {
    std::fs::symlink_metadata(root.path().join(name)).is_ok_and(|m| m.file_type().is_file())
}

fn parse_home(from: &Path, only: Option<&str>) -> Result<Vec<Parsed>> {
    let home = Root::open(from, false)?;
    let names = match only {
        Some(project) => vec![project.to_owned()],
        None => home.list()?.into_iter().filter(|n| !is_plain_file(&home, n)).collect(),
    };
    let mut out = Vec::new();
    for name in names {
        validate_id("project", &name)?;
        let Some(dir) = home.subdir(&name, false)? else {
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
    Refusal { reason, message, details }
}

impl Engine {
    /// Adopts parsed `.feedback/` inboxes as events, one transaction per project.
    ///
    /// # Errors
    /// Store errors. A project that already has state, or a claim held by a live legacy process,
    /// is a refusal and nothing more is written.
    pub fn import_moonshine(
        &self,
        call: &Call,
        import: MoonshineImport,
    ) -> Result<(Value, Option<Refusal>)> {
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
            let outcome = self.write(&call, |txn| {
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
                    events: p.events.into_iter().map(Body::Feedback).collect(),
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
    /// address request removes `address.json`.
    ///
    /// # Errors
    /// [`Error::UnsafePath`], IO and store errors.
    pub fn export_moonshine(&self, to: &Path, only: Option<&str>) -> Result<Value> {
        let projects = match only {
            Some(project) => vec![project.to_owned()],
            None => self.feedback_projects()?,
        };
        let mut inboxes = Vec::new();
        {
            let txn = self.begin_read()?;
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
            for (name, doc) in files {
                let bytes = render(doc);
                if fb.read(&name, FILE_BYTES_MAX).ok().flatten().as_deref()
                    == Some(bytes.as_bytes())
                {
                    unchanged += 1;
                } else {
                    fb.write(&name, bytes.as_bytes())?;
                    written += 1;
                }
            }
            if !inbox.files.contains_key(&FileKind::Address) {
                fb.remove("address.json")?;
            }
        }
        let projects: Vec<&String> = inboxes.iter().map(|(p, _)| p).collect();
        Ok(json!({ "projects": projects, "written": written, "unchanged": unchanged }))
    }
}
