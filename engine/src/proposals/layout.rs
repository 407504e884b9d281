//! claude-code-hermit's proposal files: `state/micro-proposals.json` (2-space JSON with a final
//! newline, entries kept with their own key order) and `state/proposal-metrics.jsonl` (compact
//! lines, `ts` first), `state/proposals-index.json` and `proposals/PROP-*.md`, imported as events
//! and exported byte for byte; and `config.json`'s `timezone`, which dates MP and PROP ids.
//!
//! The ledger is rendered from the log: every queue or resolve event stands for its ledger line,
//! so the queue and the ledger can never disagree. Does not decide queue rules; `proposals` does.

use std::path::Path;

use hookstate_schema::alerts::AlertsEvent;
use hookstate_schema::format::decode_event;
use hookstate_schema::proposals::{ProposalsEvent, QueueDoc};
use hookstate_schema::Body;
use serde_json::{json, Map, Value};

use super::micro::{ledger_line, QUEUE_ENTRIES_MAX};
use super::props::{
    check_prop_file, prop_doc, prop_state, render_index, PROPS_MAX, PROP_FILE_BYTES_MAX,
};
use super::Proposals;
use crate::alerts::layout_alerts::{self as hermit_alerts, AlertFile};
use crate::kernel::call::fields;
use crate::kernel::call::Call;
use crate::kernel::call::Outcome;
use crate::kernel::call::Plan;
use crate::kernel::call::Refusal;
use crate::kernel::doc::read_doc;
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::view::read_head;
use crate::legacy::root::Root;
use hookstate_schema::proposals::{QUEUE_ID, QUEUE_KIND};

/// The hermit config file is a few routines and settings.
pub const CONFIG_FILE_BYTES_MAX: usize = 1024 * 1024;
/// The queue file: [`QUEUE_ENTRIES_MAX`] entries of a few KiB each.
pub const QUEUE_FILE_BYTES_MAX: usize = 8 * 1024 * 1024;
/// The ledger grows for the life of a hermit; beyond this, rotate it before importing.
pub const LEDGER_FILE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Ledger lines one import adopts.
pub const LEDGER_LINES_MAX: usize = 200_000;
/// The state subdirectory of a hermit state directory.
pub const STATE_DIR: &str = "state";
/// The queue file's name under `state/`.
pub const QUEUE_FILE: &str = "micro-proposals.json";
/// The ledger file's name under `state/`.
pub const LEDGER_FILE: &str = "proposal-metrics.jsonl";
/// The index file's name under `state/`.
pub const INDEX_FILE: &str = "proposals-index.json";
/// The PROP files' directory.
pub const PROPOSALS_DIR: &str = "proposals";
/// The index: a row of a few hundred bytes per proposal.
pub const INDEX_FILE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// What hookstate last wrote into a mirrored state directory (hashes and the ledger's length).
pub const MIRROR_STAMP: &str = ".hookstate-mirror.json";
/// The lock hookstate processes take while they adopt, mutate and mirror.
pub const MIRROR_LOCK: &str = ".hookstate-mirror.lock";
/// The stamp is one short JSON line.
pub(crate) const MIRROR_STAMP_BYTES_MAX: usize = 4096;
const CONFIG_FILE: &str = "config.json";

/// A mirrored call in progress: holds the mirror lock until [`Engine::mirror_end`] (or drop).
#[derive(Debug)]
pub struct Mirror {
    _lock: std::os::fd::OwnedFd,
    dir: std::path::PathBuf,
    /// The hash of `alert-state.json` once the call adopted it (`None`: no file), so the end of
    /// the call replaces only those bytes, never a file a lock-less writer wrote meanwhile.
    alerts_seen: Option<String>,
    /// The proposals files as the call saw them once adopted (`None`: unreadable before the
    /// first stamp, when the end writes every file as an export does).
    seen: Option<Seen>,
}

/// The proposals files of a mirrored call as it saw them once it adopted them, so the end of the
/// call replaces only those bytes: a file a lock-less writer (an unmigrated `proposal.ts`)
/// changed during the call is kept, and the next call adopts it. Each hash is `None` where there
/// was no file.
#[derive(Debug, Default)]
struct Seen {
    queue: Option<String>,
    /// The ledger's length and hash.
    ledger: Option<(usize, String)>,
    index: Option<String>,
    /// Each PROP file's hash.
    props: Map<String, Value>,
}

