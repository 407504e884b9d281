//! The core primitives' rules: records with revision, claim queues with leases and fencing
//! tokens, counters, dedup sets and capped lists.
//!
//! Every function here is a pure decision over rows already read: it returns the events to
//! append, the caller's result, or a refusal. Does not read or write the store, or read a clock.

use hookstate_schema::{CoreEvent, Item, ItemState, QueueMeta};
use serde_json::{json, Map, Value};

use crate::kernel::call::{fields, Refusal};

/// A write the caller asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Put a record (`kv put`).
    KvPut {
        /// Record key.
        key: String,
        /// JSON text.
        value: String,
        /// The condition on the current revision.
        expect: Expect,
    },
    /// Add an item to a queue (`queue push`).
    QueuePush {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
        /// JSON text.
        payload: String,
        /// Only this session may claim it.
        for_session: Option<String>,
        /// Deliveries before parking.
        max_deliveries: u32,
    },
    /// Claim the next eligible item, or a named one (`queue claim`).
    QueueClaim {
        /// Queue name.
        queue: String,
        /// A named item, or the next eligible one when `None`.
        item: Option<String>,
        /// Who claims.
        holder: String,
        /// Lease length.
        lease_ms: u64,
    },
    /// Finish a claimed item (`queue ack`).
    QueueAck {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
        /// The fencing token of the claim.
        token: u64,
    },
    /// Extend a lease (`queue extend`).
    QueueExtend {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
        /// The fencing token of the claim.
        token: u64,
        /// New lease length from now.
        lease_ms: u64,
    },
    /// Give a claimed item back (`queue release`).
    QueueRelease {
        /// Queue name.
        queue: String,
        /// Item id.
        item: String,
        /// The fencing token of the claim.
        token: u64,
    },
    /// Put parked items back (`queue redrive`).
    QueueRedrive {
        /// Queue name.
        queue: String,
        /// One item, or every parked item when `None`.
        item: Option<String>,
    },
    /// Add to a counter (`counter add`).
    CounterAdd {
        /// Counter name.
        name: String,
        /// The change.
        delta: i64,
    },
    /// Add a member to a dedup set (`set add`).
    SetAdd {
        /// Set name.
        set: String,
        /// Member.
        member: String,
    },
    /// Append a row to a capped list (`list append`).
    ListAppend {
        /// List name.
        list: String,
        /// JSON text.
        row: String,
        /// Rows kept.
        cap: u32,
    },
}

/// The condition a record put places on the current revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Write whatever the current revision.
    Any,
    /// Write only if the record does not exist.
    Create,
    /// Write only if the current revision is this one.
    Rev(u64),
}

/// What a decision wants done.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Events to append, in order.
    pub(crate) events: Vec<CoreEvent>,
    /// Fields of the caller's result.
    pub(crate) result: Map<String, Value>,
    /// Set when the answer is "no".
    pub(crate) refusal: Option<Refusal>,
}

pub(crate) fn refuse(reason: &'static str, message: String, details: Value) -> Decision {
    Decision { refusal: Some(Refusal::new(reason, message, details)), ..Decision::default() }
}

/// Decides a record put given the current `(value, rev)`.
pub(crate) fn decide_put(
    current_rev: Option<u64>,
    key: &str,
    value: &str,
    expect: Expect,
) -> Decision {
    let rev = current_rev.unwrap_or(0);
    match (expect, current_rev) {
        (Expect::Create, Some(found)) => refuse(
            "exists",
            format!("record {key} already exists at revision {found}"),
            json!({ "key": key, "rev": found }),
        ),
        (Expect::Rev(want), _) if want != rev => refuse(
            "rev_mismatch",
            format!("record {key} is at revision {rev}, not {want}"),
            json!({ "key": key, "rev": rev, "expected_rev": want }),
        ),
        _ => Decision {
            events: vec![CoreEvent::RecordPut {
                key: key.into(),
                value: value.into(),
                rev: rev + 1,
            }],
            result: fields(json!({ "key": key, "rev": rev + 1 })),
            refusal: None,
        },
    }
}

