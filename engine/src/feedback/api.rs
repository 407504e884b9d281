//! The feedback domain's handle, `engine.feedback()`: each verb checks its input, then decides
//! in one write transaction over the project's rows (`rules.rs`); the listener tick and the Stop
//! hook drain every project (or one) in one call, mirrored when asked; and reads of the inbox.
//!
//! Does not touch legacy files itself; `layout.rs` and the mirror do.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use hookstate_schema::feedback::{CommentRow, FeedbackEvent, FileKind, FileRow, JsonDoc, Style};
use hookstate_schema::Body;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::hook::{anchor_matches, stop_reason, ReplyVia};
use super::input::{self, check, project_of, scope_for, ClaimAsk, DrainAsk, Input};
use super::layout::{self, Exported, ImportBatch, ImportProgress, Imported, MoonshineImport};
use super::project::{read_drain_inbox, read_inbox, COMMENT, DRAINABLE, INDEX_SCOPE, PROJECT};
use super::rules::Pass;
use super::rules::{self, Claimer, Drained, COMMENTS_MAX};
use crate::kernel::call::{fields, Call, Conflict, MirrorReport, Outcome, Plan};
use crate::kernel::compat::stamp;
use crate::kernel::doc::{read_doc, read_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::write::Kernel;
use crate::legacy::json::{self as legacy_json};
use crate::legacy::mirror;

/// The moonshine feedback inbox on an open store: `engine.feedback()`.
#[derive(Clone, Copy)]
pub struct Feedback<'a> {
    pub(super) k: &'a Kernel,
}

impl<'a> Feedback<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Feedback { k }
    }
}

/// A new comment id: `fb_<ms base36>_<6 random base36>`, the web's shape.
fn new_comment_id(now_ms: u64) -> Result<String> {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let base36 = |mut n: u64| {
        let mut out = Vec::new();
        loop {
            out.push(DIGITS[usize::try_from(n % 36).unwrap_or(0)]);
            n /= 36;
            if n == 0 {
                break;
            }
        }
        out.reverse();
        String::from_utf8_lossy(&out).into_owned()
    };
    let random = crate::kernel::fsio::random_bytes::<6>()?;
    let tail: String =
        random.iter().map(|b| char::from(DIGITS[usize::from(*b) % DIGITS.len()])).collect();
    Ok(format!("fb_{}_{tail}", base36(now_ms)))
}

fn one(event: FeedbackEvent, result: &impl Serialize) -> Plan {
    let result = serde_json::to_value(result).map(fields).unwrap_or_default();
    Plan { events: vec![Body::Feedback(event)], result, ..Plan::default() }
}

/// The claimer of a call, timed by the transaction's clock unless the call pins its time
/// ([`Call::now_in`]; on PostgreSQL a delivered comment re-surfaces after `stale_ms` by the same
/// clock on every host).
fn claimer<'c>(call: &'c Call, holder: &'c str, stale_ms: u64, txn: &dyn ReadTxn) -> Claimer<'c> {
    let now_ms = call.now_in(txn);
    Claimer { holder, session: call.actor.session.as_deref(), now_ms, stale_ms }
}

/// The holder a claim is recorded for (see [`input::holder_of`]).
fn holder(given: Option<&str>, call: &Call) -> String {
    input::holder_of(given, call, call.actor.pid.unwrap_or_else(std::process::id))
}

/// The file documents a result shows, as JSON.
fn shown(doc: &JsonDoc) -> Value {
    legacy_json::to_value(doc)
}

/// One comment with its lease, as `feedback list` and `feedback show` print it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommentView {
    /// The comment id.
    pub id: String,
    /// The record, as its legacy file holds it.
    pub record: Value,
    /// The current or last claim's token.
    pub token: u64,
    /// The current or last holder.
    pub holder: Option<String>,
    /// The current or last holder's session.
    pub holder_session: Option<String>,
}

fn comment_view(id: &str, row: &CommentRow) -> CommentView {
    CommentView {
        id: id.to_owned(),
        record: shown(&row.doc),
        token: row.token,
        holder: row.holder.clone(),
        holder_session: row.session.clone(),
    }
}

