//! The moonshine files (`<home>/<project>/.feedback/`): comments, `control.json`,
//! `address.json`, `heartbeat.json`, `adapter.json`, and orphaned `<id>.json.claiming.<pid>`
//! files restored by the Stop hook's rules; imported, exported byte for byte, and mirrored
//! ([`MoonshineLayout`]).
//!
//! Every file goes through [`Root`]; an import parses and checks every file before the first
//! event is appended, so a bad file changes nothing. Does not decide inbox rules; `rules.rs`
//! and `outside.rs` do.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use hookstate_schema::feedback::{CommentRow, FeedbackEvent, FileKind, FileRow, JsonDoc};
use hookstate_schema::{validate_id, Body};
use serde::de::IgnoredAny;
use serde::Serialize;
use serde_json::Value;

use super::input::check_comment_id;
use super::outside::{self, Counters, Merged};
use super::project::{read_inbox, COMMENT, FILE, INDEX_SCOPE, PROJECT, SCOPE_PREFIX};
use super::rules::{status, COMMENTS_MAX, MODES};
use crate::kernel::call::{Call, Conflict, Plan, Refusal};
use crate::kernel::doc::{read_doc, read_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::write::Kernel;
use crate::legacy::json::{parse_doc, parse_doc_any, render, str_field};
use crate::legacy::mirror::{Adoption, Change, Layout, RelPath};
use crate::legacy::root::Root;

/// One legacy file: far above any real record, below the event limit.
pub(crate) const FILE_BYTES_MAX: usize = 48 * 1024;
/// The inbox directory of a project.
const INBOX: &str = ".feedback";
const CLAIMING: &str = ".json.claiming.";

/// Events one import transaction holds at most, unless one project alone holds more (a project
/// is never split): a commit costs a few milliseconds against some 40 µs an event, so at 4,096
/// events commits are a few percent of an import, while the copies a transaction keeps of its
/// events (the plan, the encoded records, the rows it projects) stay some tens of MiB.
pub const IMPORT_TXN_EVENTS_MAX: usize = 4096;
/// Legacy file bytes one import transaction holds at most, unless one project alone holds more:
/// 8 MiB is 4,096 files of 2 KiB, a large comment, so the event bound is the one a typical home
/// meets, and a home of large files (up to `FILE_BYTES_MAX` each) stays as bounded.
pub const IMPORT_TXN_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The bounds of one import transaction: projects are added to a transaction while its events and
/// legacy bytes stay within them; a project is never split, so a project larger than the bounds
/// is a transaction of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportBatch {
    /// Events per transaction.
    pub events_max: usize,
    /// Legacy file bytes per transaction.
    pub bytes_max: usize,
}

impl ImportBatch {
    /// One project per transaction (what every import did before batching; a keyed import still
    /// does, so that each project's scope keeps its idempotency row).
    pub const PER_PROJECT: ImportBatch = ImportBatch { events_max: 0, bytes_max: 0 };
}

impl Default for ImportBatch {
    fn default() -> Self {
        ImportBatch { events_max: IMPORT_TXN_EVENTS_MAX, bytes_max: IMPORT_TXN_BYTES_MAX }
    }
}

/// Where an import is, told after each commit (and once before the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportProgress {
    /// Projects committed.
    pub projects_done: usize,
    /// Projects the home holds.
    pub projects_total: usize,
    /// Events committed.
    pub events_done: usize,
    /// Events the import appends when every project is taken.
    pub events_total: usize,
    /// Transactions committed.
    pub commits: usize,
}

/// The file name of one of the four other files.
fn file_name(kind: FileKind) -> String {
    format!("{}.json", kind.stem())
}

/// What a moonshine home holds, parsed and checked, ready to be adopted by an import
/// (`engine.feedback().import`). Reading it touches no store.
#[derive(Debug, Default)]
pub struct MoonshineImport {
    projects: Vec<Parsed>,
}

