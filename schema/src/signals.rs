//! The `signals` domain (loopd): PM registrations, per-turn signal records of role sessions and
//! their delivery results, as events, and the documents projected from them.
//!
//! Field names of the documents follow the legacy plugin-store values (`sessionId`, `durationMs`,
//! `isAborted`). Does not resolve bundles or read files.

use serde::{Deserialize, Serialize};

/// Events of the signals domain. Scope: `loopd:<bundle root>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignalsEvent {
    /// A PM session registered for the bundle; the newest registration wins.
    PmRegistered {
        /// Bundle root (absolute path).
        bundle: String,
        /// The PM's session id.
        session: String,
        /// When, as the legacy `at` text (`toISOString`).
        at: String,
    },
    /// A role session finished a main-loop turn.
    TurnSignaled {
        /// The role session.
        session: String,
        /// Bundle root.
        bundle: String,
        /// The worktree the turn ran in.
        cwd: String,
        /// When, as the legacy `at` text.
        at: String,
        /// Main-loop turns of this session so far, this one included.
        turns: u64,
        /// How long the turn took.
        duration_ms: u64,
        /// Why the turn ended (`unknown` when not said).
        reason: String,
        /// Whether the turn was aborted.
        aborted: bool,
        /// The delivery state carried over by an import (`None` for a fresh turn).
        delivered: Option<bool>,
    },
    /// The result of sending a turn's line to the PM.
    DeliveryRecorded {
        /// The role session.
        session: String,
        /// The seq of the `TurnSignaled` event that was sent.
        turn_seq: u64,
        /// Whether the send reached the PM.
        delivered: bool,
    },
    /// A plugin-store key that is not loopd's own, kept so an export writes it back unchanged.
    StoreKeyKept {
        /// The key.
        key: String,
        /// Its value as JSON text.
        json: String,
    },
    /// The serialisation style of the imported plugin-store file.
    StoreStyleSet {
        /// Pretty (2-space) rather than compact.
        pretty: bool,
        /// A newline after the closing brace.
        trailing_newline: bool,
    },
}

impl SignalsEvent {
    /// The kind name, as `hookstate log --kind` matches it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            SignalsEvent::PmRegistered { .. } => "pm_registered",
            SignalsEvent::TurnSignaled { .. } => "turn_signaled",
            SignalsEvent::DeliveryRecorded { .. } => "delivery_recorded",
            SignalsEvent::StoreKeyKept { .. } => "store_key_kept",
            SignalsEvent::StoreStyleSet { .. } => "store_style_set",
        }
    }
}

/// One PM registration, as kept in the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmEntry {
    /// The PM's session id.
    pub session: String,
    /// The legacy `at` text.
    pub at: String,
    /// The registering event.
    pub seq: u64,
}

/// The bundle's PM: the newest registration, with the ones before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmDoc {
    /// Bundle root.
    pub bundle: String,
    /// The current PM.
    pub current: PmEntry,
    /// Earlier registrations, oldest first (bounded).
    pub history: Vec<PmEntry>,
    /// The seq that first wrote this bundle's key: plugin-store key order.
    pub first_seq: u64,
}

/// The latest signal record of one role session, in the legacy value's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalDoc {
    /// Bundle root.
    pub bundle: String,
    /// Worktree.
    pub cwd: String,
    /// The legacy `at` text.
    pub at: String,
    /// Turns so far.
    pub turns: u64,
    /// Duration of the turn in ms.
    pub duration_ms: u64,
    /// Why the turn ended.
    pub reason: String,
    /// Whether it was aborted.
    pub aborted: bool,
    /// `None` until a delivery result is recorded for this turn.
    pub delivered: Option<bool>,
    /// The seq of the turn's event.
    pub turn_seq: u64,
    /// The seq that first wrote this session's key: plugin-store key order.
    pub first_seq: u64,
    /// The seq that last changed the record (a turn or a delivery result).
    #[serde(default)]
    pub updated_seq: u64,
}

/// Failed sends of one role session, counted against one PM registration: a newer PM starts the
/// count again, so a stale PM no longer silences the session for good.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendsDoc {
    /// Failed sends to the PM registered at `pm_seq`: distinct turns whose line did not reach it.
    pub failed: u32,
    /// The registration the count belongs to.
    pub pm_seq: u64,
    /// The seq of the last turn counted as failed: a repeated report of that turn (a retried
    /// report) is not counted again.
    #[serde(default)]
    pub last_failed_turn_seq: u64,
}

/// A plugin-store key kept as it was imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptKeyDoc {
    /// Its value as JSON text.
    pub json: String,
    /// The seq that first wrote it: plugin-store key order.
    pub first_seq: u64,
    /// The seq that last changed it.
    #[serde(default)]
    pub updated_seq: u64,
}

/// How the plugin-store file was serialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStyle {
    /// Pretty (2-space) rather than compact.
    pub pretty: bool,
    /// A newline after the closing brace.
    pub trailing_newline: bool,
}

impl Default for StoreStyle {
    /// `JSON.stringify(store)`: compact, no trailing newline.
    fn default() -> Self {
        StoreStyle { pretty: false, trailing_newline: false }
    }
}
