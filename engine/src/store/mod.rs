//! The `Storage` implementations: a redb file ([`redb`]) in a private directory ([`dir`]), with
//! its anchor beside it, or a PostgreSQL database ([`postgres`]) named by a `postgres://`
//! address, with a per-host anchor. [`open`] picks one by the address.
//!
//! Does not know the domains or the legacy files; the kernel sees only the `Storage` trait.

mod bounded;
mod dir;
mod fill;
mod flag_syncs;
mod memory;
mod postgres;
mod redb;
mod scratch;
mod second_anchor;
mod spill;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hookstate_schema::format::{genesis_hash, Head, STORE_ID_BYTES};

use crate::kernel::anchor;
use crate::kernel::error::{Error, Result};
use crate::kernel::fsio::random_bytes;
use crate::kernel::limits::WAIT_MS_MAX;
use crate::kernel::storage::{Audit, ReadTxn, SpillRows, Storage, WriteTxn};
use crate::kernel::write::initial_meta;

use self::dir::{FileId, StoreDir};
use self::redb::RedbStore;
use self::second_anchor::SecondAnchor;

pub(crate) use self::dir::is_temp_name;
pub(crate) use self::fill::create_filled;
pub(crate) use self::memory::memory_filled;
#[cfg(feature = "testing")]
pub use self::redb::Backend;

/// How to open a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenOptions {
    /// Longest wait for the write transaction (and for an exclusive opener), in ms.
    pub wait_ms: u64,
    /// Create the store (atomically) when the path does not exist.
    pub create: bool,
    /// Run redb's full integrity check on open (for rebuild and copy). `verify` does not need it:
    /// on a store opened without it, read-only or for writing, `verify` runs the check itself,
    /// on a view of its own beside its replay. `rebuild` runs it only when asked
    /// (`check_beside_replay`).
    pub check_integrity: bool,
    /// With `check_integrity`, on a store opened for writing (`rebuild`): run redb's check on a
    /// view of its own beside the replay of `Ops::rebuild`, as `verify` does, instead of on open,
    /// so a rebuild does not wait for it; the rebuild writes nothing before the check passed.
    /// Only `verify` and `rebuild` check such a store. Ignored without `check_integrity`, on a
    /// store opened read-only, and by a PostgreSQL store.
    pub check_beside_replay: bool,
    /// Open for reading only: the file is never written, not even its header. Writes fail.
    pub read_only: bool,
    /// With `read_only` (and not `create`): when the store is absent, answer from an empty store
    /// held in memory, initialised as a new store is, instead of failing with
    /// [`Error::NoStore`]. Nothing is created on disk; `Engine::exists` says which it was.
    pub absent_is_empty: bool,
    /// A directory for a second anchor (`HOOKSTATE_ANCHOR_DIR`): one append-only file per store,
    /// checked and moved like the anchor beside the store. It must exist. For a PostgreSQL store
    /// it holds the store's only anchor, kept per host.
    pub anchor_dir: Option<std::path::PathBuf>,
    /// Time the calls of a PostgreSQL store by the database server's clock, read inside each
    /// write transaction once it holds the head row, so that hosts with skewed clocks agree.
    /// Off: by each call's `now_ms`, as tests that inject time need. A redb store ignores it:
    /// its writer reads the host's clock once it holds the write lock. Either writer's clock is
    /// raised to the last event's time after a step back of at most
    /// [`crate::limits::CLOCK_RAISE_MS_MAX`]. On either, a call that pins its time
    /// ([`crate::Call::now_pinned`]) keeps it.
    pub server_clock: bool,
    /// For a PostgreSQL store, upgrade tables of an older schema version, in one transaction
    /// (`hookstate init`); without it such a database is refused. A database written by a newer
    /// build is refused either way. A redb store has no schema to upgrade: ignored.
    pub upgrade_schema: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            wait_ms: crate::kernel::limits::WAIT_MS_DEFAULT,
            create: true,
            check_integrity: false,
            check_beside_replay: false,
            read_only: false,
            absent_is_empty: false,
            anchor_dir: None,
            server_clock: true,
            upgrade_schema: false,
        }
    }
}

