//! claude-code-hermit's `state/alert-state.json` (layout `hermit-alerts`): read (a corrupt file
//! is quarantined as `alert-state.json.corrupt-<ms>` inside the state directory, as upstream's
//! tri-state reader does, never read as empty), imported as an event, written back as
//! `JSON.stringify(state, null, 2) + "\n"` with every key in its order, mode 0600, and mirrored
//! (`AlertsLayout`: merged field by field, alerts per key).
//!
//! Does not run the ladder; `ladder.rs` does.

use std::path::Path;

use hookstate_schema::alerts::{AlertStateDoc, AlertsEvent};
use hookstate_schema::Body;
use serde_json::{json, Map, Value};

use super::api::{read_state, Alerts, ALERT_STATE_FILE_BYTES_MAX};
use super::config::STATE_DIR;
use super::ladder::{parse_alert_state, render_alert_state, seed, STATE_ID, STATE_KIND};
use super::merge::{merge_object_from, Fields};
use crate::kernel::call::{fields, Call, Conflict, Outcome, Plan, Refusal};
use crate::kernel::doc::read_doc;
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::legacy::mirror::{Adoption, Change, Layout, RelPath};
use crate::legacy::root::Root;

/// The alert-state file's name under `state/`.
pub const ALERT_STATE_FILE: &str = "alert-state.json";
const QUARANTINE_SUFFIX: &str = ".corrupt-";
/// How the alert state's fields merge: alerts and self-evaluation entries per key, the tick
/// count as a counter.
const STATE_FIELDS: Fields = Fields { maps: &["alerts", "self_eval"], counters: &["total_ticks"] };

/// Upstream's stderr line when the state directory's `state/alert-state.json` is a directory:
/// its reader fails with `EISDIR` and the tick is skipped (exit 0, nothing printed or written),
/// so a transient read error never replaces a healthy file. `None` for anything else (a missing
/// file, a regular one, or a problem the mirror reports itself). Reads metadata only.
#[must_use]
pub fn alert_state_read_failure(dir: &Path) -> Option<String> {
    let path = dir.join("state").join(ALERT_STATE_FILE);
    let is_dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    is_dir.then(|| "update-alert-state: read failed (EISDIR); skipping write".to_owned())
}

/// What the state directory's alert-state file held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertFile {
    /// No file.
    Missing,
    /// A JSON object: its compact text in key order, and whether rendering it gives the file's
    /// bytes back.
    Found {
        /// The object as compact JSON text.
        state: String,
        /// Export reproduces the file byte for byte.
        round_trip: bool,
    },
    /// The file was corrupt and has been renamed aside.
    Quarantined {
        /// The quarantine file's name under `state/`.
        to: String,
        /// Why it was corrupt.
        why: String,
    },
}

/// Reads the alert-state file of the opened `state/` directory; a corrupt file is renamed to
/// `alert-state.json.corrupt-<now_ms>` first.
pub(crate) fn read_alert_file(state: &Root, now_ms: u64) -> Result<AlertFile> {
    let Some(bytes) = state.read(ALERT_STATE_FILE, ALERT_STATE_FILE_BYTES_MAX)? else {
        return Ok(AlertFile::Missing);
    };
    match parse_alert_state(&bytes) {
        Ok(map) => {
            let round_trip = render_alert_state(&map)?.as_bytes() == bytes.as_slice();
            Ok(AlertFile::Found { state: Value::Object(map).to_string(), round_trip })
        }
        Err(why) => {
            let to = format!("{ALERT_STATE_FILE}{QUARANTINE_SUFFIX}{now_ms}");
            state.rename_new(ALERT_STATE_FILE, &to)?;
            Ok(AlertFile::Quarantined { to, why })
        }
    }
}

/// Reads `DIR/state/alert-state.json` for an import, quarantining a corrupt file.
///
/// # Errors
/// Unsafe or missing paths; a file over `ALERT_STATE_FILE_BYTES_MAX`; IO errors.
pub fn read_hermit_alerts(dir: &Path, now_ms: u64) -> Result<AlertFile> {
    let state = Root::open(dir, false)?
        .subdir(STATE_DIR, false)?
        .ok_or_else(|| Error::NoStore { path: dir.join(STATE_DIR) })?;
    read_alert_file(&state, now_ms)
}

impl Alerts<'_> {
    /// Imports an alert-state object into the call's scope. Refused (a value) when the scope
    /// already holds one.
    ///
    /// # Errors
    /// [`Error::EventTooLarge`] when the state is over the event limit; store errors.
    pub fn import_alerts(&self, call: &Call, state: &str, round_trip: bool) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        let event = Body::Alerts(AlertsEvent::StateImported { state: state.to_owned() });
        let result = fields(json!({ "layout": "hermit-alerts", "round_trip": round_trip }));
        self.k.write(call, |txn| {
            let held = read_doc::<AlertStateDoc>(txn, &call.scope, STATE_KIND, STATE_ID)?;
            if held.is_some() {
                let message = "this scope already holds an alert state".to_owned();
                let refusal = Refusal::new("already_imported", message, Value::Null);
                return Ok(Plan { refusal: Some(refusal), ..Plan::default() });
            }
            Ok(Plan { events: vec![event.clone()], result: result.clone(), ..Plan::default() })
        })
    }

    /// Writes `DIR/state/alert-state.json` for `scope`, 0600, through the safe writer. When the
    /// scope holds no alert state, an existing file is left as it is (`"left": true`: it belongs
    /// to upstream's writers until it is imported), and only a missing one gets the seed template.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn export_alerts(&self, scope: &str, dir: &Path) -> Result<Map<String, Value>> {
        hookstate_schema::validate_scope(scope)?;
        let held = read_state(&*self.k.begin_read()?, scope)?;
        let root = Root::open(dir, true)?
            .subdir(STATE_DIR, true)?
            .ok_or_else(|| Error::NoStore { path: dir.join(STATE_DIR) })?;
        let left = held.is_none() && root.list()?.iter().any(|f| f == ALERT_STATE_FILE);
        let state = held.unwrap_or_else(seed);
        if !left {
            root.write(ALERT_STATE_FILE, render_alert_state(&state)?.as_bytes())?;
        }
        let alerts = state.get("alerts").and_then(Value::as_object).map_or(0, Map::len);
        let total_ticks = state.get("total_ticks");
        Ok(fields(json!({ "alerts": alerts, "total_ticks": total_ticks, "left": left })))
    }
}

