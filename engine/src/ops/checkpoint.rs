//! `checkpoint` and `compact`: record the views and the head in the chain, then drop the events
//! before a checkpoint and give the file's space back, keeping `verify` able to prove the chain
//! from the checkpoint to the head.
//!
//! A checkpoint is one write transaction: the view rows at the head are encoded and kept in
//! the metadata, and a record put in the reserved scope `hookstate:checkpoint` naming the head
//! and the rows' digest is appended, so the chain covers it. Compaction refuses while an
//! idempotency key bound by a dropped event is still live. Does not print.

use hookstate_schema::format::{
    self, encode_head, encode_snapshot, idem_prefix, snapshot_digest, Head, META_CHECKPOINT,
    META_CHECKPOINT_VIEWS, META_HEAD, META_LOG_BASE, META_LOG_BASE_VIEWS,
};
use hookstate_schema::{Body, CoreEvent, Event, EventContent, ViewKey, ViewRow};

use crate::engine::Engine;
use crate::kernel::anchor::{self, AnchorState};
use crate::kernel::call::Call;
use crate::kernel::counts;
use crate::kernel::error::{Error, Result};
use crate::kernel::limits::{FORWARD_KEY_COMPACT_MS, FORWARD_KEY_PREFIX, IDEM_KEY_TTL_MS};
use crate::kernel::project::idem_expired;
use crate::kernel::view::{decode_row, read_head, read_row};
use crate::ops::api::Ops;
use crate::ops::snapshot::{Mark, CHECKPOINT_KEY, CHECKPOINT_SCOPE};

/// What a checkpoint recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointReport {
    /// The head it was taken at: every event up to it may be dropped by `compact`.
    pub at: Head,
    /// The seq of its record event.
    pub event_seq: u64,
    /// View rows kept.
    pub view_rows: u64,
    /// Bytes of the kept rows.
    pub view_bytes: u64,
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactReport {
    /// Events dropped.
    pub dropped: u64,
    /// The log now starts after this seq (the checkpoint's).
    pub after_seq: u64,
    /// The bytes the store took before (its file's size; on PostgreSQL its tables', whose
    /// space the server's vacuum gives back later).
    pub file_bytes_before: u64,
    /// Its size after.
    pub file_bytes_after: u64,
}

/// Events per domain counted from the stored log, for a store made before the counts were kept.
fn count_log(
    txn: &dyn crate::kernel::storage::ReadTxn,
    genesis: [u8; 32],
) -> Result<counts::Counts> {
    let mut counted = crate::ops::snapshot::log_start(txn, genesis)?.counts;
    txn.events(1, u64::MAX, &mut |seq, record| {
        let event = format::decode_event(record)
            .map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
        counted[event.content.body.variant_index()] += 1;
        Ok(true)
    })?;
    Ok(counted)
}