impl OpenOptions {
    /// The bounded wait, checked against its limit.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] past [`WAIT_MS_MAX`].
    pub fn wait(&self) -> Result<Duration> {
        if self.wait_ms > WAIT_MS_MAX {
            return Err(Error::OutOfRange {
                what: "wait",
                value: self.wait_ms,
                min: 0,
                max: WAIT_MS_MAX,
                unit: " ms",
            });
        }
        Ok(Duration::from_millis(self.wait_ms))
    }
}

/// A redb store file, the directory it lives in, and the second anchor's directory when one is
/// kept.
struct FileStore {
    db: RedbStore,
    dir: StoreDir,
    second: Option<SecondAnchor>,
    /// How [`Storage::check_pages`] checks the pages.
    pages: Pages,
}

/// What a file store's page check needs to know.
#[derive(Debug, Clone, Copy)]
struct Pages {
    /// Which audits run it.
    check: PageCheck,
    /// The open's wait.
    wait: Duration,
    /// The store file, as opened.
    file: FileId,
}

/// Which audits run redb's check of every page of a file store, as its open left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageCheck {
    /// None: the open ran it, or there is no file of pages (a test backend).
    Never,
    /// `verify`: a store opened without the check, read-only or for writing.
    Verify,
    /// `verify` and `rebuild`: a writer whose open left the check to the rebuild's replay
    /// ([`OpenOptions::check_beside_replay`]).
    VerifyAndRebuild,
}

impl Pages {
    /// A store with no file of pages to check (and no file identity: `(0, 0)`, which no file
    /// has).
    const NONE: Pages = Pages { check: PageCheck::Never, wait: Duration::ZERO, file: (0, 0) };
}

impl PageCheck {
    fn of(options: &OpenOptions) -> PageCheck {
        match (options.check_integrity, options.read_only, options.check_beside_replay) {
            (false, _, _) => PageCheck::Verify,
            (true, false, true) => PageCheck::VerifyAndRebuild,
            (true, _, _) => PageCheck::Never,
        }
    }

    fn runs_for(self, audit: Audit) -> bool {
        match self {
            PageCheck::Never => false,
            PageCheck::Verify => audit == Audit::Verify,
            PageCheck::VerifyAndRebuild => true,
        }
    }
}

impl Storage for FileStore {
    fn path(&self) -> PathBuf {
        self.dir.path()
    }
    fn anchor_path(&self) -> PathBuf {
        self.dir.anchor_path()
    }
    fn read_anchor(&self) -> Result<Option<String>> {
        self.dir.read_anchor()
    }
    fn second_anchor_path(&self, store_id: &[u8; STORE_ID_BYTES]) -> Option<PathBuf> {
        self.second.as_ref().map(|second| second.path(store_id))
    }
    fn read_second_anchor(&self, store_id: &[u8; STORE_ID_BYTES]) -> Result<Option<String>> {
        self.second.as_ref().map_or(Ok(None), |second| second.read_last(store_id))
    }
    fn check_anchor_history(&self, store_id: &[u8; STORE_ID_BYTES]) -> Result<()> {
        self.second.as_ref().map_or(Ok(()), |second| second.check_history(store_id))
    }
    fn update_anchors(
        &self,
        store_id: &[u8; STORE_ID_BYTES],
        next: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> Result<bool> {
        let Some(_lock) = self.dir.lock_anchors()? else {
            return Ok(false);
        };
        let first = self.dir.update_anchor(next);
        let second = self.second.as_ref().map_or(Ok(()), |second| {
            second.read_last(store_id).and_then(|current| {
                next(current.as_deref()).map_or(Ok(()), |text| second.append(store_id, &text))
            })
        });
        first.and(second).map(|()| true)
    }
    fn remove_stale_temps(&self) -> Result<u32> {
        self.dir.remove_stale_temps()
    }
    fn spill(&self) -> Option<std::sync::Arc<dyn SpillRows>> {
        let file = self.dir.unnamed_file().ok()?;
        Some(std::sync::Arc::new(self::spill::RunSpill::create(file)))
    }
    fn begin_write(&self, deadline: Instant) -> Result<Box<dyn WriteTxn + '_>> {
        self.db.begin_write(deadline)
    }
    fn begin_batch(&self, deadline: Instant) -> Result<Option<Box<dyn WriteTxn + Send>>> {
        self.db.begin_batch(deadline).map(Some)
    }
    fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        self.db.begin_read()
    }
    fn compact_file(&mut self) -> Result<bool> {
        self.db.compact_file()
    }
    fn check_pages(&self, audit: Audit) -> Result<()> {
        if !self.pages.check.runs_for(audit) {
            return Ok(());
        }
        // A view, checked as it opens and dropped: never writes the file.
        self.page_view().map(drop)
    }

    fn check_in_place(&self) -> Result<()> {
        if self.pages.file == Pages::NONE.file {
            return Ok(());
        }
        match self.dir.store_id_now()? {
            Some(now) if now == self.pages.file => Ok(()),
            _ => Err(Error::StoreReplaced { path: self.dir.path() }),
        }
    }
}

