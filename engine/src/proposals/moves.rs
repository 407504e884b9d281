//! Pure rules of PROP status moves: accept, defer, dismiss and resolve as compare-and-swap on
//! the current status, `patch` (line-level frontmatter sets and one decision line), `event`
//! (`responded` recorded once, `resolved` every time), and the order of statuses a mirror uses
//! to tell an outside move from a stale rewrite.
//!
//! No IO, no clock, no store: `api.rs` reads the PROP document and calls these.

use hookstate_schema::proposals::{PropDoc, ProposalsEvent};
use hookstate_schema::Body;
use serde::Serialize;
use serde_json::{json, Value};

use super::micro::to_fields;
use super::props::{error_plan, fm_set, DECISION_HEADING};
use crate::kernel::call::Plan;

/// The result of a status move.
#[derive(Serialize)]
struct Moved<'a> {
    verdict: String,
    id: &'a str,
    status: &'a str,
    ledger_event: bool,
}

/// The result of a patch.
#[derive(Serialize)]
struct Patched<'a> {
    verdict: String,
    id: &'a str,
}

/// The result of an `event`.
#[derive(Serialize)]
struct Recorded<'a> {
    verdict: &'static str,
    id: &'a str,
    recorded: bool,
}

/// Every status move.
const MOVES: [Move; 4] = [Move::Accept, Move::Defer, Move::Dismiss, Move::Resolve];

/// A status move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// proposed or deferred → accepted.
    Accept,
    /// proposed → deferred.
    Defer,
    /// proposed or deferred → dismissed.
    Dismiss,
    /// accepted → resolved.
    Resolve,
}

impl Move {
    /// The move that ends in `status`, if any.
    fn to(status: &str) -> Option<Move> {
        MOVES.into_iter().find(|m| m.target() == status)
    }

    fn target(self) -> &'static str {
        match self {
            Move::Accept => "accepted",
            Move::Defer => "deferred",
            Move::Dismiss => "dismissed",
            Move::Resolve => "resolved",
        }
    }

    fn action(self) -> &'static str {
        match self {
            Move::Accept => "accept",
            Move::Defer => "defer",
            Move::Dismiss => "dismiss",
            Move::Resolve => "resolve",
        }
    }

    fn legal_from(self) -> &'static [&'static str] {
        match self {
            Move::Accept | Move::Dismiss => &["proposed", "deferred"],
            Move::Defer => &["proposed"],
            Move::Resolve => &["accepted"],
        }
    }

    /// The frontmatter keys set to `@now` (spec §2.3's table).
    fn dated_keys(self) -> &'static [&'static str] {
        match self {
            Move::Accept => &["accepted_date"],
            Move::Defer => &["deferred_date"],
            Move::Dismiss => &["dismissed_date", "resolved_date"],
            Move::Resolve => &["resolved_date"],
        }
    }
}

/// What a status move was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveInput {
    /// The full PROP id, or its file name.
    pub id: String,
    /// The move.
    pub action: Move,
    /// Compare-and-swap: the status the caller saw; the move is refused if it changed.
    pub expect: Option<String>,
    /// The Operator Decision line to append (idempotent).
    pub decision: Option<String>,
    /// `accepted_in_session` for an accept.
    pub session: Option<String>,
}

/// Appends `raw` (its `@now` expanded to `now_zoned`) at the end of the Operator Decision
/// section unless the section already ends with it, each `@now` read as any timestamp: the
/// skills' decision lines say `... on @now.`, so a retry a second later is the same decision.
pub(crate) fn append_decision(text: &str, raw: &str, now_zoned: &str) -> Option<String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let heading = lines.iter().position(|l| l.trim_end() == DECISION_HEADING)?;
    let end = lines[heading + 1..]
        .iter()
        .position(|l| l.starts_with("## "))
        .map_or(lines.len(), |i| heading + 1 + i);
    let last = (heading + 1..end).rev().find(|&i| !lines[i].trim().is_empty());
    if last.is_some_and(|i| same_decision(lines[i].trim(), raw.trim())) {
        return Some(text.to_owned());
    }
    let line = raw.replace(NOW_TOKEN, now_zoned);
    let at = last.map_or(heading + 1, |i| i + 1);
    let mut out: Vec<&str> = lines.clone();
    out.insert(at, &line);
    Some(out.join("\n"))
}

