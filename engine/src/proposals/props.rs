//! Pure rules of PROP proposals: create with `PROP-NNN-<slug>-<HHMMSS>` ids (NNN one more than
//! every PROP of the scope), the frontmatter as upstream reads and writes it, the index as
//! upstream's rebuild writes it, `resolve-id`, and the ledger line and result of each PROP event
//! (the status moves are `moves.rs`).
//!
//! A PROP file is kept whole as its text; frontmatter edits are line-level, as upstream's
//! `patchFrontmatter` makes them, so an export writes every byte back. No IO, no clock, no
//! store: `api.rs` reads the PROP documents and calls these.

use hookstate_schema::proposals::{frontmatter, PropDoc, ProposalsEvent};
use hookstate_schema::Body;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::micro::{answer_refusal, to_fields};
use crate::kernel::call::{fields, Plan};
use crate::kernel::error::{Error, Result};

/// The PROP files' directory under the state directory.
pub(crate) const PROPOSALS_DIR: &str = "proposals";

/// Document kind of the index stamp (id [`INDEX_ID`]).
pub(crate) const INDEX_KIND: &str = "proposals.index";
/// The one id of the index document.
pub(crate) const INDEX_ID: &str = "index";
/// A PROP file: a page of markdown; far larger means a runaway writer.
pub(crate) const PROP_FILE_BYTES_MAX: usize = 32 * 1024;
/// PROP files one scope may hold (bounds the index rebuild).
pub(crate) const PROPS_MAX: usize = 10_000;
/// Slug tokens kept (upstream `slugify`).
pub(crate) const SLUG_TOKENS_MAX: usize = 5;
/// Slug length at a word boundary (upstream `slugify`).
pub(crate) const SLUG_CHARS_MAX: usize = 40;
/// Zero-padding of NNN.
const NUMBER_DIGITS: usize = 3;
const SUFFIX_LETTERS: &str = "abcdefghijklmnopqrstuvwxyz";
/// The id prefix, lower-cased, as `resolve-id` looks for it.
const PROP_PREFIX: &str = "prop-";
const STOPWORDS: [&str; 16] = [
    "a", "an", "the", "and", "or", "of", "for", "to", "in", "on", "with", "by", "from", "as", "is",
    "are",
];
const CATEGORIES: [&str; 5] = ["improvement", "routine", "capability", "constraint", "bug"];
/// The heading of the section decisions are appended to.
pub(crate) const DECISION_HEADING: &str = "## Operator Decision";

/// Upstream's `slugify`: ASCII only, lowercase, non-alphanumeric runs as one separator,
/// stopwords dropped unless that empties it, 5 tokens, 40 chars at a word boundary, `proposal`
/// when empty.
#[must_use]
pub(crate) fn slugify(title: &str) -> String {
    let ascii: String = title.chars().filter(char::is_ascii).collect::<String>().to_lowercase();
    let spaced: String =
        ascii.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { ' ' }).collect();
    let all: Vec<&str> = spaced.split_whitespace().collect();
    let filtered: Vec<&str> = all.iter().copied().filter(|t| !STOPWORDS.contains(t)).collect();
    let tokens = if filtered.is_empty() { all } else { filtered };
    let mut parts: Vec<&str> = tokens.into_iter().take(SLUG_TOKENS_MAX).collect();
    while parts.len() > 1 && parts.join("-").len() > SLUG_CHARS_MAX {
        parts.pop();
    }
    let mut slug = parts.join("-");
    slug.truncate(SLUG_CHARS_MAX);
    if slug.is_empty() {
        "proposal".into()
    } else {
        slug
    }
}

/// A frontmatter scalar as `md-write` writes it: bare when it matches
/// `^[A-Za-z0-9][\w./:+-]*$`, otherwise JSON-quoted; arrays as compact JSON.
#[must_use]
pub(crate) fn fm_scalar(value: &Value) -> String {
    match value {
        Value::String(s) => {
            let mut chars = s.chars();
            let bare = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
                && chars.all(|c| c.is_ascii_alphanumeric() || "_./:+-".contains(c));
            if bare {
                s.clone()
            } else {
                value.to_string()
            }
        }
        other => other.to_string(),
    }
}

