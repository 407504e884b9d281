//! The `feedback` domain: the moonshine authorship-feedback inbox of one project per scope
//! (`moonshine:<project>`), with comments, claims with fencing tokens, replies, dismissals, the
//! control mode, address requests, the heartbeat and the adapter manifest as events.
//!
//! Each `Engine` method validates its input, then decides in one write transaction over the
//! project's rows (`rules.rs`). Does not touch legacy files; `layout.rs` does.

pub mod hook;
pub mod layout;
pub mod project;
pub mod rules;

use std::collections::BTreeMap;

use hookstate_schema::feedback::{CommentRow, FeedbackEvent, FileKind, FileRow, JsonDoc, Style};
use hookstate_schema::{validate_id, Body};
use serde_json::{json, Value};

use crate::kernel::call::Call;
use crate::kernel::call::Outcome;
use crate::kernel::call::Plan;
use crate::kernel::compat::stamp;
use crate::kernel::doc::{read_doc, read_docs};
use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::write::validate_call;
use crate::kernel::write::Kernel;
use crate::legacy::json::{self as legacy_json, str_field};

pub use hook::{stop_reason, ReplyVia};
pub use rules::{Pass, HEARTBEAT_INTERVAL_S_DEFAULT, STALE_DELIVERED_MS_DEFAULT};

use project::{COMMENT, FILE, INDEX_SCOPE, META, META_ID, PROJECT, SCOPE_PREFIX};
use rules::{Claimer, Inbox};

/// The moonshine feedback inbox on an open store: `engine.feedback()`.
#[derive(Clone, Copy)]
pub struct Feedback<'a> {
    k: &'a Kernel,
}

impl<'a> Feedback<'a> {
    pub(crate) fn new(k: &'a Kernel) -> Self {
        Feedback { k }
    }
}

/// A comment's text: generous for a margin note, far below the event limit.
pub const COMMENT_BYTES_MAX: usize = 16 * 1024;
/// A reply is one line.
pub const REPLY_BYTES_MAX: usize = 2 * 1024;
/// Comments one project may hold: a claim reads them all, so this bounds its cost.
pub const COMMENTS_MAX: usize = 10_000;
/// Longest staleness window for re-delivery: a day.
pub const STALE_MS_MAX: u64 = 24 * 60 * 60 * 1000;
/// Longest listener interval: an hour.
pub const INTERVAL_S_MAX: u64 = 3600;
/// The control modes.
pub const MODES: [&str; 4] = ["accumulate", "listen", "paused", "stopped"];
/// The target kinds the web side writes (two wired, three reserved).
pub const TARGET_KINDS: [&str; 5] = ["block", "figure", "caption", "term", "selection"];

/// The project a feedback scope names.
///
/// # Errors
/// [`Error::Invalid`] when the scope is not `moonshine:<project>` with a valid project id.
pub fn project_of(scope: &str) -> Result<&str> {
    let project = scope.strip_prefix(SCOPE_PREFIX).ok_or_else(|| {
        Error::invalid(format!("scope {scope:?} is not a feedback scope (moonshine:<project>)"))
    })?;
    validate_id("project", project)?;
    Ok(project)
}

/// Checks a comment id: `fb_` and word characters, as the web's dismiss endpoint requires.
///
/// # Errors
/// [`Error::Invalid`] naming the id.
pub fn check_comment_id(id: &str) -> Result<()> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let ok = id.len() > 3 && id.starts_with("fb_") && id[3..].chars().all(word);
    if !ok || id.len() > hookstate_schema::id::ID_BYTES_MAX {
        return Err(Error::invalid(format!("comment id {id:?} is not fb_ and word characters")));
    }
    Ok(())
}

fn check_text(what: &str, text: &str, max: usize, one_line: bool) -> Result<()> {
    if text.trim().is_empty() {
        return Err(Error::invalid(format!("{what} is empty")));
    }
    if text.len() > max {
        return Err(Error::invalid(format!("{what} is {} bytes, limit is {max}", text.len())));
    }
    if one_line && text.chars().any(char::is_control) {
        return Err(Error::invalid(format!("{what} must be one line without control characters")));
    }
    Ok(())
}

fn check_session(session: Option<&str>) -> Result<()> {
    session.map_or(Ok(()), |s| validate_id("session", s).map_err(Error::from))
}

