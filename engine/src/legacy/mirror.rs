//! The one mirror protocol: legacy files kept current after every mirrored call, for readers
//! that still read them, and changes that writers which still write them made adopted as events
//! first — for every layout alike.
//!
//! A mirrored call takes the mirror directory's lock, reads each file of its layouts and the
//! baseline beside it (the bytes the mirror last wrote or adopted), and hands the files that
//! changed to their layout, which merges them per record (baseline, file, store) by its domain's
//! rules, inside one write transaction: a legal outside move is adopted, a record the file
//! dropped but the store still holds is kept, a stale rewrite never reverts a newer acknowledged
//! change, a true conflict is reported once (the store's record stays) and never blocks the rest.
//! Then the verb runs, and each file whose rendering changed is written, only over the bytes the
//! call saw: a file a lock-less writer changed during the call is kept, its baseline left at what
//! the call adopted, so the next call adopts the change. A file the store holds nothing for is
//! never created (and removed only when its layout says the store consumed it, a one-shot
//! request), and a rendering equal to the file writes nothing.
//!
//! A file whose layout counts in it ([`Layout::stamped`]) is also compared by its [`Stamp`]: a
//! stale writer that added one to a count it read before the mirror's last write writes back
//! the very bytes the mirror wrote, and only the new inode (or modification time) tells that the
//! file was written again; its change is then adopted like any other.
//!
//! Knows no domain: a domain brings its [`Layout`]. Baselines live under
//! `.hookstate-mirror/base/<layout>/` in the mirror directory (a stamped file's stamp beside its
//! baseline, `<name>.hookstate-stamp`), the lock is `.hookstate-mirror/lock`.

use std::cell::RefCell;
use std::path::Path;

use hookstate_schema::Body;

use crate::kernel::call::{Call, Conflict, MirrorReport, Outcome, Plan};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::walk::check_name;
use crate::kernel::write::Kernel;
use crate::legacy::root::{Root, Stamp};

/// The mirror's own directory inside a mirror directory.
pub(crate) const MIRROR_DIR: &str = ".hookstate-mirror";
/// The file whose `flock` serialises mirrored calls on one directory.
const LOCK_FILE: &str = "lock";
/// The baselines' directory under [`MIRROR_DIR`].
const BASE_DIR: &str = "base";
/// Baselines kept before the current one: how many mirror writes a lock-less writer's read may
/// lag and still be recognised.
pub(crate) const BASE_HISTORY_MAX: usize = 8;
/// The suffix of an older baseline: `<name>.hookstate-prev-<n>`, 1 the newest.
const HISTORY_SUFFIX: &str = ".hookstate-prev-";
/// The file in the mirror's directory naming the store (its id, hex) and the directory (its
/// path) the baselines are of.
const OWNER_FILE: &str = "store";
/// The largest owner file read: a store id in hex, a space and the directory's path.
const OWNER_BYTES_MAX: usize = 2 * hookstate_schema::format::STORE_ID_BYTES + 1 + PATH_BYTES_MAX;
/// The longest directory path the owner file records (Linux's `PATH_MAX`); a longer one never
/// reads back equal, so its directory is a first sight at every call.
const PATH_BYTES_MAX: usize = 4096;
/// The suffix of the bytes a write of the file announced before it wrote them, beside its
/// baseline, removed once the baseline moved.
const PENDING_SUFFIX: &str = ".hookstate-pending";
/// The suffix of the stamp beside a stamped file's baseline.
const STAMP_SUFFIX: &str = ".hookstate-stamp";
/// The largest stamp file read (two decimal numbers and a space).
const STAMP_BYTES_MAX: usize = 64;
/// Components of a layout file's path below the mirror directory: `<project>/.feedback/<id>`,
/// and hermit's task records, which readers find anywhere under `tasks/` (`tasks/` and eight
/// levels below it).
pub(crate) const PATH_DEPTH_MAX: usize = 10;

/// A layout file's path below the mirror directory, as checked names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RelPath(Vec<String>);

impl RelPath {
    /// A path of checked components.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty path, one deeper than [`PATH_DEPTH_MAX`] or a bad name.
    pub(crate) fn new(parts: &[&str]) -> Result<RelPath> {
        if parts.is_empty() || parts.len() > PATH_DEPTH_MAX {
            return Err(Error::bad(format!("mirror path {parts:?}"), "is empty or too deep"));
        }
        for part in parts {
            check_name(part)?;
        }
        Ok(RelPath(parts.iter().map(|p| (*p).to_owned()).collect()))
    }

