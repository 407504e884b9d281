//! The `proposals` domain (claude-code-hermit): the micro-proposal queue, the proposal ledger
//! and its imported lines, as events, and the documents projected from them.
//!
//! Queue entries are kept as the JSON text of each legacy entry object, so that key order and
//! fields written by other hands survive an import and an export. Does not decide, format ids or
//! read files; the engine does.

use serde::{Deserialize, Serialize};

/// Events of the proposals domain. Scope: `hermit:<abs state dir>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProposalsEvent {
    /// A micro-proposal was queued; it also stands for a `micro-queued` ledger line.
    MicroQueued {
        /// `MP-YYYYMMDD-N`.
        id: String,
        /// The tier (forced to 1 when `on_resolve` was given).
        tier: i64,
        /// The question, the dedup key among pending entries.
        question: String,
        /// 2–4 answer labels, when given.
        options: Option<Vec<String>>,
        /// The skill invocation run after an answer, with an `{answer}` placeholder.
        on_resolve: Option<String>,
        /// `on_resolve` was present in the payload (the ledger line says `"kind":"ask"`).
        ask: bool,
        /// utcISOStamp of the queueing.
        ts: String,
    },
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
    /// The queue file was imported: it replaces the queue.
    QueueImported {
        /// The top-level object as JSON text, with `pending` holding `[]`.
        top: String,
        /// Each entry object of `pending` as JSON text, in order.
        entries: Vec<String>,
    },
    /// One ledger line adopted as it was written (without its newline).
    LedgerLineImported {
        /// The line.
        line: String,
    },
}

impl ProposalsEvent {
    /// The kind name, as `hookstate log --kind` matches it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            ProposalsEvent::MicroQueued { .. } => "micro_queued",
            ProposalsEvent::MicroResolved { .. } => "micro_resolved",
            ProposalsEvent::MicroNudged { .. } => "micro_nudged",
            ProposalsEvent::MicroDropped { .. } => "micro_dropped",
            ProposalsEvent::QueueImported { .. } => "queue_imported",
            ProposalsEvent::LedgerLineImported { .. } => "ledger_line_imported",
        }
    }
}

/// The micro-proposal queue of one state directory, as the legacy file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueDoc {
    /// The top-level object as JSON text, with `pending` holding `[]`.
    pub top: String,
    /// Each entry object as JSON text, in queue order.
    pub entries: Vec<String>,
}

impl Default for QueueDoc {
    /// The seed template `{"pending": []}`.
    fn default() -> Self {
        QueueDoc { top: "{\"pending\":[]}".into(), entries: Vec::new() }
    }
}

/// The next MP counter of one date (`YYYYMMDD`): one more than the highest queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MpSeqDoc {
    /// The N the next id of this date gets.
    pub next: u64,
}
