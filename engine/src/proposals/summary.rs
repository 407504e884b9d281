//! `generate-summary.ts`'s `run(<dir>/state)`, which upstream's `proposal.ts create` calls in
//! its best-effort tail: `state/state-summary.md`, a report over the alert files, the ledger,
//! the micro-proposal queue and `state/reflection-state.json`.
//!
//! Runs after the mirrored create (`dropin::hermit_summary`), so the files the store holds (the
//! alert files, the queue, the ledger) are the ones the call just wrote; `reflection-state.json`,
//! which no layout holds, is read as a plain file. Every read is bounded (the ledger by the
//! layout's bound) and goes through [`Root`]; the one write is [`Root::write`]'s durable
//! replace, inside the state directory. Decides nothing: it only counts what the files say, as
//! upstream's generator does. Not upstream's mtime fast path (skip when the summary is newer
//! than every input): after a create the ledger is always newer.

use std::path::Path;

use serde_json::{Map, Value};

use super::layout::{LEDGER_FILE, LEDGER_FILE_BYTES_MAX, QUEUE_FILE, STATE_DIR};
use crate::kernel::compat::js::{math_round, number_string, to_fixed_2};
use crate::kernel::compat::js_trim;
use crate::kernel::compat::stamp::{date_parse, stamp_ms, TIME_MS_MAX};
use crate::legacy::root::Root;

/// The generator's output.
const OUTPUT_FILE: &str = "state-summary.md";
/// Its presence says the hermit is initialised; without it nothing is written.
const ALERT_STATE_FILE: &str = "alert-state.json";
/// `readMergedAlerts`' files, in its order (later files win a key, the key spaces are disjoint).
const ALERT_FILES: [&str; 4] =
    [ALERT_STATE_FILE, "budget-alerts.json", "telemetry-alert.json", "doctor-alerts.json"];
/// The reflection skill's state: no layout holds it, so it is read from the directory.
const REFLECTION_FILE: &str = "reflection-state.json";
/// An alert file, the queue, the reflection state or the old summary: small JSON or Markdown
/// documents; 8 MiB is far above any real one and bounds the read. A larger file reads as
/// unreadable (upstream's `catch {}`: its default).
const SMALL_FILE_BYTES_MAX: usize = 8 * 1024 * 1024;

/// What one regeneration read: a file's text, `Err` when it exists and cannot be read.
type Read = std::result::Result<Option<String>, String>;

fn read(state: &Root, name: &str, max: usize) -> Read {
    match state.read(name, max) {
        // readFileSync(…, 'utf-8') replaces invalid bytes rather than failing.
        Ok(bytes) => Ok(bytes.map(|b| String::from_utf8_lossy(&b).into_owned())),
        Err(e) => Err(e.to_string()),
    }
}

/// JavaScript truthiness of a JSON value, absent counting as `undefined`.
fn truthy(value: Option<&Value>) -> bool {
    value.is_some_and(crate::kernel::compat::js::truthy)
}

/// `String(value)`, as a template literal or an object key prints it.
fn js_string(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), number_string),
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|v| if v.is_null() { String::new() } else { js_string(v) })
            .collect::<Vec<_>>()
            .join(","),
        Value::Object(_) => "[object Object]".into(),
    }
}

