//! The operator's reads over the whole store: the filtered log, store statistics and an event
//! rendered as JSON.
//!
//! Every read runs in one read snapshot and never takes the write lock. Does not write.

use std::collections::BTreeSet;

use hookstate_schema::format::{self, decode_view_key, Head};
use hookstate_schema::{Event, ViewKey, ViewRow};
use serde_json::{json, Value};

use crate::kernel::error::{Error, Result};
use crate::kernel::limits::LOG_EVENTS_MAX;
use crate::kernel::view::{decode_row, read_head};
use crate::kernel::write::{anchor_write_failures, Kernel};

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
    /// Whether every event matches (no filter but the seq range).
    fn matches_all(&self) -> bool {
        let LogFilter { scope, domain, kind, session, since_ms, until_ms, .. } = self;
        scope.is_none()
            && domain.is_none()
            && kind.is_none()
            && session.is_none()
            && since_ms.is_none()
            && until_ms.is_none()
    }

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
    /// The anchor's seq as its file says (unchecked: `verify` checks it), when it parses.
    pub anchor_seq: Option<u64>,
    /// Anchor writes that failed after a commit, over the store's life.
    pub anchor_write_failures: u64,
    /// The seq the log starts after: the checkpoint a `compact` dropped the events up to, else 0.
    /// The log holds `head.seq - log_starts_after` events.
    pub log_starts_after: u64,
}

/// The events that match `filter`, in log order (at most [`LOG_EVENTS_MAX`]).
///
/// # Errors
/// [`Error::BadInput`] for a domain or kind that does not exist; [`Error::ChainBroken`] for an
/// undecodable record, store errors.
pub(crate) fn events(kernel: &Kernel, filter: &LogFilter) -> Result<Vec<Event>> {
    crate::ops::kinds::check_filter(filter.domain.as_deref(), filter.kind.as_deref())?;
    let limit = filter.limit.unwrap_or(LOG_EVENTS_MAX).min(LOG_EVENTS_MAX);
    let txn = kernel.begin_read()?;
    let head = read_head(&*txn)?;
    let from = filter.from_seq.unwrap_or(1).max(1);
    let to = filter.to_seq.unwrap_or(head.seq).min(head.seq);
    // The last `limit` events of a tail that every event matches are the last `limit` seqs:
    // only they are read (a tail walked the whole log).
    let from = match filter.tail && filter.matches_all() {
        true => from.max(to.saturating_sub(limit as u64).saturating_add(1)),
        false => from,
    };
    let mut out = std::collections::VecDeque::new();
    crate::ops::snapshot::events_whole(&*txn, from, to, &mut |seq, bytes| {
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
pub(crate) fn stats(kernel: &Kernel) -> Result<Stats> {
    let anchor_seq = kernel
        .storage()
        .read_anchor()
        .ok()
        .flatten()
        .and_then(|text| format::parse_anchor(&text).ok().map(|(_, head)| head.seq));
    let txn = kernel.begin_read()?;
    let head = read_head(&*txn)?;
    let anchor_write_failures = anchor_write_failures(&*txn)?;
    let log_starts_after = match txn.meta(format::META_LOG_BASE)? {
        Some(text) => crate::ops::snapshot::Mark::parse(&text)?.head.seq,
        None => 0,
    };
    let mut scopes = BTreeSet::new();
    let mut queues = Vec::new();
    let mut views = 0u64;
    txn.views_with_prefix(&[], &mut |key_bytes, row| {
        views += 1;
        let key = decode_view_key(key_bytes).map_err(|e| Error::Corrupt(e.to_string()))?;
        let scope = scope_of(&key).to_owned();
        if let ViewKey::QueueMeta { queue, .. } = &key {
            if let (_, ViewRow::QueueMeta(meta)) = decode_row(key_bytes, row)? {
                queues.push(json!({
                    "scope": scope, "queue": queue, "ready": meta.ready, "claimed": meta.claimed,
                    "parked": meta.parked, "acked": meta.acked, "epoch": meta.epoch,
                }));
            }
        }
        scopes.insert(scope);
        Ok(true)
    })?;
    let file_bytes = std::fs::symlink_metadata(kernel.path()).map(|m| m.len()).unwrap_or(0);
    Ok(Stats {
        head,
        file_bytes,
        scopes: scopes.into_iter().collect(),
        queues,
        views,
        anchor_seq,
        anchor_write_failures,
        log_starts_after,
    })
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