/// A raw frontmatter value as the index reads it: `null`, a JSON string or array, else the bare
/// text.
fn fm_value(raw: &str) -> Value {
    if raw == "null" {
        return Value::Null;
    }
    if raw.starts_with('"') || raw.starts_with('[') {
        if let Ok(value) = serde_json::from_str(raw) {
            return value;
        }
    }
    Value::String(raw.to_owned())
}

fn fm_get(text: &str, key: &str) -> Option<Value> {
    let (lines, _) = frontmatter(text)?;
    lines.into_iter().find(|(k, _)| k == key).map(|(_, raw)| fm_value(&raw))
}

/// Sets `key` line-level: an existing `key:` line is replaced in place, a new key goes before
/// the closing `---`.
pub(crate) fn fm_set(text: &str, key: &str, value: &Value) -> Option<String> {
    let (_, close) = frontmatter(text)?;
    let line = format!("{key}: {}", fm_scalar(value));
    let head = &text[..close];
    let prefix = format!("{key}:");
    let mut out: Vec<String> = Vec::new();
    let mut found = false;
    for existing in head.split('\n') {
        if !found && existing.starts_with(&prefix) {
            // A CRLF file keeps its line end.
            let end = if existing.ends_with('\r') { "\r" } else { "" };
            out.push(format!("{line}{end}"));
            found = true;
        } else {
            out.push(existing.to_owned());
        }
    }
    if !found {
        let crlf = head.contains("\r\n");
        out.push(if crlf { format!("{line}\r") } else { line });
    }
    Some(format!("{}{}", out.join("\n"), &text[close..]))
}

/// The `NNN` of a `PROP-NNN…` name.
pub(crate) fn prop_number(name: &str) -> Option<u64> {
    let digits: String =
        name.strip_prefix("PROP-")?.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The document a PROP file's text projects to.
pub(crate) fn prop_doc(file: &str, text: &str) -> PropDoc {
    PropDoc {
        file: file.to_owned(),
        text: text.to_owned(),
        status: fm_get(text, "status").and_then(|v| v.as_str().map(str::to_owned)),
        responded: fm_get(text, "responded").is_some_and(|v| v.as_str() == Some("true")),
        number: prop_number(file).unwrap_or(0),
        responded_logged: false,
    }
}

/// Checks a PROP file name: `PROP-<digits>…​.md`, a plain name.
///
/// # Errors
/// [`Error::BadInput`], [`Error::BadId`].
pub(crate) fn check_prop_file(file: &str) -> Result<()> {
    let stem = file.strip_suffix(".md").unwrap_or_default();
    if prop_number(stem).is_none() {
        return Err(Error::bad(format!("{file:?}"), "is not a PROP-NNN….md name"));
    }
    hookstate_schema::validate_id("PROP file", stem).map_err(Error::from)
}

/// What `create` was given on stdin: `Key: value` headers, a `---` line, the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateInput {
    /// `Title:`.
    pub title: String,
    /// `Source:` (default manual).
    pub source: String,
    /// `Session:` (default null).
    pub session: Option<String>,
    /// `Category:` (default improvement).
    pub category: String,
    /// `Tags:`.
    pub tags: Vec<String>,
    /// `Related-Sessions:`.
    pub related_sessions: Vec<String>,
    /// `Self-Eval-Key:`.
    pub self_eval_key: Option<String>,
    /// `Findings:`, the one-line summary of the SHELL.md Findings line (the title when absent).
    pub findings: Option<String>,
    /// The body, trimmed as upstream trims it.
    pub body: String,
}

fn header(head: &str, key: &str) -> Option<String> {
    head.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Why `create`'s stdin was refused: upstream's `ERROR|<token>` token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateRefused(pub &'static str);

impl CreateRefused {
    /// Upstream's verdict line, which it prints with exit 0.
    #[must_use]
    pub fn verdict(&self) -> String {
        format!("ERROR|{}", self.0)
    }
}

impl std::fmt::Display for CreateRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "create: {}", self.0)
    }
}

