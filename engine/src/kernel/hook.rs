//! The Claude Code hook payloads the CLI's hook verbs read on stdin, parsed without touching a
//! store: the common fields (`session_id`, `cwd`, ...) and the Stop hook's.
//!
//! Pure functions, so the fuzz target `verb_stdin` calls exactly what the CLI calls. Errors are
//! the one-line message the CLI prints; reading stdin (cap, deadline, UTF-8) is the CLI's job.
//! Knows no domain: the hooks that act on them do.

use serde::Deserialize;
use serde_json::Value;

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
    /// `stop_hook_active` is set: the hook must not block again. Set is what a JavaScript or
    /// Python hook's `if (input.stop_hook_active)` reads as true: anything but absent, `null`,
    /// `false`, `0` and `""`, so a flag of another type errs toward letting the stop through
    /// (a string `"true"` counted as false, and the hook blocked the stop again).
    pub stop_hook_active: bool,
    /// `session_id` when it is a string.
    pub session_id: Option<String>,
}

/// Parses the Stop hook's payload: any JSON value; a `session_id` that is not a string counts as
/// absent, and `stop_hook_active` is read as [`StopPayload::stop_hook_active`] says.
///
/// # Errors
/// The message for text that is not JSON.
pub fn parse_stop_payload(text: &str) -> Result<StopPayload, String> {
    let payload: Value =
        serde_json::from_str(text).map_err(|e| format!("the Stop payload is not JSON: {e}"))?;
    Ok(StopPayload {
        stop_hook_active: crate::kernel::compat::js::truthy(&payload["stop_hook_active"]),
        session_id: payload["session_id"].as_str().map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_hook_active_flag_of_any_set_value_lets_the_stop_through() {
        let active = |flag: &str| {
            let text = format!(r#"{{"session_id":"s","stop_hook_active":{flag}}}"#);
            parse_stop_payload(&text).map(|p| p.stop_hook_active)
        };
        for set in ["true", "\"true\"", "\"false\"", "1", "-1", "{}", "[]"] {
            assert_eq!(active(set), Ok(true), "{set}");
        }
        for unset in ["false", "null", "0", "0.0", "\"\""] {
            assert_eq!(active(unset), Ok(false), "{unset}");
        }
        assert_eq!(
            parse_stop_payload(r#"{"session_id":"s"}"#).map(|p| p.stop_hook_active),
            Ok(false)
        );
    }
}