/// A project's inbox, as `feedback list` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Listing {
    /// The control mode.
    pub mode: String,
    /// The comments, oldest first.
    pub comments: Vec<CommentView>,
    /// `control.json`.
    pub control: Option<Value>,
    /// `address.json`: a pending address request.
    pub address: Option<Value>,
    /// `heartbeat.json`.
    pub heartbeat: Option<Value>,
    /// `adapter.json`.
    pub adapter: Option<Value>,
}

impl Feedback<'_> {
    /// Adds a pending comment in the web's format and returns its id.
    ///
    /// # Errors
    /// The typed input errors of [`check`]; [`Error::TooMany`] past [`COMMENTS_MAX`]; store
    /// errors.
    pub fn add(&self, call: &Call, target: &str, comment: &str) -> Result<Outcome> {
        check(call, &Input::Add { target, comment })?;
        let project = project_of(&call.scope)?.to_owned();
        let target = input::check_target(target)?;
        let id = new_comment_id(call.now_ms)?;
        let doc = JsonDoc {
            fields: vec![
                ("id".into(), legacy_json::string(&id)),
                ("ts".into(), legacy_json::string(&stamp::stamp_ms(call.now_ms))),
                ("project".into(), legacy_json::string(&project)),
                ("status".into(), legacy_json::string("pending")),
                ("target".into(), legacy_json::render(&target).trim_end().to_owned()),
                ("comment".into(), legacy_json::string(comment.trim())),
                ("reply".into(), "null".into()),
                ("deliveredAt".into(), "null".into()),
                ("addressedAt".into(), "null".into()),
            ],
            style: Style::Pretty,
        };
        self.k.write(call, |txn| {
            let count = read_docs::<serde::de::IgnoredAny>(txn, &call.scope, COMMENT)?.len();
            if count >= COMMENTS_MAX {
                let what = "comments in the project";
                return Err(Error::TooMany { what, count: count + 1, max: COMMENTS_MAX });
            }
            let event = FeedbackEvent::CommentAdded { id: id.clone(), doc: doc.clone() };
            Ok(one(event, &json!({ "id": id })))
        })
    }

    /// Claims the next eligible comment (or every one, or a named one) with a fencing token.
    ///
    /// # Errors
    /// The typed input errors of [`check`]; store errors. A named comment that is not eligible
    /// is a refusal.
    pub fn claim(&self, call: &Call, ask: &ClaimAsk) -> Result<Outcome> {
        check(call, &Input::Claim(ask))?;
        let holder = holder(ask.holder.as_deref(), call);
        self.k.write(call, |txn| {
            let who = claimer(call, &holder, ask.stale_ms, txn);
            let inbox = read_inbox(txn, &call.scope)?;
            Ok(rules::decide_claim(&inbox, &who, ask.id.as_deref(), ask.all))
        })
    }

    /// Records the reply of the holder of the current token: `addressed`.
    ///
    /// # Errors
    /// The typed input errors of [`check`]; store errors. A stale token, a dismissed, unclaimed
    /// or addressed comment is a refusal naming the holder.
    pub fn reply(&self, call: &Call, id: &str, token: u64, reply: &str) -> Result<Outcome> {
        check(call, &Input::Reply { id, reply })?;
        self.k.write(call, |txn| {
            let row = read_doc::<CommentRow>(txn, &call.scope, COMMENT, id)?;
            Ok(rules::decide_reply(id, row.as_ref(), token, reply, call.now_ms))
        })
    }

    /// Dismisses a pending or delivered comment; an addressed one keeps its reply (refusal).
    ///
    /// # Errors
    /// The typed input errors of [`check`]; store errors.
    pub fn dismiss(&self, call: &Call, id: &str) -> Result<Outcome> {
        check(call, &Input::Dismiss { id })?;
        self.k.write(call, |txn| {
            let row = read_doc::<CommentRow>(txn, &call.scope, COMMENT, id)?;
            Ok(rules::decide_dismiss(id, row.as_ref()))
        })
    }

    /// Sets the control mode, as the web's `POST /control` writes it.
    ///
    /// # Errors
    /// [`Error::NotOneOf`] for an unknown mode, [`Error::BadId`] for a bad session; store
    /// errors.
    pub fn control(&self, call: &Call, mode: &str, session: Option<&str>) -> Result<Outcome> {
        check(call, &Input::Control { mode, session })?;
        let mut fields = vec![
            ("mode".into(), legacy_json::string(mode)),
            ("updatedAt".into(), legacy_json::string(&stamp::stamp_ms(call.now_ms))),
        ];
        fields.extend(session.map(|s| ("sessionId".to_owned(), legacy_json::string(s))));
        let doc = JsonDoc { fields, style: Style::Pretty };
        let result = json!({ "control": shown(&doc) });
        self.k.write(call, |_| {
            let event = FeedbackEvent::FileWritten {
                file: FileKind::Control,
                doc: doc.clone(),
                request: 0,
            };
            Ok(one(event, &result))
        })
    }

    /// Records a one-shot address request; it overrides `paused` and `stopped` once.
    ///
    /// # Errors
    /// [`Error::BadId`] for a bad session; store errors.
    pub fn address(&self, call: &Call, session: Option<&str>) -> Result<Outcome> {
        check(call, &Input::Address { session })?;
        let mut fields =
            vec![("requestedAt".into(), legacy_json::string(&stamp::stamp_ms(call.now_ms)))];
        fields.extend(session.map(|s| ("sessionId".to_owned(), legacy_json::string(s))));
        let doc = JsonDoc { fields, style: Style::Pretty };
        self.k.write(call, |txn| {
            let request = read_inbox(txn, &call.scope)?.meta.requests + 1;
            let result = json!({ "request": request, "address": shown(&doc) });
            let file = FileKind::Address;
            Ok(one(FeedbackEvent::FileWritten { file, doc: doc.clone(), request }, &result))
        })
    }

    /// Writes the listener heartbeat (mode defaults to the control mode).
    ///
    /// # Errors
    /// [`Error::NotOneOf`] for a bad mode, [`Error::OutOfRange`] for a bad interval; store
    /// errors.
    pub fn heartbeat(&self, call: &Call, mode: Option<&str>, interval_s: u64) -> Result<Outcome> {
        check(call, &Input::Heartbeat { mode, interval_s })?;
        self.k.write(call, |txn| {
            let inbox = read_inbox(txn, &call.scope)?;
            let event = rules::heartbeat_event(&inbox, mode, call.now_ms, interval_s);
            let heartbeat = match &event {
                FeedbackEvent::FileWritten { doc, .. } => shown(doc),
                _ => Value::Null,
            };
            Ok(one(event, &json!({ "heartbeat": heartbeat })))
        })
    }

    /// One drain pass over the call's project, as the Stop hook or a listener tick does it; the
    /// result is a [`Drained`].
    ///
    /// # Errors
    /// The typed input errors of [`check`] (the call must name a project); store errors.
    pub fn drain(&self, call: &Call, ask: &DrainAsk) -> Result<Outcome> {
        check(call, &Input::Drain(ask))?;
        let project = project_of(&call.scope)?;
        let holder = holder(ask.holder.as_deref(), call);
        self.k.write(call, |txn| {
            let who = claimer(call, &holder, ask.stale_ms, txn);
            let inbox = read_drain_inbox(txn, &call.scope, who.now_ms, ask.stale_ms)?;
            Ok(rules::decide_drain(project, &inbox, ask.pass, &who, ask.interval_s))
        })
    }

    /// Every project with feedback state, in name order.
    ///
    /// # Errors
    /// Store errors.
    pub fn projects(&self) -> Result<Vec<String>> {
        let txn = self.k.begin_read()?;
        projects(&*txn)
    }

    /// The project's comments (oldest first), control, address request, heartbeat and adapter.
    ///
    /// # Errors
    /// [`Error::BadInput`] for a scope that is no feedback scope; store errors.
    pub fn list(&self, scope: &str) -> Result<Listing> {
        project_of(scope)?;
        let txn = self.k.begin_read()?;
        let mut inbox = read_inbox(&*txn, scope)?;
        inbox.comments.sort_by_key(|(_, row)| row.added_seq);
        let file = |kind| inbox.files.get(&kind).map(|f: &FileRow| shown(&f.doc));
        Ok(Listing {
            mode: rules::mode(&inbox),
            comments: inbox.comments.iter().map(|(id, row)| comment_view(id, row)).collect(),
            control: file(FileKind::Control),
            address: file(FileKind::Address),
            heartbeat: file(FileKind::Heartbeat),
            adapter: file(FileKind::Adapter),
        })
    }

    /// One comment, with its lease.
    ///
    /// # Errors
    /// [`Error::BadInput`] for a bad scope or id, [`Error::NotFound`] for an unknown comment;
    /// store errors.
    pub fn show(&self, scope: &str, id: &str) -> Result<CommentView> {
        project_of(scope)?;
        input::check_comment_id(id)?;
        let txn = self.k.begin_read()?;
        let row = read_doc::<CommentRow>(&*txn, scope, COMMENT, id)?;
        let row =
            row.ok_or_else(|| Error::NotFound { what: "comment", id: format!("{id} in {scope}") })?;
        Ok(comment_view(id, &row))
    }
}