/// One project's import.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportedProject {
    /// The project.
    pub project: String,
    /// Events appended.
    pub events: usize,
    /// Orphaned claims restored as comments.
    pub restored: Vec<String>,
    /// Names not taken for records.
    pub ignored: Vec<String>,
    /// The seq of the project's last event.
    pub seq: u64,
}

/// What an import did: the projects imported, or the refusal that stopped it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Imported {
    /// The projects imported before any refusal (absent when refused before the store opened).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imported: Option<Vec<ImportedProject>>,
    /// Whether every project was imported.
    pub ok: bool,
    /// The refusal's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<&'static str>,
    /// The project refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The refusal, for the exit.
    #[serde(skip)]
    pub refusal: Option<Refusal>,
    /// Transactions committed (not printed: the output is the same however the projects were
    /// batched).
    #[serde(skip)]
    pub commits: usize,
}

impl Imported {
    fn refused(imported: Option<Vec<ImportedProject>>, refusal: Refusal, project: &str) -> Self {
        let reason = refusal.reason;
        let project = Some(project.to_owned());
        let refused = Some(reason);
        Imported { imported, ok: false, refused, project, refusal: Some(refusal), commits: 0 }
    }
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Exported {
    /// The projects exported.
    pub projects: Vec<String>,
    /// Files written.
    pub written: u64,
    /// Files already holding the store's bytes.
    pub unchanged: u64,
    /// Always true.
    pub ok: bool,
}

impl MoonshineImport {
    /// Reads and checks every file of every project under `from` (or only `only`).
    ///
    /// # Errors
    /// [`Error::UnsafePath`] for symlinks and unsafe directories, [`Error::LegacyFile`] for a
    /// file that is not a valid record or would not be written back byte for byte,
    /// [`Error::NotFound`] for a missing project, IO errors.
    pub fn read(from: &Path, only: Option<&str>) -> Result<MoonshineImport> {
        Ok(MoonshineImport { projects: parse_home(from, only)? })
    }

    /// The refusal of an import that must not start: a claim held right now by a live legacy
    /// process (`<id>.json.claiming.<pid>`), whose write-back importing now could lose.
    #[must_use]
    pub fn refused(&self) -> Option<Imported> {
        let (project, name) = self
            .projects
            .iter()
            .find_map(|p| p.live_claim.clone().map(|name| (p.project.clone(), name)))?;
        let message = format!("{name} of project {project} is claimed by a live process; retry");
        let refusal = refusal("claim_in_progress", message, &project);
        Some(Imported::refused(None, refusal, &project))
    }
}

/// What one project's directory holds, parsed.
#[derive(Debug, Default)]
struct Parsed {
    project: String,
    events: Vec<FeedbackEvent>,
    /// The bytes of the files taken for records.
    bytes: usize,
    restored: Vec<String>,
    ignored: Vec<String>,
    live_claim: Option<String>,
}

/// Reads and parses `name`, with its size.
fn read_doc_file(dir: &Root, name: &str) -> Result<Option<(JsonDoc, usize)>> {
    let where_ = format!("{}/{name}", dir.path().display());
    match dir.read(name, FILE_BYTES_MAX)? {
        Some(bytes) => parse_doc(&where_, &bytes).map(|doc| Some((doc, bytes.len()))),
        None => Ok(None),
    }
}

/// Checks a comment record read from `name`: its id, status, comment and target.
fn check_comment(name: &str, id: &str, doc: &JsonDoc) -> Result<()> {
    let bad = |why: &str| Error::legacy(format!("comment {name}"), why);
    if str_field(doc, "id").as_deref() != Some(id) {
        return Err(bad("its id field does not match the file name"));
    }
    if status(doc).is_none() {
        return Err(bad("status is not pending, delivered, addressed or dismissed"));
    }
    if str_field(doc, "comment").is_none() {
        return Err(bad("comment is not a string"));
    }
    let target = doc.raw("target").and_then(|t| serde_json::from_str::<Value>(t).ok());
    if !target.as_ref().is_some_and(|t| t["kind"].is_string() && t["path"].is_string()) {
        return Err(bad("target is not an object with kind and path"));
    }
    let path = target.as_ref().and_then(|t| t["path"].as_str()).unwrap_or_default();
    if !super::input::is_relative_target_path(path) {
        return Err(bad(&format!("target path {path:?} is not a relative path")));
    }
    Ok(())
}

/// Checks one of the four other files.
fn check_file(name: &str, kind: FileKind, doc: &JsonDoc) -> Result<()> {
    let ok = match kind {
        FileKind::Control => str_field(doc, "mode").is_some_and(|m| MODES.contains(&m.as_str())),
        FileKind::Address => str_field(doc, "requestedAt").is_some(),
        FileKind::Heartbeat | FileKind::Adapter => str_field(doc, "harness").is_some(),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::legacy(name, format!("missing or bad fields for {}", kind.stem())))
    }
}

