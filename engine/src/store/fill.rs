//! A new store built whole in one transaction (a restore from a dump, a backup of a live
//! store): made in a temporary file beside the target, anchored at its head, and only then
//! published at the target's name, complete and synced (and, for a restore with a second anchor
//! directory, the second anchor moved to it, or the restore refused when that anchor has seen
//! the store further along).
//!
//! A failed build leaves nothing at the target. A build cut after its anchor and before its
//! name leaves the anchor alone, which a rerun of the same build takes as its own; the other
//! order left a store without its anchor, which refuses writes until an operator accepts it.
//! Does not know what the events say; the caller fills the transaction.

use std::path::Path;
use std::time::{Duration, Instant};

use hookstate_schema::format::{decode_event, format_anchor, parse_anchor, Head, STORE_ID_BYTES};

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
    // An anchor of this store id may be a cut build's own: the built head decides.
    if let Some(left) = dir.read_anchor()? {
        if parse_anchor(&left).map_or(true, |(id, _)| id != *store_id) {
            return Err(left_behind(&dir, path));
        }
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
    let built = Built { dir: &dir, path, draft: &draft, store_id };
    let published = checked.and_then(|(head, keep)| {
        built.anchor_then_publish(&keep, &head, second.as_ref())?;
        Ok(head)
    });
    if published.is_err() {
        let _ = dir.discard(&draft);
    }
    published
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

/// A store built in a draft, to be published at `path`.
struct Built<'a> {
    dir: &'a StoreDir,
    path: &'a Path,
    draft: &'a super::dir::Draft,
    store_id: &'a [u8; STORE_ID_BYTES],
}

impl Built<'_> {
    /// Anchors the built store at `head`, then publishes it, then moves its second anchor (when
    /// `second`) to `head`, all under the anchor lock: an anchor already there is kept when it
    /// names this very head (a build of the same store cut between the two steps), and refused
    /// otherwise. A store published at `path` meanwhile by a creator that does not take the lock
    /// refuses the build, and the anchor written for it is removed again.
    fn anchor_then_publish(
        &self,
        keep: &std::fs::File,
        head: &Head,
        second: Option<&SecondAnchor>,
    ) -> Result<()> {
        let (dir, store_id) = (self.dir, self.store_id);
        let exists =
            || Error::bad(format!("target {}", self.path.display()), "exists: name a new store");
        let _lock = wait_anchor_lock(dir)?;
        let text = format_anchor(store_id, head);
        let wrote = match dir.read_anchor()? {
            None => {
                dir.write_anchor(&text)?;
                true
            }
            Some(left)
                if parse_anchor(&left).is_ok_and(|(id, at)| id == *store_id && at == *head) =>
            {
                false
            }
            Some(_) => return Err(left_behind(dir, self.path)),
        };
        if !dir.publish_store(self.draft, keep)? {
            if wrote {
                let _ = dir.remove_anchor();
            }
            return Err(exists());
        }
        if let Some(second) = second {
            let current = second.read_last(store_id)?;
            if crate::kernel::anchor::advance(current.as_deref(), store_id, head).is_some() {
                second.append(store_id, &text)?;
            }
        }
        Ok(())
    }
}

/// The refusal of a target beside which another store's anchor is left.
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

    /// A store is named only once its anchor is written: when the anchor cannot be written, the
    /// build fails and no store is left (the other order left a store without its anchor, which
    /// refuses writes).
    #[test]
    fn a_store_whose_anchor_cannot_be_written_is_not_published() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.redb");
        let id = [4; STORE_ID_BYTES];
        let mut fill = fill_to(1, &id);
        let failed = create_filled(&path, &id, None, &mut |txn| {
            // Something that is no anchor file takes the anchor's name while the store is built.
            std::fs::create_dir_all(tmp.path().join("s.redb.head").join("x")).unwrap();
            fill(txn)
        });
        assert!(failed.is_err(), "{failed:?}");
        assert!(!path.exists(), "{:?}", names(tmp.path()));
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
        assert!(!path.exists(), "named without its anchor");
        rustix::fs::flock(&dir, rustix::fs::FlockOperation::Unlock).unwrap();
        let head = building.join().unwrap().unwrap();
        let anchor = StoreDir::open(&path, false).unwrap().read_anchor().unwrap().unwrap();
        assert_eq!(parse_anchor(&anchor).unwrap(), (id, head));
    }

    /// A build cut between its anchor and its name leaves the anchor alone: the same build run
    /// again takes it as its own; a build of another head or another store is refused by it.
    #[test]
    fn an_anchor_left_by_a_cut_build_is_taken_by_the_same_build_only() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.redb");
        let id = [5; STORE_ID_BYTES];
        create_filled(&path, &id, None, &mut fill_to(3, &id)).unwrap();
        // What a cut after the anchor leaves: the anchor, no store.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(names(tmp.path()), ["s.redb.head"]);
        for (seq, other_id) in [(2, id), (3, [6; STORE_ID_BYTES])] {
            let refused = create_filled(&path, &other_id, None, &mut fill_to(seq, &other_id));
            let message = refused.unwrap_err().to_string();
            assert!(message.contains("head anchor"), "{message}");
            assert_eq!(names(tmp.path()), ["s.redb.head"]);
        }
        let head = create_filled(&path, &id, None, &mut fill_to(3, &id)).unwrap();
        assert_eq!(head.seq, 3);
        assert_eq!(names(tmp.path()), ["s.redb", "s.redb.head"]);
        let anchor = StoreDir::open(&path, false).unwrap().read_anchor().unwrap().unwrap();
        assert_eq!(parse_anchor(&anchor).unwrap(), (id, head));
    }
}
