//! The write path every mutation of every domain runs, as one transaction: check the anchor
//! against the log, replay an idempotent repeat (or refuse a key reused for another request), or
//! decide a [`Plan`] on the rows the decision reads, append its events, project them through the
//! engine's table, move the head, commit, and move the anchors forward.
//!
//! [`Kernel`] is what domains stand on: it holds the storage (behind the `Storage` trait), the
//! projection table and the store's identity. Does not know any domain or any backend.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use hookstate_schema::event::Request;
use hookstate_schema::format::{
    self, encode_head, encode_view_key, encode_view_row, genesis_hash, Head, FORMAT_VERSION,
    FORMAT_VERSION_IN_PLACE, FORMAT_VERSION_UPGRADABLE, META_ANCHOR_WRITE_FAILURES,
    META_DOMAIN_EVENTS, META_FORMAT, META_HEAD, META_STORE_ID, STORE_ID_BYTES,
};
use hookstate_schema::{validate_id, validate_scope, Body, Event, EventContent};

use crate::kernel::anchor::{self, AnchorState, Identity};
use crate::kernel::batch_state::Batch;
use crate::kernel::call::{Call, Outcome, Plan};
use crate::kernel::counts;
use crate::kernel::error::{Error, Result};
use crate::kernel::limits::{
    CALL_START_GRACE_MS, CONFLICT_BACKOFF_US_MAX, EVENT_BYTES_MAX, LOCK_BACKOFF_US_MIN,
    STORED_RESULT_BYTES_MAX, TXN_ATTEMPTS_MAX,
};
use crate::kernel::project::{self, Table};
use crate::kernel::storage::{ReadTxn, Storage, WriteTxn};
use crate::kernel::view::{preload_rows, read_head, read_row, Overlay};
use hookstate_schema::ViewRow;

thread_local! {
    /// When the call this thread runs for another process was received and when its wait ends
    /// (a server's writer running a forwarded call): every lock wait of the call ends by it, as
    /// the caller's own `--wait-ms` ends them in-process, and no write of the call starts more
    /// than [`CALL_START_GRACE_MS`] after it. The caller stops waiting for the answer a bounded margin later and runs the
    /// call itself under the same idempotency key, so a write the server started after that
    /// would land behind an answer of "busy".
    static CALL_BOUND: Cell<Option<(Instant, Instant)>> = const { Cell::new(None) };
}

/// Bounds the calls this thread runs by a caller's wait until dropped (see [`CALL_BOUND`]).
pub(crate) struct CallBound {
    previous: Option<(Instant, Instant)>,
}

impl CallBound {
    /// From now on this thread's calls are bounded by `bound` (received, deadline); `None`
    /// bounds them by the store's wait alone.
    pub(crate) fn set(bound: Option<(Instant, Instant)>) -> CallBound {
        CallBound { previous: CALL_BOUND.with(|b| b.replace(bound)) }
    }
}

impl Drop for CallBound {
    fn drop(&mut self) {
        CALL_BOUND.with(|b| b.set(self.previous));
    }
}

/// The busy error of a call that may no longer start a write: its caller's wait ended more than
/// [`CALL_START_GRACE_MS`] ago. With how long ago it was received.
fn call_expired() -> Option<Error> {
    let (received, deadline) = CALL_BOUND.with(Cell::get)?;
    let now = Instant::now();
    (now >= deadline + Duration::from_millis(CALL_START_GRACE_MS)).then(|| Error::Busy {
        waited_ms: u64::try_from(now.duration_since(received).as_millis()).unwrap_or(u64::MAX),
    })
}

/// A busy error of a call bounded by its caller's wait says how long ago the call was received,
/// as the caller waited: this thread's own lock wait may have begun later (a served call behind
/// a batch that could not take the lock said "0 ms").
fn waited_since_received(err: Error) -> Error {
    match (err, CALL_BOUND.with(Cell::get)) {
        (Error::Busy { .. }, Some((received, _))) => Error::Busy {
            waited_ms: u64::try_from(received.elapsed().as_millis()).unwrap_or(u64::MAX),
        },
        (err, _) => err,
    }
}

/// An open store as the domains see it: transactions, the write path and the projections.
pub(crate) struct Kernel {
    pub(super) storage: Box<dyn Storage>,
    table: &'static Table,
    store_id: [u8; STORE_ID_BYTES],
    format: u16,
    wait: Duration,
    pub(super) poisoned: AtomicBool,
    /// Whether a commit of this handle appended events (it passed the anchor check to do so).
    pub(super) committed: AtomicBool,
    warning_sink: OnceLock<WarningSink>,
    /// The open batch of a server's writer thread, if any (`kernel::batch_state`).
    pub(super) batch: Mutex<Option<Batch>>,
}

/// A call that failed inside a write transaction, and whether it had written to it.
pub(crate) struct Failed {
    pub(crate) error: Error,
    pub(crate) touched: bool,
}

