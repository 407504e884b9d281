//! The observer's legacy surface: the claude-management `$.state` keys as one JSON object
//! (`buffer`, `turn`, `turnsSinceSweep`, `userFollowUps`, `delivered`, `inboxOffset`,
//! `pending`), imported as one event and exported in the imported file's style.
//!
//! Does not merge an import into existing state: an import replaces the scope's state.

use std::path::Path;

use hookstate_schema::observer::ObserverState;
use hookstate_schema::signals::StoreStyle;
use serde_json::{Map, Value};

use super::Observer;
use crate::kernel::call::Call;
use crate::kernel::call::Outcome;
use crate::kernel::error::{Error, Result};
use crate::legacy::json::{detect_style, render_styled};
use crate::legacy::mirror::{
    changed_outside, read_sidecar, still_holds, write_mirror, write_sidecar, MirrorReport,
};
use crate::legacy::root::Root;

/// The largest observer state file: 60 clipped rows, 1000 keys and a pending text fit easily.
pub const STATE_FILE_BYTES_MAX: usize = 1024 * 1024;
/// Default name of the exported observer state file.
pub const STATE_FILE_DEFAULT: &str = "claude-management.json";
/// The style of an export whose state was never imported: 2-space JSON with a final newline.
const DEFAULT_STYLE: StoreStyle = StoreStyle { pretty: true, trailing_newline: true };

pub(crate) fn render(state: &ObserverState, style: StoreStyle) -> Result<String> {
    render_styled(state, style)
}

/// Parses an observer state file: the state, the style it was written in, and whether an
/// export in that style writes back the very same bytes.
pub(crate) fn parse_state(name: &str, bytes: &[u8]) -> Result<(ObserverState, StoreStyle, bool)> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| Error::invalid(format!("observer state {name} is not UTF-8")))?;
    let state: ObserverState = serde_json::from_str(text)
        .map_err(|e| Error::invalid(format!("observer state {name}: {e}")))?;
    let style = detect_style(text);
    let round_trip = render(&state, style)?.as_bytes() == bytes;
    Ok((state, style, round_trip))
}

