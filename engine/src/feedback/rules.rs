//! The inbox's rules as pure decisions over rows already read: which comments a claim may take,
//! whether a reply or a dismiss is legal, and what one drain pass (Stop hook or listener tick)
//! does to a project; with the domain's bounds.
//!
//! Every decision returns its events and a typed result (or a refusal). Does not read or write
//! the store or files, or read a clock; the inputs are checked before (`input.rs`).

use std::collections::BTreeMap;

use hookstate_schema::feedback::{
    CommentRow, FeedbackEvent, FileKind, FileRow, JsonDoc, ProjectMeta, Style,
};
use hookstate_schema::Body;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::kernel::call::{fields, Plan};
use crate::kernel::compat::stamp;
use crate::legacy::json::{self as legacy_json, str_field};

/// A delivered comment may be claimed again once its `deliveredAt` is this old (the Stop hook's
/// `STALE_DELIVERED_SEC`).
pub const STALE_DELIVERED_MS_DEFAULT: u64 = 300_000;
/// The listener's tick interval written into the heartbeat (`ScheduleWakeup delaySeconds`).
pub const HEARTBEAT_INTERVAL_S_DEFAULT: u64 = 90;
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

/// Which drainer runs the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The Stop hook at a turn boundary.
    Stop,
    /// One tick of the idle listener (moonshine-listen).
    Tick,
}

/// Where a comment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Pending,
    Delivered,
    Addressed,
    Dismissed,
}

pub(crate) fn status(doc: &JsonDoc) -> Option<Status> {
    match str_field(doc, "status")?.as_str() {
        "pending" => Some(Status::Pending),
        "delivered" => Some(Status::Delivered),
        "addressed" => Some(Status::Addressed),
        "dismissed" => Some(Status::Dismissed),
        _ => None,
    }
}

/// One project's rows, read in the decision's transaction.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    pub(crate) comments: Vec<(String, CommentRow)>,
    pub(crate) files: BTreeMap<FileKind, FileRow>,
    pub(crate) meta: ProjectMeta,
}

/// Who claims, and when.
#[derive(Debug, Clone)]
pub(crate) struct Claimer<'a> {
    pub(crate) holder: &'a str,
    pub(crate) session: Option<&'a str>,
    pub(crate) now_ms: u64,
    pub(crate) stale_ms: u64,
}

/// Eligible: `pending`, or `delivered` with a `deliveredAt` at least `stale_ms` old. A
/// `deliveredAt` that does not parse is "unknown", and not eligible, as in the Stop hook.
pub(crate) fn eligible(row: &CommentRow, now_ms: u64, stale_ms: u64) -> bool {
    match status(&row.doc) {
        Some(Status::Pending) => true,
        Some(Status::Delivered) => str_field(&row.doc, "deliveredAt")
            .and_then(|at| stamp::parse(&at))
            .is_some_and(|at| now_ms.saturating_sub(at) >= stale_ms),
        _ => false,
    }
}

/// What a claimer is told about one claimed comment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claimed {
    /// The comment id.
    pub id: String,
    /// The fencing token a reply presents.
    pub token: u64,
    /// The comment's target (`kind`, `path`, `range`, `excerpt`, ...).
    pub target: Value,
    /// The comment text.
    pub comment: Option<String>,
    /// The project the record names.
    pub project: Option<String>,
}

fn claimed(id: &str, row: &CommentRow, token: u64) -> Claimed {
    let target = row.doc.raw("target").and_then(|t| serde_json::from_str::<Value>(t).ok());
    Claimed {
        id: id.to_owned(),
        token,
        target: target.unwrap_or(Value::Null),
        comment: str_field(&row.doc, "comment"),
        project: str_field(&row.doc, "project"),
    }
}

/// Claims, in the order comments were added, every eligible comment (at most `limit`; only
/// `only` when named). Tokens continue the project's epoch.
pub(crate) fn claim_events(
    inbox: &Inbox,
    who: &Claimer<'_>,
    only: Option<&str>,
    limit: usize,
) -> (Vec<FeedbackEvent>, Vec<Claimed>) {
    let mut rows: Vec<&(String, CommentRow)> = inbox
        .comments
        .iter()
        .filter(|(id, row)| only.is_none_or(|o| o == id) && eligible(row, who.now_ms, who.stale_ms))
        .collect();
    rows.sort_by_key(|(_, row)| row.added_seq);
    let delivered_at = stamp::stamp_s(who.now_ms);
    let mut events = Vec::new();
    let mut shown = Vec::new();
    for (id, row) in rows.into_iter().take(limit) {
        let token = inbox.meta.epoch + 1 + events.len() as u64;
        events.push(FeedbackEvent::CommentClaimed {
            id: id.clone(),
            token,
            holder: who.holder.to_owned(),
            session: who.session.map(str::to_owned),
            delivered_at: delivered_at.clone(),
        });
        shown.push(claimed(id, row, token));
    }
    (events, shown)
}