impl Seen {
    fn prop(&self, file: &str) -> Option<&str> {
        self.props.get(file).and_then(Value::as_str)
    }
}

/// The proposals files of a mirrored directory, read once: what is adopted is what is seen.
struct Files {
    queue: Option<Vec<u8>>,
    ledger: Option<Vec<u8>>,
    props: Vec<(String, String)>,
    index: Option<String>,
}

impl Files {
    fn read(state: &Root, dir: &Path) -> Result<Files> {
        Ok(Files {
            queue: state.read(QUEUE_FILE, QUEUE_FILE_BYTES_MAX)?,
            ledger: state.read(LEDGER_FILE, LEDGER_FILE_BYTES_MAX)?,
            props: read_props(dir)?,
            // Not adopted: an unreadable index is seen as none, and kept by the end.
            index: state.read(INDEX_FILE, INDEX_FILE_BYTES_MAX).ok().flatten().map(|b| digest(&b)),
        })
    }

    fn seen(self) -> Seen {
        Seen {
            queue: self.queue.map(|b| digest(&b)),
            ledger: self.ledger.map(|b| (b.len(), digest(&b))),
            index: self.index,
            props: self
                .props
                .iter()
                .map(|(f, t)| (f.clone(), json!(digest(t.as_bytes()))))
                .collect(),
        }
    }
}

/// Whether the end of a mirrored call may replace `name`: an export (`seen` is `None`), a file
/// that is gone, or one that still holds the bytes the call saw (`Some(None)`: there was none).
/// A file that cannot be read is kept. The compare runs just before the write's rename: a
/// lock-less writer that writes in between still loses its write, a window only that writer
/// taking the mirror lock closes.
fn untouched(root: &Root, name: &str, max: usize, seen: Option<Option<&str>>) -> bool {
    let Some(seen) = seen else {
        return true;
    };
    match root.read(name, max) {
        Ok(None) => true,
        Ok(Some(bytes)) => seen == Some(digest(&bytes).as_str()),
        Err(_) => false,
    }
}

impl Mirror {
    /// The mirrored state directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether `alert-state.json` under the opened `state/` directory is still what this call
    /// saw after its adoption (or gone), so the end of the call may write it.
    fn alerts_untouched(&self, state: &Root) -> Result<bool> {
        let max = hermit_alerts::ALERT_STATE_FILE_BYTES_MAX;
        let now = state.read(hermit_alerts::ALERT_STATE_FILE, max)?.map(|b| digest(&b));
        Ok(now.is_none() || now == self.alerts_seen)
    }
}

/// What an export wrote: its summary, the queue's hash, the ledger's length and hash, each PROP
/// file's hash; for a file a mirror kept, what the call saw instead, so the next call adopts it.
struct Written {
    summary: Map<String, Value>,
    queue_hash: String,
    ledger: (usize, String),
    prop_hashes: Map<String, Value>,
    /// The alert-state file, when the scope holds an alert state.
    alerts: Option<String>,
}

/// The events that adopt what was written into a mirrored directory since `stamp`: a changed
/// queue file, PROP files new or changed, ledger lines appended after the stamped length.
fn foreign_changes(files: &Files, stamp: &Value) -> Result<(Vec<Body>, Map<String, Value>)> {
    let stamped = |key: &str| stamp.get(key).and_then(Value::as_str).unwrap_or_default();
    let mut events = Vec::new();
    if let Some(bytes) = &files.queue {
        if digest(bytes) != stamped("queue_hash") {
            let QueueDoc { top, entries } = parse_queue(bytes)?;
            events.push(Body::Proposals(ProposalsEvent::QueueImported { top, entries }));
        }
    }
    let adopted_queue = !events.is_empty();
    for (file, text) in &files.props {
        let known = stamp.get("props").and_then(|p| p.get(file)).and_then(Value::as_str);
        if known != Some(digest(text.as_bytes()).as_str()) {
            let (file, text) = (file.clone(), text.clone());
            events.push(Body::Proposals(ProposalsEvent::PropImported { file, text }));
        }
    }
    let adopted_props = events.len() - usize::from(adopted_queue);
    let ledger = files.ledger.as_deref().unwrap_or_default();
    let known = stamp.get("ledger_bytes").and_then(Value::as_u64).unwrap_or(0);
    let known = usize::try_from(known).unwrap_or(usize::MAX);
    let lines = match ledger.get(..known) {
        Some(prefix) if digest(prefix) == stamped("ledger_hash") => parse_ledger(&ledger[known..])?,
        _ => {
            return Err(Error::invalid(format!(
                "{LEDGER_FILE} was rewritten since hookstate last mirrored it; re-import it"
            )))
        }
    };
    let adopted_lines = lines.len();
    events.extend(
        lines.into_iter().map(|line| Body::Proposals(ProposalsEvent::LedgerLineImported { line })),
    );
    let result = json!({
        "adopted_queue": adopted_queue, "adopted_props": adopted_props,
        "adopted_lines": adopted_lines,
    });
    Ok((events, fields(result)))
}

