//! `observations.ts observe` (H `scripts/observations.ts`, `lib/observations.ts`) and
//! `prune-observations.js` (H): the row rules (sources, origins, a trimmed single-line pattern of
//! at most 200 UTF-16 units), the append, and the 30-day prune that keeps a pattern's whole
//! history while any row of it is fresh.
//!
//! Upstream's prune reads, filters and renames with no lock, so an append landing in between is
//! lost; here the prune is one event naming the lines it drops, and a later append is a later
//! event. The ledger is kept as one row per line ([`Lines`]), so an append writes one row.
//! Does not read files or the store.

use hookstate_schema::session::{JsonDoc, Ledger, LineFile, SessionEvent};
use serde_json::{Map, Value};

use super::verdict::{error_line, Class, Decided, Decision, Refusal, Stream, Verdict};
use crate::kernel::compat::stamp;
use crate::kernel::compat::text as js;
use crate::legacy::json as legacy_json;

/// The sources `observations.ts` writes (model-authored labels).
pub(crate) const CLI_SOURCES: [&str; 5] = [
    "quick-deferral",
    "reflect-noticed",
    "skill-correction",
    "skill-preference",
    "skill-preference-applied",
];
/// The sources whose rows may carry an `origin`.
pub(crate) const ORIGIN_SOURCES: [&str; 5] = [
    "reflect-noticed",
    "skill-correction",
    "skill-preference",
    "skill-preference-applied",
    "startup-drift",
];
/// The origins.
pub(crate) const ORIGINS: [&str; 2] = ["own-work", "external-content"];
/// `MAX_PATTERN`: the grouping key's longest length, in UTF-16 units.
pub(crate) const PATTERN_UNITS_MAX: usize = 200;
/// `RETENTION_DAYS`: a row younger than this is fresh.
pub(crate) const RETENTION_DAYS: u64 = 30;
const DAY_MS: u64 = 86_400_000;

/// `appendFileSync(file, line + "\n")`: a torn last line is continued, as the file system does.
pub(crate) fn append(file: &mut LineFile, line: &str) {
    if file.lines.is_empty() {
        file.lines.push(String::new());
    }
    if let Some(tail) = file.lines.last_mut() {
        tail.push_str(line);
    }
    file.lines.push(String::new());
}

/// The usage line a mis-invocation prints on stderr (exit 1).
#[must_use]
pub(crate) fn usage() -> Refusal {
    let line = format!(
        "Usage: bun observations.ts observe <hermit-state-dir> <{}> \
         [--origin=own-work|external-content]\n       <label on stdin>",
        CLI_SOURCES.join("|")
    );
    let verdict = Verdict { lines: vec![line], stream: Stream::Stderr, upstream_exit: 1 };
    Refusal { token: "usage".into(), verdict, class: Class::Usage }
}

/// `flagEq(args, "origin")`: the value of the first `--origin=…`.
#[must_use]
pub(crate) fn origin_flag(args: &[String]) -> Option<&str> {
    args.iter().find_map(|a| a.strip_prefix("--origin="))
}

