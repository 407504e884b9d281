//! `Engine`: opens or creates a store and runs every mutation as one write transaction:
//! read the views it needs, decide, append, project, move the head, commit.
//!
//! The caller acknowledges only after [`Engine::execute`] returns. Does not print or exit.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hookstate_schema::format::{
    self, decode_head, decode_view_row, encode_head, encode_view_key, encode_view_row,
    genesis_hash, Head, FORMAT_VERSION, META_FORMAT, META_HEAD, META_STORE_ID, STORE_ID_BYTES,
};
use hookstate_schema::{
    validate_id, validate_scope, Actor, Body, Event, EventContent, Item, QueueMeta, ViewKey,
    ViewRow,
};
use serde_json::{Map, Value};

use crate::core::{self, Claimer, Command, Decision, Refusal};
use crate::error::{Error, Result};
use crate::fsio::{random_bytes, StoreDir};
use crate::limits::{
    APPEND_EVENT_COUNT_MAX, DELIVERIES_MAX, EVENT_BYTES_MAX, LEASE_MS_MAX, LIST_ROWS_MAX,
    WAIT_MS_MAX,
};
use crate::project::{self, Overlay};
use crate::storage::{ReadTxn, Storage, WriteTxn};
use crate::store::RedbStore;
use crate::value::validate_json;

/// How to open a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// Longest wait for the write transaction (and for an exclusive opener), in ms.
    pub wait_ms: u64,
    /// Create the store (atomically) when the path does not exist.
    pub create: bool,
    /// Run redb's full integrity check on open (for verify, rebuild and export).
    pub check_integrity: bool,
    /// Open for reading only: the file is never written, not even its header. Writes fail.
    pub read_only: bool,
    /// With `read_only` (and not `create`): when the store is absent, answer from an empty store
    /// held in memory, initialised as a new store is, instead of failing with
    /// [`Error::NoStore`]. Nothing is created on disk; [`Engine::exists`] says which it was.
    pub absent_is_empty: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            wait_ms: crate::limits::WAIT_MS_DEFAULT,
            create: true,
            check_integrity: false,
            read_only: false,
            absent_is_empty: false,
        }
    }
}

/// Who calls, for which scope, at what time, with which idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The scope the command acts in.
    pub scope: String,
    /// Who is calling.
    pub actor: Actor,
    /// A repeated call with the same key returns the first call's result and appends nothing.
    pub idem_key: Option<String>,
    /// Now, in UTC ms (injected so tests control time).
    pub now_ms: u64,
}

/// The answer to a command.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Result fields.
    pub result: Map<String, Value>,
    /// Set when the answer is a definite "no".
    pub refusal: Option<Refusal>,
    /// The head after the call.
    pub head: Head,
    /// Events this call appended (0 for a refusal or a no-op).
    pub appended: u64,
    /// Whether this is the replayed result of an earlier call with the same idempotency key.
    pub replayed: bool,
}

impl Outcome {
    /// The one JSON object the CLI prints: `ok`, the result fields, and `seq`/`hash` of the last
    /// event when the call appended or replayed events.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("ok".into(), Value::Bool(self.refusal.is_none()));
        if let Some(refusal) = &self.refusal {
            out.insert("refused".into(), Value::String(refusal.reason.into()));
            out.extend(refusal.details.clone());
        }
        out.extend(self.result.clone());
        if self.appended > 0 || self.replayed {
            out.insert("seq".into(), Value::from(self.head.seq));
            out.insert("hash".into(), Value::String(format::to_hex(&self.head.hash)));
        }
        if self.replayed {
            out.insert("replayed".into(), Value::Bool(true));
        }
        Value::Object(out)
    }
}

/// What one mutation wants done: the events to append (in order), the caller's result fields, and
/// a refusal when the answer is "no". A domain's decision becomes a plan.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Plan {
    /// Events in the call's scope.
    pub(crate) events: Vec<Body>,
    /// Events in other scopes (an import spans several), appended after `events`.
    pub(crate) scoped_events: Vec<(String, Body)>,
    pub(crate) result: Map<String, Value>,
    pub(crate) refusal: Option<Refusal>,
}

impl From<Decision> for Plan {
    fn from(decision: Decision) -> Self {
        Plan {
            events: decision.events.into_iter().map(Body::Core).collect(),
            scoped_events: Vec::new(),
            result: decision.result,
            refusal: decision.refusal,
        }
    }
}

