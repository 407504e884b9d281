//! As-of reads: the store as it was at a past seq (or time), rebuilt in memory from the log, so
//! that every read verb answers from it with the shape of its live read.
//!
//! The chain is checked while it is replayed (every record's hash, every link); the cost is one
//! walk of the log up to the seq asked for. Does not write the store.

use std::collections::BTreeMap;

use hookstate_schema::format::{
    self, encode_head, encode_view_key, encode_view_row, Head, META_DOMAIN_EVENTS, META_HEAD,
};
use hookstate_schema::{ViewKey, ViewRow, BODY_VARIANTS};

use crate::engine::{Engine, PROJECTIONS};
use crate::kernel::counts;
use crate::kernel::error::{Error, Result};
use crate::kernel::project;
use crate::kernel::view::read_head;
use crate::store::memory_filled;

impl Engine {
    /// The store as it was when its head was `seq`: a read-only engine in memory whose reads
    /// answer as this store's did then.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for a seq past the head; [`Error::ChainBroken`] for a record that
    /// fails its hash or its link; store errors.
    pub fn at_seq(&self, seq: u64) -> Result<Engine> {
        let kernel = self.kernel();
        let txn = kernel.begin_read()?;
        let now = read_head(&*txn)?;
        if seq > now.seq {
            let max = now.seq;
            return Err(Error::OutOfRange { what: "--at-seq", value: seq, min: 0, max, unit: "" });
        }
        let mut views = BTreeMap::<ViewKey, ViewRow>::new();
        let mut counted = [0u64; BODY_VARIANTS];
        let mut head = Head { seq: 0, hash: kernel.genesis() };
        let want = seq;
        let identity = kernel.identity();
        let storage = kernel.storage();
        // The head the memory store is anchored at is the one asked for; the walk checks it.
        let at = txn.event(want)?.map_or(Ok(head), |record| {
            format::decode_event(&record)
                .map(|e| Head { seq: e.seq, hash: e.hash })
                .map_err(|e| Error::ChainBroken { seq: want, why: e.to_string() })
        })?;
        let mut fill = |dst: &mut dyn crate::kernel::storage::WriteTxn| {
            txn.events(1, want, &mut |seq, record| {
                let broken = |why: String| Error::ChainBroken { seq, why };
                let event = format::decode_event(record).map_err(|e| broken(e.to_string()))?;
                if event.seq != head.seq + 1 || event.prev != head.hash {
                    return Err(broken("does not link to the event before it".into()));
                }
                project::apply(&PROJECTIONS, &mut views, &event);
                counted[event.content.body.variant_index()] += 1;
                head = Head { seq: event.seq, hash: event.hash };
                dst.append_event(seq, record)?;
                Ok(true)
            })?;
            if head != at {
                return Err(Error::ChainBroken {
                    seq: head.seq + 1,
                    why: "event is missing".into(),
                });
            }
            for (key, row) in &views {
                let key_bytes = encode_view_key(key);
                dst.put_view(&key_bytes, &encode_view_row(&key_bytes, row))?;
            }
            dst.put_meta(META_DOMAIN_EVENTS, &counts::encode(&counted))?;
            dst.put_meta(META_HEAD, &encode_head(&head))
        };
        let memory = memory_filled(
            &storage.path(),
            &storage.anchor_path(),
            identity.store_id,
            &at,
            &mut fill,
        )?;
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