/// Checks a comment target: an object with a known `kind` and a relative `path`.
fn check_target(target: &str) -> Result<JsonDoc> {
    let text = crate::kernel::value::validate_json("target", target)?;
    let compact = format!("{}\n", legacy_json::compact(&text));
    let mut doc = legacy_json::parse_doc("target", compact.as_bytes())?;
    doc.style = Style::Compact;
    let kind = str_field(&doc, "kind").unwrap_or_default();
    if !TARGET_KINDS.contains(&kind.as_str()) {
        return Err(Error::invalid(format!("target kind {kind:?} is not one of {TARGET_KINDS:?}")));
    }
    let path = str_field(&doc, "path").unwrap_or_default();
    let escapes = path.split('/').any(|part| part == ".." || part.is_empty());
    if path.is_empty() || path.starts_with('/') || escapes || path.chars().any(char::is_control) {
        return Err(Error::invalid(format!("target path {path:?} is not a relative path")));
    }
    Ok(doc)
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

pub(crate) fn read_inbox(txn: &dyn ReadTxn, scope: &str) -> Result<Inbox> {
    let comments = read_docs::<CommentRow>(txn, scope, COMMENT)?;
    let mut files = BTreeMap::new();
    for kind in FileKind::ALL {
        if let Some(row) = read_doc::<FileRow>(txn, scope, FILE, kind.stem())? {
            files.insert(kind, row);
        }
    }
    let meta = read_doc(txn, scope, META, META_ID)?.unwrap_or_default();
    Ok(Inbox { comments, files, meta })
}

fn one(event: FeedbackEvent, result: Value) -> Plan {
    Plan::one(Body::Feedback(event), result)
}

/// What a `feedback claim` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimAsk {
    /// Who claims.
    pub holder: String,
    /// Only this comment.
    pub id: Option<String>,
    /// Every eligible comment rather than the next one.
    pub all: bool,
    /// Re-delivery window for `delivered` comments.
    pub stale_ms: u64,
}

/// What a drain pass (Stop hook or listener tick) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainAsk {
    /// Which drainer.
    pub pass: Pass,
    /// Who claims.
    pub holder: String,
    /// Re-delivery window for `delivered` comments.
    pub stale_ms: u64,
    /// The listener interval written into the heartbeat.
    pub interval_s: u64,
}

fn check_stale(stale_ms: u64) -> Result<()> {
    if stale_ms > STALE_MS_MAX {
        return Err(Error::invalid(format!("stale window {stale_ms} ms is over {STALE_MS_MAX}")));
    }
    Ok(())
}