/// Decides a push given the item's current row.
pub(crate) fn decide_push(current: Option<&Item>, live_items: u64, cmd: &Command) -> Decision {
    let Command::QueuePush { queue, item, payload, for_session, max_deliveries } = cmd else {
        return Decision::default();
    };
    if let Some(existing) = current {
        return refuse(
            "exists",
            format!("item {item} is already in queue {queue} ({})", existing.state.as_str()),
            json!({ "queue": queue, "item": item, "state": existing.state.as_str() }),
        );
    }
    if live_items >= crate::kernel::limits::QUEUE_ITEMS_MAX {
        return refuse(
            "queue_full",
            format!(
                "queue {queue} holds {live_items} items, limit is {}",
                crate::kernel::limits::QUEUE_ITEMS_MAX
            ),
            json!({ "queue": queue, "items": live_items }),
        );
    }
    Decision {
        events: vec![CoreEvent::ItemPushed {
            queue: queue.clone(),
            item: item.clone(),
            payload: payload.clone(),
            for_session: for_session.clone(),
            max_deliveries: *max_deliveries,
        }],
        result: fields(json!({ "queue": queue, "item": item })),
        refusal: None,
    }
}

/// Who is asking for a claim, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claimer<'a> {
    pub(crate) holder: &'a str,
    pub(crate) session: Option<&'a str>,
    pub(crate) lease_ms: u64,
    pub(crate) now_ms: u64,
}

fn lease_live(item: &Item, now_ms: u64) -> bool {
    item.state == ItemState::Claimed && now_ms < item.lease_until_ms
}

fn addressed_elsewhere(item: &Item, session: Option<&str>) -> bool {
    item.for_session.as_deref().is_some_and(|wanted| Some(wanted) != session)
}

/// Whether claim-next at `now_ms` would hand `item` to a claimer in `session` when it reaches
/// it: neither parked, held by a running lease, addressed to another session nor exhausted (an
/// exhausted one is parked instead).
pub(crate) fn grantable(item: &Item, now_ms: u64, session: Option<&str>) -> bool {
    item.state != ItemState::Parked
        && !lease_live(item, now_ms)
        && !addressed_elsewhere(item, session)
        && !exhausted(item)
}

/// An expired claim that already used up its deliveries is parked instead of handed out again.
fn exhausted(item: &Item) -> bool {
    item.state == ItemState::Claimed && item.deliveries >= item.max_deliveries
}

fn park(queue: &str, id: &str, item: &Item) -> CoreEvent {
    CoreEvent::ItemParked { queue: queue.into(), item: id.into(), deliveries: item.deliveries }
}

fn grant(queue: &str, id: &str, item: &Item, meta: &QueueMeta, who: &Claimer<'_>) -> CoreEvent {
    CoreEvent::ItemClaimed {
        queue: queue.into(),
        item: id.into(),
        holder: who.holder.into(),
        session: who.session.map(str::to_owned),
        token: meta.epoch + 1,
        lease_until_ms: who.now_ms.saturating_add(who.lease_ms),
        delivery: item.deliveries.saturating_add(1),
    }
}

fn claim_result(event: &CoreEvent, payload: &str) -> Map<String, Value> {
    let mut result = render(event);
    result.insert("claimed".into(), Value::Bool(true));
    let payload = serde_json::from_str(payload).unwrap_or(Value::String(payload.into()));
    result.insert("payload".into(), payload);
    result
}

/// Decides a claim of the next eligible item. `items` are the queue's live items in push order.
pub(crate) fn decide_claim_next(
    queue: &str,
    items: &[(String, Item)],
    meta: &QueueMeta,
    who: &Claimer<'_>,
    events_max: usize,
) -> Decision {
    let mut decision = Decision::default();
    for (id, item) in items {
        if decision.events.len() + 1 >= events_max {
            break;
        }
        if item.state == ItemState::Parked
            || lease_live(item, who.now_ms)
            || addressed_elsewhere(item, who.session)
        {
            continue;
        }
        if exhausted(item) {
            decision.events.push(park(queue, id, item));
            continue;
        }
        let event = grant(queue, id, item, meta, who);
        decision.result = claim_result(&event, &item.payload);
        decision.events.push(event);
        return decision;
    }
    decision.result = fields(json!({ "queue": queue, "claimed": false, "item": null }));
    decision
}

