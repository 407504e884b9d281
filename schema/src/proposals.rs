//! The `proposals` domain (claude-code-hermit): the micro-proposal queue, the proposal ledger
//! and its imported lines, as events, and the documents projected from them.
//!
//! Queue entries are kept as the JSON text of each legacy entry object, so that key order and
//! fields written by other hands survive an import and an export. Does not decide, format ids or
//! read files; the engine does.

use serde::{Deserialize, Serialize};

use crate::signals::StoreStyle;

/// Document kind of the micro-proposal queue (one per scope, id [`QUEUE_ID`]).
pub const QUEUE_KIND: &str = "proposals.queue";
/// The one id of the queue document.
pub const QUEUE_ID: &str = "queue";
/// Document kind of a PROP file (id: the proposal id).
pub const PROP_KIND: &str = "proposals.prop";

/// The frontmatter of a PROP file (between a leading `---` line and the next `---`): its
/// `key: value` lines, trimmed, in order, and the offset of the closing `---`'s newline. `None`
/// when the text has no frontmatter. Values are raw (a bare word, or JSON text). Lines may end
/// in CRLF (a file saved by an editor that writes them), as upstream's line-anchored patterns
/// read them.
#[must_use]
pub fn frontmatter(text: &str) -> Option<(Vec<(String, String)>, usize)> {
    let rest = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n"))?;
    let end = rest.find("\n---")?;
    let lines = rest[..end]
        .lines()
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned())))
        .collect();
    Some((lines, text.len() - rest.len() + end))
}

/// Events of the proposals domain. Scope: `hermit:<abs state dir>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProposalsEvent {
    /// A micro-proposal was queued; it also stands for a `micro-queued` ledger line. Shape 2
    /// ([`MicroQueued`]); shape 1 is read through [`micro_queued_v1_to_v2`].
    #[serde(
        serialize_with = "crate::upcast::serialize",
        deserialize_with = "crate::upcast::deserialize"
    )]
    MicroQueued(MicroQueued),
    /// A micro-proposal left the queue; it also stands for a `micro-resolved` ledger line.
    MicroResolved {
        /// The entry's id.
        id: String,
        /// approved, rejected, answered or expired.
        action: String,
        /// The entry's question (the ledger line carries it).
        question: String,
        /// The resolved answer label, when one was given.
        answer: Option<String>,
        /// utcISOStamp of the resolution.
        ts: String,
        /// The channel the answer came from, when the caller said.
        channel: Option<String>,
    },
    /// An entry's `follow_up_count` was set (a nudge, or a brief-cycle bump).
    MicroNudged {
        /// The entry's id.
        id: String,
        /// The new count.
        count: i64,
    },
    /// A non-pending entry was pruned by a brief-cycle (no ledger line).
    MicroDropped {
        /// The entry's id (the first entry with it is removed).
        id: String,
    },
    /// The queue file was imported, or a mirror adopted an outside change to it: it replaces
    /// the queue.
    QueueImported {
        /// The top-level object as JSON text, with `pending` holding `[]`.
        top: String,
        /// Each entry object of `pending` as JSON text, in order.
        entries: Vec<String>,
        /// The style the file was written in (`None`: upstream's pretty JSON with a newline).
        #[serde(default)]
        style: Option<StoreStyle>,
        /// The file's exact text, when rendering the queue in its style does not give its
        /// bytes back (a hand-spaced seed template): written back until the queue changes.
        #[serde(default)]
        verbatim: Option<String>,
    },
    /// One ledger line adopted as it was written (without its newline).
    LedgerLineImported {
        /// The line.
        line: String,
    },
    /// A PROP file was adopted as it was written.
    PropImported {
        /// `PROP-….md`.
        file: String,
        /// The whole file.
        text: String,
    },
    /// A PROP file was created or its status moved: its whole new text.
    PropWritten {
        /// `PROP-….md`.
        file: String,
        /// The whole file.
        text: String,
        /// toISOString of the write: the index's `updated`.
        updated: String,
    },
    /// A proposal was created: the `created` ledger line.
    PropCreated {
        /// The full PROP id.
        id: String,
        /// `Source:` (default manual).
        source: String,
        /// `Category:`.
        category: String,
        /// `Tags:`.
        tags: Vec<String>,
        /// utcISOStamp.
        ts: String,
    },
    /// The first response to a proposal: the `responded` ledger line.
    PropResponded {
        /// The full PROP id.
        id: String,
        /// accept, defer or dismiss.
        action: String,
        /// utcISOStamp.
        ts: String,
    },
    /// A proposal was resolved: the `resolved` ledger line.
    PropResolved {
        /// The full PROP id.
        id: String,
        /// utcISOStamp.
        ts: String,
    },
    /// The index file was adopted: its `updated` stamp is kept until the next PROP write.
    IndexImported {
        /// The index's `updated`.
        updated: String,
    },
}

