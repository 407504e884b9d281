//! `Engine`: an open store and the table of contents of what can be done with it: the core
//! primitives' commands and reads, one handle per domain, the operator's log, stats, verify and
//! rebuild, and the legacy layouts' import, export and mirror.
//!
//! Every mutation runs through the kernel's write path as one transaction; the caller
//! acknowledges only after a call returns. Does not print or exit.

use std::path::Path;

use hookstate_schema::format::{self, Head};
use hookstate_schema::Event;
use serde_json::{json, Map, Value};

use crate::alerts::layout_alerts::AlertsLayout;
use crate::alerts::layout_heartbeat::HeartbeatLayout;
use crate::alerts::project::AlertsProjection;
use crate::alerts::Alerts;
use crate::core::project::CoreProjection;
use crate::core::query::Query;
use crate::core::{self, Command};
use crate::feedback::api::Feedback;
use crate::feedback::layout::MoonshineLayout;
use crate::feedback::project::FeedbackProjection;
use crate::kernel::call::{Call, Outcome};
use crate::kernel::error::Result;
use crate::kernel::project::Table;
use crate::kernel::write::Kernel;
use crate::legacy::mirror::{self, Layout as MirrorLayout, Without};
use crate::observer::layout::ObserverLayout;
use crate::observer::project::ObserverProjection;
use crate::observer::Observer;
use crate::proposals::layout::ProposalsLayout;
use crate::proposals::project::ProposalsProjection;
use crate::proposals::Proposals;
use crate::query::{self, LogFilter};
use crate::session::layout::mirror::SessionLayout;
use crate::session::project::SessionProjection;
use crate::session::Session;
use crate::signals::layout::LoopdLayout;
use crate::signals::project::SignalsProjection;
use crate::signals::Signals;
use crate::store::{self, OpenOptions};
use hookstate_schema::feedback::FileKind;

use crate::alerts::heartbeat_rules as rules;
use crate::alerts::ladder::{parse_alert_state, render_alert_state};
use crate::alerts::layout_alerts::ALERT_STATE_FILE;
use crate::feedback::layout as moonshine;
use crate::kernel::error::Error;
use crate::observer::layout as observer;
use crate::proposals::api::parse_config_timezone;
use crate::proposals::layout as hermit;
use crate::proposals::props::{check_prop_file, prop_doc};
use crate::signals::layout as loopd;

/// The projection of each event body variant, in `Body::variant_index` order.
pub(crate) static PROJECTIONS: Table = [
    &CoreProjection,
    &SignalsProjection,
    &ObserverProjection,
    &FeedbackProjection,
    &ProposalsProjection,
    &AlertsProjection,
    &AlertsProjection,
    &SessionProjection,
];

/// A legacy layout: the files an upstream program reads and writes, for import, export and
/// `--mirror`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// loopd's plugin-store file (default `loopd.json`).
    Loopd {
        /// The file's name in the directory.
        file: String,
    },
    /// claude-management's observer state file (default `claude-management.json`).
    Observer {
        /// The file's name in the directory.
        file: String,
    },
    /// moonshine's feedback inboxes: the directory is the moonshine home, holding
    /// `<project>/.feedback/`; a call scoped `moonshine:<project>` mirrors that project, any
    /// other call every project.
    Moonshine,
    /// A claude-code-hermit state directory, whole: the proposal files, `state/alert-state.json`,
    /// the heartbeat files and the session files (what every hermit verb's `--mirror` keeps;
    /// `state/runtime.json` once, through the session layout).
    Hermit,
    /// [`Layout::Hermit`] without the proposal files: what an alerts tick keeps while one of them
    /// cannot be read (upstream freezes the pending-decision alerts and leaves those files as
    /// they are; `hookstate_engine::hermit_alert_state`).
    HermitBesideProposals,
    /// claude-code-hermit's proposal files: `state/micro-proposals.json`,
    /// `state/proposal-metrics.jsonl`, `proposals/PROP-*.md`, `state/proposals-index.json`.
    HermitProposals,
    /// claude-code-hermit's `state/alert-state.json`.
    HermitAlerts,
    /// claude-code-hermit's heartbeat files under `state/` and `sessions/NEXT-TASK.md`.
    HermitHeartbeat,
    /// claude-code-hermit's session state under a `.claude-code-hermit` directory (the mirror
    /// directory): `state/runtime.json`, `tasks/**/T-*.md`, `state/conversations.json`, the two
    /// ledgers, the markers, `sessions/SHELL.md`, the session reports and the template.
    HermitSession,
}

