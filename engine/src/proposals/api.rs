//! The proposals domain's handle, `engine.proposals()`: every `proposal.ts` verb (queue-micro,
//! micro resolve | nudge | brief-cycle, create, the status moves, patch, event, resolve-id,
//! index) validates its input, reads what it needs of the scope's `config.json` (the time zone
//! that dates ids and stamps), then decides in one write transaction over the scope's documents
//! (`micro.rs`, `props.rs`); and the reads of the queue, the ledger and the index.
//!
//! The scope is `hermit:<abs state dir>`; `config.json` is read in that directory and never
//! written. Does not touch the other legacy files; `layout.rs` does.

use std::path::Path;

use hookstate_schema::format::decode_event;
use hookstate_schema::heartbeat::FileDoc;
use hookstate_schema::hermit::dir_of;
use hookstate_schema::proposals::{IndexDoc, MpSeqDoc, PropDoc, QueueDoc};
use hookstate_schema::proposals::{PROP_KIND, QUEUE_ID, QUEUE_KIND};
use hookstate_schema::{validate_scope, Body};
use serde::Serialize;
use serde_json::{Map, Value};

use super::micro::{check_mp_id, check_resolve, decide_brief_cycle, decide_nudge};
use super::micro::{decide_queue, decide_resolve, mp_date, MicroInput, ResolveInput, MP_SEQ_KIND};
use super::moves::{check_event, decide_event, decide_move, decide_patch, event_refused};
use super::moves::{MoveInput, PatchInput};
use super::project::{ledger_line, LEDGER_KIND};
use super::props::PROP_FILE_BYTES_MAX;
use super::props::{check_prop_file, decide_create, render_index, resolve_id};
use super::props::{CreateInput, INDEX_ID, INDEX_KIND, PROPOSALS_DIR};
use crate::kernel::call::{Call, Outcome};
use crate::kernel::compat::stamp::{stamp_ms, stamp_s, zoned, zoned_stamp};
use crate::kernel::doc::{read_doc, read_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::write::Kernel;
use crate::legacy::root::Root;

/// The hermit config file is a few routines and settings.
pub(crate) const CONFIG_FILE_BYTES_MAX: usize = 1024 * 1024;
/// The config file of a hermit state directory, read for its `timezone`.
pub(crate) const CONFIG_FILE: &str = "config.json";
/// The zone of a config without one.
const DEFAULT_TIMEZONE: &str = "UTC";

/// claude-code-hermit's proposals on an open store: `engine.proposals()`.
#[derive(Clone, Copy)]
pub struct Proposals<'a> {
    pub(super) k: &'a Kernel,
}

impl<'a> Proposals<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Proposals { k }
    }
}

/// The state directory a hermit scope names.
///
/// # Errors
/// [`Error::BadInput`] for a scope that is not `hermit:<absolute path>`.
pub(crate) fn state_dir(scope: &str) -> Result<&Path> {
    dir_of(scope)
        .map(Path::new)
        .ok_or_else(|| Error::bad(format!("scope {scope:?}"), "is not hermit:<abs state dir>"))
}

/// The heartbeat's row of `state/runtime.json` (its exact text), which the session domain
/// shares; read here by its schema kind, as upstream's create reads the file.
const RUNTIME_KIND: &str = "heartbeat.file";
const RUNTIME_ID: &str = "runtime.json";

/// `state/runtime.json`'s `session_id` when it is a non-empty string: upstream's create defaults
/// `Session:` to it (`runtime?.session_id ?? null`; an unparseable file reads as none).
fn runtime_session(txn: &dyn ReadTxn, scope: &str) -> Result<Option<String>> {
    let Some(doc) = read_doc::<FileDoc>(txn, scope, RUNTIME_KIND, RUNTIME_ID)? else {
        return Ok(None);
    };
    let runtime: Option<Value> = serde_json::from_str(&doc.text).ok();
    let session = runtime.as_ref().and_then(|r| r.get("session_id")).and_then(Value::as_str);
    Ok(session.filter(|s| !s.is_empty()).map(str::to_owned))
}

/// `config.timezone` of the hermit state directory `dir`, `UTC` when unset or the file is absent.
///
/// # Errors
/// An unsafe or missing directory; [`Error::LegacyFile`] for a config that is not a JSON object.
pub(crate) fn read_timezone(dir: &Path) -> Result<String> {
    let root = Root::open(dir, false)?;
    match root.read(CONFIG_FILE, CONFIG_FILE_BYTES_MAX)? {
        Some(bytes) => parse_config_timezone(&bytes),
        None => Ok(DEFAULT_TIMEZONE.into()),
    }
}