/// Parses `create`'s stdin; the error is upstream's `ERROR|<token>` token.
///
/// # Errors
/// The token: missing-separator, empty-body, missing-title, invalid-category, invalid-tags,
/// invalid-related-sessions.
pub fn parse_create(stdin: &str) -> std::result::Result<CreateInput, CreateRefused> {
    create_input(stdin).map_err(CreateRefused)
}

fn create_input(stdin: &str) -> std::result::Result<CreateInput, &'static str> {
    let mut offset = 0;
    let mut sep = None;
    for line in stdin.split_inclusive('\n') {
        // Upstream's `/^---[ \t]*$/m`: a JavaScript `$` also ends a line before a `\r`, so a
        // CRLF separator is one too, its `\r` left to the body.
        let content = line.strip_suffix('\n').unwrap_or(line);
        let content = content.strip_suffix('\r').unwrap_or(content);
        if content.trim_end_matches([' ', '\t']) == "---" {
            sep = Some((offset, offset + content.len()));
            break;
        }
        offset += line.len();
    }
    let (start, end) = sep.ok_or("missing-separator")?;
    let head = &stdin[..start];
    let body = stdin[end..].trim_start_matches('\n').trim_end().to_owned();
    if body.is_empty() {
        return Err("empty-body");
    }
    let title = header(head, "Title").ok_or("missing-title")?;
    let category = header(head, "Category").unwrap_or_else(|| "improvement".into());
    if !CATEGORIES.contains(&category.as_str()) {
        return Err("invalid-category");
    }
    let list = |key: &str, token: &'static str| match header(head, key) {
        None => Ok(Vec::new()),
        Some(raw) => serde_json::from_str::<Vec<String>>(&raw).map_err(|_| token),
    };
    Ok(CreateInput {
        title,
        source: header(head, "Source").unwrap_or_else(|| "manual".into()),
        session: header(head, "Session"),
        category,
        tags: list("Tags", "invalid-tags")?,
        related_sessions: list("Related-Sessions", "invalid-related-sessions")?,
        self_eval_key: header(head, "Self-Eval-Key"),
        findings: header(head, "Findings"),
        body,
    })
}

/// The file text `create` writes: the template's frontmatter in its key order, the heading, the
/// body with an `## Operator Decision` section.
fn render_new(id: &str, input: &CreateInput, created: &str) -> String {
    let value = |v: Option<&String>| v.map_or(Value::Null, |s| json!(s));
    let keys: [(&str, Value); 15] = [
        ("id", json!(id)),
        ("title", json!(input.title)),
        ("status", json!("proposed")),
        ("source", json!(input.source)),
        ("session", value(input.session.as_ref())),
        ("created", json!(created)),
        ("accepted_date", Value::Null),
        ("resolved_date", Value::Null),
        ("related_sessions", json!(input.related_sessions)),
        ("category", json!(input.category)),
        ("tags", json!(input.tags)),
        ("responded", json!(false)),
        ("self_eval_key", value(input.self_eval_key.as_ref())),
        ("accepted_in_session", Value::Null),
        ("success_signal", Value::Null),
    ];
    let lines: Vec<String> = keys.iter().map(|(k, v)| format!("{k}: {}", fm_scalar(v))).collect();
    let mut body = input.body.clone();
    if !body.lines().any(|l| l.trim_end() == DECISION_HEADING) {
        body = format!("{}\n\n{DECISION_HEADING}\n", body.trim_end_matches('\n'));
    }
    format!("---\n{}\n---\n# Proposal: {id} — {}\n\n{body}\n", lines.join("\n"), input.title)
}

/// A refusal with upstream's `ERROR|<token>` verdict, which it prints with exit 0.
pub(crate) fn error_plan(reason: &'static str, token: String, message: String) -> Plan {
    let details = json!({ "verdict": format!("ERROR|{token}") });
    Plan { refusal: Some(answer_refusal(reason, message, details)), ..Plan::default() }
}

