//! The write path every mutation of every domain runs, as one transaction: replay an idempotent
//! repeat, or decide a [`Plan`] on the rows the decision reads, append its events, project them
//! through the engine's table, move the head, commit, and move the anchor forward.
//!
//! [`Kernel`] is what domains stand on: it holds the storage (behind the `Storage` trait), the
//! projection table and the store's identity. Does not know any domain or any backend.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hookstate_schema::format::{
    self, encode_head, encode_view_key, encode_view_row, genesis_hash, Head, FORMAT_VERSION,
    META_FORMAT, META_HEAD, META_STORE_ID, STORE_ID_BYTES,
};
use hookstate_schema::{validate_id, validate_scope, Body, Event, EventContent};

use crate::kernel::call::{Call, Outcome, Plan};
use crate::kernel::error::{Error, Result};
use crate::kernel::limits::EVENT_BYTES_MAX;
use crate::kernel::project::{self, Table};
use crate::kernel::storage::{ReadTxn, Storage, WriteTxn};
use crate::kernel::view::{read_head, read_row, Overlay};
use hookstate_schema::ViewRow;

/// An open store as the domains see it: transactions, the write path and the projections.
pub(crate) struct Kernel {
    storage: Box<dyn Storage>,
    table: &'static Table,
    store_id: [u8; STORE_ID_BYTES],
    wait: Duration,
    poisoned: AtomicBool,
}

impl Kernel {
    /// A kernel over `storage`, checking that it holds a hookstate store this build can read.
    ///
    /// # Errors
    /// [`Error::NotAStore`], [`Error::FormatTooNew`], store errors.
    pub(crate) fn new(
        storage: Box<dyn Storage>,
        table: &'static Table,
        wait: Duration,
    ) -> Result<Kernel> {
        let store_id = read_identity(&*storage)?;
        Ok(Kernel { storage, table, store_id, wait, poisoned: AtomicBool::new(false) })
    }

    /// The storage behind this kernel.
    pub(crate) fn storage(&self) -> &dyn Storage {
        &*self.storage
    }

