//! The observer's legacy surface: the claude-management `$.state` keys as one JSON object
//! (`buffer`, `turn`, `turnsSinceSweep`, `userFollowUps`, `delivered`, `inboxOffset`,
//! `pending`), imported as one event and exported in the imported file's style.
//!
//! Does not merge an import into existing state: an import replaces the scope's state.

use std::path::Path;

use hookstate_schema::observer::ObserverState;
use hookstate_schema::signals::StoreStyle;
use serde_json::{Map, Value};

use crate::engine::{Call, Engine, Outcome};
use crate::error::{Error, Result};
use crate::legacy::loopd::detect_style;
use crate::legacy::root::Root;

/// The largest observer state file: 60 clipped rows, 1000 keys and a pending text fit easily.
pub const STATE_FILE_BYTES_MAX: usize = 1024 * 1024;
/// Default name of the exported observer state file.
pub const STATE_FILE_DEFAULT: &str = "claude-management.json";
/// The style of an export whose state was never imported: 2-space JSON with a final newline.
const DEFAULT_STYLE: StoreStyle = StoreStyle { pretty: true, trailing_newline: true };

fn render(state: &ObserverState, style: StoreStyle) -> Result<String> {
    let text = if style.pretty {
        serde_json::to_string_pretty(state)
    } else {
        serde_json::to_string(state)
    }
    .map_err(|e| Error::invalid(format!("observer state does not serialise: {e}")))?;
    Ok(if style.trailing_newline { text + "\n" } else { text })
}

impl Engine {
    /// Imports the observer state file `DIR/NAME` into the call's scope, replacing its state.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a malformed file (unknown keys, wrong types); unsafe paths; store
    /// errors.
    pub fn import_observer(&self, call: &Call, dir: &Path, name: &str) -> Result<Outcome> {
        let root = Root::open(dir, false)?;
        let bytes = root
            .read(name, STATE_FILE_BYTES_MAX)?
            .ok_or_else(|| Error::NoStore { path: dir.join(name) })?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| Error::invalid(format!("observer state {name} is not UTF-8")))?;
        let state: ObserverState = serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("observer state {name}: {e}")))?;
        let style = detect_style(text);
        let round_trip = render(&state, style)?.as_bytes() == bytes.as_slice();
        let mut outcome = self.observer_import(call, state, style)?;
        outcome.result.insert("layout".into(), Value::from("observer"));
        outcome.result.insert("round_trip".into(), Value::Bool(round_trip));
        Ok(outcome)
    }

    /// Writes the observer state of `scope` to `DIR/NAME`.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn export_observer(
        &self,
        scope: &str,
        dir: &Path,
        name: &str,
    ) -> Result<Map<String, Value>> {
        let doc = self.observer_doc(scope)?;
        let text = render(&doc.state, doc.style.unwrap_or(DEFAULT_STYLE))?;
        Root::open(dir, true)?.write(name, text.as_bytes())?;
        let mut out = Map::new();
        out.insert("bytes".into(), Value::from(text.len()));
        Ok(out)
    }
}
