//! The text the moonshine Stop hook prints: the `{"decision":"block","reason":…}` object, built
//! byte for byte as the upstream bash + jq hook builds it from the comments a drain claimed.
//!
//! Pure formatting over drain results. Does not claim anything or read files.

use hookstate_schema::feedback::{JsonDoc, Style};
use serde_json::Value;

use crate::legacy::json::{render, string};

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

fn entry(out: &mut String, n: usize, project: &str, claimed: &Value, reply: Reply<'_>) {
    let Reply { home, via, command } = reply;
    let target = &claimed["target"];
    let kind = field(target, "kind").unwrap_or_else(|| "?".into());
    let path = field(target, "path").unwrap_or_else(|| "?".into());
    let figure = field(target, "figureId").filter(|f| !f.is_empty());
    let excerpt = field(target, "excerpt").unwrap_or_default();
    let comment = claimed["comment"].as_str().unwrap_or_default().trim_end_matches('\n');
    let id = claimed["id"].as_str().unwrap_or_default();
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
            claimed["token"]
        )),
    }
}

/// The Stop hook's stdout for the drain results of every project (`project`, `claimed`,
/// `listen_waiting`), with `home` the moonshine root: `None` when it allows the stop. `command`
/// starts the reply command handed to the session (`hookstate`, plus `--db PATH` when the store
/// is not the default one), so the reply reaches the store the comment was claimed from.
#[must_use]
pub fn stop_reason(results: &[Value], home: &str, via: ReplyVia, command: &str) -> Option<String> {
    let reply = Reply { home, via, command };
    let mut comments = String::new();
    let mut count = 0;
    let mut waiting = String::new();
    for result in results {
        let project = result["project"].as_str().unwrap_or_default();
        for claimed in result["claimed"].as_array().into_iter().flatten() {
            count += 1;
            entry(&mut comments, count, project, claimed, reply);
        }
        if result["listen_waiting"].as_bool() == Some(true) {
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
