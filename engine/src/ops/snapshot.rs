//! Checkpoints as the log's replays see them: the view rows and head a checkpoint recorded,
//! checked against its digest and against the record event that put it in the chain, so a
//! replay (verify, rebuild, an as-of read) can start from one instead of from genesis.
//!
//! A checkpoint is a record put in the reserved scope [`CHECKPOINT_SCOPE`] whose value names the
//! seq and hash it was taken at and the digest of the view rows then; the rows themselves are
//! kept in the metadata. The event's `prev` is that hash, so the chain from the checkpoint event
//! to the head proves the checkpoint. Writes only a new store, from a start ([`copy_log`]).

use std::collections::BTreeMap;

use hookstate_schema::format::{
    self, decode_snapshot, encode_head, encode_view_key, encode_view_row, from_hex,
    snapshot_digest, to_hex, Head, META_DOMAIN_EVENTS, META_HEAD, META_LOG_BASE,
    META_LOG_BASE_VIEWS,
};
use hookstate_schema::{Body, CoreEvent, ViewKey, ViewRow, BODY_VARIANTS};
use serde_json::{json, Value};

use crate::kernel::counts::{self, Counts};
use crate::kernel::error::{Error, Result};
use crate::kernel::project::{self, Table};
use crate::kernel::storage::{ReadTxn, WriteTxn};
use crate::kernel::view::decode_row;

/// The scope of checkpoint records.
pub(crate) const CHECKPOINT_SCOPE: &str = "hookstate:checkpoint";
/// The key of checkpoint records.
pub(crate) const CHECKPOINT_KEY: &str = "checkpoint";

/// What a checkpoint records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    /// The head it was taken at.
    pub(crate) head: Head,
    /// The digest of its encoded view rows.
    pub(crate) digest: [u8; 32],
    /// How many rows.
    pub(crate) rows: u64,
    /// Events per domain up to its seq.
    pub(crate) counts: Counts,
}

impl Mark {
    /// The JSON text a checkpoint's record and metadata hold.
    pub(crate) fn to_text(&self) -> String {
        json!({
            "seq": self.head.seq, "hash": to_hex(&self.head.hash),
            "views_digest": to_hex(&self.digest), "view_rows": self.rows,
            "events_per_domain": self.counts.to_vec(),
        })
        .to_string()
    }

    /// Parses [`Mark::to_text`].
    pub(crate) fn parse(bytes: &[u8]) -> Result<Mark> {
        let bad = |why: &str| Error::Corrupt(format!("checkpoint record: {why}"));
        let value: Value = serde_json::from_slice(bytes).map_err(|_| bad("is not JSON"))?;
        let hex =
            |name: &str| value[name].as_str().and_then(from_hex::<32>).ok_or_else(|| bad(name));
        let mut counts = [0u64; BODY_VARIANTS];
        for (slot, n) in counts
            .iter_mut()
            .zip(value["events_per_domain"].as_array().ok_or_else(|| bad("counts"))?)
        {
            *slot = n.as_u64().ok_or_else(|| bad("counts"))?;
        }
        Ok(Mark {
            head: Head {
                seq: value["seq"].as_u64().ok_or_else(|| bad("seq"))?,
                hash: hex("hash")?,
            },
            digest: hex("views_digest")?,
            rows: value["view_rows"].as_u64().ok_or_else(|| bad("view_rows"))?,
            counts,
        })
    }
}

/// Where a replay starts: the head, views and counts before its first event.
pub(crate) struct Start {
    /// The head before the first event replayed.
    pub(crate) head: Head,
    /// The views at that head.
    pub(crate) views: BTreeMap<ViewKey, ViewRow>,
    /// Events per domain at that head.
    pub(crate) counts: Counts,
    /// The checkpoint's seq, when the replay starts from one.
    pub(crate) checkpoint: Option<u64>,
    /// The checkpoint's stored text and rows, to keep beside a copy of the log after it.
    pub(crate) raw: Option<(Vec<u8>, Vec<u8>)>,
}

impl Start {
    /// The start of a log that begins at genesis.
    pub(crate) fn genesis(genesis: [u8; 32]) -> Start {
        Start {
            head: Head { seq: 0, hash: genesis },
            views: BTreeMap::new(),
            counts: [0; BODY_VARIANTS],
            checkpoint: None,
            raw: None,
        }
    }
}

