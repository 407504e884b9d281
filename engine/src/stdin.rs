//! The stdin payloads of the CLI's verbs, parsed without touching a store: Claude Code hook
//! payloads, the Stop hook's payload, observer rows and findings, and `proposals patch --stdin`.
//!
//! Pure functions, so the fuzz target `verb_stdin` calls exactly what the CLI calls. The other
//! verbs' stdin goes through checks that already live beside their domain
//! ([`crate::Engine::check`], [`crate::feedback::check`], [`crate::parse_micro_input`],
//! [`crate::parse_create`]). Errors are the one-line message the CLI prints; reading
//! stdin (cap, deadline, UTF-8) is the CLI's job.

use serde::Deserialize;
use serde_json::Value;

use crate::observer::{Finding, RowInput};

/// The fields of a Claude Code hook payload that `hook session-start` and `hook turn-complete`
/// use; every other field is ignored.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
pub struct HookPayload {
    /// The session; an empty one makes the hook a no-op.
    #[serde(default)]
    pub session_id: String,
    /// The working directory of the session.
    #[serde(default)]
    pub cwd: String,
    /// Set for a subagent's turn.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The turn's duration.
    #[serde(default)]
    pub duration_ms: u64,
    /// Why the turn ended.
    #[serde(default)]
    pub reason: Option<String>,
    /// Whether the turn was aborted.
    #[serde(default)]
    pub is_aborted: bool,
}

/// Parses a hook payload (`hook session-start`, `hook turn-complete`).
///
/// # Errors
/// The message for text that is not a JSON object of these fields.
pub fn parse_hook_payload(text: &str) -> Result<HookPayload, String> {
    serde_json::from_str(text).map_err(|e| format!("hook payload is not a JSON object: {e}"))
}

/// What `hook stop` reads from its payload.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StopPayload {
    /// `stop_hook_active` is `true`: the hook must not block again.
    pub stop_hook_active: bool,
    /// `session_id` when it is a string.
    pub session_id: Option<String>,
}

/// Parses the Stop hook's payload: any JSON value; fields of the wrong type count as absent.
///
/// # Errors
/// The message for text that is not JSON.
pub fn parse_stop_payload(text: &str) -> Result<StopPayload, String> {
    let payload: Value =
        serde_json::from_str(text).map_err(|e| format!("the Stop payload is not JSON: {e}"))?;
    Ok(StopPayload {
        stop_hook_active: payload["stop_hook_active"].as_bool() == Some(true),
        session_id: payload["session_id"].as_str().map(str::to_owned),
    })
}

/// Parses `observer append`'s rows: one row object, or an array of them.
///
/// # Errors
/// The message for text that is not JSON or a row that does not fit [`RowInput`].
pub fn parse_rows(text: &str) -> Result<Vec<RowInput>, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("stdin is not JSON: {e}"))?;
    let list = match value {
        Value::Array(items) => items,
        other => vec![other],
    };
    let rows: Vec<RowInput> = list
        .into_iter()
        .map(|v| serde_json::from_value(v).map_err(|e| format!("row: {e}")))
        .collect::<Result<_, _>>()?;
    for row in &rows {
        crate::observer::rules::check_row(row).map_err(|e| e.to_string())?;
    }
    Ok(rows)
}

/// Parses `observer sweep-commit`'s findings: a JSON array of [`Finding`].
///
/// # Errors
/// The message for anything else.
pub fn parse_findings(text: &str) -> Result<Vec<Finding>, String> {
    serde_json::from_str(text)
        .map_err(|e| format!("findings must be a JSON array of findings: {e}"))
}

/// `Set: key=value` lines and the first non-empty `Decision: <line>` of `proposals patch
/// --stdin`. Never fails: other lines are ignored.
#[must_use]
pub fn parse_patch_stdin(text: &str) -> (Vec<String>, Option<String>) {
    let sets = text
        .lines()
        .filter_map(|l| l.strip_prefix("Set:"))
        .map(|rest| rest.trim_start_matches([' ', '\t']).to_owned())
        .collect();
    let decision = text
        .lines()
        .find_map(|l| l.strip_prefix("Decision:"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned);
    (sets, decision)
}
