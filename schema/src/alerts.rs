//! The `alerts` domain (claude-code-hermit heartbeat): precheck's tick counter and the
//! count/suppress/resolve/digest ladder of `state/alert-state.json`, as events, and the document
//! projected from them.
//!
//! The alert-state document is kept as the compact JSON text of the legacy object, keys in file
//! order, so that fields other writers own (precheck's `last_stale_wake_at`, unknown keys)
//! survive every tick, import and export. Does not classify ticks or read files; the engine does.

use serde::{Deserialize, Serialize};

/// Events of the alerts domain. Scope: `hermit:<abs state dir>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AlertsEvent {
    /// precheck counted a (non-peek) tick: `total_ticks` after the increment.
    TickCounted {
        /// The new `total_ticks`.
        total_ticks: i64,
    },
    /// An evaluation tick was classified (`heartbeat.ts alert-state`).
    Ticked {
        /// The whole alert-state object after the tick, as compact JSON text in key order.
        state: String,
        /// The tick's result object (`notifications`, `monitoring_lines`,
        /// `self_eval_proposals`, `heartbeat_result`) as compact JSON text.
        result: String,
    },
    /// `state/alert-state.json` was adopted as it was written.
    StateImported {
        /// The object as compact JSON text in key order.
        state: String,
    },
}

impl AlertsEvent {
    /// The kind name, as `hookstate log --kind` matches it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            AlertsEvent::TickCounted { .. } => "tick_counted",
            AlertsEvent::Ticked { .. } => "ticked",
            AlertsEvent::StateImported { .. } => "state_imported",
        }
    }
}

/// The alert-state object of one hermit state directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertStateDoc {
    /// The object as compact JSON text, keys in file order.
    pub state: String,
}

impl Default for AlertStateDoc {
    /// Upstream's seed template.
    fn default() -> Self {
        AlertStateDoc {
            state: "{\"alerts\":{},\"last_digest_date\":null,\"self_eval\":{},\"total_ticks\":0}"
                .into(),
        }
    }
}