/// The event adopting the mirrored alert-state file when someone else changed it since `hash`
/// (an upstream writer, or a file hookstate has not mirrored yet), and what was done: `adopted`,
/// `unchanged`, `missing`, or the quarantine name of a corrupt file (rewritten from the log by
/// the mirror's end).
fn foreign_alerts(state: &Root, hash: Option<&str>, now_ms: u64) -> Result<(Vec<Body>, Value)> {
    let max = hermit_alerts::ALERT_STATE_FILE_BYTES_MAX;
    let Some(bytes) = state.read(hermit_alerts::ALERT_STATE_FILE, max)? else {
        return Ok((Vec::new(), json!("missing")));
    };
    if hash == Some(digest(&bytes).as_str()) {
        return Ok((Vec::new(), json!("unchanged")));
    }
    match hermit_alerts::read_alert_file(state, now_ms)? {
        AlertFile::Missing => Ok((Vec::new(), json!("missing"))),
        AlertFile::Found { state, .. } => {
            let event = Body::Alerts(AlertsEvent::StateImported { state });
            Ok((vec![event], json!("adopted")))
        }
        AlertFile::Quarantined { to, .. } => Ok((Vec::new(), json!({ "quarantined": to }))),
    }
}

fn digest(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}
const DEFAULT_TIMEZONE: &str = "UTC";

/// `config.timezone` of the hermit state directory `dir`, `UTC` when unset or the file is absent.
///
/// # Errors
/// An unsafe or missing directory; [`Error::Invalid`] for a config that is not a JSON object.
pub fn read_timezone(dir: &Path) -> Result<String> {
    let root = Root::open(dir, false)?;
    let Some(bytes) = root.read(CONFIG_FILE, CONFIG_FILE_BYTES_MAX)? else {
        return Ok(DEFAULT_TIMEZONE.into());
    };
    parse_config_timezone(&bytes)
}

/// `timezone` of a `config.json`'s bytes, `UTC` when unset or empty.
pub(crate) fn parse_config_timezone(bytes: &[u8]) -> Result<String> {
    let config: Map<String, Value> = serde_json::from_slice(bytes)
        .map_err(|e| Error::invalid(format!("{CONFIG_FILE} is not a JSON object: {e}")))?;
    Ok(config
        .get("timezone")
        .and_then(Value::as_str)
        .filter(|tz| !tz.is_empty())
        .unwrap_or(DEFAULT_TIMEZONE)
        .to_owned())
}

fn corrupt(why: &str) -> Error {
    Error::invalid(format!("{QUEUE_FILE} is corrupt ({why}); refusing it, repair it first"))
}

/// Parses the queue file as upstream's tri-state reader does: a missing or null `pending` is
/// healed to `[]`; invalid JSON, a non-object, a non-array `pending` or a non-object entry is
/// corrupt, never an empty queue.
///
/// # Errors
/// [`Error::Invalid`] naming why the file is corrupt.
pub fn parse_queue(bytes: &[u8]) -> Result<QueueDoc> {
    let text = std::str::from_utf8(bytes).map_err(|_| corrupt("not UTF-8"))?;
    let value: Value = serde_json::from_str(text).map_err(|e| corrupt(&e.to_string()))?;
    let Value::Object(mut top) = value else {
        return Err(corrupt("not a JSON object"));
    };
    let pending = match top.get("pending") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(_) => return Err(corrupt("pending is not an array")),
    };
    if pending.len() > QUEUE_ENTRIES_MAX {
        return Err(corrupt(&format!("{} entries, limit is {QUEUE_ENTRIES_MAX}", pending.len())));
    }
    let mut entries = Vec::with_capacity(pending.len());
    for entry in pending {
        let Value::Object(map) = &entry else {
            return Err(corrupt("an entry is not an object"));
        };
        if !map.get("id").is_some_and(Value::is_string) {
            return Err(corrupt("an entry has no string id"));
        }
        entries.push(entry.to_string());
    }
    top.insert("pending".into(), Value::Array(Vec::new()));
    Ok(QueueDoc { top: Value::Object(top).to_string(), entries })
}

