//! `session-archive.ts` (Hn `@0d943da`): the stdin payload (`parsePayload`), the status
//! normalisation, and `sessions/S-NNN-REPORT.md` as `buildReport` writes it.
//!
//! The facts upstream reads from other files (the measured cost window of the cost log,
//! `.status.json`'s operator turns, `session-diff.json`'s changed files, `config.json`) come in
//! as values. Does not read files or the store.

use serde_json::Value;

use super::shell::{first_content_line, section_text, strip_placeholders};
pub(crate) use crate::kernel::compat::js::to_fixed_2;
use crate::kernel::compat::js::{number_string as js_string, parse_number};
use crate::kernel::compat::text as js;

/// The payload keys `parsePayload` recognises, in its matching order.
pub(crate) const PAYLOAD_KEYS: [&str; 9] = [
    "Status",
    "Blockers",
    "Lessons",
    "Changed",
    "Artifacts",
    "Cost",
    "Closed Via",
    "Next Start Point",
    "Task",
];
/// `contentLines`: at most this many digest lines per list.
pub(crate) const DIGEST_ITEMS_MAX: usize = 6;
/// `contentLines`: a longer line is clipped (UTF-16 units).
pub(crate) const DIGEST_UNITS_MAX: usize = 150;
/// The statuses a report may carry.
pub(crate) const STATUSES: [&str; 3] = ["completed", "partial", "blocked"];
/// `resolveEscalation`'s values.
pub(crate) const ESCALATIONS: [&str; 3] = ["conservative", "balanced", "autonomous"];

/// A parsed payload: the keys in the order first seen, and the `## Plan` capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Payload {
    /// `(key, value)`, values trimmed, `none` read as empty.
    pub(crate) fields: Vec<(String, String)>,
    /// Everything after a `## Plan` line, trimmed (absent when empty).
    pub(crate) plan: Option<String>,
}

impl Payload {
    /// A key's value (`payload[key] || ''`).
    #[must_use]
    pub(crate) fn get(&self, key: &str) -> &str {
        self.fields.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v.as_str())
    }

    /// Whether nothing was recognised (`payload-unparseable`).
    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.plan.is_none()
    }
}

fn is_terminator(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

/// `^<Key>:\s*(.*)$` on one line: the value, or `None`.
fn key_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(key)?.strip_prefix(':')?;
    let value = js::trim_start(rest);
    (!value.contains(is_terminator)).then_some(value)
}

/// `parsePayload`.
#[must_use]
pub(crate) fn parse_payload(stdin: &str) -> Payload {
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut current: Option<usize> = None;
    let mut plan = None;
    let lines: Vec<&str> = stdin.split('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        if js::trim(line) == "## Plan" {
            plan = Some(js::trim(&lines[i + 1..].join("\n")).to_owned());
            break;
        }
        let hit = PAYLOAD_KEYS.iter().find_map(|k| key_value(line, k).map(|v| (*k, v)));
        match (hit, current) {
            (Some((key, value)), _) => {
                match fields.iter().position(|(k, _)| k == key) {
                    Some(at) => fields[at].1 = value.to_owned(),
                    None => fields.push((key.to_owned(), value.to_owned())),
                }
                current = fields.iter().position(|(k, _)| k == key);
            }
            (None, Some(at)) => {
                let value = &mut fields[at].1;
                if value.is_empty() {
                    (*line).clone_into(value);
                } else {
                    value.push('\n');
                    value.push_str(line);
                }
            }
            (None, None) => {}
        }
    }
    for (_, value) in &mut fields {
        let trimmed = js::trim(value);
        *value =
            if trimmed.eq_ignore_ascii_case("none") { String::new() } else { trimmed.to_owned() };
    }
    Payload { fields, plan: plan.filter(|p| !p.is_empty()) }
}

/// `normalizeStatus`: the status, and the note a value outside the three earns.
#[must_use]
pub(crate) fn normalise_status(raw: &str) -> (String, Option<String>) {
    let v = js::trim(raw).to_lowercase();
    if STATUSES.contains(&v.as_str()) {
        return (v, None);
    }
    let note = (!v.is_empty())
        .then(|| format!("Status normalized: original value `{raw}` coerced to `partial`."));
    ("partial".into(), note)
}

