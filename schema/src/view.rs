//! View rows: the derived state that projections keep, and the keys they are stored under.
//!
//! Views are caches of the log; any row here can be rebuilt by replaying events. Does not
//! project events; the engine's `project` module does.

use serde::{Deserialize, Serialize};

/// Where a claim-queue item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ItemState {
    /// Waiting to be claimed.
    Ready,
    /// Leased to a holder (the lease may have run out; then it is eligible again).
    Claimed,
    /// Set aside after too many deliveries; only `redrive` brings it back.
    Parked,
}

impl ItemState {
    /// Lower-case name for output.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ItemState::Ready => "ready",
            ItemState::Claimed => "claimed",
            ItemState::Parked => "parked",
        }
    }
}

/// The address of one view row. Every string part is a validated id, so none holds a NUL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViewKey {
    /// A record with revision.
    Record {
        /// Scope.
        scope: String,
        /// Record key.
        key: String,
    },
    /// One live item of a claim queue.
    Item {
        /// Scope.
        scope: String,
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
    },
    /// A queue's epoch and depth counts.
    QueueMeta {
        /// Scope.
        scope: String,
        /// Queue name.
        queue: String,
    },
    /// A counter.
    Counter {
        /// Scope.
        scope: String,
        /// Counter name.
        name: String,
    },
    /// One member of a dedup set.
    SetMember {
        /// Scope.
        scope: String,
        /// Set name.
        set: String,
        /// Member.
        member: String,
    },
    /// A capped list.
    List {
        /// Scope.
        scope: String,
        /// List name.
        name: String,
    },
    /// A domain's document: one row per (domain kind, id) in a scope. Domains keep their typed
    /// rows here (as JSON text of a schema type), so adding a domain adds no key variant.
    Doc {
        /// Scope.
        scope: String,
        /// The domain's row kind (`feedback.comment`, `signals.pm`, ...).
        kind: String,
        /// The row's id within its kind.
        id: String,
    },
    /// An idempotency key and the events its first call appended.
    Idem {
        /// Scope.
        scope: String,
        /// The caller's key.
        key: String,
    },
}

/// One view row's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ViewRow {
    /// A record's value and revision.
    Record {
        /// JSON text.
        value: String,
        /// Revision, from 1.
        rev: u64,
    },
    /// A live queue item.
    Item(Item),
    /// A queue's epoch (the last token handed out) and counts.
    QueueMeta(QueueMeta),
    /// A counter's value.
    Counter {
        /// Current value.
        value: i64,
    },
    /// A set member and the seq that added it.
    SetMember {
        /// The event that added the member.
        seq: u64,
    },
    /// A capped list's rows, oldest first.
    List {
        /// JSON text of each row.
        rows: Vec<String>,
    },
    /// A domain document, as the JSON text of the domain's schema type.
    Doc {
        /// JSON text.
        json: String,
    },
    /// The events appended by the first call that carried an idempotency key.
    Idem {
        /// First seq of that call.
        first_seq: u64,
        /// Last seq of that call.
        last_seq: u64,
        /// When that call ran, UTC ms: the key is bound to it until it expires.
        #[serde(default)]
        at_ms: u64,
    },
}

/// A live claim-queue item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// JSON text.
    pub payload: String,
    /// Only a claimer in this session may claim it.
    pub for_session: Option<String>,
    /// Deliveries after which it is parked.
    pub max_deliveries: u32,
    /// Ready, claimed or parked.
    pub state: ItemState,
    /// How many times it has been claimed since it was pushed or redriven.
    pub deliveries: u32,
    /// The token of the current or last claim (0 before the first).
    pub token: u64,
    /// The current or last holder.
    pub holder: Option<String>,
    /// The current or last holder's session.
    pub holder_session: Option<String>,
    /// End of the current lease, UTC ms (0 when not claimed).
    pub lease_until_ms: u64,
    /// The seq that pushed it: queue order.
    pub pushed_seq: u64,
}

/// A queue's epoch and depth counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueMeta {
    /// The last fencing token handed out; the next claim gets `epoch + 1`.
    pub epoch: u64,
    /// Items ready to claim.
    pub ready: u64,
    /// Items leased (some leases may have run out).
    pub claimed: u64,
    /// Items parked.
    pub parked: u64,
    /// Items acked over the queue's life.
    pub acked: u64,
}
