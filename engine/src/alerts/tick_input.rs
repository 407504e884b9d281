//! The payload of one heartbeat evaluation tick (`heartbeat.ts alert-state`'s eval JSON), parsed
//! and validated as upstream does (a malformed `firing` rejects the whole tick rather than
//! reading as "nothing fired"), with the key rules: checklist and custom keys, the structured
//! prefixes, and the scrub of internal ids from channel text.
//!
//! Pure: no IO, no clock, no store. `ladder.rs` classifies what this parses.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::kernel::error::Error;

/// Firing entries one tick may carry: a checklist is a few dozen items.
pub(crate) const FIRING_ITEMS_MAX: usize = 256;
/// The sources a payload's `unreadable` may name (so it holds at most this many).
pub(crate) const UNREADABLE_SOURCES: [&str; 3] =
    ["micro-proposals.json", "proposals/", "sessions/SHELL.md"];
/// `self_eval_updates` entries one tick may carry: one per checklist item at most.
pub(crate) const SELF_EVAL_UPDATES_MAX: usize = CHECKLIST_ITEMS_MAX;
/// Checklist items (`HEARTBEAT.md` lines) one tick may name.
pub(crate) const CHECKLIST_ITEMS_MAX: usize = 256;
/// Longest alert text, key, item or session id: a channel message line, with room to spare.
pub(crate) const ALERT_TEXT_BYTES_MAX: usize = 4096;
/// The micro-proposal structured prefix.
pub(crate) const MICRO_PREFIX: &str = "micro-proposal-pending:";
/// The proposal structured prefix.
pub(crate) const PROPOSAL_PREFIX: &str = "proposal-pending:";
/// The stale-session key.
pub(crate) const STALE_KEY: &str = "stale-session";
/// Legacy doctor residue, purged on every tick.
pub(crate) const DOCTOR_PREFIX: &str = "doctor:";
const ITEM_KEY_CHARS: usize = 8;
const CUSTOM_KEY_CHARS: usize = 100;

/// One firing alert: its key, its file text and, when different, its channel text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FiringItem {
    /// The alert key.
    pub key: String,
    /// The text monitoring lines show.
    pub text: String,
    /// The id-free text for the operator channel.
    pub channel_text: Option<String>,
}

/// One entry of the payload's `firing` array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawFiring {
    pub(crate) key: Option<String>,
    pub(crate) item: Option<String>,
    pub(crate) text: String,
}

/// A validated `alerts tick` payload: upstream's `firing`, plus what upstream reads from files
/// the store does not hold (the checklist, the session id, stale-session) and the structured
/// sources' overrides.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TickInput {
    pub(crate) firing: Vec<RawFiring>,
    pub(crate) checklist: Option<Vec<String>>,
    pub(crate) micro: Option<Vec<FiringItem>>,
    pub(crate) proposals: Option<Vec<FiringItem>>,
    pub(crate) stale_session: Option<String>,
    pub(crate) session_id: Option<String>,
    pub(crate) micro_unreadable: bool,
    pub(crate) proposals_unreadable: bool,
    pub(crate) shell_unreadable: bool,
    /// Why `micro-proposals.json` could not be read, for the read-failure monitoring line (set
    /// by a mirrored tick that found the file corrupt, not by the payload).
    pub(crate) micro_error: Option<String>,
    /// Upstream's `self_eval_updates`: entries laid over `self_eval` (an object, else none).
    pub(crate) self_eval_updates: Map<String, Value>,
}

/// Why a payload was rejected: upstream's INDETERMINATE reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `invalid-json`, `missing-or-malformed-firing`, `unresolvable-firing`, or
    /// `malformed-<field>` for hookstate's own fields.
    pub reason: String,
    /// Only an unparseable payload exits 1 upstream.
    pub unparseable: bool,
}

impl Rejection {
    /// The rejection of a payload that could not even be read (too large, not UTF-8): upstream
    /// reads it as invalid JSON.
    #[must_use]
    pub fn unreadable() -> Rejection {
        Rejection { reason: "invalid-json".into(), unparseable: true }
    }

    /// The error a rejected payload is outside verdict mode: bad input, nothing written.
    #[must_use]
    pub fn error(&self) -> Error {
        Error::bad("alerts tick payload", format!("is rejected ({})", self.reason))
    }
}

fn reject(reason: &str) -> Rejection {
    Rejection { reason: reason.to_owned(), unparseable: false }
}

/// `checklist:<first 8 alnum>` of a checklist item (list marker and `[ ]` box stripped).
#[must_use]
pub(crate) fn item_key(item: &str) -> Option<String> {
    slug(item, ITEM_KEY_CHARS).map(|s| format!("checklist:{s}"))
}

/// `custom:<first 100 alnum>`: the fallback key of a free-form firing entry.
#[must_use]
pub(crate) fn custom_key(text: &str) -> Option<String> {
    slug(text, CUSTOM_KEY_CHARS).map(|s| format!("custom:{s}"))
}