/// `/\$([\d,]+(?:\.\d+)?)\s*\(([\d,]+)\s*tokens?\)/` from one `$`: the amount and tokens.
fn cost_at(text: &str) -> Option<(&str, &str)> {
    let run = |t: &str, f: fn(char) -> bool| t.find(|c: char| !f(c)).unwrap_or(t.len());
    let money = |c: char| c.is_ascii_digit() || c == ',';
    let digits = |c: char| c.is_ascii_digit();
    let int = run(text, money);
    if int == 0 {
        return None;
    }
    let mut amount = int;
    if let Some(frac) = text[int..].strip_prefix('.') {
        let n = run(frac, digits);
        if n > 0 {
            amount += 1 + n;
        }
    }
    let rest = js::trim_start(&text[amount..]).strip_prefix('(')?;
    let tokens = run(rest, money);
    let tail = js::trim_start(&rest[tokens..]).strip_prefix("token")?;
    let tail = tail.strip_prefix('s').unwrap_or(tail);
    (tokens > 0 && tail.starts_with(')')).then(|| (&text[..amount], &rest[..tokens]))
}

/// The session's cost: measured, else the payload's `Cost: $N (M tokens)` line, else zero.
#[must_use]
pub(crate) fn cost(payload: &Payload, measured: Option<(f64, f64)>) -> (f64, f64) {
    if let Some(measured) = measured {
        return measured;
    }
    let line = payload.get("Cost");
    let found = line.match_indices('$').find_map(|(i, _)| cost_at(&line[i + 1..]));
    let Some((amount, tokens)) = found else { return (0.0, 0.0) };
    let parse = |t: &str| t.replace(',', "").parse::<f64>().unwrap_or(f64::NAN);
    (
        crate::kernel::compat::js::math_round(parse(amount) * 10_000.0) / 10_000.0,
        parse(tokens).trunc(),
    )
}

/// `formatDuration`.
#[must_use]
pub(crate) fn format_duration(ms: i64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "a session's milliseconds")]
    let minutes = crate::kernel::compat::js::math_round(ms as f64 / 60_000.0).max(0.0);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "non-negative, small"
    )]
    let minutes = minutes as u64;
    let (h, m) = (minutes / 60, minutes % 60);
    if h > 0 {
        format!("{h}h {m}m")
    } else {
        format!("{m}m")
    }
}

/// `yamlArray`.
#[must_use]
pub(crate) fn yaml_array(items: &[String]) -> String {
    let bare = |s: &str| {
        let mut chars = s.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
            && chars.all(|c| js::is_word(c) || c == '.' || c == '/' || c == '-')
    };
    let shown: Vec<String> = items
        .iter()
        .map(|s| if bare(s) { s.clone() } else { Value::from(s.as_str()).to_string() })
        .collect();
    format!("[{}]", shown.join(", "))
}

/// `contentLines`: a section's digest lines.
#[must_use]
pub(crate) fn content_lines(text: &str) -> Vec<String> {
    text.split('\n')
        .map(|l| {
            let l = js::trim(l);
            match l.strip_prefix('-') {
                Some(rest) if rest.starts_with(js::is_js_whitespace) => {
                    js::trim_start(rest).to_owned()
                }
                _ => l.to_owned(),
            }
        })
        .filter(|l| !l.is_empty() && !l.starts_with("<!--"))
        .take(DIGEST_ITEMS_MAX)
        .map(|l| {
            if js::length(&l) > DIGEST_UNITS_MAX {
                format!("{}…", js::slice_units(&l, DIGEST_UNITS_MAX - 1))
            } else {
                l
            }
        })
        .collect()
}

/// `extractTags`: the text after `**Tags:**` (and any whitespace, newlines included, as
/// upstream's `\s*` takes them) to the end of its line, placeholders stripped, split on commas.
#[must_use]
pub(crate) fn tags(shell: &str) -> Vec<String> {
    let Some(at) = shell.find("**Tags:**") else { return Vec::new() };
    let rest = js::trim_start(&shell[at + "**Tags:**".len()..]);
    let line = rest.split(is_terminator).next().unwrap_or_default();
    let raw = strip_placeholders(line);
    raw.split(',').map(|s| js::trim(s).to_owned()).filter(|s| !s.is_empty()).collect()
}

