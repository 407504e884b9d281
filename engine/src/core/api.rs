//! The core primitives' entry points: checking a [`Command`] against every id rule and limit
//! before any store is opened, and running it as one write transaction whose decision
//! (`rules.rs`) reads exactly the rows it needs.
//!
//! Does not print or touch legacy files.

use hookstate_schema::format;
use hookstate_schema::{validate_id, Body, Item, QueueMeta, ViewKey, ViewRow};

use crate::kernel::call::{Call, Outcome, Plan};
use crate::kernel::error::{Error, Result};
use crate::kernel::limits::{APPEND_EVENT_COUNT_MAX, DELIVERIES_MAX, LEASE_MS_MAX, LIST_ROWS_MAX};
use crate::kernel::storage::ReadTxn;
use crate::kernel::value::validate_json;
use crate::kernel::view::{decode_row, read_row};
use crate::kernel::write::{validate_call, Kernel};

use super::index::item_row;
use super::rules::{self, Claimer, Command, Decision};

impl From<Decision> for Plan {
    fn from(decision: Decision) -> Self {
        Plan {
            events: decision.events.into_iter().map(Body::Core).collect(),
            scoped_events: Vec::new(),
            result: decision.result,
            refusal: decision.refusal,
        }
    }
}

/// Checks a call and a command against every id rule and limit without touching a store, so a
/// caller can refuse bad input before opening anything. Returns the command with its JSON values
/// normalized, as [`execute`] runs it.
///
/// # Errors
/// [`Error::Invalid`] naming the first broken rule.
pub(crate) fn check(call: &Call, command: &Command) -> Result<Command> {
    validate_call(call)?;
    validate_command(command)
}

/// Runs one command as one write transaction.
///
/// # Errors
/// As [`check`], [`Error::Busy`], [`Error::Poisoned`] and store errors.
pub(crate) fn execute(kernel: &Kernel, call: &Call, command: &Command) -> Result<Outcome> {
    let command = check(call, command)?;
    kernel.write(call, |txn| decide(txn, call, &command).map(Plan::from))
}

/// Decides `command` on a read snapshot and answers it there when it appends nothing (a claim
/// of an empty queue, a member already in its set): no write transaction is begun. A no-op
/// answer is the one the write path would give at the snapshot's moment, since a decision that
/// appends nothing changes nothing a later call reads. `None` when it would append, and when the
/// snapshot cannot stand in for the write path: a call with an idempotency key (a repeat
/// replays the first answer there), a store that keeps its own clock (PostgreSQL leases run by
/// it), a store its anchors disagree with (a writer refuses it).
///
/// # Errors
/// As [`check`]; store errors.
pub(crate) fn answer_if_idle(
    kernel: &Kernel,
    call: &Call,
    command: &Command,
) -> Result<Option<Outcome>> {
    let command = check(call, command)?;
    if call.idem_key.is_some() {
        return Ok(None);
    }
    // One snapshot for the anchor check and the decision.
    let txn = kernel.begin_read()?;
    if txn.clock_ms().is_some() || kernel.anchor_problem(&*txn)?.is_some() {
        return Ok(None);
    }
    let plan = Plan::from(decide(&*txn, call, &command)?);
    if !plan.events.is_empty() || !plan.scoped_events.is_empty() {
        return Ok(None);
    }
    kernel.answer_read(&*txn, plan).map(Some)
}

fn check_lease(lease_ms: u64) -> Result<()> {
    if lease_ms == 0 || lease_ms > LEASE_MS_MAX {
        let (what, min, max, unit) = ("lease", 1, LEASE_MS_MAX, " ms");
        return Err(Error::OutOfRange { what, value: lease_ms, min, max, unit });
    }
    Ok(())
}

/// Checks every id and limit of a command before anything is written; returns it with JSON
/// values normalized (trimmed).
fn validate_command(command: &Command) -> Result<Command> {
    let mut command = command.clone();
    match &mut command {
        Command::KvPut { key, value, .. } => {
            validate_id("key", key)?;
            *value = validate_json("value", value)?;
        }
        Command::QueuePush { queue, item, payload, for_session, max_deliveries } => {
            validate_id("queue", queue)?;
            validate_id("item", item)?;
            *payload = validate_json("payload", payload)?;
            if let Some(session) = for_session {
                validate_id("session", session)?;
            }
            if *max_deliveries == 0 || *max_deliveries > DELIVERIES_MAX {
                let (value, max) = (u64::from(*max_deliveries), u64::from(DELIVERIES_MAX));
                return Err(Error::OutOfRange {
                    what: "max deliveries",
                    value,
                    min: 1,
                    max,
                    unit: "",
                });
            }
        }
        Command::QueueClaim { queue, item, holder, lease_ms } => {
            validate_id("queue", queue)?;
            validate_id("holder", holder)?;
            if let Some(item) = item {
                validate_id("item", item)?;
            }
            check_lease(*lease_ms)?;
        }
        Command::QueueAck { queue, item, .. } | Command::QueueRelease { queue, item, .. } => {
            validate_id("queue", queue)?;
            validate_id("item", item)?;
        }
        Command::QueueExtend { queue, item, lease_ms, .. } => {
            validate_id("queue", queue)?;
            validate_id("item", item)?;
            check_lease(*lease_ms)?;
        }
        Command::QueueRedrive { queue, item } => {
            validate_id("queue", queue)?;
            if let Some(item) = item {
                validate_id("item", item)?;
            }
        }
        Command::CounterAdd { name, .. } => validate_id("counter", name)?,
        Command::SetAdd { set, member } => {
            validate_id("set", set)?;
            validate_id("member", member)?;
        }
        Command::ListAppend { list, row, cap } => {
            validate_id("list", list)?;
            *row = validate_json("row", row)?;
            if *cap == 0 || *cap > LIST_ROWS_MAX {
                let (value, max) = (u64::from(*cap), u64::from(LIST_ROWS_MAX));
                return Err(Error::OutOfRange { what: "cap", value, min: 1, max, unit: "" });
            }
        }
    }
    Ok(command)
}