fn plan(events: Vec<FeedbackEvent>, result: &impl Serialize) -> Plan {
    let result = serde_json::to_value(result).map(fields).unwrap_or_default();
    Plan { events: events.into_iter().map(Body::Feedback).collect(), result, ..Plan::default() }
}

/// A claim's result.
#[derive(Serialize)]
struct ClaimResult {
    claimed: Vec<Claimed>,
}

/// A `feedback claim`: the next eligible comment, every one (`all`), or the named one.
pub(crate) fn decide_claim(
    inbox: &Inbox,
    who: &Claimer<'_>,
    only: Option<&str>,
    all: bool,
) -> Plan {
    if let Some(id) = only {
        if !inbox.comments.iter().any(|(c, _)| c == id) {
            return Plan::refuse("not_found", format!("no comment {id}"), json!({ "id": id }));
        }
    }
    let limit = if all { crate::kernel::limits::APPEND_EVENT_COUNT_MAX } else { 1 };
    let (events, claimed) = claim_events(inbox, who, only, limit);
    if let (Some(id), true) = (only, events.is_empty()) {
        let row = inbox.comments.iter().find(|(c, _)| c == id).map(|(_, r)| r);
        let state = row.and_then(|r| str_field(&r.doc, "status")).unwrap_or_default();
        return Plan::refuse(
            "not_eligible",
            format!("comment {id} is {state} and not eligible for a claim"),
            json!({ "id": id, "status": state, "holder": row.and_then(|r| r.holder.clone()) }),
        );
    }
    plan(events, &ClaimResult { claimed })
}

pub(crate) fn holder_details(id: &str, row: &CommentRow) -> (String, Value) {
    let holder = row.holder.clone().unwrap_or_else(|| "a legacy adapter".into());
    let text = match &row.session {
        Some(session) => format!("{holder} (session {session}) with token {}", row.token),
        None => format!("{holder} with token {}", row.token),
    };
    let details = json!({
        "id": id, "holder": row.holder, "holder_session": row.session, "token": row.token,
        "status": str_field(&row.doc, "status"),
    });
    (text, details)
}

/// A reply's result.
#[derive(Serialize)]
struct Replied<'a> {
    id: &'a str,
    status: &'static str,
    #[serde(rename = "addressedAt")]
    addressed_at: &'a str,
}

/// A reply: legal only on a `delivered` comment, presenting its current token.
pub(crate) fn decide_reply(
    id: &str,
    row: Option<&CommentRow>,
    token: u64,
    reply: &str,
    now_ms: u64,
) -> Plan {
    let Some(row) = row else {
        return Plan::refuse("not_found", format!("no comment {id}"), json!({ "id": id }));
    };
    let (held_by, details) = holder_details(id, row);
    let (reason, message) = match status(&row.doc) {
        Some(Status::Delivered) if row.token == token => {
            let addressed_at = stamp::stamp_s(now_ms);
            let event = FeedbackEvent::CommentReplied {
                id: id.into(),
                token,
                reply: reply.into(),
                addressed_at: addressed_at.clone(),
            };
            let result = Replied { id, status: "addressed", addressed_at: &addressed_at };
            return plan(vec![event], &result);
        }
        Some(Status::Delivered) => {
            ("stale_token", format!("token {token} of comment {id} is stale: held by {held_by}"))
        }
        Some(Status::Dismissed) => {
            ("dismissed", format!("comment {id} was dismissed; the reply is not recorded"))
        }
        Some(Status::Addressed) => {
            ("already_addressed", format!("comment {id} is already addressed by {held_by}"))
        }
        _ => ("not_claimed", format!("comment {id} is not claimed; claim it first")),
    };
    Plan::refuse(reason, message, details)
}

/// A dismissal's result.
#[derive(Serialize)]
struct Dismissed<'a> {
    id: &'a str,
    status: &'static str,
}

