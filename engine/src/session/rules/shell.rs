//! `sessions/SHELL.md`: the `## <heading>` section grammar of `lib/md-write.ts` (H), the
//! appends (`proposal.ts shell-append`, the Monitoring lines of an alerts tick, the Findings line
//! of `proposal.ts create`), and `session-archive`'s resets (`idleReset`, `closeReset`,
//! `compactSection`).
//!
//! Every function is upstream's string arithmetic over the file's text, so the bytes written are
//! the bytes upstream writes. Does not read files or the store.

use std::cmp::Ordering;

use hookstate_schema::session::{SessionEvent, ShellReset};

use super::verdict::{error_line, Class, Decided, Decision, Verdict};
use crate::kernel::compat::text as js;

/// `shell-append --section` names and their headings (`monitoring` and `blockers` are the newer
/// Hn revision's).
pub(crate) const SECTIONS: [(&str, &str); 4] = [
    ("findings", "Findings"),
    ("progress", "Progress Log"),
    ("monitoring", "Monitoring"),
    ("blockers", "Blockers"),
];
/// `closeReset`'s template when `templates/SHELL.md.template` is missing.
pub(crate) const FALLBACK_TEMPLATE: &str = "# Active Session\n\n## Session Info\n\
    - **ID:** S-NNN (assigned on close)\n- **Started:** YYYY-MM-DD HH:MM\n- **Tags:** \n\
    - **Tasks Completed:** 0\n- **Session Mode:** \n\n## Task\n\n## Progress Log\n\n\
    ## Blockers\n\n## Findings\n\n## Changed\n\n## Monitoring\n\n## Session Summary\n";
/// The bodies `idleReset` puts in the sections it empties.
pub(crate) const IDLE_BODIES: [(&str, &str); 5] = [
    ("Task", "\n<!-- Awaiting next task -->\n\n"),
    (
        "Progress Log",
        "\n<!-- Primary record of work -->\n<!-- Format: [HH:MM] Did X — result/outcome -->\n\n",
    ),
    (
        "Blockers",
        "\n<!-- What's preventing progress? Include enough context for the next session. \
         -->\n\n",
    ),
    (
        "Findings",
        "\n<!-- Anything unexpected found during work. Proposal-worthy items get their own \
         file. -->\n\n",
    ),
    ("Changed", "\n<!-- Populated by session-diff hook, or list files manually -->\n\n"),
];
const TASKS_COMPLETED: &str = "**Tasks Completed:**";