    /// The components.
    pub(crate) fn parts(&self) -> &[String] {
        &self.0
    }

    /// The file name (the last component).
    pub(crate) fn name(&self) -> &str {
        self.0.last().map_or("", String::as_str)
    }

    /// The path as `a/b/c`, for messages and reports.
    pub(crate) fn display(&self) -> String {
        self.0.join("/")
    }
}

/// One file of a layout whose bytes differ from its baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    /// The file.
    pub(crate) path: RelPath,
    /// What the mirror last wrote or adopted; `None` when it never saw the file.
    pub(crate) base: Option<Vec<u8>>,
    /// The baselines before `base`, newest first (at most [`BASE_HISTORY_MAX`]): a lock-less
    /// writer that read the file some writes ago wrote back one of these plus its own change, so
    /// a layout can find the version it read.
    pub(crate) history: Vec<Vec<u8>>,
    /// The bytes a write of the mirror announced and then may or may not have written, its call
    /// killed before the baseline moved, when the file holds other bytes since: a layout whose
    /// writers append may take the file as extending them.
    pub(crate) announced: Option<Vec<u8>>,
    /// What the file holds now (empty when `removed`).
    pub(crate) now: Vec<u8>,
    /// The file is gone since the baseline (handed over only for [`Layout::removable`] files).
    pub(crate) removed: bool,
}

/// What a layout adopts from the changed files of one call.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Adoption {
    /// The events that adopt the outside changes, each in its scope.
    pub(crate) events: Vec<(String, Body)>,
    /// Records left at the store's version.
    pub(crate) conflicts: Vec<Conflict>,
    /// Corrupt files to rename aside (`<name>.corrupt-<ms>`) once the adoption committed; the
    /// store's rendering replaces them.
    pub(crate) quarantine: Vec<RelPath>,
}

/// A legacy layout as the mirror sees it: its files, how to adopt what changed in them, and how
/// to render them from the store. Implemented by each domain for its layout.
pub(crate) trait Layout: Sync {
    /// The layout's name (`loopd`, `hermit-proposals`, ...), which names its baselines.
    fn name(&self) -> &'static str;
    /// Every file the layout keeps for `call` in `root`: those the store holds and those the
    /// directory holds, in the order they are written.
    fn files(&self, txn: &dyn ReadTxn, call: &Call, root: &Root) -> Result<Vec<RelPath>>;
    /// The largest file the layout reads at `path`.
    fn max_bytes(&self, path: &RelPath) -> usize;
    /// The store's bytes for `path`; `None` when the store holds nothing there (the file is then
    /// left as it is, and never created).
    fn render(&self, txn: &dyn ReadTxn, call: &Call, path: &RelPath) -> Result<Option<Vec<u8>>>;
    /// The events that adopt `changes` into the store, a three-way merge per record (baseline,
    /// file, store) by the domain's rules, decided inside the adoption's write transaction.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a file the layout refuses whole (a corrupt multi-record file),
    /// which fails the call with every file and the store unchanged.
    fn adopt(&self, txn: &dyn ReadTxn, call: &Call, changes: &[Change]) -> Result<Adoption>;
    /// Whether the absence of `path` is a state of its record (a queued task consumed, a
    /// liveness record cleared) rather than a loss: a removal since the baseline is then handed
    /// to `adopt` (a change with `removed` set). Any other file deleted outside is rewritten.
    fn removable(&self, _path: &RelPath) -> bool {
        false
    }
    /// Whether a rewrite of the file at `path` with the bytes the mirror last saw is still a
    /// change, told by its [`Stamp`]: a file holding a count, which a writer that read it before
    /// the mirror's last write and added one brings back to those bytes. Such a file is adopted
    /// from the version its writer read (the baselines' history). Most layouts' merges adopt
    /// nothing from equal bytes, and skip the stamps.
    fn stamped(&self, _path: &RelPath) -> bool {
        false
    }
    /// Whether the file at `path`, holding `now` and rendering to nothing, must be removed: the
    /// store consumed what it asked for (a one-shot request whose absence its upstream reader
    /// takes for the answer). The mirror removes it only while it still holds the bytes the call
    /// saw. Most layouts never remove a file.
    fn removes(
        &self,
        _txn: &dyn ReadTxn,
        _call: &Call,
        _path: &RelPath,
        _now: &[u8],
    ) -> Result<bool> {
        Ok(false)
    }
    /// Parts of `root` this call leaves alone, one conflict each saying why: a directory of one
    /// record group among many (a moonshine project in a Stop hook over every project) that
    /// cannot be used safely now (a symlink, a directory others may write). [`Layout::files`]
    /// lists nothing under them, so none of their files is read or written, and one such
    /// directory does not stop the call for the rest. Most layouts have no such part: a
    /// directory of theirs that cannot be used fails the call.
    fn skipped(&self, _call: &Call, _root: &Root) -> Result<Vec<Conflict>> {
        Ok(Vec::new())
    }
}