/// Tries at the anchor lock for a store's seq-0 anchor before its first commit: 50 pauses of
/// 1 ms cover a creator's anchor write (one small file and an fsync) on a loaded machine, and
/// bound what the first write of a store can wait.
const GENESIS_ANCHOR_TRIES: u32 = 50;
/// The pause between those tries.
const GENESIS_ANCHOR_PAUSE: Duration = Duration::from_millis(1);

/// Where a caller wants warning lines to go as they happen (the CLI: stderr).
pub(crate) type WarningSink = Box<dyn Fn(&str) + Send + Sync>;

impl Kernel {
    /// A kernel over `storage`, checking that it holds a hookstate store this build can read
    /// (an older format opens too, but only `rebuild` may use it: every other call is refused
    /// with [`Error::UpgradeRequired`]).
    ///
    /// # Errors
    /// [`Error::NotAStore`], [`Error::FormatTooNew`], store errors.
    pub(crate) fn new(
        storage: Box<dyn Storage>,
        table: &'static Table,
        wait: Duration,
    ) -> Result<Kernel> {
        let (store_id, format) = read_identity(&*storage)?;
        Ok(Kernel {
            storage,
            table,
            store_id,
            format,
            wait,
            poisoned: AtomicBool::new(false),
            committed: AtomicBool::new(false),
            warning_sink: OnceLock::new(),
            batch: Mutex::new(None),
        })
    }

    /// Refuses a store of an older format (only `rebuild` upgrades one), except one this build
    /// writes in place ([`FORMAT_VERSION_IN_PLACE`]).
    pub(super) fn current(&self) -> Result<()> {
        if self.format < FORMAT_VERSION_IN_PLACE {
            return Err(Error::UpgradeRequired { found: self.format, supported: FORMAT_VERSION });
        }
        Ok(())
    }

    /// Moves the version of a store of [`FORMAT_VERSION_IN_PLACE`] to this build's in the write
    /// transaction `txn`, which may append a record of the current envelope (which a build of
    /// that format cannot read): such a build then refuses the store as too new. A meta row the
    /// commit rewrites anyway (beside the head), and nothing at all on a store of this format.
    /// A store older than that is left as it is: only `rebuild` moves it, with its views.
    /// A store before format 5 also has its checkpoint rows moved out of its meta rows
    /// ([`WriteTxn::move_blobs`]).
    pub(super) fn mark_format(&self, txn: &mut dyn WriteTxn) -> Result<()> {
        if (FORMAT_VERSION_IN_PLACE..FORMAT_VERSION).contains(&self.format) {
            txn.move_blobs()?;
            txn.put_meta(META_FORMAT, &FORMAT_VERSION.to_be_bytes())?;
        }
        Ok(())
    }

    /// Whether the store has an older format, which `rebuild` upgrades.
    pub(crate) fn needs_upgrade(&self) -> bool {
        self.format < FORMAT_VERSION
    }

    /// The storage behind this kernel.
    pub(crate) fn storage(&self) -> &dyn Storage {
        &*self.storage
    }

    /// The storage, to compact its file (`crate::ops`).
    pub(crate) fn storage_mut(&mut self) -> &mut dyn Storage {
        &mut *self.storage
    }