/// The `session_id` a row records: `runtime.json`'s, or `unknown` (H `resolveSessionId`).
#[must_use]
pub(crate) fn session_id(runtime: Option<&JsonDoc>) -> String {
    runtime
        .and_then(|r| legacy_json::str_field(r, "session_id"))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// `observationRow`: the row's compact JSON text, `ts` first.
///
/// # Errors
/// `empty-pattern`, `multiline-pattern`, `pattern-too-long:<n>`, `origin-not-allowed:<source>`,
/// `invalid-origin:<origin>` (printed `ERROR|…`, exit 0).
pub(crate) fn row(
    source: &str,
    label: &str,
    session: &str,
    origin: Option<&str>,
    now_ms: u64,
) -> Result<String, Refusal> {
    let fail = |token: String| Err(error_line(token, Class::Invalid, 0));
    let pattern = js::trim(label);
    if pattern.is_empty() {
        return fail("empty-pattern".into());
    }
    if pattern.contains('\n') {
        return fail("multiline-pattern".into());
    }
    let units = js::length(pattern);
    if units > PATTERN_UNITS_MAX {
        return fail(format!("pattern-too-long:{units}"));
    }
    if let Some(origin) = origin {
        if !ORIGIN_SOURCES.contains(&source) {
            return fail(format!("origin-not-allowed:{source}"));
        }
        if !ORIGINS.contains(&origin) {
            return fail(format!("invalid-origin:{origin}"));
        }
    }
    let mut map = Map::new();
    map.insert("ts".into(), Value::from(stamp::stamp_s(now_ms)));
    map.insert("pattern".into(), Value::from(pattern));
    map.insert("session_id".into(), Value::from(session));
    map.insert("source".into(), Value::from(source));
    if let Some(origin) = origin {
        map.insert("origin".into(), Value::from(origin));
    }
    Ok(crate::kernel::compat::js::compact(&Value::Object(map)))
}

/// `observations.ts observe <dir> <source> [--origin=…]` with the label on stdin.
///
/// # Errors
/// `invalid-source:<s>` and those of [`row`], each printed `ERROR|…` with exit 0.
pub(crate) fn decide_observe(
    source: &str,
    args: &[String],
    label: &str,
    runtime: Option<&JsonDoc>,
    now_ms: u64,
) -> Decision {
    if !CLI_SOURCES.contains(&source) {
        return Err(error_line(format!("invalid-source:{source}"), Class::Invalid, 0));
    }
    let line = row(source, label, &session_id(runtime), origin_flag(args), now_ms)?;
    let event = SessionEvent::LineAppended { ledger: Ledger::Observations, line };
    Ok(Decided { events: vec![event], verdict: Verdict::line("OK") })
}

/// A pattern as a `Set` compares it (`SameValueZero`): strings and numbers by value, `true`;
/// `None` for a falsy pattern (never added) and for objects (equal only to themselves).
fn pattern_key(value: &Value) -> Option<String> {
    match value.get("pattern")? {
        Value::String(s) if !s.is_empty() => Some(format!("s{s}")),
        Value::Number(n) => n.as_f64().filter(|x| *x != 0.0).map(|x| format!("n{x}")),
        Value::Bool(true) => Some("true".into()),
        _ => None,
    }
}

/// Which of `lines` (the ledger's non-blank lines) the prune keeps: unparseable lines and a
/// JSON `null` (reading its `ts` throws upstream), fresh rows, and every row of a fresh pattern.
#[must_use]
pub(crate) fn kept(lines: &[&str], cutoff: &str) -> Vec<bool> {
    let parsed: Vec<Result<Value, ()>> =
        lines.iter().map(|l| serde_json::from_str::<Value>(l).map_err(|_| ())).collect();
    let fresh = |v: &Value| v.get("ts").and_then(Value::as_str).is_some_and(|ts| ts >= cutoff);
    let fresh_patterns: Vec<String> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().filter(|v| fresh(v)).and_then(pattern_key))
        .collect();
    parsed
        .iter()
        .map(|p| match p {
            Err(()) | Ok(Value::Null) => true,
            Ok(v) => fresh(v) || pattern_key(v).is_some_and(|k| fresh_patterns.contains(&k)),
        })
        .collect()
}

/// Where a line of a ledger kept as one row per line sits: the seq of the event that wrote it
/// and its index among that event's lines, so positions follow the file's order and a projection
/// names a new line's row from its event alone.
#[must_use]
pub(crate) fn position(seq: u64, index: usize) -> u64 {
    (seq << LINE_INDEX_BITS) | u64::try_from(index).unwrap_or(0)
}

/// Bits of a position that number the lines of one event: an event is far smaller than 2^20
/// bytes, so it never carries 2^20 lines.
pub(crate) const LINE_INDEX_BITS: u32 = 20;

/// A ledger kept as one row per line: its newline-terminated lines by position, in file order,
/// and the unterminated tail. A projection holds only the rows an event touches; the rules and
/// the tests hold the whole ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Lines {
    /// `(position, line)`, ascending.
    pub(crate) lines: Vec<(u64, String)>,
    /// The text after the last newline.
    pub(crate) tail: String,
}