impl Observer<'_> {
    /// Imports the observer state file `DIR/NAME` into the call's scope, replacing its state.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a malformed file (unknown keys, wrong types); unsafe paths; store
    /// errors.
    pub fn import(&self, call: &Call, dir: &Path, name: &str) -> Result<Outcome> {
        let root = Root::open(dir, false)?;
        let bytes = root
            .read(name, STATE_FILE_BYTES_MAX)?
            .ok_or_else(|| Error::NoStore { path: dir.join(name) })?;
        let (state, style, round_trip) = parse_state(name, &bytes)?;
        let mut outcome = self.import_state(call, state, style)?;
        outcome.result.insert("layout".into(), Value::from("observer"));
        outcome.result.insert("round_trip".into(), Value::Bool(round_trip));
        Ok(outcome)
    }

    /// Keeps `DIR/NAME` a mirror of the call scope's observer state: adopts a state another
    /// writer put in the file since the mirror last wrote it (refused when the store changed the
    /// state since then), then rewrites the file if the store moved on.
    ///
    /// # Errors
    /// [`Error::MirrorConflict`], [`Error::Busy`], [`Error::Invalid`] for a malformed file; IO
    /// and store errors.
    pub fn mirror(&self, call: &Call, dir: &Path, name: &str) -> Result<MirrorReport> {
        self.mirror_during(call, dir, name, &|| {})
    }

    /// [`Engine::mirror_observer`], running `during` between the adoption and the write (where a
    /// lock-less writer may write the file); the file is written only if it still holds the bytes
    /// read at the start ([`still_holds`]).
    fn mirror_during(
        &self,
        call: &Call,
        dir: &Path,
        name: &str,
        during: &dyn Fn(),
    ) -> Result<MirrorReport> {
        let root = Root::open(dir, true)?;
        let _lock = root.lock(self.k.wait())?;
        let sidecar = read_sidecar(&root, name)?;
        let file = root.read(name, STATE_FILE_BYTES_MAX)?;
        let mut report = MirrorReport::default();
        let doc = self.doc(&call.scope)?;
        // The state of a file changed outside, once the store holds it (adopted or equal).
        let mut known = None;
        if let Some(bytes) = file.as_deref().filter(|b| changed_outside(Some(b), sidecar.as_ref()))
        {
            let path = root.path().join(name);
            let text = std::str::from_utf8(bytes).map_err(|_| {
                Error::invalid(format!("observer state {} is not UTF-8", path.display()))
            })?;
            let state: ObserverState = serde_json::from_str(text)
                .map_err(|e| Error::invalid(format!("observer state {}: {e}", path.display())))?;
            if state != doc.state {
                if doc.updated_seq > sidecar.as_ref().map_or(0, |s| s.head_seq) {
                    return Err(Error::MirrorConflict { path, key: "state".into() });
                }
                // Never the caller's idempotency key: it names the verb's own write.
                let adopt = crate::legacy::mirror::adopt_call(call);
                self.import_state(&adopt, state.clone(), detect_style(text))?;
                report.adopted = 1;
            }
            known = Some(state);
        }
        let doc = self.doc(&call.scope)?;
        let stale = sidecar.as_ref().is_none_or(|s| s.head_seq < doc.updated_seq);
        if stale || report.adopted > 0 || file.is_none() {
            let text = render(&doc.state, doc.style.unwrap_or(DEFAULT_STYLE))?;
            during();
            if still_holds(&root, name, file.as_deref(), STATE_FILE_BYTES_MAX) {
                write_mirror(&root, name, text.as_bytes(), doc.updated_seq)?;
                report.written = true;
            } else if let (Some(bytes), true) = (&file, known.as_ref() == Some(&doc.state)) {
                // Kept: the sidecar records the bytes the store now holds, so the next call
                // adopts the other writer's state instead of calling it a conflict with the
                // adoption above.
                write_sidecar(&root, name, bytes, doc.updated_seq)?;
            }
        }
        Ok(report)
    }

    /// Writes the observer state of `scope` to `DIR/NAME`.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn export(&self, scope: &str, dir: &Path, name: &str) -> Result<Map<String, Value>> {
        let doc = self.doc(scope)?;
        let text = render(&doc.state, doc.style.unwrap_or(DEFAULT_STYLE))?;
        Root::open(dir, true)?.write(name, text.as_bytes())?;
        let mut out = Map::new();
        out.insert("bytes".into(), Value::from(text.len()));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, OpenOptions};

    /// A state file a lock-less writer (an old hook) writes between the mirror's adoption and
    /// its write is kept as written, never overwritten, and adopted by the next sync.
    #[test]
    fn a_mirror_never_overwrites_a_state_written_after_its_adoption() {
        let tmp = tempfile::tempdir().unwrap();
        let engine = Engine::open(&tmp.path().join("s.redb"), OpenOptions::default()).unwrap();
        let call = Call {
            scope: "observer:s".into(),
            actor: hookstate_schema::Actor::default(),
            idem_key: None,
            now_ms: 1,
        };
        let dir = tmp.path().join("m");
        let path = dir.join(STATE_FILE_DEFAULT);
        let sync = |during: &dyn Fn()| {
            engine.observer().mirror_during(&call, &dir, STATE_FILE_DEFAULT, during).unwrap()
        };
        sync(&|| {});
        let with_pending = |pending: &str| {
            let mut state: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            state["pending"] = Value::String(pending.into());
            serde_json::to_string_pretty(&state).unwrap() + "\n"
        };
        std::fs::write(&path, with_pending("first")).unwrap();
        let theirs = with_pending("second");
        let report = sync(&|| std::fs::write(&path, &theirs).unwrap());
        assert_eq!((report.adopted, report.written), (1, false));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), theirs, "the outside write survives");
        let report = sync(&|| {});
        assert_eq!(report.adopted, 1, "adopted by the next sync");
        assert_eq!(
            engine.observer().doc("observer:s").unwrap().state.pending.as_deref(),
            Some("second")
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), theirs);
        engine.verify().unwrap();
    }
}
