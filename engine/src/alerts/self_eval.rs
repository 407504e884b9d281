//! Pure rules of the ladder's every-20-ticks self-evaluation (upstream `runSelfEval`): per
//! checklist item a clean or firing pass, the checklist-weight entry, dismissed-proposal noise,
//! and the entries that cross a threshold, proposed once.
//!
//! No IO, no clock, no store: `ladder.rs` runs it inside a tick.

use std::collections::HashSet;

use hookstate_schema::proposals::PropDoc;
use serde_json::{json, Map, Value};

use super::heartbeat_rules::{fm_str, num};
use super::tick_input::item_key;

/// Clean (or noisy) passes after which self-evaluation proposes a change.
pub(crate) const SELF_EVAL_TICKS_THRESHOLD: i64 = 20;
/// Distinct sessions an entry must have been evaluated in before it is proposed.
pub(crate) const SELF_EVAL_SESSIONS_THRESHOLD: i64 = 3;
/// A checklist longer than this is itself a self-evaluation entry (`checklist-weight`).
pub(crate) const CHECKLIST_ITEMS_RECOMMENDED_MAX: usize = 10;
/// The self-evaluation entry of an over-long checklist.
pub(crate) const WEIGHT_KEY: &str = "checklist-weight";

/// A PROP file as self-evaluation reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PropFacts {
    self_eval_key: Option<String>,
    source: Option<String>,
    status: Option<String>,
}

pub(crate) fn prop_facts(props: &[(String, PropDoc)]) -> Vec<PropFacts> {
    props
        .iter()
        .map(|(_, doc)| PropFacts {
            self_eval_key: fm_str(&doc.text, "self_eval_key"),
            source: fm_str(&doc.text, "source"),
            status: doc.status.clone(),
        })
        .collect()
}

/// The entry of `key` prepared for a pass (upstream `upsert`); the caller stores it back.
fn upsert(
    self_eval: &Map<String, Value>,
    text: &str,
    key: &str,
    today: &str,
) -> Map<String, Value> {
    let mut entry = self_eval.get(key).and_then(Value::as_object).cloned().unwrap_or_default();
    entry.insert("text".into(), json!(text));
    if !entry.get("first_observed").is_some_and(Value::is_string) {
        entry.insert("first_observed".into(), json!(today));
    }
    for counter in ["clean_ticks", "noise_ticks", "sessions_seen"] {
        let value = num(entry.get(counter));
        entry.insert(counter.into(), json!(value));
    }
    let proposed = entry.get("proposed") == Some(&Value::Bool(true));
    entry.insert("proposed".into(), json!(proposed));
    entry
}

fn mark_session(entry: &mut Map<String, Value>, session: Option<&str>) {
    let Some(session) = session else { return };
    if entry.get("last_session_id").and_then(Value::as_str) != Some(session) {
        let seen = num(entry.get("sessions_seen")) + 1;
        entry.insert("sessions_seen".into(), json!(seen));
        entry.insert("last_session_id".into(), json!(session));
    }
}

fn bump(entry: &mut Map<String, Value>, counter: &str) {
    let value = num(entry.get(counter)) + 1;
    entry.insert(counter.into(), json!(value));
}

/// Inputs of one self-evaluation pass.
pub(crate) struct SelfEvalInput<'a> {
    pub(crate) checklist: &'a [String],
    pub(crate) session: Option<&'a str>,
    pub(crate) alerts: &'a Map<String, Value>,
    pub(crate) props: &'a [PropFacts],
    pub(crate) today: &'a str,
}

/// One self-evaluation pass (upstream `runSelfEval`): per checklist item a clean or firing pass,
/// the checklist-weight entry, dismissed-proposal noise, and the entries crossing a threshold.
pub(crate) fn self_evaluate(
    self_eval: &mut Map<String, Value>,
    input: &SelfEvalInput<'_>,
) -> Vec<Value> {
    let mut fired = HashSet::new();
    for item in input.checklist {
        let Some(key) = item_key(item) else { continue };
        let mut entry = upsert(self_eval, item, &key, input.today);
        entry.shift_remove("alert_text");
        let in_interval = entry.shift_remove("fired_since_self_eval") == Some(Value::Bool(true));
        let alert_firing =
            input.alerts.get(&key).is_some_and(|a| num(a.get("consecutive_clean")) == 0);
        if in_interval || alert_firing {
            fired.insert(key.clone());
            entry.insert("clean_ticks".into(), json!(0));
        } else {
            bump(&mut entry, "clean_ticks");
        }
        mark_session(&mut entry, input.session);
        self_eval.insert(key, Value::Object(entry));
    }
    if input.checklist.len() > CHECKLIST_ITEMS_RECOMMENDED_MAX {
        let text = format!("Checklist weight: {} items", input.checklist.len());
        let mut entry = upsert(self_eval, &text, WEIGHT_KEY, input.today);
        bump(&mut entry, "clean_ticks");
        mark_session(&mut entry, input.session);
        self_eval.insert(WEIGHT_KEY.into(), Value::Object(entry));
    } else {
        self_eval.shift_remove(WEIGHT_KEY);
    }
    for prop in input.props {
        let Some(key) = &prop.self_eval_key else { continue };
        let Some(Value::Object(entry)) = self_eval.get_mut(key) else { continue };
        let status = prop.status.as_deref();
        let proposed = entry.get("proposed") == Some(&Value::Bool(true));
        if prop.source.as_deref() == Some("auto-detected")
            && status == Some("dismissed")
            && proposed
        {
            entry.insert("proposed".into(), json!(false));
            entry.insert("clean_ticks".into(), json!(0));
        }
        if !fired.contains(key) {
            continue;
        }
        match status {
            Some("accepted" | "resolved") => {
                entry.insert("noise_ticks".into(), json!(0));
            }
            Some("dismissed") => bump(entry, "noise_ticks"),
            _ => {}
        }
    }
    proposals_due(self_eval)
}

fn proposals_due(self_eval: &mut Map<String, Value>) -> Vec<Value> {
    let mut proposals = Vec::new();
    for (key, entry) in self_eval.iter_mut() {
        let Value::Object(entry) = entry else { continue };
        let (clean, noise) = (num(entry.get("clean_ticks")), num(entry.get("noise_ticks")));
        let sessions = num(entry.get("sessions_seen"));
        if entry.get("proposed") == Some(&Value::Bool(true))
            || sessions < SELF_EVAL_SESSIONS_THRESHOLD
        {
            continue;
        }
        let kind = if noise >= SELF_EVAL_TICKS_THRESHOLD {
            "noisy"
        } else if clean >= SELF_EVAL_TICKS_THRESHOLD {
            if key == WEIGHT_KEY {
                "weight"
            } else {
                "clean"
            }
        } else {
            continue;
        };
        entry.insert("proposed".into(), json!(true));
        proposals.push(json!({
            "key": key, "kind": kind, "clean_ticks": clean, "noise_ticks": noise,
            "sessions_seen": sessions,
        }));
    }
    proposals
}
