//! The event: one immutable fact in the log, and the domain bodies it can carry.
//!
//! Every field here is a promise to old files: fields are added with `#[serde(default)]` and never
//! renamed. Does not encode or hash; `format.rs` does that.

use serde::{Deserialize, Serialize};

/// Who caused an event: the Claude Code session, the hook, the process and the agent, as far as
/// the caller told us.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// The Claude Code session id, when known.
    #[serde(default)]
    pub session: Option<String>,
    /// The hook or verb that ran (`Stop`, `queue claim`, ...).
    #[serde(default)]
    pub hook: Option<String>,
    /// The operating-system process id of the writer.
    #[serde(default)]
    pub pid: Option<u32>,
    /// A free-form agent name (`hermit`, `moonshine-listen`, ...).
    #[serde(default)]
    pub agent: Option<String>,
}

/// The part of an event that is hashed: everything except its position in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventContent {
    /// When the event was appended, in UTC milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Who appended it.
    pub actor: Actor,
    /// The scope (project, state directory, bundle) the event belongs to.
    pub scope: String,
    /// The caller's idempotency key: a repeated call with the same key is a no-op.
    #[serde(default)]
    pub idem_key: Option<String>,
    /// What happened.
    pub body: Body,
    /// The request an idempotency key is bound to, on the first event of a keyed call (format 2;
    /// absent on every other event, so their bytes are those of format 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Request>,
}

/// The request a call with an idempotency key made: the same key with another request is refused,
/// and a repeat of this one replays `result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The verb the first call ran (`kv put`, `hook claim`), for the refusal's message.
    pub verb: String,
    /// A digest of the verb, its arguments (without the flags that do not change what it does)
    /// and its stdin.
    pub digest: serde_bytes::ByteArray<32>,
    /// The first call's result fields as JSON text, replayed byte for byte by a repeat; absent
    /// when it was over the limit the engine keeps (a repeat then renders the events).
    #[serde(default)]
    pub result: Option<String>,
}

impl Request {
    /// A request record.
    #[must_use]
    pub fn new(verb: String, digest: [u8; 32], result: Option<String>) -> Request {
        Request { verb, digest: serde_bytes::ByteArray::new(digest), result }
    }

    /// The digest as bytes.
    #[must_use]
    pub fn digest(&self) -> [u8; 32] {
        self.digest.into_array()
    }
}

/// One event of the log, as read back and verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Position in the log, from 1.
    pub seq: u64,
    /// Hash of the previous event (the store's genesis hash for seq 1).
    pub prev: [u8; 32],
    /// `blake3::derive_key("hookstate event v1", prev ‖ seq ‖ content)`.
    pub hash: [u8; 32],
    /// The hashed content.
    pub content: EventContent,
}

/// What happened, per domain. New domains add a variant. A kind's shape changes only through a
/// new shape version and an upcaster from the old one (`upcast.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Body {
    /// The core primitives: records, claim queues, counters, sets and capped lists.
    Core(CoreEvent),
    /// loopd turn signals and PM registrations.
    Signals(crate::signals::SignalsEvent),
    /// The claude-management observer state.
    Observer(crate::observer::ObserverEvent),
    /// The moonshine feedback inbox of one project.
    Feedback(crate::feedback::FeedbackEvent),
    /// claude-code-hermit micro-proposals, proposals and their ledger.
    Proposals(crate::proposals::ProposalsEvent),
    /// claude-code-hermit heartbeat alert state: tick counter and the alert ladder.
    Alerts(crate::alerts::AlertsEvent),
    /// claude-code-hermit heartbeat state: budget alerts, monitor runtime, liveness, injection
    /// alert, next-task ack.
    Heartbeat(crate::heartbeat::HeartbeatEvent),
    /// claude-code-hermit session state: runtime.json, tasks, conversations, observations,
    /// hypotheses, the small markers, SHELL.md and the session reports.
    Session(crate::session::SessionEvent),
}

/// How many variants [`Body`] has: the length of the engine's projection table.
pub const BODY_VARIANTS: usize = 8;

impl Body {
    /// The position of this body's variant, `0..BODY_VARIANTS`: the engine's projection table is
    /// indexed by it.
    #[must_use]
    pub fn variant_index(&self) -> usize {
        match self {
            Body::Core(_) => 0,
            Body::Signals(_) => 1,
            Body::Observer(_) => 2,
            Body::Feedback(_) => 3,
            Body::Proposals(_) => 4,
            Body::Alerts(_) => 5,
            Body::Heartbeat(_) => 6,
            Body::Session(_) => 7,
        }
    }

