//! `tasks/**/T-*.md`: `encodeTask` and `decodeTask` (Hn `lib/tasks.ts@080928a`) over the shared
//! frontmatter parser (H `lib/frontmatter.ts`) and `serializeValue` (H `lib/md-write.ts`).
//!
//! A file is adopted only when it is a valid record and encoding it gives its bytes back, so an
//! import exports byte for byte. Does not read or write files.

use hookstate_schema::session::TaskDoc;
use serde_json::Value;

use crate::kernel::compat::text as js;
use crate::kernel::error::{Error, Result};
use crate::session::rules::task_doc::{clean, is_valid};

/// The frontmatter keys in `encodeTask`'s order.
pub(crate) const KEYS: [&str; 34] = [
    "id",
    "type",
    "title",
    "created",
    "summary",
    "audience",
    "status",
    "opened_at",
    "requester",
    "handle",
    "owner",
    "closed_at",
    "closed_by",
    "closed_actor",
    "closed_reason",
    "requester_name",
    "origin_message_id",
    "approver",
    "due",
    "conversation",
    "card_chat_id",
    "card_message_id",
    "waiting_on",
    "waiting_since",
    "result",
    "result_at",
    "stall_at",
    "stall_status",
    "stall_next",
    "dedupe_key",
    "check",
    "tags",
    "claims",
    "result_rev",
];

/// `serializeValue` of a string: bare when `^[A-Za-z0-9][\w./:+-]*$`, else JSON.
fn scalar(text: &str) -> String {
    let mut chars = text.chars();
    let bare = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| js::is_word(c) || "./:+-".contains(c));
    if bare {
        text.to_owned()
    } else {
        Value::from(text).to_string()
    }
}

/// `encodeTask`'s value encoding: strings cleaned, the string `"null"` kept quoted.
fn string(text: &str) -> String {
    let text = clean(text);
    if text == "null" {
        "\"null\"".to_owned()
    } else {
        scalar(&text)
    }
}

fn nullable(value: Option<&String>) -> String {
    value.map_or_else(|| "null".to_owned(), |v| string(v))
}

fn values(t: &TaskDoc) -> [String; 34] {
    let n = |v: &Option<String>| nullable(v.as_ref());
    [
        string(&t.id),
        string(&t.kind),
        string(&t.title),
        string(&t.created),
        string(&t.summary),
        string(&t.audience),
        string(&t.status),
        string(&t.opened_at),
        string(&t.requester),
        string(&t.handle),
        string(&t.owner),
        n(&t.closed_at),
        n(&t.closed_by),
        n(&t.closed_actor),
        n(&t.closed_reason),
        n(&t.requester_name),
        n(&t.origin_message_id),
        n(&t.approver),
        n(&t.due),
        n(&t.conversation),
        n(&t.card_chat_id),
        n(&t.card_message_id),
        n(&t.waiting_on),
        n(&t.waiting_since),
        n(&t.result),
        n(&t.result_at),
        n(&t.stall_at),
        n(&t.stall_status),
        n(&t.stall_next),
        n(&t.dedupe_key),
        n(&t.check),
        Value::from(t.tags.clone()).to_string(),
        Value::from(t.claims.clone()).to_string(),
        t.result_rev.to_string(),
    ]
}

/// `encodeTask`: the file's text.
#[must_use]
pub(crate) fn render(t: &TaskDoc) -> String {
    let lines: Vec<String> = KEYS.iter().zip(values(t)).map(|(k, v)| format!("{k}: {v}")).collect();
    format!("---\n{}\n---\n{}", lines.join("\n"), t.body)
}

/// A frontmatter value as the shared parser reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fm {
    Null,
    Text(String),
    List(Vec<String>),
}

fn strip_quotes(text: &str) -> &str {
    let text = text.strip_prefix(['"', '\'']).unwrap_or(text);
    text.strip_suffix(['"', '\'']).unwrap_or(text)
}

/// `splitFlowArray`: top-level commas outside double quotes.
fn split_flow(inner: &str) -> Vec<String> {
    let (mut items, mut current, mut quoted, mut previous) =
        (Vec::new(), String::new(), false, None);
    for c in inner.chars() {
        if c == '"' && previous != Some('\\') {
            quoted = !quoted;
        }
        if c == ',' && !quoted {
            items.push(js::trim(&current).to_owned());
            current.clear();
        } else {
            current.push(c);
        }
        previous = Some(c);
    }
    if !js::trim(&current).is_empty() {
        items.push(js::trim(&current).to_owned());
    }
    items
}