/// Parses and checks a comment file that names itself (its `id`), as an import does, and
/// returns what an export writes back; for `parse_legacy`.
pub(crate) fn parse_comment_file(bytes: &[u8]) -> Result<Vec<u8>> {
    let doc = parse_doc("comment", bytes)?;
    let id = str_field(&doc, "id").unwrap_or_default();
    check_comment_id(&id)?;
    check_comment(&format!("{id}.json"), &id, &doc)?;
    Ok(render(&doc).into_bytes())
}

/// Parses and checks one of the four other files, as an import does, and returns what an export
/// writes back; for `parse_legacy`.
pub(crate) fn parse_other_file(kind: FileKind, bytes: &[u8]) -> Result<Vec<u8>> {
    let name = file_name(kind);
    let doc = parse_doc(&name, bytes)?;
    check_file(&name, kind, &doc)?;
    Ok(render(&doc).into_bytes())
}

fn pid_alive(suffix: &str) -> bool {
    let Ok(pid) = suffix.parse::<i32>() else {
        return false;
    };
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok())
}

/// What a `<base>.json.claiming.<suffix>` name is, by the Stop hook's rules, among `names`.
#[derive(Debug, PartialEq, Eq)]
enum Claiming<'a> {
    /// The hook's rewrite buffer, or a claim whose base is back: never a record.
    Ignored,
    /// Held by a live process.
    Live(&'a str),
    /// Its process is gone and its base absent: the record, to restore.
    Orphan(&'a str),
}

fn claiming<'a>(name: &'a str, names: &[String]) -> Option<Claiming<'a>> {
    let (base, suffix) = name.split_once(CLAIMING)?;
    Some(if suffix.ends_with(".tmp") || names.contains(&format!("{base}.json")) {
        Claiming::Ignored
    } else if pid_alive(suffix) {
        Claiming::Live(base)
    } else {
        Claiming::Orphan(base)
    })
}

fn add_comment(parsed: &mut Parsed, inbox: &Root, name: &str, id: &str) -> Result<()> {
    check_comment_id(id)?;
    let (doc, len) = read_doc_file(inbox, name)?
        .ok_or_else(|| Error::legacy(name, "vanished while importing"))?;
    check_comment(name, id, &doc)?;
    parsed.bytes += len;
    parsed.events.push(FeedbackEvent::CommentAdded { id: id.into(), doc });
    Ok(())
}