/// A dismiss: legal on `pending` and `delivered`; a repeat is a no-op; an addressed comment
/// keeps its reply.
pub(crate) fn decide_dismiss(id: &str, row: Option<&CommentRow>) -> Plan {
    let Some(row) = row else {
        return Plan::refuse("not_found", format!("no comment {id}"), json!({ "id": id }));
    };
    let result = Dismissed { id, status: "dismissed" };
    match status(&row.doc) {
        Some(Status::Dismissed) => plan(Vec::new(), &result),
        Some(Status::Pending | Status::Delivered) => {
            plan(vec![FeedbackEvent::CommentDismissed { id: id.into() }], &result)
        }
        _ => {
            let (_, details) = holder_details(id, row);
            let message = format!("comment {id} is addressed; a dismiss would lose its reply");
            Plan::refuse("addressed", message, details)
        }
    }
}

/// The control mode: the file's `mode`, `accumulate` when absent.
pub(crate) fn mode(inbox: &Inbox) -> String {
    inbox
        .files
        .get(&FileKind::Control)
        .and_then(|f| str_field(&f.doc, "mode"))
        .unwrap_or_else(|| "accumulate".into())
}

fn pending_count(inbox: &Inbox) -> usize {
    inbox.comments.iter().filter(|(_, r)| status(&r.doc) == Some(Status::Pending)).count()
}

/// The heartbeat document the listener writes (S0 shape), compact.
pub(crate) fn heartbeat_doc(mode: &str, now_ms: u64, interval_s: u64, pending: usize) -> JsonDoc {
    JsonDoc {
        fields: vec![
            ("harness".into(), legacy_json::string("claude-code")),
            ("mode".into(), legacy_json::string(mode)),
            ("ts".into(), legacy_json::string(&stamp::stamp_s(now_ms))),
            ("intervalSec".into(), interval_s.to_string()),
            ("pending".into(), pending.to_string()),
        ],
        style: Style::Compact,
    }
}

/// A `feedback heartbeat`: mode defaults to the control mode, `pending` is counted.
pub(crate) fn heartbeat_event(
    inbox: &Inbox,
    mode_override: Option<&str>,
    now_ms: u64,
    interval_s: u64,
) -> FeedbackEvent {
    let mode = mode_override.map_or_else(|| mode(inbox), str::to_owned);
    let doc = heartbeat_doc(&mode, now_ms, interval_s, pending_count(inbox));
    FeedbackEvent::FileWritten { file: FileKind::Heartbeat, doc, request: 0 }
}

/// Whether a drain pass over a project with these files may append or report anything: it
/// writes a missing adapter manifest, and it claims, consumes a request or nudges only in listen
/// mode or on an address request. Any other project's Stop pass appends nothing and adds nothing
/// to the hook's text, so the Stop hook passes only over the projects this holds for (the
/// drainable index the projection keeps).
pub(crate) fn drainable(files: &BTreeMap<FileKind, FileRow>) -> bool {
    let listening = files.get(&FileKind::Control).and_then(|f| str_field(&f.doc, "mode"));
    !files.contains_key(&FileKind::Adapter)
        || files.contains_key(&FileKind::Address)
        || listening.as_deref() == Some("listen")
}

/// The adapter manifest, written only if absent (compact, as `printf` writes it).
pub(crate) fn adapter_event(inbox: &Inbox, now_ms: u64) -> Option<FeedbackEvent> {
    if inbox.files.contains_key(&FileKind::Adapter) {
        return None;
    }
    let doc = JsonDoc {
        fields: vec![
            ("harness".into(), legacy_json::string("claude-code")),
            ("version".into(), legacy_json::string("adapter")),
            ("installedAt".into(), legacy_json::string(&stamp::stamp_s(now_ms))),
        ],
        style: Style::Compact,
    };
    Some(FeedbackEvent::FileWritten { file: FileKind::Adapter, doc, request: 0 })
}

/// Whether a listener heartbeat is fresh: `ts` within twice `intervalSec` (90 when absent).
fn heartbeat_fresh(inbox: &Inbox, now_ms: u64) -> bool {
    let Some(hb) = inbox.files.get(&FileKind::Heartbeat) else {
        return false;
    };
    let interval_s = hb
        .doc
        .raw("intervalSec")
        .and_then(|raw| raw.parse::<u64>().ok())
        .unwrap_or(HEARTBEAT_INTERVAL_S_DEFAULT);
    str_field(&hb.doc, "ts")
        .and_then(|ts| stamp::parse(&ts))
        .is_some_and(|ts| now_ms.saturating_sub(ts) < interval_s * 2000)
}

