//! Bulk appends for building large stores (the scale bench, `testing` feature only): events
//! appended as they are, many per write transaction, through the same append and projection as
//! the write path, with the anchor checked before and moved after each batch.
//!
//! Decides nothing: the caller's events are appended without any rule. Does not know any domain.

use hookstate_schema::format::{encode_head, Head, META_HEAD};
use hookstate_schema::{validate_scope, Body};

use crate::kernel::call::Call;
use crate::kernel::error::{Error, Result};
use crate::kernel::view::read_head;
use crate::kernel::write::{Kernel, Stamp};

/// Events one bulk transaction may append: large batches amortise a commit, and this bounds the
/// memory a write transaction's dirty pages may hold.
pub(crate) const BULK_EVENTS_MAX: usize = 100_000;

impl Kernel {
    /// Appends `events` (scope, body) in one write transaction, projected as the write path
    /// projects them, and returns the new head.
    ///
    /// # Errors
    /// [`Error::TooMany`] past [`BULK_EVENTS_MAX`]; as the write path.
    pub(crate) fn append_batch(&self, call: &Call, events: &[(String, Body)]) -> Result<Head> {
        if events.len() > BULK_EVENTS_MAX {
            let (count, max) = (events.len(), BULK_EVENTS_MAX);
            return Err(Error::TooMany { what: "events in one bulk append", count, max });
        }
        self.current()?;
        let mut txn = self.begin_write()?;
        let mut head = read_head(&*txn)?;
        let anchors = self.read_anchors();
        self.anchor_gate(&*txn, &head, anchors)?;
        for (scope, body) in events {
            validate_scope(scope)?;
            let (event, record) =
                self.encode_one(head, Stamp { call, now_ms: call.now_ms }, scope, body, None)?;
            txn.append_event(event.seq, &record)?;
            self.project_live(&mut *txn, &event)?;
            head = Head { seq: event.seq, hash: event.hash };
        }
        if events.is_empty() {
            return Ok(head);
        }
        crate::kernel::counts::add(&mut *txn, events.iter().map(|(_, body)| body))?;
        txn.put_meta(META_HEAD, &encode_head(&head))?;
        if let Err(err) = txn.commit() {
            self.poison();
            return Err(err);
        }
        self.move_anchors(&head, false);
        Ok(head)
    }
}