fn parse_project(project: &str, inbox: &Root) -> Result<Parsed> {
    let mut parsed = Parsed { project: project.into(), ..Parsed::default() };
    let names = inbox.list()?;
    for name in &names {
        if let Some(kind) = FileKind::ALL.iter().find(|k| file_name(**k) == *name) {
            let Some((doc, len)) = read_doc_file(inbox, name)? else { continue };
            check_file(name, *kind, &doc)?;
            parsed.bytes += len;
            let request = u64::from(*kind == FileKind::Address);
            parsed.events.push(FeedbackEvent::FileWritten { file: *kind, doc, request });
            continue;
        }
        match claiming(name, &names) {
            Some(Claiming::Ignored) => parsed.ignored.push(name.clone()),
            Some(Claiming::Live(_)) => parsed.live_claim = Some(name.clone()),
            Some(Claiming::Orphan(base)) => {
                add_comment(&mut parsed, inbox, name, base)?;
                parsed.restored.push(name.clone());
            }
            None => match name.strip_suffix(".json") {
                Some(id) => add_comment(&mut parsed, inbox, name, id)?,
                None => parsed.ignored.push(name.clone()),
            },
        }
    }
    let comments =
        parsed.events.iter().filter(|e| matches!(e, FeedbackEvent::CommentAdded { .. })).count();
    if comments > COMMENTS_MAX {
        let path = inbox.path().display().to_string();
        return Err(Error::legacy(
            path,
            format!("holds {comments} comments, limit is {COMMENTS_MAX}"),
        ));
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
        // A hidden entry is no project (a mirror's own `.hookstate-mirror`, a `.git`).
        None => {
            let names = home.list()?.into_iter();
            names.filter(|n| !n.starts_with('.') && !is_plain_file(&home, n)).collect()
        }
    };
    let mut out = Vec::new();
    for name in names {
        validate_id("project", &name)?;
        let Some(dir) = home.subdir(&name, false)? else {
            let id = format!("{name} under {}", from.display());
            return Err(Error::NotFound { what: "project", id });
        };
        let Some(inbox) = dir.subdir(INBOX, false)? else { continue };
        out.push(parse_project(&name, &inbox)?);
    }
    Ok(out)
}

fn refusal(reason: &'static str, message: String, project: &str) -> Refusal {
    Refusal::new(reason, message, serde_json::json!({ "project": project }))
}

fn scope_of(project: &str) -> String {
    format!("{SCOPE_PREFIX}{project}")
}

/// The projects of the next transaction, from `projects` in order: the first, then each next one
/// while the events and bytes stay within `batch`.
fn next_batch(
    projects: &mut std::iter::Peekable<impl Iterator<Item = Parsed>>,
    batch: ImportBatch,
) -> Vec<Parsed> {
    let mut out: Vec<Parsed> = Vec::new();
    let (mut events, mut bytes) = (0usize, 0usize);
    while let Some(next) = projects.peek() {
        let fits = events.saturating_add(next.events.len()) <= batch.events_max
            && bytes.saturating_add(next.bytes) <= batch.bytes_max;
        if !out.is_empty() && !fits {
            break;
        }
        events = events.saturating_add(next.events.len());
        bytes = bytes.saturating_add(next.bytes);
        let Some(next) = projects.next() else { break };
        out.push(next);
    }
    out
}