/// The result of a create.
#[derive(Serialize)]
struct Created<'a> {
    verdict: &'a str,
    id: &'a str,
    file: String,
}

/// Decides a create: the next NNN over every PROP of the scope, the first free suffix.
pub(crate) fn decide_create(
    props: &[(String, PropDoc)],
    input: &CreateInput,
    created: &str,
    hhmmss: &str,
    now: (String, String),
) -> Plan {
    if props.len() >= PROPS_MAX {
        return error_plan("full", "too-many-proposals".into(), format!("{PROPS_MAX} proposals"));
    }
    let next = props.iter().map(|(_, d)| d.number).max().unwrap_or(0) + 1;
    let base = format!("PROP-{next:0NUMBER_DIGITS$}-{}-{hhmmss}", slugify(&input.title));
    let taken = |id: &str| props.iter().any(|(stem, _)| stem == id);
    let id = std::iter::once(String::new())
        .chain(SUFFIX_LETTERS.chars().map(String::from))
        .map(|suffix| format!("{base}{suffix}"))
        .find(|id| !taken(id));
    let Some(id) = id else {
        let message = "every suffix a–z of the id is taken".to_owned();
        return error_plan("collision", "collision-suffixes-exhausted".into(), message);
    };
    let text = render_new(&id, input, created);
    let (updated, ts) = now;
    let events = vec![
        ProposalsEvent::PropWritten { file: format!("{id}.md"), text, updated },
        ProposalsEvent::PropCreated {
            id: id.clone(),
            source: input.source.clone(),
            category: input.category.clone(),
            tags: input.tags.clone(),
            ts,
        },
    ];
    let result = to_fields(&Created { verdict: &id, id: &id, file: format!("{id}.md") });
    Plan { events: events.into_iter().map(Body::Proposals).collect(), result, ..Plan::default() }
}

/// The index file (`proposals-index.json`) as upstream's rebuild writes it, with its quirk:
/// `responded` is always false (the frontmatter parser yields a string).
pub(crate) fn render_index(props: &[(String, PropDoc)], updated: &str) -> Value {
    let mut rows = Vec::with_capacity(props.len());
    let mut counts = Map::new();
    for (_, doc) in props {
        let get = |key: &str| fm_get(&doc.text, key).unwrap_or(Value::Null);
        let parsed = frontmatter(&doc.text).is_some();
        let id = doc.file.trim_end_matches(".md");
        let status = if parsed { get("status") } else { Value::Null };
        let bucket = status.as_str().unwrap_or("unknown").to_owned();
        let count = counts.get(&bucket).and_then(Value::as_u64).unwrap_or(0) + 1;
        counts.insert(bucket, json!(count));
        rows.push(if parsed {
            json!({
                "id": get("id"), "file": doc.file, "status": status, "source": get("source"),
                "category": get("category"), "title": get("title"), "created": get("created"),
                "session": get("session"), "responded": false,
                "accepted_date": get("accepted_date"), "resolved_date": get("resolved_date"),
                "tags": get("tags"), "self_eval_key": get("self_eval_key"), "unparseable": false,
            })
        } else {
            json!({
                "id": id, "file": doc.file, "status": null, "source": null, "category": null,
                "title": null, "created": null, "session": null, "responded": false,
                "accepted_date": null, "resolved_date": null, "tags": null,
                "self_eval_key": null, "unparseable": true,
            })
        });
    }
    json!({ "updated": updated, "count": rows.len(), "counts": counts, "proposals": rows })
}

