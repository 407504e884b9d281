//! The operator's handle, `engine.ops()`: the verbs over a whole store that share an engine
//! (verify, rebuild, stats, copy; as-of reads, checkpoint, dump, backup, metrics and group commit are declared
//! beside their own code in this folder).
//!
//! Declared here rather than in engine.rs: the operator's verbs sit above `Engine` (an as-of read
//! returns one), so engine.rs does not import them.

use std::path::Path;

use crate::audit::{self, RebuildReport, VerifyOptions, VerifyReport};
use crate::copy::{self, CopyReport};
use crate::engine::Engine;
use crate::kernel::error::Result;
use crate::kernel::write::Kernel;
use crate::query::{self, Stats};
use crate::store::OpenOptions;

/// The operator's handle on a store (`engine.ops()`): what audits, copies, snapshots and measures
/// the store as a whole, as opposed to a domain's verbs.
#[derive(Clone, Copy)]
pub struct Ops<'e> {
    engine: &'e Engine,
}

impl Engine {
    /// The operator's verbs over the whole store: verify, rebuild, stats, copy, as-of reads,
    /// checkpoint, dump, backup and metrics.
    #[must_use]
    pub fn ops(&self) -> Ops<'_> {
        Ops { engine: self }
    }
}

impl<'e> Ops<'e> {
    pub(crate) fn engine(&self) -> &'e Engine {
        self.engine
    }

    pub(crate) fn kernel(&self) -> &'e Kernel {
        self.engine.kernel()
    }

    /// Verifies the chain from genesis, the anchors outside the store, and that the stored
    /// views equal a rebuild of the log; `options.accept_missing_anchor` accepts (and writes) a
    /// missing anchor on a store with events. Reads only: never changes a byte of the store.
    /// On a redb store whose open did not run redb's check of every page
    /// ([`crate::OpenOptions::check_integrity`]), read-only or for writing, runs it beside the
    /// replay, on a view of the file of its own.
    ///
    /// # Errors
    /// [`crate::Error::ChainBroken`] naming the first bad seq, [`crate::Error::AnchorMismatch`],
    /// [`crate::Error::ViewMismatch`], [`crate::Error::Corrupt`] and store errors.
    pub fn verify(&self, options: VerifyOptions) -> Result<VerifyReport> {
        audit::verify(self.kernel(), options)
    }

    /// Drops every view and recomputes it from the log, after checking the chain.
    ///
    /// # Errors
    /// [`crate::Error::ChainBroken`] (nothing is changed then) and store errors.
    pub fn rebuild(&self) -> Result<RebuildReport> {
        audit::rebuild(self.kernel())
    }

    /// Whether this handle committed events. Each commit passed the anchor check under the
    /// write lock, so a caller that would mark its answers when the anchors disagree
    /// ([`Engine::location`]) need not look once it wrote.
    #[must_use]
    pub fn has_committed(&self) -> bool {
        self.kernel().has_committed()
    }

    /// Counts events, scopes, views and queue depths, and says where the store lives.
    ///
    /// # Errors
    /// Corruption and store errors.
    pub fn stats(&self) -> Result<Stats> {
        query::stats(self.kernel())
    }

    /// The first seq at or after `from` whose event the log still holds (`compact` drops the
    /// events up to its checkpoint); `None` when there is none up to the head. One range seek.
    ///
    /// # Errors
    /// Store errors.
    pub fn first_kept(&self, from: u64) -> Result<Option<u64>> {
        let txn = self.kernel().begin_read()?;
        let head = crate::kernel::view::read_head(&*txn)?;
        let mut kept = None;
        if from <= head.seq {
            txn.events(from, head.seq, &mut |seq, _| {
                kept = Some(seq);
                Ok(false)
            })?;
        }
        Ok(kept)
    }

    /// Copies this store into a new store at `to` (a file path or a `postgres://` address,
    /// opened with `options`): the same events at the same seqs with the same hashes, the views
    /// rebuilt, in one transaction; then verifies the destination. A destination file must not
    /// exist; a destination database must hold no events.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a destination that exists or holds events,
    /// [`crate::Error::ChainBroken`] for a source that does not verify, store errors.
    pub fn copy_to(&self, to: &Path, options: OpenOptions) -> Result<CopyReport> {
        copy::copy(self.kernel(), to, options)
    }
}