/// Adopts parsed `.feedback/` inboxes as events, projects in name order, several whole projects
/// per transaction within `batch` (one per transaction for a keyed call), telling `progress`
/// after each commit. A project is never split across transactions. Each commit holds whole
/// projects, so a failed or killed import leaves the projects of the transactions committed
/// before it: a prefix of the projects in name order, each complete, and nothing of the rest.
///
/// # Errors
/// Store errors (the projects of earlier transactions stay). A project that already has state
/// is a refusal: the projects before it are imported, it and the rest are not; a claim held by
/// a live legacy process refuses the whole import before anything is written.
pub(crate) fn import(
    k: &Kernel,
    call: &Call,
    import: MoonshineImport,
    batch: ImportBatch,
    progress: &mut dyn FnMut(&ImportProgress),
) -> Result<Imported> {
    if let Some(refused) = import.refused() {
        return Ok(refused);
    }
    // A keyed call's replay row is per scope: each project keeps its own, as it always did.
    let batch = if call.idem_key.is_some() { ImportBatch::PER_PROJECT } else { batch };
    let mut state = ImportProgress {
        projects_done: 0,
        projects_total: import.projects.len(),
        events_done: 0,
        events_total: import.projects.iter().map(|p| p.events.len()).sum(),
        commits: 0,
    };
    progress(&state);
    let mut done = Vec::new();
    let mut projects = import.projects.into_iter().peekable();
    while projects.peek().is_some() {
        let group = next_batch(&mut projects, batch);
        let Some(first) = group.first() else { break };
        let call = call.in_scope(&scope_of(&first.project));
        // The first project of the group that already has state, as the last decision saw it.
        let refused_at = Cell::new(None);
        let outcome = k.write(&call, |txn| {
            refused_at.set(None);
            let mut plan = Plan::default();
            for (i, p) in group.iter().enumerate() {
                if read_doc::<bool>(txn, INDEX_SCOPE, PROJECT, &p.project)?.is_some() {
                    refused_at.set(Some(i));
                    break;
                }
                let scope = scope_of(&p.project);
                let events = p.events.iter().map(|e| (scope.clone(), Body::Feedback(e.clone())));
                plan.scoped_events.extend(events);
            }
            Ok(plan)
        })?;
        if outcome.appended > 0 {
            state.commits += 1;
        }
        let taken = refused_at.get().unwrap_or(group.len());
        let mut seq = outcome.head.seq - outcome.appended;
        let mut group = group.into_iter();
        for p in group.by_ref().take(taken) {
            seq += p.events.len() as u64;
            state.projects_done += 1;
            state.events_done += p.events.len();
            done.push(ImportedProject {
                project: p.project,
                events: p.events.len(),
                restored: p.restored,
                ignored: p.ignored,
                seq,
            });
        }
        progress(&state);
        if let Some(p) = group.next() {
            let message = format!("project {} already has feedback state in the store", p.project);
            let details = serde_json::json!({ "project": p.project });
            let refusal = Refusal::new("exists", message, details);
            let mut refused = Imported::refused(Some(done), refusal, &p.project);
            refused.commits = state.commits;
            return Ok(refused);
        }
    }
    let commits = state.commits;
    Ok(Imported {
        imported: Some(done),
        ok: true,
        refused: None,
        project: None,
        refusal: None,
        commits,
    })
}

/// Writes the legacy files of every project (or `only`) under `to`, byte for byte, through
/// the safe writer; files whose bytes are already right are not rewritten. A consumed
/// address request removes `address.json`.
///
/// # Errors
/// [`Error::UnsafePath`], IO and store errors.
pub(crate) fn export(k: &Kernel, to: &Path, only: Option<&str>) -> Result<Exported> {
    let projects = match only {
        Some(project) => vec![project.to_owned()],
        None => read_docs::<bool>(&*k.begin_read()?, INDEX_SCOPE, PROJECT)?
            .into_iter()
            .map(|(p, _)| p)
            .collect(),
    };
    let mut inboxes = Vec::new();
    {
        let txn = k.begin_read()?;
        for project in projects {
            validate_id("project", &project)?;
            let inbox = read_inbox(&*txn, &scope_of(&project))?;
            inboxes.push((project, inbox));
        }
    }
    let home = Root::open(to, true)?;
    let vanished = |path: &Path| Error::NoStore { path: path.to_path_buf() };
    let (mut written, mut unchanged) = (0u64, 0u64);
    for (project, inbox) in &inboxes {
        let dir = home.subdir(project, true)?.ok_or_else(|| vanished(&to.join(project)))?;
        let fb = dir.subdir(INBOX, true)?.ok_or_else(|| vanished(dir.path()))?;
        let mut files: Vec<(String, &JsonDoc)> = inbox
            .comments
            .iter()
            .map(|(id, row): &(String, CommentRow)| (format!("{id}.json"), &row.doc))
            .collect();
        files.extend(inbox.files.iter().map(|(kind, row)| (file_name(*kind), &row.doc)));
        for (name, doc) in files {
            let bytes = render(doc);
            if fb.read(&name, FILE_BYTES_MAX).ok().flatten().as_deref() == Some(bytes.as_bytes()) {
                unchanged += 1;
            } else {
                fb.write(&name, bytes.as_bytes())?;
                written += 1;
            }
        }
        if !inbox.files.contains_key(&FileKind::Address) {
            fb.remove(&file_name(FileKind::Address))?;
        }
    }
    let projects = inboxes.into_iter().map(|(p, _)| p).collect();
    Ok(Exported { projects, written, unchanged, ok: true })
}

