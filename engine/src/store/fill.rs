//! A new store built whole in one transaction (a restore from a dump, a backup of a live
//! store): made in a temporary file beside the target, published at the target's name only once
//! it is complete and synced, then anchored at its head (and, for a restore with a second anchor
//! directory, the second anchor moved to it, or the restore refused when that anchor has seen
//! the store further along).
//!
//! A failed build leaves nothing at the target. The built store records the head it was built at
//! (`META_BUILT_HEAD`): a build cut between naming the store and anchoring it leaves a store
//! whose missing anchor is taken as that build's while its head is still the built one, and the
//! next write anchors it. Does not know what the events say; the caller fills the transaction.

use std::path::Path;
use std::time::{Duration, Instant};

use hookstate_schema::format::{
    decode_event, encode_head, format_anchor, parse_anchor, Head, META_BUILT_HEAD, STORE_ID_BYTES,
};

use crate::kernel::error::{Error, Result};
use crate::kernel::storage::WriteTxn;
use crate::kernel::write::initial_meta;

use super::dir::StoreDir;
use super::redb::RedbStore;
use super::second_anchor::SecondAnchor;

/// How long the build waits for its own new file's write lock: nobody else can know its name.
const OWN_FILE_WAIT: Duration = Duration::from_secs(10);

/// Builds a new store at `path` with the identity `store_id`: `fill` writes its events, views
/// and head into the one transaction and returns the head, which the anchor beside the new
/// store is set to. With `anchor_dir` (a restore's `HOOKSTATE_ANCHOR_DIR`), the store's second
/// anchor there is moved to the head too (created when absent), so the restored store takes
/// writes; a second anchor ahead of the head refuses the build (nothing is left at `path`).
///
/// # Errors
/// [`Error::BadInput`] when a store, or a gone store's anchor, is already at `path`; `fill`'s
/// errors (nothing is left at `path` then); [`Error::AnchorMismatch`] for a second anchor that is
/// ahead of the built head, of another store, or that does not parse; IO and store errors.
pub(crate) fn create_filled(
    path: &Path,
    store_id: &[u8; STORE_ID_BYTES],
    anchor_dir: Option<&Path>,
    fill: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Head>,
) -> Result<Head> {
    // A PostgreSQL address is no file name (it was taken as one, in the working directory,
    // password and all): a remote store is made by `copy`.
    if let Some(shown) = super::remote_address(path) {
        let why = "is a PostgreSQL address: this builds a store file; build one, then `hookstate \
                   copy --from FILE --to ADDRESS`";
        return Err(Error::bad(format!("target {shown}"), why));
    }
    let dir = StoreDir::open(path, true)?;
    let second = anchor_dir.map(SecondAnchor::open).transpose()?;
    let exists = || Error::bad(format!("target {}", path.display()), "exists: name a new store");
    // A directory or a device there is taken too (it read as a damaged store, exit 5).
    let taken = std::fs::symlink_metadata(path).is_ok_and(|meta| !meta.is_file());
    if taken || dir.open_store(true)?.is_some() {
        return Err(exists());
    }
    if dir.read_anchor()?.is_some() {
        return Err(left_behind(&dir, path));
    }
    let (file, draft) = dir.create_draft("create")?;
    let checked = match &second {
        Some(second) => second_anchored(second, store_id).and_then(|anchored| {
            let (head, keep) = build(&dir, file, store_id, anchored.as_ref(), fill)?;
            second_anchor_allows(second, store_id, anchored.as_ref(), &head)?;
            Ok((head, keep))
        }),
        None => build(&dir, file, store_id, None, fill),
    };
    let (head, keep) = match checked {
        Ok(built) => built,
        Err(err) => {
            let _ = dir.discard(&draft);
            return Err(err);
        }
    };
    if !dir.publish_store(&draft, &keep)? {
        return Err(exists());
    }
    // The anchors wait for their lock: the writers of other stores in the directory take it for
    // a moment at each commit, and a build that skipped its anchor left a store refusing writes.
    let _lock = wait_anchor_lock(&dir)?;
    let text = format_anchor(store_id, &head);
    dir.write_anchor(&text)?;
    if let Some(second) = &second {
        let current = second.read_last(store_id)?;
        if crate::kernel::anchor::advance(current.as_deref(), store_id, &head).is_some() {
            second.append(store_id, &text)?;
        }
    }
    Ok(head)
}

