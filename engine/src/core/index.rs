//! The claim queues' indexes, kept by the core projection in the transaction that changes an
//! item: a ready index per queue (push order) and a lease index per queue (lease end, then push
//! order), so claim-next reads the rows it hands out or parks, never the whole queue.
//!
//! Both are document rows whose value is the item id. `rebuild` recomputes them with every other
//! row and `verify` compares them with its rebuild. Does not decide anything; `rules.rs` does.

use hookstate_schema::{Item, ItemState, ViewKey, ViewRow};
use serde::{Deserialize, Serialize};

use crate::kernel::doc::{doc_key, read_docs_while};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::view::read_row;

/// Row kind prefix of the ready index (kind `core.ready:<queue>`, id: push seq, 20 digits).
const READY_KIND: &str = "core.ready:";
/// Row kind prefix of the lease index (kind `core.lease:<queue>`, id: lease end in UTC ms,
/// 20 digits, `.`, push seq, 20 digits).
const LEASE_KIND: &str = "core.lease:";
/// Digits of a zero-padded `u64`, so ids sort as the numbers do.
const U64_DIGITS: usize = 20;

fn ready_kind(queue: &str) -> String {
    format!("{READY_KIND}{queue}")
}

fn lease_kind(queue: &str) -> String {
    format!("{LEASE_KIND}{queue}")
}

fn lease_id(lease_until_ms: u64, pushed_seq: u64) -> String {
    format!("{lease_until_ms:0w$}.{pushed_seq:0w$}", w = U64_DIGITS)
}

/// What an index row holds: the item, and the session it is addressed to, so a scan decides
/// which rows to take without reading an item row inside the scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// The item id.
    pub(crate) item: String,
    /// Only a claimer in this session may claim it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) for_session: Option<String>,
}

impl Entry {
    pub(crate) fn of(id: &str, item: &Item) -> Entry {
        Entry { item: id.to_owned(), for_session: item.for_session.clone() }
    }
}

/// The index row an item in this state is listed under: ready items in the ready index, leased
/// ones in the lease index, parked ones in neither.
pub(crate) fn index_key(scope: &str, queue: &str, item: &Item) -> Option<ViewKey> {
    match item.state {
        ItemState::Ready => Some(doc_key(scope, &ready_kind(queue), &seq_id(item.pushed_seq))),
        ItemState::Claimed => Some(doc_key(
            scope,
            &lease_kind(queue),
            &lease_id(item.lease_until_ms, item.pushed_seq),
        )),
        ItemState::Parked => None,
    }
}

fn seq_id(seq: u64) -> String {
    format!("{seq:0w$}", w = U64_DIGITS)
}

/// One item of a queue.
///
/// # Errors
/// [`Error::Corrupt`] for a damaged row; store errors.
pub(crate) fn item_row(
    txn: &dyn ReadTxn,
    scope: &str,
    queue: &str,
    item: &str,
) -> Result<Option<Item>> {
    let key = ViewKey::Item { scope: scope.into(), queue: queue.into(), item: item.into() };
    Ok(match read_row(txn, &key)? {
        Some(ViewRow::Item(item)) => Some(item),
        _ => None,
    })
}

/// The items claim-next may hand out or park at `now_ms`, in push order, up to and including the
/// first one a claimer in `session` may take, and at most `rows_max` of them: the first grantable
/// item of the whole queue, and every item the scan of the whole queue would have parked before
/// it, so the decision is the one a full scan makes. The candidates are each leased item whose
/// lease ended and the ready items, ordered by the push seq their index ids carry; one addressed
/// to another session is left out from its index row, since the scan skips it. Only the listed
/// item rows are read: after many claimers were killed, a claim reads the index rows of the
/// ended leases and one item row, not every ended lease's item.
///
/// # Errors
/// [`Error::Corrupt`] for an index row naming no item or with a damaged id; store errors.
pub(crate) fn claim_candidates(
    txn: &dyn ReadTxn,
    scope: &str,
    queue: &str,
    now_ms: u64,
    session: Option<&str>,
    rows_max: usize,
) -> Result<Vec<(String, Item)>> {
    let takes = |entry: &Entry| entry.for_session.as_deref().is_none_or(|s| Some(s) == session);
    let mut listed: Vec<(String, Entry)> = Vec::new();
    let ended = lease_id(now_ms, u64::MAX);
    read_docs_while::<Entry>(txn, scope, &lease_kind(queue), &mut |id, entry| {
        let expired = id.as_str() <= ended.as_str();
        if expired && takes(&entry) {
            listed.push((id, entry));
        }
        expired
    })?;
    let mut leased = Vec::with_capacity(listed.len());
    for (id, entry) in listed {
        let pushed = id.split_once('.').and_then(|(_, seq)| seq.parse::<u64>().ok());
        let Some(pushed) = pushed else {
            return Err(bad_index_id(scope, queue, &id));
        };
        leased.push((pushed, entry));
    }
    let mut ready = Vec::new();
    let mut bad_id = None;
    read_docs_while::<Entry>(txn, scope, &ready_kind(queue), &mut |id, entry| {
        let Ok(pushed) = id.parse::<u64>() else {
            bad_id = Some(id);
            return false;
        };
        let take = takes(&entry);
        if take {
            ready.push((pushed, entry));
        }
        !take
    })?;
    if let Some(id) = bad_id {
        return Err(bad_index_id(scope, queue, &id));
    }
    leased.extend(ready);
    leased.sort_by_key(|(pushed, _)| *pushed);
    let mut out = Vec::new();
    for (_, entry) in leased {
        if out.len() >= rows_max {
            break;
        }
        let Some(item) = item_row(txn, scope, queue, &entry.item)? else {
            return Err(Error::Corrupt(format!(
                "the index of queue {queue} in scope {scope} names item {}, which is not in it",
                entry.item
            )));
        };
        let last = super::rules::grantable(&item, now_ms, session);
        out.push((entry.item, item));
        if last {
            break;
        }
    }
    Ok(out)
}

fn bad_index_id(scope: &str, queue: &str, id: &str) -> Error {
    Error::Corrupt(format!("the index of queue {queue} in scope {scope} has a row with id {id:?}"))
}