/// A layout without some of its files, composed beside a layout that keeps them (two domains
/// whose layouts both name a file whose row they share): it lists, renders and adopts every
/// other file as the layout does.
pub(crate) struct Without {
    /// The layout.
    pub(crate) inner: Box<dyn Layout>,
    /// The files (as `a/b`) left to the other layout.
    pub(crate) files: &'static [&'static str],
}

impl Layout for Without {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn files(&self, txn: &dyn ReadTxn, call: &Call, root: &Root) -> Result<Vec<RelPath>> {
        let mut files = self.inner.files(txn, call, root)?;
        files.retain(|path| !self.files.contains(&path.display().as_str()));
        Ok(files)
    }
    fn max_bytes(&self, path: &RelPath) -> usize {
        self.inner.max_bytes(path)
    }
    fn render(&self, txn: &dyn ReadTxn, call: &Call, path: &RelPath) -> Result<Option<Vec<u8>>> {
        self.inner.render(txn, call, path)
    }
    fn adopt(&self, txn: &dyn ReadTxn, call: &Call, changes: &[Change]) -> Result<Adoption> {
        self.inner.adopt(txn, call, changes)
    }
    fn skipped(&self, call: &Call, root: &Root) -> Result<Vec<Conflict>> {
        self.inner.skipped(call, root)
    }
    fn removable(&self, path: &RelPath) -> bool {
        self.inner.removable(path)
    }
    fn removes(&self, txn: &dyn ReadTxn, call: &Call, path: &RelPath, now: &[u8]) -> Result<bool> {
        self.inner.removes(txn, call, path, now)
    }
}

/// One layout file as the call saw it, with its baseline.
struct Seen {
    layout: usize,
    path: RelPath,
    now: Option<Vec<u8>>,
    base: Option<Vec<u8>>,
    /// A stamped file's stamp as read, and the one beside its baseline.
    stamp: Option<Stamp>,
    base_stamp: Option<Stamp>,
    /// Whether its baselines are this store's (else it is seen for the first time).
    owned: bool,
}

impl Seen {
    /// Whether the file was written since the mirror last saw it.
    fn changed(&self) -> bool {
        self.base != self.now || (self.base_stamp.is_some() && self.base_stamp != self.stamp)
    }
}