impl Feedback<'_> {
    /// Adopts parsed `.feedback/` inboxes as events, projects in name order, several whole
    /// projects per transaction within the default [`ImportBatch`] ([`Feedback::import_batched`]).
    ///
    /// # Errors
    /// Store errors. A project that already has state is a refusal: the projects before it stay
    /// imported, nothing of it or of the rest is written. A claim held by a live legacy process
    /// refuses the import before anything is written.
    pub fn import(&self, call: &Call, import: MoonshineImport) -> Result<Imported> {
        layout::import(self.k, call, import, ImportBatch::default(), &mut |_| {})
    }

    /// [`Feedback::import`] within `batch` (several whole projects per transaction while their
    /// events and legacy bytes fit; [`ImportBatch::PER_PROJECT`] for one per transaction; a keyed
    /// call takes one per transaction whatever `batch` says), telling `progress` once before the
    /// first commit and after each. A project is never split across transactions, so a failed
    /// or killed import leaves a prefix of the projects, in name order, each complete.
    ///
    /// # Errors
    /// As [`Feedback::import`]; after a store error the projects of earlier commits stay.
    pub fn import_batched(
        &self,
        call: &Call,
        import: MoonshineImport,
        batch: ImportBatch,
        progress: &mut dyn FnMut(&ImportProgress),
    ) -> Result<Imported> {
        layout::import(self.k, call, import, batch, progress)
    }

    /// Writes the legacy files of every project (or `only`) under `to`, byte for byte, through
    /// the safe writer; files whose bytes are already right are not rewritten. A consumed
    /// address request removes `address.json`.
    ///
    /// # Errors
    /// [`Error::UnsafePath`], IO and store errors.
    pub fn export(&self, to: &Path, only: Option<&str>) -> Result<Exported> {
        layout::export(self.k, to, only)
    }
}