    /// The projection table.
    pub(crate) fn table(&self) -> &'static Table {
        self.table
    }

    /// The genesis hash of this store (the `prev` of seq 1).
    pub(crate) fn genesis(&self) -> [u8; 32] {
        genesis_hash(&self.store_id)
    }

    /// The store's id.
    pub(crate) fn store_id(&self) -> &[u8; STORE_ID_BYTES] {
        &self.store_id
    }

    /// The bounded wait this store was opened with.
    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    /// When a lock wait that starts at `start` ends: after the store's wait, or at the deadline
    /// of the call this thread runs for another process when that is sooner ([`CALL_BOUND`]).
    pub(crate) fn deadline_from(&self, start: Instant) -> Instant {
        let own = start + self.wait;
        CALL_BOUND.with(Cell::get).map_or(own, |(_, deadline)| deadline.min(own))
    }

    /// How long a lock wait that starts now may last ([`Kernel::deadline_from`]).
    pub(crate) fn lock_wait(&self) -> Duration {
        let now = Instant::now();
        self.deadline_from(now).saturating_duration_since(now)
    }

    /// The store's printable location.
    pub(crate) fn path(&self) -> PathBuf {
        self.storage.path()
    }

    /// Opens a read snapshot.
    ///
    /// # Errors
    /// [`Error::UpgradeRequired`] for an older store; store errors.
    pub(crate) fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        self.current()?;
        self.storage.begin_read()
    }

    /// Takes the write transaction, waiting at most the store's wait. For writes that append no
    /// event (a rebuild, a counter in the metadata): events go through [`Kernel::write`].
    pub(crate) fn begin_write(&self) -> Result<Box<dyn WriteTxn + '_>> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(Error::Poisoned);
        }
        // The thread holding a batch holds the one write transaction: waiting would never end.
        if self.holds_batch() {
            return Err(Error::Busy { waited_ms: 0 });
        }
        if let Some(busy) = call_expired() {
            return Err(busy);
        }
        self.write_txn(self.deadline_from(Instant::now()))
    }

    /// [`Kernel::begin_write`] for a write that changes the log or the views without appending
    /// (`compact`, `rebuild`): refused as every call's write is when an anchor disagrees with the
    /// log or is missing ([`Kernel::anchor_gate`]), so a rolled-back or foreign store is never
    /// compacted or rewritten.
    ///
    /// # Errors
    /// [`Error::AnchorMismatch`] and [`Error::AnchorMissing`]; as [`Kernel::begin_write`].
    pub(crate) fn begin_anchored_write(&self) -> Result<Box<dyn WriteTxn + '_>> {
        let txn = self.begin_write()?;
        let head = read_head(&*txn)?;
        self.anchor_gate(&*txn, &head, self.read_anchors())?;
        Ok(txn)
    }

    /// The write transaction, waiting until `deadline`, with the store's format moved to this
    /// build's ([`Kernel::mark_format`]): every write that may append a record opens its
    /// transaction here or in [`Kernel::begin_batch`].
    fn write_txn(&self, deadline: Instant) -> Result<Box<dyn WriteTxn + '_>> {
        let mut txn = self.storage.begin_write(deadline).map_err(waited_since_received)?;
        self.mark_format(&mut *txn)?;
        Ok(txn)
    }

    /// The identity an anchor must carry.
    pub(crate) fn identity(&self) -> Identity<'_> {
        Identity { store_id: &self.store_id, genesis: self.genesis() }
    }

    /// Reads both anchors (the one beside the store, and the second one when kept): read before
    /// any snapshot they are checked against, so that they can only lag it.
    pub(crate) fn read_anchors(&self) -> Vec<(PathBuf, Result<Option<String>>)> {
        let mut out = vec![(self.storage.anchor_path(), self.storage.read_anchor())];
        if let Some(path) = self.storage.second_anchor_path(&self.store_id) {
            out.push((path, self.storage.read_second_anchor(&self.store_id)));
        }
        out
    }

    /// Checks anchors read by [`Kernel::read_anchors`] against the log as `txn` sees it.
    ///
    /// # Errors
    /// As [`anchor::check`], for the first anchor that fails.
    pub(crate) fn check_anchors(
        &self,
        txn: &dyn ReadTxn,
        head: &Head,
        anchors: Vec<(PathBuf, Result<Option<String>>)>,
    ) -> Result<Vec<(PathBuf, AnchorState)>> {
        anchors
            .into_iter()
            .map(|(path, read)| {
                anchor::check(self.identity(), txn, head, &path, read).map(|state| (path, state))
            })
            .collect()
    }

    /// What a call that only reads should be told about the anchors, if anything: the error a
    /// write would be refused with. Nothing inside this thread's batch: the batch checked the
    /// anchors when it began, and nothing commits while it holds the write transaction (a
    /// server's writer asked this once per call, reading the anchor file each time: a tenth of
    /// the server's CPU at 8 clients, docs/decisions.md).
    ///
    /// # Errors
    /// Store and corruption errors of the snapshot itself.
    pub(crate) fn anchor_note(&self) -> Result<Option<Error>> {
        if !self.storage.exists() {
            return Ok(self.absent_note());
        }
        if self.holds_batch() {
            return Ok(None);
        }
        self.anchor_problem_now()
    }

    /// What a read of an absent store is told when a removed store's anchor is left at its path
    /// (its answer, an empty store's, is not that store's state).
    fn absent_note(&self) -> Option<Error> {
        let text = self.storage.read_anchor().ok().flatten()?;
        let seq = format::parse_anchor(&text).map_or(None, |(_, head)| Some(head.seq));
        let why = match seq {
            Some(0) => return None,
            Some(seq) => format!(
                "{}: no store is at {}, but its anchor names seq {seq}: the store was removed or \
                 moved",
                self.storage.anchor_path().display(),
                self.storage.path().display()
            ),
            None => format!(
                "{}: no store is at {}, and the anchor left there does not parse",
                self.storage.anchor_path().display(),
                self.storage.path().display()
            ),
        };
        Some(Error::AnchorMismatch { why })
    }

    /// [`Kernel::anchor_note`] in a snapshot the caller already holds. The anchors are read after
    /// it began, so a writer that committed since may have moved them past it: a disagreement
    /// counts only when the anchors also disagree with a snapshot begun after they were read.
    pub(crate) fn anchor_problem(&self, txn: &dyn ReadTxn) -> Result<Option<Error>> {
        if !self.storage.exists() {
            return Ok(self.absent_note());
        }
        if self.disagreement(txn, self.read_anchors())?.is_none() {
            return Ok(None);
        }
        self.anchor_problem_now()
    }

    /// The anchors against a snapshot begun after they were read: a writer moves them only once
    /// it has committed, so that snapshot holds every event they name, and only a log truncated
    /// or rolled back (or an anchor damaged) disagrees.
    fn anchor_problem_now(&self) -> Result<Option<Error>> {
        let anchors = self.read_anchors();
        self.disagreement(&*self.begin_read()?, anchors)
    }

    /// What `anchors` (read by [`Kernel::read_anchors`]) say against the log as `txn` sees it.
    fn disagreement(
        &self,
        txn: &dyn ReadTxn,
        anchors: Vec<(PathBuf, Result<Option<String>>)>,
    ) -> Result<Option<Error>> {
        let head = read_head(txn)?;
        Ok(self.anchor_gate(txn, &head, anchors).err())
    }

    /// The anchor check a write must pass: every anchor agrees with the log, and none is missing
    /// once the log holds events.
    pub(super) fn anchor_gate(
        &self,
        txn: &dyn ReadTxn,
        head: &Head,
        anchors: Vec<(PathBuf, Result<Option<String>>)>,
    ) -> Result<()> {
        let required = self.storage.anchor_required();
        for (path, state) in self.check_anchors(txn, head, anchors)? {
            if required && state == AnchorState::Missing && head.seq > 0 && !built_at(txn, head)? {
                return Err(anchor::missing(&path, head));
            }
        }
        Ok(())
    }

    /// Whether a commit of this handle appended events: each passed the anchor check, so the
    /// anchors agreed with the log when it wrote.
    pub(crate) fn has_committed(&self) -> bool {
        self.committed.load(Ordering::SeqCst)
    }

    /// Whether a failed commit made this handle refuse every write.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::SeqCst)
    }

    /// Refuses every later write of this handle (after a failed commit).
    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::SeqCst);
    }

    /// The current head.
    pub(crate) fn head(&self) -> Result<Head> {
        read_head(&*self.begin_read()?)
    }

    /// Runs one mutation of any domain as one write transaction: replay an idempotent repeat, or
    /// decide a [`Plan`] on the rows `decide` reads, append its events, project them, move the
    /// head and commit. The caller validated its input before. On the thread that holds an open
    /// batch ([`Kernel::begin_batch`]) the call runs inside the batch's transaction instead, and
    /// is durable only once the batch commits. A transaction the database server aborted for a
    /// conflict (serialization failure, deadlock) runs again, decision included, at most
    /// [`TXN_ATTEMPTS_MAX`] times and within the wait; then the call is busy.
    pub(crate) fn write(
        &self,
        call: &Call,
        decide: impl Fn(&dyn ReadTxn) -> Result<Plan>,
    ) -> Result<Outcome> {
        if let Some(busy) = call_expired() {
            return Err(busy);
        }
        let start = Instant::now();
        let deadline = self.deadline_from(start);
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.write_once(call, &decide, deadline) {
                Err(Error::TxnConflict(_))
                    if attempt < TXN_ATTEMPTS_MAX && Instant::now() < deadline =>
                {
                    std::thread::sleep(conflict_backoff(attempt));
                }
                Err(Error::TxnConflict(_)) => {
                    let waited_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                    return Err(waited_since_received(Error::Busy { waited_ms }));
                }
                other => return other,
            }
        }
    }

    fn write_once(
        &self,
        call: &Call,
        decide: &dyn Fn(&dyn ReadTxn) -> Result<Plan>,
        deadline: Instant,
    ) -> Result<Outcome> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(Error::Poisoned);
        }
        if let Some(batched) = self.write_in_batch(call, &decide) {
            return batched;
        }
        // The planted bug: the compare reads a snapshot taken before the write transaction.
        #[cfg(feature = "bugdrill")]
        let early = if crate::kernel::drill::is(crate::kernel::drill::Drill::CasSeparateRead) {
            Some(decide(&*self.storage.begin_read()?)?)
        } else {
            None
        };
        self.current()?;
        let mut txn = self.write_txn(deadline)?;
        let head = read_head(&*txn)?;
        // The planted bug: the writer neither checks the anchors nor respects them after commit.
        #[cfg(feature = "bugdrill")]
        let ignore_anchor = crate::kernel::drill::is(crate::kernel::drill::Drill::AnchorIgnored);
        #[cfg(not(feature = "bugdrill"))]
        let ignore_anchor = false;
        if !ignore_anchor {
            let anchors = self.read_anchors();
            self.anchor_gate(&*txn, &head, anchors)?;
            // A store's first write anchors seq 0 before it commits, when its creator was killed
            // before doing so: else a first writer killed between its commit and its anchor
            // write leaves events with no anchor, which refuses every write. An empty log hides
            // nothing a rollback could take back, so this anchors no more than creation would.
            // Best effort, and not counted: the move after the commit retries and counts.
            // The anchor lock may be held by a creator writing that very anchor (or killed
            // doing so: the kernel drops its lock), so this waits for it, briefly.
            if head.seq == 0 {
                let store_id = self.store_id;
                let genesis = |current: Option<&str>| anchor::advance(current, &store_id, &head);
                for _ in 0..GENESIS_ANCHOR_TRIES {
                    match self.storage.update_anchors(&store_id, &mut |c| genesis(c)) {
                        Ok(false) => std::thread::sleep(GENESIS_ANCHOR_PAUSE),
                        Ok(true) | Err(_) => break,
                    }
                }
            }
        }
        // A call that does not pin its time is timed by the store's clock, read under the write
        // lock (a database server's: every host agrees; the host's on redb): event times follow
        // log order.
        let now_ms = call.now_in(&*txn);
        #[cfg(feature = "bugdrill")]
        let mut early = early;
        #[cfg(feature = "bugdrill")]
        let decide = |txn: &dyn ReadTxn| match early.take() {
            Some(plan) => Ok(plan),
            None => decide(txn),
        };
        let outcome =
            self.run_call(&mut *txn, head, call, now_ms, decide).map_err(|failed| failed.error)?;
        if outcome.appended > 0 {
            txn.put_meta(META_HEAD, &encode_head(&outcome.head))?;
            #[cfg(feature = "bugdrill")]
            crate::kernel::drill::before_commit(&outcome);
            match self.storage.check_in_place().and_then(|()| txn.commit()) {
                // The server refused the commit for a conflict: nothing was written, run again.
                Err(err @ Error::TxnConflict(_)) => return Err(err),
                Err(err) => {
                    self.poisoned.store(true, Ordering::SeqCst);
                    return Err(err);
                }
                Ok(()) => {}
            }
            self.committed.store(true, Ordering::SeqCst);
            self.move_anchors(&outcome.head, ignore_anchor);
        }
        Ok(outcome)
    }

    /// The body of one call inside a write transaction whose head is `head` (per call, or one
    /// call of a batch): replay an idempotent repeat, or decide, encode every event (so a call
    /// whose events break a limit fails before it appends anything), append and project them.
    /// The head in the metadata is the caller's to move. A failure says whether the transaction
    /// was touched: a batch whose transaction a failed call touched must not commit.
    ///
    /// The call runs with the transaction's tables held open ([`WriteTxn::with_tables`]).
    pub(crate) fn run_call(
        &self,
        txn: &mut dyn WriteTxn,
        head: Head,
        call: &Call,
        now_ms: u64,
        decide: impl FnOnce(&dyn ReadTxn) -> Result<Plan>,
    ) -> std::result::Result<Outcome, Failed> {
        let mut decide = Some(decide);
        let mut ran = None;
        let opened = txn.with_tables(&mut |tables| {
            if let Some(decide) = decide.take() {
                ran = Some(self.run_call_on(tables, head, call, now_ms, decide));
            }
            Ok(())
        });
        match (ran, opened) {
            (Some(ran), _) => ran,
            (None, Err(error)) => Err(Failed { error, touched: false }),
            (None, Ok(())) => Err(Failed {
                error: Error::Invalid("the store ran no call in its tables' scope".into()),
                touched: false,
            }),
        }
    }

    /// [`Kernel::run_call`] on a transaction whose tables are open.
    fn run_call_on(
        &self,
        txn: &mut dyn WriteTxn,
        head: Head,
        call: &Call,
        now_ms: u64,
        decide: impl FnOnce(&dyn ReadTxn) -> Result<Plan>,
    ) -> std::result::Result<Outcome, Failed> {
        let untouched = |error: Error| Failed { error, touched: false };
        validate_caller(call).map_err(untouched)?;
        if let Some(outcome) = self.replay_idempotent(&*txn, call, now_ms).map_err(untouched)? {
            return Ok(outcome);
        }
        let plan = decide(&*txn).map_err(untouched)?;
        let mut request = self.request_of(call, &plan);
        let scoped = plan.events.iter().map(|body| (call.scope.as_str(), body));
        let scoped = scoped.chain(plan.scoped_events.iter().map(|(s, body)| (s.as_str(), body)));
        let mut encoded = Vec::new();
        let mut next = head;
        for (scope, body) in scoped {
            validate_scope(scope).map_err(|e| untouched(e.into()))?;
            let event = self.encode_one(next, Stamp { call, now_ms }, scope, body, request.take());
            let event = event.map_err(untouched)?;
            next = Head { seq: event.0.seq, hash: event.0.hash };
            encoded.push(event);
        }
        let appended = encoded.len() as u64;
        let touched = |error: Error| Failed { error, touched: true };
        // One overlay for the call: a row its events share (a project's counters and index
        // rows, for an import of thousands of comments) is read once and written once.
        let mut overlay = Overlay::default();
        for (event, record) in encoded {
            txn.append_event(event.seq, &record).map_err(touched)?;
            self.project_into(&*txn, &mut overlay, &event).map_err(touched)?;
        }
        write_overlay(txn, &overlay).map_err(touched)?;
        if appended > 0 {
            let bodies = plan.events.iter().chain(plan.scoped_events.iter().map(|e| &e.1));
            counts::add(&mut *txn, bodies).map_err(touched)?;
        }
        Ok(Outcome {
            result: plan.result,
            refusal: plan.refusal,
            head: next,
            appended,
            replayed: false,
            mirror: None,
        })
    }

    /// The request a keyed call's first event carries: its fingerprint, and its result fields
    /// when they fit [`STORED_RESULT_BYTES_MAX`].
    fn request_of(&self, call: &Call, plan: &Plan) -> Option<Request> {
        let fingerprint = call.fingerprint.as_ref().filter(|_| call.idem_key.is_some())?;
        let result = serde_json::to_string(&plan.result)
            .ok()
            .filter(|text| text.len() <= STORED_RESULT_BYTES_MAX);
        Some(Request::new(fingerprint.verb.clone(), fingerprint.digest, result))
    }

    /// An answer decided on a read snapshot, for a call that turned out to append nothing.
    pub(crate) fn answer_read(&self, txn: &dyn ReadTxn, plan: Plan) -> Result<Outcome> {
        let head = read_head(txn)?;
        Ok(Outcome {
            result: plan.result,
            refusal: plan.refusal,
            head,
            appended: 0,
            replayed: false,
            mirror: None,
        })
    }

    /// Moves the anchors forward after a commit. Failure is not the call's error (the commit
    /// stands and the anchor may lag, it must only never lead): it is one warning line and one
    /// more in the store's count of failed anchor writes (`stats`).
    pub(crate) fn move_anchors(&self, head: &Head, ignore_anchor: bool) {
        let store_id = self.store_id;
        let moved = self.storage.update_anchors(&store_id, &mut |current| match ignore_anchor {
            true => Some(format::format_anchor(&store_id, head)),
            false => anchor::advance(current, &store_id, head),
        });
        if let Err(err) = moved {
            let line = format!(
                "warning: the head anchor was not moved to seq {} ({}): verify will see it lag",
                head.seq,
                error_chain(&err)
            );
            self.warn(line);
            let _ = self.count_anchor_failure();
        }
    }

    /// Writes a missing anchor at `head` (`verify --accept-missing-anchor`); `false`, with a
    /// warning, when it could not.
    pub(crate) fn re_anchor(&self, head: &Head) -> bool {
        let store_id = self.store_id;
        let moved = self
            .storage
            .update_anchors(&store_id, &mut |current| anchor::advance(current, &store_id, head));
        match moved {
            Ok(true) => true,
            Ok(false) => {
                self.warn("warning: another writer held the anchor lock; run verify again".into());
                false
            }
            Err(err) => {
                self.warn(format!("warning: the anchor was not written ({})", error_chain(&err)));
                false
            }
        }
    }

    /// Hands warnings to `sink` from now on, as they happen (only the first sink is kept).
    pub(crate) fn set_warning_sink(&self, sink: WarningSink) {
        let _ = self.warning_sink.set(sink);
    }

    /// Hands a warning line to the sink; without one the line is dropped (the failure it tells
    /// of is also counted by `stats`).
    fn warn(&self, line: String) {
        if let Some(sink) = self.warning_sink.get() {
            sink(&line);
        }
    }

    /// Adds one to the store's count of anchor writes that failed (a metadata-only commit).
    fn count_anchor_failure(&self) -> Result<()> {
        let mut txn = self.begin_write()?;
        let count = anchor_write_failures(&*txn)?.saturating_add(1);
        txn.put_meta(META_ANCHOR_WRITE_FAILURES, &count.to_be_bytes())?;
        txn.commit()
    }

    /// Encodes the event that follows `head`, checked against [`EVENT_BYTES_MAX`].
    pub(super) fn encode_one(
        &self,
        head: Head,
        stamp: Stamp<'_>,
        scope: &str,
        body: &Body,
        request: Option<Request>,
    ) -> Result<(Event, Vec<u8>)> {
        let seq = head.seq + 1;
        let kept = request.as_ref().and_then(|r| r.result.as_ref()).map_or(0, String::len);
        let content = EventContent {
            at_ms: stamp.now_ms,
            actor: stamp.call.actor.clone(),
            scope: scope.to_owned(),
            idem_key: stamp.call.idem_key.clone(),
            body: body.clone(),
            request,
        };
        let (record, hash) = format::encode_event(seq, &head.hash, &content);
        // A kept result is bounded on its own; the event limit is for what the event says.
        if record.len().saturating_sub(kept) > EVENT_BYTES_MAX {
            let len = record.len().saturating_sub(kept);
            return Err(Error::EventTooLarge { len, max: EVENT_BYTES_MAX });
        }
        let event = Event { seq, prev: head.hash, hash, content };
        assert_eq!(event.seq, head.seq + 1, "event seq must follow the head");
        assert_eq!(event.prev, head.hash, "event prev must be the head hash");
        Ok((event, record))
    }

    /// Applies one event to the stored views through an overlay of the rows it touches.
    pub(crate) fn project_live(&self, txn: &mut dyn WriteTxn, event: &Event) -> Result<()> {
        let mut overlay = Overlay::default();
        self.project_into(&*txn, &mut overlay, event)?;
        write_overlay(txn, &overlay)
    }

    /// Applies one event to the rows `overlay` holds, reading from the store the rows it names
    /// that the overlay does not hold yet; nothing is written until [`write_overlay`].
    pub(crate) fn project_into(
        &self,
        txn: &dyn ReadTxn,
        overlay: &mut Overlay,
        event: &Event,
    ) -> Result<()> {
        overlay.next_event();
        preload_rows(txn, overlay, project::touched_keys(self.table, event))?;
        let derived = project::derived_keys(self.table, event, overlay);
        preload_rows(txn, overlay, derived)?;
        project::apply(self.table, overlay, event);
        Ok(())
    }

    /// The answer to a repeat of a keyed call: the first call's result, replayed, when the key
    /// is bound to this very request; a refusal when it is bound to another; `None` for a key
    /// never used in this scope, or one whose binding expired (`IDEM_KEY_TTL_MS`).
    fn replay_idempotent(
        &self,
        txn: &dyn ReadTxn,
        call: &Call,
        now_ms: u64,
    ) -> Result<Option<Outcome>> {
        let Some(idem) = &call.idem_key else {
            return Ok(None);
        };
        let key = project::idem_key(&call.scope, idem);
        let Some(ViewRow::Idem { first_seq, last_seq, at_ms }) = read_row(txn, &key)? else {
            return Ok(None);
        };
        if project::idem_expired(at_ms, now_ms) {
            return Ok(None);
        }
        let mut events = Vec::new();
        txn.events(first_seq, last_seq, &mut |seq, bytes| {
            let event = format::decode_event(bytes)
                .map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
            events.push(event);
            Ok(true)
        })?;
        let Some(last) = events.last() else {
            return Err(Error::Corrupt(format!("idempotency row {key:?} names no event")));
        };
        let head = Head { seq: last.seq, hash: last.hash };
        let first = events.first().and_then(|e| e.content.request.as_ref());
        if let (Some(first), Some(now)) = (first, &call.fingerprint) {
            if first.digest() != now.digest {
                return Err(Error::IdemKeyReused { key: idem.clone(), verb: first.verb.clone() });
            }
        }
        let kept = first
            .and_then(|r| r.result.as_deref())
            .and_then(|text| serde_json::from_str::<serde_json::Map<_, _>>(text).ok());
        let result = match kept {
            Some(result) => result,
            None => {
                let bodies: Vec<Body> = events.into_iter().map(|e| e.content.body).collect();
                project::render_call(self.table, &bodies)
            }
        };
        Ok(Some(Outcome { result, refusal: None, head, appended: 0, replayed: true, mirror: None }))
    }
}