impl Layout {
    /// The domain layouts the mirror keeps for this layout.
    fn mirror_layouts(&self) -> Vec<Box<dyn MirrorLayout>> {
        match self {
            Layout::Loopd { file } => vec![Box::new(LoopdLayout { file: file.clone() })],
            Layout::Observer { file } => vec![Box::new(ObserverLayout { file: file.clone() })],
            Layout::Moonshine => vec![Box::new(MoonshineLayout)],
            Layout::Hermit | Layout::HermitBesideProposals => {
                // state/runtime.json's row is written by both the heartbeat and the session
                // domains; the session layout keeps the file (its merge finds the version a
                // stale writer read), so the heartbeat layout is composed without it.
                let heartbeat = Without { inner: Box::new(HeartbeatLayout), files: &[RUNTIME] };
                let mut layouts: Vec<Box<dyn MirrorLayout>> =
                    vec![Box::new(AlertsLayout), Box::new(heartbeat), Box::new(SessionLayout)];
                if *self == Layout::Hermit {
                    layouts.insert(0, Box::new(ProposalsLayout));
                }
                layouts
            }
            Layout::HermitProposals => vec![Box::new(ProposalsLayout)],
            Layout::HermitAlerts => vec![Box::new(AlertsLayout)],
            Layout::HermitHeartbeat => vec![Box::new(HeartbeatLayout)],
            Layout::HermitSession => vec![Box::new(SessionLayout)],
        }
    }
}

/// `state/runtime.json`, as the mirror names it.
const RUNTIME: &str = "state/runtime.json";

/// Where a store lives, and whether its anchors agree with its log ([`Engine::location`]).
#[derive(Debug)]
pub struct Location {
    /// The store file (or the address of a remote store).
    pub path: std::path::PathBuf,
    /// The anchor file beside it.
    pub anchor_path: std::path::PathBuf,
    /// Whether the store exists.
    pub exists: bool,
    /// The error a write would be refused with because of the anchors, if any.
    pub anchor_problem: Option<crate::kernel::error::Error>,
}

/// Checks a call and a core command against every id rule and limit without touching a store, so
/// a caller can refuse bad input before opening anything. Returns the command with its JSON
/// values normalized, as [`Engine::execute`] runs it.
///
/// # Errors
/// [`crate::Error::OutOfRange`], [`crate::Error::BadId`] and the other bad-input variants,
/// naming the first broken rule.
pub fn check(call: &Call, command: &Command) -> Result<Command> {
    core::api::check(call, command)
}

/// An open store.
pub struct Engine {
    kernel: Kernel,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("path", &self.kernel.path()).finish_non_exhaustive()
    }
}

impl Engine {
    /// The kernel under this engine, for the operator's verbs (`crate::ops`).
    pub(crate) fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The kernel, to compact the store's file (`crate::ops`).
    pub(crate) fn kernel_mut(&mut self) -> &mut Kernel {
        &mut self.kernel
    }

    /// An engine over `storage` (an as-of view built by `crate::ops`; the row-cost tests wrap a
    /// store to count its reads).
    pub(crate) fn on_storage(
        storage: Box<dyn crate::kernel::storage::Storage>,
        wait: std::time::Duration,
    ) -> Result<Engine> {
        Ok(Engine { kernel: Kernel::new(storage, &PROJECTIONS, wait)? })
    }