    /// The domain name used by `hookstate log --domain`.
    #[must_use]
    pub fn domain(&self) -> &'static str {
        match self {
            Body::Core(_) => "core",
            Body::Signals(_) => "signals",
            Body::Observer(_) => "observer",
            Body::Feedback(_) => "feedback",
            Body::Proposals(_) => "proposals",
            Body::Alerts(_) => "alerts",
            Body::Heartbeat(_) => "heartbeat",
            Body::Session(_) => "session",
        }
    }

    /// The shape version this build writes for this body's kind: 1, or the kind's
    /// [`Shaped::VERSION`](crate::upcast::Shaped::VERSION) for a kind whose shape changed.
    #[must_use]
    pub fn shape_version(&self) -> u16 {
        use crate::upcast::Shaped as _;
        match self {
            Body::Proposals(crate::proposals::ProposalsEvent::MicroQueued(_)) => {
                crate::proposals::MicroQueued::VERSION
            }
            _ => 1,
        }
    }

    /// The event kind used by `hookstate log --kind`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Body::Core(core) => core.kind(),
            Body::Signals(event) => event.kind(),
            Body::Observer(event) => event.kind(),
            Body::Feedback(event) => event.kind(),
            Body::Proposals(event) => event.kind(),
            Body::Alerts(event) => event.kind(),
            Body::Heartbeat(event) => event.kind(),
            Body::Session(event) => event.kind(),
        }
    }
}

/// Events of the core primitives. JSON values are kept as the caller's exact JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoreEvent {
    /// A record was written; `rev` is its new revision (1 for a new record).
    RecordPut {
        /// Record key.
        key: String,
        /// The value as JSON text.
        value: String,
        /// The revision after this write.
        rev: u64,
    },
    /// An item was added to a queue (or re-added after it was acked).
    ItemPushed {
        /// Queue name.
        queue: String,
        /// Item id, unique among the queue's live items.
        item: String,
        /// The payload as JSON text.
        payload: String,
        /// When set, only a claimer in this session may claim the item.
        for_session: Option<String>,
        /// Deliveries after which an expired or released item is parked.
        max_deliveries: u32,
    },
    /// An item was claimed: a lease with a fencing token.
    ItemClaimed {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
        /// Who holds it.
        holder: String,
        /// The claimer's session, when known.
        session: Option<String>,
        /// The fencing token: the queue's epoch, which rises on every claim.
        token: u64,
        /// When the lease ends, UTC ms.
        lease_until_ms: u64,
        /// Which delivery this is (1 for the first claim).
        delivery: u32,
    },
    /// The holder finished the item; it leaves the queue.
    ItemAcked {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
        /// The token presented.
        token: u64,
    },
    /// The holder extended its lease.
    ItemExtended {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
        /// The token presented.
        token: u64,
        /// The new end of the lease, UTC ms.
        lease_until_ms: u64,
    },
    /// The holder gave the item back before its lease ended.
    ItemReleased {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
        /// The token presented.
        token: u64,
    },
    /// The item reached its delivery limit and was set aside (dead letter).
    ItemParked {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
        /// How many times it was delivered.
        deliveries: u32,
    },
    /// A parked item was put back in the queue with its delivery count reset.
    ItemRedriven {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
    },
    /// A counter moved by `delta`; `value` is the result.
    CounterAdded {
        /// Counter name.
        name: String,
        /// The change.
        delta: i64,
        /// The value after the change.
        value: i64,
    },
    /// A member was added to a dedup set for the first time.
    SetAdded {
        /// Set name.
        set: String,
        /// The member.
        member: String,
    },
    /// A row was appended to a capped list, which keeps its last `cap` rows.
    ListAppended {
        /// List name.
        list: String,
        /// The row as JSON text.
        row: String,
        /// How many rows the list keeps.
        cap: u32,
    },
}

impl CoreEvent {
    /// The queue and item a queue event is about; `None` for the other primitives.
    #[must_use]
    pub fn queue_item(&self) -> Option<(&str, &str)> {
        match self {
            CoreEvent::ItemPushed { queue, item, .. }
            | CoreEvent::ItemClaimed { queue, item, .. }
            | CoreEvent::ItemAcked { queue, item, .. }
            | CoreEvent::ItemExtended { queue, item, .. }
            | CoreEvent::ItemReleased { queue, item, .. }
            | CoreEvent::ItemParked { queue, item, .. }
            | CoreEvent::ItemRedriven { queue, item } => Some((queue, item)),
            _ => None,
        }
    }

    /// The kind name, as `hookstate log --kind` matches it.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            CoreEvent::RecordPut { .. } => "record_put",
            CoreEvent::ItemPushed { .. } => "item_pushed",
            CoreEvent::ItemClaimed { .. } => "item_claimed",
            CoreEvent::ItemAcked { .. } => "item_acked",
            CoreEvent::ItemExtended { .. } => "item_extended",
            CoreEvent::ItemReleased { .. } => "item_released",
            CoreEvent::ItemParked { .. } => "item_parked",
            CoreEvent::ItemRedriven { .. } => "item_redriven",
            CoreEvent::CounterAdded { .. } => "counter_added",
            CoreEvent::SetAdded { .. } => "set_added",
            CoreEvent::ListAppended { .. } => "list_appended",
        }
    }
}
