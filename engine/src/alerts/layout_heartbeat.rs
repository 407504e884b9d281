//! claude-code-hermit's heartbeat files (layout `hermit-heartbeat`): `state/budget-alerts.json`,
//! `telemetry-alert.json`, `doctor-alerts.json`, `heartbeat-monitor.runtime.json`,
//! `heartbeat-liveness.json`, `injection-alert.json`, `runtime.json` and `sessions/NEXT-TASK.md`,
//! adopted as their exact text and written back byte for byte; and mirrored
//! (`HeartbeatLayout`): a JSON file merged field by field (an alert file's alerts per key),
//! `NEXT-TASK.md` whole, and a file's removal adopted (session-start consumes the queued task,
//! start-check clears the liveness record).
//!
//! A JSON file that does not parse is quarantined as `<file>.corrupt-<ms>` (a rename inside its
//! directory, as upstream's tri-state reader does) and rebuilt from the log, never adopted and
//! never silently replaced. Does not decide heartbeat rules; `heartbeat.rs` does.

use std::path::Path;

use hookstate_schema::heartbeat::{FileDoc, HeartbeatEvent, NextTaskRevDoc};
use hookstate_schema::Body;
use serde_json::{json, Map, Value};

use super::api::{read_file, Alerts};
use super::config::STATE_DIR;
#[cfg(test)]
use super::heartbeat::is_layout_file;
use super::heartbeat::{ALERT_FILES, FILE_BYTES_MAX, FILE_KIND, NEXT_TASK_FILE};
use super::heartbeat::{REV_ID, REV_KIND, STATE_FILES};
use super::heartbeat_rules as rules;
use super::merge::{merge_object, Fields};
use crate::kernel::call::{fields, Call, Conflict, Outcome, Plan};
use crate::kernel::doc::{read_doc, read_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::legacy::mirror::{merge, Adoption, Change, Layout, Merge, RelPath};
use crate::legacy::root::Root;

/// The sessions subdirectory of a hermit state directory.
pub(crate) const SESSIONS_DIR: &str = "sessions";
/// The quarantine suffix: `<file>.corrupt-<epoch ms>`.
pub(crate) const QUARANTINE_INFIX: &str = ".corrupt-";
/// How an alert file's fields merge: its alerts per key.
const ALERT_FIELDS: Fields = Fields { maps: &["alerts"], counters: &[] };
/// How any other heartbeat file's fields merge.
const PLAIN_FIELDS: Fields = Fields { maps: &[], counters: &[] };

fn subdir_of(file: &str) -> &'static str {
    if file == NEXT_TASK_FILE {
        SESSIONS_DIR
    } else {
        STATE_DIR
    }
}

/// Why a legacy file is not adopted: `None` when it is sound.
fn corrupt_reason(file: &str, bytes: &[u8]) -> Option<String> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Some("not UTF-8".into());
    };
    if file == NEXT_TASK_FILE {
        return None;
    }
    match rules::parse_object(file, text) {
        Err(e) => Some(e.to_string()),
        Ok(map) if ALERT_FILES.contains(&file) => match map.get("alerts") {
            None | Some(Value::Object(_)) => None,
            Some(_) => Some("alerts is not an object".into()),
        },
        Ok(_) => None,
    }
}

/// The heartbeat files read and checked, ready to import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatFiles {
    good: Vec<(String, String)>,
    corrupt: Vec<(String, String)>,
}

fn open_sub(dir: &Path, sub: &str, create: bool) -> Result<Option<Root>> {
    Root::open(dir, create)?.subdir(sub, create)
}

/// Reads `DIR/state/*` and `DIR/sessions/NEXT-TASK.md` of the layout. A JSON file that does not
/// parse is set aside for quarantine; an oversized file or a non-UTF-8 queue is refused.
///
/// # Errors
/// [`Error::TooLarge`] for an oversized file, [`Error::LegacyFile`] for a queue that is not
/// UTF-8; unsafe paths.
pub fn read_heartbeat_files(dir: &Path) -> Result<HeartbeatFiles> {
    let mut files = HeartbeatFiles { good: Vec::new(), corrupt: Vec::new() };
    for file in STATE_FILES.iter().chain(std::iter::once(&NEXT_TASK_FILE)) {
        let Some(root) = open_sub(dir, subdir_of(file), false)? else {
            continue;
        };
        let Some(bytes) = root.read(file, FILE_BYTES_MAX)? else {
            continue;
        };
        match corrupt_reason(file, &bytes) {
            Some(why) if *file == NEXT_TASK_FILE => {
                return Err(Error::legacy(format!("{SESSIONS_DIR}/{file}"), why));
            }
            Some(why) => files.corrupt.push(((*file).to_owned(), why)),
            None => {
                let text = String::from_utf8(bytes).unwrap_or_default();
                files.good.push(((*file).to_owned(), text));
            }
        }
    }
    Ok(files)
}