/// `timezone` of a `config.json`'s bytes, `UTC` when unset or empty.
///
/// # Errors
/// [`Error::LegacyFile`] for bytes that are not a JSON object.
pub(crate) fn parse_config_timezone(bytes: &[u8]) -> Result<String> {
    let config: Map<String, Value> = serde_json::from_slice(bytes)
        .map_err(|e| Error::legacy(CONFIG_FILE, format!("is not a JSON object: {e}")))?;
    Ok(config
        .get("timezone")
        .and_then(Value::as_str)
        .filter(|tz| !tz.is_empty())
        .unwrap_or(DEFAULT_TIMEZONE)
        .to_owned())
}

/// The scope's time zone, from its directory's `config.json`.
fn timezone(call: &Call) -> Result<String> {
    validate_scope(&call.scope)?;
    read_timezone(state_dir(&call.scope)?)
}

/// The queue of a scope, the seed template when it holds none.
pub(crate) fn read_queue(txn: &dyn ReadTxn, scope: &str) -> Result<QueueDoc> {
    Ok(read_doc(txn, scope, QUEUE_KIND, QUEUE_ID)?.unwrap_or_default())
}

/// Every PROP document of a scope, in name order.
pub(crate) fn read_props(txn: &dyn ReadTxn, scope: &str) -> Result<Vec<(String, PropDoc)>> {
    read_docs(txn, scope, PROP_KIND)
}

/// The index stamp of a scope, when one was imported or written.
pub(crate) fn read_index(txn: &dyn ReadTxn, scope: &str) -> Result<Option<IndexDoc>> {
    read_doc(txn, scope, INDEX_KIND, INDEX_ID)
}

/// The ledger of a scope, rendered from its events in log order: the ledger index names them,
/// so the cost grows with the scope's ledger, not with the log.
pub(crate) fn ledger_lines(txn: &dyn ReadTxn, scope: &str) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for (id, _) in read_docs::<bool>(txn, scope, LEDGER_KIND)? {
        let seq: u64 = id
            .parse()
            .map_err(|_| Error::Corrupt(format!("ledger index of {scope}: bad seq {id:?}")))?;
        let bytes = txn
            .event(seq)?
            .ok_or_else(|| Error::Corrupt(format!("ledger index of {scope} names seq {seq}")))?;
        let event =
            decode_event(&bytes).map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
        match &event.content.body {
            Body::Proposals(body) if event.content.scope == scope => {
                lines.extend(ledger_line(body));
            }
            _ => {
                return Err(Error::Corrupt(format!(
                    "ledger index of {scope} names seq {seq}, another scope's or domain's event"
                )))
            }
        }
    }
    Ok(lines)
}

/// Entries as JSON values (an entry whose text does not parse is left out).
fn values(entries: &[String]) -> Vec<Value> {
    entries.iter().filter_map(|t| serde_json::from_str(t).ok()).collect()
}

/// `proposals queue`: the pending entries as the queue file holds them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueRead {
    /// The entries, in queue order.
    pub pending: Vec<Value>,
}

/// `proposals list`: the pending micro-proposals and the index.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListRead {
    /// The queue's entries.
    pub micro: Vec<Value>,
    /// The index, as `proposals-index.json` holds it.
    pub proposals: Value,
}

/// `proposals ledger`: each line as JSON (a line that does not parse, as its text).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerRead {
    /// The lines, in log order.
    pub ledger: Vec<Value>,
}

/// `proposals index`: the index, and upstream's `OK|<n> proposals` line.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexRead {
    /// Upstream's verdict line.
    pub verdict: String,
    /// The index, as `proposals-index.json` holds it.
    pub index: Value,
}

/// `proposals metrics`: upstream's whole stdout (a markdown table or one verdict line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetricsRead {
    /// The text, every line ending in a newline.
    pub verdict: String,
}

/// `proposals resolve-id`: upstream's verdict line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolveIdRead {
    /// `MATCH|<file>`, `AMBIGUOUS|[…]`, `NONE|not-a-prop-id` or `NONE|no-match`.
    pub verdict: String,
}