/// One `key: value` line (`/^(\w[\w_]*)\s*:\s*(.*)/`), the value read as the parser reads it.
fn line_value(line: &str) -> Option<(&str, Fm)> {
    let key_len = line.find(|c: char| !js::is_word(c)).unwrap_or(line.len());
    let (key, rest) = line.split_at(key_len);
    let rest = js::trim_start(rest).strip_prefix(':')?;
    if key.is_empty() {
        return None;
    }
    let raw = js::trim(rest.split(['\n', '\r', '\u{2028}', '\u{2029}']).next().unwrap_or_default());
    let value = if raw.len() >= 2 && raw.starts_with('[') && raw.ends_with(']') {
        let inner = js::trim(&raw[1..raw.len() - 1]);
        Fm::List(if inner.is_empty() {
            Vec::new()
        } else {
            split_flow(inner).iter().map(|s| strip_quotes(s).to_owned()).collect()
        })
    } else if raw == "null" {
        Fm::Null
    } else {
        let comment = raw
            .match_indices('#')
            .map(|(i, _)| i)
            .find(|i| raw[..*i].ends_with(js::is_js_whitespace));
        let raw = comment.map_or(raw, |i| js::trim_end(&raw[..i]));
        Fm::Text(strip_quotes(raw).to_owned())
    };
    Some((key, value))
}

/// `decodeTask`'s second pass: a fully quoted scalar (`/^(\w+):\s*(".*")\s*$/`) is JSON. Unlike
/// upstream's regex, a U+2028 or U+2029 inside the quotes (which `JSON.stringify` does not escape)
/// does not stop the match, so such a value reads back whole instead of truncated.
fn quoted_value(line: &str) -> Option<std::result::Result<(&str, String), ()>> {
    let key_len = line.find(|c: char| !js::is_word(c)).unwrap_or(line.len());
    let (key, rest) = line.split_at(key_len);
    let body = js::trim_end(js::trim_start(rest.strip_prefix(':')?));
    if key.is_empty() || !body.starts_with('"') || !body.ends_with('"') || body.len() < 2 {
        return None;
    }
    Some(serde_json::from_str::<String>(body).map(|s| (key, s)).map_err(|_| ()))
}

fn fields(text: &str) -> Option<(Vec<(String, Fm)>, usize)> {
    let end = text.get(3..)?.find("\n---").map(|i| i + 3)?;
    if !text.starts_with("---") {
        return None;
    }
    let yaml = text.get(4..end).unwrap_or_default();
    let mut out: Vec<(String, Fm)> = Vec::new();
    for line in yaml.split('\n') {
        if let Some((key, value)) = line_value(line) {
            set(&mut out, key, value);
        }
    }
    for line in yaml.split('\n') {
        match quoted_value(line) {
            Some(Ok((key, value))) => set(&mut out, key, Fm::Text(value)),
            Some(Err(())) => return None,
            None => {}
        }
    }
    Some((out, end))
}

fn set(out: &mut Vec<(String, Fm)>, key: &str, value: Fm) {
    match out.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => out.push((key.to_owned(), value)),
    }
}

/// `decodeTask`: the record, or `None` (upstream's `invalid-record`).
fn decode(text: &str) -> Option<TaskDoc> {
    let (fm, end) = fields(text)?;
    let get = |k: &str| fm.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let required = |k: &str| match get(k) {
        Some(Fm::Text(s)) => Some(s),
        _ => None,
    };
    let nullable = |k: &str| match get(k) {
        None | Some(Fm::Null) => Some(None),
        Some(Fm::Text(s)) => Some(Some(s)),
        Some(Fm::List(_)) => None,
    };
    let list = |k: &str| match get(k) {
        Some(Fm::List(items)) => Some(items),
        _ => None,
    };
    let rev = required("result_rev")
        .filter(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))?;
    let body = &text[end + 4..];
    let t = TaskDoc {
        id: required("id")?,
        kind: required("type")?,
        title: required("title")?,
        created: required("created")?,
        summary: required("summary")?,
        audience: required("audience")?,
        status: required("status")?,
        opened_at: required("opened_at")?,
        requester: required("requester")?,
        handle: required("handle")?,
        owner: required("owner")?,
        closed_at: nullable("closed_at")?,
        closed_by: nullable("closed_by")?,
        closed_actor: nullable("closed_actor")?,
        closed_reason: nullable("closed_reason")?,
        requester_name: nullable("requester_name")?,
        origin_message_id: nullable("origin_message_id")?,
        approver: nullable("approver")?,
        due: nullable("due")?,
        conversation: nullable("conversation")?,
        card_chat_id: nullable("card_chat_id")?,
        card_message_id: nullable("card_message_id")?,
        waiting_on: nullable("waiting_on")?,
        waiting_since: nullable("waiting_since")?,
        result: nullable("result")?,
        result_at: nullable("result_at")?,
        stall_at: nullable("stall_at")?,
        stall_status: nullable("stall_status")?,
        stall_next: nullable("stall_next")?,
        dedupe_key: nullable("dedupe_key")?,
        check: nullable("check")?,
        tags: list("tags")?,
        claims: list("claims")?,
        result_rev: rev.parse().ok()?,
        body: body.strip_prefix('\n').unwrap_or(body).to_owned(),
    };
    is_valid(&t).then_some(t)
}