fn strip_marker(text: &str) -> &str {
    let Some(rest) = text.strip_prefix(['-', '*', '+']) else {
        return text;
    };
    let rest = rest.trim_start();
    let mut chars = rest.chars();
    if chars.next() == Some('[') {
        if let (Some(mark), Some(']')) = (chars.next(), chars.next()) {
            if mark != '\n' && mark != '\r' {
                return chars.as_str().trim_start();
            }
        }
    }
    rest
}

fn slug(text: &str, max: usize) -> Option<String> {
    let out: String = strip_marker(text)
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .take(max)
        .collect();
    (!out.is_empty()).then_some(out)
}

/// Whether a key is one of the file-backed structured keys.
#[must_use]
pub(crate) fn is_structured(key: &str) -> bool {
    key.starts_with(MICRO_PREFIX) || key.starts_with(PROPOSAL_PREFIX)
}

pub(crate) fn is_reserved(key: &str) -> bool {
    is_structured(key) || key == STALE_KEY || key.starts_with(DOCTOR_PREFIX)
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The length of an internal id (`PROP-<digits>`, `MP-<word or dash chars>`, `S-<digits>` at a
/// word end) starting at the front of `rest`, if one does.
fn id_len(rest: &str) -> Option<usize> {
    let run = |tail: &str, ok: fn(char) -> bool| -> usize {
        tail.chars().take_while(|c| ok(*c)).map(char::len_utf8).sum()
    };
    for (prefix, ok) in [
        ("PROP-", (|c: char| c.is_ascii_digit()) as fn(char) -> bool),
        ("MP-", |c: char| is_word(c) || c == '-'),
    ] {
        if let Some(tail) = rest.strip_prefix(prefix) {
            let n = run(tail, ok);
            if n > 0 {
                return Some(prefix.len() + n);
            }
        }
    }
    let tail = rest.strip_prefix("S-")?;
    let n = run(tail, |c| c.is_ascii_digit());
    let after = tail[n..].chars().next();
    (n > 0 && !after.is_some_and(is_word)).then_some(2 + n)
}

/// Removes internal ids (PROP-NNN, MP-…, S-NNN) from channel text, collapses the whitespace
/// runs the removal leaves and trims.
#[must_use]
pub(crate) fn scrub_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev: Option<char> = None;
    let mut i = 0;
    while let Some(c) = text[i..].chars().next() {
        if !prev.is_some_and(is_word) {
            if let Some(n) = id_len(&text[i..]) {
                prev = text[i..i + n].chars().last();
                i += n;
                continue;
            }
        }
        out.push(c);
        prev = Some(c);
        i += c.len_utf8();
    }
    let mut collapsed = String::with_capacity(out.len());
    let mut run = String::new();
    for c in out.chars() {
        if c.is_whitespace() {
            run.push(c);
            continue;
        }
        if run.chars().count() >= 2 {
            collapsed.push(' ');
        } else {
            collapsed.push_str(&run);
        }
        run.clear();
        collapsed.push(c);
    }
    collapsed.push_str(&run);
    collapsed.trim().to_owned()
}

fn check_len(what: &str, text: &str) -> std::result::Result<(), Rejection> {
    if text.len() > ALERT_TEXT_BYTES_MAX {
        return Err(reject(&format!("malformed-{what}")));
    }
    Ok(())
}

fn nonempty_str(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned)
}

fn parse_firing(raw: Option<&Value>) -> std::result::Result<Vec<RawFiring>, Rejection> {
    let malformed = || reject("missing-or-malformed-firing");
    let entries = raw.and_then(Value::as_array).ok_or_else(malformed)?;
    if entries.len() > FIRING_ITEMS_MAX {
        return Err(malformed());
    }
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let map = entry.as_object().ok_or_else(malformed)?;
        let text = map.get("text").and_then(Value::as_str).ok_or_else(malformed)?.to_owned();
        let key = nonempty_str(map.get("key"));
        let item = nonempty_str(map.get("item"));
        if key.is_none() && item.is_none() {
            return Err(malformed());
        }
        for part in [Some(&text), key.as_ref(), item.as_ref()].into_iter().flatten() {
            check_len("firing", part)?;
        }
        out.push(RawFiring { key, item, text });
    }
    Ok(out)
}

fn parse_strings(
    map: &Map<String, Value>,
    field: &str,
    max: usize,
) -> std::result::Result<Option<Vec<String>>, Rejection> {
    let bad = || reject(&format!("malformed-{field}"));
    let Some(value) = map.get(field).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let list = value.as_array().filter(|l| l.len() <= max).ok_or_else(bad)?;
    let mut out = Vec::with_capacity(list.len());
    for entry in list {
        let text = entry.as_str().ok_or_else(bad)?;
        check_len(field, text)?;
        out.push(text.to_owned());
    }
    Ok(Some(out))
}