impl FileStore {
    /// A view of the store file as it is now (`RedbStore::open_view`), checked by redb's check
    /// of every page as it opens, on a handle of its own: redb's file locks belong to an open file
    /// description, so the view's pin and header locks stand against this store's own writer (a
    /// rebuild's held write transaction, another thread's commit) as against another process's.
    /// On the writer's own handle, redb's read-only open did not see the live writer, took the
    /// file for one a killed writer left, waited [`crate::limits::READ_ONLY_REPAIR_WAIT_MS`] and
    /// read it unpinned while that writer could move its pages (docs/decisions.md).
    ///
    /// # Errors
    /// [`Error::Corrupt`] when another file was put at the store's path since it was opened;
    /// [`Error::StoreCorrupt`] for a page that fails its check; IO and store errors.
    fn page_view(&self) -> Result<RedbStore> {
        let path = self.dir.path();
        let (file, id) = self
            .dir
            .open_store_with_id(true)?
            .ok_or_else(|| Error::NoStore { path: path.clone() })?;
        if id != self.pages.file {
            return Err(Error::Corrupt(format!(
                "{} was replaced by another file while it was open: its pages were not checked",
                path.display()
            )));
        }
        RedbStore::open_view(&file, self.pages.wait, true)
    }
}

/// Opens the redb store at `path`, creating it atomically first when it is absent and
/// `options.create` is set.
///
/// # Errors
/// [`Error::NoStore`], [`Error::NotAStore`], [`Error::UnsafePath`], [`Error::Busy`],
/// [`Error::Io`] and the store variants.
pub(crate) fn open(path: &Path, options: OpenOptions) -> Result<Box<dyn Storage>> {
    if let Some(text) = remote(path) {
        let intent =
            if options.upgrade_schema { postgres::Intent::Init } else { postgres::Intent::Open };
        return open_remote(text, &options, intent);
    }
    let wait = options.wait()?;
    let empty_if_absent = options.absent_is_empty && options.read_only && !options.create;
    let dir = match StoreDir::open(path, options.create) {
        Err(Error::NoStore { .. }) if empty_if_absent => return empty(path),
        other => other?,
    };
    let second = options.anchor_dir.as_deref().map(SecondAnchor::open).transpose()?;
    let (file, id) = match dir.open_store_with_id(options.read_only)? {
        Some(opened) => opened,
        None if options.create => {
            create_store(&dir, second.as_ref(), &random_bytes::<STORE_ID_BYTES>()?)?;
            dir.open_store_with_id(false)?.ok_or_else(|| Error::NoStore { path: dir.path() })?
        }
        None if empty_if_absent => return empty(&dir.path()),
        None => return Err(Error::NoStore { path: dir.path() }),
    };
    let db = match (options.read_only, options.check_integrity) {
        // verify: redb's full check on a view of the file, which is never written.
        (true, true) => RedbStore::open_view(&file, wait, true)?,
        // A read never writes and never waits for a writer: a file a killed writer left
        // needing repair is repaired in a view, not on disk.
        (true, false) => match RedbStore::open_read_only(&file, wait)? {
            Some(db) => db,
            None => RedbStore::open_view(&file, wait, false)?,
        },
        (false, check) => {
            let db = RedbStore::open(&file, check && !options.check_beside_replay, wait)?;
            // A writer owns the directory: what killed writers left there goes (best effort;
            // `rebuild`, which opens with the integrity check, removes them itself and reports).
            if !options.check_integrity {
                let _ = dir.remove_stale_temps();
            }
            db
        }
    };
    let pages = Pages { check: PageCheck::of(&options), wait, file: id };
    Ok(Box::new(FileStore { db, dir, second, pages }))
}

