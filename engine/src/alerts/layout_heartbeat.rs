//! claude-code-hermit's heartbeat files (layout `hermit-heartbeat`): `state/budget-alerts.json`,
//! `telemetry-alert.json`, `doctor-alerts.json`, `heartbeat-monitor.runtime.json`,
//! `heartbeat-liveness.json`, `injection-alert.json`, `runtime.json` and `sessions/NEXT-TASK.md`,
//! adopted as their exact text and written back byte for byte; the config fields the heartbeat
//! verbs read; and the `--mirror` adoption of these files on top of the hermit mirror lock.
//!
//! A JSON file that does not parse is quarantined as `<file>.corrupt-<ms>` (a rename inside its
//! directory, as upstream's tri-state reader does) and rebuilt from the log, never adopted and
//! never silently replaced. Does not decide heartbeat rules; `heartbeat` does.

use std::path::Path;

use hookstate_schema::heartbeat::HeartbeatEvent;
use hookstate_schema::Body;
use serde_json::{json, Map, Value};

use super::heartbeat::{is_layout_file, ALERT_FILES, FILE_BYTES_MAX, NEXT_TASK_FILE, STATE_FILES};
use super::heartbeat_rules as rules;
use super::Alerts;
use crate::kernel::call::fields;
use crate::kernel::call::Call;
use crate::kernel::call::Outcome;
use crate::kernel::call::Plan;
use crate::kernel::error::{Error, Result};
use crate::legacy::root::Root;
use crate::legacy::sidecar::{changed_outside, digest, read_sidecar, write_mirror, write_sidecar};
use crate::proposals::layout::{Mirror, MIRROR_STAMP, MIRROR_STAMP_BYTES_MAX, STATE_DIR};

/// The sessions subdirectory of a hermit state directory.
pub const SESSIONS_DIR: &str = "sessions";
/// The quarantine suffix: `<file>.corrupt-<epoch ms>`.
pub const QUARANTINE_INFIX: &str = ".corrupt-";
const CONFIG_FILE: &str = "config.json";

/// What the heartbeat verbs read from `config.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// `timezone` (default UTC).
    pub timezone: String,
    /// `always_on === true && escalation === "conservative"`: the next-task ack is enabled.
    pub next_task_ack: bool,
    /// `heartbeat.enabled === false`.
    pub heartbeat_disabled: bool,
    /// `heartbeat.every` as whole seconds, when it is a string `<n>s|m|h` (upstream's
    /// `parseDuration`: any case, spaces allowed before the unit); otherwise the default.
    pub every_s: Option<u64>,
    /// `state/.boot-id`, trimmed, when it exists and is a short single line.
    pub boot_id: Option<String>,
}

/// The boot id file under `state/` (upstream's `readBootId`).
pub const BOOT_ID_FILE: &str = ".boot-id";

fn read_boot_id(dir: &Path) -> Result<Option<String>> {
    let Some(state) = open_sub(dir, STATE_DIR, false)? else {
        return Ok(None);
    };
    let Some(bytes) = state.read(BOOT_ID_FILE, rules::STAMP_BYTES_MAX + 1).or_else(|e| {
        if e.is_invalid() {
            Ok(None)
        } else {
            Err(e)
        }
    })?
    else {
        return Ok(None);
    };
    let text = String::from_utf8(bytes).unwrap_or_default();
    let id = text.trim();
    Ok(rules::check_stamp("boot id", id).ok().map(|()| id.to_owned()))
}