/// An open store.
pub struct Engine {
    /// The store's directory; `None` for the empty in-memory stand-in of an absent store.
    dir: Option<StoreDir>,
    path: PathBuf,
    pub(crate) store: RedbStore,
    pub(crate) store_id: [u8; STORE_ID_BYTES],
    wait: Duration,
    poisoned: Cell<bool>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Engine {
    /// Opens the store at `path`, creating it atomically first when it is absent and
    /// `options.create` is set.
    ///
    /// # Errors
    /// [`Error::NoStore`], [`Error::NotAStore`], [`Error::UnsafePath`], [`Error::FormatTooNew`],
    /// [`Error::Busy`], [`Error::Io`] and the store variants.
    ///
    /// # Examples
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let engine = hookstate_engine::Engine::open(
    ///     &dir.path().join("state.redb"),
    ///     hookstate_engine::OpenOptions::default(),
    /// ).unwrap();
    /// assert_eq!(engine.head().unwrap().seq, 0);
    /// ```
    pub fn open(path: &Path, options: OpenOptions) -> Result<Engine> {
        if options.wait_ms > WAIT_MS_MAX {
            return Err(Error::invalid(format!(
                "wait of {} ms is over the limit of {WAIT_MS_MAX} ms",
                options.wait_ms
            )));
        }
        let wait = Duration::from_millis(options.wait_ms);
        let empty_if_absent = options.absent_is_empty && options.read_only && !options.create;
        let dir = match StoreDir::open(path, options.create) {
            Err(Error::NoStore { .. }) if empty_if_absent => return Engine::empty(path, wait),
            other => other?,
        };
        let file = match dir.open_store(options.read_only)? {
            Some(file) => file,
            None if options.create => {
                create_store(&dir)?;
                dir.open_store(false)?.ok_or_else(|| Error::NoStore { path: dir.path() })?
            }
            None if empty_if_absent => return Engine::empty(&dir.path(), wait),
            None => return Err(Error::NoStore { path: dir.path() }),
        };
        let store = match options.read_only {
            true => match RedbStore::open_read_only(&file, wait)? {
                Some(store) => store,
                // The file needs a repair only a writer does: open it as one (this writes).
                None => {
                    let writable = dir
                        .open_store(false)?
                        .ok_or_else(|| Error::NoStore { path: dir.path() })?;
                    RedbStore::open(&writable, false, wait)?
                }
            },
            false => RedbStore::open(&file, options.check_integrity, wait)?,
        };
        let store_id = read_identity(&store, &dir.path())?;
        let path = dir.path();
        Ok(Engine { dir: Some(dir), path, store, store_id, wait, poisoned: Cell::new(false) })
    }

    /// The stand-in for an absent store that a read sees: an empty store in memory, initialised
    /// as [`create_store`] initialises a file (an all-zero store id: nothing is ever chained to
    /// it), which refuses writes. Creates nothing on disk.
    fn empty(path: &Path, wait: Duration) -> Result<Engine> {
        let store_id = [0; STORE_ID_BYTES];
        let head = encode_head(&Head { seq: 0, hash: genesis_hash(&store_id) });
        let store = RedbStore::empty(&initial_meta(&store_id, &head))?;
        let path = path.to_path_buf();
        Ok(Engine { dir: None, path, store, store_id, wait, poisoned: Cell::new(false) })
    }

    /// Whether the store exists on disk: `false` only for the empty stand-in that
    /// [`OpenOptions::absent_is_empty`] gives a read of an absent store.
    #[must_use]
    pub fn exists(&self) -> bool {
        self.dir.is_some()
    }

    /// The store's directory, which an absent store does not have.
    pub(crate) fn dir(&self) -> Result<&StoreDir> {
        self.dir.as_ref().ok_or_else(|| Error::NoStore { path: self.path.clone() })
    }

    /// The store file's path.
    #[must_use]
    pub fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The anchor file's path.
    #[must_use]
    pub fn anchor_path(&self) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(crate::fsio::ANCHOR_SUFFIX);
        PathBuf::from(name)
    }

    /// The genesis hash of this store (the `prev` of seq 1).
    #[must_use]
    pub fn genesis(&self) -> [u8; 32] {
        genesis_hash(&self.store_id)
    }

    /// The current head.
    ///
    /// # Errors
    /// Store and corruption errors.
    pub fn head(&self) -> Result<Head> {
        read_head(&*self.store.begin_read()?)
    }

    /// Runs one command as one write transaction and returns its outcome. The effect is durable
    /// when this returns `Ok`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input (nothing is written), [`Error::Busy`], [`Error::Poisoned`]
    /// and store errors.
    pub fn execute(&self, call: &Call, command: &Command) -> Result<Outcome> {
        let command = Engine::check(call, command)?;
        self.write(call, |txn| decide(txn, call, &command).map(Plan::from))
    }

    /// Checks a call and a command against every id rule and limit without touching a store,
    /// so a caller can refuse bad input before opening anything. Returns the command with its
    /// JSON values normalized, as [`Engine::execute`] would run it.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first broken rule.
    pub fn check(call: &Call, command: &Command) -> Result<Command> {
        validate_call(call)?;
        validate_command(command)
    }

    /// Runs one mutation of any domain as one write transaction: replay an idempotent repeat, or
    /// decide a [`Plan`] on the rows `decide` reads, append its events, project them, move the
    /// head and commit. The caller validated its input before.
    pub(crate) fn write(
        &self,
        call: &Call,
        decide: impl Fn(&dyn ReadTxn) -> Result<Plan>,
    ) -> Result<Outcome> {
        if self.poisoned.get() {
            return Err(Error::Poisoned);
        }
        // The planted bug: the compare reads a snapshot taken before the write transaction.
        #[cfg(feature = "bugdrill")]
        let early = if crate::drill::is(crate::drill::Drill::CasSeparateRead) {
            Some(decide(&*self.store.begin_read()?)?)
        } else {
            None
        };
        let mut txn = self.store.begin_write(Instant::now() + self.wait)?;
        if let Some(outcome) = replay_idempotent(&*txn, call)? {
            return Ok(outcome);
        }
        #[cfg(feature = "bugdrill")]
        let decision = match early {
            Some(decision) => decision,
            None => decide(&*txn)?,
        };
        #[cfg(not(feature = "bugdrill"))]
        let decision = decide(&*txn)?;
        let mut head = read_head(&*txn)?;
        for body in &decision.events {
            head = append_one(&mut *txn, head, call, &call.scope, body)?;
        }
        for (scope, body) in &decision.scoped_events {
            validate_scope(scope)?;
            head = append_one(&mut *txn, head, call, scope, body)?;
        }
        let appended = (decision.events.len() + decision.scoped_events.len()) as u64;
        let outcome = Outcome {
            result: decision.result,
            refusal: decision.refusal,
            head,
            appended,
            replayed: false,
        };
        if appended > 0 {
            txn.put_meta(META_HEAD, &encode_head(&head))?;
            #[cfg(feature = "bugdrill")]
            crate::drill::before_commit(&outcome);
            if let Err(err) = txn.commit() {
                self.poisoned.set(true);
                return Err(err);
            }
            self.write_anchor(&head);
        }
        Ok(outcome)
    }

    /// Moves the anchor forward when it is behind. Failure is not an error: the anchor may lag
    /// the log (verify reports it), it must only never lead.
    fn write_anchor(&self, head: &Head) {
        let Some(dir) = &self.dir else {
            return;
        };
        let current = dir.read_anchor().ok().flatten();
        let behind = current
            .and_then(|text| format::parse_anchor(&text).ok())
            .is_none_or(|(id, anchored)| id != self.store_id || anchored.seq < head.seq);
        if behind {
            let _ = dir.write_anchor(&format::format_anchor(&self.store_id, head));
        }
    }

    /// The bounded wait this engine was opened with.
    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    pub(crate) fn begin_read(&self) -> Result<Box<dyn ReadTxn + '_>> {
        self.store.begin_read()
    }

