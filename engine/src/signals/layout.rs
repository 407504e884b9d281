//! loopd's legacy surfaces: bundle resolution from a worktree (five reads, no writes), and the
//! plugin-store file (a flat JSON object of `loopd.pm.<bundle>` and `loopd.signal.<session>` keys)
//! imported as events and exported byte for byte.
//!
//! Key order follows the first write of each key, as a JS object keeps it; the file's style
//! (pretty or compact, trailing newline) is recorded at import and reproduced. Does not send
//! anything to a PM.

use std::path::{Component, Path, PathBuf};

use hookstate_schema::signals::{KeptKeyDoc, PmDoc, SignalDoc, SignalsEvent, StoreStyle};
use hookstate_schema::{validate_id, Body};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::api::Signals;
use super::rules::{
    bundle_scope, KEPT_KIND, PM_KIND, SIGNAL_KIND, STORE_SCOPE, STYLE_ID, STYLE_KIND,
};
use crate::kernel::call::fields;
use crate::kernel::call::Call;
use crate::kernel::call::Conflict;
use crate::kernel::call::Outcome;
use crate::kernel::call::Plan;
use crate::kernel::compat::stamp::parse_offset_ms as parse_stamp;
use crate::kernel::doc::{read_doc, read_docs_all_scopes};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::legacy::json::{detect_style, render_styled};
use crate::legacy::mirror::{merge, Adoption, Change, Layout, Merge, RelPath};
use crate::legacy::root::Root;

/// The vendor's size limit of one plugin-store file.
pub(crate) const STORE_FILE_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Keys one plugin-store file may hold.
pub(crate) const STORE_KEYS_MAX: usize = 20_000;
/// The git pointer files read while resolving a bundle are one short line each.
pub(crate) const POINTER_FILE_BYTES_MAX: usize = 4096;
/// Default name of the exported plugin-store file.
pub const STORE_FILE_DEFAULT: &str = "loopd.json";
const PM_PREFIX: &str = "loopd.pm.";
const SIGNAL_PREFIX: &str = "loopd.signal.";
const BUNDLE_MARKER: &str = "loopd-bundle";
const BUNDLE_CONFIG: &str = "instance.config.json";

/// Reads a small regular file; `None` when absent, not regular, unreadable, oversized or not
/// UTF-8. A FIFO never blocks the read.
fn read_pointer(path: &Path) -> Option<String> {
    let bytes = crate::kernel::fsio::read_small_file(path, POINTER_FILE_BYTES_MAX as u64).ok()?;
    String::from_utf8(bytes).ok()
}