impl Alerts<'_> {
    /// Writes the stored text of a quarantined `file` back under `root` when the scope holds
    /// one. Returns whether it did.
    fn rewrite_stored(&self, root: &Root, scope: &str, file: &str) -> Result<bool> {
        let stored = read_file(&*self.k.begin_read()?, scope, file)?;
        if let Some(text) = &stored {
            root.write(file, text.as_bytes())?;
        }
        Ok(stored.is_some())
    }

    /// Quarantines the corrupt heartbeat files (renamed to `<file>.corrupt-<ms>` first, so a
    /// directory that refuses the rename fails the import before anything is committed), adopts
    /// the checked ones into the call's scope in one transaction (each replaces the stored file),
    /// then rebuilds each quarantined file from what the store holds.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn import_heartbeat(
        &self,
        call: &Call,
        dir: &Path,
        files: HeartbeatFiles,
    ) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        let HeartbeatFiles { good, corrupt } = files;
        let mut moved = Vec::new();
        for (file, why) in corrupt {
            let Some(root) = open_sub(dir, subdir_of(&file), false)? else {
                continue;
            };
            let target = format!("{file}{QUARANTINE_INFIX}{}", call.now_ms);
            root.rename_new(&file, &target)?;
            moved.push((root, file, target, why));
        }
        let names: Vec<String> = good.iter().map(|(f, _)| f.clone()).collect();
        let events: Vec<Body> = good
            .into_iter()
            .map(|(file, text)| Body::Heartbeat(HeartbeatEvent::FileAdopted { file, text }))
            .collect();
        let mut outcome =
            self.k.write(call, |_| Ok(Plan { events: events.clone(), ..Plan::default() }))?;
        let (mut quarantined, mut rebuilt) = (Vec::new(), Vec::new());
        for (root, file, target, why) in moved {
            if self.rewrite_stored(&root, &call.scope, &file)? {
                rebuilt.push(file.clone());
            }
            quarantined.push(json!({ "file": file, "to": target, "why": why }));
        }
        outcome.result.extend(fields(json!({
            "layout": "hermit-heartbeat", "files": names, "quarantined": quarantined,
            "rebuilt": rebuilt,
        })));
        Ok(outcome)
    }

    /// Writes the stored heartbeat files of `scope` under `DIR/state/` and `DIR/sessions/`
    /// (directories 0700, files 0600). A layout file the scope does not hold is left as it is
    /// (and listed under `left`): an export never deletes what another writer may have put
    /// there; a mirror, which knows what it wrote, does remove the files the scope dropped.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn export_heartbeat(&self, scope: &str, dir: &Path) -> Result<Map<String, Value>> {
        let (mut written, mut left) = (Vec::new(), Vec::new());
        for (file, text) in self.heartbeat_files(scope)? {
            let root = open_sub(dir, subdir_of(&file), true)?
                .ok_or_else(|| Error::NoStore { path: dir.join(subdir_of(&file)) })?;
            match text {
                Some(text) => {
                    root.write(&file, text.as_bytes())?;
                    written.push(file);
                }
                None => {
                    if root.list()?.contains(&file) {
                        left.push(file);
                    }
                }
            }
        }
        Ok(fields(json!({ "files": written, "left": left })))
    }
}