/// Runs `verb` as a mirrored call of `layouts` over `dir`: adopt, run, write back (see the
/// module documentation). The adoption runs as the caller's call without its idempotency key,
/// which names the verb's own write.
///
/// # Errors
/// [`Error::Busy`] when another mirrored call holds the directory past the wait; a layout's
/// refusal of a corrupt file (nothing is changed then); the verb's errors; IO and store errors.
pub(crate) fn mirrored(
    kernel: &Kernel,
    call: &Call,
    layouts: &[&dyn Layout],
    dir: &Path,
    verb: impl FnOnce() -> Result<Outcome>,
) -> Result<Outcome> {
    let root = Root::open(dir, true)?;
    let meta = root.subdir(MIRROR_DIR, true)?.ok_or_else(|| missing(dir, MIRROR_DIR))?;
    let _lock = meta.lock_file(LOCK_FILE, kernel.lock_wait())?;
    // The baselines are what this directory, at this path, last held for one store: for
    // another store (a second HOOKSTATE_DB pointed at a mirrored directory), or at another path
    // (the directory copied or moved, its scope another), they say nothing, and a file equal to
    // its baseline read as unchanged, so that call adopted none of the directory and wrote the
    // store's emptier state over it. Then every file is a first sight.
    let at = std::fs::canonicalize(dir).unwrap_or_else(|_| root.path().to_path_buf());
    let owner = format!("{} {}", hookstate_schema::format::to_hex(kernel.store_id()), at.display());
    let owned = meta
        .read(OWNER_FILE, OWNER_BYTES_MAX)
        .ok()
        .flatten()
        .is_some_and(|text| text == owner.as_bytes());
    let mut report = MirrorReport::default();
    for layout in layouts {
        let room =
            crate::kernel::limits::CONFLICTS_SHOWN_MAX.saturating_sub(report.conflicts.len());
        report.conflicts.extend(layout.skipped(call, &root)?.into_iter().take(room));
    }
    let seen = read_all(kernel, call, layouts, &root, &meta, owned)?;
    adopt(kernel, call, layouts, &root, &meta, &seen, &mut report)?;
    let mut outcome = verb()?;
    write_back(kernel, call, layouts, &root, &meta, &seen, &mut report)?;
    // Best effort, as every write of the mirror's own files after the commit: the call's
    // changes are committed, and failing now would have its retry apply them again. Unwritten,
    // the next call takes every file as a first sight once more.
    if !owned {
        let _ = meta.write_unsynced(OWNER_FILE, owner.as_bytes());
    }
    outcome.mirror = Some(report);
    Ok(outcome)
}

fn missing(dir: &Path, name: &str) -> Error {
    Error::NoStore { path: dir.join(name) }
}

/// Every file of every layout, as it is now, with its baseline when the baselines are this
/// store's (`owned`).
fn read_all(
    kernel: &Kernel,
    call: &Call,
    layouts: &[&dyn Layout],
    root: &Root,
    meta: &Root,
    owned: bool,
) -> Result<Vec<Seen>> {
    let txn = kernel.begin_read()?;
    let mut seen = Vec::new();
    for (index, layout) in layouts.iter().enumerate() {
        for path in layout.files(&*txn, call, root)? {
            let max = layout.max_bytes(&path);
            let base = if owned { read_base(meta, layout.name(), &path, max)? } else { None };
            let (now, stamp, base_stamp) = if layout.stamped(&path) {
                let now = read_at_stamped(root, &path, max)?;
                let stamp = now.as_ref().map(|(_, stamp)| *stamp);
                let base_stamp = if owned { read_stamp(meta, layout.name(), &path)? } else { None };
                (now.map(|(bytes, _)| bytes), stamp, base_stamp)
            } else {
                (read_at(root, &path, max)?, None, None)
            };
            seen.push(Seen { layout: index, path, now, base, stamp, base_stamp, owned });
        }
    }
    Ok(seen)
}