/// A mirrored file of the moonshine layout, by its path `<project>/.feedback/<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry<'a> {
    Comment(&'a str, &'a str),
    Orphan(&'a str, &'a str),
    File(&'a str, FileKind),
}

impl<'a> Entry<'a> {
    fn of(path: &'a RelPath) -> Option<Entry<'a>> {
        let [project, inbox, name] = path.parts() else { return None };
        if inbox != INBOX {
            return None;
        }
        if let Some(kind) = FileKind::ALL.into_iter().find(|k| file_name(*k) == *name) {
            return Some(Entry::File(project, kind));
        }
        if let Some((base, _)) = name.split_once(CLAIMING) {
            return check_comment_id(base).is_ok().then_some(Entry::Orphan(project, base));
        }
        let id = name.strip_suffix(".json")?;
        check_comment_id(id).is_ok().then_some(Entry::Comment(project, id))
    }
}

/// The moonshine home as a mirrored layout: each project's comment files and its four other
/// files, merged record by record by the inbox's rules (`outside.rs`). A call scoped
/// `moonshine:<project>` mirrors that project; any other scope (a tick or Stop hook over every
/// project) mirrors every project the store or the home holds. A comment held right now by a
/// live legacy claim (`<id>.json.claiming.<pid>`, its file renamed away) is left alone; an
/// orphaned claim whose process is gone is read as the comment's file, as the Stop hook restores
/// it. A consumed address request removes `address.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MoonshineLayout;

impl MoonshineLayout {
    /// The projects a call mirrors.
    fn projects(txn: &dyn ReadTxn, call: &Call, root: &Root) -> Result<BTreeSet<String>> {
        if let Some(project) = call.scope.strip_prefix(SCOPE_PREFIX) {
            validate_id("project", project)?;
            return Ok(BTreeSet::from([project.to_owned()]));
        }
        let mut all: BTreeSet<String> =
            read_docs::<bool>(txn, INDEX_SCOPE, PROJECT)?.into_iter().map(|(p, _)| p).collect();
        for name in root.list()? {
            // The mirror's own directory and anything else that is no project name is skipped.
            if validate_id("project", &name).is_ok() && !is_plain_file(root, &name) {
                all.insert(name);
            }
        }
        Ok(all)
    }

