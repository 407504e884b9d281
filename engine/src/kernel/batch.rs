//! Group commit: one write transaction that many calls join in turn, committed once.
//!
//! A server's writer thread opens a batch ([`Kernel::begin_batch`]), runs its calls, each of
//! which reaches [`Kernel::write`] as in per-call mode and runs there the same per-call body
//! ([`Kernel::run_call`]) against the batch's transaction, so each call's decision sees the
//! writes of the calls before it in the batch (reads inside a write transaction see its writes);
//! then it commits once ([`Kernel::commit_batch`]). Idempotency keys and compare-and-swaps are
//! decided inside the one transaction, exactly as per call.
//!
//! A call that fails before it writes (invalid input, a limit, a refusal is not even a failure)
//! answers alone and leaves the batch as it was: every event of a call is encoded and checked
//! before the first one is appended. A call that fails after it wrote (a store error, a damaged
//! row) taints the batch: the writer must abort it and run its calls again one by one. Does not
//! know what a call is for, nor any socket; `serve` does.

use std::thread;
use std::time::Instant;

use hookstate_schema::format::{encode_head, META_HEAD};

use crate::kernel::batch_state::{Batch, BatchReport};
use crate::kernel::call::{Call, Outcome, Plan};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::view::read_head;
use crate::kernel::write::Kernel;

/// How a batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchEnd {
    /// Committed (or nothing to commit): every answer given inside it stands.
    Committed(BatchReport),
    /// Not committed: a call tainted it (or it could not be committed); nothing of it is in the
    /// store, and its calls must run again one by one.
    Aborted(BatchReport),
}

impl Kernel {
    /// Opens a batch on this thread: takes the write transaction (waiting at most the store's
    /// wait) and checks the anchors once for all of its calls. `Ok(false)` when the backend
    /// cannot hold a transaction across calls: the caller then runs its calls one by one.
    ///
    /// # Errors
    /// As the start of [`Kernel::write`]: [`Error::Poisoned`], [`Error::UpgradeRequired`],
    /// [`Error::Busy`], the anchor errors, store errors.
    ///
    /// # Panics
    /// When this thread already holds a batch (a bug of the caller).
    pub(crate) fn begin_batch(&self) -> Result<bool> {
        if self.poisoned.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Poisoned);
        }
        self.current()?;
        assert!(!self.holds_batch(), "a batch is already open on this thread");
        let Some(mut txn) = self.storage.begin_batch(self.deadline_from(Instant::now()))? else {
            return Ok(false);
        };
        self.mark_format(&mut *txn)?;
        let head = read_head(&*txn)?;
        let anchors = self.read_anchors();
        self.anchor_gate(&*txn, &head, anchors)?;
        let batch = Batch {
            owner: thread::current().id(),
            txn: Some(txn),
            head,
            report: BatchReport::default(),
        };
        *self.batch_slot() = Some(batch);
        Ok(true)
    }

    /// Ends this thread's batch: commits it with the new head when it appended anything and no
    /// call tainted it, then moves the anchors; else drops its transaction (nothing of it stays).
    /// A failed commit poisons the kernel, as in per-call mode, and is returned.
    ///
    /// # Errors
    /// The commit's error (the batch's effects are then unknown to its callers).
    ///
    /// # Panics
    /// When this thread holds no batch.
    pub(crate) fn commit_batch(&self) -> Result<BatchEnd> {
        let batch = self.batch_slot().take();
        let Some(batch) = batch.filter(|b| b.owner == thread::current().id()) else {
            panic!("commit_batch without an open batch on this thread");
        };
        let report = batch.report;
        let Some(mut txn) = batch.txn.filter(|_| !report.tainted) else {
            return Ok(BatchEnd::Aborted(report));
        };
        if report.appended == 0 {
            return Ok(BatchEnd::Committed(report));
        }
        txn.put_meta(META_HEAD, &encode_head(&batch.head))?;
        if let Err(err) = self.storage.check_in_place().and_then(|()| txn.commit()) {
            self.poison();
            return Err(err);
        }
        self.committed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.move_anchors(&batch.head, false);
        Ok(BatchEnd::Committed(report))
    }

    /// Ends this thread's batch without committing it: nothing of it stays.
    ///
    /// # Panics
    /// When this thread holds no batch.
    pub(crate) fn abort_batch(&self) -> BatchReport {
        let batch = self.batch_slot().take();
        let Some(batch) = batch.filter(|b| b.owner == thread::current().id()) else {
            panic!("abort_batch without an open batch on this thread");
        };
        batch.report
    }

    /// Whether this thread holds an open batch.
    pub(crate) fn holds_batch(&self) -> bool {
        self.batch_slot().as_ref().is_some_and(|b| b.owner == thread::current().id())
    }

    fn batch_slot(&self) -> std::sync::MutexGuard<'_, Option<Batch>> {
        // A panic while the slot is locked leaves nothing half-done in it (it only holds the
        // batch between calls), so a poisoned lock is still a consistent slot.
        self.batch.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `call` inside this thread's batch, or `None` when it holds none. The transaction is
    /// taken out of the slot while the call runs, so a panicking call drops it: the batch is
    /// then tainted and the writer runs its calls again one by one.
    pub(super) fn write_in_batch(
        &self,
        call: &Call,
        decide: &dyn Fn(&dyn ReadTxn) -> Result<Plan>,
    ) -> Option<Result<Outcome>> {
        let (mut txn, head) = {
            let mut slot = self.batch_slot();
            let batch = slot.as_mut().filter(|b| b.owner == thread::current().id())?;
            batch.report.calls += 1;
            match batch.txn.take() {
                Some(txn) => {
                    // Tainted until the call gives the transaction back.
                    batch.report.tainted = true;
                    (txn, batch.head)
                }
                None => return Some(Err(Error::Poisoned)),
            }
        };
        // Timed by the store's clock, read once the batch held the write lock, as a call of its
        // own would be, unless the call pins its time.
        let now_ms = call.now_in(&*txn);
        let ran = self.run_call(&mut *txn, head, call, now_ms, decide);
        let mut slot = self.batch_slot();
        let batch = slot.as_mut()?;
        match ran {
            Ok(outcome) => {
                batch.txn = Some(txn);
                batch.report.tainted = false;
                if outcome.appended > 0 {
                    batch.head = outcome.head;
                    batch.report.appended += outcome.appended;
                }
                Some(Ok(outcome))
            }
            Err(failed) => {
                if !failed.touched {
                    batch.txn = Some(txn);
                    batch.report.tainted = false;
                }
                Some(Err(failed.error))
            }
        }
    }
}