/// Adopts every file whose bytes differ from its baseline, in one write transaction, then moves
/// those baselines to what was adopted.
fn adopt(
    kernel: &Kernel,
    call: &Call,
    layouts: &[&dyn Layout],
    root: &Root,
    meta: &Root,
    seen: &[Seen],
    report: &mut MirrorReport,
) -> Result<()> {
    let mut changes: Vec<Vec<Change>> = vec![Vec::new(); layouts.len()];
    for file in seen {
        let (path, base) = (file.path.clone(), file.base.clone());
        let layout = layouts[file.layout];
        let Some(now) = &file.now else {
            // A deleted file is rewritten, not adopted as a deletion, unless its absence is a
            // state the layout adopts.
            if base.is_some() && layout.removable(&path) {
                let (history, announced, now) = (Vec::new(), None, Vec::new());
                let removed = Change { path, base, history, announced, now, removed: true };
                changes[file.layout].push(removed);
            }
            continue;
        };
        if file.changed() {
            let max = layout.max_bytes(&path);
            // The mirror's own write whose baseline did not move (its writer was killed between
            // the two): the file holds the bytes that write announced, nothing outside changed
            // it, and adopting it as a change appended its new lines a second time. (Bytes equal
            // to the store's rendering are not evidence: a stale writer can make the very change
            // the store made, and that is a second change.)
            let pending =
                file.owned.then(|| read_pending(meta, layout.name(), &path, max)).flatten();
            if let Some(pending) = &pending {
                // The baseline moves before the announcement goes: killed between the two, the
                // next call finds the file equal to its baseline.
                if pending == now {
                    write_base(meta, layout.name(), &path, now)?;
                    if let Some(stamp) = file.stamp {
                        write_stamp(meta, layout.name(), &path, stamp)?;
                    }
                    remove_pending(meta, layout.name(), &path);
                    continue;
                }
                remove_pending(meta, layout.name(), &path);
            }
            let history = match file.owned {
                true => read_history(meta, layout.name(), &path, max)?,
                false => Vec::new(),
            };
            let (announced, now) = (pending, now.clone());
            let change = Change { path, base, history, announced, now, removed: false };
            changes[file.layout].push(change);
        }
    }
    if changes.iter().all(Vec::is_empty) {
        return Ok(());
    }
    // What the layouts decided, kept from the decision the write path committed.
    let decided: RefCell<Vec<Adoption>> = RefCell::new(Vec::new());
    let outcome = kernel.write(&call.without_idem_key(), |txn| {
        let mut adoptions = Vec::new();
        for (layout, changed) in layouts.iter().zip(&changes) {
            if !changed.is_empty() {
                adoptions.push(layout.adopt(txn, call, changed)?);
            }
        }
        let events = adoptions.iter_mut().flat_map(|a| std::mem::take(&mut a.events)).collect();
        *decided.borrow_mut() = adoptions;
        Ok(Plan { scoped_events: events, ..Plan::default() })
    })?;
    report.adopted = outcome.appended;
    for adoption in decided.into_inner() {
        for path in &adoption.quarantine {
            quarantine(root, path, call.now_ms)?;
            report.quarantined.push(path.display());
        }
        let room =
            crate::kernel::limits::CONFLICTS_SHOWN_MAX.saturating_sub(report.conflicts.len());
        report.conflicts.extend(adoption.conflicts.into_iter().take(room));
    }
    for (index, (layout, changed)) in layouts.iter().zip(&changes).enumerate() {
        for change in changed {
            if change.removed {
                remove_base(meta, layout.name(), &change.path)?;
            } else {
                write_base(meta, layout.name(), &change.path, &change.now)?;
                let seen = seen.iter().find(|s| s.layout == index && s.path == change.path);
                if let Some(stamp) = seen.and_then(|s| s.stamp) {
                    write_stamp(meta, layout.name(), &change.path, stamp)?;
                }
            }
        }
    }
    Ok(())
}

/// Writes each file whose rendering differs from what the call saw, only over those bytes.
fn write_back(
    kernel: &Kernel,
    call: &Call,
    layouts: &[&dyn Layout],
    root: &Root,
    meta: &Root,
    seen: &[Seen],
    report: &mut MirrorReport,
) -> Result<()> {
    let txn = kernel.begin_read()?;
    for (index, layout) in layouts.iter().enumerate() {
        for path in layout.files(&*txn, call, root)? {
            let file = seen.iter().find(|s| s.layout == index && s.path == path);
            let saw = file.and_then(|s| s.now.as_deref());
            let Some(bytes) = layout.render(&*txn, call, &path)? else {
                if let Some(saw) = saw.filter(|_| !report.quarantined.contains(&path.display())) {
                    remove_consumed(*layout, &*txn, call, root, &path, saw, report)?;
                }
                continue;
            };
            let quarantined = report.quarantined.contains(&path.display());
            if saw == Some(bytes.as_slice()) && !quarantined {
                // Already what the store holds: only a missing or older baseline is written.
                if file.and_then(|s| s.base.as_deref()) != Some(bytes.as_slice()) {
                    write_base(meta, layout.name(), &path, &bytes)?;
                }
                if let Some(seen) = file.filter(|s| s.stamp.is_some() && s.stamp != s.base_stamp) {
                    if let Some(stamp) = seen.stamp {
                        write_stamp(meta, layout.name(), &path, stamp)?;
                    }
                }
                continue;
            }
            let expected = if quarantined { None } else { saw };
            let max = layout.max_bytes(&path);
            // The planted bug: write over whatever the file holds now.
            #[cfg(feature = "bugdrill")]
            let blind = crate::kernel::drill::is(crate::kernel::drill::Drill::MirrorBlindWrite);
            #[cfg(not(feature = "bugdrill"))]
            let blind = false;
            // The compare runs once the new bytes are durable, right before the rename, so a
            // lock-less writer's change is overwritten only if it lands between the two.
            // A stamped file must also still be the file the call read, not a rewrite of it.
            let expected_stamp = file.and_then(|s| s.stamp).filter(|_| !quarantined);
            let still = |dir: &Root| {
                if blind {
                    return Ok(true);
                }
                let now = dir.read_stamped(path.name(), max).ok().flatten();
                let same_stamp =
                    || expected_stamp.is_none() || now.as_ref().map(|(_, s)| *s) == expected_stamp;
                Ok(now.as_ref().map(|(b, _)| b.as_slice()) == expected && same_stamp())
            };
            // Announced first: a call killed after the file's write and before its baseline's
            // leaves the file holding these bytes, which the next call then knows as its own.
            // Best effort (after the commit, a failure here would have a retry apply the call
            // again): unannounced, such a kill is an outside change, as before announcements.
            write_pending(meta, layout.name(), &path, &bytes);
            let Some(stamp) = write_at_if(root, &path, &bytes, still)? else {
                // Changed during the call: kept, and adopted by the next call.
                remove_pending(meta, layout.name(), &path);
                report.kept.push(path.display());
                continue;
            };
            write_base(meta, layout.name(), &path, &bytes)?;
            if layout.stamped(&path) {
                write_stamp(meta, layout.name(), &path, stamp)?;
            }
            remove_pending(meta, layout.name(), &path);
            report.written.push(path.display());
        }
    }
    Ok(())
}