fn is_terminator(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

/// `findSection`: the body span `[start, end)` of the first line `## <heading>` (trailing spaces
/// and tabs allowed), ending before the next `\n## ` or at the end.
#[must_use]
pub(crate) fn find_section(content: &str, heading: &str) -> Option<(usize, usize)> {
    let needle = format!("## {heading}");
    let mut from = 0;
    while let Some(i) = content[from..].find(&needle).map(|i| from + i) {
        let line_start = i == 0 || content[..i].ends_with(is_terminator);
        let after = &content[i + needle.len()..];
        let spaces = after.len() - after.trim_start_matches([' ', '\t']).len();
        let rest = &after[spaces..];
        if line_start && (rest.is_empty() || rest.starts_with(is_terminator)) {
            let start = i + needle.len() + spaces;
            let end = content[start..].find("\n## ").map_or(content.len(), |j| start + j);
            return Some((start, end));
        }
        from = i + 1;
        while !content.is_char_boundary(from) {
            from += 1;
        }
    }
    None
}

/// `extractSection` (md-write): the body with one leading line break removed.
#[must_use]
pub(crate) fn extract_section(content: &str, heading: &str) -> Option<String> {
    let (start, end) = find_section(content, heading)?;
    let body = &content[start..end];
    let body = body.strip_prefix("\r\n").or_else(|| body.strip_prefix('\n')).unwrap_or(body);
    Some(body.to_owned())
}

/// `session-archive`'s `extractSection`: the body trimmed, empty when the section is missing.
#[must_use]
pub(crate) fn section_text(content: &str, heading: &str) -> String {
    extract_section(content, heading).map(|b| js::trim(&b).to_owned()).unwrap_or_default()
}

/// `replaceSectionInPlace`: the body replaced by `body` (which carries its own leading newline);
/// the text unchanged when the heading is missing.
#[must_use]
pub(crate) fn replace_section(content: &str, heading: &str, body: &str) -> String {
    match find_section(content, heading) {
        Some((start, end)) => format!("{}{body}{}", &content[..start], &content[end..]),
        None => content.to_owned(),
    }
}

/// `appendToSection`: `line` at the section's end, one newline before it, the blank line before
/// the next heading kept; `None` when the heading is missing.
#[must_use]
pub(crate) fn append_to_section(content: &str, heading: &str, line: &str) -> Option<String> {
    let (_, end) = find_section(content, heading)?;
    let before = content[..end].trim_end_matches('\n');
    let after = content[end..].trim_start_matches('\n');
    let glue = if end == content.len() { "\n" } else { "\n\n" };
    Some(format!("{before}\n{line}{glue}{after}"))
}

/// `firstContentLine`: the first trimmed line that is not empty or a `<!--` placeholder,
/// clipped to `units` UTF-16 units (0: unclipped).
#[must_use]
pub(crate) fn first_content_line(section: &str, units: usize) -> String {
    for line in section.split('\n') {
        let trimmed = js::trim(line);
        if trimmed.is_empty() || trimmed.starts_with("<!--") {
            continue;
        }
        return if units == 0 { trimmed.to_owned() } else { js::slice_units(trimmed, units) };
    }
    String::new()
}

/// `stripPlaceholders`: `<!-- … -->` comments removed, then trimmed.
#[must_use]
pub(crate) fn strip_placeholders(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find("<!--") {
        match rest[open + 4..].find("-->") {
            Some(close) => {
                out.push_str(&rest[..open]);
                rest = &rest[open + 4 + close + 3..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    js::trim(&out).to_owned()
}

/// `proposal.ts shell-append <dir> --section findings|progress|monitoring|blockers` (stdin: the
/// line): `OK`, or `ERROR|unknown-section|empty-line|shell-unreadable|shell-append-failed`.
///
/// # Errors
/// The four tokens, printed `ERROR|…` with exit 0.
pub(crate) fn decide_append(shell: Option<&str>, section: Option<&str>, stdin: &str) -> Decision {
    let line = js::trim(stdin);
    let Some((_, heading)) = SECTIONS.iter().find(|(name, _)| Some(*name) == section) else {
        return Err(error_line("unknown-section", Class::Invalid, 0));
    };
    if line.is_empty() {
        return Err(error_line("empty-line", Class::Invalid, 0));
    }
    let Some(shell) = shell else {
        return Err(error_line("shell-unreadable", Class::Invalid, 0));
    };
    if find_section(shell, heading).is_none() {
        return Err(error_line("shell-append-failed", Class::Invalid, 0));
    }
    let event =
        SessionEvent::ShellAppended { section: (*heading).to_owned(), line: line.to_owned() };
    Ok(Decided { events: vec![event], verdict: Verdict::line("OK") })
}

/// The Monitoring lines of an alerts tick, appended in order until the first failure: the
/// events, how many landed, and upstream's error string (`append_error`).
#[must_use]
pub(crate) fn monitoring_lines(
    shell: Option<&str>,
    lines: &[String],
) -> (Vec<SessionEvent>, usize, Option<String>) {
    let Some(shell) = shell else {
        let error = (!lines.is_empty()).then(|| "SHELL.md unreadable".to_owned());
        return (Vec::new(), 0, error);
    };
    if find_section(shell, "Monitoring").is_none() && !lines.is_empty() {
        let error = "SHELL.md has no ## Monitoring section: no ## Monitoring section".to_owned();
        return (Vec::new(), 0, Some(error));
    }
    let events: Vec<SessionEvent> = lines
        .iter()
        .map(|l| SessionEvent::ShellAppended { section: "Monitoring".into(), line: l.clone() })
        .collect();
    let count = events.len();
    (events, count, None)
}

/// The Findings line `proposal.ts create` appends: `- <id>: <findings summary or title>`.
#[must_use]
pub(crate) fn findings_line(id: &str, findings: &str, title: &str) -> SessionEvent {
    let text = if findings.is_empty() { title } else { findings };
    SessionEvent::ShellAppended { section: "Findings".into(), line: format!("- {id}: {text}") }
}

/// JavaScript's default string order: UTF-16 code units.
fn js_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// The first `(\d+)\s+<word>` of `text`.
fn count_before(text: &str, word: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    (0..bytes.len()).find_map(|i| {
        let digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        let rest = text.get(i + digits..)?;
        let spaced = rest.trim_start_matches(js::is_js_whitespace);
        let ok = digits > 0 && spaced.len() < rest.len() && spaced.starts_with(word);
        ok.then(|| text[i..i + digits].parse().unwrap_or(u64::MAX))
    })
}

/// `/\[([^\]]+)\]/`: the first non-empty bracketed text.
fn first_bracketed(line: &str) -> Option<&str> {
    for (open, _) in line.match_indices('[') {
        let inner = &line[open + 1..];
        match inner.find(']') {
            Some(0) => {}
            Some(close) => return Some(&inner[..close]),
            None => return None,
        }
    }
    None
}

/// `/\(([^)]+)\)\s*$/`: the parenthesised tail of `text`.
fn range_of(text: &str) -> Option<&str> {
    let body = js::trim_end(text).strip_suffix(')')?;
    let from = body.rfind(')').map_or(0, |i| i + 1);
    let open = body[from..].find('(').map(|i| from + i)?;
    Some(&body[open + 1..]).filter(|inner| !inner.is_empty())
}

/// What the existing `[Earlier]` lines of a section hold: counts (alerts, self-evals, entries),
/// the merged `(first, last)` range, and the other content lines.
type Earlier<'a> = ([u64; 3], Option<(String, Option<String>)>, Vec<&'a str>);

fn read_earlier<'a>(content: &[&'a str]) -> Earlier<'a> {
    let (mut counts, mut range): ([u64; 3], Option<(String, Option<String>)>) = ([0; 3], None);
    let mut plain: Vec<&str> = Vec::new();
    for line in content {
        let trimmed = js::trim(line);
        let earlier = trimmed
            .strip_prefix("[Earlier]")
            .filter(|r| r.starts_with(js::is_js_whitespace))
            .filter(|r| !js::trim_start(r).contains(is_terminator));
        let Some(rest) = earlier.map(js::trim_start) else {
            plain.push(line);
            continue;
        };
        for (slot, word) in counts.iter_mut().zip(["alert", "self-eval", "entries"]) {
            *slot += count_before(rest, word).unwrap_or(0);
        }
        if let Some(inner) = range_of(rest) {
            let mut parts = inner.split('—').map(|p| js::trim(p).to_owned());
            let (mut first, mut last) = (parts.next().unwrap_or_default(), parts.next());
            if let Some((prev_first, prev_last)) = &range {
                if js_cmp(prev_first, &first) == Ordering::Less {
                    first.clone_from(prev_first);
                }
                if let (Some(p), Some(l)) = (prev_last, &last) {
                    if js_cmp(p, l) == Ordering::Greater {
                        last = Some(p.clone());
                    }
                }
            }
            range = Some((first, last));
        }
    }
    (counts, range, plain)
}

/// `compactSection`: above `threshold` content lines, all but the last `keep` roll up into one
/// `[Earlier] N alerts, N self-evals, N entries (first — last)` line, merged with an earlier one.
#[must_use]
pub(crate) fn compact_section(body: &str, threshold: u64, keep: u64) -> String {
    let content: Vec<&str> = body
        .split('\n')
        .filter(|l| !js::trim(l).is_empty() && !js::trim(l).starts_with("<!--"))
        .collect();
    if u64::try_from(content.len()).unwrap_or(u64::MAX) <= threshold {
        return body.to_owned();
    }
    let (mut counts, range, plain) = read_earlier(&content);
    let keep = usize::try_from(keep).unwrap_or(usize::MAX).min(plain.len());
    let (summarise, kept) = plain.split_at(plain.len() - keep);
    if summarise.is_empty() && counts.iter().all(|c| *c == 0) {
        return body.to_owned();
    }
    let mut stamps: Vec<Option<String>> = range.map(|(f, l)| vec![Some(f), l]).unwrap_or_default();
    for line in summarise {
        let lower = line.to_ascii_lowercase();
        let slot = if lower.contains("alert") {
            0
        } else if lower.contains("self-eval") {
            1
        } else {
            2
        };
        counts[slot] += 1;
        if let Some(stamp) = first_bracketed(line) {
            stamps.push(Some(stamp.to_owned()));
        }
    }
    stamps.sort_by(|a, b| match (a, b) {
        (Some(a), Some(b)) => js_cmp(a, b),
        (None, None) => Ordering::Equal,
        (None, _) => Ordering::Greater,
        (_, None) => Ordering::Less,
    });
    let first = stamps.first().cloned().flatten().unwrap_or_default();
    let last = stamps.last().cloned().flatten().unwrap_or_default();
    let parts: Vec<String> = counts
        .iter()
        .zip(["alerts", "self-evals", "entries"])
        .filter(|(c, _)| **c > 0)
        .map(|(c, name)| format!("{c} {name}"))
        .collect();
    let span = if first.is_empty() || last.is_empty() {
        String::new()
    } else {
        format!(" ({first} — {last})")
    };
    let summary = format!("[Earlier] {}{span}", parts.join(", "));
    std::iter::once(summary.as_str()).chain(kept.iter().copied()).collect::<Vec<_>>().join("\n")
}

/// The first `**Tasks Completed:**<spaces><digits>` of the text: its span and number.
fn tasks_completed(text: &str) -> Option<(usize, usize, u64)> {
    let mut from = 0;
    while let Some(i) = text[from..].find(TASKS_COMPLETED).map(|i| from + i) {
        let after = &text[i + TASKS_COMPLETED.len()..];
        let spaced = after.trim_start_matches(js::is_js_whitespace);
        let digits = spaced.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            let end = text.len() - spaced.len() + digits;
            return Some((i, end, spaced[..digits].parse().unwrap_or(u64::MAX)));
        }
        from = i + TASKS_COMPLETED.len();
    }
    None
}

