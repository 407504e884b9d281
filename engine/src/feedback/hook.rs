//! What a drainer is shown: the text the moonshine Stop hook prints (the
//! `{"decision":"block","reason":…}` object, built byte for byte as the upstream bash + jq hook
//! builds it from the comments a drain claimed), and whether a claimed comment's excerpt is
//! still in its source file (`<home>/<project>/content/`).
//!
//! The text is pure formatting over drain results; the excerpt check reads the source through
//! [`Root`]. Does not claim anything.

use std::path::Path;

use hookstate_schema::feedback::{JsonDoc, Style};
use serde_json::Value;

use super::rules::{Claimed, Drained};
use crate::kernel::error::Result;
use crate::legacy::json::{render, string};
use crate::legacy::root::Root;

/// How the session is told to record its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyVia {
    /// Upstream's words: edit the comment file (for use with a mirror that adopts the edit).
    Files,
    /// `hookstate feedback reply` with the claim's token, which refuses a stale claim.
    Hookstate,
}

const HEADER_FILES: &str = "feedback comment(s) from the moonshine authorship HUD. Address each \
by editing the referenced source file, then record the outcome in its comment file \
(.status=\"addressed\", an ISO-8601 .addressedAt, and a one-line .reply). Comments:\n";
const HEADER_HOOKSTATE: &str = "feedback comment(s) from the moonshine authorship HUD. Address \
each by editing the referenced source file, then record the outcome with the hookstate command \
given for the comment (a one-line reply). Comments:\n";

/// What `jq -r` prints for a string field, as `$(…)` captures it: trailing newlines dropped.
fn field(value: &Value, key: &str) -> Option<String> {
    value.get(key).and_then(Value::as_str).map(|s| s.trim_end_matches('\n').to_owned())
}

/// Where the reply goes: the Stop hook's home and, for [`ReplyVia::Hookstate`], the command that
/// reaches the store the comments were claimed from.
#[derive(Debug, Clone, Copy)]
struct Reply<'a> {
    home: &'a str,
    via: ReplyVia,
    command: &'a str,
}

fn entry(out: &mut String, n: usize, project: &str, claimed: &Claimed, reply: Reply<'_>) {
    let Reply { home, via, command } = reply;
    let target = &claimed.target;
    let kind = field(target, "kind").unwrap_or_else(|| "?".into());
    let path = field(target, "path").unwrap_or_else(|| "?".into());
    let figure = field(target, "figureId").filter(|f| !f.is_empty());
    let excerpt = field(target, "excerpt").unwrap_or_default();
    let comment = claimed.comment.as_deref().unwrap_or_default().trim_end_matches('\n');
    let id = &claimed.id;
    out.push_str(&format!(
        "\n[{n}] project \"{project}\"\n  edit:    {home}/{project}/content/{path}"
    ));
    out.push_str(&format!("\n  target:  {kind}"));
    if let Some(figure) = figure {
        out.push_str(&format!(" (figure: {figure})"));
    }
    if !excerpt.is_empty() {
        out.push_str(&format!("\n  excerpt: {excerpt}"));
    }
    out.push_str(&format!("\n  COMMENT: {comment}\n"));
    match via {
        ReplyVia::Files => out.push_str(&format!(
            "  when done, update {home}/{project}/.feedback/{id}.json \u{2192} \
             .status=\"addressed\", .addressedAt, .reply=<one line>\n"
        )),
        ReplyVia::Hookstate => out.push_str(&format!(
            "  when done, run: {command} --scope moonshine:{project} feedback reply {id} \
             --token {} \"<one line>\"\n",
            claimed.token
        )),
    }
}

/// The Stop hook's stdout for the drain results of every project (`project`, `claimed`,
/// `listen_waiting`), with `home` the moonshine root: `None` when it allows the stop. `command`
/// starts the reply command handed to the session (`hookstate`, plus `--db PATH` when the store
/// is not the default one), so the reply reaches the store the comment was claimed from.
pub(crate) fn stop_reason(
    results: &[Drained],
    home: &str,
    via: ReplyVia,
    command: &str,
) -> Option<String> {
    let reply = Reply { home, via, command };
    let mut comments = String::new();
    let mut count = 0;
    let mut waiting = String::new();
    for result in results {
        let project = result.project.as_str();
        for claimed in &result.claimed {
            count += 1;
            entry(&mut comments, count, project, claimed, reply);
        }
        if result.listen_waiting {
            waiting.push(' ');
            waiting.push_str(project);
        }
    }
    if count == 0 && waiting.is_empty() {
        return None;
    }
    let mut msg = String::new();
    if count > 0 {
        let header = if via == ReplyVia::Files { HEADER_FILES } else { HEADER_HOOKSTATE };
        msg = format!("The article author sent {count} {header}{comments}");
    }
    if !waiting.is_empty() {
        msg.push_str(&format!(
            "\nThe author enabled feedback-listening for project(s):{waiting} but no listener is \
             running. After handling any comments above, start the idle listener by invoking the \
             /moonshine-listen skill."
        ));
    }
    let reason = string(&msg).replace('\u{7f}', "\\u007f");
    let doc = JsonDoc {
        fields: vec![("decision".into(), string("block")), ("reason".into(), reason)],
        style: Style::Pretty,
    };
    Some(render(&doc))
}

/// A source file a comment targets: big articles fit, a runaway file is not read whole.
pub(crate) const CONTENT_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Directory levels of a `target.path` under `content/`.
const CONTENT_DEPTH_MAX: usize = 16;

fn read_content(home: &Path, project: &str, path: &str) -> Result<Option<Vec<u8>>> {
    let parts: Vec<&str> = path.split('/').collect();
    if parts.len() > CONTENT_DEPTH_MAX {
        return Ok(None);
    }
    let Some((file, dirs)) = parts.split_last() else {
        return Ok(None);
    };
    let Some(mut dir) = Root::open(home, false)?.subdir(project, false)? else {
        return Ok(None);
    };
    for name in std::iter::once(&"content").chain(dirs) {
        match dir.subdir(name, false)? {
            Some(next) => dir = next,
            None => return Ok(None),
        }
    }
    dir.read(file, CONTENT_BYTES_MAX)
}

/// Whether a claimed comment's `excerpt` is still where the comment points: inside
/// `content/<path>` within `range` (`[start, end)` in UTF-16 code units, as the web's offsets
/// are), or anywhere in the file without a range. `None` when the file or the excerpt is missing
/// or unreadable. The excerpt is checked, not `anchorHash`, whose FNV-1a variant is unknown.
pub(crate) fn anchor_matches(home: &Path, project: &str, target: &Value) -> Option<bool> {
    let path = target["path"].as_str()?;
    let excerpt = target["excerpt"].as_str().filter(|e| !e.is_empty())?;
    let bytes = read_content(home, project, path).ok().flatten()?;
    let text = String::from_utf8(bytes).ok()?;
    let Some(range) = target["range"].as_array() else {
        return Some(text.contains(excerpt));
    };
    let bound =
        |i: usize| range.get(i).and_then(Value::as_u64).and_then(|n| usize::try_from(n).ok());
    let (start, end) = (bound(0)?, bound(1)?);
    let units: Vec<u16> = text.encode_utf16().collect();
    let slice = units.get(start..end.min(units.len()))?;
    Some(String::from_utf16_lossy(slice).contains(excerpt))
}