/// Removes a file the store holds nothing for when its layout says so, only over the bytes the
/// call saw; one another writer changed during the call is kept.
fn remove_consumed(
    layout: &dyn Layout,
    txn: &dyn ReadTxn,
    call: &Call,
    root: &Root,
    path: &RelPath,
    saw: &[u8],
    report: &mut MirrorReport,
) -> Result<()> {
    if !layout.removes(txn, call, path, saw)? {
        return Ok(());
    }
    if read_at(root, path, layout.max_bytes(path)).ok().flatten().as_deref() != Some(saw) {
        report.kept.push(path.display());
        return Ok(());
    }
    if let Some(dir) = parent_of(root, path, false)? {
        dir.remove(path.name())?;
        report.removed.push(path.display());
    }
    Ok(())
}

/// The directory holding `path`'s file, opened (and created when `create`) below `root`.
fn parent_of(root: &Root, path: &RelPath, create: bool) -> Result<Option<Root>> {
    let parts = path.parts();
    let mut dir: Option<Root> = None;
    for part in &parts[..parts.len() - 1] {
        let next = match &dir {
            None => root.subdir(part, create)?,
            Some(d) => d.subdir(part, create)?,
        };
        match next {
            Some(next) => dir = Some(next),
            None => return Ok(None),
        }
    }
    match dir {
        Some(dir) => Ok(Some(dir)),
        None => Root::open(root.path(), false).map(Some),
    }
}

/// Reads a layout file; `None` when it (or its directory) is absent.
pub(crate) fn read_at(root: &Root, path: &RelPath, max: usize) -> Result<Option<Vec<u8>>> {
    match parent_of(root, path, false)? {
        Some(dir) => dir.read(path.name(), max),
        None => Ok(None),
    }
}

/// [`read_at`], with the file's [`Stamp`].
fn read_at_stamped(root: &Root, path: &RelPath, max: usize) -> Result<Option<(Vec<u8>, Stamp)>> {
    match parent_of(root, path, false)? {
        Some(dir) => dir.read_stamped(path.name(), max),
        None => Ok(None),
    }
}

/// Writes a layout file durably, creating its directories, only if `still` (asked right before
/// the rename, in the file's directory) holds; the written file's stamp when it did.
fn write_at_if(
    root: &Root,
    path: &RelPath,
    bytes: &[u8],
    still: impl FnOnce(&Root) -> Result<bool>,
) -> Result<Option<Stamp>> {
    let dir = parent_of(root, path, true)?.ok_or_else(|| missing(root.path(), path.name()))?;
    dir.write_if_stamped(path.name(), bytes, still)
}

fn base_path(layout: &str, path: &RelPath) -> Result<RelPath> {
    let mut parts: Vec<&str> = vec![BASE_DIR, layout];
    parts.extend(path.parts().iter().map(String::as_str));
    // The baseline tree is two levels deeper than the layout's.
    for part in &parts {
        check_name(part)?;
    }
    Ok(RelPath(parts.iter().map(|p| (*p).to_owned()).collect()))
}