/// Whether `head` is the head a restore, backup or copy built the store at
/// ([`format::META_BUILT_HEAD`]): nothing was committed since, so a missing anchor is that
/// build's own, cut between naming the store and anchoring it, and the next commit writes it.
///
/// # Errors
/// Store errors.
pub(crate) fn built_at(txn: &dyn ReadTxn, head: &Head) -> Result<bool> {
    let built = txn.meta(format::META_BUILT_HEAD)?;
    Ok(built.is_some_and(|bytes| bytes == format::encode_head(head)))
}

/// Writes the rows `overlay`'s events changed, in one visit of the views table.
fn write_overlay(txn: &mut dyn WriteTxn, overlay: &Overlay) -> Result<()> {
    let changes: Vec<(Vec<u8>, Option<Vec<u8>>)> = overlay
        .changes()
        .map(|(key, row)| {
            let key_bytes = encode_view_key(key);
            let row = row.map(|row| encode_view_row(&key_bytes, row));
            (key_bytes, row)
        })
        .collect();
    txn.write_views(&changes)
}

/// Who and when, for the events of one call: the call, and the time its events carry (the store
/// server's clock when it has one, else the call's).
#[derive(Clone, Copy)]
pub(super) struct Stamp<'a> {
    pub(super) call: &'a Call,
    pub(super) now_ms: u64,
}

