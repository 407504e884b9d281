//! `doctor`: what an operator should know about a store, each finding with a hint: the
//! permissions of its directory and files, the chain and views (a full verify), the anchor,
//! temporary files killed writers left, a mirror directory, the processes that have the store
//! open, and its size and growth.
//!
//! Looks before it opens: a directory others can write is reported, never opened. Reads only;
//! does not repair anything (the hints say which verb does).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::engine::Engine;
use crate::kernel::error::Error;
use crate::kernel::limits::STALE_TEMP_SECS;
use crate::store::OpenOptions;

/// Directory entries the temporary-file scan looks at.
const DOCTOR_DIR_ENTRIES_MAX: usize = 10_000;
/// Processes the open-file scan of `/proc` looks at.
const DOCTOR_PROCS_MAX: usize = 4_096;
/// Open files per process the scan looks at.
const DOCTOR_FDS_MAX: usize = 4_096;
/// Last events the growth estimate reads: enough for a rate, bounded whatever the log's length.
const DOCTOR_GROWTH_EVENTS: u64 = 10_000;
/// The window of the growth estimate.
const DAY_MS: u64 = 24 * 60 * 60 * 1000;
/// Mode bits that let others than the owner write a directory.
const OTHERS_WRITE_BITS: u32 = 0o022;
/// Mode bits that let others than the owner read or write a file.
const OTHERS_ACCESS_BITS: u32 = 0o077;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Checked and fine.
    Ok,
    /// Worth knowing; nothing is wrong.
    Warn,
    /// Something is wrong: `doctor` exits non-zero.
    Problem,
}

impl Level {
    /// The level's name in a report.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Problem => "problem",
        }
    }
}

/// One thing `doctor` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorFinding {
    /// What was checked (`permissions`, `integrity`, `anchor`, `temporaries`, `mirror`,
    /// `open_by`, `size`).
    pub check: &'static str,
    /// How serious it is.
    pub level: Level,
    /// What was found.
    pub what: String,
    /// What to do about it.
    pub hint: Option<String>,
}

/// What `doctor` looks at besides the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoctorOptions {
    /// A mirror directory to check (`--mirror DIR`).
    pub mirror: Option<PathBuf>,
    /// The second anchor's directory (`HOOKSTATE_ANCHOR_DIR`).
    pub anchor_dir: Option<PathBuf>,
    /// The clock, UTC ms, for the growth estimate.
    pub now_ms: u64,
}

fn finding(check: &'static str, level: Level, what: String, hint: Option<&str>) -> DoctorFinding {
    DoctorFinding { check, level, what, hint: hint.map(str::to_owned) }
}

/// `hookstate doctor`: examines the store at `path` and what surrounds it; never writes.
#[must_use]
pub fn doctor(path: &Path, options: &DoctorOptions) -> Vec<DoctorFinding> {
    let mut out = Vec::new();
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let safe = check_permissions(path, dir, &mut out);
    if safe {
        check_store(path, options, &mut out);
    }
    check_temporaries(path, dir, &mut out);
    if let Some(mirror) = &options.mirror {
        check_mirror(mirror, &mut out);
    }
    check_open_by(path, &mut out);
    out
}