/// The address text of a remote store, `None` for a file path.
fn remote(path: &Path) -> Option<&str> {
    postgres::is_address(path).then(|| path.to_str()).flatten()
}

/// A remote store's address as it may be shown (without its password); `None` for a file path.
#[must_use]
pub fn remote_address(path: &Path) -> Option<String> {
    remote(path).map(postgres::redact)
}

fn open_remote(
    text: &str,
    options: &OpenOptions,
    intent: postgres::Intent,
) -> Result<Box<dyn Storage>> {
    let shown = PathBuf::from(postgres::redact(text));
    match postgres::open(text, options, intent)? {
        Some(store) => Ok(store),
        None if options.absent_is_empty && options.read_only && !options.create => empty(&shown),
        None => Err(Error::NoStore { path: shown }),
    }
}

/// Opens the store at `path` to receive a copy of the store `store_id`: a store file must be
/// absent, and is created with that identity; a PostgreSQL store must hold no events, and takes
/// that identity on.
///
/// # Errors
/// [`Error::Invalid`] for a destination that exists (a file) or holds events; as [`open`].
pub(crate) fn open_for_copy(
    path: &Path,
    options: &OpenOptions,
    store_id: &[u8; STORE_ID_BYTES],
) -> Result<Box<dyn Storage>> {
    if let Some(text) = remote(path) {
        return postgres::open_for_copy(text, options, store_id);
    }
    let dir = StoreDir::open(path, true)?;
    if dir.open_store(true)?.is_some() {
        return Err(Error::Invalid(format!(
            "the destination {} exists: copy into a new store file",
            path.display()
        )));
    }
    let second = options.anchor_dir.as_deref().map(SecondAnchor::open).transpose()?;
    create_store(&dir, second.as_ref(), store_id)?;
    open(path, OpenOptions { create: false, read_only: false, ..options.clone() })
}

/// The stand-in for an absent store that a read sees: an empty store in memory, initialised as
/// a new file is (an all-zero store id: nothing is ever chained to it), which refuses writes. Its
/// anchor is the one a removed store left at the path, if any, for the read to be told. Creates
/// nothing on disk.
struct EmptyStore {
    db: RedbStore,
    path: PathBuf,
}

fn empty(path: &Path) -> Result<Box<dyn Storage>> {
    let meta = initial_meta(&[0; STORE_ID_BYTES]);
    let meta: Vec<(&str, &[u8])> = meta.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    Ok(Box::new(EmptyStore { db: RedbStore::empty(&meta)?, path: path.to_path_buf() }))
}