/// Every project with feedback state, in name order.
pub(crate) fn projects(txn: &dyn ReadTxn) -> Result<Vec<String>> {
    Ok(read_docs::<bool>(txn, INDEX_SCOPE, PROJECT)?.into_iter().map(|(p, _)| p).collect())
}

/// The projects a Stop pass may append or report for, in name order: the drainable index, so an
/// idle Stop hook reads no row of a project in accumulate mode ([`rules::drainable`]).
pub(crate) fn drainable_projects(txn: &dyn ReadTxn) -> Result<Vec<String>> {
    Ok(read_docs::<bool>(txn, INDEX_SCOPE, DRAINABLE)?.into_iter().map(|(p, _)| p).collect())
}

/// The projects a pass of this kind goes over: a tick reports every project, a Stop pass only
/// those it may append or report for.
fn pass_projects(txn: &dyn ReadTxn, pass: Pass) -> Result<Vec<String>> {
    match pass {
        Pass::Stop => drainable_projects(txn),
        _ => projects(txn),
    }
}

/// What a listener tick asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickAsk {
    /// Only this project [default: the call's feedback scope, else every project].
    pub project: Option<String>,
    /// The pass (its `pass` is [`crate::Pass::Tick`]).
    pub drain: DrainAsk,
    /// The moonshine home, where each claimed comment's excerpt is checked against its source.
    pub home: PathBuf,
}