fn read_base(meta: &Root, layout: &str, path: &RelPath, max: usize) -> Result<Option<Vec<u8>>> {
    // An unreadable baseline reads as none: the file is then merged as a first sight.
    Ok(read_at(meta, &base_path(layout, path)?, max).ok().flatten())
}

/// The baselines before the current one, newest first; an unreadable one ends the list.
fn read_history(meta: &Root, layout: &str, path: &RelPath, max: usize) -> Result<Vec<Vec<u8>>> {
    let base = base_path(layout, path)?;
    let Some(dir) = parent_of(meta, &base, false)? else { return Ok(Vec::new()) };
    let mut history = Vec::new();
    for n in 1..=BASE_HISTORY_MAX {
        match dir.read(&format!("{}{HISTORY_SUFFIX}{n}", base.name()), max) {
            Ok(Some(bytes)) => history.push(bytes),
            _ => break,
        }
    }
    Ok(history)
}

/// Writes a baseline without syncing it, the one before it moving into the history: a baseline
/// lost in a power cut leaves an older one, and the next call then merges a file that equals the
/// store, which adopts nothing. Layouts read an unparseable baseline as none.
fn write_base(meta: &Root, layout: &str, path: &RelPath, bytes: &[u8]) -> Result<()> {
    let base = base_path(layout, path)?;
    let dir = parent_of(meta, &base, true)?.ok_or_else(|| missing(meta.path(), base.name()))?;
    let name = base.name();
    let older = |n: usize| format!("{name}{HISTORY_SUFFIX}{n}");
    if dir.read(name, bytes.len().saturating_add(1)).ok().flatten().as_deref() == Some(bytes) {
        return Ok(());
    }
    for n in (1..BASE_HISTORY_MAX).rev() {
        dir.rename_unsynced(&older(n), &older(n + 1))?;
    }
    dir.rename_unsynced(name, &older(1))?;
    dir.write_unsynced(name, bytes)
}

/// The stamp beside a baseline; `None` when absent or unreadable (the file is then compared by
/// its bytes alone, as before the first stamp).
fn read_stamp(meta: &Root, layout: &str, path: &RelPath) -> Result<Option<Stamp>> {
    let base = base_path(layout, path)?;
    let Some(dir) = parent_of(meta, &base, false)? else { return Ok(None) };
    let text = dir.read(&format!("{}{STAMP_SUFFIX}", base.name()), STAMP_BYTES_MAX);
    Ok(text.ok().flatten().and_then(|t| Stamp::parse(&t)))
}

/// Writes the stamp beside a baseline, unsynced like the baseline.
fn write_stamp(meta: &Root, layout: &str, path: &RelPath, stamp: Stamp) -> Result<()> {
    let base = base_path(layout, path)?;
    let dir = parent_of(meta, &base, true)?.ok_or_else(|| missing(meta.path(), base.name()))?;
    dir.write_unsynced(&format!("{}{STAMP_SUFFIX}", base.name()), stamp.to_text().as_bytes())
}

/// The bytes a write of the file announced ([`PENDING_SUFFIX`]), when one was left: its call was
/// killed before the baseline moved (the file may or may not hold them).
fn read_pending(meta: &Root, layout: &str, path: &RelPath, max: usize) -> Option<Vec<u8>> {
    let base = base_path(layout, path).ok()?;
    let dir = parent_of(meta, &base, false).ok().flatten()?;
    dir.read(&format!("{}{PENDING_SUFFIX}", base.name()), max).ok().flatten()
}

/// Announces a write of the file with these bytes, unsynced, beside its baseline; best effort
/// (a path there that is not a file leaves the write unannounced).
fn write_pending(meta: &Root, layout: &str, path: &RelPath, bytes: &[u8]) {
    let Ok(base) = base_path(layout, path) else { return };
    if let Ok(Some(dir)) = parent_of(meta, &base, true) {
        let _ = dir.write_unsynced(&format!("{}{PENDING_SUFFIX}", base.name()), bytes);
    }
}

/// Takes an announcement back; best effort, as [`write_pending`].
fn remove_pending(meta: &Root, layout: &str, path: &RelPath) {
    let Ok(base) = base_path(layout, path) else { return };
    if let Ok(Some(dir)) = parent_of(meta, &base, false) {
        let _ = dir.remove(&format!("{}{PENDING_SUFFIX}", base.name()));
    }
}