/// `extractProposalIds`: every distinct `PROP-[a-z0-9][a-z0-9-]*` (any case), first seen first.
#[must_use]
pub(crate) fn proposal_ids(shell: &str) -> Vec<String> {
    let bytes = shell.as_bytes();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while let Some(found) =
        shell[i..].char_indices().find(|(_, c)| *c == 'P' || *c == 'p').map(|(j, _)| i + j)
    {
        let head = bytes.get(found..found + 5).filter(|h| h.eq_ignore_ascii_case(b"PROP-"));
        let first = bytes.get(found + 5).filter(|b| b.is_ascii_alphanumeric());
        if head.is_some() && first.is_some() {
            let len = bytes[found + 5..]
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-')
                .count();
            let id = &shell[found..found + 5 + len];
            if !out.iter().any(|o| o == id) {
                out.push(id.to_owned());
            }
            i = found + 5 + len;
        } else {
            i = found + 1;
        }
    }
    out
}

/// `**Started:** YYYY-MM-DD HH:MM`, when SHELL.md has it.
#[must_use]
pub(crate) fn started(shell: &str) -> Option<&str> {
    let at = shell.find("**Started:**")?;
    let rest = js::trim_start(&shell[at + "**Started:**".len()..]);
    let stamp = rest.get(..16)?;
    let b = stamp.as_bytes();
    let shape = b.iter().enumerate().all(|(i, c)| match i {
        4 | 7 => *c == b'-',
        10 => *c == b' ',
        13 => *c == b':',
        _ => c.is_ascii_digit(),
    });
    shape.then_some(stamp)
}

/// What `buildReport` writes a report from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReportInput<'a> {
    /// `S-NNN`.
    pub(crate) session_id: &'a str,
    /// `idle`, `close` or `auto`.
    pub(crate) mode: &'a str,
    /// The payload.
    pub(crate) payload: &'a Payload,
    /// SHELL.md before the reset.
    pub(crate) shell: &'a str,
    /// zonedISOStamp of now in `config.timezone`.
    pub(crate) date: &'a str,
    /// `formatDuration` of the session, `0m` without a Started line.
    pub(crate) duration: &'a str,
    /// `(cost_usd, tokens)` (see [`cost`]).
    pub(crate) cost: (f64, f64),
    /// `config.escalation`, when one of [`ESCALATIONS`].
    pub(crate) escalation: &'a str,
    /// `.status.json`'s `operator_turns`, or 0.
    pub(crate) operator_turns: f64,
    /// `session-diff.json`'s `changed_files` as `(file, status)`.
    pub(crate) changed_files: &'a [(String, String)],
}

fn merge_diff(changed: &str, files: &[(String, String)]) -> String {
    let existing: Vec<&str> = changed.split('\n').map(js::trim).filter(|l| !l.is_empty()).collect();
    let new: Vec<String> = files
        .iter()
        .map(|(file, status)| format!("- `{file}` ({status})"))
        .filter(|l| !existing.contains(&l.as_str()))
        .collect();
    match (new.is_empty(), changed.is_empty()) {
        (true, _) => changed.to_owned(),
        (false, true) => new.join("\n"),
        (false, false) => format!("{changed}\n{}", new.join("\n")),
    }
}

fn quoted(text: &str) -> String {
    Value::from(text).to_string()
}

/// The placeholders of an empty report section (`buildReport`).
pub(crate) const PLACEHOLDERS: [(&str, &str); 7] = [
    ("Overview", "<!-- One-line task description -->"),
    ("Changed", "<!-- Files modified/created/deleted -->"),
    (
        "Artifacts",
        "<!-- Links to durable outputs written to compiled/ (cite as \
         [[compiled/<type>-<slug>-<date>]]) -->",
    ),
    ("Blockers", "<!-- What couldn't be resolved -->"),
    ("Lessons", "<!-- Genuinely useful insights (not obvious statements) -->"),
    ("Proposals Created", "<!-- Links to any proposals generated during this session -->"),
    ("Next Start Point", "<!-- Exactly what the next session should do first -->"),
];
/// The Completed section, always a placeholder.
pub(crate) const COMPLETED: &str = "## Completed\n<!-- What was accomplished (narrative). Durable \
                             outputs must also be listed under ## Artifacts. -->";

/// The values a report shows, gathered from the payload and SHELL.md.
struct Shown<'a> {
    status: String,
    task: String,
    proposals: Vec<String>,
    closed_via: &'a str,
    blockers: String,
    changed: String,
    next: &'a str,
}