/// The checkpoint kept under `mark_key` and `views_key`, checked: its rows against its digest,
/// and the record event right after it against its text and its hash.
///
/// # Errors
/// [`Error::ChainBroken`] naming the checkpoint's seq when they disagree; store errors.
pub(crate) fn load(txn: &dyn ReadTxn, mark_key: &str, views_key: &str) -> Result<Option<Start>> {
    let Some(text) = txn.meta(mark_key)? else {
        return Ok(None);
    };
    let mark = Mark::parse(&text)?;
    let broken = |why: &str| Error::ChainBroken {
        seq: mark.head.seq + 1,
        why: format!("checkpoint: {why}"),
    };
    let encoded = txn.meta(views_key)?.ok_or_else(|| broken("its view rows are missing"))?;
    if snapshot_digest(&encoded) != mark.digest {
        return Err(broken("its view rows do not match the digest its record holds"));
    }
    let record =
        txn.event(mark.head.seq + 1)?.ok_or_else(|| broken("its record event is missing"))?;
    let event = format::decode_event(&record).map_err(|e| broken(&e.to_string()))?;
    let recorded = match &event.content.body {
        Body::Core(CoreEvent::RecordPut { key, value, .. })
            if key == CHECKPOINT_KEY && event.content.scope == CHECKPOINT_SCOPE =>
        {
            value.as_bytes() == text.as_slice()
        }
        _ => false,
    };
    if !recorded || event.prev != mark.head.hash {
        return Err(broken("the event after it is not its record"));
    }
    let mut views = BTreeMap::new();
    let rows = decode_snapshot(&encoded).map_err(|e| broken(&e.to_string()))?;
    for (key, row) in &rows {
        let (key, row) = decode_row(key, row)?;
        views.insert(key, row);
    }
    if views.len() as u64 != mark.rows {
        return Err(broken("its row count is not its record's"));
    }
    Ok(Some(Start {
        head: mark.head,
        views,
        counts: mark.counts,
        checkpoint: Some(mark.head.seq),
        raw: Some((text, encoded)),
    }))
}

/// Where a replay of the whole stored log starts: the compaction base when the log was
/// compacted, else genesis.
///
/// # Errors
/// As [`load`].
pub(crate) fn log_start(txn: &dyn ReadTxn, genesis: [u8; 32]) -> Result<Start> {
    use hookstate_schema::format::{META_LOG_BASE, META_LOG_BASE_VIEWS};
    Ok(load(txn, META_LOG_BASE, META_LOG_BASE_VIEWS)?.unwrap_or_else(|| Start::genesis(genesis)))
}

/// Visits the events `from..=to` of `txn`, where `to` is at most the head the same snapshot
/// read, checking that the log holds every one of them: the first visited is `from` (or the
/// first event kept after a compaction), each follows the one before, and the last is `to`
/// unless `visit` stopped first. A damaged page of the log table can end a range scan early or
/// skip a key; a verb that copies or prints the log (`log`, `dump`, `backup`) then fails with
/// exit 5 instead of handing out a shorter log as whole.
///
/// # Errors
/// [`Error::ChainBroken`] naming the first missing seq; as `visit`; store errors.
pub(crate) fn events_whole(
    txn: &dyn ReadTxn,
    from: u64,
    to: u64,
    visit: &mut crate::kernel::storage::EventVisitor<'_>,
) -> Result<()> {
    use hookstate_schema::format::META_LOG_BASE;
    if from > to {
        return Ok(());
    }
    let kept_from = match txn.meta(META_LOG_BASE)? {
        Some(base) => Mark::parse(&base)?.head.seq.saturating_add(1),
        None => 1,
    };
    let mut expected = from.max(kept_from);
    let mut stopped = false;
    txn.events(from, to, &mut |seq, record| {
        if seq != expected {
            return Err(missing(expected));
        }
        expected = seq.saturating_add(1);
        let go_on = visit(seq, record)?;
        stopped = !go_on;
        Ok(go_on)
    })?;
    if !stopped && expected <= to {
        return Err(missing(expected));
    }
    Ok(())
}

fn missing(seq: u64) -> Error {
    Error::ChainBroken { seq, why: "event is missing: the log table is damaged".into() }
}

/// Writes into `dst` the log of `from` after `start` through `to`, each record as it is and
/// each checked to link to the one before it, then the views rebuilt from `start`'s, the events
/// per domain, the compaction base `start` came from (when it is one) and the head reached. An
/// as-of read fills its memory store so, and `copy` its destination. Returns the head reached
/// and the view rows written.
///
/// # Errors
/// [`Error::ChainBroken`] for a record that does not decode, a seq missing from the range or a
/// broken link; store errors.
pub(crate) fn copy_log(
    from: &dyn ReadTxn,
    start: Start,
    to: u64,
    table: &Table,
    dst: &mut dyn WriteTxn,
) -> Result<(Head, u64)> {
    let Start { mut views, counts: mut counted, mut head, raw, .. } = start;
    from.events(head.seq + 1, to, &mut |seq, record| {
        let broken = |why: String| Error::ChainBroken { seq, why };
        if seq != head.seq + 1 {
            return Err(Error::ChainBroken { seq: head.seq + 1, why: "event is missing".into() });
        }
        let event = format::decode_event(record).map_err(|e| broken(e.to_string()))?;
        if event.seq != seq || event.prev != head.hash {
            return Err(broken("does not link to the event before it".into()));
        }
        project::apply(table, &mut views, &event);
        counted[event.content.body.variant_index()] += 1;
        head = Head { seq, hash: event.hash };
        dst.append_event(seq, record)?;
        Ok(true)
    })?;
    for (key, row) in &views {
        let key_bytes = encode_view_key(key);
        dst.put_view(&key_bytes, &encode_view_row(&key_bytes, row))?;
    }
    dst.put_meta(META_DOMAIN_EVENTS, &counts::encode(&counted))?;
    if let Some((text, rows)) = &raw {
        dst.put_meta(META_LOG_BASE, text)?;
        dst.put_meta(META_LOG_BASE_VIEWS, rows)?;
    }
    dst.put_meta(META_HEAD, &encode_head(&head))?;
    Ok((head, views.len() as u64))
}