/// How long a build waits for its directory's anchor lock, which the writers of other stores in
/// that directory take for a moment at each commit.
const ANCHOR_LOCK_WAIT: Duration = Duration::from_secs(10);
/// The pause between two tries for the anchor lock.
const ANCHOR_LOCK_POLL: Duration = Duration::from_millis(1);

fn wait_anchor_lock(dir: &StoreDir) -> Result<super::dir::AnchorLock<'_>> {
    let start = Instant::now();
    loop {
        if let Some(lock) = dir.lock_anchors()? {
            return Ok(lock);
        }
        if start.elapsed() >= ANCHOR_LOCK_WAIT {
            let waited_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
            return Err(Error::Busy { waited_ms });
        }
        std::thread::sleep(ANCHOR_LOCK_POLL);
    }
}

/// The refusal of a target beside which a removed store's anchor is left.
fn left_behind(dir: &StoreDir, path: &Path) -> Error {
    let why = format!(
        "holds no store, but the head anchor {} of one is left beside it: a store made there \
         would read as that one rolled back; remove the anchor once that store is gone for \
         good, or name a new store",
        dir.anchor_path().display()
    );
    Error::bad(format!("target {}", path.display()), why)
}

fn refusal(second: &SecondAnchor, store_id: &[u8; STORE_ID_BYTES], why: &str) -> Error {
    Error::AnchorMismatch { why: format!("{}: {why}", second.path(store_id).display()) }
}

/// The head the second anchor of `store_id` names (`None` when it has none).
fn second_anchored(second: &SecondAnchor, store_id: &[u8; STORE_ID_BYTES]) -> Result<Option<Head>> {
    let Some(text) = second.read_last(store_id)? else {
        return Ok(None);
    };
    let refuse = |why: String| refusal(second, store_id, &why);
    let (id, anchored) =
        parse_anchor(&text).map_err(|e| refuse(format!("the anchor does not parse ({e})")))?;
    if id != *store_id {
        return Err(refuse("the anchor belongs to another store".into()));
    }
    Ok(Some(anchored))
}

/// Whether a store built at `head` may take the second anchor of `store_id`, at `anchored`: it
/// may when that anchor is absent or at most at `head` (the build checked that its event there
/// has the anchored hash). One ahead means this host saw the store further along than the build
/// (an older dump restored), which the next call would refuse as a rollback, so the build is
/// refused now, saying so.
fn second_anchor_allows(
    second: &SecondAnchor,
    store_id: &[u8; STORE_ID_BYTES],
    anchored: Option<&Head>,
    head: &Head,
) -> Result<()> {
    let Some(anchored) = anchored else {
        return Ok(());
    };
    let refuse = |why: String| refusal(second, store_id, &why);
    if anchored.seq > head.seq {
        return Err(refuse(format!(
            "the anchor is at seq {} but the restored log ends at seq {}: this host saw the store \
             further along than the dump (restore a newer dump, or move the anchor file aside if \
             the rollback is intended)",
            anchored.seq, head.seq
        )));
    }
    Ok(())
}