/// Joins `rel` to `base` lexically: `.` dropped, `..` folded, no symlink resolved.
#[must_use]
pub fn lexical_join(base: &Path, rel: impl AsRef<Path>) -> PathBuf {
    let joined = base.join(rel);
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The bundle a worktree belongs to: `<cwd>/.git` is a file naming `gitdir: <path>`, its
/// `commondir` (if any) names the common directory, whose `loopd-bundle` names an absolute
/// bundle root holding `instance.config.json`. Any missing link gives `None`.
#[must_use]
pub fn resolve_bundle(cwd: &Path) -> Option<PathBuf> {
    if !cwd.is_absolute() {
        return None;
    }
    let dot_git = cwd.join(".git");
    if !std::fs::symlink_metadata(&dot_git).ok()?.is_file() {
        return None;
    }
    let pointer = read_pointer(&dot_git)?;
    let gitdir = pointer.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
    let gitdir = lexical_join(cwd, gitdir);
    let common = match read_pointer(&gitdir.join("commondir")) {
        Some(text) => lexical_join(&gitdir, text.trim()),
        None => gitdir,
    };
    let bundle = PathBuf::from(read_pointer(&common.join(BUNDLE_MARKER))?.trim());
    if !bundle.is_absolute() || !bundle.join(BUNDLE_CONFIG).is_file() {
        return None;
    }
    Some(bundle)
}

/// Whether `cwd` is a bundle root (holds `instance.config.json`).
#[must_use]
pub fn is_bundle_root(cwd: &Path) -> bool {
    cwd.is_absolute() && cwd.join(BUNDLE_CONFIG).is_file()
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PmValue {
    #[serde(rename = "sessionId")]
    session_id: String,
    at: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignalValue {
    bundle: String,
    cwd: String,
    at: String,
    turns: u64,
    #[serde(rename = "durationMs")]
    duration_ms: u64,
    reason: String,
    #[serde(rename = "isAborted")]
    is_aborted: bool,
    delivered: Option<bool>,
}

/// Serialises a flat store object in the recorded style.
fn render_store(map: &Map<String, Value>, style: StoreStyle) -> Result<String> {
    render_styled(map, style)
}

fn bad(name: &str, why: String) -> Error {
    Error::legacy(format!("plugin store {name}"), why)
}

/// Turns one key of the store into its event and scope.
fn import_key(name: &str, key: &str, value: &Value) -> Result<(String, SignalsEvent)> {
    let typed = |what: &str| bad(name, format!("key {key:?} is not a {what} value"));
    if let Some(bundle) = key.strip_prefix(PM_PREFIX) {
        let pm: PmValue = serde_json::from_value(value.clone()).map_err(|_| typed("PM"))?;
        validate_id("session", &pm.session_id)?;
        let event =
            SignalsEvent::PmRegistered { bundle: bundle.into(), session: pm.session_id, at: pm.at };
        return Ok((bundle_scope(bundle), event));
    }
    if let Some(session) = key.strip_prefix(SIGNAL_PREFIX) {
        validate_id("session", session)?;
        let s: SignalValue = serde_json::from_value(value.clone()).map_err(|_| typed("signal"))?;
        let event = SignalsEvent::TurnSignaled {
            session: session.into(),
            bundle: s.bundle.clone(),
            cwd: s.cwd,
            at: s.at,
            turns: s.turns,
            duration_ms: s.duration_ms,
            reason: s.reason,
            aborted: s.is_aborted,
            delivered: s.delivered,
        };
        return Ok((bundle_scope(&s.bundle), event));
    }
    if key.chars().any(char::is_control) {
        return Err(bad(name, format!("key {key:?} holds a control character")));
    }
    Ok((
        STORE_SCOPE.into(),
        SignalsEvent::StoreKeyKept { key: key.into(), json: value.to_string() },
    ))
}

/// A parsed plugin-store file: its events (each with its scope) and the file as an export would
/// write it back.
pub(crate) struct ParsedStore {
    pub(crate) events: Vec<(String, Body)>,
    pub(crate) rendered: String,
}

/// Parses a whole plugin-store file into scoped events; nothing is written on any error.
pub(crate) fn parse_store(name: &str, bytes: &[u8]) -> Result<ParsedStore> {
    let text = std::str::from_utf8(bytes).map_err(|_| bad(name, "is not UTF-8".into()))?;
    let value: Value =
        serde_json::from_str(text).map_err(|e| bad(name, format!("is not valid JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(bad(name, "is not a JSON object".into()));
    };
    if map.len() > STORE_KEYS_MAX {
        return Err(bad(name, format!("holds {} keys, limit is {STORE_KEYS_MAX}", map.len())));
    }
    let style = detect_style(text);
    let mut events = Vec::with_capacity(map.len() + 1);
    for (key, value) in &map {
        let (scope, event) = import_key(name, key, value)?;
        events.push((scope, Body::Signals(event)));
    }
    let rendered = render_store(&map, style)?;
    events.push((
        STORE_SCOPE.to_owned(),
        Body::Signals(SignalsEvent::StoreStyleSet {
            pretty: style.pretty,
            trailing_newline: style.trailing_newline,
        }),
    ));
    Ok(ParsedStore { events, rendered })
}

impl Signals<'_> {
    /// Imports a loopd plugin-store file `DIR/NAME` as events, in one transaction. Refused when
    /// the store already holds an imported plugin store.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a malformed file; unsafe paths; store errors.
    pub fn import(&self, call: &Call, dir: &Path, name: &str) -> Result<Outcome> {
        let root = Root::open(dir, false)?;
        let bytes = root
            .read(name, STORE_FILE_BYTES_MAX)?
            .ok_or_else(|| Error::NoStore { path: dir.join(name) })?;
        let ParsedStore { events, rendered } = parse_store(name, &bytes)?;
        let round_trip = rendered.as_bytes() == bytes.as_slice();
        let keys = events.len() - 1;
        self.k.write(call, |txn| {
            if read_doc::<StoreStyle>(txn, STORE_SCOPE, STYLE_KIND, STYLE_ID)?.is_some() {
                let message = "this store already holds an imported loopd plugin store".into();
                return Ok(Plan::refuse("already_imported", message, Value::Null));
            }
            let result =
                fields(json!({ "layout": "loopd", "keys": keys, "round_trip": round_trip }));
            Ok(Plan { scoped_events: events.clone(), result, ..Plan::default() })
        })
    }

    /// Writes the plugin-store file `DIR/NAME` from the views (created 0700/0600 if absent).
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn export(&self, dir: &Path, name: &str) -> Result<u64> {
        let txn = self.k.begin_read()?;
        let (text, keys) = render_current(&*txn)?;
        Root::open(dir, true)?.write(name, text.as_bytes())?;
        Ok(keys)
    }
}

/// loopd's plugin-store file as a mirrored layout: one file, `NAME` in the mirror directory,
/// merged key by key. A key changed only outside is adopted, except a PM registration or a turn
/// signal older than the store's (a stale rewrite never reverts a newer one: newest wins, as the
/// domain's rule says); a key the file dropped is kept; a foreign key changed on both sides is
/// a conflict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoopdLayout {
    /// The plugin store's file name.
    pub(crate) file: String,
}

impl Layout for LoopdLayout {
    fn name(&self) -> &'static str {
        "loopd"
    }

    fn files(&self, _: &dyn ReadTxn, _: &Call, _: &Root) -> Result<Vec<RelPath>> {
        Ok(vec![RelPath::new(&[&self.file])?])
    }

    fn max_bytes(&self, _: &RelPath) -> usize {
        STORE_FILE_BYTES_MAX
    }

    fn render(&self, txn: &dyn ReadTxn, _: &Call, _: &RelPath) -> Result<Option<Vec<u8>>> {
        let entries = store_entries(txn)?;
        let style = read_doc::<StoreStyle>(txn, STORE_SCOPE, STYLE_KIND, STYLE_ID)?;
        if entries.is_empty() && style.is_none() {
            return Ok(None);
        }
        Ok(Some(render_current(txn)?.0.into_bytes()))
    }

    fn adopt(&self, txn: &dyn ReadTxn, _: &Call, changes: &[Change]) -> Result<Adoption> {
        let mut adoption = Adoption::default();
        for change in changes {
            let name = change.path.display();
            let file = parse_map(&name, &change.now)?;
            let base = change.base.as_deref().and_then(|b| parse_map(&name, b).ok());
            let store: Map<String, Value> =
                store_entries(txn)?.into_iter().map(|e| (e.key, e.value)).collect();
            if store.is_empty()
                && read_doc::<StoreStyle>(txn, STORE_SCOPE, STYLE_KIND, STYLE_ID)?.is_none()
            {
                // Nothing imported yet: the file is adopted whole, as an import would.
                adoption.events.extend(parse_store(&name, &change.now)?.events);
                continue;
            }
            for (key, value) in &file {
                let record = (base.as_ref().and_then(|b| b.get(key)), store.get(key));
                let why = match merge(record.0, Some(value), record.1) {
                    Merge::Same | Merge::Dropped(_) => continue,
                    Merge::Outside(_) if newer_or_foreign(key, value, record.1) => None,
                    Merge::Both { .. }
                        if newer_or_foreign(key, value, record.1) && !is_foreign(key) =>
                    {
                        None
                    }
                    Merge::Outside(_) => Some("older than the store's record: a stale rewrite"),
                    Merge::Both { .. } => Some("changed in the file and in the store"),
                };
                match why {
                    None => {
                        let (scope, event) = import_key(&name, key, value)?;
                        adoption.events.push((scope, Body::Signals(event)));
                    }
                    Some(why) => adoption.conflicts.push(Conflict {
                        file: name.clone(),
                        record: key.clone(),
                        why: why.into(),
                    }),
                }
            }
        }
        Ok(adoption)
    }
}

fn parse_map(name: &str, bytes: &[u8]) -> Result<Map<String, Value>> {
    let text = std::str::from_utf8(bytes).map_err(|_| bad(name, "is not UTF-8".into()))?;
    serde_json::from_str(text).map_err(|e| bad(name, format!("is not a JSON object: {e}")))
}

/// A key loopd does not own (kept as written).
fn is_foreign(key: &str) -> bool {
    !key.starts_with(PM_PREFIX) && !key.starts_with(SIGNAL_PREFIX)
}

/// Whether the file's value of `key` may replace the store's: a foreign key always; a PM
/// registration or a turn signal only when it is not older than the store's (`at` stamps).
fn newer_or_foreign(key: &str, file: &Value, store: Option<&Value>) -> bool {
    if is_foreign(key) {
        return true;
    }
    let at = |v: &Value| v.get("at").and_then(Value::as_str).and_then(parse_stamp);
    match (store.and_then(at), at(file)) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(stored), Some(theirs)) => theirs >= stored,
    }
}