/// `resolve-id`: an exact PROP id or file name (any case) matches itself; otherwise the first
/// `PROP-<digits>` in the input matches every PROP with that number (`PROP-31` and `PROP-031`
/// alike). Verdict: `MATCH|<file>`, `AMBIGUOUS|[{"file","title"}]`, `NONE|not-a-prop-id` or
/// `NONE|no-match`.
#[must_use]
pub(crate) fn resolve_id(props: &[(String, PropDoc)], input: &str) -> String {
    let wanted = input.trim().trim_end_matches(".md").to_lowercase();
    if let Some((_, doc)) = props.iter().find(|(stem, _)| stem.to_lowercase() == wanted) {
        return format!("MATCH|{}", doc.file);
    }
    let number = wanted.find(PROP_PREFIX).and_then(|at| {
        let digits: String = wanted[at + 5..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u64>().ok()
    });
    let Some(number) = number else {
        return "NONE|not-a-prop-id".into();
    };
    let found: Vec<&PropDoc> =
        props.iter().map(|(_, d)| d).filter(|d| d.number == number).collect();
    match found.as_slice() {
        [] => "NONE|no-match".into(),
        [one] => format!("MATCH|{}", one.file),
        many => {
            let rows: Vec<Value> = many
                .iter()
                .map(|d| json!({ "file": d.file, "title": fm_get(&d.text, "title") }))
                .collect();
            format!("AMBIGUOUS|{}", Value::from(rows))
        }
    }
}

/// The ledger line a PROP event stands for (`created`, `responded`, `resolved`): compact JSON
/// with `ts` first. `None` for other events.
pub(crate) fn prop_ledger_line(event: &ProposalsEvent) -> Option<String> {
    let line = match event {
        ProposalsEvent::PropCreated { id, source, category, tags, ts } => json!({
            "ts": ts, "type": "created", "proposal_id": id, "source": source,
            "category": category, "tags": tags,
        }),
        ProposalsEvent::PropResponded { id, action, ts } => {
            json!({ "ts": ts, "type": "responded", "proposal_id": id, "action": action })
        }
        ProposalsEvent::PropResolved { id, ts } => {
            json!({ "ts": ts, "type": "resolved", "proposal_id": id })
        }
        _ => return None,
    };
    Some(line.to_string())
}

/// The result of a created PROP (its verdict is the id).
#[derive(Serialize)]
struct CreatedEvent<'a> {
    verdict: &'a str,
    id: &'a str,
}

/// The result of a recorded `responded` or `resolved` line.
#[derive(Serialize)]
struct EventLine<'a> {
    verdict: &'static str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<&'a str>,
}