/// `heartbeatInterval`'s `parseDuration` in seconds: a string `<digits><spaces><s|m|h>` (any
/// case, trimmed); anything else (a number, a day unit, a fraction) is `None`, the default.
fn duration_s(value: &Value) -> Option<u64> {
    let text = value.as_str()?.trim();
    let unit = text.chars().last()?;
    let scale = match unit.to_ascii_lowercase() {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        _ => return None,
    };
    let digits = text[..text.len() - unit.len_utf8()].trim_end_matches(char::is_whitespace);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// Reads the heartbeat settings of `DIR/config.json` (defaults when absent).
///
/// # Errors
/// An unsafe or missing directory; [`Error::Invalid`] for a config that is not a JSON object.
pub fn read_config(dir: &Path) -> Result<HeartbeatConfig> {
    let root = Root::open(dir, false)?;
    let config = match root.read(CONFIG_FILE, crate::proposals::layout::CONFIG_FILE_BYTES_MAX)? {
        Some(bytes) => match serde_json::from_slice(&bytes) {
            Ok(Value::Object(map)) => map,
            _ => return Err(Error::invalid(format!("{CONFIG_FILE} is not a JSON object"))),
        },
        None => Map::new(),
    };
    let timezone = config
        .get("timezone")
        .and_then(Value::as_str)
        .filter(|tz| !tz.is_empty())
        .unwrap_or("UTC")
        .to_owned();
    let heartbeat = config.get("heartbeat");
    Ok(HeartbeatConfig {
        timezone,
        next_task_ack: config.get("always_on") == Some(&Value::Bool(true))
            && config.get("escalation").and_then(Value::as_str) == Some("conservative"),
        heartbeat_disabled: heartbeat.and_then(|h| h.get("enabled")) == Some(&Value::Bool(false)),
        every_s: heartbeat.and_then(|h| h.get("every")).and_then(duration_s),
        boot_id: read_boot_id(dir)?,
    })
}

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
/// [`Error::Invalid`] for an oversized file or a queue that is not UTF-8; unsafe paths.
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
                return Err(Error::invalid(format!("{SESSIONS_DIR}/{file} is {why}")));
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
        let stored = super::heartbeat::read_file(&*self.k.begin_read()?, scope, file)?;
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

    /// Inside a hermit mirror (its lock held): adopts what other writers did to the heartbeat
    /// files since hookstate last wrote them (a changed file is adopted, a corrupt one
    /// quarantined, a deleted one removed), in one transaction.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn heartbeat_mirror_adopt(
        &self,
        call: &Call,
        mirror: &Mirror,
    ) -> Result<Map<String, Value>> {
        hookstate_schema::validate_scope(&call.scope)?;
        let (mut events, mut quarantined, mut known) = (Vec::new(), Vec::new(), Vec::new());
        for file in STATE_FILES.iter().chain(std::iter::once(&NEXT_TASK_FILE)) {
            let root = open_sub(mirror.dir(), subdir_of(file), true)?
                .ok_or_else(|| Error::NoStore { path: mirror.dir().join(subdir_of(file)) })?;
            let bytes = root.read(file, FILE_BYTES_MAX)?;
            let sidecar = read_sidecar(&root, file)?;
            match bytes {
                Some(bytes) if changed_outside(Some(&bytes), sidecar.as_ref()) => {
                    if corrupt_reason(file, &bytes).is_some() {
                        let target = format!("{file}{QUARANTINE_INFIX}{}", call.now_ms);
                        root.rename_new(file, &target)?;
                        quarantined.push(target);
                    } else {
                        let text = String::from_utf8(bytes).unwrap_or_default();
                        known.push((root, (*file).to_owned(), text.clone()));
                        let file = (*file).to_owned();
                        events.push(Body::Heartbeat(HeartbeatEvent::FileAdopted { file, text }));
                    }
                }
                None if sidecar.is_some()
                    && super::heartbeat::read_file(&*self.k.begin_read()?, &call.scope, file)?
                        .is_some() =>
                {
                    let (file, why) = ((*file).to_owned(), "mirror adopt".to_owned());
                    events.push(Body::Heartbeat(HeartbeatEvent::FileRemoved { file, why }));
                }
                _ => {}
            }
        }
        let adopted = events.len();
        if !events.is_empty() {
            let adopt = call.without_idem_key();
            let outcome =
                self.k.write(&adopt, |_| Ok(Plan { events: events.clone(), ..Plan::default() }))?;
            // The store now knows these bytes: the end of the call may replace them, but not
            // bytes another writer puts there after this point.
            for (root, file, text) in known {
                write_sidecar(&root, &file, text.as_bytes(), outcome.head.seq)?;
            }
        }
        Ok(fields(json!({ "adopted": adopted, "quarantined": quarantined })))
    }

    /// Ends a mirrored alerts call: writes the heartbeat files of `scope` (with their sidecars),
    /// then, only when the proposals files are mirrored already (their stamp exists), rewrites
    /// them through [`Engine::mirror_end`]; otherwise it releases the lock and leaves them alone,
    /// so an alerts call never replaces a queue or ledger that was never imported.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn heartbeat_mirror_end(&self, mirror: Mirror, scope: &str) -> Result<()> {
        self.heartbeat_mirror_write(&mirror, scope)?;
        let stamped = match open_sub(mirror.dir(), STATE_DIR, false)? {
            Some(state) => state.read(MIRROR_STAMP, MIRROR_STAMP_BYTES_MAX)?.is_some(),
            None => false,
        };
        if stamped {
            crate::proposals::Proposals::new(self.k).mirror_end(mirror, scope)
        } else {
            drop(mirror);
            Ok(())
        }
    }

    /// Inside a hermit mirror: writes the stored heartbeat files of `scope` with their sidecars,
    /// and removes the layout's files the scope no longer holds; but only files as hookstate last
    /// wrote them (or already holding the stored text, whose sidecar is then brought up to date).
    /// A file another writer changed after this call's adoption (the writers that do not take the
    /// lock) is left as it is, for the next call to adopt, never overwritten with an older copy.
    fn heartbeat_mirror_write(&self, mirror: &Mirror, scope: &str) -> Result<()> {
        let head = self.k.head()?.seq;
        for (file, text) in self.heartbeat_files(scope)? {
            let root = open_sub(mirror.dir(), subdir_of(&file), true)?
                .ok_or_else(|| Error::NoStore { path: mirror.dir().join(subdir_of(&file)) })?;
            let bytes = root.read(&file, FILE_BYTES_MAX)?;
            let sidecar = read_sidecar(&root, &file)?;
            let ours = !changed_outside(bytes.as_deref(), sidecar.as_ref());
            match text {
                Some(text) if bytes.as_deref() == Some(text.as_bytes()) => {
                    let stale = sidecar.is_none_or(|s| s.hash != digest(text.as_bytes()));
                    if stale {
                        write_sidecar(&root, &file, text.as_bytes(), head)?;
                    }
                }
                Some(text) if ours => write_mirror(&root, &file, text.as_bytes(), head)?,
                None if ours => root.remove(&file)?,
                _ => {}
            }
        }
        Ok(())
    }
}