/// One key of the plugin store as the views hold it.
struct StoreEntry {
    first_seq: u64,
    key: String,
    value: Value,
}

/// Every key of the plugin store, in first-written order.
fn store_entries(txn: &dyn crate::kernel::storage::ReadTxn) -> Result<Vec<StoreEntry>> {
    let mut entries = Vec::new();
    for (_, _, pm) in read_docs_all_scopes::<PmDoc>(txn, PM_KIND)? {
        let value = PmValue { session_id: pm.current.session, at: pm.current.at };
        let key = format!("{PM_PREFIX}{}", pm.bundle);
        let first_seq = pm.first_seq;
        entries.push(StoreEntry { first_seq, key, value: to_value(&value)? });
    }
    for (_, session, s) in read_docs_all_scopes::<SignalDoc>(txn, SIGNAL_KIND)? {
        let first_seq = s.first_seq;
        let value = SignalValue {
            bundle: s.bundle,
            cwd: s.cwd,
            at: s.at,
            turns: s.turns,
            duration_ms: s.duration_ms,
            reason: s.reason,
            is_aborted: s.aborted,
            delivered: s.delivered,
        };
        let key = format!("{SIGNAL_PREFIX}{session}");
        entries.push(StoreEntry { first_seq, key, value: to_value(&value)? });
    }
    for (_, key, kept) in read_docs_all_scopes::<KeptKeyDoc>(txn, KEPT_KIND)? {
        let value = serde_json::from_str(&kept.json)
            .map_err(|e| Error::Corrupt(format!("kept key {key}: {e}")))?;
        entries.push(StoreEntry { first_seq: kept.first_seq, key, value });
    }
    entries.sort_by_key(|e| e.first_seq);
    Ok(entries)
}

