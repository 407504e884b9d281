//! The narrow storage seam: append and read the log, read and write view rows, and metadata,
//! all inside one transaction.
//!
//! Domain code sees only these traits, so a second backend (PostgreSQL, DESIGN.md §9) stands
//! beside redb without touching it. Does not know any backend; `store/` implements the traits.

use std::path::PathBuf;
use std::time::Instant;

use hookstate_schema::format::STORE_ID_BYTES;

use crate::kernel::error::Result;

/// Called with each event's seq and record; returns whether to go on.
pub(crate) type EventVisitor<'a> = dyn FnMut(u64, &[u8]) -> Result<bool> + 'a;
/// Called with each view row's key and value; returns whether to go on.
pub(crate) type RowVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'a;

/// What a reader may do inside one snapshot.
pub(crate) trait ReadTxn {
    /// A metadata value.
    fn meta(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// The stored record of one event.
    fn event(&self, seq: u64) -> Result<Option<Vec<u8>>>;
    /// Visits the records of `from..=to` in order until `visit` returns `false`.
    fn events(&self, from: u64, to: u64, visit: &mut EventVisitor<'_>) -> Result<()>;
    /// One view row.
    fn view(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// In a read snapshot of an initialized store: that the log and views tables exist. A
    /// backend whose write transaction creates a missing table (redb) checks this when a store
    /// is opened, so that a damaged table tree is exit 5 for every call, and a write never
    /// stands an empty table in for a lost one.
    fn check_tables(&self) -> Result<()> {
        Ok(())
    }
    /// Several view rows, in the order of `keys`: what a write reads before it projects, in one
    /// visit of the views table where the backend can (redb opens a table per call otherwise).
    fn views(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|key| self.view(key)).collect()
    }
    /// Visits the view rows whose key starts with `prefix`, in key order, until `visit` returns
    /// `false`.
    fn views_with_prefix(&self, prefix: &[u8], visit: &mut RowVisitor<'_>) -> Result<()>;
    /// The store's clock in UTC ms: a database server's, read as each transaction began (a
    /// writer's once it held the head row) when the store was opened to use it; on redb the
    /// host's, read by a writer once it held the write lock. A writer's is raised to the log's
    /// last event time when it is behind that by at most `CLOCK_RAISE_MS_MAX`. `None` on a redb
    /// read snapshot and on a store opened with the caller's clock. A call that does not pin its
    /// time is timed by it ([`crate::Call::now_pinned`]).
    fn clock_ms(&self) -> Option<u64> {
        None
    }
    /// This snapshot as one other threads may read beside this one (`verify` looks rows up on
    /// a thread of its own while it scans), or `None` when it is one thread's (the default).
    fn shared(&self) -> Option<&(dyn ReadTxn + Sync)> {
        None
    }
}

/// What a writer may do inside its one transaction.
pub(crate) trait WriteTxn: ReadTxn {
    /// Sets a metadata value.
    fn put_meta(&mut self, key: &str, value: &[u8]) -> Result<()>;
    /// Inserts the record of event `seq`, which must not exist.
    fn append_event(&mut self, seq: u64, record: &[u8]) -> Result<()>;
    /// Sets a view row.
    fn put_view(&mut self, key: &[u8], row: &[u8]) -> Result<()>;
    /// Removes a view row.
    fn delete_view(&mut self, key: &[u8]) -> Result<()>;
    /// Sets (`Some`) or removes (`None`) several view rows, in order: a projected event's
    /// changes, in one visit of the views table where the backend can.
    fn write_views(&mut self, changes: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()> {
        for (key, row) in changes {
            match row {
                Some(row) => self.put_view(key, row)?,
                None => self.delete_view(key)?,
            }
        }
        Ok(())
    }
    /// Removes every view row.
    fn clear_views(&mut self) -> Result<()>;
    /// Removes the records of every event up to `seq` (compaction after a checkpoint); returns
    /// how many were removed. A backend that cannot says so.
    fn drop_events_through(&mut self, _seq: u64) -> Result<u64> {
        Err(crate::kernel::error::Error::Invalid("this store cannot drop events".into()))
    }
    /// Moves the values of `format::BLOB_KEYS` a store of an older format keeps among its meta
    /// rows to their own table; nothing where they are there already, or where the backend keeps
    /// every value in one place.
    fn move_blobs(&mut self) -> Result<()> {
        Ok(())
    }
    /// Runs `body` on this transaction with its tables held open for the body's length: one
    /// call's reads and writes (`Kernel::run_call`), where a backend would open a handle per
    /// table per operation otherwise (redb: a lookup in its table tree, and a write-back of the
    /// root when the handle drops). A backend without such handles runs `body` on itself.
    /// `body` cannot commit.
    fn with_tables(&mut self, body: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<()>) -> Result<()>;
    /// Makes the transaction durable. Only after this returns may the caller acknowledge.
    fn commit(self: Box<Self>) -> Result<()>;
}

/// A private table of rows by encoded view key, in key order, for a replay whose rebuilt views
/// outgrow memory (`verify`, `rebuild`): never durable, never seen by another process, gone when
/// dropped (and when its process is killed).
pub(crate) trait SpillRows: Send + Sync {
    /// Sets (`Some`) or removes (`None`) rows, in one transaction; reads after it returns see
    /// them (a read that overlaps it may see the table before it).
    fn write(&self, rows: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<()>;
    /// The rows of `keys`, in their order.
    fn get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>>;
    /// At most `limit` rows in key order, from the first key after `after` (from the start when
    /// `None`).
    fn after(&self, after: Option<&[u8]>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
}

/// A store that hands out transactions, and keeps the anchor (the head copied outside it).
pub(crate) trait Storage: Send + Sync {
    /// Whether the store exists on disk (`false` for a stand-in of an absent store).
    fn exists(&self) -> bool {
        true
    }
    /// The store's printable location (a file path, or an address without its password).
    fn path(&self) -> PathBuf;
    /// Where the anchor lives, printable.
    fn anchor_path(&self) -> PathBuf;
    /// The anchor's text, if there is one.
    fn read_anchor(&self) -> Result<Option<String>>;
    /// Whether a missing anchor on a store that holds events is refused. It is for a store file,
    /// whose anchor lives beside it; a remote store's anchor is kept per host, and a host that
    /// never wrote has none yet.
    fn anchor_required(&self) -> bool {
        true
    }
    /// Where the second anchor of the store `store_id` lives, when one is kept (an append-only
    /// file in a directory the store's writer cannot rewrite).
    fn second_anchor_path(&self, _store_id: &[u8; STORE_ID_BYTES]) -> Option<PathBuf> {
        None
    }
    /// The second anchor's last line, if it has one.
    fn read_second_anchor(&self, _store_id: &[u8; STORE_ID_BYTES]) -> Result<Option<String>> {
        Ok(None)
    }
    /// Reads every line of an appended anchor file (the second anchor; a remote store's per-host
    /// one): no line's seq may be below one before it. Costs the file's length: `verify` only.
    fn check_anchor_history(&self, _store_id: &[u8; STORE_ID_BYTES]) -> Result<()> {
        Ok(())
    }
    /// Moves the anchors under the anchor lock: `next` maps each anchor's current text to the
    /// text to write (`None`: leave it). The anchor beside the store is replaced atomically, the
    /// second one appended to. Returns `false`, having done nothing, when another writer holds
    /// the lock (it is moving them; an anchor may lag, never lead).
    fn update_anchors(
        &self,
        store_id: &[u8; STORE_ID_BYTES],
        next: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> Result<bool>;
    /// Removes what killed writers left beside the store; returns how many were removed.
    fn remove_stale_temps(&self) -> Result<u32>;
    /// Takes the single write transaction, waiting at most until `deadline`.
    fn begin_write(&self, deadline: Instant) -> Result<Box<dyn WriteTxn + '_>>;
    /// Takes the single write transaction for a batch of calls (group commit), owned so that a
    /// server's writer can hold it across them; `None` when this backend cannot, and the server
    /// then commits call by call.
    fn begin_batch(&self, _deadline: Instant) -> Result<Option<Box<dyn WriteTxn + Send>>> {
        Ok(None)
    }
    /// Opens a read snapshot.
    fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>>;
    /// The bytes the store takes: its file's size, or what the backend says its tables take; 0
    /// when it cannot say.
    fn stored_bytes(&self) -> u64 {
        std::fs::symlink_metadata(self.path()).map_or(0, |m| m.len())
    }
    /// A fresh [`SpillRows`] table for a replay, kept where the store is (an unnamed file in the
    /// store's directory); `None` when this store has no place of its own for one (a stand-in,
    /// a database server, a directory this process may only read): the replay then holds its
    /// rows in memory.
    fn spill(&self) -> Option<std::sync::Arc<dyn SpillRows>> {
        None
    }
    /// Gives the file's free space back to the filesystem, when the backend can; returns whether
    /// it did.
    fn compact_file(&mut self) -> Result<bool> {
        Ok(false)
    }
    /// redb's full integrity check of every page, on a view of a handle of its own, when the
    /// store's open did not run it and `audit` asks for it: `verify` checks every such store
    /// (read-only or a writer), `rebuild` only one whose open left the check to it
    /// (`OpenOptions::check_beside_replay`). Both run it beside their replay. Does nothing for a
    /// store checked on open, or a backend without pages of its own to check.
    fn check_pages(&self, _audit: Audit) -> Result<()> {
        Ok(())
    }
    /// Refuses a commit to a store file that is no longer the one at its path: replaced or
    /// removed (a restore or a backup moved over it) while this handle holds the old file open,
    /// which a long-lived handle (a server) would otherwise go on committing to, every commit
    /// lost with the old file. A store that is no file is always in place.
    ///
    /// # Errors
    /// [`Error::StoreReplaced`]; a `stat` that fails.
    fn check_in_place(&self) -> Result<()> {
        Ok(())
    }
}

/// The audit a page check runs for ([`Storage::check_pages`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Audit {
    /// `verify`: its answer is the same on every handle, however the store was opened.
    Verify,
    /// `rebuild`: a repair, which checks the pages only when the open asked it to.
    Rebuild,
}