impl Proposals<'_> {
    /// Queues a micro-proposal (`proposal.ts queue-micro`): a duplicate of a pending question is
    /// refused with `DUPLICATE|<id>`; otherwise the entry gets the next `MP-<date>-N` of the date
    /// in the scope's `config.timezone`, allocated in this transaction.
    ///
    /// # Errors
    /// [`Error::BadTimeZone`], [`Error::LegacyFile`] for a bad config; [`Error::TooMany`] for a
    /// full queue; store errors.
    pub fn queue_micro(&self, call: &Call, input: &MicroInput) -> Result<Outcome> {
        let date = mp_date(call.now_ms, &timezone(call)?)?;
        let ts = stamp_s(call.now_ms);
        self.k.write(call, |txn| {
            let queue = read_queue(txn, &call.scope)?;
            let next =
                read_doc::<MpSeqDoc>(txn, &call.scope, MP_SEQ_KIND, &date)?.map_or(0, |d| d.next);
            decide_queue(&queue, next, &date, input, ts.clone())
        })
    }

    /// Resolves a micro-proposal: the entry leaves the queue and the ledger gets its
    /// `micro-resolved` line in the same commit; the result carries the rendered `on_resolve`.
    ///
    /// # Errors
    /// [`Error::Upstream`] for a missing id, [`Error::NotOneOf`] for an unknown action,
    /// [`Error::TooLarge`]; store errors.
    pub fn micro_resolve(&self, call: &Call, input: &ResolveInput) -> Result<Outcome> {
        validate_scope(&call.scope)?;
        check_resolve(input)?;
        let ts = stamp_s(call.now_ms);
        self.k.write(call, |txn| {
            Ok(decide_resolve(&read_queue(txn, &call.scope)?, input, ts.clone()))
        })
    }

    /// Nudges a micro-proposal: its `follow_up_count` plus one.
    ///
    /// # Errors
    /// [`Error::Upstream`] for a missing id; store errors.
    pub fn micro_nudge(&self, call: &Call, id: &str) -> Result<Outcome> {
        validate_scope(&call.scope)?;
        check_mp_id(id)?;
        self.k.write(call, |txn| Ok(decide_nudge(&read_queue(txn, &call.scope)?, id)))
    }

    /// One brief-cycle pass over the queue.
    ///
    /// # Errors
    /// Store errors.
    pub fn brief_cycle(&self, call: &Call) -> Result<Outcome> {
        validate_scope(&call.scope)?;
        let ts = stamp_s(call.now_ms);
        self.k.write(call, |txn| Ok(decide_brief_cycle(&read_queue(txn, &call.scope)?, &ts)))
    }

    /// Creates a proposal: `PROP-NNN-<slug>-<HHMMSS>` with NNN one more than every PROP of the
    /// scope, allocated in this transaction, and its `created` ledger line.
    ///
    /// # Errors
    /// [`Error::BadTimeZone`], [`Error::TooLarge`] for an oversized body; store errors.
    pub fn create(&self, call: &Call, input: &CreateInput) -> Result<Outcome> {
        let tz = timezone(call)?;
        let created = zoned_stamp(call.now_ms, &tz)?;
        let hhmmss = zoned(call.now_ms, &tz, "%H%M%S")?;
        let len = input.body.len() + input.title.len();
        if len > PROP_FILE_BYTES_MAX {
            let what = "the proposal".to_owned();
            return Err(Error::TooLarge { what, len, max: PROP_FILE_BYTES_MAX });
        }
        let now = (stamp_ms(call.now_ms), stamp_s(call.now_ms));
        self.k.write(call, |txn| {
            let props = read_props(txn, &call.scope)?;
            let mut input = input.clone();
            if input.session.is_none() {
                input.session = runtime_session(txn, &call.scope)?;
            }
            Ok(decide_create(&props, &input, &created, &hhmmss, now.clone()))
        })
    }

    /// Moves a proposal's status (accept, defer, dismiss, resolve) as a compare-and-swap;
    /// the first response records one `responded` ledger line, a resolve a `resolved` line.
    ///
    /// # Errors
    /// [`Error::BadInput`] for a bad id, [`Error::BadTimeZone`]; store errors.
    pub fn move_status(&self, call: &Call, input: &MoveInput) -> Result<Outcome> {
        let stem = input.id.trim_end_matches(".md").to_owned();
        check_prop_file(&format!("{stem}.md"))?;
        let now_zoned = zoned_stamp(call.now_ms, &timezone(call)?)?;
        let now = (stamp_ms(call.now_ms), stamp_s(call.now_ms));
        self.k.write(call, |txn| {
            let doc: Option<PropDoc> = read_doc(txn, &call.scope, PROP_KIND, &stem)?;
            Ok(decide_move(doc.as_ref(), input, &now_zoned, now.clone()))
        })
    }

    /// `event responded` (with an action: accept, defer or dismiss) or `event resolved` (no
    /// action) for a PROP id. Malformed arguments are refused with upstream's `ERROR|<token>`.
    ///
    /// # Errors
    /// Store errors.
    pub fn event(
        &self,
        call: &Call,
        kind: &str,
        id: Option<&str>,
        action: Option<&str>,
    ) -> Result<Outcome> {
        validate_scope(&call.scope)?;
        if let Err(token) = check_event(kind, id, action) {
            let txn = self.k.begin_read()?;
            return self.k.answer_read(&*txn, event_refused(&token));
        }
        let id = id.unwrap_or_default();
        let ts = stamp_s(call.now_ms);
        self.k.write(call, |txn| {
            let doc: Option<PropDoc> = read_doc(txn, &call.scope, PROP_KIND, id)?;
            Ok(decide_event(doc.as_ref(), id, action, ts.clone()))
        })
    }

    /// `patch`: frontmatter sets and a decision line on one PROP; see [`PatchInput`].
    ///
    /// # Errors
    /// [`Error::BadTimeZone`]; store errors.
    pub fn patch(&self, call: &Call, input: &PatchInput) -> Result<Outcome> {
        let stem = input.file.trim_end_matches(".md").to_owned();
        let now_zoned = zoned_stamp(call.now_ms, &timezone(call)?)?;
        let updated = stamp_ms(call.now_ms);
        self.k.write(call, |txn| {
            let doc: Option<PropDoc> = if check_prop_file(&format!("{stem}.md")).is_ok() {
                read_doc(txn, &call.scope, PROP_KIND, &stem)?
            } else {
                None
            };
            Ok(decide_patch(doc.as_ref(), input, &now_zoned, updated.clone()))
        })
    }

    /// `proposal.ts metrics [--source=<key>]` over a scope's ledger (read-only): triage
    /// survival and acceptance per autonomous source.
    ///
    /// # Errors
    /// Store errors.
    pub fn metrics(&self, scope: &str, source: Option<&str>) -> Result<MetricsRead> {
        validate_scope(scope)?;
        let lines = ledger_lines(&*self.k.begin_read()?, scope)?;
        Ok(MetricsRead { verdict: super::metrics::metrics_report(&lines, source) })
    }

    /// `resolve-id` over a scope's PROPs (read-only): an exact id or file name, else every PROP
    /// whose number the first `PROP-<digits>` of the input names.
    ///
    /// # Errors
    /// Store errors.
    pub fn resolve_id(&self, scope: &str, input: &str) -> Result<ResolveIdRead> {
        validate_scope(scope)?;
        let props = read_props(&*self.k.begin_read()?, scope)?;
        Ok(ResolveIdRead { verdict: resolve_id(&props, input) })
    }

    /// The index of a scope's proposals, as `proposals-index.json` holds it (read-only), and
    /// upstream's `OK|<n> proposals` line, or `SKIP|no state dir` when the state directory does
    /// not exist and `SKIP|no proposals dir` when it holds no `proposals/` and the store no PROP.
    ///
    /// # Errors
    /// Store errors.
    pub fn index(&self, scope: &str) -> Result<IndexRead> {
        validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let index = self.index_value(&*txn, scope)?;
        let dir = state_dir(scope)?;
        // Upstream skips without the directories it would read; a store holding proposals
        // has them whether or not a mirror wrote `proposals/`.
        let verdict = if !dir.is_dir() {
            "SKIP|no state dir".to_owned()
        } else if index["count"].as_u64() == Some(0) && !dir.join(PROPOSALS_DIR).is_dir() {
            "SKIP|no proposals dir".to_owned()
        } else {
            format!("OK|{} proposals", index["count"])
        };
        Ok(IndexRead { verdict, index })
    }

    fn index_value(&self, txn: &dyn ReadTxn, scope: &str) -> Result<Value> {
        let updated = read_index(txn, scope)?.unwrap_or_default().updated;
        Ok(render_index(&read_props(txn, scope)?, &updated))
    }

    /// The queue of a hermit scope (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn queue(&self, scope: &str) -> Result<QueueDoc> {
        validate_scope(scope)?;
        read_queue(&*self.k.begin_read()?, scope)
    }

    /// `proposals queue`: the pending entries (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn pending(&self, scope: &str) -> Result<QueueRead> {
        Ok(QueueRead { pending: values(&self.queue(scope)?.entries) })
    }

    /// `proposals list`: the pending entries and the index, in one snapshot (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn list(&self, scope: &str) -> Result<ListRead> {
        validate_scope(scope)?;
        let txn = self.k.begin_read()?;
        let micro = values(&read_queue(&*txn, scope)?.entries);
        Ok(ListRead { micro, proposals: self.index_value(&*txn, scope)? })
    }

    /// The ledger lines of a scope, rendered from the log (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn ledger(&self, scope: &str) -> Result<Vec<String>> {
        validate_scope(scope)?;
        ledger_lines(&*self.k.begin_read()?, scope)
    }

    /// `proposals ledger`: each line as JSON (read-only).
    ///
    /// # Errors
    /// Store errors.
    pub fn ledger_rows(&self, scope: &str) -> Result<LedgerRead> {
        let rows = self
            .ledger(scope)?
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| Value::from(l.as_str())))
            .collect();
        Ok(LedgerRead { ledger: rows })
    }
}