/// The session that an address request (or, in listen mode, the control) names, if any.
fn requested_session(inbox: &Inbox, mode: &str) -> Option<String> {
    match inbox.files.get(&FileKind::Address) {
        Some(address) => str_field(&address.doc, "sessionId"),
        None if mode == "listen" => {
            inbox.files.get(&FileKind::Control).and_then(|c| str_field(&c.doc, "sessionId"))
        }
        None => None,
    }
    .filter(|s| !s.is_empty())
}

/// What one drain pass did to one project.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drained {
    /// The control mode the pass read.
    pub mode: String,
    /// The comments it claimed.
    pub claimed: Vec<Claimed>,
    /// Whether it consumed an address request.
    pub address_consumed: bool,
    /// Why it skipped the project (heartbeat included): a request names another session, or
    /// names one while this session's id is unknown.
    pub skipped: Option<String>,
    /// The Stop hook's nudge: listen mode is on and no listener heartbeat is fresh.
    pub listen_waiting: bool,
    /// The heartbeat a tick wrote (null for the Stop hook).
    pub heartbeat: Value,
    /// Whether a listener goes on ticking (false once stopped, and for the Stop hook).
    #[serde(rename = "continue")]
    pub go_on: bool,
    /// The project.
    pub project: String,
}

/// Why a drain skipped a project a request names a session for.
fn skip_reason(session: Option<&str>) -> &'static str {
    match session {
        Some(_) => "another session is requested",
        None => "a session is requested and this session's id is unknown",
    }
}

/// Whether the comment `id` was pending before this pass claimed it.
fn was_pending(inbox: &Inbox, id: &str) -> bool {
    inbox.comments.iter().any(|(c, row)| c == id && status(&row.doc) == Some(Status::Pending))
}

/// One drain pass over a project: manifest, (tick: heartbeat), session routing, claims when the
/// mode or an address request asks, and the consumption of exactly the request seen.
pub(crate) fn decide_drain(
    project: &str,
    inbox: &Inbox,
    pass: Pass,
    who: &Claimer<'_>,
    interval_s: u64,
) -> Plan {
    let mut events: Vec<FeedbackEvent> = adapter_event(inbox, who.now_ms).into_iter().collect();
    let mode = mode(inbox);
    let address = inbox.files.get(&FileKind::Address);
    let requested = requested_session(inbox, &mode);
    let session_ok = requested.as_deref().is_none_or(|r| Some(r) == who.session);
    let wants = mode == "listen" || address.is_some();
    // The skill's step 3: a project a request names another session for (or names one while
    // this session's id is unknown) is skipped entirely, its heartbeat included.
    let skipped = (wants && !session_ok).then(|| skip_reason(who.session).to_owned());
    let drains = wants && session_ok;
    // Step 2: a stopped project writes its final heartbeat after the one drain an address
    // request asks for; every other heartbeat (step 3) comes before the drain (step 4).
    let beat_after = mode == "stopped" && drains;
    let beats = pass == Pass::Tick && skipped.is_none();
    let mut heartbeat = Value::Null;
    let mut beat = |events: &mut Vec<FeedbackEvent>, drained_pending: usize| {
        let pending = pending_count(inbox).saturating_sub(drained_pending);
        let doc = heartbeat_doc(&mode, who.now_ms, interval_s, pending);
        heartbeat = legacy_json::to_value(&doc);
        events.push(FeedbackEvent::FileWritten { file: FileKind::Heartbeat, doc, request: 0 });
    };
    if beats && !beat_after {
        beat(&mut events, 0);
    }
    let mut claimed = Vec::new();
    if drains {
        let (claims, shown) =
            claim_events(inbox, who, None, crate::kernel::limits::APPEND_EVENT_COUNT_MAX);
        events.extend(claims);
        claimed = shown;
        if let Some(address) = address {
            events.push(FeedbackEvent::AddressConsumed { request: address.request });
        }
    }
    if beats && beat_after {
        let was_pending = claimed.iter().filter(|c| was_pending(inbox, &c.id)).count();
        beat(&mut events, was_pending);
    }
    let listen_waiting = pass == Pass::Stop
        && session_ok
        && mode == "listen"
        && inbox.files.contains_key(&FileKind::Control)
        && !heartbeat_fresh(inbox, who.now_ms);
    let result = Drained {
        address_consumed: drains && address.is_some(),
        skipped,
        listen_waiting,
        heartbeat,
        go_on: pass == Pass::Tick && (mode != "stopped"),
        project: project.to_owned(),
        mode,
        claimed,
    };
    plan(events, &result)
}
