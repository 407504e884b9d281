//! `metrics`: events per domain, queue depths and the age of each queue's oldest ready item,
//! parked items, the file's size and the head, from one read snapshot.
//!
//! Its cost grows with the queues and their items, never with the log: events per domain are
//! the counts every commit keeps (`kernel::counts`). Does not write.

use hookstate_schema::format::{self, item_prefix, queue_meta_prefix, Head};
use hookstate_schema::{ItemState, ViewKey, ViewRow};

use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::view::{decode_row, read_head};
use crate::ops::api::Ops;
use crate::ops::kinds;

/// One queue's numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueMetrics {
    /// Its scope.
    pub scope: String,
    /// Its name.
    pub queue: String,
    /// Items ready to claim.
    pub ready: u64,
    /// Items leased.
    pub claimed: u64,
    /// Items parked (dead letters).
    pub parked: u64,
    /// Items acked over its life.
    pub acked: u64,
    /// How long the oldest ready item has waited, in ms (`None`: no ready item).
    pub oldest_ready_age_ms: Option<u64>,
}

/// What `metrics` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics {
    /// The head.
    pub head: Head,
    /// Bytes the store takes: its file's size, or on PostgreSQL its tables' (0 when the server
    /// cannot say).
    pub file_bytes: u64,
    /// Events appended per domain since genesis; `None` for a store made before the counts
    /// were kept, until `hookstate rebuild` counts them.
    pub events_per_domain: Option<Vec<(String, u64)>>,
    /// Every queue.
    pub queues: Vec<QueueMetrics>,
}

impl Ops<'_> {
    /// The store's metrics at `now_ms`, from one read snapshot.
    ///
    /// # Errors
    /// Corruption and store errors.
    pub fn metrics(&self, now_ms: u64) -> Result<Metrics> {
        let kernel = self.kernel();
        let txn = kernel.begin_read()?;
        let head = read_head(&*txn)?;
        let events_per_domain = crate::kernel::counts::read(&*txn)?
            .map(|counts| kinds::domains().into_iter().zip(counts).collect::<Vec<_>>());
        let mut queues = Vec::new();
        txn.views_with_prefix(&queue_meta_prefix(), &mut |key, row| {
            if let (ViewKey::QueueMeta { scope, queue }, ViewRow::QueueMeta(meta)) =
                decode_row(key, row)?
            {
                queues.push(QueueMetrics {
                    scope,
                    queue,
                    ready: meta.ready,
                    claimed: meta.claimed,
                    parked: meta.parked,
                    acked: meta.acked,
                    oldest_ready_age_ms: None,
                });
            }
            Ok(true)
        })?;
        for queue in &mut queues {
            queue.oldest_ready_age_ms = oldest_ready_at(&*txn, &queue.scope, &queue.queue)?
                .map(|at_ms| now_ms.saturating_sub(at_ms));
        }
        let file_bytes = kernel.storage().stored_bytes();
        Ok(Metrics { head, file_bytes, events_per_domain, queues })
    }
}

/// When the oldest ready item of a queue was pushed (the time of its push event).
fn oldest_ready_at(txn: &dyn ReadTxn, scope: &str, queue: &str) -> Result<Option<u64>> {
    let mut oldest = None::<u64>;
    txn.views_with_prefix(&item_prefix(scope, queue), &mut |key, row| {
        if let (_, ViewRow::Item(item)) = decode_row(key, row)? {
            if item.state == ItemState::Ready && oldest.is_none_or(|seq| item.pushed_seq < seq) {
                oldest = Some(item.pushed_seq);
            }
        }
        Ok(true)
    })?;
    let Some(seq) = oldest else {
        return Ok(None);
    };
    let Some(record) = txn.event(seq)? else {
        return Ok(None);
    };
    let event = format::decode_event(&record)
        .map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
    Ok(Some(event.content.at_ms))
}