    /// The projection table.
    pub(crate) fn table(&self) -> &'static Table {
        self.table
    }

    /// The store's identity (its genesis is derived from it).
    pub(crate) fn store_id(&self) -> &[u8; STORE_ID_BYTES] {
        &self.store_id
    }

    /// The genesis hash of this store (the `prev` of seq 1).
    pub(crate) fn genesis(&self) -> [u8; 32] {
        genesis_hash(&self.store_id)
    }

    /// The bounded wait this store was opened with.
    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    /// The store's printable location.
    pub(crate) fn path(&self) -> PathBuf {
        self.storage.path()
    }

    /// Opens a read snapshot.
    pub(crate) fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        self.storage.begin_read()
    }

    /// Takes the write transaction, waiting at most the store's wait.
    pub(crate) fn begin_write(&self) -> Result<Box<dyn WriteTxn + '_>> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(Error::Poisoned);
        }
        self.storage.begin_write(Instant::now() + self.wait)
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
    /// head and commit. The caller validated its input before.
    pub(crate) fn write(
        &self,
        call: &Call,
        decide: impl Fn(&dyn ReadTxn) -> Result<Plan>,
    ) -> Result<Outcome> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(Error::Poisoned);
        }
        // The planted bug: the compare reads a snapshot taken before the write transaction.
        #[cfg(feature = "bugdrill")]
        let early = if crate::kernel::drill::is(crate::kernel::drill::Drill::CasSeparateRead) {
            Some(decide(&*self.storage.begin_read()?)?)
        } else {
            None
        };
        let mut txn = self.storage.begin_write(Instant::now() + self.wait)?;
        if let Some(outcome) = self.replay_idempotent(&*txn, call)? {
            return Ok(outcome);
        }
        #[cfg(feature = "bugdrill")]
        let plan = match early {
            Some(plan) => plan,
            None => decide(&*txn)?,
        };
        #[cfg(not(feature = "bugdrill"))]
        let plan = decide(&*txn)?;
        let mut head = read_head(&*txn)?;
        for body in &plan.events {
            head = self.append_one(&mut *txn, head, call, &call.scope, body)?;
        }
        for (scope, body) in &plan.scoped_events {
            validate_scope(scope)?;
            head = self.append_one(&mut *txn, head, call, scope, body)?;
        }
        let appended = (plan.events.len() + plan.scoped_events.len()) as u64;
        let outcome = Outcome {
            result: plan.result,
            refusal: plan.refusal,
            head,
            appended,
            replayed: false,
            mirror: None,
        };
        if appended > 0 {
            txn.put_meta(META_HEAD, &encode_head(&head))?;
            #[cfg(feature = "bugdrill")]
            crate::kernel::drill::before_commit(&outcome);
            if let Err(err) = txn.commit() {
                self.poisoned.store(true, Ordering::SeqCst);
                return Err(err);
            }
            self.write_anchor(&head);
        }
        Ok(outcome)
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

    /// Moves the anchor forward when it is behind. Failure is not an error: the anchor may lag
    /// the log (verify reports it), it must only never lead.
    fn write_anchor(&self, head: &Head) {
        let current = self.storage.read_anchor().ok().flatten();
        let behind = current
            .and_then(|text| format::parse_anchor(&text).ok())
            .is_none_or(|(id, anchored)| id != self.store_id || anchored.seq < head.seq);
        if behind {
            let _ = self.storage.write_anchor(&format::format_anchor(&self.store_id, head));
        }
    }

    fn append_one(
        &self,
        txn: &mut dyn WriteTxn,
        head: Head,
        call: &Call,
        scope: &str,
        body: &Body,
    ) -> Result<Head> {
        let seq = head.seq + 1;
        let content = EventContent {
            at_ms: call.now_ms,
            actor: call.actor.clone(),
            scope: scope.to_owned(),
            idem_key: call.idem_key.clone(),
            body: body.clone(),
        };
        let (record, hash) = format::encode_event(seq, &head.hash, &content);
        if record.len() > EVENT_BYTES_MAX {
            return Err(Error::EventTooLarge { len: record.len(), max: EVENT_BYTES_MAX });
        }
        txn.append_event(seq, &record)?;
        let event = Event { seq, prev: head.hash, hash, content };
        assert_eq!(event.seq, head.seq + 1, "event seq must follow the head");
        assert_eq!(event.prev, head.hash, "event prev must be the head hash");
        self.project_live(txn, &event)?;
        Ok(Head { seq, hash })
    }

    /// Applies one event to the stored views through an overlay of the rows it touches.
    pub(crate) fn project_live(&self, txn: &mut dyn WriteTxn, event: &Event) -> Result<()> {
        let mut overlay = Overlay::default();
        for key in project::touched_keys(self.table, event) {
            if !overlay.has(&key) {
                let row = read_row(txn, &key)?;
                overlay.preload(key, row);
            }
        }
        project::apply(self.table, &mut overlay, event);
        for (key, row) in overlay.changes() {
            let key_bytes = encode_view_key(key);
            match row {
                Some(row) => txn.put_view(&key_bytes, &encode_view_row(row))?,
                None => txn.delete_view(&key_bytes)?,
            }
        }
        Ok(())
    }

    fn replay_idempotent(&self, txn: &dyn ReadTxn, call: &Call) -> Result<Option<Outcome>> {
        let Some(idem) = &call.idem_key else {
            return Ok(None);
        };
        let key = project::idem_key(&call.scope, idem);
        let Some(ViewRow::Idem { first_seq, last_seq }) = read_row(txn, &key)? else {
            return Ok(None);
        };
        let mut bodies = Vec::new();
        let mut head = Head { seq: 0, hash: [0; 32] };
        txn.events(first_seq, last_seq, &mut |seq, bytes| {
            let event = format::decode_event(bytes)
                .map_err(|e| Error::ChainBroken { seq, why: e.to_string() })?;
            bodies.push(event.content.body);
            head = Head { seq: event.seq, hash: event.hash };
            Ok(true)
        })?;
        let result = project::render_call(self.table, &bodies);
        Ok(Some(Outcome { result, refusal: None, head, appended: 0, replayed: true, mirror: None }))
    }
}

/// Checks a call's scope, idempotency key and actor ids.
///
/// # Errors
/// [`Error::Invalid`] naming the first bad id.
pub(crate) fn validate_call(call: &Call) -> Result<()> {
    validate_scope(&call.scope)?;
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
    ]
}

fn read_identity(storage: &dyn Storage) -> Result<[u8; STORE_ID_BYTES]> {
    let txn = storage.begin_read()?;
    let path = storage.path();
    let not_ours = |why: &str| Error::NotAStore { path: path.clone(), why: why.into() };
    let version = txn.meta(META_FORMAT).map_err(|_| not_ours("no hookstate metadata"))?;
    let version = version.ok_or_else(|| not_ours("no format version"))?;
    let version: [u8; 2] = version.as_slice().try_into().map_err(|_| not_ours("bad format"))?;
    let found = u16::from_be_bytes(version);
    if found > FORMAT_VERSION {
        return Err(Error::FormatTooNew { found, supported: FORMAT_VERSION });
    }
    let id = txn.meta(META_STORE_ID)?.ok_or_else(|| not_ours("no store id"))?;
    id.as_slice().try_into().map_err(|_| not_ours("bad store id"))
}