/// Checks the directory's and files' owners and modes; `false` when the store must not be
/// opened (a directory others can write, or no store).
fn check_permissions(path: &Path, dir: &Path, out: &mut Vec<DoctorFinding>) -> bool {
    let me = rustix::process::geteuid().as_raw();
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        let what = format!("directory {} does not exist", dir.display());
        out.push(finding("permissions", Level::Problem, what, Some("hookstate init creates it")));
        return false;
    };
    let mode = meta.mode() & 0o7777;
    if meta.uid() != me {
        let what = format!("directory {} is owned by uid {}, not {me}", dir.display(), meta.uid());
        out.push(finding(
            "permissions",
            Level::Problem,
            what,
            Some("keep the store in a directory of your own"),
        ));
        return false;
    }
    if mode & OTHERS_WRITE_BITS != 0 {
        let what = format!("directory {} mode {mode:o} is writable by others", dir.display());
        let hint = format!("chmod 700 {} (hookstate refuses to open a store there)", dir.display());
        out.push(finding("permissions", Level::Problem, what, Some(&hint)));
        return false;
    }
    let Ok(file) = std::fs::symlink_metadata(path) else {
        let what = format!("no store at {}", path.display());
        out.push(finding(
            "permissions",
            Level::Problem,
            what,
            Some("hookstate init, or pass --db"),
        ));
        return false;
    };
    let mut fine = true;
    let mut anchor = path.as_os_str().to_owned();
    anchor.push(".head");
    for (what, meta) in
        [("store file", Some(file)), ("anchor file", std::fs::symlink_metadata(&anchor).ok())]
    {
        let Some(meta) = meta else { continue };
        let mode = meta.mode() & 0o7777;
        if meta.file_type().is_symlink() || meta.uid() != me || mode & OTHERS_ACCESS_BITS != 0 {
            let text =
                format!("{what} mode {mode:o}, uid {}: others may read or replace it", meta.uid());
            out.push(finding(
                "permissions",
                Level::Problem,
                text,
                Some("chmod 600 the file; it holds every value"),
            ));
            fine = false;
        }
    }
    if fine {
        let what =
            format!("directory {} mode {mode:o}, files 600, owned by uid {me}", dir.display());
        out.push(finding("permissions", Level::Ok, what, None));
    }
    true
}

/// Runs a full verify (read-only) and reports the chain, the views, the anchor, size and growth.
fn check_store(path: &Path, options: &DoctorOptions, out: &mut Vec<DoctorFinding>) {
    // Read-only without the check on open: the verify below runs it beside its replay.
    let open = OpenOptions {
        create: false,
        check_integrity: false,
        read_only: true,
        anchor_dir: options.anchor_dir.clone(),
        ..OpenOptions::default()
    };
    let engine = match Engine::open(path, open) {
        Ok(engine) => engine,
        Err(err) => {
            let hint = "restore from a backup (hookstate backup) or a dump (hookstate restore)";
            out.push(finding(
                "integrity",
                Level::Problem,
                format!("cannot open: {err}"),
                Some(hint),
            ));
            return;
        }
    };
    match engine.ops().verify(crate::audit::VerifyOptions::default()) {
        Ok(report) => {
            let from = report
                .from_checkpoint
                .map_or_else(|| "genesis".to_owned(), |seq| format!("the checkpoint at seq {seq}"));
            let what = format!(
                "chain of {} events verified from {from}; {} view rows equal a rebuild",
                report.events, report.views
            );
            out.push(finding("integrity", Level::Ok, what, None));
            let what = match report.anchor_seq {
                Some(seq) => format!("anchor at seq {seq}, head at seq {}", report.head.seq),
                None => "no anchor yet (an empty store)".to_owned(),
            };
            out.push(finding("anchor", Level::Ok, what, None));
            growth(&engine, report.head.seq, options.now_ms, out);
        }
        Err(err @ (Error::AnchorMissing { .. } | Error::AnchorMismatch { .. })) => {
            let hint = "if the store is the one you expect (not a rollback or a swapped file): \
                        hookstate verify --accept-missing-anchor; otherwise restore from a backup";
            out.push(finding("anchor", Level::Problem, err.to_string(), Some(hint)));
        }
        Err(err @ (Error::ViewMismatch { .. } | Error::Corrupt(_))) => {
            let hint = "hookstate rebuild recomputes the views from the log";
            out.push(finding("integrity", Level::Problem, err.to_string(), Some(hint)));
        }
        Err(err) => {
            let hint = "restore from a backup (hookstate backup) or a dump (hookstate restore)";
            out.push(finding("integrity", Level::Problem, err.to_string(), Some(hint)));
        }
    }
}

