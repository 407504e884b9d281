//! As-of reads: the store as it was at a past seq (or time), rebuilt in memory from the log, so
//! that every read verb answers from it with the shape of its live read.
//!
//! The replay starts from the nearest checkpoint at or before the seq asked for (or genesis); the
//! chain is checked while it is replayed (every record's hash, every link). Does not write the store.

use hookstate_schema::format::{self, Head, META_CHECKPOINT, META_CHECKPOINT_VIEWS};

use crate::engine::{Engine, PROJECTIONS};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::WriteTxn;
use crate::kernel::view::read_head;
use crate::ops::api::Ops;
use crate::store::memory_filled;

impl Ops<'_> {
    /// The store as it was when its head was `seq`: a read-only engine in memory whose reads
    /// answer as this store's did then. It has no anchor of its own: check this store's anchors
    /// (`location().anchor_problem` of this engine) to know whether its log is vouched for.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for a seq past the head; [`Error::Refused`] for a seq whose events a
    /// compaction dropped; [`Error::ChainBroken`] for a record that fails its hash or its link;
    /// store errors.
    pub fn at_seq(&self, seq: u64) -> Result<Engine> {
        let kernel = self.kernel();
        let txn = kernel.begin_read()?;
        let now = read_head(&*txn)?;
        if seq > now.seq {
            let max = now.seq;
            return Err(Error::OutOfRange { what: "--at-seq", value: seq, min: 0, max, unit: "" });
        }
        // From the nearest checkpoint at or before `seq` (the compaction base, or the latest
        // one), else from genesis. The base itself is a state the store was in.
        let start = [
            crate::ops::snapshot::load(&*txn, META_CHECKPOINT, META_CHECKPOINT_VIEWS)?,
            Some(crate::ops::snapshot::log_start(&*txn, kernel.genesis())?),
        ]
        .into_iter()
        .flatten()
        .find(|start| start.head.seq <= seq);
        let Some(start) = start else {
            let why = format!(
                "is before the checkpoint the log was compacted to (--at-seq {seq}): the \
                 events up to it were dropped"
            );
            return Err(Error::refused("the seq asked for", why));
        };
        let want = seq;
        let identity = kernel.identity();
        let storage = kernel.storage();
        // The head asked for, which the walk must end at.
        let at = match txn.event(want)? {
            Some(record) if want > 0 => format::decode_event(&record)
                .map(|e| Head { seq: e.seq, hash: e.hash })
                .map_err(|e| Error::ChainBroken { seq: want, why: e.to_string() })?,
            _ => start.head,
        };
        let mut start = Some(start);
        let mut fill = |dst: &mut dyn WriteTxn| {
            let start = start.take().ok_or_else(|| Error::Invalid("filled twice".into()))?;
            let (head, _) = crate::ops::snapshot::copy_log(&*txn, start, want, &PROJECTIONS, dst)?;
            if head != at {
                return Err(Error::ChainBroken {
                    seq: head.seq + 1,
                    why: "event is missing".into(),
                });
            }
            Ok(())
        };
        let memory =
            memory_filled(&storage.path(), &storage.anchor_path(), identity.store_id, &mut fill)?;
        Engine::on_storage(memory, kernel.wait())
    }

    /// The seq the store was at, at time `at_ms` (UTC ms): the last event of the log's prefix
    /// appended at or before it (0 before the first).
    ///
    /// # Errors
    /// [`Error::ChainBroken`] for an undecodable record; store errors.
    pub fn seq_as_of(&self, at_ms: u64) -> Result<u64> {
        let txn = self.kernel().begin_read()?;
        let head = read_head(&*txn)?;
        let mut last = 0;
        txn.events(1, head.seq, &mut |seq, record| {
            let event = format::decode_event(record)
                .map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
            if event.content.at_ms > at_ms {
                return Ok(false);
            }
            last = seq;
            Ok(true)
        })?;
        Ok(last)
    }
}
