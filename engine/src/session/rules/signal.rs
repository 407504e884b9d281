//! `proposal.ts success-signal`: the v1 success-signal grammar of a proposal
//! (`avg_session_cost_usd <OP> <NUMBER> over <N> sessions`), checked (`--validate`) or evaluated
//! against the session reports written since the proposal was accepted, in upstream's words
//! (lib/proposals/success-signal.ts).
//!
//! Pure: the caller hands over the reports (`S-NNN-REPORT.md` name and text). Does not read
//! files or the store.

use serde_json::{json, Map, Value};

use crate::kernel::compat::js::{js_number, js_round};
use crate::kernel::compat::stamp::date_parse;
use crate::kernel::compat::{is_js_whitespace, js_trim};

/// The one metric v1 supports.
const METRIC: &str = "avg_session_cost_usd";
/// Decimal places of the observed average (`Math.round(x * 10000) / 10000`).
const OBSERVED_DIGITS: i32 = 4;

/// What the verb prints on stdout, and its exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalAnswer {
    /// The whole stdout, every line ending in a newline.
    pub stdout: String,
    /// 1 for a `--validate` that failed, 0 otherwise.
    pub exit: u8,
}

/// A parsed predicate.
#[derive(Debug, Clone, PartialEq)]
struct Signal {
    metric: String,
    op: String,
    threshold: f64,
    window: f64,
}

/// The grammar's match: metric, op, number, window (as texts), or `None`.
fn grammar(predicate: &str) -> Option<(String, String, String, String)> {
    let text = js_trim(predicate);
    let spaces = |s: &str| s.len() - s.trim_start_matches(is_js_whitespace).len();
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let words = text.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
    if words == 0 {
        return None;
    }
    let (metric, rest) = text.split_at(words);
    let rest = &rest[spaces(rest)..];
    let op_len = match rest.as_bytes() {
        [b'<' | b'>', b'=', ..] => 2,
        [b'<' | b'>', ..] => 1,
        _ => return None,
    };
    let (op, rest) = rest.split_at(op_len);
    let rest = &rest[spaces(rest)..];
    let mut number = digits(rest);
    if number == 0 {
        return None;
    }
    if rest[number..].starts_with('.') && digits(&rest[number + 1..]) > 0 {
        number += 1 + digits(&rest[number + 1..]);
    }
    let (threshold, rest) = rest.split_at(number);
    let gap = spaces(rest);
    let rest = rest[gap..].strip_prefix("over").filter(|_| gap > 0)?;
    let gap = spaces(rest);
    let window_len = digits(&rest[gap..]);
    if gap == 0 || window_len == 0 {
        return None;
    }
    let (window, rest) = rest[gap..].split_at(window_len);
    let gap = spaces(rest);
    let tail = rest[gap..].strip_prefix("session").filter(|_| gap > 0)?;
    if !(tail.is_empty() || tail == "s") {
        return None;
    }
    Some((metric.into(), op.into(), threshold.into(), window.into()))
}

fn parse_signal(predicate: &str) -> Option<Signal> {
    let (metric, op, threshold, window) = grammar(predicate)?;
    let threshold: f64 = threshold.parse().ok()?;
    let window: f64 = window.parse().ok()?;
    (metric == METRIC && threshold > 0.0 && window >= 1.0).then_some(Signal {
        metric,
        op,
        threshold,
        window,
    })
}

/// `--validate "<predicate>"` (the words after the flag, joined by spaces).
#[must_use]
pub(crate) fn validate(words: &[String]) -> SignalAnswer {
    if words.is_empty() {
        let stdout = "usage: proposal.ts success-signal --validate \"<predicate>\"\n".into();
        return SignalAnswer { stdout, exit: 1 };
    }
    let predicate = words.join(" ");
    if parse_signal(&predicate).is_some() {
        return SignalAnswer { stdout: "OK\n".into(), exit: 0 };
    }
    let stdout = match grammar(&predicate) {
        None => "invalid grammar; expected: avg_session_cost_usd <OP> <NUMBER> over <N> sessions \
                 (OP: < <= > >=)\n"
            .to_owned(),
        Some((metric, ..)) if metric != METRIC => {
            format!("unsupported metric '{metric}'; v1 supports: {METRIC}\n")
        }
        Some(_) => "invalid predicate values\n".to_owned(),
    };
    SignalAnswer { stdout, exit: 1 }
}