/// A claimed comment as a tick shows it: with its project and whether its excerpt is still in
/// its source file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TickClaim {
    /// The comment id.
    pub id: String,
    /// The fencing token a reply presents.
    pub token: u64,
    /// The comment's target.
    pub target: Value,
    /// The comment text.
    pub comment: Option<String>,
    /// The project drained.
    pub project: String,
    /// Whether the excerpt is still where the target points (`None`: unknown).
    pub anchor_matches: Option<bool>,
}

/// What one listener tick did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tick {
    /// Always true.
    pub ok: bool,
    /// Every comment claimed, over every project.
    pub claimed: Vec<TickClaim>,
    /// Each project's drain result as its call answered it.
    pub projects: Vec<Map<String, Value>>,
    /// Whether the listener goes on (some project is not stopped).
    #[serde(rename = "continue")]
    pub go_on: bool,
    /// Records the mirror could not adopt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror_conflicts: Option<Vec<Conflict>>,
    /// What the mirror did, for a mirrored tick.
    #[serde(skip)]
    pub mirror: Option<MirrorReport>,
}

/// A tick the kill switch turned off: it tells the listener to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TickOff {
    /// Always true.
    pub ok: bool,
    /// Always true.
    pub disabled: bool,
    /// Always false.
    #[serde(rename = "continue")]
    pub go_on: bool,
}

impl TickOff {
    /// The answer of a tick while `MOONSHINE_FEEDBACK` switches the adapters off.
    pub const ANSWER: TickOff = TickOff { ok: true, disabled: true, go_on: false };
}

/// What the Stop hook asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopAsk {
    /// The pass (its `pass` is [`crate::Pass::Stop`]).
    pub drain: DrainAsk,
    /// The moonshine home named in the reason.
    pub home: PathBuf,
    /// How the session records its reply.
    pub via: ReplyVia,
    /// The start of the reply command handed to the session (the program, and `--db PATH` when
    /// the store is not the default one).
    pub command: String,
}

/// What the Stop hook prints, and what its mirror did.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    /// The `{"decision":"block","reason":…}` text, or `None` to allow the stop.
    pub output: Option<String>,
    /// What the mirror did, for a mirrored Stop hook.
    pub mirror: Option<MirrorReport>,
}

/// Each project's drain result as its call answered it.
type Results = Vec<Map<String, Value>>;

fn drained(result: &Map<String, Value>) -> Option<Drained> {
    serde_json::from_value(Value::Object(result.clone())).ok()
}