fn gather<'a>(r: &ReportInput<'a>) -> Shown<'a> {
    let (status, note) = normalise_status(r.payload.get("Status"));
    let closed_via = match r.payload.get("Closed Via") {
        "" if r.mode == "auto" => "auto",
        "" => "operator",
        via => via,
    };
    let mut blockers = r.payload.get("Blockers").to_owned();
    if let Some(note) = note {
        blockers = if blockers.is_empty() { note } else { format!("{blockers}\n{note}") };
    }
    Shown {
        status,
        task: first_content_line(&section_text(r.shell, "Task"), 120),
        proposals: proposal_ids(r.shell),
        closed_via,
        blockers,
        changed: merge_diff(r.payload.get("Changed"), r.changed_files),
        next: if r.mode == "idle" { "" } else { r.payload.get("Next Start Point") },
    }
}

fn frontmatter(r: &ReportInput<'_>, s: &Shown<'_>) -> String {
    let digest = |text: &str| yaml_array(&content_lines(text));
    [
        "---".to_owned(),
        format!("id: {}", r.session_id),
        format!("status: {}", s.status),
        format!("date: {}", r.date),
        format!("duration: {}", r.duration),
        format!("cost_usd: {}", js_string(r.cost.0)),
        format!("tokens: {}", js_string(r.cost.1)),
        format!("tags: {}", yaml_array(&tags(r.shell))),
        format!("proposals_created: {}", yaml_array(&s.proposals)),
        format!("task: {}", quoted(&s.task)),
        format!("artifacts: {}", digest(r.payload.get("Artifacts"))),
        format!("blockers: {}", digest(&s.blockers)),
        format!("lessons: {}", digest(r.payload.get("Lessons"))),
        format!("next_start: {}", quoted(&first_content_line(s.next, 200))),
        format!("escalation: {}", r.escalation),
        format!("operator_turns: {}", js_string(r.operator_turns)),
        format!("closed_via: {}", s.closed_via),
        "---".to_owned(),
    ]
    .join("\n")
}

fn section(heading: &str, text: &str) -> String {
    let placeholder = PLACEHOLDERS.iter().find(|(h, _)| *h == heading).map_or("", |(_, p)| p);
    format!("## {heading}\n{}", if text.is_empty() { placeholder } else { text })
}

/// `buildReport`: the report's text.
#[must_use]
pub(crate) fn render(r: &ReportInput<'_>) -> String {
    let s = gather(r);
    let mut sections =
        vec![format!("# Session Report: {}", r.session_id), section("Overview", &s.task)];
    if let Some(plan) = &r.payload.plan {
        sections.push(format!("## Plan\n{plan}"));
    }
    sections.push(COMPLETED.to_owned());
    sections.push(section("Changed", &s.changed));
    sections.push(section("Artifacts", r.payload.get("Artifacts")));
    sections.push(section("Blockers", &s.blockers));
    sections.push(section("Lessons", r.payload.get("Lessons")));
    let listed: Vec<String> = s.proposals.iter().map(|p| format!("- {p}")).collect();
    sections.push(section("Proposals Created", &listed.join("\n")));
    if r.mode != "idle" {
        sections.push(section("Next Start Point", s.next));
    }
    format!("{}\n\n{}\n", frontmatter(r, &s), sections.join("\n\n"))
}

/// `recoveredReportCost`: the `cost_usd` a written report's frontmatter holds (as the shared
/// frontmatter parser reads it), 0 when it does not read as a finite number.
#[must_use]
pub(crate) fn report_cost(text: &str) -> f64 {
    let Some(end) = text.strip_prefix("---").and_then(|rest| rest.find("\n---")) else {
        return 0.0;
    };
    let value = text[3..3 + end].split('\n').find_map(|l| {
        let v = l.strip_prefix("cost_usd").filter(|v| !v.starts_with(js::is_word))?;
        let v = js::trim(js::trim_start(v).strip_prefix(':')?);
        let comment =
            v.match_indices('#').map(|(i, _)| i).find(|i| v[..*i].ends_with(js::is_js_whitespace));
        let v = comment.map_or(v, |i| js::trim_end(&v[..i]));
        let v = v.strip_prefix(['"', '\'']).unwrap_or(v);
        Some(v.strip_suffix(['"', '\'']).unwrap_or(v).to_owned())
    });
    let n = value.map_or(f64::NAN, |v| parse_number(&v));
    if n.is_finite() {
        n
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