/// A feedback mutation's input, checked by [`check`] before any store is opened.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// `feedback add`.
    Add {
        /// The target JSON.
        target: &'a str,
        /// The comment text.
        comment: &'a str,
    },
    /// `feedback claim`.
    Claim(&'a ClaimAsk),
    /// `feedback reply`.
    Reply {
        /// Comment id.
        id: &'a str,
        /// The reply line.
        reply: &'a str,
    },
    /// `feedback dismiss`.
    Dismiss {
        /// Comment id.
        id: &'a str,
    },
    /// `feedback control`.
    Control {
        /// The mode.
        mode: &'a str,
        /// The session named.
        session: Option<&'a str>,
    },
    /// `feedback address`.
    Address {
        /// The session named.
        session: Option<&'a str>,
    },
    /// `feedback heartbeat`.
    Heartbeat {
        /// The mode reported.
        mode: Option<&'a str>,
        /// The interval.
        interval_s: u64,
    },
    /// A drain pass (Stop hook, tick).
    Drain(&'a DrainAsk),
}

fn check_interval(interval_s: u64) -> Result<()> {
    if interval_s == 0 || interval_s > INTERVAL_S_MAX {
        return Err(Error::invalid(format!(
            "interval {interval_s} s is outside 1..={INTERVAL_S_MAX}"
        )));
    }
    Ok(())
}

fn check_mode(mode: &str) -> Result<()> {
    if MODES.contains(&mode) {
        Ok(())
    } else {
        Err(Error::invalid(format!("mode {mode:?} is not one of {MODES:?}")))
    }
}

/// Checks a call and a feedback input against every id rule and limit without touching a store,
/// so that bad input is refused before anything is opened.
///
/// # Errors
/// [`Error::Invalid`] naming the first broken rule.
pub fn check(call: &Call, input: &Input<'_>) -> Result<()> {
    validate_call(call)?;
    project_of(&call.scope)?;
    match *input {
        Input::Add { target, comment } => {
            check_text("comment", comment, COMMENT_BYTES_MAX, false)?;
            check_target(target).map(|_| ())
        }
        Input::Claim(ask) => {
            validate_id("holder", &ask.holder)?;
            ask.id.as_deref().map_or(Ok(()), check_comment_id)?;
            check_stale(ask.stale_ms)
        }
        Input::Reply { id, reply } => {
            check_comment_id(id)?;
            check_text("reply", reply, REPLY_BYTES_MAX, true)
        }
        Input::Dismiss { id } => check_comment_id(id),
        Input::Control { mode, session } => {
            check_session(session)?;
            check_mode(mode)
        }
        Input::Address { session } => check_session(session),
        Input::Heartbeat { mode, interval_s } => {
            mode.map_or(Ok(()), check_mode)?;
            check_interval(interval_s)
        }
        Input::Drain(ask) => {
            validate_id("holder", &ask.holder)?;
            check_interval(ask.interval_s)?;
            check_stale(ask.stale_ms)
        }
    }
}

impl Feedback<'_> {
    /// Adds a pending comment in the web's format and returns its id.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad scope, target or comment; store errors.
    pub fn add(&self, call: &Call, target: &str, comment: &str) -> Result<Outcome> {
        check(call, &Input::Add { target, comment })?;
        let project = project_of(&call.scope)?.to_owned();
        let target = check_target(target)?;
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
            if read_docs::<CommentRow>(txn, &call.scope, COMMENT)?.len() >= COMMENTS_MAX {
                return Err(Error::invalid(format!("project holds {COMMENTS_MAX} comments")));
            }
            Ok(one(
                FeedbackEvent::CommentAdded { id: id.clone(), doc: doc.clone() },
                json!({ "id": id }),
            ))
        })
    }

    /// Claims the next eligible comment (or every one, or a named one) with a fencing token.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input; store errors. A named comment that is not eligible is a
    /// refusal.
    pub fn claim(&self, call: &Call, ask: &ClaimAsk) -> Result<Outcome> {
        check(call, &Input::Claim(ask))?;
        let who = Claimer {
            holder: &ask.holder,
            session: call.actor.session.as_deref(),
            now_ms: call.now_ms,
            stale_ms: ask.stale_ms,
        };
        self.k.write(call, |txn| {
            let inbox = read_inbox(txn, &call.scope)?;
            Ok(rules::decide_claim(&inbox, &who, ask.id.as_deref(), ask.all))
        })
    }

    /// Records the reply of the holder of the current token: `addressed`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input; store errors. A stale token, a dismissed, unclaimed or
    /// addressed comment is a refusal naming the holder.
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
    /// [`Error::Invalid`] for bad input; store errors.
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
    /// [`Error::Invalid`] for an unknown mode or bad session; store errors.
    pub fn control(&self, call: &Call, mode: &str, session: Option<&str>) -> Result<Outcome> {
        check(call, &Input::Control { mode, session })?;
        let mut fields = vec![
            ("mode".into(), legacy_json::string(mode)),
            ("updatedAt".into(), legacy_json::string(&stamp::stamp_ms(call.now_ms))),
        ];
        fields.extend(session.map(|s| ("sessionId".to_owned(), legacy_json::string(s))));
        let doc = JsonDoc { fields, style: Style::Pretty };
        let shown = legacy_json::to_value(&doc);
        self.k.write(call, |_| {
            Ok(one(
                FeedbackEvent::FileWritten {
                    file: FileKind::Control,
                    doc: doc.clone(),
                    request: 0,
                },
                json!({ "control": shown }),
            ))
        })
    }

    /// Records a one-shot address request; it overrides `paused` and `stopped` once.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad session; store errors.
    pub fn address(&self, call: &Call, session: Option<&str>) -> Result<Outcome> {
        check(call, &Input::Address { session })?;
        let mut fields =
            vec![("requestedAt".into(), legacy_json::string(&stamp::stamp_ms(call.now_ms)))];
        fields.extend(session.map(|s| ("sessionId".to_owned(), legacy_json::string(s))));
        let doc = JsonDoc { fields, style: Style::Pretty };
        self.k.write(call, |txn| {
            let inbox = read_inbox(txn, &call.scope)?;
            let request = inbox.meta.requests + 1;
            let result = json!({ "request": request, "address": legacy_json::to_value(&doc) });
            Ok(one(
                FeedbackEvent::FileWritten { file: FileKind::Address, doc: doc.clone(), request },
                result,
            ))
        })
    }

    /// Writes the listener heartbeat (mode defaults to the control mode).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad mode or interval; store errors.
    pub fn heartbeat(&self, call: &Call, mode: Option<&str>, interval_s: u64) -> Result<Outcome> {
        check(call, &Input::Heartbeat { mode, interval_s })?;
        self.k.write(call, |txn| {
            let inbox = read_inbox(txn, &call.scope)?;
            let event = rules::heartbeat_event(&inbox, mode, call.now_ms, interval_s);
            let shown = match &event {
                FeedbackEvent::FileWritten { doc, .. } => legacy_json::to_value(doc),
                _ => Value::Null,
            };
            Ok(one(event, json!({ "heartbeat": shown })))
        })
    }

    /// One drain pass over the call's project, as the Stop hook or a listener tick does it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input; store errors.
    pub fn drain(&self, call: &Call, ask: &DrainAsk) -> Result<Outcome> {
        check(call, &Input::Drain(ask))?;
        let project = project_of(&call.scope)?.to_owned();
        let who = Claimer {
            holder: &ask.holder,
            session: call.actor.session.as_deref(),
            now_ms: call.now_ms,
            stale_ms: ask.stale_ms,
        };
        let mut outcome = self.k.write(call, |txn| {
            let inbox = read_inbox(txn, &call.scope)?;
            Ok(rules::decide_drain(&inbox, ask.pass, &who, ask.interval_s))
        })?;
        outcome.result.insert("project".into(), Value::String(project));
        Ok(outcome)
    }

    /// The outcome of a drain pass that would append nothing, decided on a read snapshot (so it
    /// works on a read-only store); `None` when the pass has work to do and must run through
    /// [`Engine::feedback_drain`]. Most Stop hook calls find nothing to deliver, and this lets
    /// them skip opening the store for writing.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad input; store errors.
    pub fn drain_idle(&self, call: &Call, ask: &DrainAsk) -> Result<Option<Outcome>> {
        check(call, &Input::Drain(ask))?;
        let project = project_of(&call.scope)?.to_owned();
        let who = Claimer {
            holder: &ask.holder,
            session: call.actor.session.as_deref(),
            now_ms: call.now_ms,
            stale_ms: ask.stale_ms,
        };
        let txn = self.k.begin_read()?;
        let inbox = read_inbox(&*txn, &call.scope)?;
        let plan = rules::decide_drain(&inbox, ask.pass, &who, ask.interval_s);
        if !plan.events.is_empty() {
            return Ok(None);
        }
        let mut outcome = self.k.answer_read(&*txn, plan)?;
        outcome.result.insert("project".into(), Value::String(project));
        Ok(Some(outcome))
    }

    /// Every project with feedback state, in name order.
    ///
    /// # Errors
    /// Store errors.
    pub fn projects(&self) -> Result<Vec<String>> {
        let txn = self.k.begin_read()?;
        Ok(read_docs::<bool>(&*txn, INDEX_SCOPE, PROJECT)?.into_iter().map(|(p, _)| p).collect())
    }

    /// The project's comments (oldest first), control, address request and heartbeat.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad scope; store errors.
    pub fn list(&self, scope: &str) -> Result<Value> {
        project_of(scope)?;
        let txn = self.k.begin_read()?;
        let mut inbox = read_inbox(&*txn, scope)?;
        inbox.comments.sort_by_key(|(_, row)| row.added_seq);
        let comments: Vec<Value> =
            inbox.comments.iter().map(|(id, row)| comment_json(id, row)).collect();
        let file = |kind| inbox.files.get(&kind).map(|f: &FileRow| legacy_json::to_value(&f.doc));
        Ok(json!({
            "mode": rules::mode(&inbox),
            "comments": comments,
            "control": file(FileKind::Control),
            "address": file(FileKind::Address),
            "heartbeat": file(FileKind::Heartbeat),
            "adapter": file(FileKind::Adapter),
        }))
    }

    /// One comment, with its lease.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad scope or id, or an unknown comment; store errors.
    pub fn show(&self, scope: &str, id: &str) -> Result<Value> {
        project_of(scope)?;
        check_comment_id(id)?;
        let txn = self.k.begin_read()?;
        let row = read_doc::<CommentRow>(&*txn, scope, COMMENT, id)?
            .ok_or_else(|| Error::invalid(format!("no comment {id} in {scope}")))?;
        Ok(comment_json(id, &row))
    }
}

fn comment_json(id: &str, row: &CommentRow) -> Value {
    json!({
        "id": id,
        "record": legacy_json::to_value(&row.doc),
        "token": row.token,
        "holder": row.holder,
        "holder_session": row.session,
    })
}