/// The placeholder a `--set` value or a decision line expands to the zoned time.
const NOW_TOKEN: &str = "@now";

/// Whether `line` is `raw` with each `@now` standing for one timestamp
/// (`YYYY-MM-DDTHH:MM:SS` then `Z` or `±HH:MM`).
fn same_decision(line: &str, raw: &str) -> bool {
    let mut parts = raw.split(NOW_TOKEN);
    let Some(mut rest) = parts.next().and_then(|first| line.strip_prefix(first)) else {
        return false;
    };
    for part in parts {
        let Some(after) = timestamp_len(rest).and_then(|n| rest[n..].strip_prefix(part)) else {
            return false;
        };
        rest = after;
    }
    rest.is_empty()
}

/// The length of the timestamp `s` starts with, if it starts with one.
fn timestamp_len(s: &str) -> Option<usize> {
    const DATE_TIME: &[u8] = b"dddd-dd-ddTdd:dd:dd";
    let bytes = s.as_bytes();
    let shape = |pattern: &[u8], from: usize| {
        pattern.iter().enumerate().all(|(i, &p)| {
            bytes
                .get(from + i)
                .is_some_and(|&b| if p == b'd' { b.is_ascii_digit() } else { b == p })
        })
    };
    if !shape(DATE_TIME, 0) {
        return None;
    }
    let zone = DATE_TIME.len();
    match bytes.get(zone) {
        Some(b'Z') => Some(zone + 1),
        Some(b'+' | b'-') if shape(b"dd:dd", zone + 1) => Some(zone + 6),
        _ => None,
    }
}

/// The file after a move: the status, the dated keys, `responded` and `accepted_in_session`
/// set line-level, and the decision line appended once; a refusal plan when the file's shape
/// does not allow it: `(reason, verdict token, message)`.
fn moved_text(
    text: &str,
    input: &MoveInput,
    now_zoned: &str,
) -> std::result::Result<String, [&'static str; 3]> {
    let mut text = text.to_owned();
    let mut sets: Vec<(&str, Value)> = vec![("status", json!(input.action.target()))];
    sets.extend(input.action.dated_keys().iter().map(|k| (*k, json!(now_zoned))));
    if input.action != Move::Resolve {
        sets.push(("responded", json!(true)));
    }
    if let (Move::Accept, Some(session)) = (input.action, &input.session) {
        sets.push(("accepted_in_session", json!(session)));
    }
    for (key, value) in &sets {
        text = fm_set(&text, key, value).ok_or([
            "bad_frontmatter",
            "frontmatter-terminator-missing",
            "the frontmatter has no closing ---",
        ])?;
    }
    if let Some(line) = &input.decision {
        text = append_decision(&text, line, now_zoned).ok_or([
            "no_section",
            "no-operator-decision-section",
            "the file has no Operator Decision section",
        ])?;
    }
    Ok(text)
}

/// The proposal a move or patch acts on and its current status, or the refusal: no such
/// proposal, or (compare-and-swap) a status other than the one the caller saw.
fn checked_status<'a>(
    doc: Option<&'a PropDoc>,
    expect: Option<&String>,
) -> std::result::Result<(&'a PropDoc, String), Box<Plan>> {
    let Some(doc) = doc else {
        let token = "no-such-proposal".into();
        return Err(Box::new(error_plan("no_such_proposal", token, "no such proposal".into())));
    };
    let current = doc.status.clone().unwrap_or_default();
    if let Some(expected) = expect.filter(|e| **e != current) {
        let message = format!("the status is {current}, not {expected}");
        let token = format!("status-moved:{current}");
        return Err(Box::new(error_plan("status_moved", token, message)));
    }
    Ok((doc, current))
}