impl Feedback<'_> {
    /// One listener tick for the asked project, or every project: manifest, heartbeat, session
    /// routing, and claims when the mode or an address request asks; mirrored into `mirror` (the
    /// moonshine home) when given.
    ///
    /// # Errors
    /// The typed input errors of [`check`]; mirror and store errors.
    pub fn tick(&self, call: &Call, ask: &TickAsk, mirror: Option<&Path>) -> Result<Tick> {
        check(call, &Input::Drain(&ask.drain))?;
        let only = scope_for(ask.project.as_deref(), &call.scope);
        if let Some(scope) = &only {
            project_of(scope)?;
        }
        let whole = call.in_scope(only.as_deref().unwrap_or(INDEX_SCOPE));
        let (results, report) = self.passes(&whole, only.as_deref(), &ask.drain, mirror)?;
        let mut claimed = Vec::new();
        let mut go_on = false;
        for result in results.iter().filter_map(drained) {
            go_on |= result.go_on;
            for c in result.claimed {
                let anchor_matches = anchor_matches(&ask.home, &result.project, &c.target);
                let (id, token, target, comment) = (c.id, c.token, c.target, c.comment);
                let project = result.project.clone();
                claimed.push(TickClaim { id, token, target, comment, project, anchor_matches });
            }
        }
        let mirror_conflicts =
            report.as_ref().map(|r| r.conflicts.clone()).filter(|c| !c.is_empty());
        Ok(Tick { ok: true, claimed, projects: results, go_on, mirror_conflicts, mirror: report })
    }

    /// The Stop hook: one drain pass over every project, and the text that blocks the stop with
    /// what it claimed (or nothing); mirrored into `mirror` (the moonshine home) when given.
    ///
    /// # Errors
    /// The typed input errors of [`check`]; mirror and store errors.
    pub fn stop(&self, call: &Call, ask: &StopAsk, mirror: Option<&Path>) -> Result<Stop> {
        check(call, &Input::Drain(&ask.drain))?;
        let whole = call.in_scope(INDEX_SCOPE);
        let (results, report) = self.passes(&whole, None, &ask.drain, mirror)?;
        let results: Vec<Drained> = results.iter().filter_map(drained).collect();
        Ok(Stop { output: self.reason(&results, ask), mirror: report })
    }

    /// The Stop hook decided on a read snapshot, when no project has anything to append (most
    /// stops find nothing to deliver): it then works on a store opened read-only. `None` when a
    /// project has work to do, and [`Feedback::stop`] must run on a writable store.
    ///
    /// # Errors
    /// The typed input errors of [`check`]; store errors.
    pub fn stop_idle(&self, call: &Call, ask: &StopAsk) -> Result<Option<Stop>> {
        check(call, &Input::Drain(&ask.drain))?;
        let holder = holder(ask.drain.holder.as_deref(), call);
        let txn = self.k.begin_read()?;
        let mut results = Vec::new();
        for project in pass_projects(&*txn, ask.drain.pass)? {
            let call = call.in_scope(&format!("{}{project}", super::project::SCOPE_PREFIX));
            let who = claimer(&call, &holder, ask.drain.stale_ms, &*txn);
            let inbox = read_drain_inbox(&*txn, &call.scope, who.now_ms, ask.drain.stale_ms)?;
            let plan =
                rules::decide_drain(&project, &inbox, ask.drain.pass, &who, ask.drain.interval_s);
            if !plan.events.is_empty() {
                return Ok(None);
            }
            results.extend(drained(&self.k.answer_read(&*txn, plan)?.result));
        }
        Ok(Some(Stop { output: self.reason(&results, ask), mirror: None }))
    }

    fn reason(&self, results: &[Drained], ask: &StopAsk) -> Option<String> {
        stop_reason(results, &ask.home.display().to_string(), ask.via, &ask.command)
    }

    /// Drains `only` (or every project), as one mirrored call of the moonshine layout over
    /// `mirror` when given: the mirror adopts what outside writers changed first, so adopted
    /// comments are drained, and writes back what the passes changed. Each project's result.
    fn passes(
        &self,
        call: &Call,
        only: Option<&str>,
        ask: &DrainAsk,
        mirror: Option<&Path>,
    ) -> Result<(Results, Option<MirrorReport>)> {
        let Some(dir) = mirror else {
            return Ok((self.drain_all(call, only, ask)?.0, None));
        };
        let results = RefCell::new(Vec::new());
        let outcome = mirror::mirrored(self.k, call, &[&layout::MoonshineLayout], dir, || {
            let (drained, appended) = self.drain_all(call, only, ask)?;
            *results.borrow_mut() = drained;
            let head = self.k.head()?;
            Ok(Outcome {
                result: Map::new(),
                refusal: None,
                head,
                appended,
                replayed: false,
                mirror: None,
            })
        })?;
        Ok((results.into_inner(), outcome.mirror))
    }

    /// Drains `only` (or every project): each project's result, and the events appended.
    fn drain_all(&self, call: &Call, only: Option<&str>, ask: &DrainAsk) -> Result<(Results, u64)> {
        let scopes = match only {
            Some(scope) => vec![scope.to_owned()],
            None => {
                let prefix = super::project::SCOPE_PREFIX;
                let txn = self.k.begin_read()?;
                let projects = pass_projects(&*txn, ask.pass)?;
                projects.into_iter().map(|p| format!("{prefix}{p}")).collect()
            }
        };
        let mut results = Vec::new();
        let mut appended = 0;
        for scope in scopes {
            let outcome = self.drain(&call.in_scope(&scope), ask)?;
            appended += outcome.appended;
            results.push(outcome.result);
        }
        Ok((results, appended))
    }
}