/// `idleReset`: Tasks Completed +1, the five work sections emptied, Monitoring compacted, and a
/// `**S-NNN** (date): task — status ($cost)` line added to the (compacted) Session Summary.
#[must_use]
pub(crate) fn idle_reset(shell: &str, reset: &ShellReset) -> String {
    let ShellReset::Idle {
        session_id,
        date,
        status,
        cost,
        monitoring_threshold,
        monitoring_keep,
        summary_threshold,
        summary_keep,
    } = reset
    else {
        return shell.to_owned();
    };
    let task = first_content_line(&section_text(shell, "Task"), 80);
    let mut out = shell.to_owned();
    if let Some((start, end, n)) = tasks_completed(&out) {
        out = format!("{}{TASKS_COMPLETED} {}{}", &out[..start], n.saturating_add(1), &out[end..]);
    }
    for (heading, body) in IDLE_BODIES {
        out = replace_section(&out, heading, body);
    }
    let monitoring = section_text(&out, "Monitoring");
    let compacted = compact_section(&monitoring, *monitoring_threshold, *monitoring_keep);
    if compacted != monitoring {
        out = replace_section(&out, "Monitoring", &format!("\n{compacted}\n\n"));
    }
    let summary = section_text(&out, "Session Summary");
    let task = if task.is_empty() { "(no task summary)".to_owned() } else { task };
    let line = format!("**{session_id}** ({date}): {task} — {status} (${cost})");
    let with_line = if summary.is_empty() { line } else { format!("{summary}\n{line}") };
    let compacted = compact_section(&with_line, *summary_threshold, *summary_keep);
    replace_section(&out, "Session Summary", &format!("\n{compacted}\n\n"))
}