/// Decides a status move as a compare-and-swap on the current status.
pub(crate) fn decide_move(
    doc: Option<&PropDoc>,
    input: &MoveInput,
    now_zoned: &str,
    now: (String, String),
) -> Plan {
    let (doc, current) = match checked_status(doc, input.expect.as_ref()) {
        Ok(checked) => checked,
        Err(refusal) => return *refusal,
    };
    let target = input.action.target();
    if !input.action.legal_from().contains(&current.as_str()) {
        let message = format!("{current} cannot move to {target}");
        return error_plan("illegal_move", format!("illegal-move:{current}->{target}"), message);
    }
    let text = match moved_text(&doc.text, input, now_zoned) {
        Ok(text) => text,
        Err([reason, token, message]) => return error_plan(reason, token.into(), message.into()),
    };
    let id = doc.file.trim_end_matches(".md").to_owned();
    let (updated, ts) = now;
    let mut events = vec![ProposalsEvent::PropWritten { file: doc.file.clone(), text, updated }];
    match input.action {
        Move::Resolve => events.push(ProposalsEvent::PropResolved { id: id.clone(), ts }),
        action if !(doc.responded || doc.responded_logged) => {
            events.push(ProposalsEvent::PropResponded {
                id: id.clone(),
                action: action.action().into(),
                ts,
            })
        }
        _ => {}
    }
    let first = events.len() > 1;
    let result = to_fields(&Moved {
        verdict: format!("OK|{id}"),
        id: &id,
        status: target,
        ledger_event: first,
    });
    Plan { events: events.into_iter().map(Body::Proposals).collect(), result, ..Plan::default() }
}

/// What `patch` was asked: `--set key=value` pairs (and stdin `Set:` lines), a decision line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchInput {
    /// The PROP file name (with or without `.md`).
    pub file: String,
    /// `key=value` pairs, in order.
    pub sets: Vec<String>,
    /// The Operator Decision line to append (idempotent).
    pub decision: Option<String>,
    /// Compare-and-swap: the status the caller saw.
    pub expect: Option<String>,
}

/// A `--set` value as upstream's `parseSetValue` reads it, with `@now` expanded.
fn set_value(raw: &str, now_zoned: &str) -> Value {
    let raw = raw.replace(NOW_TOKEN, now_zoned);
    match raw.as_str() {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" => Value::Null,
        _ => number(&raw).unwrap_or(Value::String(raw)),
    }
}

/// `^-?\d+(\.\d+)?$` as a JSON number, else `None`.
fn number(raw: &str) -> Option<Value> {
    let unsigned = raw.strip_prefix('-').unwrap_or(raw);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (unsigned, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return None;
    }
    match fraction {
        None => raw.parse::<i64>().ok().map(Value::from),
        Some(_) => {
            raw.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number)
        }
    }
}