/// The file's size, bytes per event and the events of the last day (from the last
/// [`DOCTOR_GROWTH_EVENTS`] events).
fn growth(engine: &Engine, head: u64, now_ms: u64, out: &mut Vec<DoctorFinding>) {
    let bytes = std::fs::symlink_metadata(engine.kernel().path()).map(|m| m.len()).unwrap_or(0);
    let filter = crate::query::LogFilter {
        from_seq: Some(head.saturating_sub(DOCTOR_GROWTH_EVENTS - 1).max(1)),
        since_ms: Some(now_ms.saturating_sub(DAY_MS)),
        ..Default::default()
    };
    let recent = engine.log(&filter).map(|events| events.len()).unwrap_or(0);
    let per_event = bytes.checked_div(head).unwrap_or(0);
    let bound = if recent as u64 >= DOCTOR_GROWTH_EVENTS { "at least " } else { "" };
    let what = format!(
        "{bytes} bytes, {head} events ({per_event} bytes per event); {bound}{recent} events in \
         the last 24 h, about {} bytes a day",
        per_event.saturating_mul(recent as u64)
    );
    out.push(finding("size", Level::Ok, what, None));
}

/// Temporary files beside the store; those older than [`STALE_TEMP_SECS`] are a killed
/// writer's.
fn check_temporaries(path: &Path, dir: &Path, out: &mut Vec<DoctorFinding>) {
    let Some(name) = path.file_name() else { return };
    // The names a writer makes and `rebuild` removes (`.<name>.<purpose>-<16 hex>`), no other.
    let prefix = format!(".{}", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let now = std::time::SystemTime::now();
    let (mut live, mut stale) = (0u32, Vec::new());
    for entry in entries.take(DOCTOR_DIR_ENTRIES_MAX).flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if !crate::store::is_temp_name(&file, &prefix) {
            continue;
        }
        let age = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| now.duration_since(t).ok());
        match age {
            Some(age) if age.as_secs() > STALE_TEMP_SECS => stale.push(file),
            _ => live += 1,
        }
    }
    if stale.is_empty() {
        let what = format!("no stale temporary files ({live} in use)");
        out.push(finding("temporaries", Level::Ok, what, None));
    } else {
        let what = format!(
            "{} stale temporary files of killed writers: {}",
            stale.len(),
            stale.join(", ")
        );
        out.push(finding("temporaries", Level::Warn, what, Some("hookstate rebuild removes them")));
    }
}

/// A mirror directory: present, ours, not writable by others, with its baselines.
fn check_mirror(dir: &Path, out: &mut Vec<DoctorFinding>) {
    let me = rustix::process::geteuid().as_raw();
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        let what = format!("mirror directory {} does not exist", dir.display());
        out.push(finding("mirror", Level::Problem, what, Some("create it, or fix --mirror")));
        return;
    };
    let mode = meta.mode() & 0o7777;
    if !meta.is_dir() || meta.uid() != me || mode & OTHERS_WRITE_BITS != 0 {
        let what = format!(
            "mirror directory {} (mode {mode:o}, uid {}) is not a private directory of yours",
            dir.display(),
            meta.uid()
        );
        out.push(finding(
            "mirror",
            Level::Problem,
            what,
            Some("chmod go-w the directory; the mirror writes only under it"),
        ));
        return;
    }
    let what = match dir.join(".hookstate-mirror").is_dir() {
        true => format!("mirror directory {} keeps its baselines", dir.display()),
        false => format!(
            "mirror directory {} has no baselines yet (the first mirrored call writes them)",
            dir.display()
        ),
    };
    out.push(finding("mirror", Level::Ok, what, None));
}

/// The processes that have the store file open, from `/proc` (Linux; elsewhere not checked).
fn check_open_by(path: &Path, out: &mut Vec<DoctorFinding>) {
    let Ok(target) = std::fs::canonicalize(path) else { return };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        out.push(finding("open_by", Level::Ok, "not checked (no /proc)".into(), None));
        return;
    };
    let me = std::process::id();
    let mut holders = Vec::new();
    for entry in procs.take(DOCTOR_PROCS_MAX).flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        let open = fds
            .take(DOCTOR_FDS_MAX)
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|p| p == target));
        if open {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            holders.push(format!("{pid} ({})", comm.trim()));
        }
    }
    let what = match holders.is_empty() {
        true => "no other process has the store open".to_owned(),
        false => format!("open by {}", holders.join(", ")),
    };
    let hint = (!holders.is_empty()).then_some(
        "a process that holds it long (serve, follow) is expected; one stuck in a hook is not",
    );
    out.push(finding("open_by", Level::Ok, what, hint));
}