/// Decides a claim of one named item.
pub(crate) fn decide_claim_item(
    queue: &str,
    id: &str,
    current: Option<&Item>,
    meta: &QueueMeta,
    who: &Claimer<'_>,
) -> Decision {
    let Some(item) = current else {
        return not_found(queue, id);
    };
    if item.state == ItemState::Parked {
        return refuse(
            "parked",
            format!("item {id} of queue {queue} is parked after {} deliveries", item.deliveries),
            json!({ "queue": queue, "item": id, "deliveries": item.deliveries }),
        );
    }
    if addressed_elsewhere(item, who.session) {
        return refuse(
            "other_session",
            format!("item {id} of queue {queue} is addressed to another session"),
            json!({ "queue": queue, "item": id }),
        );
    }
    if lease_live(item, who.now_ms) {
        return held(queue, id, item);
    }
    if exhausted(item) {
        let mut decision = refuse(
            "parked",
            format!("item {id} of queue {queue} is parked after {} deliveries", item.deliveries),
            json!({ "queue": queue, "item": id, "deliveries": item.deliveries }),
        );
        decision.events.push(park(queue, id, item));
        return decision;
    }
    let event = grant(queue, id, item, meta, who);
    Decision { result: claim_result(&event, &item.payload), events: vec![event], refusal: None }
}

fn not_found(queue: &str, id: &str) -> Decision {
    refuse(
        "not_found",
        format!("item {id} is not in queue {queue}"),
        json!({ "queue": queue, "item": id }),
    )
}

fn held(queue: &str, id: &str, item: &Item) -> Decision {
    let holder = item.holder.clone().unwrap_or_default();
    refuse(
        "held",
        format!("item {id} of queue {queue} is held by {holder} (token {})", item.token),
        json!({
            "queue": queue, "item": id, "holder": holder, "token": item.token,
            "lease_until_ms": item.lease_until_ms,
        }),
    )
}

/// Checks that `token` is the item's current claim; `Err` is the refusal.
fn check_token(
    queue: &str,
    id: &str,
    current: Option<&Item>,
    token: u64,
) -> Result<Item, Box<Decision>> {
    let Some(item) = current else {
        return Err(Box::new(not_found(queue, id)));
    };
    if item.state != ItemState::Claimed || item.token != token {
        let holder = if item.state == ItemState::Claimed { item.holder.clone() } else { None };
        return Err(Box::new(refuse(
            "stale_token",
            format!(
                "token {token} for item {id} of queue {queue} is stale (current token {}, {})",
                item.token,
                item.state.as_str()
            ),
            json!({
                "queue": queue, "item": id, "token": token, "current_token": item.token,
                "state": item.state.as_str(), "holder": holder,
            }),
        )));
    }
    Ok(item.clone())
}

/// Decides an ack, extend or release presented with `token`.
pub(crate) fn decide_holder(cmd: &Command, current: Option<&Item>, now_ms: u64) -> Decision {
    let (queue, id, token) = match cmd {
        Command::QueueAck { queue, item, token }
        | Command::QueueExtend { queue, item, token, .. }
        | Command::QueueRelease { queue, item, token } => (queue, item, *token),
        _ => return Decision::default(),
    };
    let item = match check_token(queue, id, current, token) {
        Ok(item) => item,
        Err(refusal) => return *refusal,
    };
    let (q, i) = (queue.clone(), id.clone());
    let mut events = match cmd {
        Command::QueueAck { .. } => vec![CoreEvent::ItemAcked { queue: q, item: i, token }],
        Command::QueueExtend { lease_ms, .. } => vec![CoreEvent::ItemExtended {
            queue: q,
            item: i,
            token,
            lease_until_ms: now_ms.saturating_add(*lease_ms),
        }],
        _ => vec![CoreEvent::ItemReleased { queue: q, item: i, token }],
    };
    if matches!(cmd, Command::QueueRelease { .. }) && item.deliveries >= item.max_deliveries {
        events.push(park(queue, id, &item));
    }
    let result = events.first().map(render).unwrap_or_default();
    Decision { events, result, refusal: None }
}

