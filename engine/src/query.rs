//! Reads: record, queue, counter, set and list lookups, the filtered log, and store statistics.
//!
//! Every read runs in one read snapshot and never takes the write lock. Does not write.

use std::collections::BTreeSet;

use hookstate_schema::format::{self, decode_view_key, decode_view_row, Head};
use hookstate_schema::{validate_id, validate_scope, Event, ViewKey, ViewRow};
use serde_json::{json, Map, Value};

use crate::engine::{queue_items, read_head, read_row, Engine};
use crate::error::{Error, Result};
use crate::limits::LOG_EVENTS_MAX;

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

/// Which events `log` returns. Every present field must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    /// Only this scope.
    pub scope: Option<String>,
    /// Only this domain (`core`, ...).
    pub domain: Option<String>,
    /// Only this event kind (`item_claimed`, ...).
    pub kind: Option<String>,
    /// Only this actor session.
    pub session: Option<String>,
    /// First seq (inclusive).
    pub from_seq: Option<u64>,
    /// Last seq (inclusive).
    pub to_seq: Option<u64>,
    /// Earliest time, UTC ms (inclusive).
    pub since_ms: Option<u64>,
    /// Latest time, UTC ms (inclusive).
    pub until_ms: Option<u64>,
    /// At most this many events; with `tail` the last ones.
    pub limit: Option<usize>,
    /// Return the last `limit` matches instead of the first.
    pub tail: bool,
}

impl LogFilter {
    fn matches(&self, event: &Event) -> bool {
        let c = &event.content;
        self.scope.as_ref().is_none_or(|s| *s == c.scope)
            && self.domain.as_ref().is_none_or(|d| d == c.body.domain())
            && self.kind.as_ref().is_none_or(|k| k == c.body.kind())
            && self.session.as_ref().is_none_or(|s| Some(s) == c.actor.session.as_ref())
            && self.since_ms.is_none_or(|t| c.at_ms >= t)
            && self.until_ms.is_none_or(|t| c.at_ms <= t)
    }
}

/// Store statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// The head.
    pub head: Head,
    /// Size of the store file in bytes.
    pub file_bytes: u64,
    /// Distinct scopes with views.
    pub scopes: Vec<String>,
    /// Per queue: scope, name and counts.
    pub queues: Vec<Value>,
    /// View rows.
    pub views: u64,
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
    /// [`Error::Invalid`] naming the first broken rule.
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

impl Engine {
    /// Answers a read in one snapshot.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad ids, corruption and store errors.
    pub fn query(&self, scope: &str, query: &Query, now_ms: u64) -> Result<Value> {
        query.check(scope)?;
        let txn = self.begin_read()?;
        let parse = |text: &str| serde_json::from_str(text).unwrap_or(Value::String(text.into()));
        Ok(match query {
            Query::KvGet { key } => {
                let row =
                    read_row(&*txn, &ViewKey::Record { scope: scope.into(), key: key.clone() })?;
                row_to_json(row, key)
            }
            Query::QueueList { queue } => {
                let meta = crate::engine::queue_meta(&*txn, scope, queue)?;
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

    /// The events that match `filter`, in log order (at most [`LOG_EVENTS_MAX`]).
    ///
    /// # Errors
    /// [`Error::ChainBroken`] for an undecodable record, store errors.
    pub fn events(&self, filter: &LogFilter) -> Result<Vec<Event>> {
        let limit = filter.limit.unwrap_or(LOG_EVENTS_MAX).min(LOG_EVENTS_MAX);
        let txn = self.begin_read()?;
        let head = read_head(&*txn)?;
        let from = filter.from_seq.unwrap_or(1).max(1);
        let to = filter.to_seq.unwrap_or(head.seq).min(head.seq);
        let mut out = std::collections::VecDeque::new();
        txn.events(from, to, &mut |seq, bytes| {
            let event = format::decode_event(bytes)
                .map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
            if filter.matches(&event) {
                out.push_back(event);
                if out.len() > limit {
                    if !filter.tail {
                        out.pop_back();
                        return Ok(false);
                    }
                    out.pop_front();
                }
            }
            Ok(true)
        })?;
        Ok(out.into())
    }

    /// Counts events, scopes, views and queue depths.
    ///
    /// # Errors
    /// Corruption and store errors.
    pub fn stats(&self) -> Result<Stats> {
        let txn = self.begin_read()?;
        let head = read_head(&*txn)?;
        let mut scopes = BTreeSet::new();
        let mut queues = Vec::new();
        let mut views = 0u64;
        txn.views_with_prefix(&[], &mut |key, row| {
            views += 1;
            let key = decode_view_key(key).map_err(|e| Error::Corrupt(e.to_string()))?;
            let scope = scope_of(&key).to_owned();
            if let ViewKey::QueueMeta { queue, .. } = &key {
                if let ViewRow::QueueMeta(meta) = decode_view_row(row).map_err(|e| Error::Corrupt(e.to_string()))? {
                    queues.push(json!({
                        "scope": scope, "queue": queue, "ready": meta.ready, "claimed": meta.claimed,
                        "parked": meta.parked, "acked": meta.acked, "epoch": meta.epoch,
                    }));
                }
            }
            scopes.insert(scope);
            Ok(true)
        })?;
        let file_bytes = std::fs::symlink_metadata(self.path()).map(|m| m.len()).unwrap_or(0);
        Ok(Stats { head, file_bytes, scopes: scopes.into_iter().collect(), queues, views })
    }
}

fn scope_of(key: &ViewKey) -> &str {
    match key {
        ViewKey::Record { scope, .. }
        | ViewKey::Item { scope, .. }
        | ViewKey::QueueMeta { scope, .. }
        | ViewKey::Counter { scope, .. }
        | ViewKey::SetMember { scope, .. }
        | ViewKey::List { scope, .. }
        | ViewKey::Idem { scope, .. }
        | ViewKey::Doc { scope, .. } => scope,
    }
}

/// Renders an event as one JSON object for `hookstate log`.
#[must_use]
pub fn event_to_json(event: &Event) -> Value {
    let c = &event.content;
    let mut out = Map::new();
    out.insert("seq".into(), json!(event.seq));
    out.insert("at_ms".into(), json!(c.at_ms));
    out.insert("scope".into(), json!(c.scope));
    out.insert("domain".into(), json!(c.body.domain()));
    out.insert("kind".into(), json!(c.body.kind()));
    out.insert("actor".into(), json!({
        "session": c.actor.session, "hook": c.actor.hook, "pid": c.actor.pid, "agent": c.actor.agent,
    }));
    if let Some(idem) = &c.idem_key {
        out.insert("idem_key".into(), json!(idem));
    }
    out.insert("body".into(), Value::Object(crate::project::render(&c.body)));
    out.insert("prev".into(), json!(format::to_hex(&event.prev)));
    out.insert("hash".into(), json!(format::to_hex(&event.hash)));
    Value::Object(out)
}