fn parse_items(
    map: &Map<String, Value>,
    field: &str,
    prefix: &str,
) -> std::result::Result<Option<Vec<FiringItem>>, Rejection> {
    let bad = || reject(&format!("malformed-{field}"));
    let Some(value) = map.get(field).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let list = value.as_array().filter(|l| l.len() <= FIRING_ITEMS_MAX).ok_or_else(bad)?;
    let mut out = Vec::with_capacity(list.len());
    for entry in list {
        let entry = entry.as_object().ok_or_else(bad)?;
        let key = nonempty_str(entry.get("key")).filter(|k| k.starts_with(prefix));
        let text = entry.get("text").and_then(Value::as_str);
        let (Some(key), Some(text)) = (key, text) else {
            return Err(bad());
        };
        let channel_text = entry.get("channelText").and_then(Value::as_str).map(str::to_owned);
        for part in
            [Some(&key), Some(&text.to_owned()), channel_text.as_ref()].into_iter().flatten()
        {
            check_len(field, part)?;
        }
        out.push(FiringItem { key, text: text.to_owned(), channel_text });
    }
    Ok(Some(out))
}

/// Parses and validates an `alerts tick` payload as upstream's `alert-state` does (a malformed
/// `firing` rejects the whole tick rather than reading as "nothing fired"), plus hookstate's
/// fields: `checklist` (the `HEARTBEAT.md` items), `session_id` (SHELL.md's `**ID:**`),
/// `stale_session` (the stale-session text, when it fires), `micro` and `proposals` (structured
/// items replacing the store's derivation) and `unreadable` (sources to treat as unreadable:
/// `micro-proposals.json`, `proposals/`, `sessions/SHELL.md`).
///
/// # Errors
/// A [`Rejection`] with upstream's reason.
pub fn parse_tick_input(text: &str) -> std::result::Result<TickInput, Rejection> {
    // Upstream parses `buf.trim()`: JavaScript's whitespace, not Rust's (found by fuzzing).
    let value: Value = serde_json::from_str(crate::kernel::compat::js_trim(text))
        .map_err(|_| Rejection { reason: "invalid-json".into(), unparseable: true })?;
    let map = value.as_object().ok_or_else(|| reject("missing-or-malformed-firing"))?;
    let firing = parse_firing(map.get("firing"))?;
    let checklist = parse_strings(map, "checklist", CHECKLIST_ITEMS_MAX)?;
    let unreadable =
        parse_strings(map, "unreadable", UNREADABLE_SOURCES.len())?.unwrap_or_default();
    let mut input = TickInput {
        firing,
        checklist,
        micro: parse_items(map, "micro", MICRO_PREFIX)?,
        proposals: parse_items(map, "proposals", PROPOSAL_PREFIX)?,
        ..TickInput::default()
    };
    // Upstream lays an object over `self_eval` and ignores any other shape.
    if let Some(Value::Object(updates)) = map.get("self_eval_updates") {
        if updates.len() > SELF_EVAL_UPDATES_MAX {
            return Err(reject("malformed-self_eval_updates"));
        }
        input.self_eval_updates = updates.clone();
    }
    for source in &unreadable {
        match source.as_str() {
            "micro-proposals.json" => input.micro_unreadable = true,
            "proposals/" => input.proposals_unreadable = true,
            "sessions/SHELL.md" => input.shell_unreadable = true,
            _ => return Err(reject("malformed-unreadable")),
        }
    }
    for (field, slot) in
        [("stale_session", &mut input.stale_session), ("session_id", &mut input.session_id)]
    {
        match map.get(field) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.len() <= ALERT_TEXT_BYTES_MAX => *slot = Some(s.clone()),
            Some(_) => return Err(reject(&format!("malformed-{field}"))),
        }
    }
    if resolve_firing(&input).is_none() {
        return Err(reject("unresolvable-firing"));
    }
    Ok(input)
}

pub(crate) fn canonical_keys(input: &TickInput) -> Option<HashSet<String>> {
    input.checklist.as_ref().map(|items| items.iter().filter_map(|i| item_key(i)).collect())
}

fn entry_key(entry: &RawFiring, canonical: &HashSet<String>) -> Option<String> {
    if let Some(key) = &entry.key {
        if key == "waiting-timeout" || key.starts_with("custom:") || is_reserved(key) {
            return Some(key.clone());
        }
    }
    if let Some(derived) = entry.item.as_deref().and_then(item_key) {
        if canonical.contains(&derived) {
            return Some(derived);
        }
    }
    if let Some(key) = entry.key.as_ref().filter(|k| canonical.contains(*k)) {
        return Some(key.clone());
    }
    let fallback = entry.item.as_deref().or(entry.key.as_deref()).unwrap_or(&entry.text);
    custom_key(fallback)
}

/// The model's firing entries with their keys resolved against the checklist, deduplicated
/// (first wins); `None` when there is no checklist and an entry has no key.
pub(crate) fn resolve_firing(input: &TickInput) -> Option<Vec<FiringItem>> {
    let canonical = canonical_keys(input);
    if canonical.is_none() && input.firing.iter().any(|e| e.key.is_none()) {
        return None;
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for entry in &input.firing {
        let key = match &canonical {
            None => entry.key.clone(),
            Some(canonical) => entry_key(entry, canonical),
        };
        let Some(key) = key else { continue };
        if seen.insert(key.clone()) {
            out.push(FiringItem { key, text: entry.text.clone(), channel_text: None });
        }
    }
    Some(out)
}