impl Lines {
    /// A ledger read from a file's lines (as [`LineFile`] splits them), written by event `seq`.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn of_file(file: &LineFile, seq: u64) -> Lines {
        let mut out = Lines::default();
        out.push_file(file, seq);
        out
    }

    fn push_file(&mut self, file: &LineFile, seq: u64) {
        let (tail, done) = file.lines.split_last().map_or(("", &[][..]), |(t, d)| (t.as_str(), d));
        for (i, line) in done.iter().enumerate() {
            self.lines.push((position(seq, i), line.clone()));
        }
        self.tail = tail.to_owned();
    }

    /// The file's text.
    #[must_use]
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        for (_, line) in &self.lines {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&self.tail);
        out
    }

    /// Applies one observations event appended at `seq`.
    pub(crate) fn apply(&mut self, event: &SessionEvent, seq: u64) {
        match event {
            SessionEvent::LineAppended { line, .. } => {
                let text = format!("{}{line}", std::mem::take(&mut self.tail));
                self.lines.push((position(seq, 0), text));
            }
            SessionEvent::TailAppended { text, .. } => self.tail.push_str(text),
            SessionEvent::LedgerAdopted { file, append, .. } => {
                if !append {
                    self.lines.clear();
                }
                self.push_file(file, seq);
            }
            SessionEvent::LinesDropped { positions } => {
                self.lines.retain(|(p, _)| !positions.contains(p));
            }
            SessionEvent::ObservationsPruned { dropped, tail, .. } => {
                self.lines.retain(|(p, _)| !dropped.contains(p));
                match tail {
                    Some(true) => {
                        let text = std::mem::take(&mut self.tail);
                        self.lines.push((position(seq, 0), text));
                    }
                    Some(false) => self.tail.clear(),
                    None => {}
                }
            }
            _ => {}
        }
    }
}

fn blank(line: &str) -> bool {
    js::trim(line).is_empty()
}

