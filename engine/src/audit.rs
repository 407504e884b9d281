//! Audit: verify the chain from genesis, the anchors and the views (a scan against a rebuild,
//! and a point lookup of every row); rebuild views from the log (and upgrade an older format).
//!
//! Both walk the whole stored log once (from the checkpoint it was compacted to, if it was) and
//! project it into views of their own (`kernel::replay`: held in memory up to a bound, then in a
//! spill table beside the store), so a stored view that a replay would not produce is found.
//! Does not repair anything but views.

use hookstate_schema::format::{self, Head, FORMAT_VERSION, META_DOMAIN_EVENTS, META_FORMAT};

use crate::kernel::anchor::{self, AnchorState};
use crate::kernel::counts::Counts;
use crate::kernel::error::{Error, Result};
use crate::kernel::limits::{
    COMPARE_PREFETCH_CHUNKS, REPLAY_BATCH_EVENTS, REPLAY_QUEUE_BATCHES, SPILL_CHUNK_ROWS,
    SPILL_HELD_ROWS_MAX,
};
use crate::kernel::project::Table;
use crate::kernel::replay::{shown_key, RebuiltRows, ReplayMemory, ReplayViews};
use crate::kernel::storage::{Audit, ReadTxn, Storage, WriteTxn};
use crate::kernel::view::{decode_row, decode_stored, read_head};
use crate::kernel::write::Kernel;

/// What `verify` checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Events walked.
    pub events: u64,
    /// The head.
    pub head: Head,
    /// The anchor's seq, when an anchor file exists.
    pub anchor_seq: Option<u64>,
    /// The second anchor's seq, when one is kept and has a line.
    pub second_anchor_seq: Option<u64>,
    /// View rows compared with a rebuild, in a scan.
    pub views: u64,
    /// View rows found by a point lookup of their key.
    pub lookups: u64,
    /// Whether a missing anchor was written (`accept_missing_anchor`).
    pub re_anchored: bool,
    /// The checkpoint the chain was proved from, when the log was compacted (events up to it
    /// were dropped); `None`: proved from genesis.
    pub from_checkpoint: Option<u64>,
}

/// What `rebuild` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildReport {
    /// Events replayed.
    pub events: u64,
    /// Rows of the rebuilt views.
    pub views: u64,
    /// Rows written: those the stored views did not hold byte for byte, or every row when the
    /// views were dropped.
    pub written: u64,
    /// Stored rows removed (the rebuild does not have them); `None` when every view was dropped
    /// and written again (a format upgrade, or a table whose lookups disagree with its scan).
    pub removed: Option<u64>,
    /// Temporary files of killed writers removed from beside the store.
    pub stale_temps_removed: u32,
    /// The format the store was upgraded to, when it was older.
    pub upgraded_to: Option<u16>,
}

/// Walks the log from genesis to the head, checking every link, and projects it.
fn replay_chain<'s>(
    txn: &dyn ReadTxn,
    storage: &'s dyn Storage,
    table: &Table,
    genesis: [u8; 32],
    held_max: usize,
) -> Result<Replayed<'s>> {
    let head = read_head(txn)?;
    let start = crate::ops::snapshot::log_start(txn, genesis)?;
    let mut views = ReplayViews::new(storage, held_max);
    views.start_from(start.views)?;
    let mut counts = start.counts;
    let mut expected = start.head;
    // This thread reads, decodes and chains the events; a second one projects them, in order.
    let (batches, projector_in) =
        std::sync::mpsc::sync_channel::<Vec<hookstate_schema::Event>>(REPLAY_QUEUE_BATCHES);
    // Applied batches go back to the reading thread, which frees their events and refills the
    // batch: each event's memory is freed by the thread that allocated it (glibc's allocator
    // pays more for a free from another thread), and no batch buffer is allocated twice.
    let (applied, emptied) =
        std::sync::mpsc::sync_channel::<Vec<hookstate_schema::Event>>(REPLAY_QUEUE_BATCHES + 1);
    let (read, projected) = std::thread::scope(|scope| {
        let projector = scope.spawn(move || -> Result<ReplayViews<'s>> {
            for batch in projector_in {
                for event in &batch {
                    views.apply(table, event)?;
                }
                // A reader that takes no more back (it is done) leaves the batch to drop here.
                let _ = applied.try_send(batch);
            }
            Ok(views)
        });
        let next_batch = || match emptied.try_recv() {
            Ok(mut used) => {
                used.clear();
                used
            }
            Err(_) => Vec::with_capacity(REPLAY_BATCH_EVENTS),
        };
        let mut batch = next_batch();
        let read = txn.events(1, head.seq, &mut |seq, bytes| {
            if seq != expected.seq + 1 {
                return Err(broken(expected.seq + 1, "event is missing"));
            }
            let event = format::decode_event(bytes).map_err(|e| broken(seq, &e.to_string()))?;
            if event.seq != seq {
                return Err(broken(seq, &format!("record claims seq {}", event.seq)));
            }
            if event.prev != expected.hash {
                return Err(broken(seq, "prev does not match the previous event's hash"));
            }
            counts[event.content.body.variant_index()] += 1;
            expected = Head { seq, hash: event.hash };
            batch.push(event);
            if batch.len() == REPLAY_BATCH_EVENTS {
                let full = std::mem::replace(&mut batch, next_batch());
                // A projector that stopped has its error to give: stop reading.
                return Ok(batches.send(full).is_ok());
            }
            Ok(true)
        });
        if read.is_ok() && !batch.is_empty() {
            let _ = batches.send(batch);
        }
        drop(batches);
        let projected = projector.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (read, projected)
    });
    let views = projected?;
    read?;
    if expected.seq != head.seq {
        return Err(broken(expected.seq + 1, "event is missing"));
    }
    if expected.hash != head.hash {
        return Err(broken(head.seq, "stored head hash does not match the last event"));
    }
    let mut beyond = None;
    txn.events(head.seq.saturating_add(1), u64::MAX, &mut |seq, _| {
        beyond = Some(seq);
        Ok(false)
    })?;
    if let Some(seq) = beyond {
        return Err(broken(seq, "event lies beyond the stored head"));
    }
    Ok(Replayed { head, views, counts, from_checkpoint: start.checkpoint })
}