pub(crate) fn queue_items(
    txn: &dyn ReadTxn,
    scope: &str,
    queue: &str,
) -> Result<Vec<(String, Item)>> {
    let mut items = Vec::new();
    txn.views_with_prefix(&format::item_prefix(scope, queue), &mut |key, row| {
        let (key, row) = decode_row(key, row)?;
        if let (ViewKey::Item { item, .. }, ViewRow::Item(data)) = (key, row) {
            items.push((item, data));
        }
        Ok(true)
    })?;
    items.sort_by_key(|(_, item)| item.pushed_seq);
    Ok(items)
}

pub(crate) fn queue_meta(txn: &dyn ReadTxn, scope: &str, queue: &str) -> Result<QueueMeta> {
    let key = ViewKey::QueueMeta { scope: scope.into(), queue: queue.into() };
    Ok(match read_row(txn, &key)? {
        Some(ViewRow::QueueMeta(meta)) => meta,
        _ => QueueMeta::default(),
    })
}

/// Reads what a command needs and decides it: the compare and the swap share this transaction.
fn decide(txn: &dyn ReadTxn, call: &Call, command: &Command) -> Result<Decision> {
    let scope = call.scope.as_str();
    // Leases are granted and expire by the store's clock, read under the write lock, unless the
    // call pins its time (on a read snapshot, the call's time).
    let now_ms = call.now_in(txn);
    Ok(match command {
        Command::KvPut { key, value, expect } => {
            let rev =
                match read_row(txn, &ViewKey::Record { scope: scope.into(), key: key.clone() })? {
                    Some(ViewRow::Record { rev, .. }) => Some(rev),
                    _ => None,
                };
            rules::decide_put(rev, key, value, *expect)
        }
        Command::QueuePush { queue, item, .. } => {
            let meta = queue_meta(txn, scope, queue)?;
            let live = meta.ready + meta.claimed + meta.parked;
            rules::decide_push(item_row(txn, scope, queue, item)?.as_ref(), live, command)
        }
        Command::QueueClaim { queue, item, holder, lease_ms } => {
            let who = Claimer {
                holder,
                session: call.actor.session.as_deref(),
                lease_ms: *lease_ms,
                now_ms,
            };
            decide_claim(txn, scope, queue, item.as_deref(), &who)?
        }
        Command::QueueAck { queue, item, .. }
        | Command::QueueExtend { queue, item, .. }
        | Command::QueueRelease { queue, item, .. } => {
            rules::decide_holder(command, item_row(txn, scope, queue, item)?.as_ref(), now_ms)
        }
        Command::QueueRedrive { queue, item } => {
            let named = match item {
                Some(id) => Some((id.as_str(), item_row(txn, scope, queue, id)?)),
                None => None,
            };
            let items = if named.is_none() { queue_items(txn, scope, queue)? } else { Vec::new() };
            let named = named.as_ref().map(|(id, row)| (*id, row.as_ref()));
            rules::decide_redrive(queue, named, &items, APPEND_EVENT_COUNT_MAX)
        }
        Command::CounterAdd { name, delta } => {
            let key = ViewKey::Counter { scope: scope.into(), name: name.clone() };
            let current = match read_row(txn, &key)? {
                Some(ViewRow::Counter { value }) => value,
                _ => 0,
            };
            rules::decide_counter(current, name, *delta).map_err(Error::Invalid)?
        }
        Command::SetAdd { set, member } => {
            let key = ViewKey::SetMember {
                scope: scope.into(),
                set: set.clone(),
                member: member.clone(),
            };
            rules::decide_set_add(read_row(txn, &key)?.is_some(), set, member)
        }
        Command::ListAppend { list, row, cap } => rules::decide_list_append(list, row, *cap),
    })
}

fn decide_claim(
    txn: &dyn ReadTxn,
    scope: &str,
    queue: &str,
    item: Option<&str>,
    who: &Claimer<'_>,
) -> Result<Decision> {
    let meta = queue_meta(txn, scope, queue)?;
    Ok(match item {
        Some(id) => rules::decide_claim_item(
            queue,
            id,
            item_row(txn, scope, queue, id)?.as_ref(),
            &meta,
            who,
        ),
        None => {
            let (now_ms, session) = (who.now_ms, who.session);
            let max = APPEND_EVENT_COUNT_MAX;
            let items = super::index::claim_candidates(txn, scope, queue, now_ms, session, max)?;
            rules::decide_claim_next(queue, &items, &meta, who, max)
        }
    })
}
