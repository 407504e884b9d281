//! Every legacy file parser behind one entry point, over bytes already read: what an import
//! runs on each file after `legacy::root::Root` has read it, with nothing opened or written.
//!
//! For the fuzz target `legacy_import` and its corpus replay: [`parse_legacy`] runs the very
//! parser the import runs, and returns what an export would write back, so a caller can check
//! that what is written back is read back the same. Does not read directories or files.

use hookstate_schema::feedback::FileKind;

use crate::alerts::heartbeat_rules as rules;
use crate::alerts::ladder::{parse_alert_state, render_alert_state};
use crate::alerts::layout_alerts::ALERT_STATE_FILE;
use crate::feedback::layout as moonshine;
use crate::kernel::error::{Error, Result};
use crate::observer::layout as observer;
use crate::proposals::api::parse_config_timezone;
use crate::proposals::layout as hermit;
use crate::proposals::props::{check_prop_file, prop_doc};
use crate::signals::layout as loopd;

/// The name the PROP-file parser is given: the import checks names apart, before reading.
const PROP_FILE_NAME: &str = "PROP-001-fuzz.md";

/// One kind of legacy file an import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegacyFile {
    /// loopd's plugin store (`loopd.json`).
    LoopdStore,
    /// The observer's state (`claude-management.json`).
    ObserverState,
    /// A moonshine comment (`.feedback/<id>.json`).
    MoonshineComment,
    /// A moonshine `control.json`, `address.json`, `heartbeat.json` or `adapter.json`.
    MoonshineFile(FileKind),
    /// hermit's `state/micro-proposals.json`.
    HermitQueue,
    /// hermit's `state/proposal-metrics.jsonl`.
    HermitLedger,
    /// hermit's `state/proposals-index.json` (with no PROP files beside it).
    HermitIndex,
    /// A hermit `proposals/PROP-*.md` (its frontmatter).
    PropFile,
    /// hermit's `config.json` (its `timezone`).
    HermitConfig,
    /// hermit's `state/alert-state.json`.
    HermitAlertState,
    /// One of hermit's heartbeat JSON files (`budget-alerts.json`, `runtime.json`, …): kept as
    /// its exact text; a verb that changes it re-renders it in the layout it found.
    HeartbeatFile,
}

impl LegacyFile {
    /// Every kind, in a fixed order (the fuzz target picks one by its first byte).
    pub const ALL: [LegacyFile; 14] = [
        LegacyFile::LoopdStore,
        LegacyFile::ObserverState,
        LegacyFile::MoonshineComment,
        LegacyFile::MoonshineFile(FileKind::Control),
        LegacyFile::MoonshineFile(FileKind::Address),
        LegacyFile::MoonshineFile(FileKind::Heartbeat),
        LegacyFile::MoonshineFile(FileKind::Adapter),
        LegacyFile::HermitQueue,
        LegacyFile::HermitLedger,
        LegacyFile::HermitIndex,
        LegacyFile::PropFile,
        LegacyFile::HermitConfig,
        LegacyFile::HermitAlertState,
        LegacyFile::HeartbeatFile,
    ];
}

/// What a legacy file parsed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyParse {
    /// Records the import turns the file into (keys, entries, lines, 1 for a single document).
    pub records: usize,
    /// The bytes an export writes back for what was parsed, where the layout has an export;
    /// `None` for files only read (the index, a PROP file's frontmatter, `config.json`).
    pub written_back: Option<Vec<u8>>,
}

/// Parses `bytes` as a legacy file of `kind`, exactly as an import does.
///
/// # Errors
/// [`Error::Invalid`] for a file the import refuses; [`Error::Corrupt`] where a parsed file does
/// not render.
pub fn parse_legacy(kind: LegacyFile, bytes: &[u8]) -> Result<LegacyParse> {
    let one = |written_back: Option<Vec<u8>>| LegacyParse { records: 1, written_back };
    match kind {
        LegacyFile::LoopdStore => {
            let parsed = loopd::parse_store(loopd::STORE_FILE_DEFAULT, bytes)?;
            let records = parsed.events.len();
            Ok(LegacyParse { records, written_back: Some(parsed.rendered.into_bytes()) })
        }
        LegacyFile::ObserverState => {
            let (state, style, _) = observer::parse_state(observer::STATE_FILE_DEFAULT, bytes)?;
            Ok(one(Some(observer::render(&state, style)?.into_bytes())))
        }
        LegacyFile::MoonshineComment => Ok(one(Some(moonshine::parse_comment_file(bytes)?))),
        LegacyFile::MoonshineFile(file) => Ok(one(Some(moonshine::parse_other_file(file, bytes)?))),
        LegacyFile::HermitQueue => {
            let queue = hermit::parse_queue(bytes)?;
            let records = queue.entries.len();
            Ok(LegacyParse {
                records,
                written_back: Some(hermit::render_queue(&queue)?.into_bytes()),
            })
        }
        LegacyFile::HermitLedger => {
            let lines = hermit::parse_ledger(bytes)?;
            let written_back = Some(hermit::render_ledger(&lines).into_bytes());
            Ok(LegacyParse { records: lines.len(), written_back })
        }
        LegacyFile::HermitIndex => hermit::parse_index(bytes, &[]).map(|_| one(None)),
        LegacyFile::PropFile => {
            check_prop_file(PROP_FILE_NAME)?;
            let text = std::str::from_utf8(bytes)
                .map_err(|_| Error::legacy(PROP_FILE_NAME, "is not UTF-8"))?;
            prop_doc(PROP_FILE_NAME, text);
            Ok(one(None))
        }
        LegacyFile::HermitConfig => parse_config_timezone(bytes).map(|_| one(None)),
        LegacyFile::HermitAlertState => {
            let state =
                parse_alert_state(bytes).map_err(|why| Error::legacy(ALERT_STATE_FILE, why))?;
            Ok(one(Some(render_alert_state(&state)?.into_bytes())))
        }
        LegacyFile::HeartbeatFile => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| Error::legacy("the heartbeat file", "is not UTF-8"))?;
            let map = rules::parse_object("the heartbeat file", text)?;
            Ok(one(Some(rules::render_object(&map, rules::layout_of(text)).into_bytes())))
        }
    }
}