fn patch_key_ok(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Decides a `patch`: line-level frontmatter sets and a decision line, refused with upstream's
/// tokens; a `status` change must be a legal move from the current status (compare-and-swap
/// with `expect`). Records no ledger line: upstream's skills call `event` for that.
pub(crate) fn decide_patch(
    doc: Option<&PropDoc>,
    input: &PatchInput,
    now_zoned: &str,
    updated: String,
) -> Plan {
    let (doc, current) = match checked_status(doc, input.expect.as_ref()) {
        Ok(checked) => checked,
        Err(refusal) => return *refusal,
    };
    let mut text = doc.text.clone();
    for pair in &input.sets {
        let Some((key, raw)) = pair.split_once('=') else {
            return error_plan("invalid_set", "invalid-set".into(), format!("{pair:?} is not k=v"));
        };
        if !patch_key_ok(key) {
            return error_plan("invalid_key", format!("invalid-key:{key}"), "bad key".into());
        }
        let value = set_value(raw, now_zoned);
        // Upstream's patch fails on the frontmatter before anything else reads it.
        let Some(next) = fm_set(&text, key, &value) else {
            let message = "the frontmatter has no closing ---".to_owned();
            return error_plan("bad_frontmatter", "frontmatter-terminator-missing".into(), message);
        };
        if let Some(target) = value.as_str().filter(|_| key == "status") {
            let legal =
                Move::to(target).is_some_and(|m| m.legal_from().contains(&current.as_str()));
            if target != current && !legal {
                let token = format!("illegal-move:{current}->{target}");
                return error_plan("illegal_move", token, "illegal status move".into());
            }
        }
        text = next;
    }
    if let Some(line) = &input.decision {
        let Some(next) = append_decision(&text, line, now_zoned) else {
            let message = "the file has no Operator Decision section".to_owned();
            return error_plan("no_section", "no-operator-decision-section".into(), message);
        };
        text = next;
    }
    let id = doc.file.trim_end_matches(".md").to_owned();
    let event = ProposalsEvent::PropWritten { file: doc.file.clone(), text, updated };
    let result = to_fields(&Patched { verdict: format!("OK|{id}"), id: &id });
    Plan { events: vec![Body::Proposals(event)], result, ..Plan::default() }
}

/// `event responded|resolved`: a `responded` line is recorded once per proposal (a repeat is
/// `OK` and records nothing); a `resolved` line every time, as upstream.
pub(crate) fn decide_event(
    doc: Option<&PropDoc>,
    id: &str,
    action: Option<&str>,
    ts: String,
) -> Plan {
    let ok = |events: Vec<ProposalsEvent>| {
        let recorded = !events.is_empty();
        let result = to_fields(&Recorded { verdict: "OK", id, recorded });
        Plan {
            events: events.into_iter().map(Body::Proposals).collect(),
            result,
            ..Plan::default()
        }
    };
    match action {
        None => ok(vec![ProposalsEvent::PropResolved { id: id.into(), ts }]),
        Some(_) if doc.is_some_and(|d| d.responded_logged) => ok(Vec::new()),
        Some(action) => {
            ok(vec![ProposalsEvent::PropResponded { id: id.into(), action: action.into(), ts }])
        }
    }
}

/// Checks `event`'s arguments as upstream does; the error is upstream's `ERROR|<token>` token.
pub(crate) fn check_event(
    kind: &str,
    id: Option<&str>,
    action: Option<&str>,
) -> std::result::Result<(), String> {
    match (kind, action) {
        ("responded", None) => return Err("missing-action".into()),
        ("resolved", Some(_)) => return Err("action-not-allowed:resolved".into()),
        ("responded" | "resolved", _) => {}
        (other, _) => return Err(format!("unknown-event-type:{other}")),
    }
    let Some(id) = id else {
        return Err("missing-id".into());
    };
    if !id.starts_with("PROP-") || hookstate_schema::validate_id("PROP id", id).is_err() {
        return Err(format!("invalid-id:{id}"));
    }
    match action {
        Some(action) if !["accept", "defer", "dismiss"].contains(&action) => {
            Err(format!("invalid-action:{action}"))
        }
        _ => Ok(()),
    }
}

/// The refusal of malformed `event` arguments, with upstream's verdict.
pub(crate) fn event_refused(token: &str) -> Plan {
    error_plan("invalid_event", token.to_owned(), format!("event: {token}"))
}

/// Whether a PROP may go from status `from` to `to` by legal moves, one or several (the same
/// status included): the order a mirror uses to tell an outside status move from a stale
/// rewrite.
pub(crate) fn reachable(from: Option<&str>, to: Option<&str>) -> bool {
    if from == to {
        return true;
    }
    let (Some(from), Some(to)) = (from, to) else {
        return false;
    };
    let mut reached = vec![from.to_owned()];
    // Each pass adds the statuses one more move reaches; there are only as many as moves.
    for _ in 0..MOVES.len() {
        for step in MOVES {
            let known = reached.iter().any(|r| r == step.target());
            if !known && step.legal_from().iter().any(|f| reached.iter().any(|r| r == f)) {
                reached.push(step.target().to_owned());
            }
        }
    }
    reached.iter().any(|r| r == to)
}

/// `Set: key=value` lines and the first non-empty `Decision: <line>` of `proposals patch
/// --stdin`. Never fails: other lines are ignored.
#[must_use]
pub fn parse_patch_stdin(text: &str) -> (Vec<String>, Option<String>) {
    let sets = text
        .lines()
        .filter_map(|l| l.strip_prefix("Set:"))
        .map(|rest| rest.trim_start_matches([' ', '\t']).to_owned())
        .collect();
    let decision = text
        .lines()
        .find_map(|l| l.strip_prefix("Decision:"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned);
    (sets, decision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_values_parse_as_upstream_and_now_expands() {
        let now = "2026-11-29T17:00:00-05:00";
        assert_eq!(set_value("true", now), json!(true));
        assert_eq!(set_value("null", now), Value::Null);
        assert_eq!(set_value("3", now), json!(3));
        assert_eq!(set_value("-1.5", now), json!(-1.5));
        assert_eq!(set_value("1.", now), json!("1."));
        assert_eq!(set_value("S-045", now), json!("S-045"));
        assert_eq!(set_value("@now", now), json!(now));
        assert!(patch_key_ok("accepted_in_session"));
        assert!(!patch_key_ok("Status") && !patch_key_ok("a-b") && !patch_key_ok(""));
    }

    #[test]
    fn statuses_reach_what_legal_moves_reach() {
        assert!(reachable(Some("proposed"), Some("resolved")), "accepted, then resolved");
        assert!(reachable(Some("deferred"), Some("accepted")));
        assert!(reachable(Some("accepted"), Some("accepted")));
        assert!(!reachable(Some("accepted"), Some("proposed")), "no move goes back");
        assert!(!reachable(Some("resolved"), Some("accepted")));
        assert!(!reachable(Some("dismissed"), Some("deferred")));
        assert!(!reachable(None, Some("accepted")));
    }

    #[test]
    fn decision_lines_append_once_at_the_section_end() {
        let text = "---\na: 1\n---\n# P\n\n## Operator Decision\n";
        let now = "2026-11-29T17:00:00-05:00";
        let once = append_decision(text, "Accepted.", now).unwrap();
        assert_eq!(once, "---\na: 1\n---\n# P\n\n## Operator Decision\nAccepted.\n");
        assert_eq!(append_decision(&once, "Accepted.", now).unwrap(), once);
        assert!(append_decision("---\n---\nno section\n", "x", now).is_none());
    }

    #[test]
    fn at_now_in_a_decision_line_matches_any_timestamp() {
        let text = "---\na: 1\n---\n# P\n\n## Operator Decision\nAccepted on \
                    2026-11-29T17:00:00-05:00.\n";
        let raw = "Accepted on @now.";
        for later in ["2026-11-30T09:01:02+01:00", "2026-11-30T08:01:02Z"] {
            assert_eq!(append_decision(text, raw, later).unwrap(), text, "{later}");
        }
        let other = append_decision(text, "Resolved on @now.", "2026-11-30T08:01:02Z").unwrap();
        assert!(other.ends_with("Resolved on 2026-11-30T08:01:02Z.\n"), "{other}");
        // Not a timestamp where @now stands, or text around it that differs: a new line.
        let loose = "---\n---\n## Operator Decision\nAccepted on yesterday.\n";
        assert_ne!(append_decision(loose, raw, "2026-11-30T08:01:02Z").unwrap(), loose);
        let short = "---\n---\n## Operator Decision\nAccepted on 2026-11-29T17:00:00.\n";
        assert_ne!(append_decision(short, raw, "2026-11-30T08:01:02Z").unwrap(), short);
        assert!(!same_decision("Accepted on 2026-11-29T17:00:00Z. Twice", raw));
        assert!(same_decision(
            "At 2026-11-29T17:00:00Z and 2026-11-29T17:00:01Z",
            "At @now and @now"
        ));
    }
}
