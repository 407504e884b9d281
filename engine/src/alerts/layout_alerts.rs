//! claude-code-hermit's `state/alert-state.json`: read (a corrupt file is quarantined as
//! `alert-state.json.corrupt-<ms>` inside the state directory, as upstream's tri-state reader
//! does, never read as empty), imported as an event, and written back as
//! `JSON.stringify(state, null, 2) + "\n"` with every key in its order, mode 0600.
//!
//! The `--mirror` cycle of a state directory (`legacy::hermit`) adopts and rewrites this file
//! with the proposal files. Does not run the ladder; `alerts` does.

use std::path::Path;

use hookstate_schema::alerts::AlertsEvent;
use hookstate_schema::Body;
use serde_json::{json, Map, Value};

use super::ladder::{read_state, STATE_ID, STATE_KIND};
use super::Alerts;
use crate::kernel::call::fields;
use crate::kernel::call::Call;
use crate::kernel::call::Outcome;
use crate::kernel::call::Plan;
use crate::kernel::call::Refusal;
use crate::kernel::doc::read_doc;
use crate::kernel::error::{Error, Result};
use crate::legacy::root::Root;
use crate::proposals::layout::STATE_DIR;

/// The alert-state file's name under `state/`.
pub const ALERT_STATE_FILE: &str = "alert-state.json";
/// The alert state is carried whole by one event, so it is bounded like an event's value.
pub const ALERT_STATE_FILE_BYTES_MAX: usize = crate::kernel::limits::VALUE_BYTES_MAX;
const QUARANTINE_SUFFIX: &str = ".corrupt-";

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

/// Parses the file as upstream's reader does: anything but one JSON object is corrupt.
///
/// # Errors
/// Why the bytes are corrupt.
pub fn parse_alert_state(bytes: &[u8]) -> std::result::Result<Map<String, Value>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The file's bytes: `JSON.stringify(state, null, 2) + "\n"` (numbers as JavaScript prints them).
///
/// # Errors
/// [`Error::Corrupt`] if the value does not serialise (it always does).
pub fn render_alert_state(state: &Map<String, Value>) -> Result<String> {
    let text = crate::kernel::compat::js::pretty(&Value::Object(state.clone()));
    if text.is_empty() {
        return Err(Error::Corrupt("alert state does not serialise".into()));
    }
    Ok(text + "\n")
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
/// Unsafe or missing paths; a file over [`ALERT_STATE_FILE_BYTES_MAX`]; IO errors.
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
    /// [`Error::Invalid`] when the state is over the event limit; store errors.
    pub fn import_alerts(&self, call: &Call, state: &str, round_trip: bool) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        let event = Body::Alerts(AlertsEvent::StateImported { state: state.to_owned() });
        let result = fields(json!({ "layout": "hermit-alerts", "round_trip": round_trip }));
        self.k.write(call, |txn| {
            let held = read_doc::<hookstate_schema::alerts::AlertStateDoc>(
                txn,
                &call.scope,
                STATE_KIND,
                STATE_ID,
            )?;
            if held.is_some() {
                let refusal = Refusal {
                    reason: "already_imported",
                    message: "this scope already holds an alert state".into(),
                    details: Map::new(),
                };
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
        let state = held.unwrap_or_else(super::ladder::seed);
        if !left {
            root.write(ALERT_STATE_FILE, render_alert_state(&state)?.as_bytes())?;
        }
        let alerts = state.get("alerts").and_then(Value::as_object).map_or(0, Map::len);
        let total_ticks = state.get("total_ticks");
        Ok(fields(json!({ "alerts": alerts, "total_ticks": total_ticks, "left": left })))
    }
}

/// The alert-state file's text for a mirror, when the scope holds an alert state.
pub(crate) fn mirror_text(
    txn: &dyn crate::kernel::storage::ReadTxn,
    scope: &str,
) -> Result<Option<String>> {
    read_state(txn, scope)?.map(|state| render_alert_state(&state)).transpose()
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