/// The pause before attempt `attempt + 1` of a transaction aborted for a conflict: doubling from
/// the lock backoff's floor to [`CONFLICT_BACKOFF_US_MAX`], so that conflicting writers spread
/// out.
fn conflict_backoff(attempt: u32) -> Duration {
    let us = LOCK_BACKOFF_US_MIN.saturating_mul(1 << attempt.min(16)).min(CONFLICT_BACKOFF_US_MAX);
    Duration::from_micros(us)
}

/// An error with its causes, on one line.
fn error_chain(err: &Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The store's count of anchor writes that failed.
///
/// # Errors
/// [`Error::Corrupt`] for a count that is not 8 bytes; store errors.
pub(crate) fn anchor_write_failures(txn: &dyn ReadTxn) -> Result<u64> {
    match txn.meta(META_ANCHOR_WRITE_FAILURES)? {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
            .map(u64::from_be_bytes)
            .map_err(|_| Error::Corrupt("the anchor write failure count is not 8 bytes".into())),
    }
}

/// Checks a call's scope, idempotency key and actor ids.
///
/// # Errors
/// [`Error::Invalid`] naming the first bad id.
pub(crate) fn validate_call(call: &Call) -> Result<()> {
    validate_scope(&call.scope)?;
    validate_caller(call)
}

/// Checks a call's idempotency key and actor ids: what every event it appends carries. Every
/// call that appends passes here ([`Kernel::run_call`]), whichever domain decided it.
///
/// # Errors
/// [`Error::BadId`] naming the first bad id.
fn validate_caller(call: &Call) -> Result<()> {
    if let Some(key) = &call.idem_key {
        validate_id("idempotency key", key)?;
    }
    let actor = &call.actor;
    for (what, field) in
        [("session", &actor.session), ("hook", &actor.hook), ("agent", &actor.agent)]
    {
        if let Some(value) = field {
            validate_id(what, value)?;
        }
    }
    Ok(())
}

/// The metadata a new store starts with: format version, store id and the genesis head.
pub(crate) fn initial_meta(store_id: &[u8; STORE_ID_BYTES]) -> Vec<(&'static str, Vec<u8>)> {
    let head = encode_head(&Head { seq: 0, hash: genesis_hash(store_id) });
    vec![
        (META_FORMAT, FORMAT_VERSION.to_be_bytes().to_vec()),
        (META_STORE_ID, store_id.to_vec()),
        (META_HEAD, head.to_vec()),
        (META_DOMAIN_EVENTS, counts::encode(&[0; hookstate_schema::BODY_VARIANTS])),
    ]
}

/// What a failed read of the format version says: a store that cannot answer now (a
/// PostgreSQL server restarting, a lock held) is that error, exit 4 or 6, never "not a store";
/// any other failure means the tables are not hookstate's.
fn unreadable_identity(err: Error, not_ours: impl Fn(&str) -> Error) -> Error {
    match err {
        Error::StoreIo(_) | Error::Busy { .. } | Error::TxnConflict(_) => err,
        _ => not_ours("no hookstate metadata"),
    }
}

fn read_identity(storage: &dyn Storage) -> Result<([u8; STORE_ID_BYTES], u16)> {
    let txn = storage.begin_read()?;
    let path = storage.path();
    let not_ours = |why: &str| Error::NotAStore { path: path.clone(), why: why.into() };
    let version = txn.meta(META_FORMAT).map_err(|e| unreadable_identity(e, not_ours))?;
    let version = version.ok_or_else(|| not_ours("no format version"))?;
    let version: [u8; 2] = version.as_slice().try_into().map_err(|_| not_ours("bad format"))?;
    let found = u16::from_be_bytes(version);
    if found > FORMAT_VERSION {
        return Err(Error::FormatTooNew { found, supported: FORMAT_VERSION });
    }
    if found < FORMAT_VERSION_UPGRADABLE {
        return Err(not_ours("format version 0"));
    }
    let id = txn.meta(META_STORE_ID)?.ok_or_else(|| not_ours("no store id"))?;
    let id = id.as_slice().try_into().map_err(|_| not_ours("bad store id"))?;
    txn.check_tables()?;
    Ok((id, found))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A restarting server's error while the identity is read stays an IO error (exit 6), where
    /// it was once reported as "not a hookstate store" (exit 5, as if the store were damaged).
    #[test]
    fn a_store_that_cannot_answer_is_not_called_foreign() {
        let not_ours = |why: &str| Error::NotAStore { path: PathBuf::from("s"), why: why.into() };
        let io = Error::StoreIo(Box::new(std::io::Error::other("terminating connection")));
        assert!(matches!(unreadable_identity(io, not_ours), Error::StoreIo(_)));
        let busy = Error::Busy { waited_ms: 5 };
        assert!(matches!(unreadable_identity(busy, not_ours), Error::Busy { .. }));
        let missing = Error::Store(Box::new(std::io::Error::other("no table hookstate_meta")));
        assert!(matches!(unreadable_identity(missing, not_ours), Error::NotAStore { .. }));
    }

    /// Inside this thread's batch a read is not told about the anchors again (the batch checked
    /// them when it began, and nothing else commits while it holds the write); outside one, a
    /// missing anchor is what it is told.
    #[test]
    fn inside_a_batch_the_anchors_are_not_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let engine = crate::Engine::open(&path, crate::OpenOptions::default()).unwrap();
        let call = crate::Call::at("t", 1_000);
        let put = crate::Command::KvPut {
            key: "k".into(),
            value: "1".into(),
            expect: crate::Expect::Any,
        };
        engine.execute(&call, &put).unwrap();
        let kernel = engine.kernel();
        assert!(kernel.begin_batch().unwrap(), "a store file holds a batch");
        std::fs::remove_file(kernel.storage().anchor_path()).unwrap();
        assert!(kernel.anchor_note().unwrap().is_none(), "inside the batch");
        kernel.commit_batch().unwrap();
        let note = kernel.anchor_note().unwrap();
        assert!(matches!(note, Some(Error::AnchorMissing { .. })), "{note:?}");
    }
}
