//! The `heartbeat` half of the hermit `alerts` domain (claude-code-hermit): budget alerts, the
//! heartbeat monitor's runtime record and liveness, the injection alert, and the next-task ack,
//! as events, and the documents projected from them.
//!
//! Every legacy file is kept as its exact text, so key order, unknown keys and the file's
//! pretty or compact layout survive an import and an export. Does not decide or read files; the
//! engine does.

use serde::{Deserialize, Serialize};

/// Events of the heartbeat domain. Scope: `hermit:<abs state dir>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeartbeatEvent {
    /// A legacy file was adopted as it was written (import, or a mirror adopting an outside
    /// write).
    FileAdopted {
        /// The file's name (`budget-alerts.json`, `NEXT-TASK.md`, ...).
        file: String,
        /// The whole file.
        text: String,
    },
    /// A verb wrote a legacy file whole (monitor runtime, liveness, injection alert, runtime
    /// fields, the next-task queue).
    FileWritten {
        /// The file's name.
        file: String,
        /// The whole new file.
        text: String,
        /// The verb that wrote it (`monitor start-commit`, `runtime set`, ...).
        why: String,
    },
    /// A legacy file was removed (liveness on re-arm and stop, the queue consumed).
    FileRemoved {
        /// The file's name.
        file: String,
        /// The verb that removed it.
        why: String,
    },
    /// A budget alert was created (create-only: an existing key is never reset).
    BudgetCreated {
        /// `budget-<level>:<period>:<period key>`.
        key: String,
        /// The entry object as compact JSON text.
        entry: String,
    },
    /// A budget alert's send was confirmed: `notified` became true.
    BudgetNotified {
        /// The alert key.
        key: String,
    },
    /// A budget alert of a past period was removed.
    BudgetReaped {
        /// The alert key.
        key: String,
    },
    /// The next-task ack parked the idle session (`waiting`, `conservative_pickup`).
    NextTaskParked {
        /// toISOString of the ack: `waiting_since`.
        waiting_since: String,
        /// localISOStamp of the ack: `updated_at`.
        updated_at: String,
    },
}

impl HeartbeatEvent {
    /// The kind name, as `hookstate log --kind` matches it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            HeartbeatEvent::FileAdopted { .. } => "file_adopted",
            HeartbeatEvent::FileWritten { .. } => "file_written",
            HeartbeatEvent::FileRemoved { .. } => "file_removed",
            HeartbeatEvent::BudgetCreated { .. } => "budget_created",
            HeartbeatEvent::BudgetNotified { .. } => "budget_notified",
            HeartbeatEvent::BudgetReaped { .. } => "budget_reaped",
            HeartbeatEvent::NextTaskParked { .. } => "next_task_parked",
        }
    }
}

/// One legacy file of the heartbeat layout, as its exact text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDoc {
    /// The whole file.
    pub text: String,
}

/// How many times `runtime.json` or `sessions/NEXT-TASK.md` changed in a scope: part of the
/// next-task token, so a change that is later undone still refuses an old token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextTaskRevDoc {
    /// Writes and removals of either file so far.
    pub rev: u64,
}