    pub(crate) fn begin_write(&self) -> Result<Box<dyn WriteTxn + '_>> {
        if self.poisoned.get() {
            return Err(Error::Poisoned);
        }
        self.store.begin_write(Instant::now() + self.wait)
    }

    pub(crate) fn poison(&self) {
        self.poisoned.set(true);
    }
}

#[cfg(feature = "testing")]
impl Engine {
    /// Opens the store on a test `backend` (an in-memory disk image), creating it there when the
    /// backend is empty and `options.create` is set; the anchor lives beside `path`, in a real
    /// directory. `read_only` is ignored. Only with the `testing` feature, for the power-loss
    /// simulator.
    ///
    /// # Errors
    /// As [`Engine::open`].
    pub fn open_with_backend(
        path: &Path,
        backend: impl crate::store::Backend,
        options: OpenOptions,
    ) -> Result<Engine> {
        let dir = StoreDir::open(path, true)?;
        let store_id = random_bytes::<STORE_ID_BYTES>()?;
        let head = encode_head(&Head { seq: 0, hash: genesis_hash(&store_id) });
        let meta = initial_meta(&store_id, &head);
        let meta = options.create.then_some(&meta[..]);
        let store = RedbStore::on_backend(backend, meta, options.check_integrity)?;
        let store_id = read_identity(&store, &dir.path())?;
        let wait = Duration::from_millis(options.wait_ms);
        let path = dir.path();
        Ok(Engine { dir: Some(dir), path, store, store_id, wait, poisoned: Cell::new(false) })
    }
}