/// `closeReset`: the template (or upstream's fallback) with the old Blockers carried over.
#[must_use]
pub(crate) fn close_reset(shell: &str, template: Option<&str>) -> String {
    let template = template.unwrap_or(FALLBACK_TEMPLATE);
    let blockers = section_text(shell, "Blockers");
    if blockers.is_empty() {
        template.to_owned()
    } else {
        replace_section(template, "Blockers", &format!("\n{blockers}\n\n"))
    }
}

/// The file after an event (`None`: no file).
pub(crate) fn apply(shell: &mut Option<String>, event: &SessionEvent) {
    match event {
        SessionEvent::ShellAppended { section, line } => {
            if let Some(next) = shell.as_deref().and_then(|s| append_to_section(s, section, line)) {
                *shell = Some(next);
            }
        }
        SessionEvent::ShellWritten { text, append: false } => *shell = Some(text.clone()),
        SessionEvent::ShellWritten { text, append: true } => {
            shell.get_or_insert_with(String::new).push_str(text);
        }
        SessionEvent::ShellReset { reset } => {
            let current = shell.clone().unwrap_or_default();
            *shell = Some(match reset {
                ShellReset::Idle { .. } => idle_reset(&current, reset),
                ShellReset::Close { template } => close_reset(&current, template.as_deref()),
            });
        }
        _ => {}
    }
}

#[cfg(test)]
pub(crate) mod tests;

/// Test fixtures shared with the archive tests.
#[cfg(test)]
pub(crate) mod tests_support {
    pub(crate) use super::tests::SHELL;
}