/// Whether `name` is a quarantined copy of one of the layout's files.
#[must_use]
pub fn is_quarantine(name: &str) -> bool {
    name.split_once(QUARANTINE_INFIX).is_some_and(|(file, ms)| {
        is_layout_file(file) && !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit())
    })
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

    #[test]
    fn durations_read_as_upstream_parse_duration() {
        // parseDuration: /^(\d+)\s*([smh])$/i on the trimmed string; anything else → default.
        assert_eq!(duration_s(&json!("30m")), Some(1800));
        assert_eq!(duration_s(&json!("2h")), Some(7200));
        assert_eq!(duration_s(&json!(" 45s ")), Some(45));
        assert_eq!(duration_s(&json!("5 m")), Some(300));
        assert_eq!(duration_s(&json!("5\tM")), Some(300));
        assert_eq!(duration_s(&json!("2H")), Some(7200));
        assert_eq!(duration_s(&json!(90)), None, "a number is not a duration upstream");
        assert_eq!(duration_s(&json!("1d")), None, "no day unit upstream");
        assert_eq!(duration_s(&json!("soon")), None);
        assert_eq!(duration_s(&json!("m")), None);
        assert_eq!(duration_s(&json!("1.5m")), None);
        assert_eq!(duration_s(&json!("-5m")), None);
    }
}
