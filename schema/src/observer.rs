//! The `observer` domain (claude-management): the capped window of observed rows, turn counters,
//! sweeps that subtract what they read, delivered finding keys, and the pending findings text with
//! its compare-and-clear version.
//!
//! The document's JSON field names follow the legacy `$.state` keys. Does not clip text or
//! format findings; the engine does.

use serde::{Deserialize, Serialize};

/// One compacted row of a main-loop turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedRow {
    /// The turn it belongs to.
    pub turn: u64,
    /// `user`, `assistant`, `tool_use` or `tool_error`.
    pub kind: String,
    /// Trimmed, clipped text.
    pub text: String,
}

/// Events of the observer domain. Scope: `observer:<session or project>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObserverEvent {
    /// Rows observed (already clipped); `follow_ups` user prompts followed an assistant row.
    RowsAppended {
        /// The rows, in order.
        rows: Vec<ObservedRow>,
        /// How many of them count as user follow-ups.
        follow_ups: u64,
    },
    /// A main-loop turn completed.
    TurnCompleted,
    /// The inbox file shrank below the offset; reading starts again from 0.
    InboxReset,
    /// A sweep's model call answered: subtract what it read, move the offset, record the kept
    /// keys and the merged pending text.
    SweepCommitted {
        /// `turnsSinceSweep` the sweep read at its start.
        read_turns: u64,
        /// `userFollowUps` the sweep read at its start.
        read_follow_ups: u64,
        /// The inbox length the sweep consumed.
        inbox_offset: u64,
        /// Finding keys kept (now delivered).
        delivered: Vec<String>,
        /// The pending text after merging, or `None` when nothing was kept.
        pending: Option<String>,
    },
    /// The pending text was injected and cleared by compare-and-clear.
    PendingCleared,
    /// The whole state was imported from a legacy export.
    StateImported {
        /// The imported state.
        state: ObserverState,
        /// How the imported file was serialised, so an export writes it back the same way.
        style: crate::signals::StoreStyle,
    },
}

impl ObserverEvent {
    /// The kind name, as `hookstate log --kind` matches it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            ObserverEvent::RowsAppended { .. } => "rows_appended",
            ObserverEvent::TurnCompleted => "turn_completed",
            ObserverEvent::InboxReset => "inbox_reset",
            ObserverEvent::SweepCommitted { .. } => "sweep_committed",
            ObserverEvent::PendingCleared => "pending_cleared",
            ObserverEvent::StateImported { .. } => "state_imported",
        }
    }
}

/// The observer state, in the legacy key order and names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObserverState {
    /// Recent rows.
    #[serde(default)]
    pub buffer: Vec<ObservedRow>,
    /// Main-loop turns completed.
    #[serde(default)]
    pub turn: u64,
    /// Turns since the last answered sweep.
    #[serde(default, rename = "turnsSinceSweep")]
    pub turns_since_sweep: u64,
    /// User prompts that followed an assistant row since the last sweep.
    #[serde(default, rename = "userFollowUps")]
    pub user_follow_ups: u64,
    /// Finding keys already handed over (bounded).
    #[serde(default)]
    pub delivered: Vec<String>,
    /// Inbox characters already consumed.
    #[serde(default, rename = "inboxOffset")]
    pub inbox_offset: u64,
    /// Findings text waiting for the next prompt.
    #[serde(default)]
    pub pending: Option<String>,
}

/// The stored observer document: the legacy state plus the version of `pending`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserverDoc {
    /// The legacy state.
    pub state: ObserverState,
    /// The seq that last changed `pending` (0 when never): `pending clear` must present it.
    pub pending_version: u64,
    /// How an export serialises the state: the imported file's style, if any.
    #[serde(default)]
    pub style: Option<crate::signals::StoreStyle>,
    /// The seq that last changed the state.
    #[serde(default)]
    pub updated_seq: u64,
}