/// The metadata a new store starts with.
fn initial_meta<'a>(store_id: &'a [u8], head: &'a [u8]) -> [(&'static str, &'a [u8]); 3] {
    const VERSION: [u8; 2] = FORMAT_VERSION.to_be_bytes();
    [(META_FORMAT, &VERSION), (META_STORE_ID, store_id), (META_HEAD, head)]
}

/// Whether a new store is made in a temporary file that is published at the store's path only
/// once it is complete and synced. Always, except under the `non-atomic-create` drill, which
/// creates the store in place.
#[must_use]
pub fn creation_is_atomic() -> bool {
    #[cfg(feature = "bugdrill")]
    if crate::drill::is(crate::drill::Drill::NonAtomicCreate) {
        return false;
    }
    true
}

fn create_store(dir: &StoreDir) -> Result<()> {
    // The planted bug: redb creates the store in place, so a crash or a concurrent opener sees a
    // half-made (or empty) store file.
    #[cfg(feature = "bugdrill")]
    if !creation_is_atomic() {
        let store_id = random_bytes::<STORE_ID_BYTES>()?;
        let head = encode_head(&Head { seq: 0, hash: genesis_hash(&store_id) });
        let file = dir.create_in_place()?;
        drop(RedbStore::create_in(file, &initial_meta(&store_id, &head))?);
        return Ok(());
    }
    let (file, temp) = dir.create_temp("create")?;
    let keep = file.try_clone().map_err(|e| Error::io("duplicate handle of", dir.path(), e));
    let created = keep.and_then(|keep| {
        let store_id = random_bytes::<STORE_ID_BYTES>()?;
        let head = encode_head(&Head { seq: 0, hash: genesis_hash(&store_id) });
        drop(RedbStore::create_in(file, &initial_meta(&store_id, &head))?);
        keep.sync_all().map_err(|e| Error::io("fsync", dir.path(), e))
    });
    match created {
        Ok(()) => dir.publish_store(&temp).map(|_| ()),
        Err(err) => {
            let _ = dir.remove(&temp);
            Err(err)
        }
    }
}

fn read_identity(store: &RedbStore, path: &Path) -> Result<[u8; STORE_ID_BYTES]> {
    let txn = store.begin_read()?;
    let not_ours = |why: &str| Error::NotAStore { path: path.to_path_buf(), why: why.into() };
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

pub(crate) fn read_head(txn: &dyn ReadTxn) -> Result<Head> {
    let bytes = txn.meta(META_HEAD)?.ok_or_else(|| Error::Corrupt("the head is missing".into()))?;
    decode_head(&bytes).map_err(|e| Error::Corrupt(e.to_string()))
}

pub(crate) fn read_row(txn: &dyn ReadTxn, key: &ViewKey) -> Result<Option<ViewRow>> {
    let Some(bytes) = txn.view(&encode_view_key(key))? else {
        return Ok(None);
    };
    decode_view_row(&bytes).map(Some).map_err(|e| Error::Corrupt(format!("view {key:?}: {e}")))
}

fn append_one(
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
        return Err(Error::invalid(format!(
            "event is {} bytes, limit is {EVENT_BYTES_MAX}",
            record.len()
        )));
    }
    txn.append_event(seq, &record)?;
    let event = Event { seq, prev: head.hash, hash, content };
    assert_eq!(event.seq, head.seq + 1, "event seq must follow the head");
    assert_eq!(event.prev, head.hash, "event prev must be the head hash");
    project_live(txn, &event)?;
    Ok(Head { seq, hash })
}