    /// Opens the store at `path`, creating it atomically first when it is absent and
    /// `options.create` is set.
    ///
    /// # Errors
    /// [`crate::Error::NoStore`], [`crate::Error::NotAStore`], [`crate::Error::UnsafePath`],
    /// [`crate::Error::FormatTooNew`], [`crate::Error::Busy`], [`crate::Error::Io`] and the
    /// store variants.
    ///
    /// # Examples
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = tempfile::tempdir()?;
    /// let engine = hookstate_engine::Engine::open(
    ///     &dir.path().join("state.redb"),
    ///     hookstate_engine::OpenOptions::default(),
    /// )?;
    /// assert_eq!(engine.head()?.seq, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn open(path: &Path, options: OpenOptions) -> Result<Engine> {
        let wait = options.wait()?;
        let storage = store::open(path, options)?;
        Ok(Engine { kernel: Kernel::new(storage, &PROJECTIONS, wait)? })
    }

    /// Where the store lives and what its anchors say: its path, its anchor's path, whether it
    /// exists (`false` only for the empty stand-in that [`OpenOptions::absent_is_empty`] gives a
    /// read of an absent store), and the error a write would be refused with when an anchor
    /// disagrees with the log (a log behind its anchor, an anchor of another store, an
    /// unreadable or missing anchor), so that a read can say so.
    ///
    /// # Errors
    /// Store and corruption errors of the snapshot the anchor check reads.
    pub fn location(&self) -> Result<Location> {
        let storage = self.kernel.storage();
        Ok(Location {
            path: storage.path(),
            anchor_path: storage.anchor_path(),
            exists: storage.exists(),
            anchor_problem: self.kernel.anchor_note()?,
        })
    }

    /// The current head.
    ///
    /// # Errors
    /// Store and corruption errors.
    pub fn head(&self) -> Result<Head> {
        self.kernel.head()
    }

    /// Runs one core command as one write transaction and returns its outcome. The effect is
    /// durable when this returns `Ok`.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for bad input (nothing is written), [`crate::Error::Busy`],
    /// [`crate::Error::Poisoned`] and store errors.
    pub fn execute(&self, call: &Call, command: &Command) -> Result<Outcome> {
        core::api::execute(&self.kernel, call, command)
    }

    /// Answers a core read in one snapshot.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for bad ids, corruption and store errors.
    pub fn query(&self, scope: &str, query: &Query, now_ms: u64) -> Result<Value> {
        query.check(scope)?;
        core::query::query(&self.kernel, scope, query, now_ms)
    }

    /// The events that match `filter`, in log order (at most `LOG_EVENTS_MAX`).
    ///
    /// # Errors
    /// [`crate::Error::ChainBroken`] for an undecodable record, store errors.
    pub fn log(&self, filter: &LogFilter) -> Result<Vec<Event>> {
        query::events(&self.kernel, filter)
    }

    /// Hands every later warning line to `sink` as it happens (the CLI prints them on stderr);
    /// only the first sink set is kept.
    pub fn set_warning_sink(&self, sink: Box<dyn Fn(&str) + Send + Sync>) {
        self.kernel.set_warning_sink(sink);
    }

    /// Runs `verb` as a mirrored call: under the mirror directory's lock, adopts what writers of
    /// `layout`'s files changed in `dir` since the mirror last wrote them (merged per record by
    /// the domain's rules), runs `verb`, then writes each file whose rendering changed, only over
    /// the bytes it saw. The outcome's `mirror` says what was adopted, written, kept and in
    /// conflict; a conflict leaves the store's record and never fails the call.
    ///
    /// # Errors
    /// [`crate::Error::Busy`] when another mirrored call holds `dir` past the wait;
    /// [`crate::Error::Invalid`] for a corrupt file the layout refuses whole (nothing changed);
    /// `verb`'s errors; IO and store errors.
    pub fn mirrored(
        &self,
        call: &Call,
        layout: &Layout,
        dir: &Path,
        verb: impl FnOnce(&Engine) -> Result<Outcome>,
    ) -> Result<Outcome> {
        let layouts = layout.mirror_layouts();
        let layouts: Vec<&dyn MirrorLayout> = layouts.iter().map(AsRef::as_ref).collect();
        mirror::mirrored(&self.kernel, call, &layouts, dir, || verb(self))
    }

    /// The moonshine feedback inbox.
    #[must_use]
    pub fn feedback(&self) -> Feedback<'_> {
        Feedback::new(&self.kernel)
    }

    /// claude-code-hermit's micro-proposals, proposals and their ledger.
    #[must_use]
    pub fn proposals(&self) -> Proposals<'_> {
        Proposals::new(&self.kernel)
    }

    /// claude-code-hermit's heartbeat state: the alert ladder, budget alerts, the monitor,
    /// liveness, injection alerts, the next-task ack and runtime fields.
    #[must_use]
    pub fn alerts(&self) -> Alerts<'_> {
        Alerts::new(&self.kernel)
    }

    /// loopd's PM registrations, turn signals and delivery results.
    #[must_use]
    pub fn signals(&self) -> Signals<'_> {
        Signals::new(&self.kernel)
    }

    /// claude-management's observer state.
    #[must_use]
    pub fn observer(&self) -> Observer<'_> {
        Observer::new(&self.kernel)
    }

    /// claude-code-hermit's session state: runtime.json, tasks, conversations, observations,
    /// hypotheses, the markers, SHELL.md and the session reports.
    #[must_use]
    pub fn session(&self) -> Session<'_> {
        Session::new(&self.kernel)
    }
}

/// Opens the store on a test `backend` (an in-memory disk image), creating it there when the
/// backend is empty and `options.create` is set; the anchor lives beside `path`, in a real
/// directory. `read_only` is ignored. Only with the `testing` feature, for the power-loss
/// simulator.
///
/// # Errors
/// As [`Engine::open`].
#[cfg(feature = "testing")]
pub fn open_on_backend(
    path: &Path,
    backend: impl store::Backend,
    options: OpenOptions,
) -> Result<Engine> {
    let wait = options.wait()?;
    let storage = store::open_on_backend(path, backend, options)?;
    Engine::on_storage(storage, wait)
}