/// Builds the new store in `file` and syncs it; returns its head and a handle to the file, by
/// which it is published.
///
/// A second anchor at `anchored` (the build's restore has one) refuses a log whose event at the
/// anchored seq has another hash: a fork of the history that anchor has seen.
fn build(
    dir: &StoreDir,
    file: std::fs::File,
    store_id: &[u8; STORE_ID_BYTES],
    anchored: Option<&Head>,
    fill: &mut dyn FnMut(&mut dyn WriteTxn) -> Result<Head>,
) -> Result<(Head, std::fs::File)> {
    let keep = file.try_clone().map_err(|e| Error::io("duplicate handle of", dir.path(), e))?;
    let meta = initial_meta(store_id);
    let meta: Vec<(&str, &[u8])> = meta.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    let store = RedbStore::create_in(file, &meta)?;
    let mut txn = store.begin_write(Instant::now() + OWN_FILE_WAIT)?;
    let head = fill(&mut *txn)?;
    txn.put_meta(META_BUILT_HEAD, &encode_head(&head))?;
    if let Some(anchored) = anchored.filter(|a| a.seq > 0 && a.seq <= head.seq) {
        let hash = match txn.event(anchored.seq)? {
            Some(record) => Some(
                decode_event(&record)
                    .map_err(|e| Error::ChainBroken { seq: anchored.seq, why: e.to_string() })?,
            ),
            // Before the log's base (a dump of a compacted store): the base's head, when it is
            // that seq, else nothing to compare.
            None => None,
        }
        .map(|event| event.hash)
        .or((head.seq == anchored.seq).then_some(head.hash));
        if hash.is_some_and(|hash| hash != anchored.hash) {
            return Err(Error::AnchorMismatch {
                why: format!(
                    "the second anchor names another event at seq {} than the dump holds: the \
                     dump rewrites history this host has seen",
                    anchored.seq
                ),
            });
        }
    }
    txn.commit()?;
    drop(store);
    keep.sync_all().map_err(|e| Error::io("fsync", dir.path(), e))?;
    Ok((head, keep))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookstate_schema::format::genesis_hash;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Whether `dir`'s filesystem makes unnamed files (`O_TMPFILE`), which drafts need.
    fn unnamed_files_in(dir: &Path) -> bool {
        let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::TMPFILE;
        rustix::fs::open(dir, flags, rustix::fs::Mode::from_raw_mode(0o600)).is_ok()
    }

    /// A store being built has no name in its directory until it is published, so a process
    /// killed while building leaves nothing there; a failed build leaves nothing either.
    #[test]
    fn a_store_being_built_has_no_name_until_it_is_published() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.redb");
        let id = [3; STORE_ID_BYTES];
        let genesis = Head { seq: 0, hash: genesis_hash(&id) };
        let mut during = Vec::new();
        let head = create_filled(&path, &id, None, &mut |_| {
            during = names(tmp.path());
            Ok(genesis)
        })
        .unwrap();
        assert_eq!(head, genesis);
        if unnamed_files_in(tmp.path()) {
            assert!(during.is_empty(), "named while being built: {during:?}");
        } else {
            let one_temp = matches!(during.as_slice(), [n] if n.starts_with(".s.redb.create-"));
            assert!(one_temp, "{during:?}");
        }
        assert_eq!(names(tmp.path()), ["s.redb", "s.redb.head"]);

        let other = tmp.path().join("t.redb");
        let failed = create_filled(&other, &id, None, &mut |_| Err(Error::Invalid("no".into())));
        assert!(failed.is_err());
        assert_eq!(names(tmp.path()), ["s.redb", "s.redb.head"]);
    }

    /// A build of store `id` that appends one record at `seq` (any bytes do: the store checks
    /// nothing here) and ends at a head made up from `seq`.
    fn fill_to(
        seq: u64,
        id: &[u8; STORE_ID_BYTES],
    ) -> impl FnMut(&mut dyn WriteTxn) -> Result<Head> {
        let hash = blake3::derive_key("fill test", &[id.as_slice(), &seq.to_le_bytes()].concat());
        move |txn| {
            txn.append_event(seq, b"record")?;
            Ok(Head { seq, hash })
        }
    }

    /// A build waits for the anchor lock another store's writer in the directory holds, and
    /// anchors its store (it skipped the anchor, leaving a store that refused writes).
    #[test]
    fn a_build_waits_for_the_anchor_lock_and_anchors_its_store() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.redb");
        let id = [7; STORE_ID_BYTES];
        let dir = std::fs::File::open(tmp.path()).unwrap();
        rustix::fs::flock(&dir, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let building = std::thread::spawn({
            let path = path.clone();
            move || create_filled(&path, &id, None, &mut fill_to(2, &id))
        });
        std::thread::sleep(Duration::from_millis(200));
        rustix::fs::flock(&dir, rustix::fs::FlockOperation::Unlock).unwrap();
        let head = building.join().unwrap().unwrap();
        let anchor = StoreDir::open(&path, false).unwrap().read_anchor().unwrap().unwrap();
        assert_eq!(parse_anchor(&anchor).unwrap(), (id, head));
    }
}