/// The usage line of evaluate mode with fewer than four words.
pub(crate) const EVALUATE_USAGE: &str =
    "usage: proposal.ts success-signal <stateDir> \"<accepted_date>\" \
                                  \"<accepted_in_session|null>\" \"<predicate>\"\n";

fn line(verdict: &str, signal: Option<&Signal>, observed: Value, counted: usize) -> String {
    let mut out = Map::new();
    out.insert("verdict".into(), json!(verdict));
    out.insert("metric".into(), signal.map_or(Value::Null, |s| json!(s.metric)));
    out.insert("op".into(), signal.map_or(Value::Null, |s| json!(s.op)));
    out.insert("threshold".into(), signal.map_or(Value::Null, |s| js_number(s.threshold)));
    out.insert("window".into(), signal.map_or(Value::Null, |s| js_number(s.window)));
    out.insert("observed".into(), observed);
    out.insert("sessions_counted".into(), json!(counted));
    format!("{}\n", Value::Object(out))
}

/// The INSUFFICIENT_DATA line evaluate mode falls back to.
#[must_use]
pub(crate) fn insufficient_line() -> String {
    line("INSUFFICIENT_DATA", None, Value::Null, 0)
}

/// readFrontmatter's value of `key` as a string (quotes and a trailing ` # comment` removed), or
/// `None` when the report has no frontmatter, no such key, or a list or `null` there.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let end = text.starts_with("---").then(|| text.get(3..)?.find("\n---"))??;
    let yaml = text.get(4..end + 3).unwrap_or_default();
    let mut found = None;
    for raw in yaml.split('\n') {
        let Some(rest) = raw.strip_prefix(key) else { continue };
        let rest = rest.trim_start_matches(is_js_whitespace);
        let Some(value) = rest.strip_prefix(':') else { continue };
        let value = js_trim(value);
        found = if (value.starts_with('[') && value.ends_with(']')) || value == "null" {
            None
        } else {
            let value = value.find(" #").map_or(value, |at| value[..at].trim_end());
            let value = value.strip_prefix(['"', '\'']).unwrap_or(value);
            Some(value.strip_suffix(['"', '\'']).unwrap_or(value))
        };
    }
    found
}

/// JavaScript's `parseFloat`: the longest decimal prefix after leading whitespace, else NaN.
fn parse_float(text: &str) -> f64 {
    let t = text.trim_start_matches(is_js_whitespace);
    let bytes = t.as_bytes();
    let mut end = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    if t[end..].starts_with("Infinity") {
        return if t.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY };
    }
    let int = bytes[end..].iter().take_while(|b| b.is_ascii_digit()).count();
    end += int;
    let mut frac = 0;
    if bytes.get(end) == Some(&b'.') {
        frac = bytes[end + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
        end += 1 + frac;
    }
    if int + frac == 0 {
        return f64::NAN;
    }
    if matches!(bytes.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(bytes.get(end + 1), Some(b'+' | b'-')));
        let exp = bytes[end + 1 + sign..].iter().take_while(|b| b.is_ascii_digit()).count();
        if exp > 0 {
            end += 1 + sign + exp;
        }
    }
    t[..end].trim_end_matches('.').parse().unwrap_or(f64::NAN)
}