impl ProposalsEvent {
    /// The kind name, as `hookstate log --kind` matches it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            ProposalsEvent::MicroQueued(_) => "micro_queued",
            ProposalsEvent::MicroResolved { .. } => "micro_resolved",
            ProposalsEvent::MicroNudged { .. } => "micro_nudged",
            ProposalsEvent::MicroDropped { .. } => "micro_dropped",
            ProposalsEvent::QueueImported { .. } => "queue_imported",
            ProposalsEvent::LedgerLineImported { .. } => "ledger_line_imported",
            ProposalsEvent::PropImported { .. } => "prop_imported",
            ProposalsEvent::PropWritten { .. } => "prop_written",
            ProposalsEvent::PropCreated { .. } => "prop_created",
            ProposalsEvent::PropResponded { .. } => "prop_responded",
            ProposalsEvent::PropResolved { .. } => "prop_resolved",
            ProposalsEvent::IndexImported { .. } => "index_imported",
        }
    }
}

/// A queued micro-proposal (`micro_queued`, shape 2): the payload's fields as the queueing
/// decided them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MicroQueued {
    /// `MP-YYYYMMDD-N`.
    pub id: String,
    /// The tier (forced to 1 for an ask).
    pub tier: i64,
    /// The question, the dedup key among pending entries.
    pub question: String,
    /// 2–4 answer labels, when given.
    pub options: Option<Vec<String>>,
    /// The payload's `on_resolve` exactly as given: `Some` makes the entry an ask (the ledger
    /// line says `"kind":"ask"`), and the skill invocation run after an answer, with an
    /// `{answer}` placeholder, is its text when not empty.
    pub on_resolve: Option<String>,
    /// utcISOStamp of the queueing.
    pub ts: String,
}

impl MicroQueued {
    /// Whether the entry is an ask: the payload had an `on_resolve`, even an empty one.
    #[must_use]
    pub fn is_ask(&self) -> bool {
        self.on_resolve.is_some()
    }

    /// The skill invocation the queue entry keeps: `on_resolve` when it is not empty.
    #[must_use]
    pub fn skill(&self) -> Option<&str> {
        self.on_resolve.as_deref().filter(|text| !text.is_empty())
    }
}

impl crate::upcast::Shaped for MicroQueued {
    const DOMAIN: &'static str = "proposals";
    const KIND: &'static str = "micro_queued";
    const VERSION: u16 = 2;
}

/// `micro_queued` shape 1: the ask flag and the skill text apart, the text already emptied of
/// an empty `on_resolve`, so `ask: false` with a skill could be stored and an empty
/// `on_resolve` was told only by the flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MicroQueuedV1 {
    id: String,
    tier: i64,
    question: String,
    options: Option<Vec<String>>,
    on_resolve: Option<String>,
    ask: bool,
    ts: String,
}

/// The upcaster of `micro_queued` from shape 1: `on_resolve` becomes the payload's as given
/// (an ask without a skill had `""`), and `ask` goes, since it is `on_resolve.is_some()`. A
/// shape-1 skill without the flag (no build wrote one) reads as an ask: its queue entry ran the
/// skill after an answer, which only an ask does.
///
/// # Errors
/// When the fields are not shape 1's.
pub fn micro_queued_v1_to_v2(
    fields: crate::upcast::Fields,
) -> Result<crate::upcast::Fields, String> {
    let old: MicroQueuedV1 = fields.decode()?;
    let on_resolve = match (old.ask, old.on_resolve) {
        (true, None) => Some(String::new()),
        (_, text) => text,
    };
    let new = MicroQueued {
        id: old.id,
        tier: old.tier,
        question: old.question,
        options: old.options,
        on_resolve,
        ts: old.ts,
    };
    crate::upcast::Fields::encode(&new)
}

/// The micro-proposal queue of one state directory, as the legacy file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDoc {
    /// The top-level object as JSON text, with `pending` holding `[]`.
    pub top: String,
    /// Each entry object as JSON text, in queue order.
    pub entries: Vec<String>,
    /// The style the file was written in (`None`: upstream's pretty JSON with a newline).
    #[serde(default)]
    pub style: Option<StoreStyle>,
    /// The adopted file's exact text while the queue is unchanged since, when rendering it in
    /// its style would not give those bytes back.
    #[serde(default)]
    pub verbatim: Option<String>,
}

impl Default for QueueDoc {
    /// The seed template `{"pending": []}`.
    fn default() -> Self {
        QueueDoc {
            top: "{\"pending\":[]}".into(),
            entries: Vec::new(),
            style: None,
            verbatim: None,
        }
    }
}

/// The next MP counter of one date (`YYYYMMDD`): one more than the highest queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpSeqDoc {
    /// The N the next id of this date gets.
    pub next: u64,
}

/// One PROP file, as written, with what decisions need from its frontmatter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PropDoc {
    /// `PROP-….md`.
    pub file: String,
    /// The whole file.
    pub text: String,
    /// The frontmatter's `status`, when it has one.
    pub status: Option<String>,
    /// Whether a first response was recorded (frontmatter `responded: true`).
    pub responded: bool,
    /// The `NNN` of `PROP-NNN`.
    pub number: u64,
    /// A `responded` ledger line was recorded for it (so a repeat records none).
    #[serde(default)]
    pub responded_logged: bool,
}

/// The proposals index's `updated` stamp.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDoc {
    /// toISOString of the last PROP write (or the imported index's).
    pub updated: String,
}