/// Renders the queue file: `JSON.stringify(data, null, 2) + "\n"`.
///
/// # Errors
/// [`Error::Corrupt`] when a stored entry is not JSON.
pub fn render_queue(queue: &QueueDoc) -> Result<String> {
    let parse = |text: &str| {
        serde_json::from_str::<Value>(text)
            .map_err(|e| Error::Corrupt(format!("stored queue entry: {e}")))
    };
    let mut top = match parse(&queue.top)? {
        Value::Object(map) => map,
        _ => return Err(Error::Corrupt("stored queue top is not an object".into())),
    };
    let entries = queue.entries.iter().map(|t| parse(t)).collect::<Result<Vec<_>>>()?;
    top.insert("pending".into(), Value::Array(entries));
    let text = serde_json::to_string_pretty(&Value::Object(top))
        .map_err(|e| Error::Corrupt(format!("queue does not serialise: {e}")))?;
    Ok(text + "\n")
}

/// Splits the ledger into its lines (without newlines), every line kept as written.
pub(crate) fn parse_ledger(bytes: &[u8]) -> Result<Vec<String>> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| Error::invalid(format!("{LEDGER_FILE} is not UTF-8")))?;
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    if lines.len() > LEDGER_LINES_MAX {
        return Err(Error::invalid(format!(
            "{LEDGER_FILE} holds {} lines, limit is {LEDGER_LINES_MAX}",
            lines.len()
        )));
    }
    Ok(lines)
}

/// The ledger of a scope, rendered from its events in log order.
pub(crate) fn ledger_lines(txn: &dyn ReadTxn, scope: &str) -> Result<Vec<String>> {
    let head = read_head(txn)?;
    let mut lines = Vec::new();
    txn.events(1, head.seq, &mut |seq, bytes| {
        let event =
            decode_event(bytes).map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
        if event.content.scope == scope {
            if let Body::Proposals(body) = &event.content.body {
                lines.extend(ledger_line(body));
            }
        }
        Ok(true)
    })?;
    Ok(lines)
}

pub(crate) fn render_ledger(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The hermit proposal files read and checked, ready to import: nothing is opened or written
/// before they parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HermitFiles {
    queue: Option<QueueDoc>,
    lines: Vec<String>,
    props: Vec<(String, String)>,
    index_updated: Option<String>,
    round_trip: bool,
}

/// Reads every `PROP-*.md` of `proposals/` (other names are not proposals and are left alone).
fn read_props(dir: &Path) -> Result<Vec<(String, String)>> {
    let Some(root) = Root::open(dir, false)?.subdir(PROPOSALS_DIR, false)? else {
        return Ok(Vec::new());
    };
    let mut props = Vec::new();
    for name in root.list()? {
        if !(name.starts_with("PROP-") && name.ends_with(".md")) {
            continue;
        }
        check_prop_file(&name)?;
        if props.len() >= PROPS_MAX {
            return Err(Error::invalid(format!("more than {PROPS_MAX} PROP files")));
        }
        let bytes = root
            .read(&name, PROP_FILE_BYTES_MAX)?
            .ok_or_else(|| Error::NoStore { path: dir.join(PROPOSALS_DIR).join(&name) })?;
        let text =
            String::from_utf8(bytes).map_err(|_| Error::invalid(format!("{name} is not UTF-8")))?;
        props.push((name, text));
    }
    Ok(props)
}

/// The index's `updated`, and whether a rebuild from `props` reproduces the file.
pub(crate) fn read_index(bytes: &[u8], props: &[(String, String)]) -> Result<(String, bool)> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Error::invalid(format!("{INDEX_FILE} is not JSON: {e}")))?;
    let updated = value
        .get("updated")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid(format!("{INDEX_FILE} has no string updated")))?
        .to_owned();
    let docs: Vec<_> = props.iter().map(|(f, t)| (f.clone(), prop_doc(f, t))).collect();
    let rendered = render_pretty(&render_index(&docs, &updated))?;
    Ok((updated, rendered.as_bytes() == bytes))
}