/// Appends `events` (scope, body) to `engine` as they are, in one write transaction, projected as
/// every write is, and returns the new head: the bulk loader benches build large stores with. No
/// rule is checked, so the caller must append what the verbs would have appended. Only with the
/// `testing` feature.
///
/// # Errors
/// [`Error::TooMany`] past `BULK_EVENTS_MAX` events; as every write.
#[cfg(any(test, feature = "testing"))]
pub fn append_unchecked(
    engine: &Engine,
    call: &Call,
    events: &[(String, hookstate_schema::Body)],
) -> Result<Head> {
    engine.kernel.append_batch(call, events)
}

/// How a server's batch ended (`serve::writer`).
pub(crate) use crate::kernel::batch::BatchEnd;

/// Group commit, for a server's writer thread (`serve`): while this thread holds a batch, every
/// write it runs joins one transaction, committed once.
impl Engine {
    /// Opens a batch on this thread; `false` when the backend cannot hold one.
    pub(crate) fn begin_batch(&self) -> Result<bool> {
        self.kernel.begin_batch()
    }

    /// Commits (or aborts) this thread's batch.
    pub(crate) fn commit_batch(&self) -> Result<BatchEnd> {
        self.kernel.commit_batch()
    }

    /// Drops this thread's batch uncommitted.
    pub(crate) fn abort_batch(&self) -> BatchEnd {
        BatchEnd::Aborted(self.kernel.abort_batch())
    }

    /// Refuses a store file replaced or removed since this handle opened it
    /// ([`crate::kernel::storage::Storage::check_in_place`]).
    pub(crate) fn check_in_place(&self) -> Result<()> {
        self.kernel.storage().check_in_place()
    }

    /// Whether a failed commit made this handle refuse every write.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.kernel.is_poisoned()
    }
}

/// Renders an event as one JSON object for `hookstate log`: its position, time, scope, actor,
/// `body` (the result fields it stands for), `data` (every field it carries, whole, strings up
/// to [`crate::ops::LOG_FIELD_BYTES_DEFAULT`]), the request of a keyed call, and its links.
#[must_use]
pub fn event_to_json(event: &Event) -> Value {
    render_event(event, crate::ops::LOG_FIELD_BYTES_DEFAULT)
}

/// [`event_to_json`] with strings cut (and marked) at `field_bytes_max` bytes.
#[must_use]
pub fn render_event(event: &Event, field_bytes_max: usize) -> Value {
    let c = &event.content;
    let mut out = Map::new();
    out.insert("seq".into(), json!(event.seq));
    out.insert("at_ms".into(), json!(c.at_ms));
    out.insert("scope".into(), json!(c.scope));
    out.insert("domain".into(), json!(c.body.domain()));
    out.insert("kind".into(), json!(c.body.kind()));
    out.insert("actor".into(), json!({
        "session": c.actor.session, "hook": c.actor.hook, "pid": c.actor.pid, "agent": c.actor.agent,
    }));
    if let Some(idem) = &c.idem_key {
        out.insert("idem_key".into(), json!(idem));
    }
    out.insert("body".into(), Value::Object(crate::kernel::project::render(&PROJECTIONS, &c.body)));
    out.insert("data".into(), crate::ops::render::whole_body(&c.body, field_bytes_max));
    if let Some(request) = &c.request {
        out.insert("request".into(), crate::ops::render::request(request, field_bytes_max));
    }
    out.insert("prev".into(), json!(format::to_hex(&event.prev)));
    out.insert("hash".into(), json!(format::to_hex(&event.hash)));
    Value::Object(out)
}

// Every legacy file parser behind one entry point (the fuzz target `legacy_import` and its
// corpus replay run the very parser an import runs, with nothing opened or written).

/// The name the PROP-file parser is given: the import checks names apart, before reading.
const PROP_FILE_NAME: &str = "PROP-001-fuzz.md";