impl Ops<'_> {
    /// Records a checkpoint at the head: the view rows, kept in the store, and their digest in a
    /// record event of the chain.
    ///
    /// # Errors
    /// [`Error::AnchorMismatch`], [`Error::AnchorMissing`], [`Error::Busy`], store errors.
    pub fn checkpoint(&self, call: &Call) -> Result<CheckpointReport> {
        let kernel = self.kernel();
        let anchors = kernel.read_anchors();
        let mut txn = kernel.begin_write()?;
        let head = read_head(&*txn)?;
        for (path, state) in kernel.check_anchors(&*txn, &head, anchors)? {
            if state == AnchorState::Missing && head.seq > 0 {
                return Err(anchor::missing(&path, &head));
            }
        }
        let mut rows = Vec::new();
        txn.views_with_prefix(&[], &mut |key, row| {
            decode_row(key, row)?;
            rows.push((key.to_vec(), row.to_vec()));
            Ok(true)
        })?;
        let encoded = encode_snapshot(&rows);
        let counts = match counts::read(&*txn)? {
            Some(counts) => counts,
            None => count_log(&*txn, kernel.genesis())?,
        };
        let mark =
            Mark { head, digest: snapshot_digest(&encoded), rows: rows.len() as u64, counts };
        let text = mark.to_text();
        let record_key =
            ViewKey::Record { scope: CHECKPOINT_SCOPE.into(), key: CHECKPOINT_KEY.into() };
        let rev = match read_row(&*txn, &record_key)? {
            Some(ViewRow::Record { rev, .. }) => rev + 1,
            _ => 1,
        };
        let body = Body::Core(CoreEvent::RecordPut {
            key: CHECKPOINT_KEY.into(),
            value: text.clone(),
            rev,
        });
        let content = EventContent {
            at_ms: call.now_ms,
            actor: call.actor.clone(),
            scope: CHECKPOINT_SCOPE.into(),
            idem_key: None,
            body: body.clone(),
            request: None,
        };
        let seq = head.seq + 1;
        let (record, hash) = format::encode_event(seq, &head.hash, &content);
        txn.append_event(seq, &record)?;
        kernel.project_live(&mut *txn, &Event { seq, prev: head.hash, hash, content })?;
        counts::add(&mut *txn, std::iter::once(&body))?;
        let new_head = Head { seq, hash };
        txn.put_meta(META_HEAD, &encode_head(&new_head))?;
        txn.put_meta(META_CHECKPOINT, text.as_bytes())?;
        txn.put_meta(META_CHECKPOINT_VIEWS, &encoded)?;
        if let Err(err) = txn.commit() {
            kernel.poison();
            return Err(err);
        }
        kernel.re_anchor(&new_head);
        Ok(CheckpointReport {
            at: head,
            event_seq: seq,
            view_rows: mark.rows,
            view_bytes: encoded.len() as u64,
        })
    }

    fn drop_before_checkpoint(&self, keep_events: u64, now_ms: u64) -> Result<(u64, u64)> {
        let kernel = self.kernel();
        let mut txn = kernel.begin_anchored_write()?;
        let head = read_head(&*txn)?;
        let refuse = |why: String| Error::refused("compact", why);
        let text = txn
            .meta(META_CHECKPOINT)?
            .ok_or_else(|| refuse("finds no checkpoint: run hookstate checkpoint first".into()))?;
        let mark = Mark::parse(&text)?;
        // A checkpoint of an empty log covers no event: nothing to drop, and no base to record
        // (a base at seq 0 made `dump` refuse the log as compacted).
        if mark.head.seq == 0 {
            return Ok((0, 0));
        }
        if let Some(base) = txn.meta(META_LOG_BASE)? {
            if Mark::parse(&base)?.head.seq >= mark.head.seq {
                return Ok((0, mark.head.seq));
            }
        }
        if head.seq - mark.head.seq < keep_events {
            return Err(refuse(format!(
                "would keep {} events, fewer than --keep {keep_events}: the latest checkpoint is at seq {}",
                head.seq - mark.head.seq,
                mark.head.seq
            )));
        }
        let mut live = None;
        txn.views_with_prefix(&idem_prefix(), &mut |key, row| {
            if let (ViewKey::Idem { key, .. }, ViewRow::Idem { first_seq, at_ms, .. }) =
                decode_row(key, row)?
            {
                if first_seq <= mark.head.seq && binds_compaction(&key, at_ms, now_ms) {
                    live = Some((key, first_seq));
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        if let Some((key, seq)) = live {
            let bound = match key.starts_with(FORWARD_KEY_PREFIX) {
                true => format!("{} minutes", FORWARD_KEY_COMPACT_MS / MS_PER_MINUTE),
                false => format!("{} hours", IDEM_KEY_TTL_MS / MS_PER_HOUR),
            };
            return Err(refuse(format!(
                "would drop seq {seq}, which idempotency key {key:?} is bound to for {bound} \
                 after its first use; compact later"
            )));
        }
        let views = txn
            .meta(META_CHECKPOINT_VIEWS)?
            .ok_or_else(|| Error::Corrupt("the checkpoint's view rows are missing".into()))?;
        let dropped = txn.drop_events_through(mark.head.seq)?;
        txn.put_meta(META_LOG_BASE, &text)?;
        txn.put_meta(META_LOG_BASE_VIEWS, &views)?;
        if let Err(err) = txn.commit() {
            kernel.poison();
            return Err(err);
        }
        Ok((dropped, mark.head.seq))
    }
}

/// `hookstate compact`: drops every event up to the latest checkpoint, keeping at least the last `keep_events`
/// events, then compacts the file. At `now_ms` no idempotency key bound by a dropped event
/// may still be live (they are bound for `IDEM_KEY_TTL_MS`).
///
/// # Errors
/// [`Error::Refused`] with no checkpoint, a checkpoint within the events kept, or a live key
/// bound by a dropped event; [`Error::Busy`]; store errors.
pub fn compact(engine: &mut Engine, keep_events: u64, now_ms: u64) -> Result<CompactReport> {
    let file_bytes_before = engine.kernel().storage().stored_bytes();
    let (dropped, after_seq) = engine.ops().drop_before_checkpoint(keep_events, now_ms)?;
    engine.kernel_mut().storage_mut().compact_file()?;
    let file_bytes_after = engine.kernel().storage().stored_bytes();
    Ok(CompactReport { dropped, after_seq, file_bytes_before, file_bytes_after })
}

/// Milliseconds in a minute and an hour, to say the keys' bounds in the refusal.
const MS_PER_MINUTE: u64 = 60 * 1000;
const MS_PER_HOUR: u64 = 60 * MS_PER_MINUTE;

/// Whether a key first used at `at_ms` still keeps `compact` from dropping its event at
/// `now_ms`: for [`IDEM_KEY_TTL_MS`] (24 hours), or [`FORWARD_KEY_COMPACT_MS`] for a key the CLI
/// made up to forward a write to a server (no one sends it again once that call's retry is
/// over).
fn binds_compaction(key: &str, at_ms: u64, now_ms: u64) -> bool {
    if key.starts_with(FORWARD_KEY_PREFIX) {
        return now_ms.saturating_sub(at_ms) < FORWARD_KEY_COMPACT_MS;
    }
    !idem_expired(at_ms, now_ms)
}