/// `state/alert-state.json` as a mirrored layout: a changed file is merged field by field (alerts
/// and self-evaluation entries per key, the tick count as a counter); a corrupt one is
/// quarantined and written again from the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AlertsLayout;

impl Layout for AlertsLayout {
    fn name(&self) -> &'static str {
        "hermit-alerts"
    }

    fn files(&self, _: &dyn ReadTxn, _: &Call, _: &Root) -> Result<Vec<RelPath>> {
        Ok(vec![RelPath::new(&[STATE_DIR, ALERT_STATE_FILE])?])
    }

    fn max_bytes(&self, _: &RelPath) -> usize {
        ALERT_STATE_FILE_BYTES_MAX
    }

    /// `total_ticks` is a count precheck adds to without a lock.
    fn stamped(&self, _: &RelPath) -> bool {
        true
    }

    fn render(&self, txn: &dyn ReadTxn, call: &Call, _: &RelPath) -> Result<Option<Vec<u8>>> {
        let state = read_state(txn, &call.scope)?;
        Ok(state.map(|s| render_alert_state(&s)).transpose()?.map(String::into_bytes))
    }

    fn adopt(&self, txn: &dyn ReadTxn, call: &Call, changes: &[Change]) -> Result<Adoption> {
        let mut adoption = Adoption::default();
        for change in changes {
            let Ok(file) = parse_alert_state(&change.now) else {
                adoption.quarantine.push(change.path.clone());
                continue;
            };
            // A baseline that does not parse (torn by a power cut) is read as never seen.
            let base = change.base.as_deref().and_then(|b| parse_alert_state(b).ok());
            // Other bytes of the very state the mirror last wrote: a reformat (an editor, another
            // JSON library), not a counting writer, which writes upstream's layout and so the
            // mirror's own bytes when its tick lands on an older version.
            if base.as_ref() == Some(&file) && change.base.as_deref() != Some(&change.now[..]) {
                continue;
            }
            let history: Vec<_> =
                change.history.iter().filter_map(|b| parse_alert_state(b).ok()).collect();
            let merged = match read_state(txn, &call.scope)? {
                // Nothing in the store yet: the file is adopted whole, as an import would.
                None => file,
                Some(store) => {
                    let (merged, conflicts) =
                        merge_object_from(base.as_ref(), &history, &file, &store, STATE_FIELDS);
                    adoption.conflicts.extend(conflicts.into_iter().map(|record| {
                        Conflict {
                        file: change.path.display(),
                        record,
                        why: "changed in the file and in the store since the mirror last wrote it"
                            .into(),
                    }
                    }));
                    if merged == store {
                        continue;
                    }
                    merged
                }
            };
            let state = Value::Object(merged).to_string();
            let event = Body::Alerts(AlertsEvent::StateImported { state });
            adoption.events.push((call.scope.clone(), event));
        }
        Ok(adoption)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_alert_states_are_refused_never_empty() {
        for bad in [&b"{\"alerts\": {"[..], b"[]", b"null", b"3", b"\xff", b""] {
            assert!(parse_alert_state(bad).is_err(), "{bad:?}");
        }
        let map = parse_alert_state(b"{\"z\":1,\"alerts\":{},\"a\":null}").unwrap();
        assert_eq!(
            render_alert_state(&map).unwrap(),
            "{\n  \"z\": 1,\n  \"alerts\": {},\n  \"a\": null\n}\n"
        );
    }

    #[test]
    fn numbers_are_written_as_json_stringify_writes_them() {
        // A hand-edited or foreign file: node's JSON.stringify(JSON.parse(text), null, 2).
        let map = parse_alert_state(br#"{"total_ticks":40.0,"a":-0,"b":1e21,"c":1e17}"#).unwrap();
        assert_eq!(
            render_alert_state(&map).unwrap(),
            "{\n  \"total_ticks\": 40,\n  \"a\": 0,\n  \"b\": 1e+21,\n  \"c\": \
             100000000000000000\n}\n"
        );
    }

    #[test]
    fn a_corrupt_file_is_renamed_aside_and_an_earlier_quarantine_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path(), false).unwrap();
        root.write(ALERT_STATE_FILE, b"{oops").unwrap();
        let got = read_alert_file(&root, 7).unwrap();
        assert!(
            matches!(&got, AlertFile::Quarantined { to, .. } if to == "alert-state.json.corrupt-7")
        );
        assert_eq!(root.read("alert-state.json.corrupt-7", 64).unwrap().unwrap(), b"{oops");
        assert_eq!(read_alert_file(&root, 7).unwrap(), AlertFile::Missing);
        root.write(ALERT_STATE_FILE, b"[]").unwrap();
        assert!(read_alert_file(&root, 7).is_err(), "an existing quarantine is never replaced");
        assert_eq!(root.read("alert-state.json.corrupt-7", 64).unwrap().unwrap(), b"{oops");
    }
}