/// Parses a task file named `name` (its basename must be `<id>.md`).
///
/// # Errors
/// [`Error::LegacyFile`] naming the file: not UTF-8, not a valid record (upstream's
/// `invalid-record`, which fails every `task.ts` verb there), a basename that is not its id, or a
/// record that `encodeTask` would not write back byte for byte.
pub(crate) fn parse(name: &str, bytes: &[u8]) -> Result<TaskDoc> {
    let text = std::str::from_utf8(bytes).map_err(|_| Error::legacy(name, "is not UTF-8"))?;
    let task = decode_named(name, text)?;
    if render(&task) != text {
        return Err(Error::legacy(
            name,
            "is not in the layout task.ts writes, so it would not be written back byte for byte",
        ));
    }
    Ok(task)
}

/// Parses a task file changed outside the store, as [`parse`] does, except that a record in a
/// layout `encodeTask` does not write (CRLF line ends, a hand edit) is read for its content, and
/// the mirror writes it back in `encodeTask`'s layout.
///
/// # Errors
/// As [`parse`], but for the layout.
pub(crate) fn parse_changed(name: &str, bytes: &[u8]) -> Result<TaskDoc> {
    let text = std::str::from_utf8(bytes).map_err(|_| Error::legacy(name, "is not UTF-8"))?;
    decode_named(name, &text.replace("\r\n", "\n"))
}

fn decode_named(name: &str, text: &str) -> Result<TaskDoc> {
    let bad = |why: &str| Error::legacy(name, why);
    let task = decode(text)
        .ok_or_else(|| bad("is not a valid task record (upstream's invalid-record)"))?;
    let base = name.rsplit('/').next().unwrap_or(name);
    if base != format!("{}.md", task.id) {
        return Err(bad(&format!("is named {base}, but holds task {}", task.id)));
    }
    Ok(task)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::rules::task_doc::tests::task;
    use proptest::strategy::Strategy;

    #[test]
    fn records_round_trip_and_quote_as_upstream() {
        let mut t = task("T-20260914-081502", "2026-09-14T08:15:02.118Z");
        t.title = "null".into();
        t.requester_name = Some("Ana \"A\" Lee".into());
        t.origin_message_id = Some("1287740012".into());
        t.claims = vec!["later:u-1".into()];
        t.result_rev = 3;
        let text = render(&t);
        assert!(text.contains("\ntitle: \"null\"\n"), "{text}");
        assert!(text.contains("\nrequester_name: \"Ana \\\"A\\\" Lee\"\n"), "{text}");
        assert!(text.contains("\norigin_message_id: 1287740012\n"), "{text}");
        assert!(text.contains("\ntags: [\"task\",\"operator\"]\nclaims: [\"later:u-1\"]\nresult_rev: 3\n---\n## Progress"), "{text}");
        assert_eq!(parse("tasks/T-20260914-081502.md", text.as_bytes()).unwrap(), t);
    }

    proptest::proptest! {
        #[test]
        fn any_text_in_a_field_reads_back_as_written(
            title in "\\PC{1,40}",
            result in proptest::option::of("\\PC{0,40}"),
            name in proptest::option::of(any_text()),
        ) {
            let mut t = task("T-20260914-081502", "2026-09-14T08:15:02.118Z");
            t.title = clean(&title);
            t.result = result.map(|r| clean(&r));
            t.requester_name = name.map(|n| clean(&n));
            proptest::prop_assume!(!js::trim(&t.title).is_empty());
            let text = render(&t);
            proptest::prop_assert_eq!(parse("tasks/T-20260914-081502.md", text.as_bytes()).unwrap(), t);
        }
    }

    fn any_text() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::collection::vec(proptest::prelude::any::<char>(), 0..24)
            .prop_map(|c| c.into_iter().collect())
    }

    #[test]
    fn bad_files_are_refused_with_their_reason() {
        let t = task("T-20260914-081502", "2026-09-14T08:15:02.118Z");
        let text = render(&t);
        let why = |name: &str, text: &str| parse(name, text.as_bytes()).unwrap_err().to_string();
        assert!(why("tasks/T-20260914-081503.md", &text).contains("holds task T-20260914-081502"));
        assert!(why("tasks/T-20260914-081502.md", &text.replace("status: open", "status: done"))
            .contains("invalid-record"));
        assert!(why("tasks/T-20260914-081502.md", &text.replace("result_rev: 0", "result_rev: x"))
            .contains("invalid-record"));
        assert!(why(
            "tasks/T-20260914-081502.md",
            &text.replace("title: \"Rotate the cert\"", "title:  \"Rotate the cert\"")
        )
        .contains("byte for byte"));
        assert!(why("tasks/T-20260914-081502.md", &text.replace("\ncheck: null", ""))
            .contains("byte for byte"));
        assert!(parse("t.md", b"\xff").unwrap_err().to_string().contains("UTF-8"));
        assert!(why("tasks/T-20260914-081502.md", "no frontmatter").contains("invalid-record"));
    }
}