/// Applies one event to the stored views through an overlay of the rows it touches.
pub(crate) fn project_live(txn: &mut dyn WriteTxn, event: &Event) -> Result<()> {
    let mut overlay = Overlay::default();
    for key in project::touched_keys(event) {
        if !overlay.has(&key) {
            let row = read_row(txn, &key)?;
            overlay.preload(key, row);
        }
    }
    project::apply(&mut overlay, event);
    for (key, row) in overlay.changes() {
        let key_bytes = encode_view_key(key);
        match row {
            Some(row) => txn.put_view(&key_bytes, &encode_view_row(row))?,
            None => txn.delete_view(&key_bytes)?,
        }
    }
    Ok(())
}

fn replay_idempotent(txn: &dyn ReadTxn, call: &Call) -> Result<Option<Outcome>> {
    let Some(idem) = &call.idem_key else {
        return Ok(None);
    };
    let key = ViewKey::Idem { scope: call.scope.clone(), key: idem.clone() };
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
    let result = project::render_replay(&bodies);
    Ok(Some(Outcome { result, refusal: None, head, appended: 0, replayed: true }))
}

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

fn check_lease(lease_ms: u64) -> Result<()> {
    if lease_ms == 0 || lease_ms > LEASE_MS_MAX {
        return Err(Error::invalid(format!(
            "lease of {lease_ms} ms is outside 1..={LEASE_MS_MAX}"
        )));
    }
    Ok(())
}

/// Checks every id and limit of a command before anything is written; returns it with JSON
/// values normalized (trimmed).
fn validate_command(command: &Command) -> Result<Command> {
    let mut command = command.clone();
    match &mut command {
        Command::KvPut { key, value, .. } => {
            validate_id("key", key)?;
            *value = validate_json("value", value)?;
        }
        Command::QueuePush { queue, item, payload, for_session, max_deliveries } => {
            validate_id("queue", queue)?;
            validate_id("item", item)?;
            *payload = validate_json("payload", payload)?;
            if let Some(session) = for_session {
                validate_id("session", session)?;
            }
            if *max_deliveries == 0 || *max_deliveries > DELIVERIES_MAX {
                return Err(Error::invalid(format!(
                    "max deliveries {max_deliveries} is outside 1..={DELIVERIES_MAX}"
                )));
            }
        }
        Command::QueueClaim { queue, item, holder, lease_ms } => {
            validate_id("queue", queue)?;
            validate_id("holder", holder)?;
            if let Some(item) = item {
                validate_id("item", item)?;
            }
            check_lease(*lease_ms)?;
        }
        Command::QueueAck { queue, item, .. } | Command::QueueRelease { queue, item, .. } => {
            validate_id("queue", queue)?;
            validate_id("item", item)?;
        }
        Command::QueueExtend { queue, item, lease_ms, .. } => {
            validate_id("queue", queue)?;
            validate_id("item", item)?;
            check_lease(*lease_ms)?;
        }
        Command::QueueRedrive { queue, item } => {
            validate_id("queue", queue)?;
            if let Some(item) = item {
                validate_id("item", item)?;
            }
        }
        Command::CounterAdd { name, .. } => validate_id("counter", name)?,
        Command::SetAdd { set, member } => {
            validate_id("set", set)?;
            validate_id("member", member)?;
        }
        Command::ListAppend { list, row, cap } => {
            validate_id("list", list)?;
            *row = validate_json("row", row)?;
            if *cap == 0 || *cap > LIST_ROWS_MAX {
                return Err(Error::invalid(format!("cap {cap} is outside 1..={LIST_ROWS_MAX}")));
            }
        }
    }
    Ok(command)
}

pub(crate) fn queue_items(
    txn: &dyn ReadTxn,
    scope: &str,
    queue: &str,
) -> Result<Vec<(String, Item)>> {
    let mut items = Vec::new();
    txn.views_with_prefix(&format::item_prefix(scope, queue), &mut |key, row| {
        let key = format::decode_view_key(key).map_err(|e| Error::Corrupt(e.to_string()))?;
        let row = decode_view_row(row).map_err(|e| Error::Corrupt(e.to_string()))?;
        if let (ViewKey::Item { item, .. }, ViewRow::Item(data)) = (key, row) {
            items.push((item, data));
        }
        Ok(true)
    })?;
    items.sort_by_key(|(_, item)| item.pushed_seq);
    Ok(items)
}