/// `JSON.parse` of a text that must be an object (`null` and the rest are `None`).
fn object(text: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// `readMergedAlerts`: the union of every readable alert file's `alerts`, an array's entries
/// under their indices as `Object.assign` puts them.
fn merged_alerts(state: &Root) -> Map<String, Value> {
    let mut merged = Map::new();
    for name in ALERT_FILES {
        let Some(doc) = read(state, name, SMALL_FILE_BYTES_MAX).ok().flatten() else {
            continue;
        };
        match object(&doc).and_then(|mut d| d.remove("alerts")) {
            Some(Value::Object(alerts)) => merged.extend(alerts),
            Some(Value::Array(items)) => {
                merged.extend(items.into_iter().enumerate().map(|(i, v)| (i.to_string(), v)));
            }
            _ => {}
        }
    }
    merged
}

/// The ledger's counts, as the generator tallies them.
#[derive(Default)]
struct Tally {
    created: u64,
    responded: u64,
    resolved: u64,
    micro_queued: u64,
    micro_approved: u64,
    micro_answered: u64,
    created_by: Map<String, Value>,
    accepted_by: Map<String, Value>,
}

fn bump(counts: &mut Map<String, Value>, key: String) {
    let n = counts.get(&key).and_then(Value::as_u64).unwrap_or(0);
    counts.insert(key, Value::from(n + 1));
}

fn count(counts: &Map<String, Value>, key: &str) -> u64 {
    counts.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn tally(text: &str) -> Tally {
    let mut t = Tally::default();
    let mut source_of: Map<String, Value> = Map::new();
    for line in js_trim(text).split('\n').filter(|l| !l.is_empty()) {
        // `JSON.parse(line).type` throws on `null` and skips the line; a non-object has no type.
        let Ok(event) = serde_json::from_str::<Value>(line) else { continue };
        let Value::Object(event) = event else { continue };
        let kind = event.get("type").and_then(Value::as_str);
        let id = event.get("proposal_id").filter(|v| truthy(Some(v))).map(js_string);
        match kind {
            Some("created") => {
                t.created += 1;
                let source = event.get("source").filter(|v| truthy(Some(v)));
                let source = source.map_or_else(|| "unknown".to_owned(), js_string);
                if let Some(id) = id {
                    source_of.insert(id, Value::String(source.clone()));
                }
                bump(&mut t.created_by, source);
            }
            Some("responded") => {
                t.responded += 1;
                let accept = event.get("action").and_then(Value::as_str) == Some("accept");
                if let (true, Some(id)) = (accept, id) {
                    let source = source_of.get(&id).filter(|v| truthy(Some(v)));
                    let source = source.map_or_else(|| "unknown".to_owned(), js_string);
                    bump(&mut t.accepted_by, source);
                }
            }
            Some("resolved") => t.resolved += 1,
            // Bridged asks are not yes/no decisions: out of the approval rate's denominator.
            Some("micro-queued") if event.get("kind").and_then(Value::as_str) != Some("ask") => {
                t.micro_queued += 1;
            }
            Some("micro-resolved") => match event.get("action").and_then(Value::as_str) {
                Some("approved") => t.micro_approved += 1,
                Some("answered") => t.micro_answered += 1,
                _ => {}
            },
            _ => {}
        }
    }
    t
}

/// `Math.round(part / whole * 100)`, `None` when `whole` is 0.
#[expect(clippy::cast_precision_loss, reason = "JavaScript counts in doubles too")]
fn rate(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| math_round(part as f64 / whole as f64 * 100.0))
}

fn fmt_rate(rate: Option<f64>) -> String {
    rate.map_or_else(|| "null".into(), |r| to_fixed_2(r / 100.0))
}

fn fmt_rate_str(rate: Option<f64>) -> String {
    rate.map_or_else(|| "no data".into(), |r| format!("{}%", number_string(r)))
}

/// `new Date(value).toISOString()`; `Err` as JavaScriptCore throws on an invalid date. A text
/// is read as [`date_parse`] reads it (a zone-less date-time is refused: JavaScript reads it in
/// the machine's zone); a number is epoch ms.
fn iso_of(value: &Value) -> std::result::Result<String, String> {
    let ms = match value {
        Value::String(text) => date_parse(text),
        Value::Bool(b) => Some(i64::from(*b)),
        #[expect(clippy::cast_possible_truncation, reason = "TimeClip truncates; range checked")]
        Value::Number(n) => n.as_f64().filter(|x| x.is_finite()).map(|x| x.trunc() as i64),
        _ => None,
    };
    ms.and_then(|ms| u64::try_from(ms).ok())
        .filter(|ms| *ms <= TIME_MS_MAX)
        .map(stamp_ms)
        .ok_or_else(|| "Invalid Date".to_owned())
}

/// Regenerates `<dir>/state/state-summary.md` as upstream's `run(<dir>/state)` does at `now_ms`
/// (its `updated:`): nothing when `state/alert-state.json` is absent, nor when the report is
/// unchanged but for `updated:`. Returns the stderr lines upstream prints
/// (`generate-summary: failed to read metrics: …`, then `WARN: summary regen failed: …` when the
/// generator throws or the write fails); never fails the create.
#[must_use]
pub(crate) fn regenerate(dir: &Path, now_ms: u64) -> Vec<String> {
    let mut stderr = Vec::new();
    let failed = |why: String| format!("WARN: summary regen failed: {why}");
    let state = match Root::open(dir, false).and_then(|root| root.subdir(STATE_DIR, false)) {
        Ok(Some(state)) => state,
        Ok(None) => return stderr,
        Err(e) => return vec![failed(e.to_string())],
    };
    // existsSync: an unreadable file still exists.
    if matches!(state.read(ALERT_STATE_FILE, SMALL_FILE_BYTES_MAX), Ok(None)) {
        return stderr;
    }
    let alerts = merged_alerts(&state);
    let (mut active, mut suppressed) = (0u64, 0u64);
    for entry in alerts.values() {
        // `alerts[key].suppressed` throws on a null entry: the whole regeneration fails.
        if entry.is_null() {
            stderr.push(failed("null is not an object".into()));
            return stderr;
        }
        if truthy(entry.get("suppressed")) {
            suppressed += 1;
        } else {
            active += 1;
        }
    }

    let reflection = read(&state, REFLECTION_FILE, SMALL_FILE_BYTES_MAX)
        .ok()
        .flatten()
        .and_then(|text| object(&text))
        .and_then(|mut rs| rs.remove("last_reflection"))
        .filter(|v| truthy(Some(v)));

    let t = match read(&state, LEDGER_FILE, LEDGER_FILE_BYTES_MAX) {
        Ok(text) => tally(text.as_deref().unwrap_or_default()),
        Err(why) => {
            stderr.push(format!("generate-summary: failed to read metrics: {why}"));
            Tally::default()
        }
    };
    let auto_rate =
        rate(count(&t.accepted_by, "auto-detected"), count(&t.created_by, "auto-detected"));
    let manual_rate = rate(count(&t.accepted_by, "manual"), count(&t.created_by, "manual"));

    let (mut micro_pending, mut question) = (0usize, None);
    if let Some(Some(mut queue)) =
        read(&state, QUEUE_FILE, SMALL_FILE_BYTES_MAX).ok().flatten().map(|text| object(&text))
    {
        let pending = match queue.remove("pending") {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        let active: Vec<&Value> = pending
            .iter()
            .filter(|e| {
                truthy(Some(e)) && e.get("status").and_then(Value::as_str) == Some("pending")
            })
            .collect();
        micro_pending = active.len();
        if let [only] = active.as_slice() {
            question = only.get("question").filter(|q| truthy(Some(q))).map(js_string);
        }
    }

    let response_rate = rate(t.responded, t.created);
    let last = match reflection.as_ref().map(iso_of).transpose() {
        Ok(iso) => iso.map_or_else(
            || "never".to_owned(),
            |iso| iso.replacen('T', " ", 1).chars().take(16).collect(),
        ),
        Err(why) => {
            stderr.push(failed(why));
            return stderr;
        }
    };
    let approval_rate = rate(t.micro_approved, t.micro_queued);
    let question = question.unwrap_or_else(|| match micro_pending {
        0 | 1 => "none".to_owned(),
        n => format!("{n} questions pending"),
    });
    let reflection_text = reflection.as_ref().map_or_else(|| "null".to_owned(), js_string);

    let body = format!(
        "active_alerts: {active}\n\
         suppressed_alerts: {suppressed}\n\
         proposals_created: {}\n\
         proposals_responded: {}\n\
         proposals_resolved: {}\n\
         response_rate: {}\n\
         auto_detect_accept_rate: {}\n\
         manual_accept_rate: {}\n\
         micro_pending: {micro_pending}\n\
         micro_approval_rate: {}\n\
         last_reflection: {reflection_text}\n\
         ---\n\
         # Agent State\n\
         \n\
         ## Alerts\n\
         Active: {active}\n\
         Suppressed: {suppressed}\n\
         \n\
         ## Proposals\n\
         Created: {} (auto-detected: {}, manual: {})\n\
         Responded: {}\n\
         Resolved: {}\n\
         Response rate: {}\n\
         Auto-detected accept rate: {}\n\
         Manual accept rate: {}\n\
         \n\
         ## Micro-Proposals\n\
         Pending: {micro_pending}\n\
         Question: {question}\n\
         Approval rate: {}\n\
         Bridged asks answered: {}\n\
         \n\
         ## Reflection\n\
         Last: {last}\n",
        t.created,
        t.responded,
        t.resolved,
        fmt_rate(response_rate),
        fmt_rate(auto_rate),
        fmt_rate(manual_rate),
        fmt_rate(approval_rate),
        t.created,
        count(&t.created_by, "auto-detected"),
        count(&t.created_by, "manual"),
        t.responded,
        t.resolved,
        fmt_rate_str(response_rate),
        fmt_rate_str(auto_rate),
        fmt_rate_str(manual_rate),
        fmt_rate_str(approval_rate),
        t.micro_answered,
    );
    // Upstream compares all but the first line, which is `---`: `updated:` is compared, so only
    // a regeneration within the same millisecond is skipped.
    let content = format!("---\nupdated: {}\n{body}", stamp_ms(now_ms));
    let after_first = |s: &str| s.find('\n').map_or(s.to_owned(), |i| s[i + 1..].to_owned());
    if let Ok(Some(existing)) = read(&state, OUTPUT_FILE, SMALL_FILE_BYTES_MAX) {
        if after_first(&content) == after_first(&existing) {
            return stderr;
        }
    }
    if let Err(e) = state.write(OUTPUT_FILE, content.as_bytes()) {
        stderr.push(failed(e.to_string()));
    }
    stderr
}