/// `prune-observations <dir>` over the ledger's lines and tail: drops rows older than
/// [`RETENTION_DAYS`] whose pattern has no fresh row; prints `pruned N, kept M`. The file is
/// rewritten only when something is dropped, and a rewrite drops the blank lines too and ends
/// the last kept line with a newline.
#[must_use]
pub(crate) fn decide_prune(ledger: &Lines, now_ms: u64) -> Decided {
    let cutoff = stamp::stamp_ms(now_ms.saturating_sub(RETENTION_DAYS * DAY_MS));
    let mut considered: Vec<(Option<u64>, &str)> = ledger
        .lines
        .iter()
        .filter(|(_, l)| !blank(l))
        .map(|(p, l)| (Some(*p), l.as_str()))
        .collect();
    if !blank(&ledger.tail) {
        considered.push((None, ledger.tail.as_str()));
    }
    let texts: Vec<&str> = considered.iter().map(|(_, l)| *l).collect();
    let keep = kept(&texts, &cutoff);
    let kept_count = keep.iter().filter(|k| **k).count();
    let pruned = considered.len() - kept_count;
    let verdict = Verdict::line(format!("pruned {pruned}, kept {kept_count}"));
    if pruned == 0 {
        return Decided { events: Vec::new(), verdict };
    }
    let mut dropped: Vec<u64> =
        ledger.lines.iter().filter(|(_, l)| blank(l)).map(|(p, _)| *p).collect();
    dropped.extend(considered.iter().zip(&keep).filter(|(_, k)| !**k).filter_map(|(c, _)| c.0));
    dropped.sort_unstable();
    let tail = match (ledger.tail.is_empty(), considered.last()) {
        (true, _) => None,
        (false, Some((None, _))) => Some(keep.last().copied().unwrap_or(false)),
        (false, _) => Some(false),
    };
    Decided { events: vec![SessionEvent::ObservationsPruned { cutoff, dropped, tail }], verdict }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_789_373_702_118; // 2026-09-14T08:15:02.118Z

    fn file(text: &str) -> LineFile {
        LineFile { lines: text.split('\n').map(str::to_owned).collect() }
    }

    fn check(source: &str, label: &str, origin: Option<&str>, expected: &str) {
        let args: Vec<String> = origin.map(|o| format!("--origin={o}")).into_iter().collect();
        let got = match decide_observe(source, &args, label, None, NOW) {
            Ok(decided) => match &decided.events[0] {
                SessionEvent::LineAppended { line, .. } => line.clone(),
                other => panic!("{other:?}"),
            },
            Err(refusal) => refusal.verdict.lines[0].clone(),
        };
        assert_eq!(got, expected, "{source} {label:?} {origin:?}");
    }

    #[test]
    fn observe_validates_as_upstream() {
        check("quick-deferral", " re-run e2e \n", None, "{\"ts\":\"2026-09-14T08:15:02Z\",\"pattern\":\"re-run e2e\",\"session_id\":\"unknown\",\"source\":\"quick-deferral\"}");
        check("skill-correction", "x", Some("own-work"), "{\"ts\":\"2026-09-14T08:15:02Z\",\"pattern\":\"x\",\"session_id\":\"unknown\",\"source\":\"skill-correction\",\"origin\":\"own-work\"}");
        check("cost-spike", "x", None, "ERROR|invalid-source:cost-spike");
        check("quick-deferral", " \n ", None, "ERROR|empty-pattern");
        check("quick-deferral", "a\nb", None, "ERROR|multiline-pattern");
        check("quick-deferral", &"😀".repeat(101), None, "ERROR|pattern-too-long:202");
        check("quick-deferral", "x", Some("own-work"), "ERROR|origin-not-allowed:quick-deferral");
        check("reflect-noticed", "x", Some(""), "ERROR|invalid-origin:");
    }

    #[test]
    fn prune_keeps_fresh_patterns_unparseable_lines_and_later_appends() {
        let old = "{\"ts\":\"2026-07-01T00:00:00Z\",\"pattern\":\"p\"}";
        let old_other = "{\"ts\":\"2026-07-01T00:00:00Z\",\"pattern\":\"q\"}";
        let fresh = "{\"ts\":\"2026-09-14T00:00:00Z\",\"pattern\":\"p\"}";
        let text = format!("{old}\n{old_other}\n\ntorn{{\nnull\n5\n{fresh}\n");
        let mut ledger = Lines::of_file(&file(&text), 1);
        let decided = decide_prune(&ledger, NOW);
        assert_eq!(decided.verdict.lines, ["pruned 2, kept 4"]);
        ledger.apply(&decided.events[0], 2);
        ledger.apply(
            &SessionEvent::LineAppended { ledger: Ledger::Observations, line: "late".into() },
            3,
        );
        assert_eq!(ledger.text(), format!("{old}\ntorn{{\nnull\n{fresh}\nlate\n"));
        let empty = decide_prune(&Lines::default(), NOW);
        assert_eq!((empty.verdict.lines[0].as_str(), empty.events.len()), ("pruned 0, kept 0", 0));
    }

    #[test]
    fn a_prune_ends_a_kept_torn_tail_and_drops_a_stale_one() {
        let old = "{\"ts\":\"2026-07-01T00:00:00Z\",\"pattern\":\"q\"}";
        let mut ledger = Lines::of_file(&file(&format!("{old}\n  \nunparsed")), 1);
        let decided = decide_prune(&ledger, NOW);
        assert_eq!(decided.verdict.lines, ["pruned 1, kept 1"]);
        ledger.apply(&decided.events[0], 2);
        assert_eq!(ledger.text(), "unparsed\n");
        let mut stale = Lines::of_file(&file(&format!("x\n{old}")), 1);
        let decided = decide_prune(&stale, NOW);
        stale.apply(&decided.events[0], 2);
        assert_eq!(stale.text(), "x\n");
    }

    #[test]
    fn appends_continue_a_torn_tail() {
        let mut ledger = file("a\nto");
        append(&mut ledger, "rn");
        assert_eq!(ledger.lines.join("\n"), "a\ntorn\n");
        let mut rows = Lines::of_file(&file("a\nto"), 1);
        rows.apply(
            &SessionEvent::LineAppended { ledger: Ledger::Observations, line: "rn".into() },
            2,
        );
        assert_eq!(rows.text(), "a\ntorn\n");
        assert!(rows.lines.windows(2).all(|w| w[0].0 < w[1].0), "positions follow the file");
    }
}