fn render_pretty(value: &Value) -> Result<String> {
    serde_json::to_string_pretty(value)
        .map(|t| t + "\n")
        .map_err(|e| Error::Corrupt(format!("value does not serialise: {e}")))
}

/// Reads and checks `DIR/state/micro-proposals.json` and `DIR/state/proposal-metrics.jsonl`.
///
/// # Errors
/// [`Error::Invalid`] for a corrupt or oversized file; unsafe or missing paths.
pub fn read_hermit_files(dir: &Path) -> Result<HermitFiles> {
    let state = Root::open(dir, false)?
        .subdir(STATE_DIR, false)?
        .ok_or_else(|| Error::NoStore { path: dir.join(STATE_DIR) })?;
    let queue_bytes = state.read(QUEUE_FILE, QUEUE_FILE_BYTES_MAX)?;
    let ledger_bytes = state.read(LEDGER_FILE, LEDGER_FILE_BYTES_MAX)?;
    let queue = queue_bytes.as_deref().map(parse_queue).transpose()?;
    let lines = ledger_bytes.as_deref().map(parse_ledger).transpose()?.unwrap_or_default();
    let queue_round_trip = match (&queue, &queue_bytes) {
        (Some(q), Some(bytes)) => render_queue(q)?.as_bytes() == bytes.as_slice(),
        _ => true,
    };
    let ledger_round_trip =
        ledger_bytes.as_ref().is_none_or(|b| render_ledger(&lines).as_bytes() == b.as_slice());
    let props = read_props(dir)?;
    let (index_updated, index_round_trip) = match state.read(INDEX_FILE, INDEX_FILE_BYTES_MAX)? {
        Some(bytes) => read_index(&bytes, &props).map(|(u, ok)| (Some(u), ok))?,
        None => (None, true),
    };
    let round_trip = queue_round_trip && ledger_round_trip && index_round_trip;
    Ok(HermitFiles { queue, lines, props, index_updated, round_trip })
}

