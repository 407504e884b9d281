//! The core primitives' reads: a record, a queue's items and counts, a counter, a set member,
//! a capped list, each answered in one read snapshot.
//!
//! Never takes the write lock. Does not write.

use hookstate_schema::{validate_id, validate_scope, ViewKey, ViewRow};
use serde_json::{json, Value};

use super::api::{queue_items, queue_meta};
use crate::kernel::error::Result;
use crate::kernel::view::read_row;
use crate::kernel::write::Kernel;

/// A read the caller asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// A record's value and revision.
    KvGet {
        /// Record key.
        key: String,
    },
    /// A queue's live items and counts.
    QueueList {
        /// Queue name.
        queue: String,
    },
    /// A counter's value.
    CounterGet {
        /// Counter name.
        name: String,
    },
    /// Whether a set holds a member.
    SetHas {
        /// Set name.
        set: String,
        /// Member.
        member: String,
    },
    /// A capped list's rows.
    ListGet {
        /// List name.
        list: String,
    },
}

fn row_to_json(row: Option<ViewRow>, key: &str) -> Value {
    let parse = |text: &str| serde_json::from_str(text).unwrap_or(Value::String(text.into()));
    match row {
        Some(ViewRow::Record { value, rev }) => {
            json!({ "key": key, "found": true, "rev": rev, "value": parse(&value) })
        }
        _ => json!({ "key": key, "found": false, "rev": 0, "value": null }),
    }
}

impl Query {
    /// Checks the query's ids (and the scope) without touching a store.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] naming the first broken rule.
    pub fn check(&self, scope: &str) -> Result<()> {
        validate_scope(scope)?;
        match self {
            Query::KvGet { key } => validate_id("key", key)?,
            Query::QueueList { queue } => validate_id("queue", queue)?,
            Query::CounterGet { name } => validate_id("counter", name)?,
            Query::SetHas { set, member } => {
                validate_id("set", set)?;
                validate_id("member", member)?;
            }
            Query::ListGet { list } => validate_id("list", list)?,
        }
        Ok(())
    }
}

/// Answers a read in one snapshot.
///
/// # Errors
/// [`Error::Invalid`] for bad ids, corruption and store errors.
pub(crate) fn query(kernel: &Kernel, scope: &str, query: &Query, now_ms: u64) -> Result<Value> {
    query.check(scope)?;
    let txn = kernel.begin_read()?;
    let now_ms = txn.clock_ms().unwrap_or(now_ms);
    let parse = |text: &str| serde_json::from_str(text).unwrap_or(Value::String(text.into()));
    Ok(match query {
        Query::KvGet { key } => {
            let row = read_row(&*txn, &ViewKey::Record { scope: scope.into(), key: key.clone() })?;
            row_to_json(row, key)
        }
        Query::QueueList { queue } => {
            let meta = queue_meta(&*txn, scope, queue)?;
            let items: Vec<Value> = queue_items(&*txn, scope, queue)?
                .into_iter()
                .map(|(id, item)| {
                    let expired = item.state == hookstate_schema::ItemState::Claimed
                        && now_ms >= item.lease_until_ms;
                    json!({
                        "item": id, "state": item.state.as_str(), "expired": expired,
                        "deliveries": item.deliveries, "max_deliveries": item.max_deliveries,
                        "token": item.token, "holder": item.holder,
                        "lease_until_ms": item.lease_until_ms, "for_session": item.for_session,
                        "payload": parse(&item.payload),
                    })
                })
                .collect();
            json!({
                "queue": queue, "epoch": meta.epoch, "ready": meta.ready,
                "claimed": meta.claimed, "parked": meta.parked, "acked": meta.acked,
                "items": items,
            })
        }
        Query::CounterGet { name } => {
            let key = ViewKey::Counter { scope: scope.into(), name: name.clone() };
            let value = match read_row(&*txn, &key)? {
                Some(ViewRow::Counter { value }) => value,
                _ => 0,
            };
            json!({ "name": name, "value": value })
        }
        Query::SetHas { set, member } => {
            let key = ViewKey::SetMember {
                scope: scope.into(),
                set: set.clone(),
                member: member.clone(),
            };
            json!({ "set": set, "member": member, "present": read_row(&*txn, &key)?.is_some() })
        }
        Query::ListGet { list } => {
            let key = ViewKey::List { scope: scope.into(), name: list.clone() };
            let rows: Vec<Value> = match read_row(&*txn, &key)? {
                Some(ViewRow::List { rows }) => rows.iter().map(|r| parse(r)).collect(),
                _ => Vec::new(),
            };
            json!({ "list": list, "rows": rows })
        }
    })
}