    /// One project's files: comments the store or the directory holds, orphaned claims, and
    /// the other files either holds.
    fn project_files(txn: &dyn ReadTxn, names: &[String], project: &str) -> Result<Vec<RelPath>> {
        let scope = scope_of(project);
        let mut ids: BTreeSet<String> =
            read_docs::<IgnoredAny>(txn, &scope, COMMENT)?.into_iter().map(|(id, _)| id).collect();
        let mut orphans = Vec::new();
        for name in names {
            match claiming(name, names) {
                // Its file is renamed away while a live process claims it: left alone (its base
                // is absent, so no later name adds the id back).
                Some(Claiming::Live(base)) => {
                    ids.remove(base);
                }
                Some(Claiming::Orphan(base)) if check_comment_id(base).is_ok() => {
                    orphans.push(name.clone());
                }
                Some(_) => {}
                None => {
                    let id = name.strip_suffix(".json").filter(|id| check_comment_id(id).is_ok());
                    ids.extend(id.map(str::to_owned));
                }
            }
        }
        let path = |name: &str| RelPath::new(&[project, INBOX, name]);
        let mut files = Vec::new();
        for id in &ids {
            files.push(path(&format!("{id}.json"))?);
        }
        for name in &orphans {
            files.push(path(name)?);
        }
        for kind in FileKind::ALL {
            let name = file_name(kind);
            if names.contains(&name)
                || read_doc::<FileRow>(txn, &scope, FILE, kind.stem())?.is_some()
            {
                files.push(path(&name)?);
            }
        }
        Ok(files)
    }
}

/// The names in `project`'s inbox in `root`: none when the project or its inbox is absent.
///
/// # Errors
/// [`Error::UnsafePath`] for a project or inbox directory that is a symlink or that others may
/// write; IO errors.
fn inbox_names(root: &Root, project: &str) -> Result<Vec<String>> {
    match root.subdir(project, false)? {
        Some(dir) => match dir.subdir(INBOX, false)? {
            Some(inbox) => inbox.list(),
            None => Ok(Vec::new()),
        },
        None => Ok(Vec::new()),
    }
}

/// Parses a mirrored file in whatever layout it was written; a rendering rewrites it in the
/// store's.
fn parse_any(name: &str, bytes: &[u8]) -> Result<JsonDoc> {
    parse_doc_any(name, bytes).map(|(doc, _)| doc)
}

impl Layout for MoonshineLayout {
    fn name(&self) -> &'static str {
        "moonshine"
    }

    fn files(&self, txn: &dyn ReadTxn, call: &Call, root: &Root) -> Result<Vec<RelPath>> {
        let every = !call.scope.starts_with(SCOPE_PREFIX);
        let mut files = Vec::new();
        for project in Self::projects(txn, call, root)? {
            let names = match inbox_names(root, &project) {
                Ok(names) => names,
                // Over every project, one whose directory cannot be used is left alone (and
                // reported by `skipped`); a call about that project fails.
                Err(_) if every => continue,
                Err(err) => return Err(err),
            };
            files.extend(Self::project_files(txn, &names, &project)?);
        }
        Ok(files)
    }

    fn skipped(&self, call: &Call, root: &Root) -> Result<Vec<Conflict>> {
        if call.scope.starts_with(SCOPE_PREFIX) {
            return Ok(Vec::new());
        }
        let mut skipped = Vec::new();
        for name in root.list()? {
            if validate_id("project", &name).is_err() || is_plain_file(root, &name) {
                continue;
            }
            if let Err(err) = inbox_names(root, &name) {
                let why = format!("the project is left alone: {err}");
                skipped.push(Conflict { file: format!("{name}/"), record: name, why });
            }
        }
        Ok(skipped)
    }

    fn max_bytes(&self, _: &RelPath) -> usize {
        FILE_BYTES_MAX
    }

    fn render(&self, txn: &dyn ReadTxn, _: &Call, path: &RelPath) -> Result<Option<Vec<u8>>> {
        let doc = match Entry::of(path) {
            Some(Entry::Comment(project, id)) => {
                read_doc::<CommentRow>(txn, &scope_of(project), COMMENT, id)?.map(|r| r.doc)
            }
            Some(Entry::File(project, kind)) => {
                read_doc::<FileRow>(txn, &scope_of(project), FILE, kind.stem())?.map(|r| r.doc)
            }
            Some(Entry::Orphan(..)) | None => None,
        };
        Ok(doc.map(|doc| render(&doc).into_bytes()))
    }