impl Proposals<'_> {
    /// Imports checked hermit proposal files into the call's scope, in one transaction.
    /// Refused (a value) when the scope already holds a queue.
    ///
    /// # Errors
    /// Store errors.
    pub fn import(&self, call: &Call, files: HermitFiles) -> Result<Outcome> {
        hookstate_schema::validate_scope(&call.scope)?;
        let HermitFiles { queue, lines, props, index_updated, round_trip } = files;
        let result = fields(json!({
            "layout": "hermit-proposals",
            "entries": queue.as_ref().map_or(0, |q| q.entries.len()),
            "ledger_lines": lines.len(),
            "proposals": props.len(),
            "round_trip": round_trip,
        }));
        let mut events: Vec<Body> = Vec::with_capacity(lines.len() + 1);
        if let Some(QueueDoc { top, entries }) = queue {
            events.push(Body::Proposals(ProposalsEvent::QueueImported { top, entries }));
        }
        // PROP files first, so that imported `responded` lines mark them.
        events.extend(
            props
                .into_iter()
                .map(|(file, text)| Body::Proposals(ProposalsEvent::PropImported { file, text })),
        );
        events.extend(
            lines
                .into_iter()
                .map(|line| Body::Proposals(ProposalsEvent::LedgerLineImported { line })),
        );
        if let Some(updated) = index_updated {
            events.push(Body::Proposals(ProposalsEvent::IndexImported { updated }));
        }
        self.k.write(call, |txn| {
            if read_doc::<QueueDoc>(txn, &call.scope, QUEUE_KIND, QUEUE_ID)?.is_some() {
                let refusal = Refusal {
                    reason: "already_imported",
                    message: "this scope already holds a micro-proposal queue".into(),
                    details: Map::new(),
                };
                return Ok(Plan { refusal: Some(refusal), ..Plan::default() });
            }
            Ok(Plan { events: events.clone(), result: result.clone(), ..Plan::default() })
        })
    }

    /// Writes `DIR/state/micro-proposals.json`, `DIR/state/proposal-metrics.jsonl`, and when
    /// there are proposals `DIR/state/proposals-index.json` and `DIR/proposals/PROP-*.md`, for
    /// `scope` (directories created 0700, files 0600).
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn export(&self, scope: &str, dir: &Path) -> Result<Map<String, Value>> {
        self.write_hermit_files(scope, dir, true, None).map(|written| written.summary)
    }

    /// The export, returning what it wrote (`alert-state.json` only when `write_alerts`); for a
    /// mirror, a file only over the bytes the call saw ([`untouched`]).
    fn write_hermit_files(
        &self,
        scope: &str,
        dir: &Path,
        write_alerts: bool,
        seen: Option<&Seen>,
    ) -> Result<Written> {
        hookstate_schema::validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let queue: QueueDoc = read_doc(&*txn, scope, QUEUE_KIND, QUEUE_ID)?.unwrap_or_default();
        let lines = ledger_lines(&*txn, scope)?;
        let state = Root::open(dir, true)?
            .subdir(STATE_DIR, true)?
            .ok_or_else(|| Error::NoStore { path: dir.join(STATE_DIR) })?;
        let (queue_text, ledger_text) = (render_queue(&queue)?, render_ledger(&lines));
        let queue_seen = seen.map(|s| s.queue.as_deref());
        let queue_hash = if untouched(&state, QUEUE_FILE, QUEUE_FILE_BYTES_MAX, queue_seen) {
            state.write(QUEUE_FILE, queue_text.as_bytes())?;
            digest(queue_text.as_bytes())
        } else {
            queue_seen.flatten().unwrap_or_default().to_owned()
        };
        let ledger_seen = seen.map(|s| s.ledger.as_ref());
        let ledger_hash = ledger_seen.map(|l| l.map(|(_, hash)| hash.as_str()));
        let ledger = if untouched(&state, LEDGER_FILE, LEDGER_FILE_BYTES_MAX, ledger_hash) {
            state.write(LEDGER_FILE, ledger_text.as_bytes())?;
            (ledger_text.len(), digest(ledger_text.as_bytes()))
        } else {
            // A ledger created during the call: every line of it is adopted next.
            ledger_seen.flatten().cloned().unwrap_or_else(|| (0, digest(b"")))
        };
        let (props, index) = prop_state(&*txn, scope)?;
        let index_seen = seen.map(|s| s.index.as_deref());
        if (!props.is_empty() || index.is_some())
            && untouched(&state, INDEX_FILE, INDEX_FILE_BYTES_MAX, index_seen)
        {
            let updated = index.map(|i| i.updated).unwrap_or_default();
            state.write(INDEX_FILE, render_pretty(&render_index(&props, &updated))?.as_bytes())?;
        }
        if let Some(text) = hermit_alerts::mirror_text(&*txn, scope)?.filter(|_| write_alerts) {
            state.write(hermit_alerts::ALERT_STATE_FILE, text.as_bytes())?;
        }
        let mut prop_hashes = Map::new();
        if !props.is_empty() {
            let root = Root::open(dir, false)?
                .subdir(PROPOSALS_DIR, true)?
                .ok_or_else(|| Error::NoStore { path: dir.join(PROPOSALS_DIR) })?;
            for (_, doc) in &props {
                let prop_seen = seen.map(|s| s.prop(&doc.file));
                let hash = if untouched(&root, &doc.file, PROP_FILE_BYTES_MAX, prop_seen) {
                    root.write(&doc.file, doc.text.as_bytes())?;
                    Some(digest(doc.text.as_bytes()))
                } else {
                    // Kept: the hash the call saw (none for a new file), so the next adopts it.
                    prop_seen.flatten().map(str::to_owned)
                };
                if let Some(hash) = hash {
                    prop_hashes.insert(doc.file.clone(), json!(hash));
                }
            }
        }
        let summary = fields(json!({
            "entries": queue.entries.len(), "ledger_lines": lines.len(), "proposals": props.len(),
        }));
        let alerts = hermit_alerts::mirror_text(&*txn, scope)?;
        Ok(Written { summary, queue_hash, ledger, prop_hashes, alerts })
    }

    /// Starts a mirrored call on the state directory `dir`: takes the mirror lock (so hookstate
    /// processes mirror one at a time), then adopts what a not-yet-migrated script wrote into
    /// the mirrored files since hookstate last wrote them: a changed queue file replaces the
    /// queue, new or changed PROP files are adopted, ledger lines appended after hookstate's
    /// last line are adopted as written.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a corrupt queue file or a ledger rewritten (not appended to) since
    /// the last mirror; [`Error::Busy`] when the lock stays taken past `wait`; IO and store errors.
    pub fn mirror_begin(
        &self,
        call: &Call,
        dir: &Path,
        wait: std::time::Duration,
    ) -> Result<(Mirror, Map<String, Value>)> {
        hookstate_schema::validate_scope(&call.scope)?;
        let state = Root::open(dir, false)?
            .subdir(STATE_DIR, true)?
            .ok_or_else(|| Error::NoStore { path: dir.join(STATE_DIR) })?;
        let lock = state.lock_file(MIRROR_LOCK, wait)?;
        let mut mirror =
            Mirror { _lock: lock, dir: dir.to_path_buf(), alerts_seen: None, seen: None };
        let stamp = match state.read(MIRROR_STAMP, MIRROR_STAMP_BYTES_MAX)? {
            Some(bytes) => Some(
                serde_json::from_slice::<Value>(&bytes)
                    .map_err(|e| Error::invalid(format!("{MIRROR_STAMP}: {e}")))?,
            ),
            None => None,
        };
        // The alert-state file is adopted even before the first stamp, so a mirror never
        // overwrites an upstream alert state it has not read.
        // Before the first stamp (the proposals never mirrored), a file that is what this store
        // would write is its own earlier write (an alerts call mirrors only this file then).
        let unstamped_hash = match &stamp {
            Some(_) => None,
            None => hermit_alerts::mirror_text(&*self.k.begin_read()?, &call.scope)?
                .map(|text| digest(text.as_bytes())),
        };
        let alerts_hash = stamp
            .as_ref()
            .and_then(|s| s.get("alerts_hash"))
            .and_then(Value::as_str)
            .or(unstamped_hash.as_deref());
        let (alert_events, alerts) = foreign_alerts(&state, alerts_hash, call.now_ms)?;
        let adopt = call.without_idem_key();
        if !alert_events.is_empty() {
            self.k
                .write(&adopt, |_| Ok(Plan { events: alert_events.clone(), ..Plan::default() }))?;
        }
        let max = hermit_alerts::ALERT_STATE_FILE_BYTES_MAX;
        mirror.alerts_seen = state.read(hermit_alerts::ALERT_STATE_FILE, max)?.map(|b| digest(&b));
        let Some(stamp) = stamp else {
            // Nothing is adopted before the first stamp; what is there is still seen, so the end
            // keeps a file written during the call (a directory it cannot read is written over,
            // as an export writes it).
            mirror.seen = Files::read(&state, dir).ok().map(Files::seen);
            let result = json!({ "adopted_queue": false, "adopted_lines": 0, "alerts": alerts });
            return Ok((mirror, fields(result)));
        };
        let files = Files::read(&state, dir)?;
        let (events, mut result) = foreign_changes(&files, &stamp)?;
        result.insert("alerts".into(), alerts);
        if !events.is_empty() {
            self.k.write(&adopt, |_| Ok(Plan { events: events.clone(), ..Plan::default() }))?;
        }
        mirror.seen = Some(files.seen());
        Ok((mirror, result))
    }

    /// Ends a mirrored call: writes the files of `scope` into the mirrored directory and the
    /// stamp of what was written, then releases the lock. A file is written only over the bytes
    /// the call saw once it adopted them: one a lock-less writer changed during the call is kept
    /// and its stamp entry left at what the call saw, so the next call adopts it (a queue file
    /// replaces the queue, as when that writer's write had come after this call's).
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn mirror_end(&self, mirror: Mirror, scope: &str) -> Result<()> {
        let state = Root::open(&mirror.dir, false)?
            .subdir(STATE_DIR, false)?
            .ok_or_else(|| Error::NoStore { path: mirror.dir.join(STATE_DIR) })?;
        let write_alerts = mirror.alerts_untouched(&state)?;
        let written =
            self.write_hermit_files(scope, &mirror.dir, write_alerts, mirror.seen.as_ref())?;
        let mut stamp = json!({
            "queue_hash": written.queue_hash,
            "ledger_bytes": written.ledger.0,
            "ledger_hash": written.ledger.1,
            "props": written.prop_hashes,
        });
        // An alert state written by another writer during the call keeps the hash of what this
        // call saw, so the next call adopts it.
        let alerts_hash = match (&written.alerts, write_alerts) {
            (Some(text), true) => Some(digest(text.as_bytes())),
            _ => mirror.alerts_seen.clone(),
        };
        if let (Some(hash), Value::Object(map)) = (alerts_hash, &mut stamp) {
            map.insert("alerts_hash".into(), json!(hash));
        }
        state.write(MIRROR_STAMP, format!("{stamp}\n").as_bytes())
    }

    /// Ends a mirrored alert-state call (`alerts tick`, `count-tick`): when the proposals files
    /// are mirrored already (their stamp exists), rewrites every hermit file through
    /// [`Engine::mirror_end`]; otherwise writes `state/alert-state.json` alone and releases the
    /// lock, so an alerts call never replaces a queue or ledger that was never imported.
    ///
    /// # Errors
    /// Unsafe paths; IO and store errors.
    pub fn alerts_mirror_end(&self, mirror: Mirror, scope: &str) -> Result<()> {
        let state = Root::open(&mirror.dir, false)?
            .subdir(STATE_DIR, false)?
            .ok_or_else(|| Error::NoStore { path: mirror.dir.join(STATE_DIR) })?;
        if state.read(MIRROR_STAMP, MIRROR_STAMP_BYTES_MAX)?.is_some() {
            return self.mirror_end(mirror, scope);
        }
        let untouched = mirror.alerts_untouched(&state)?;
        let text = hermit_alerts::mirror_text(&*self.k.begin_read()?, scope)?;
        if let Some(text) = text.filter(|_| untouched) {
            state.write(hermit_alerts::ALERT_STATE_FILE, text.as_bytes())?;
        }
        drop(mirror);
        Ok(())
    }

    /// The ledger lines of a scope, rendered from the log (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn ledger(&self, scope: &str) -> Result<Vec<String>> {
        hookstate_schema::validate_scope(scope)?;
        ledger_lines(&*self.k.begin_read()?, scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_queue_files_are_refused_never_empty() {
        for bad in [
            &b"{\"pending\": [}"[..],
            b"[]",
            b"{\"pending\": {}}",
            b"{\"pending\": [1]}",
            b"{\"pending\": [{\"question\": \"no id\"}]}",
            b"\xff",
            b"",
        ] {
            assert!(parse_queue(bad).as_ref().is_err_and(Error::is_invalid), "{bad:?}");
        }
        for healed in [&b"{}"[..], b"{\"pending\": null}"] {
            assert!(parse_queue(healed).unwrap().entries.is_empty());
        }
    }

    proptest::proptest! {
        #[test]
        fn hostile_bytes_never_panic_and_never_read_as_an_empty_queue(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
        ) {
            if let Ok(queue) = parse_queue(&bytes) {
                let text = render_queue(&queue).unwrap();
                proptest::prop_assert_eq!(parse_queue(text.as_bytes()).unwrap(), queue);
            }
            let _ = parse_ledger(&bytes);
        }

        #[test]
        fn exported_queues_parse_back_to_themselves(
            questions in proptest::collection::vec("\\PC{0,12}", 0..6),
            extra in proptest::option::of("[a-z]{1,6}"),
        ) {
            let entries: Vec<String> = questions
                .iter()
                .enumerate()
                .map(|(i, q)| json!({ "id": format!("MP-20261129-{i}"), "question": q }).to_string())
                .collect();
            let mut top = Map::new();
            if let Some(key) = &extra {
                top.insert(key.clone(), json!(1));
            }
            top.insert("pending".into(), json!([]));
            let queue = QueueDoc { top: Value::Object(top).to_string(), entries };
            let text = render_queue(&queue).unwrap();
            proptest::prop_assert_eq!(render_queue(&parse_queue(text.as_bytes()).unwrap()).unwrap(), text);
        }
    }

    #[test]
    fn queue_keeps_top_level_keys_and_entry_key_order() {
        let text = "{\n  \"note\": \"x\",\n  \"pending\": [\n    {\n      \"question\": \"q\",\n      \"id\": \"MP-20261129-0\"\n    }\n  ],\n  \"after\": []\n}\n";
        let queue = parse_queue(text.as_bytes()).unwrap();
        assert_eq!(render_queue(&queue).unwrap(), text);
    }
}
