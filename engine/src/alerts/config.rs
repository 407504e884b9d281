//! What the alerts verbs read of a hermit state directory's settings: `config.json`'s
//! `timezone`, `always_on`, `escalation` and `heartbeat.every` / `.enabled` / `.stale_threshold`,
//! and `state/.boot-id`
//! (upstream's `readBootId`), read in the directory the scope names.
//!
//! Read-only: `config.json` is never adopted or written. Does not decide anything.

use std::path::Path;

use hookstate_schema::hermit::dir_of;
use serde_json::{Map, Value};

use super::heartbeat_rules as rules;
use crate::kernel::error::{Error, Result};
use crate::legacy::root::Root;

/// The config file of a hermit state directory.
pub(crate) const CONFIG_FILE: &str = "config.json";
/// The hermit config file is a few routines and settings.
pub(crate) const CONFIG_FILE_BYTES_MAX: usize = 1024 * 1024;
/// The boot id file under `state/` (upstream's `readBootId`).
pub(crate) const BOOT_ID_FILE: &str = ".boot-id";
/// The state subdirectory of a hermit state directory.
pub(crate) const STATE_DIR: &str = "state";
/// The zone of a config without one.
const DEFAULT_TIMEZONE: &str = "UTC";

/// What the alerts verbs read from `config.json` and `state/.boot-id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// `timezone` (default UTC).
    pub timezone: String,
    /// `always_on === true && escalation === "conservative"`: the next-task ack is enabled.
    pub next_task_ack: bool,
    /// `heartbeat.enabled === false`.
    pub heartbeat_disabled: bool,
    /// `heartbeat.every` as whole seconds, when it is a string `<n>s|m|h` (upstream's
    /// `parseDuration`: any case, spaces allowed before the unit); otherwise the default.
    pub every_s: Option<u64>,
    /// `state/.boot-id`, trimmed, when it exists and is a short single line.
    pub boot_id: Option<String>,
    /// `heartbeat.stale_threshold` as whole seconds (`parseDuration`, default 2 h): how long a
    /// running session's Progress Log may stay quiet before the stale-session alert fires.
    pub stale_threshold_s: u64,
}

/// The state directory a hermit scope names.
///
/// # Errors
/// [`Error::BadInput`] for a scope that is not `hermit:<absolute path>`.
pub(crate) fn state_dir(scope: &str) -> Result<&Path> {
    dir_of(scope)
        .map(Path::new)
        .ok_or_else(|| Error::bad(format!("scope {scope:?}"), "is not hermit:<abs state dir>"))
}

fn read_boot_id(dir: &Path) -> Result<Option<String>> {
    let Some(state) = Root::open(dir, false)?.subdir(STATE_DIR, false)? else {
        return Ok(None);
    };
    // An oversized or unreadable boot id is no boot id, as upstream's reader treats it.
    let bytes = match state.read(BOOT_ID_FILE, rules::STAMP_BYTES_MAX + 1) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(e) if e.is_invalid() => return Ok(None),
        Err(e) => return Err(e),
    };
    let text = String::from_utf8(bytes).unwrap_or_default();
    let id = text.trim();
    Ok(rules::check_stamp("boot id", id).ok().map(|()| id.to_owned()))
}

/// `heartbeatInterval`'s `parseDuration` in seconds: a string `<digits><spaces><s|m|h>` (any
/// case, trimmed); anything else (a number, a day unit, a fraction) is `None`, the default.
fn duration_s(value: &Value) -> Option<u64> {
    let text = value.as_str()?.trim();
    let unit = text.chars().last()?;
    let scale = match unit.to_ascii_lowercase() {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        _ => return None,
    };
    let digits = text[..text.len() - unit.len_utf8()].trim_end_matches(char::is_whitespace);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// The settings of the hermit state directory `dir` (defaults when `config.json` is absent).
///
/// # Errors
/// An unsafe or missing directory; [`Error::LegacyFile`] for a config that is not a JSON object.
pub(crate) fn read_config(dir: &Path) -> Result<HeartbeatConfig> {
    let root = Root::open(dir, false)?;
    let config = match root.read(CONFIG_FILE, CONFIG_FILE_BYTES_MAX)? {
        Some(bytes) => match serde_json::from_slice(&bytes) {
            Ok(Value::Object(map)) => map,
            _ => return Err(Error::legacy(CONFIG_FILE, "is not a JSON object")),
        },
        None => Map::new(),
    };
    let timezone = config
        .get("timezone")
        .and_then(Value::as_str)
        .filter(|tz| !tz.is_empty())
        .unwrap_or(DEFAULT_TIMEZONE)
        .to_owned();
    let heartbeat = config.get("heartbeat");
    Ok(HeartbeatConfig {
        timezone,
        next_task_ack: config.get("always_on") == Some(&Value::Bool(true))
            && config.get("escalation").and_then(Value::as_str) == Some("conservative"),
        heartbeat_disabled: heartbeat.and_then(|h| h.get("enabled")) == Some(&Value::Bool(false)),
        every_s: heartbeat.and_then(|h| h.get("every")).and_then(duration_s),
        stale_threshold_s: heartbeat
            .and_then(|h| h.get("stale_threshold"))
            .and_then(duration_s)
            .unwrap_or(super::stale::STALE_THRESHOLD_S_DEFAULT),
        boot_id: read_boot_id(dir)?,
    })
}

/// The settings of the directory a hermit scope names.
///
/// # Errors
/// As `read_config`: [`Error::LegacyFile`] for a bad config; and [`Error::BadInput`] for a scope that is not `hermit:<abs dir>`.
pub(crate) fn scope_config(scope: &str) -> Result<HeartbeatConfig> {
    read_config(state_dir(scope)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_read_as_upstream_parse_duration() {
        // parseDuration: /^(\d+)\s*([smh])$/i on the trimmed string; anything else → default.
        assert_eq!(duration_s(&json!("30m")), Some(1800));
        assert_eq!(duration_s(&json!("2h")), Some(7200));
        assert_eq!(duration_s(&json!(" 45s ")), Some(45));
        assert_eq!(duration_s(&json!("5 m")), Some(300));
        assert_eq!(duration_s(&json!("5\tM")), Some(300));
        assert_eq!(duration_s(&json!("2H")), Some(7200));
        assert_eq!(duration_s(&json!(90)), None, "a number is not a duration upstream");
        assert_eq!(duration_s(&json!("1d")), None, "no day unit upstream");
        assert_eq!(duration_s(&json!("soon")), None);
        assert_eq!(duration_s(&json!("m")), None);
        assert_eq!(duration_s(&json!("1.5m")), None);
        assert_eq!(duration_s(&json!("-5m")), None);
    }
}