/// The plugin-store file the views stand for, and its key count.
fn render_current(txn: &dyn crate::kernel::storage::ReadTxn) -> Result<(String, u64)> {
    let entries = store_entries(txn)?;
    let style = read_doc::<StoreStyle>(txn, STORE_SCOPE, STYLE_KIND, STYLE_ID)?.unwrap_or_default();
    let map: Map<String, Value> = entries.into_iter().map(|e| (e.key, e.value)).collect();
    let keys = map.len() as u64;
    Ok((render_store(&map, style)?, keys))
}

fn to_value<T: Serialize>(value: &T) -> Result<Value> {
    serde_json::to_value(value)
        .map_err(|e| Error::Corrupt(format!("value does not serialise: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_join_folds_dots_without_touching_the_disk() {
        let base = Path::new("/w/_wt/task");
        assert_eq!(
            lexical_join(base, "../../repo/.git/worktrees/task"),
            PathBuf::from("/w/repo/.git/worktrees/task")
        );
        assert_eq!(lexical_join(base, "/abs/./x/../y"), PathBuf::from("/abs/y"));
        assert_eq!(lexical_join(base, "./a"), PathBuf::from("/w/_wt/task/a"));
    }

    #[test]
    fn style_detection_and_rendering_round_trip() {
        let mut map = Map::new();
        map.insert("b".into(), json!({ "z": 1, "a": [1, 2] }));
        map.insert("a".into(), json!(null));
        for style in [
            StoreStyle { pretty: false, trailing_newline: false },
            StoreStyle { pretty: true, trailing_newline: true },
        ] {
            let text = render_store(&map, style).unwrap();
            assert_eq!(detect_style(&text), style);
            let back: Map<String, Value> = serde_json::from_str(&text).unwrap();
            assert_eq!(render_store(&back, style).unwrap(), text, "key order is kept");
        }
    }
}
