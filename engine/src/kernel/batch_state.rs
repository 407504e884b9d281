//! The state of an open group-commit batch, kept in the kernel between the calls that join it:
//! its transaction, its head and its report. Apart from `kernel/batch.rs` (which opens, runs and
//! commits batches) so that the kernel's write path can hold the slot without importing the
//! batch logic that builds on it. Does not run or commit anything.

use std::thread::ThreadId;

use hookstate_schema::format::Head;

use crate::kernel::storage::WriteTxn;

/// The open batch: its transaction (taken out while a call runs in it), its head, and what it
/// did so far.
pub(crate) struct Batch {
    /// The one thread whose writes join the batch (a server's writer).
    pub(crate) owner: ThreadId,
    /// `None` while a call runs in it, and for good once a call tainted it.
    pub(crate) txn: Option<Box<dyn WriteTxn + Send>>,
    /// The head after the batch's last appended event.
    pub(crate) head: Head,
    /// What it did so far.
    pub(crate) report: BatchReport,
}

/// What a batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BatchReport {
    /// Calls that reached the write path inside the batch.
    pub(crate) calls: u32,
    /// Events they appended.
    pub(crate) appended: u64,
    /// A call failed after it wrote: the batch must not commit.
    pub(crate) tainted: bool,
}