/// The result fields a PROP event stands for, with its verdict line; `None` for the queue's
/// events.
pub(crate) fn render_prop(event: &ProposalsEvent) -> Option<Map<String, Value>> {
    Some(match event {
        ProposalsEvent::PropImported { file, .. } | ProposalsEvent::PropWritten { file, .. } => {
            fields(json!({ "file": file }))
        }
        ProposalsEvent::PropCreated { id, .. } => to_fields(&CreatedEvent { verdict: id, id }),
        ProposalsEvent::PropResponded { id, action, .. } => {
            to_fields(&EventLine { verdict: "OK", id, action: Some(action) })
        }
        ProposalsEvent::PropResolved { id, .. } => {
            to_fields(&EventLine { verdict: "OK", id, action: None })
        }
        ProposalsEvent::IndexImported { updated } => fields(json!({ "updated": updated })),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_follow_upstream_rules() {
        assert_eq!(
            slugify("Cache the dependency install step in CI"),
            "cache-dependency-install-step-ci"
        );
        assert_eq!(slugify("Nightly digest of flaky tests"), "nightly-digest-flaky-tests");
        assert_eq!(slugify("The and of"), "the-and-of", "stopwords kept when nothing else is left");
        assert_eq!(slugify("Über—naïve café!!"), "bernave-caf", "non-ASCII is dropped, not a gap");
        assert_eq!(slugify("???"), "proposal");
        assert_eq!(
            slugify("internationalization localization globalization accessibility"),
            "internationalization-localization"
        );
        assert_eq!(slugify(&"x".repeat(50)), "x".repeat(40), "one long token is cut hard");
    }

    #[test]
    fn frontmatter_scalars_are_bare_or_json_quoted() {
        assert_eq!(fm_scalar(&json!("2026-11-29T16:50:46-05:00")), "2026-11-29T16:50:46-05:00");
        assert_eq!(fm_scalar(&json!("auto-detected")), "auto-detected");
        assert_eq!(fm_scalar(&json!("Nightly digest")), "\"Nightly digest\"");
        assert_eq!(fm_scalar(&json!("-x")), "\"-x\"");
        assert_eq!(fm_scalar(&json!(["ci", "cost"])), "[\"ci\",\"cost\"]");
        assert_eq!(fm_scalar(&Value::Null), "null");
        assert_eq!(fm_scalar(&json!(true)), "true");
    }

    /// A CRLF file's frontmatter reads as an LF one's, and an edit keeps its line ends.
    #[test]
    fn a_crlf_frontmatter_is_read_and_edited_in_its_line_ends() {
        let text = "---\r\nid: PROP-002\r\nstatus: accepted\r\n---\r\nbody\r\n";
        assert_eq!(prop_doc("PROP-002-x.md", text).status.as_deref(), Some("accepted"));
        let set = fm_set(text, "status", &json!("resolved")).unwrap();
        assert_eq!(set, text.replace("accepted", "resolved"));
        let added = fm_set(text, "responded", &json!(true)).unwrap();
        assert_eq!(added, text.replace("accepted\r\n", "accepted\r\nresponded: true\r\n"));
    }

    #[test]
    fn create_input_parses_headers_and_tokens() {
        let ok = parse_create("Title: T\nTags: [\"a\"]\n---\n\nbody\n\n").unwrap();
        assert_eq!((ok.title.as_str(), ok.body.as_str(), ok.tags.len()), ("T", "body", 1));
        assert_eq!(ok.category, "improvement");
        assert_eq!(create_input("Title: T\nbody"), Err("missing-separator"));
        let crlf = parse_create("Title: A\r\n---\r\nbody\r\n").unwrap();
        assert_eq!((crlf.title.as_str(), crlf.body.as_str()), ("A", "\r\nbody"));
        assert_eq!(create_input("Title: T\n---\n \n"), Err("empty-body"));
        assert_eq!(create_input("Source: x\n---\nb"), Err("missing-title"));
        assert_eq!(create_input("Title: T\nCategory: misc\n---\nb"), Err("invalid-category"));
        assert_eq!(create_input("Title: T\nTags: ci\n---\nb"), Err("invalid-tags"));
    }

    #[test]
    fn resolve_id_matches_exact_ids_then_numbers() {
        let doc = |file: &str, title: &str| {
            let text = format!("---\ntitle: \"{title}\"\n---\n");
            (file.trim_end_matches(".md").to_owned(), prop_doc(file, &text))
        };
        let props = [
            doc("PROP-031-cache-warmup-071502.md", "Warm"),
            doc("PROP-031-other-071503.md", "Other"),
            doc("PROP-007.md", "Legacy"),
        ];
        assert_eq!(resolve_id(&props, "prop-031-other-071503"), "MATCH|PROP-031-other-071503.md");
        assert_eq!(resolve_id(&props, "accept PROP-7 please"), "MATCH|PROP-007.md");
        assert_eq!(
            resolve_id(&props, "PROP-31"),
            "AMBIGUOUS|[{\"file\":\"PROP-031-cache-warmup-071502.md\",\"title\":\"Warm\"},\
             {\"file\":\"PROP-031-other-071503.md\",\"title\":\"Other\"}]"
        );
        assert_eq!(resolve_id(&props, "PROP-9"), "NONE|no-match");
        assert_eq!(resolve_id(&props, "the cache one"), "NONE|not-a-prop-id");
    }

    proptest::proptest! {
        #[test]
        fn hostile_text_never_panics(text in "\\PC{0,80}", title in "\\PC{0,60}") {
            let slug = slugify(&title);
            proptest::prop_assert!(!slug.is_empty() && slug.len() <= SLUG_CHARS_MAX);
            proptest::prop_assert!(slug.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
            let _ = parse_create(&text);
            let _ = resolve_id(&[], &text);
            let doc = prop_doc("PROP-001-x-000000.md", &text);
            let _ = render_index(&[("PROP-001-x-000000".into(), doc)], "");
            let _ = crate::proposals::moves::append_decision(&text, &title, "2026-11-29T17:00:00Z");
            let _ = fm_set(&text, "status", &json!(title));
        }
    }
}