pub(crate) fn queue_meta(txn: &dyn ReadTxn, scope: &str, queue: &str) -> Result<QueueMeta> {
    let key = ViewKey::QueueMeta { scope: scope.into(), queue: queue.into() };
    Ok(match read_row(txn, &key)? {
        Some(ViewRow::QueueMeta(meta)) => meta,
        _ => QueueMeta::default(),
    })
}

fn item_row(txn: &dyn ReadTxn, scope: &str, queue: &str, item: &str) -> Result<Option<Item>> {
    let key = ViewKey::Item { scope: scope.into(), queue: queue.into(), item: item.into() };
    Ok(match read_row(txn, &key)? {
        Some(ViewRow::Item(item)) => Some(item),
        _ => None,
    })
}

/// Reads what a command needs and decides it: the compare and the swap share this transaction.
fn decide(txn: &dyn ReadTxn, call: &Call, command: &Command) -> Result<Decision> {
    let scope = call.scope.as_str();
    let now_ms = call.now_ms;
    Ok(match command {
        Command::KvPut { key, value, expect } => {
            let rev =
                match read_row(txn, &ViewKey::Record { scope: scope.into(), key: key.clone() })? {
                    Some(ViewRow::Record { rev, .. }) => Some(rev),
                    _ => None,
                };
            core::decide_put(rev, key, value, *expect)
        }
        Command::QueuePush { queue, item, .. } => {
            let meta = queue_meta(txn, scope, queue)?;
            let live = meta.ready + meta.claimed + meta.parked;
            core::decide_push(item_row(txn, scope, queue, item)?.as_ref(), live, command)
        }
        Command::QueueClaim { queue, item, holder, lease_ms } => {
            let who = Claimer {
                holder,
                session: call.actor.session.as_deref(),
                lease_ms: *lease_ms,
                now_ms,
            };
            decide_claim(txn, scope, queue, item.as_deref(), &who)?
        }
        Command::QueueAck { queue, item, .. }
        | Command::QueueExtend { queue, item, .. }
        | Command::QueueRelease { queue, item, .. } => {
            core::decide_holder(command, item_row(txn, scope, queue, item)?.as_ref(), now_ms)
        }
        Command::QueueRedrive { queue, item } => {
            let named = match item {
                Some(id) => Some((id.as_str(), item_row(txn, scope, queue, id)?)),
                None => None,
            };
            let items = if named.is_none() { queue_items(txn, scope, queue)? } else { Vec::new() };
            let named = named.as_ref().map(|(id, row)| (*id, row.as_ref()));
            core::decide_redrive(queue, named, &items, APPEND_EVENT_COUNT_MAX)
        }
        Command::CounterAdd { name, delta } => {
            let key = ViewKey::Counter { scope: scope.into(), name: name.clone() };
            let current = match read_row(txn, &key)? {
                Some(ViewRow::Counter { value }) => value,
                _ => 0,
            };
            core::decide_counter(current, name, *delta).map_err(Error::Invalid)?
        }
        Command::SetAdd { set, member } => {
            let key = ViewKey::SetMember {
                scope: scope.into(),
                set: set.clone(),
                member: member.clone(),
            };
            core::decide_set_add(read_row(txn, &key)?.is_some(), set, member)
        }
        Command::ListAppend { list, row, cap } => core::decide_list_append(list, row, *cap),
    })
}

fn decide_claim(
    txn: &dyn ReadTxn,
    scope: &str,
    queue: &str,
    item: Option<&str>,
    who: &Claimer<'_>,
) -> Result<Decision> {
    let meta = queue_meta(txn, scope, queue)?;
    Ok(match item {
        Some(id) => core::decide_claim_item(
            queue,
            id,
            item_row(txn, scope, queue, id)?.as_ref(),
            &meta,
            who,
        ),
        None => {
            let items = queue_items(txn, scope, queue)?;
            core::decide_claim_next(queue, &items, &meta, who, APPEND_EVENT_COUNT_MAX)
        }
    })
}

/// A projection helper for rebuilds: apply one event to an in-memory view map.
pub(crate) fn project_in_memory(
    views: &mut std::collections::BTreeMap<ViewKey, ViewRow>,
    event: &Event,
) {
    project::apply(views, event);
}