/// One kind of legacy file an import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegacyFile {
    /// loopd's plugin store (`loopd.json`).
    LoopdStore,
    /// The observer's state (`claude-management.json`).
    ObserverState,
    /// A moonshine comment (`.feedback/<id>.json`).
    MoonshineComment,
    /// A moonshine `control.json`, `address.json`, `heartbeat.json` or `adapter.json`.
    MoonshineFile(FileKind),
    /// hermit's `state/micro-proposals.json`.
    HermitQueue,
    /// hermit's `state/proposal-metrics.jsonl`.
    HermitLedger,
    /// hermit's `state/proposals-index.json` (with no PROP files beside it).
    HermitIndex,
    /// A hermit `proposals/PROP-*.md` (its frontmatter).
    PropFile,
    /// hermit's `config.json` (its `timezone`).
    HermitConfig,
    /// hermit's `state/alert-state.json`.
    HermitAlertState,
    /// One of hermit's heartbeat JSON files (`budget-alerts.json`, `runtime.json`, …): kept as
    /// its exact text; a verb that changes it re-renders it in the layout it found.
    HeartbeatFile,
}

impl LegacyFile {
    /// Every kind, in a fixed order (the fuzz target picks one by its first byte).
    pub const ALL: [LegacyFile; 14] = [
        LegacyFile::LoopdStore,
        LegacyFile::ObserverState,
        LegacyFile::MoonshineComment,
        LegacyFile::MoonshineFile(FileKind::Control),
        LegacyFile::MoonshineFile(FileKind::Address),
        LegacyFile::MoonshineFile(FileKind::Heartbeat),
        LegacyFile::MoonshineFile(FileKind::Adapter),
        LegacyFile::HermitQueue,
        LegacyFile::HermitLedger,
        LegacyFile::HermitIndex,
        LegacyFile::PropFile,
        LegacyFile::HermitConfig,
        LegacyFile::HermitAlertState,
        LegacyFile::HeartbeatFile,
    ];
}

/// What a legacy file parsed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyParse {
    /// Records the import turns the file into (keys, entries, lines, 1 for a single document).
    pub records: usize,
    /// The bytes an export writes back for what was parsed, where the layout has an export;
    /// `None` for files only read (the index, a PROP file's frontmatter, `config.json`).
    pub written_back: Option<Vec<u8>>,
}

/// Parses `bytes` as a legacy file of `kind`, exactly as an import does.
///
/// # Errors
/// [`Error::Invalid`] for a file the import refuses; [`Error::Corrupt`] where a parsed file does
/// not render.
pub fn parse_legacy(kind: LegacyFile, bytes: &[u8]) -> Result<LegacyParse> {
    let one = |written_back: Option<Vec<u8>>| LegacyParse { records: 1, written_back };
    match kind {
        LegacyFile::LoopdStore => {
            let parsed = loopd::parse_store(loopd::STORE_FILE_DEFAULT, bytes)?;
            let records = parsed.events.len();
            Ok(LegacyParse { records, written_back: Some(parsed.rendered.into_bytes()) })
        }
        LegacyFile::ObserverState => {
            let (state, style, _) = observer::parse_state(observer::STATE_FILE_DEFAULT, bytes)?;
            Ok(one(Some(observer::render(&state, style)?.into_bytes())))
        }
        LegacyFile::MoonshineComment => Ok(one(Some(moonshine::parse_comment_file(bytes)?))),
        LegacyFile::MoonshineFile(file) => Ok(one(Some(moonshine::parse_other_file(file, bytes)?))),
        LegacyFile::HermitQueue => {
            let queue = hermit::parse_queue(bytes)?;
            let records = queue.entries.len();
            Ok(LegacyParse {
                records,
                written_back: Some(hermit::render_queue(&queue)?.into_bytes()),
            })
        }
        LegacyFile::HermitLedger => {
            let lines = hermit::parse_ledger(bytes)?;
            let written_back = Some(hermit::render_ledger(&lines).into_bytes());
            Ok(LegacyParse { records: lines.len(), written_back })
        }
        LegacyFile::HermitIndex => hermit::parse_index(bytes, &[]).map(|_| one(None)),
        LegacyFile::PropFile => {
            check_prop_file(PROP_FILE_NAME)?;
            let text = std::str::from_utf8(bytes)
                .map_err(|_| Error::legacy(PROP_FILE_NAME, "is not UTF-8"))?;
            prop_doc(PROP_FILE_NAME, text);
            Ok(one(None))
        }
        LegacyFile::HermitConfig => parse_config_timezone(bytes).map(|_| one(None)),
        LegacyFile::HermitAlertState => {
            let state =
                parse_alert_state(bytes).map_err(|why| Error::legacy(ALERT_STATE_FILE, why))?;
            Ok(one(Some(render_alert_state(&state)?.into_bytes())))
        }
        LegacyFile::HeartbeatFile => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| Error::legacy("the heartbeat file", "is not UTF-8"))?;
            let map = rules::parse_object("the heartbeat file", text)?;
            Ok(one(Some(rules::render_object(&map, rules::layout_of(text)).into_bytes())))
        }
    }
}