#[cfg(test)]
/// Whether `name` is a quarantined copy of one of the layout's files.
#[must_use]
pub(crate) fn is_quarantine(name: &str) -> bool {
    name.split_once(QUARANTINE_INFIX).is_some_and(|(file, ms)| {
        is_layout_file(file) && !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The heartbeat files as a mirrored layout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HeartbeatLayout;

impl Layout for HeartbeatLayout {
    fn name(&self) -> &'static str {
        "hermit-heartbeat"
    }

    fn files(&self, _: &dyn ReadTxn, _: &Call, _: &Root) -> Result<Vec<RelPath>> {
        STATE_FILES
            .iter()
            .chain(std::iter::once(&NEXT_TASK_FILE))
            .map(|file| RelPath::new(&[subdir_of(file), file]))
            .collect()
    }

    fn max_bytes(&self, _: &RelPath) -> usize {
        FILE_BYTES_MAX
    }

    fn render(&self, txn: &dyn ReadTxn, call: &Call, path: &RelPath) -> Result<Option<Vec<u8>>> {
        Ok(read_file(txn, &call.scope, path.name())?.map(String::into_bytes))
    }

    fn adopt(&self, txn: &dyn ReadTxn, call: &Call, changes: &[Change]) -> Result<Adoption> {
        let mut adoption = Adoption::default();
        for change in changes {
            let file = path_file(&change.path);
            let store = read_file(txn, &call.scope, &file)?;
            let base = change.base.as_deref().and_then(|b| std::str::from_utf8(b).ok());
            let event = if change.removed {
                // Removed outside: adopted while the store still holds what the mirror saw.
                (store.is_some() && store.as_deref() == base).then(|| HeartbeatEvent::FileRemoved {
                    file: file.clone(),
                    why: "mirror adopt".into(),
                })
            } else if corrupt_reason(&file, &change.now).is_some() {
                adoption.quarantine.push(change.path.clone());
                None
            } else {
                let text = String::from_utf8_lossy(&change.now).into_owned();
                adopted(&file, base, &text, store.as_deref(), &change.path, &mut adoption)
            };
            if let Some(event) = event {
                adoption.events.push((call.scope.clone(), Body::Heartbeat(event)));
            }
        }
        Ok(adoption)
    }

    fn removable(&self, _: &RelPath) -> bool {
        true
    }

    /// A file the scope no longer holds was removed by a verb (a consume, a stop, a re-arm)
    /// when the scope holds any heartbeat record; a store that holds none never knew the files.
    fn removes(&self, txn: &dyn ReadTxn, call: &Call, path: &RelPath, _: &[u8]) -> Result<bool> {
        if read_file(txn, &call.scope, path.name())?.is_some() {
            return Ok(false);
        }
        let held = read_docs::<FileDoc>(txn, &call.scope, FILE_KIND)?;
        let rev = read_doc::<NextTaskRevDoc>(txn, &call.scope, REV_KIND, REV_ID)?;
        Ok(!held.is_empty() || rev.is_some())
    }
}

fn path_file(path: &RelPath) -> String {
    path.name().to_owned()
}

/// The event adopting a sound changed file: the file whole when the store holds none, else the
/// merge (field by field for JSON, whole for the queued task).
fn adopted(
    file: &str,
    base: Option<&str>,
    text: &str,
    store: Option<&str>,
    path: &RelPath,
    adoption: &mut Adoption,
) -> Option<HeartbeatEvent> {
    let adopt = |text: String| Some(HeartbeatEvent::FileAdopted { file: file.to_owned(), text });
    let Some(store) = store else {
        return adopt(text.to_owned());
    };
    let conflict = |record: String| Conflict {
        file: path.display(),
        record,
        why: "changed in the file and in the store since the mirror last wrote it".into(),
    };
    if file == NEXT_TASK_FILE {
        return match merge(base.as_ref(), Some(&text), Some(&store)) {
            Merge::Outside(_) => adopt(text.to_owned()),
            Merge::Both { .. } => {
                adoption.conflicts.push(conflict(file.to_owned()));
                None
            }
            Merge::Same | Merge::Dropped(_) => None,
        };
    }
    let object = |t: &str| rules::parse_object(file, t).ok();
    let (Some(file_map), Some(store_map)) = (object(text), object(store)) else {
        return None;
    };
    let kinds = if ALERT_FILES.contains(&file) { ALERT_FIELDS } else { PLAIN_FIELDS };
    let (merged, conflicts) =
        merge_object(base.and_then(object).as_ref(), &file_map, &store_map, kinds);
    adoption.conflicts.extend(conflicts.into_iter().map(conflict));
    if merged == store_map {
        None
    } else if merged == file_map {
        adopt(text.to_owned())
    } else {
        adopt(rules::render_object(&merged, rules::layout_of(text)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_files_are_named_and_sound_ones_are_not() {
        assert_eq!(corrupt_reason("runtime.json", b"{\"a\":1}\n"), None);
        assert_eq!(corrupt_reason("NEXT-TASK.md", b"## Task\n"), None);
        assert!(corrupt_reason("runtime.json", b"{\"a\":").is_some());
        assert!(corrupt_reason("runtime.json", b"[1]\n").is_some());
        assert!(corrupt_reason("budget-alerts.json", b"{\"alerts\":[]}\n").is_some());
        assert!(corrupt_reason("NEXT-TASK.md", b"\xff").is_some());
        assert!(is_quarantine("runtime.json.corrupt-1789377123554"));
        assert!(!is_quarantine("runtime.json.corrupt-"));
        assert!(!is_quarantine("other.json.corrupt-1"));
    }
}