/// Whether `name` is a session report file (`S-<digits>-REPORT.md`).
#[must_use]
pub(crate) fn is_report(name: &str) -> bool {
    name.strip_prefix("S-")
        .and_then(|r| r.strip_suffix("-REPORT.md"))
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Evaluate mode: `accepted_date`, `accepted_in_session` (`null` for none), the predicate
/// words, over the reports (name order).
#[must_use]
pub(crate) fn evaluate(
    accepted_date: &str,
    accepted_in: &str,
    predicate: &[String],
    reports: &[(String, String)],
) -> String {
    let Some(signal) = parse_signal(&predicate.join(" ")) else {
        return insufficient_line();
    };
    let Some(accepted) = date_parse(accepted_date) else {
        return line("INSUFFICIENT_DATA", Some(&signal), Value::Null, 0);
    };
    let mut candidates: Vec<(i64, f64)> = Vec::new();
    for (name, text) in reports.iter().filter(|(name, _)| is_report(name)) {
        if !text.starts_with("---") || text.get(3..).is_none_or(|r| !r.contains("\n---")) {
            continue;
        }
        let id = field(text, "id").filter(|s| !s.is_empty());
        let id = id.unwrap_or_else(|| name.trim_end_matches("-REPORT.md"));
        if !accepted_in.is_empty() && accepted_in != "null" && id == accepted_in {
            continue;
        }
        let Some(date) = field(text, "date").filter(|s| !s.is_empty()).and_then(date_parse) else {
            continue;
        };
        if date < accepted {
            continue;
        }
        let cost = field(text, "cost_usd").filter(|s| !s.is_empty()).map_or(0.0, parse_float);
        if cost > 0.0 {
            candidates.push((date, cost));
        }
    }
    candidates.sort_by_key(|(date, _)| *date);
    #[expect(clippy::cast_precision_loss, reason = "a count of session reports")]
    let counted = candidates.len() as f64;
    if counted < signal.window {
        return line("INSUFFICIENT_DATA", Some(&signal), Value::Null, candidates.len());
    }
    #[expect(clippy::cast_possible_truncation, reason = "window ≤ candidates.len()")]
    #[expect(clippy::cast_sign_loss, reason = "window ≥ 1")]
    let sample = &candidates[..signal.window as usize];
    let total: f64 = sample.iter().map(|(_, cost)| cost).sum();
    #[expect(clippy::cast_precision_loss, reason = "a count of session reports")]
    let observed = js_round(total / sample.len() as f64, OBSERVED_DIGITS);
    let value = observed.as_f64().unwrap_or(f64::NAN);
    let met = match signal.op.as_str() {
        "<" => value < signal.threshold,
        "<=" => value <= signal.threshold,
        ">" => value > signal.threshold,
        _ => value >= signal.threshold,
    };
    line(if met { "MET" } else { "UNMET" }, Some(&signal), observed, sample.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn the_grammar_validates_as_upstreams_regex() {
        let ok = validate(&words("avg_session_cost_usd <= 1.5 over 5 sessions"));
        assert_eq!(ok, SignalAnswer { stdout: "OK\n".into(), exit: 0 });
        assert_eq!(validate(&words(" avg_session_cost_usd<2 over 1 session ")).exit, 0);
        let bad = validate(&words("avg_session_cost_usd = 2 over 3 sessions"));
        assert!(bad.stdout.starts_with("invalid grammar; expected: "), "{bad:?}");
        assert_eq!(bad.exit, 1);
        let metric = validate(&words("tokens < 2 over 3 sessions"));
        assert_eq!(
            metric.stdout,
            "unsupported metric 'tokens'; v1 supports: avg_session_cost_usd\n"
        );
        let values = validate(&words("avg_session_cost_usd < 0 over 3 sessions"));
        assert_eq!(values.stdout, "invalid predicate values\n");
        assert_eq!(validate(&words("avg_session_cost_usd < 2 over 0 sessions")).exit, 1);
        assert_eq!(validate(&words("avg_session_cost_usd < 2. over 3 sessions")).exit, 1);
        assert_eq!(validate(&[]).exit, 1);
    }

    fn report(id: u32, date: &str, cost: &str) -> (String, String) {
        let name = format!("S-{id:03}-REPORT.md");
        (name, format!("---\nid: S-{id:03}\ndate: {date}\ncost_usd: {cost}\n---\n\n# Report\n"))
    }

    #[test]
    fn evaluation_averages_the_first_sessions_after_acceptance() {
        let reports = vec![
            report(1, "2026-09-01T10:00:00Z", "9.0"),
            report(2, "2026-09-03T10:00:00Z", "1.00"),
            report(3, "2026-09-02T10:00:00Z", "2.5"),
            report(4, "2026-09-04T10:00:00Z", "0.00"),
            report(5, "2026-09-05T10:00:00Z", "\"1.75\" # measured"),
        ];
        let p = words("avg_session_cost_usd < 2 over 3 sessions");
        // S-001 is before acceptance, S-004 unrecorded; S-003, S-002, S-005 in date order.
        assert_eq!(
            evaluate("2026-09-02", "null", &p, &reports),
            "{\"verdict\":\"MET\",\"metric\":\"avg_session_cost_usd\",\"op\":\"<\",\
             \"threshold\":2,\"window\":3,\"observed\":1.75,\"sessions_counted\":3}\n"
        );
        // The accepting session itself is not evidence.
        let out = evaluate("2026-09-02", "S-003", &p, &reports);
        assert!(out.starts_with("{\"verdict\":\"INSUFFICIENT_DATA\""), "{out}");
        assert!(out.ends_with("\"observed\":null,\"sessions_counted\":2}\n"), "{out}");
        assert!(evaluate("not a date", "null", &p, &reports).contains("\"metric\":\"avg"));
        assert_eq!(evaluate("2026-09-02", "null", &words("nope"), &reports), insufficient_line());
    }
}