/// Decides a redrive of one parked item or of every parked item (at most `events_max`).
pub(crate) fn decide_redrive(
    queue: &str,
    named: Option<(&str, Option<&Item>)>,
    items: &[(String, Item)],
    events_max: usize,
) -> Decision {
    let redrive = |id: &str| CoreEvent::ItemRedriven { queue: queue.into(), item: id.into() };
    let events: Vec<CoreEvent> = match named {
        Some((id, None)) => return not_found(queue, id),
        Some((id, Some(item))) if item.state != ItemState::Parked => {
            return refuse(
                "not_parked",
                format!("item {id} of queue {queue} is {}, not parked", item.state.as_str()),
                json!({ "queue": queue, "item": id, "state": item.state.as_str() }),
            )
        }
        Some((id, Some(_))) => vec![redrive(id)],
        None => items
            .iter()
            .filter(|(_, item)| item.state == ItemState::Parked)
            .take(events_max)
            .map(|(id, _)| redrive(id))
            .collect(),
    };
    let redriven: Vec<Value> = events
        .iter()
        .filter_map(|e| match e {
            CoreEvent::ItemRedriven { item, .. } => Some(Value::String(item.clone())),
            _ => None,
        })
        .collect();
    Decision {
        events,
        result: fields(json!({ "queue": queue, "redriven": redriven })),
        refusal: None,
    }
}

/// Decides a counter add; `Err` is a message for an overflow (invalid input).
pub(crate) fn decide_counter(current: i64, name: &str, delta: i64) -> Result<Decision, String> {
    let value = current
        .checked_add(delta)
        .ok_or_else(|| format!("counter {name} would overflow: {current} + {delta}"))?;
    let event = CoreEvent::CounterAdded { name: name.into(), delta, value };
    Ok(Decision { result: render(&event), events: vec![event], refusal: None })
}

/// Decides a set add: a new member appends an event, a known one appends nothing.
pub(crate) fn decide_set_add(exists: bool, set: &str, member: &str) -> Decision {
    if exists {
        return Decision {
            result: fields(json!({ "set": set, "member": member, "added": false })),
            ..Decision::default()
        };
    }
    let event = CoreEvent::SetAdded { set: set.into(), member: member.into() };
    Decision { result: render(&event), events: vec![event], refusal: None }
}

/// Decides a list append.
pub(crate) fn decide_list_append(list: &str, row: &str, cap: u32) -> Decision {
    let event = CoreEvent::ListAppended { list: list.into(), row: row.into(), cap };
    let mut result = render(&event);
    result.remove("row");
    Decision { result, events: vec![event], refusal: None }
}

/// The result fields an event stands for: used for fresh results and idempotent replays.
pub(crate) fn render(event: &CoreEvent) -> Map<String, Value> {
    let value = match event {
        CoreEvent::RecordPut { key, rev, .. } => json!({ "key": key, "rev": rev }),
        CoreEvent::ItemPushed { queue, item, .. } => json!({ "queue": queue, "item": item }),
        CoreEvent::ItemClaimed { queue, item, holder, token, lease_until_ms, delivery, .. } => {
            json!({
                "queue": queue, "item": item, "holder": holder, "token": token,
                "lease_until_ms": lease_until_ms, "delivery": delivery,
            })
        }
        CoreEvent::ItemAcked { queue, item, token }
        | CoreEvent::ItemReleased { queue, item, token } => {
            json!({ "queue": queue, "item": item, "token": token })
        }
        CoreEvent::ItemExtended { queue, item, token, lease_until_ms } => {
            json!({ "queue": queue, "item": item, "token": token, "lease_until_ms": lease_until_ms })
        }
        CoreEvent::ItemParked { queue, item, deliveries } => {
            json!({ "queue": queue, "item": item, "parked": true, "deliveries": deliveries })
        }
        CoreEvent::ItemRedriven { queue, item } => json!({ "queue": queue, "redriven": [item] }),
        CoreEvent::CounterAdded { name, value, .. } => json!({ "name": name, "value": value }),
        CoreEvent::SetAdded { set, member } => {
            json!({ "set": set, "member": member, "added": true })
        }
        CoreEvent::ListAppended { list, row, cap } => {
            json!({ "list": list, "row": row, "cap": cap })
        }
    };
    fields(value)
}