/// Removes a baseline and its stamp (the file it stood for is gone, and its absence adopted).
fn remove_base(meta: &Root, layout: &str, path: &RelPath) -> Result<()> {
    let base = base_path(layout, path)?;
    match parent_of(meta, &base, false)? {
        Some(dir) => {
            dir.remove(&format!("{}{STAMP_SUFFIX}", base.name()))?;
            dir.remove(base.name())
        }
        None => Ok(()),
    }
}

/// Renames a corrupt file aside as `<name>.corrupt-<ms>`, never over an earlier quarantine.
fn quarantine(root: &Root, path: &RelPath, now_ms: u64) -> Result<()> {
    let Some(dir) = parent_of(root, path, false)? else { return Ok(()) };
    let aside = format!("{}.corrupt-{now_ms}", path.name());
    match dir.rename_new(path.name(), &aside) {
        Ok(()) => Ok(()),
        // Gone already (another reader quarantined it), or an earlier copy holds the name.
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    }
}

/// How one record of a mirrored file compares across the baseline, the file and the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Merge<'a, R> {
    /// Nobody changed it outside (or the store already holds the file's version).
    Same,
    /// Changed (or added) outside while the store kept the baseline's version: adopt `R`.
    Outside(&'a R),
    /// The file dropped it while the store still holds it: the layout decides (usually keep).
    Dropped(&'a R),
    /// Changed outside and in the store since the baseline, differently: a true conflict.
    Both { file: &'a R, store: &'a R },
}

/// The three-way comparison of one record: `base` what the mirror last saw, `file` what the file
/// holds, `store` what the store holds.
pub(crate) fn merge<'a, R: PartialEq>(
    base: Option<&'a R>,
    file: Option<&'a R>,
    store: Option<&'a R>,
) -> Merge<'a, R> {
    match (base, file, store) {
        (_, Some(f), Some(s)) if f == s => Merge::Same,
        (Some(b), Some(f), _) if b == f => Merge::Same,
        (None, None, _) | (Some(_), None, None) => Merge::Same,
        (_, Some(f), None) => Merge::Outside(f),
        (Some(b), Some(f), Some(s)) if b == s => Merge::Outside(f),
        (None, Some(f), Some(s)) | (Some(_), Some(f), Some(s)) => Merge::Both { file: f, store: s },
        (Some(_), None, Some(s)) => Merge::Dropped(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_way_merge_of_one_record() {
        let (a, b, c) = (1, 2, 3);
        assert_eq!(merge(Some(&a), Some(&a), Some(&a)), Merge::Same, "untouched");
        assert_eq!(merge(Some(&a), Some(&b), Some(&a)), Merge::Outside(&b), "changed outside");
        assert_eq!(merge(Some(&a), Some(&a), Some(&b)), Merge::Same, "changed in the store only");
        assert_eq!(merge(Some(&a), Some(&b), Some(&b)), Merge::Same, "the same change twice");
        assert_eq!(merge(Some(&a), Some(&b), Some(&c)), Merge::Both { file: &b, store: &c });
        assert_eq!(merge(None, Some(&b), None), Merge::Outside(&b), "added outside");
        assert_eq!(merge(None, Some(&b), Some(&c)), Merge::Both { file: &b, store: &c });
        assert_eq!(merge(Some(&a), None, Some(&a)), Merge::Dropped(&a), "dropped by the file");
        assert_eq!(merge(Some(&a), None, Some(&b)), Merge::Dropped(&b));
        assert_eq!(merge::<i32>(Some(&a), None, None), Merge::Same, "gone everywhere");
        assert_eq!(merge::<i32>(None, None, Some(&c)), Merge::Same, "only in the store");
    }

    #[test]
    fn mirror_paths_are_checked_names() {
        assert!(RelPath::new(&["state", "x.json"]).is_ok());
        assert!(RelPath::new(&[]).is_err());
        assert!(RelPath::new(&["..", "x"]).is_err());
        assert!(RelPath::new(&["a/b"]).is_err());
        assert!(RelPath::new(&["a"; PATH_DEPTH_MAX]).is_ok());
        assert!(RelPath::new(&["a"; PATH_DEPTH_MAX + 1]).is_err());
    }
}
