//! `proposal.ts metrics [<stateDir>] [--source=<key>]`: triage survival and acceptance per
//! autonomous proposal source, over the ledger (`state/proposal-metrics.jsonl`), in upstream's
//! words (lib/proposals/metrics.ts): a markdown table, or one verdict line for a source.
//!
//! Pure: a function of the ledger's lines. Does not read files or the store.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// A source with fewer triage verdicts than this is not judged (`n<8`, INSUFFICIENT).
const MIN_SAMPLE: u64 = 8;
/// Triage survival below this percentage is a kill criterion.
const KILL_SURVIVAL_PCT: f64 = 25.0;
/// Acceptance below this percentage is a kill criterion.
const KILL_ACCEPT_PCT: f64 = 30.0;
/// Upstream's message when the ledger is empty or missing.
const NO_METRICS: &str = "No proposal metrics yet.";

/// The autonomous sources upstream segments by, in its table's order.
const SEGMENTS: [&str; 4] =
    ["reflect", "capability-brainstorm", "procedure-capture", "scheduled-check"];

fn has_tag(tags: &[Value], tag: &str) -> bool {
    tags.iter().any(|t| t.as_str() == Some(tag))
}

fn tags_of(event: &Value) -> &[Value] {
    event.get("tags").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// Whether a `triage-verdict` event counts for the segment.
fn triage(segment: &str, event: &Value) -> bool {
    let field = |name: &str| event.get(name).and_then(Value::as_str);
    match segment {
        "reflect" => field("caller") == Some("reflect"),
        "capability-brainstorm" => field("evidence_source") == Some("capability-brainstorm"),
        "procedure-capture" => has_tag(tags_of(event), "procedure-capture"),
        _ => field("caller") == Some("scheduled-checks"),
    }
}

/// Whether a created proposal counts for the segment's acceptance; `None`: not trackable.
fn accept(segment: &str, source: &str, tags: &[Value]) -> Option<bool> {
    match segment {
        "reflect" => Some(
            source == "auto-detected"
                && !has_tag(tags, "capability-brainstorm")
                && !has_tag(tags, "procedure-capture"),
        ),
        "capability-brainstorm" => Some(has_tag(tags, "capability-brainstorm")),
        "procedure-capture" => Some(has_tag(tags, "procedure-capture")),
        _ => None,
    }
}

#[derive(Default)]
struct Counts {
    create: u64,
    total: u64,
    created: u64,
    accepted: u64,
}

struct Stats {
    survival: Option<f64>,
    accept: Option<f64>,
    trackable: bool,
    counts: Counts,
}

/// `Math.round(n / d * 100)`, for n ≤ d.
fn pct(n: u64, d: u64) -> Option<f64> {
    #[expect(clippy::cast_precision_loss, reason = "ledger counts, far below 2^52")]
    let ratio = n as f64 / d as f64;
    (d > 0).then(|| (ratio * 100.0).round())
}

fn tally(lines: &[String]) -> Vec<Stats> {
    let mut counts: Vec<Counts> = SEGMENTS.iter().map(|_| Counts::default()).collect();
    let mut created: HashMap<String, (String, Vec<Value>)> = HashMap::new();
    let mut accepted: HashSet<String> = HashSet::new();
    for line in lines {
        let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
        let id = event.get("proposal_id").and_then(Value::as_str).filter(|s| !s.is_empty());
        match event.get("type").and_then(Value::as_str) {
            Some("created") => {
                let Some(id) = id else { continue };
                let source = event.get("source").and_then(Value::as_str).filter(|s| !s.is_empty());
                let source = source.unwrap_or("unknown").to_owned();
                let tags = tags_of(&event).to_vec();
                for (segment, count) in SEGMENTS.iter().zip(&mut counts) {
                    if accept(segment, &source, &tags) == Some(true) {
                        count.created += 1;
                    }
                }
                created.insert(id.to_owned(), (source, tags));
            }
            Some("responded") if event.get("action").and_then(Value::as_str) == Some("accept") => {
                if let Some(id) = id {
                    accepted.insert(id.to_owned());
                }
            }
            Some("triage-verdict") => {
                let create = event.get("verdict").and_then(Value::as_str) == Some("CREATE");
                for (segment, count) in SEGMENTS.iter().zip(&mut counts) {
                    if triage(segment, &event) {
                        count.total += 1;
                        count.create += u64::from(create);
                    }
                }
            }
            _ => {}
        }
    }
    let unknown = ("unknown".to_owned(), Vec::new());
    for id in &accepted {
        let (source, tags) = created.get(id).unwrap_or(&unknown);
        for (segment, count) in SEGMENTS.iter().zip(&mut counts) {
            if accept(segment, source, tags) == Some(true) {
                count.accepted += 1;
            }
        }
    }
    SEGMENTS
        .iter()
        .zip(counts)
        .map(|(segment, counts)| {
            let trackable = accept(segment, "", &[]).is_some();
            Stats {
                survival: pct(counts.create, counts.total),
                accept: if trackable { pct(counts.accepted, counts.created) } else { None },
                trackable,
                counts,
            }
        })
        .collect()
}

fn kills(s: &Stats, spaced: bool) -> Vec<String> {
    let sep = if spaced { " < " } else { "<" };
    let mut out = Vec::new();
    if s.survival.is_some_and(|p| p < KILL_SURVIVAL_PCT) {
        out.push(format!(
            "{}{sep}{KILL_SURVIVAL_PCT}%",
            if spaced { "triage-survival" } else { "survival" }
        ));
    }
    if s.trackable && s.accept.is_some_and(|p| p < KILL_ACCEPT_PCT) {
        out.push(format!("acceptance{sep}{KILL_ACCEPT_PCT}%"));
    }
    out
}

fn ratio(p: Option<f64>, n: u64, d: u64) -> String {
    format!("{}% ({n}/{d})", p.unwrap_or_default())
}

/// Upstream's whole stdout for `metrics` over these ledger lines, `--source=<key>` when given.
#[must_use]
pub(crate) fn metrics_report(lines: &[String], source: Option<&str>) -> String {
    if lines.iter().all(|l| l.trim().is_empty()) {
        return match source {
            Some(key) => format!("{key}: no proposal metrics yet\n"),
            None => format!("{NO_METRICS}\n"),
        };
    }
    let stats = tally(lines);
    if let Some(key) = source {
        let Some(at) = SEGMENTS.iter().position(|s| *s == key) else {
            return format!("Unknown source key: {key}. Valid keys: {}\n", SEGMENTS.join(", "));
        };
        let s = &stats[at];
        let c = &s.counts;
        let survival = if c.total == 0 {
            "triage-survival -".to_owned()
        } else {
            format!("triage-survival {}", ratio(s.survival, c.create, c.total))
        };
        let acceptance = match (s.trackable, c.created) {
            (false, _) => "acceptance n/a".to_owned(),
            (true, 0) => "acceptance -".to_owned(),
            (true, _) => format!("acceptance {}", ratio(s.accept, c.accepted, c.created)),
        };
        let verdict = if c.total < MIN_SAMPLE {
            format!("INSUFFICIENT (need >={MIN_SAMPLE} triage-verdicts to evaluate)")
        } else {
            let kills = kills(s, true);
            if kills.is_empty() {
                "OK".to_owned()
            } else {
                format!("KILL ({})", kills.join(", "))
            }
        };
        return format!("{key}: {survival}, {acceptance}, sample {} — {verdict}\n", c.total);
    }
    let rows: Vec<String> = SEGMENTS
        .iter()
        .zip(&stats)
        .map(|(key, s)| {
            let c = &s.counts;
            let survival =
                if c.total == 0 { "-".to_owned() } else { ratio(s.survival, c.create, c.total) };
            let acceptance = match (s.trackable, c.created) {
                (false, _) => "n/a".to_owned(),
                (true, 0) => "-".to_owned(),
                (true, _) => ratio(s.accept, c.accepted, c.created),
            };
            let gate = if c.total < MIN_SAMPLE {
                format!("n<{MIN_SAMPLE}")
            } else {
                let kills = kills(s, false);
                if kills.is_empty() {
                    "-".to_owned()
                } else {
                    format!("! {}", kills.join(", "))
                }
            };
            format!("| {key} | {survival} | {acceptance} | {} | {gate} |", c.total)
        })
        .collect();
    format!(
        "### Proposal acceptance by source\n\n| Source | Survival (CREATE/total) | Acceptance \
         (accepted/created) | n | Gate |\n|---|---|---|---|---|\n{}\n",
        rows.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &[&str]) -> Vec<String> {
        text.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn an_empty_ledger_says_so() {
        assert_eq!(metrics_report(&[], None), "No proposal metrics yet.\n");
        assert_eq!(metrics_report(&[], Some("reflect")), "reflect: no proposal metrics yet\n");
    }

    #[test]
    fn survival_and_acceptance_per_source_as_upstream_prints_them() {
        let mut ledger = Vec::new();
        for i in 0..9 {
            let verdict = if i < 2 { "CREATE" } else { "DROP" };
            ledger.push(format!(
                "{{\"type\":\"triage-verdict\",\"caller\":\"reflect\",\"verdict\":\"{verdict}\"}}"
            ));
        }
        ledger.extend(lines(&[
            r#"{"type":"created","proposal_id":"PROP-001","source":"auto-detected","tags":[]}"#,
            r#"{"type":"created","proposal_id":"PROP-002","source":"auto-detected","tags":[]}"#,
            r#"{"type":"created","proposal_id":"PROP-003","source":"manual","tags":["procedure-capture"]}"#,
            r#"{"type":"responded","proposal_id":"PROP-001","action":"accept"}"#,
            r#"{"type":"responded","proposal_id":"PROP-003","action":"dismiss"}"#,
            "not json",
            r#"{"type":"triage-verdict","caller":"scheduled-checks","verdict":"CREATE"}"#,
        ]));
        // 2/9 = 22% survival (a kill), 1/2 = 50% acceptance.
        assert_eq!(
            metrics_report(&ledger, Some("reflect")),
            "reflect: triage-survival 22% (2/9), acceptance 50% (1/2), sample 9 — KILL \
             (triage-survival < 25%)\n"
        );
        assert_eq!(
            metrics_report(&ledger, Some("scheduled-check")),
            "scheduled-check: triage-survival 100% (1/1), acceptance n/a, sample 1 — \
             INSUFFICIENT (need >=8 triage-verdicts to evaluate)\n"
        );
        assert_eq!(
            metrics_report(&ledger, Some("nope")),
            "Unknown source key: nope. Valid keys: reflect, capability-brainstorm, \
             procedure-capture, scheduled-check\n"
        );
        assert_eq!(
            metrics_report(&ledger, None),
            "### Proposal acceptance by source\n\n| Source | Survival (CREATE/total) | \
             Acceptance (accepted/created) | n | Gate |\n|---|---|---|---|---|\n\
             | reflect | 22% (2/9) | 50% (1/2) | 9 | ! survival<25% |\n\
             | capability-brainstorm | - | - | 0 | n<8 |\n\
             | procedure-capture | - | 0% (0/1) | 0 | n<8 |\n\
             | scheduled-check | 100% (1/1) | n/a | 1 | n<8 |\n"
        );
    }
}