impl Storage for EmptyStore {
    fn exists(&self) -> bool {
        false
    }
    fn path(&self) -> PathBuf {
        self.path.clone()
    }
    fn anchor_path(&self) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(dir::ANCHOR_SUFFIX);
        PathBuf::from(name)
    }
    fn read_anchor(&self) -> Result<Option<String>> {
        let dir = StoreDir::open(&self.path, false).ok();
        Ok(dir.and_then(|dir| dir.read_anchor().ok().flatten()))
    }
    fn update_anchors(
        &self,
        _: &[u8; STORE_ID_BYTES],
        _: &mut dyn FnMut(Option<&str>) -> Option<String>,
    ) -> Result<bool> {
        Err(Error::NoStore { path: self.path.clone() })
    }
    fn remove_stale_temps(&self) -> Result<u32> {
        Ok(0)
    }
    fn begin_write(&self, _: Instant) -> Result<Box<dyn WriteTxn + '_>> {
        Err(Error::ReadOnly)
    }
    fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        self.db.begin_read()
    }
}

/// Opens (or, when `options.create` is set and the backend is empty, creates) a store on a test
/// `backend` (an in-memory disk image); the anchor lives beside `path`, in a real directory.
///
/// # Errors
/// As [`open`].
#[cfg(feature = "testing")]
pub(crate) fn open_on_backend(
    path: &Path,
    backend: impl Backend,
    options: OpenOptions,
) -> Result<Box<dyn Storage>> {
    let dir = StoreDir::open(path, true)?;
    let second = options.anchor_dir.as_deref().map(SecondAnchor::open).transpose()?;
    let store_id = random_bytes::<STORE_ID_BYTES>()?;
    let meta = initial_meta(&store_id);
    let meta: Vec<(&str, &[u8])> = meta.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    let fresh = options.create && backend.len().is_ok_and(|len| len == 0);
    let meta = options.create.then_some(&meta[..]);
    let db = RedbStore::on_backend(backend, meta, options.check_integrity)?;
    if fresh {
        anchor_genesis(&dir, second.as_ref(), &store_id);
    }
    Ok(Box::new(FileStore { db, dir, second, pages: Pages::NONE }))
}

/// Whether a new store is made in a temporary file that is published at the store's path only
/// once it is complete and synced. Always, except under the `non-atomic-create` drill, which
/// creates the store in place.
#[must_use]
pub fn creation_is_atomic() -> bool {
    #[cfg(feature = "bugdrill")]
    if crate::kernel::drill::is(crate::kernel::drill::Drill::NonAtomicCreate) {
        return false;
    }
    true
}

fn create_store(
    dir: &StoreDir,
    second: Option<&SecondAnchor>,
    store_id: &[u8; STORE_ID_BYTES],
) -> Result<()> {
    left_anchor(dir)?;
    let meta = initial_meta(store_id);
    let meta: Vec<(&str, &[u8])> = meta.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    // The planted bug: redb creates the store in place, so a crash or a concurrent opener sees a
    // half-made (or empty) store file.
    #[cfg(feature = "bugdrill")]
    if !creation_is_atomic() {
        drop(RedbStore::create_in(dir.create_in_place()?, &meta)?);
        return Ok(());
    }
    let (file, draft) = dir.create_draft("create")?;
    let keep = file.try_clone().map_err(|e| Error::io("duplicate handle of", dir.path(), e));
    let created = keep.and_then(|keep| {
        drop(RedbStore::create_in(file, &meta)?);
        keep.sync_all().map_err(|e| Error::io("fsync", dir.path(), e)).map(|()| keep)
    });
    match created {
        Ok(keep) => {
            if dir.publish_store(&draft, &keep)? {
                anchor_genesis(dir, second, store_id);
            }
            Ok(())
        }
        Err(err) => {
            let _ = dir.discard(&draft);
            Err(err)
        }
    }
}