    fn removes(&self, txn: &dyn ReadTxn, _: &Call, path: &RelPath, now: &[u8]) -> Result<bool> {
        let Some(Entry::File(project, FileKind::Address)) = Entry::of(path) else {
            return Ok(false);
        };
        // Only a request the store took in and then consumed: a file it could not adopt stays.
        let valid = parse_any("address.json", now)
            .is_ok_and(|doc| check_file("address.json", FileKind::Address, &doc).is_ok());
        let stem = FileKind::Address.stem();
        Ok(valid && read_doc::<FileRow>(txn, &scope_of(project), FILE, stem)?.is_none())
    }

    fn adopt(&self, txn: &dyn ReadTxn, call: &Call, changes: &[Change]) -> Result<Adoption> {
        let mut by_project: BTreeMap<&str, Vec<(&Change, Entry<'_>)>> = BTreeMap::new();
        for change in changes {
            if let Some(entry) = Entry::of(&change.path) {
                let (Entry::Comment(project, _)
                | Entry::Orphan(project, _)
                | Entry::File(project, _)) = entry;
                by_project.entry(project).or_default().push((change, entry));
            }
        }
        let mut adoption = Adoption::default();
        for (project, changes) in by_project {
            adopt_project(txn, call, project, &changes, &mut adoption)?;
        }
        Ok(adoption)
    }
}

/// Merges one project's changed files into `adoption`.
fn adopt_project(
    txn: &dyn ReadTxn,
    call: &Call,
    project: &str,
    changes: &[(&Change, Entry<'_>)],
    adoption: &mut Adoption,
) -> Result<()> {
    let scope = scope_of(project);
    let inbox = read_inbox(txn, &scope)?;
    let (epoch, requests) = (inbox.meta.epoch, inbox.meta.requests);
    let mut counters = Counters { epoch, requests, now_ms: call.now_ms };
    let mut count = inbox.comments.len();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for (change, entry) in changes {
        let name = change.path.name();
        let base = change.base.as_deref().and_then(|b| parse_any(name, b).ok());
        let merged = match *entry {
            Entry::Comment(_, id) | Entry::Orphan(_, id) => {
                if !done.insert(id) {
                    continue;
                }
                let row = inbox.comments.iter().find(|(c, _)| c == id).map(|(_, r)| r);
                // A file that does not parse is set aside, not written over: the store's
                // version takes its place. One that parses but breaks a rule is a conflict.
                let Ok(doc) = parse_any(name, &change.now) else {
                    adoption.quarantine.push(change.path.clone());
                    continue;
                };
                let file = check_comment(name, id, &doc).map(|()| doc);
                match file {
                    Err(err) => Merged { events: Vec::new(), conflict: Some(err.to_string()) },
                    Ok(_) if row.is_none() && count >= COMMENTS_MAX => Merged {
                        events: Vec::new(),
                        conflict: Some(format!("the project holds {COMMENTS_MAX} comments")),
                    },
                    Ok(file) => {
                        count += usize::from(row.is_none());
                        outside::comment(id, base.as_ref(), &file, row, &mut counters)
                    }
                }
            }
            Entry::File(_, kind) => {
                let Ok(doc) = parse_any(name, &change.now) else {
                    adoption.quarantine.push(change.path.clone());
                    continue;
                };
                match check_file(name, kind, &doc).map(|()| doc) {
                    Err(err) => Merged { events: Vec::new(), conflict: Some(err.to_string()) },
                    Ok(file) => {
                        let row = inbox.files.get(&kind);
                        outside::file(kind, base.is_some(), &file, row, &mut counters)
                    }
                }
            }
        };
        let events = merged.events.into_iter().map(|e| (scope.clone(), Body::Feedback(e)));
        adoption.events.extend(events);
        if let Some(why) = merged.conflict {
            let record = match *entry {
                Entry::Comment(_, id) | Entry::Orphan(_, id) => id.to_owned(),
                Entry::File(_, kind) => kind.stem().to_owned(),
            };
            adoption.conflicts.push(Conflict { file: change.path.display(), record, why });
        }
    }
    Ok(())
}