/// What a replay of the stored log found.
struct Replayed<'s> {
    head: Head,
    views: ReplayViews<'s>,
    counts: Counts,
    /// The checkpoint the stored log starts after, when it was compacted.
    from_checkpoint: Option<u64>,
}

fn broken(seq: u64, why: &str) -> Error {
    Error::ChainBroken { seq, why: why.into() }
}

/// Whether a stored row is the rebuilt one: the same bytes, or (a row an older format wrote)
/// the same row once both are decoded and the stored one's checksum checked.
fn same_row(key: &[u8], want: &[u8], stored: &[u8]) -> Result<bool> {
    if want == stored {
        return Ok(true);
    }
    let (view_key, want) = decode_row(key, want)?;
    Ok(decode_stored(&view_key, key, stored)? == want)
}

/// A chunk of rebuilt rows: encoded key and row, in key order.
type Chunk = Vec<(Vec<u8>, Vec<u8>)>;

/// What the scan of the stored views found for one key, beside the rebuilt rows.
enum Found<'a> {
    /// A row both have: the rebuilt one (`want`) and the stored one as the scan read it.
    Both { key: &'a [u8], want: &'a [u8], stored: &'a [u8] },
    /// A rebuilt row the scan did not find.
    Missing { key: &'a [u8], want: &'a [u8] },
    /// A stored row the rebuild does not have.
    Extra { key: &'a [u8] },
}

/// What a point lookup of a rebuilt row's key must find, as its scan found it.
enum Seen {
    /// The row the rebuild has (for `verify`: the same row, perhaps of an older encoding).
    Same,
    /// This other stored row (`rebuild` replaces it).
    Other(Vec<u8>),
    /// Nothing (`rebuild` writes it).
    Nothing,
}

/// A chunk of rebuilt rows the scan has passed, what it saw at each, and the stored rows it
/// found in their stretch that the rebuild does not have: what the lookups check.
struct Passed {
    rows: Chunk,
    seen: Vec<Seen>,
    extra: Chunk,
}

/// How rows are compared: `verify` takes a row of an older encoding that decodes to the rebuilt
/// one as the same row; `rebuild` writes every row whose bytes are not the rebuilt ones.
#[derive(Clone, Copy)]
enum Equal {
    Decoded,
    Bytes,
}

impl Equal {
    fn same(self, key: &[u8], want: &[u8], stored: &[u8]) -> Result<bool> {
        match self {
            Equal::Decoded => same_row(key, want, stored),
            Equal::Bytes => Ok(want == stored),
        }
    }
}

/// Compares the stored views with a rebuild, in one scan beside one pass over the rebuilt rows,
/// and looks up every rebuilt row by its key once the scan has passed it (`check_lookups`);
/// returns the rows compared and the rows found by a lookup. One pass: the rebuilt rows come
/// back from the replay's spill table once, not once for the scan and again for the lookups.
fn compare_views(txn: &dyn ReadTxn, mut rebuilt: RebuiltRows) -> Result<(u64, u64)> {
    merge_views(txn, &mut rebuilt, Equal::Decoded, &mut |found| match found {
        Found::Both { key, want, stored } => {
            if same_row(key, want, stored)? {
                Ok(Seen::Same)
            } else {
                Err(Error::ViewMismatch { key: shown_key(key) })
            }
        }
        Found::Missing { key, .. } => {
            Err(Error::ViewMismatch { key: format!("{} (missing)", shown_key(key)) })
        }
        Found::Extra { key, .. } => {
            Err(Error::ViewMismatch { key: format!("{} (extra)", shown_key(key)) })
        }
    })
}

/// Merges a scan of the stored views of `txn` with the rebuilt rows, in key order, giving
/// `found` what it finds at each key (it answers what a lookup must find there, or stops the
/// merge with an error), and looks up every rebuilt row and every extra stored row by its key
/// once the scan has passed its chunk (`check_lookups`). Returns the rows both have and the
/// rows found by a lookup. A thread reads the rebuilt rows ahead ([`COMPARE_PREFETCH_CHUNKS`]
/// chunks) while this one scans; where the snapshot may be read by two threads, a third does the
/// lookups (`verify-lookups`). A lookup's finding is answered before the scan's: its key is
/// earlier than any the scan was at.
fn merge_views(
    txn: &dyn ReadTxn,
    rebuilt: &mut RebuiltRows,
    equal: Equal,
    found: &mut dyn FnMut(Found<'_>) -> Result<Seen>,
) -> Result<(u64, u64)> {
    rebuilt.rewind();
    let (ahead, chunks) = std::sync::mpsc::sync_channel(COMPARE_PREFETCH_CHUNKS);
    std::thread::scope(move |scope| {
        std::thread::Builder::new()
            .name("verify-rows".into())
            .spawn_scoped(scope, move || loop {
                let chunk = rebuilt.next_chunk();
                let last = !matches!(&chunk, Ok(rows) if !rows.is_empty());
                // A send fails only when the comparison stopped (it found its answer).
                if ahead.send(chunk).is_err() || last {
                    break;
                }
            })
            .map_err(|e| Error::io("start a thread for", "the replay's rebuilt rows", e))?;
        // Every chunk after the last is empty, as `RebuiltRows::next_chunk` hands them out.
        let next = || chunks.recv().unwrap_or_else(|_| Ok(Vec::new()));
        let Some(shared) = txn.shared() else {
            return merge_chunks(txn, next, found, &mut |passed| {
                check_lookups(txn, &passed, equal)
            });
        };
        let (passed, to_look_up) = std::sync::mpsc::sync_channel::<Passed>(COMPARE_PREFETCH_CHUNKS);
        let lookups = std::thread::Builder::new()
            .name("verify-lookups".into())
            .spawn_scoped(scope, move || -> Result<u64> {
                let mut found = 0;
                for chunk in to_look_up {
                    // Returning drops the channel: the scan stops at its next chunk.
                    found += check_lookups(shared, &chunk, equal)?;
                }
                Ok(found)
            })
            .map_err(|e| Error::io("start a thread for", "the views' lookups", e))?;
        let stopped = || Error::Store("the lookups stopped".into());
        let scanned = merge_chunks(txn, next, found, &mut |chunk| {
            passed.send(chunk).map_err(|_| stopped()).map(|()| 0)
        });
        // Before the scope joins the readers: a reader blocked on a full channel then stops.
        drop(chunks);
        drop(passed);
        let looked = lookups.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // A lookup's finding comes first: its chunk is before any the scan was in.
        let found: u64 = looked?;
        scanned.map(|(compared, _)| (compared, found))
    })
}

/// [`merge_views`] over the rebuilt rows as `next` hands them out, a chunk at a time, with
/// `lookups` given each chunk once the scan has passed it (it answers how many rows it found).
fn merge_chunks(
    txn: &dyn ReadTxn,
    mut next: impl FnMut() -> Result<Chunk>,
    found: &mut dyn FnMut(Found<'_>) -> Result<Seen>,
    lookups: &mut dyn FnMut(Passed) -> Result<u64>,
) -> Result<(u64, u64)> {
    let mut chunk = Passed { rows: next()?, seen: Vec::new(), extra: Vec::new() };
    let (mut compared, mut looked) = (0u64, 0u64);
    txn.views_with_prefix(&[], &mut |key, stored| {
        loop {
            if chunk.seen.len() == chunk.rows.len()
                && advance(&mut chunk, &mut next, lookups, &mut looked)?
            {
                continue;
            }
            match chunk.rows.get(chunk.seen.len()) {
                Some((want_key, want)) if want_key.as_slice() < key => {
                    let seen = found(Found::Missing { key: want_key, want })?;
                    chunk.seen.push(seen);
                }
                Some((want_key, want)) if want_key.as_slice() == key => {
                    let seen = found(Found::Both { key, want, stored })?;
                    chunk.seen.push(seen);
                    compared += 1;
                    return Ok(true);
                }
                _ => {
                    found(Found::Extra { key })?;
                    chunk.extra.push((key.to_vec(), stored.to_vec()));
                    // Extra rows are looked up in chunks too, however many there are.
                    if chunk.extra.len() == SPILL_CHUNK_ROWS {
                        let extra = std::mem::take(&mut chunk.extra);
                        looked += lookups(Passed { rows: Vec::new(), seen: Vec::new(), extra })?;
                    }
                    return Ok(true);
                }
            }
        }
    })?;
    loop {
        while let Some((want_key, want)) = chunk.rows.get(chunk.seen.len()) {
            let seen = found(Found::Missing { key: want_key, want })?;
            chunk.seen.push(seen);
        }
        if !advance(&mut chunk, &mut next, lookups, &mut looked)? {
            break;
        }
    }
    if !chunk.extra.is_empty() {
        looked += lookups(chunk)?;
    }
    Ok((compared, looked))
}

/// Hands `chunk` to `lookups` once the scan has passed it, and puts the next chunk of rebuilt
/// rows in its place; `false` when there is none (the chunk in its place is empty).
fn advance(
    chunk: &mut Passed,
    next: &mut impl FnMut() -> Result<Chunk>,
    lookups: &mut dyn FnMut(Passed) -> Result<u64>,
    looked: &mut u64,
) -> Result<bool> {
    if chunk.rows.is_empty() {
        return Ok(false);
    }
    let rows = next()?;
    let more = !rows.is_empty();
    let passed = std::mem::replace(chunk, Passed { rows, seen: Vec::new(), extra: Vec::new() });
    *looked += lookups(passed)?;
    Ok(more)
}

/// Checks that a point lookup of each key of a chunk the scan has passed finds what the scan
/// found there (every rebuilt row, for `verify`); returns how many rows it found: a scan can
/// agree with a rebuild while a damaged branch page routes lookups past rows (the rows every
/// reader and writer reaches by key). With the scan of `merge_views`, every stored row is then
/// reachable.
fn check_lookups(txn: &dyn ReadTxn, passed: &Passed, equal: Equal) -> Result<u64> {
    // The planted bug: verify trusts the scans and skips the lookups.
    #[cfg(feature = "bugdrill")]
    if crate::kernel::drill::is(crate::kernel::drill::Drill::VerifyScansOnly) {
        return Ok(0);
    }
    let keys: Vec<&[u8]> =
        passed.rows.iter().chain(&passed.extra).map(|(key, _)| key.as_slice()).collect();
    let stored = txn.views(&keys)?;
    let (rows, extra) = stored.split_at(passed.rows.len().min(stored.len()));
    let mut found = 0u64;
    for (((key, want), seen), stored) in passed.rows.iter().zip(&passed.seen).zip(rows) {
        let why = match (seen, stored) {
            (Seen::Same, Some(stored)) if equal.same(key, want, stored)? => None,
            (Seen::Same, Some(_)) => Some("lookup"),
            (Seen::Same, None) => Some("in the table but not found by a lookup of its key"),
            (Seen::Other(row), Some(stored)) if row == stored => None,
            (Seen::Nothing, None) => None,
            _ => Some("a lookup of its key disagrees with the scan"),
        };
        if let Some(why) = why {
            return Err(Error::ViewMismatch { key: format!("{} ({why})", shown_key(key)) });
        }
        found += u64::from(stored.is_some());
    }
    for ((key, row), stored) in passed.extra.iter().zip(extra) {
        if stored.as_ref() != Some(row) {
            return Err(Error::ViewMismatch {
                key: format!("{} (a lookup of its key disagrees with the scan)", shown_key(key)),
            });
        }
        found += 1;
    }
    Ok(found)
}

/// What `verify` may do beyond checking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyOptions {
    /// A missing anchor on a store with events is accepted, and the anchor written at the head
    /// (the operator vouches for the store); without this it is a failure.
    pub accept_missing_anchor: bool,
}

/// Verifies the chain from genesis, the anchors outside the store, that the stored views equal
/// a rebuild of the log, and that every rebuilt row is found by a point lookup; on a store opened
/// read-only without redb's integrity check, runs that check beside the replay. Writes nothing,
/// except the anchor when `options.accept_missing_anchor` re-anchors a store, and the replay's
/// spill table (`kernel::replay`: an unnamed file beside the store, gone when it returns).
///
/// # Errors
/// [`Error::ChainBroken`] naming the first bad seq, [`Error::AnchorMismatch`],
/// [`Error::AnchorMissing`], [`Error::ViewMismatch`], [`Error::Corrupt`] and store errors.
pub(crate) fn verify(kernel: &Kernel, options: VerifyOptions) -> Result<VerifyReport> {
    verify_with(kernel, options, SPILL_HELD_ROWS_MAX).map(|(report, _)| report)
}

/// [`verify`], holding at most `held_max` rebuilt rows in memory; also says what the replay's
/// memory did.
pub(crate) fn verify_with(
    kernel: &Kernel,
    options: VerifyOptions,
    held_max: usize,
) -> Result<(VerifyReport, ReplayMemory)> {
    beside_page_check(kernel, Audit::Verify, || verify_log(kernel, options, held_max))
}

/// Runs `work` (a replay) with redb's check of every page (of a store opened without it, when
/// `audit` asks for it: [`Storage::check_pages`]) on a thread of its own beside it. When the
/// check finds a fault, that is the answer, whatever `work` found, as it was when the check ran
/// on open. The replay may meet the damaged page first, and redb may panic on it (a slice out of
/// range): that panic is caught, and stands only if the check finds nothing.
fn beside_page_check<T>(
    kernel: &Kernel,
    audit: Audit,
    work: impl FnOnce() -> Result<T>,
) -> Result<T> {
    let outcome = {
        let _caught = CaughtPanics::enter();
        std::thread::scope(|scope| {
            let pages = scope.spawn(|| kernel.storage().check_pages(audit));
            let worked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let pages = pages.join().unwrap_or_else(|panic| {
                Err(Error::Corrupt(format!(
                    "redb's integrity check of the pages stopped: {}",
                    panic_text(&*panic)
                )))
            });
            match (pages, worked) {
                (Err(err), _) => Ok(Err(err)),
                (Ok(()), Ok(worked)) => Ok(worked),
                (Ok(()), Err(panic)) => Err(panic_text(&*panic)),
            }
        })
    };
    // Raised again once no longer caught, so the process's panic hook sees it as it would have.
    outcome.unwrap_or_else(|text| panic!("{text}"))
}

/// Verifies and rebuilds in progress whose panics are caught (`beside_page_check`): while one
/// is, a panic hook should let a panic unwind rather than end the process ([`panic_is_caught`]).
static CAUGHT_PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a panic now is caught by a verify or a rebuild that runs redb's page check beside its
/// replay, which answers the check's finding instead: a process's panic hook that ends the
/// process (the CLI's) returns early while this is `true`, so the panic can unwind to it.
#[must_use]
pub fn panic_is_caught() -> bool {
    CAUGHT_PANICS.load(std::sync::atomic::Ordering::SeqCst) > 0
}

/// One caught section of [`CAUGHT_PANICS`], left when dropped (also while unwinding).
struct CaughtPanics;

impl CaughtPanics {
    fn enter() -> CaughtPanics {
        CAUGHT_PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        CaughtPanics
    }
}

impl Drop for CaughtPanics {
    fn drop(&mut self) {
        CAUGHT_PANICS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A panic's message.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// [`verify_with`] without redb's page check: the chain, the anchors and the views.
fn verify_log(
    kernel: &Kernel,
    options: VerifyOptions,
    held_max: usize,
) -> Result<(VerifyReport, ReplayMemory)> {
    kernel.storage().check_anchor_history(kernel.identity().store_id)?;
    let anchors = kernel.read_anchors();
    let txn = kernel.begin_read()?;
    let Replayed { head, views, counts, from_checkpoint } =
        replay_chain(&*txn, kernel.storage(), kernel.table(), kernel.genesis(), held_max)?;
    let memory = views.memory();
    let states = kernel.check_anchors(&*txn, &head, anchors)?;
    if let Some(stored) = crate::kernel::counts::read(&*txn)? {
        if stored != counts {
            return Err(Error::Corrupt(format!(
                "the stored events per domain {stored:?} are not the log's {counts:?}"
            )));
        }
    }
    let (compared, lookups) = compare_views(&*txn, views.finish()?)?;
    let missing = states.iter().find(|(_, state)| *state == AnchorState::Missing);
    let mut re_anchored = false;
    let required = kernel.storage().anchor_required();
    if let Some((path, _)) = missing.filter(|_| required && head.seq > 0) {
        // A build cut before its anchor is anchored as the build would have.
        let built = crate::kernel::write::built_at(&*txn, &head)?;
        if !options.accept_missing_anchor && !built {
            return Err(anchor::missing(path, &head));
        }
        re_anchored = kernel.re_anchor(&head);
    }
    let seq_of = |state: &AnchorState| match state {
        AnchorState::At(seq) => Some(*seq),
        AnchorState::Missing => None,
    };
    let anchor_seq = states.first().and_then(|(_, state)| seq_of(state));
    let second_anchor_seq = states.get(1).and_then(|(_, state)| seq_of(state));
    let report = VerifyReport {
        events: head.seq - from_checkpoint.map_or(0, |seq| seq + 1)
            + u64::from(from_checkpoint.is_some()),
        head,
        anchor_seq,
        second_anchor_seq,
        views: compared,
        lookups,
        re_anchored,
        from_checkpoint,
    };
    Ok((report, memory))
}

/// Recomputes every view from the log, after checking the chain, and writes the rows where the
/// stored views differ from it (`write_differences`); drops every view and writes each again
/// when the stored table's lookups disagree with its scan (a damaged branch page), and on a
/// store of an older format, which is upgraded (its views rewritten in this format, its version
/// moved) in the same transaction.
///
/// # Errors
/// [`Error::ChainBroken`] (nothing is changed then) and store errors.
pub(crate) fn rebuild(kernel: &Kernel) -> Result<RebuildReport> {
    rebuild_with(kernel, SPILL_HELD_ROWS_MAX)
}

/// [`rebuild`], holding at most `held_max` rebuilt rows in memory.
pub(crate) fn rebuild_with(kernel: &Kernel, held_max: usize) -> Result<RebuildReport> {
    let mut txn = kernel.begin_anchored_write()?;
    // The page check of a store opened without it runs beside the replay, and nothing is
    // written before it passed.
    let (head, counts, mut rebuilt) = beside_page_check(kernel, Audit::Rebuild, || {
        let Replayed { head, views, counts, .. } =
            replay_chain(&*txn, kernel.storage(), kernel.table(), kernel.genesis(), held_max)?;
        Ok((head, counts, views.finish()?))
    })?;
    txn.put_meta(META_DOMAIN_EVENTS, &crate::kernel::counts::encode(&counts))?;
    let upgraded = kernel.needs_upgrade();
    // An upgrade, or a lookup that disagrees with the scan, has the table rewritten whole. The
    // snapshot is begun after the write transaction: the views that transaction starts from.
    let differences = if upgraded {
        None
    } else {
        match write_differences(&*kernel.storage().begin_read()?, &mut *txn, &mut rebuilt) {
            Ok(written) => Some(written),
            Err(Error::ViewMismatch { .. }) => None,
            Err(err) => return Err(err),
        }
    };
    let written = match differences {
        Some(written) => written,
        None => rewrite_views(&mut *txn, &mut rebuilt)?,
    };
    drop(rebuilt);
    if upgraded {
        txn.put_meta(META_FORMAT, &FORMAT_VERSION.to_be_bytes())?;
    }
    if let Err(err) = txn.commit() {
        kernel.poison();
        return Err(err);
    }
    let stale_temps_removed = kernel.storage().remove_stale_temps()?;
    Ok(RebuildReport {
        events: head.seq,
        views: written.rows,
        written: written.written,
        removed: written.removed,
        stale_temps_removed,
        upgraded_to: upgraded.then_some(FORMAT_VERSION),
    })
}

/// What a rebuild wrote.
struct Written {
    /// Rows of the rebuilt views.
    rows: u64,
    /// Rows written.
    written: u64,
    /// Stored rows removed; `None` when every row was dropped.
    removed: Option<u64>,
}

/// Writes into `txn` the rebuilt rows the stored views of `snapshot` (what `txn` started from)
/// do not hold byte for byte, and removes the stored rows the rebuild does not have, in batches
/// of at most [`SPILL_CHUNK_ROWS`]; every key the scan passed is looked up too
/// (`check_lookups`), and a lookup that disagrees with the scan is a [`Error::ViewMismatch`].
fn write_differences(
    snapshot: &dyn ReadTxn,
    txn: &mut dyn WriteTxn,
    rebuilt: &mut RebuiltRows,
) -> Result<Written> {
    let mut changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    let (mut rows, mut written, mut removed) = (0u64, 0u64, 0u64);
    merge_views(snapshot, rebuilt, Equal::Bytes, &mut |found| {
        let seen = match found {
            Found::Both { want, stored, .. } if want == stored => {
                rows += 1;
                return Ok(Seen::Same);
            }
            Found::Both { key, want, stored } => {
                changes.push((key.to_vec(), Some(want.to_vec())));
                (rows, written) = (rows + 1, written + 1);
                Seen::Other(stored.to_vec())
            }
            Found::Missing { key, want } => {
                changes.push((key.to_vec(), Some(want.to_vec())));
                (rows, written) = (rows + 1, written + 1);
                Seen::Nothing
            }
            Found::Extra { key, .. } => {
                changes.push((key.to_vec(), None));
                removed += 1;
                // The merge keeps no answer for a stored row the rebuild does not have.
                Seen::Nothing
            }
        };
        if changes.len() >= SPILL_CHUNK_ROWS {
            txn.write_views(&changes)?;
            changes.clear();
        }
        Ok(seen)
    })?;
    txn.write_views(&changes)?;
    Ok(Written { rows, written, removed: Some(removed) })
}

/// Drops every stored view and writes every rebuilt row.
fn rewrite_views(txn: &mut dyn WriteTxn, rebuilt: &mut RebuiltRows) -> Result<Written> {
    txn.clear_views()?;
    rebuilt.rewind();
    let mut written = 0u64;
    loop {
        let chunk = rebuilt.next_chunk()?;
        if chunk.is_empty() {
            break;
        }
        written += chunk.len() as u64;
        let changes: Vec<(Vec<u8>, Option<Vec<u8>>)> =
            chunk.into_iter().map(|(key, row)| (key, Some(row))).collect();
        txn.write_views(&changes)?;
    }
    Ok(Written { rows: written, written, removed: None })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::collections::{BTreeMap, HashSet};
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use super::*;
    use crate::kernel::storage::{EventVisitor, RowVisitor};
    use crate::{Engine, OpenOptions};

    /// Stored views whose point lookups miss one key (as a damaged branch page routes them),
    /// read by one thread or shared, recording the threads that looked rows up.
    struct Views {
        rows: BTreeMap<Vec<u8>, Vec<u8>>,
        lost: Option<Vec<u8>>,
        shared: bool,
        lookup_threads: Mutex<HashSet<ThreadId>>,
    }

    impl ReadTxn for Views {
        fn meta(&self, _: &str) -> Result<Option<Vec<u8>>> {
            Ok(None)
        }
        fn event(&self, _: u64) -> Result<Option<Vec<u8>>> {
            Ok(None)
        }
        fn events(&self, _: u64, _: u64, _: &mut EventVisitor<'_>) -> Result<()> {
            Ok(())
        }
        fn view(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            self.lookup_threads.lock().unwrap().insert(std::thread::current().id());
            if self.lost.as_deref() == Some(key) {
                return Ok(None);
            }
            Ok(self.rows.get(key).cloned())
        }
        fn views_with_prefix(&self, prefix: &[u8], visit: &mut RowVisitor<'_>) -> Result<()> {
            for (key, row) in self.rows.range(prefix.to_vec()..) {
                if !key.starts_with(prefix) || !visit(key, row)? {
                    break;
                }
            }
            Ok(())
        }
        fn shared(&self) -> Option<&(dyn ReadTxn + Sync)> {
            self.shared.then_some(self)
        }
    }

    fn row_key(n: usize) -> Vec<u8> {
        format!("k{n:08}").into_bytes()
    }

    #[test]
    fn a_lookup_that_misses_a_row_is_found_before_a_later_scan_mismatch_whoever_looks_it_up() {
        let count = (COMPARE_PREFETCH_CHUNKS + 3) * SPILL_CHUNK_ROWS;
        let rebuilt: Vec<_> = (0..count).map(|n| (row_key(n), b"row".to_vec())).collect();
        // The scan finds a row missing in the third chunk; a lookup misses one of the first.
        let gone = 2 * SPILL_CHUNK_ROWS + 5;
        let stored: BTreeMap<_, _> =
            rebuilt.iter().filter(|(k, _)| *k != row_key(gone)).cloned().collect();
        for shared in [true, false] {
            for lost in [Some(row_key(10)), None] {
                let views = Views {
                    rows: stored.clone(),
                    lost: lost.clone(),
                    shared,
                    lookup_threads: Mutex::new(HashSet::new()),
                };
                let err = compare_views(&views, RebuiltRows::held(rebuilt.clone())).unwrap_err();
                let shown = err.to_string();
                match lost {
                    Some(key) => {
                        assert!(shown.contains("not found by a lookup"), "{shown}");
                        assert!(shown.contains(&format!("{key:x?}")), "{shown}");
                    }
                    None => {
                        assert!(shown.contains("missing"), "{shown}");
                        assert!(shown.contains(&format!("{:x?}", row_key(gone))), "{shown}");
                    }
                }
                let threads = views.lookup_threads.into_inner().unwrap();
                let here = std::thread::current().id();
                assert_eq!(threads.len(), 1, "one thread looks rows up");
                assert_eq!(threads.contains(&here), !shared, "shared: {shared}");
            }
        }
    }

    #[test]
    fn views_equal_to_the_rebuild_are_compared_and_looked_up_row_by_row() {
        let count = 3 * SPILL_CHUNK_ROWS + 7;
        let rebuilt: Vec<_> = (0..count).map(|n| (row_key(n), b"row".to_vec())).collect();
        for shared in [true, false] {
            let views = Views {
                rows: rebuilt.iter().cloned().collect(),
                lost: None,
                shared,
                lookup_threads: Mutex::new(HashSet::new()),
            };
            let compared = compare_views(&views, RebuiltRows::held(rebuilt.clone())).unwrap();
            assert_eq!(compared, (count as u64, count as u64), "shared: {shared}");
        }
    }

    #[test]
    fn a_merge_for_a_rebuild_finds_every_difference_and_looks_up_every_key_the_scan_found() {
        let count = 3 * SPILL_CHUNK_ROWS + 11;
        let rebuilt: Vec<_> = (0..count).map(|n| (row_key(2 * n), b"row".to_vec())).collect();
        let mut stored: BTreeMap<_, _> = rebuilt.iter().cloned().collect();
        stored.remove(&row_key(2 * 7));
        stored.insert(row_key(2 * 9), b"old".to_vec());
        let between = row_key(2 * SPILL_CHUNK_ROWS + 1);
        stored.insert(between.clone(), b"x".to_vec());
        // More extra rows after the last rebuilt one than a chunk holds.
        let after: Vec<_> = (0..SPILL_CHUNK_ROWS + 3).map(|n| row_key(2 * count + n)).collect();
        for key in &after {
            stored.insert(key.clone(), b"x".to_vec());
        }
        for shared in [true, false] {
            for lost in [None, Some(row_key(2 * 9)), Some(row_key(4)), after.last().cloned()] {
                let views = Views {
                    rows: stored.clone(),
                    lost: lost.clone(),
                    shared,
                    lookup_threads: Mutex::new(HashSet::new()),
                };
                let (mut puts, mut removes) = (Vec::new(), Vec::new());
                let merged = merge_views(
                    &views,
                    &mut RebuiltRows::held(rebuilt.clone()),
                    Equal::Bytes,
                    &mut |found| {
                        Ok(match found {
                            Found::Both { want, stored, .. } if want == stored => Seen::Same,
                            Found::Both { key, stored, .. } => {
                                puts.push(key.to_vec());
                                Seen::Other(stored.to_vec())
                            }
                            Found::Missing { key, .. } => {
                                puts.push(key.to_vec());
                                Seen::Nothing
                            }
                            Found::Extra { key } => {
                                removes.push(key.to_vec());
                                Seen::Nothing
                            }
                        })
                    },
                );
                let Some(lost) = lost else {
                    let (compared, looked) = merged.unwrap();
                    assert_eq!(puts, [row_key(2 * 7), row_key(2 * 9)]);
                    let mut extra = vec![between.clone()];
                    extra.extend(after.iter().cloned());
                    assert_eq!(removes, extra);
                    assert_eq!(compared, count as u64 - 1, "every rebuilt row the scan found");
                    assert_eq!(looked, stored.len() as u64, "every stored row, by its key");
                    continue;
                };
                let err = merged.expect_err("a lookup misses a row the scan found").to_string();
                assert!(err.contains(&format!("{lost:x?}")), "{err}");
                assert!(err.contains("lookup"), "{err}");
            }
        }
    }

    /// Far longer than the comparison below takes: past it, the comparison hung.
    const HUNG: Duration = Duration::from_secs(60);

    #[test]
    fn a_comparison_that_stops_early_lets_the_reader_ahead_of_it_stop_too() {
        // More chunks than the reader may hold ahead, so it is blocked on a full channel
        // when the comparison finds the first rebuilt row missing from an empty views table.
        let rows = (0..(COMPARE_PREFETCH_CHUNKS + 3) * SPILL_CHUNK_ROWS)
            .map(|n| (format!("k{n:08}").into_bytes(), b"row".to_vec()))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(&dir.path().join("s.redb"), OpenOptions::default()).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let txn = engine.kernel().begin_read().unwrap();
                done.send(compare_views(&*txn, RebuiltRows::held(rows))).unwrap();
            });
            // A scope joins its threads even when this one panics: a hang must abort instead.
            let compared = finished.recv_timeout(HUNG).unwrap_or_else(|_| {
                eprintln!("the comparison hung for {HUNG:?} after the first missing row");
                std::process::abort()
            });
            let err = compared.expect_err("the views table is empty");
            let first = format!("{:x?}", b"k00000000");
            assert!(err.to_string().contains(&first), "{err}");
            assert!(err.to_string().contains("missing"), "{err}");
        });
    }
}