/// Refuses to create a store beside the anchor of a removed one that held events: the new store
/// would refuse every write (the anchor names another store), and the path would stay unusable
/// until an operator removed both. Nothing is created.
fn left_anchor(dir: &StoreDir) -> Result<()> {
    // An anchor that cannot be read (a planted link) is one too, and stays as evidence.
    let text = match dir.read_anchor() {
        Ok(None) => return Ok(()),
        Ok(Some(text)) => Some(text),
        Err(_) => None,
    };
    let parsed = text.as_deref().map(hookstate_schema::format::parse_anchor);
    let seq = parsed.as_ref().and_then(|p| p.as_ref().ok()).map(|(_, head)| head.seq);
    // A creator that won the race beside this one anchored the store it published: open it.
    if seq == Some(0) || dir.open_store(true)?.is_some() {
        return Ok(());
    }
    let names = match (&text, seq) {
        (_, Some(seq)) => format!("seq {seq}"),
        (Some(_), None) => "an anchor that does not parse".to_owned(),
        (None, None) => "an anchor that cannot be read".to_owned(),
    };
    Err(Error::AnchorMismatch {
        why: format!(
            "{}: no store is at {}, but the anchor of one is left there ({names}): the store was \
             removed or moved; put it back, or remove the anchor once it is gone for good",
            dir.anchor_path().display(),
            dir.path().display()
        ),
    })
}

/// Writes the new store's anchor at seq 0 (best effort: the first commit writes it too) unless
/// an anchor is already there, which is kept: an anchor of another store beside a new store file
/// means the old one was removed, and writes are refused until an operator says otherwise.
fn anchor_genesis(dir: &StoreDir, second: Option<&SecondAnchor>, store_id: &[u8; STORE_ID_BYTES]) {
    let head = Head { seq: 0, hash: genesis_hash(store_id) };
    if let Ok(Some(_lock)) = dir.lock_anchors() {
        let _ = dir.update_anchor(&mut |current| anchor::advance(current, store_id, &head));
        if let Some(second) = second {
            if let Ok(current) = second.read_last(store_id) {
                if let Some(text) = anchor::advance(current.as_deref(), store_id, &head) {
                    let _ = second.append(store_id, &text);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(1);

    /// A new store at `path`, opened for writing as a `FileStore` without the check on open.
    fn writer(path: &Path) -> FileStore {
        drop(open(path, OpenOptions::default()).unwrap());
        let dir = StoreDir::open(path, false).unwrap();
        let (file, id) = dir.open_store_with_id(false).unwrap().unwrap();
        let db = RedbStore::open(&file, false, WAIT).unwrap();
        let pages = Pages { check: PageCheck::Verify, wait: WAIT, file: id };
        FileStore { db, dir, second: None, pages }
    }

    /// The page check's view of a store this process holds open for writing is pinned by a
    /// reader's transaction at once: on the writer's own file handle, redb's read-only open
    /// takes the live writer for a killed one, and the view went unpinned after a wait.
    #[test]
    fn a_writers_page_check_reads_a_pinned_view_on_a_handle_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = writer(&dir.path().join("s.redb"));
        let view = store.page_view().unwrap();
        assert!(view.is_pinned_view(), "the view is not pinned");
        // While the view is held, the writer commits on.
        let mut txn = store.begin_write(Instant::now() + WAIT).unwrap();
        txn.put_meta("m", b"1").unwrap();
        txn.commit().unwrap();
        drop(view);
        store.check_pages(Audit::Verify).unwrap();
    }

    /// Another file put at the store's path while it is open is not checked in its place.
    #[test]
    fn a_page_check_refuses_a_file_put_in_the_stores_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let store = writer(&path);
        let other = dir.path().join("other.redb");
        drop(open(&other, OpenOptions::default()).unwrap());
        std::fs::rename(&other, &path).unwrap();
        let checked = store.check_pages(Audit::Verify);
        assert!(
            matches!(&checked, Err(Error::Corrupt(text)) if text.contains("replaced")),
            "{checked:?}"
        );
        // `rebuild` of a store whose open did not leave the check to it checks nothing.
        store.check_pages(Audit::Rebuild).unwrap();
    }
}
