//! Pure rules of the heartbeat domain: budget period keys, alert keys and entries, monitor
//! health, liveness age, the next-task token, and the legacy JSON text they read and write.
//!
//! No IO, no clock (time comes in as UTC ms), no redb.

use hookstate_schema::proposals::frontmatter;
use serde_json::{Map, Value};

use crate::kernel::compat::js::{js_number, js_round};
use crate::kernel::compat::stamp::{parse_offset_ms, utc, zone};
use crate::kernel::error::{Error, Result};

/// A liveness peek fresher than this reads as alive (upstream `LIVENESS_FRESH_SECS`).
pub(crate) const LIVENESS_FRESH_S: u64 = 600;
/// The monitor is fresh while its last peek is within this many intervals (upstream: 3×).
pub(crate) const MONITOR_FRESH_INTERVALS: u64 = 3;
/// A registration without a trusted peek stays healthy this long after `started_at`. Upstream's
/// `STARTUP_GRACE_SECS` lives in a revision not in the index; this is our value.
pub(crate) const STARTUP_GRACE_S: u64 = 120;
/// The poll interval when `heartbeat.every` is not given: upstream's 30 minutes.
pub(crate) const INTERVAL_S_DEFAULT: u64 = 30 * 60;
/// Longest poll interval accepted: a week (upstream floors at 1 s and sets no ceiling).
pub(crate) const INTERVAL_S_MAX: u64 = 7 * 24 * 60 * 60;
/// start-commit waits at most this long for the first liveness peek (upstream: 10 s).
pub const LIVENESS_WAIT_MS_MAX: u64 = 10_000;
/// Pause between two looks for the first liveness peek.
pub(crate) const LIVENESS_POLL_MS: u64 = 100;
/// Budget alert levels.
pub(crate) const LEVELS: [&str; 2] = ["warn", "breach"];
/// Budget periods.
pub(crate) const PERIODS: [&str; 3] = ["daily", "weekly", "monthly"];
/// Budget actions.
pub(crate) const ACTIONS: [&str; 2] = ["alert", "pause"];
/// Largest spend or cap accepted, in USD: far above any plausible budget.
pub(crate) const MONEY_MAX: f64 = 1e9;
/// Entries one alerts file may hold; the reap keeps budget files to a handful.
pub(crate) const ALERT_ENTRIES_MAX: usize = 1000;
/// The injection hash: the first 8 hex digits of sha256(HEARTBEAT.md).
pub(crate) const INJECTION_HASH_HEX: usize = 8;
/// Longest free-form stamp or id argument (`announced_at`, task id, boot id).
pub(crate) const STAMP_BYTES_MAX: usize = 128;

/// The last millisecond of year 9999 (9999-12-31T23:59:59.999Z): past it toISOString writes a
/// six-digit `+0YYYYY` year, and the legacy stamps and period keys have four-digit years.
pub(crate) const TIME_MS_MAX: u64 = 253_402_300_799_999;

/// Checks a call's time: at most `TIME_MS_MAX`.
///
/// # Errors
/// [`Error::TimeOutOfRange`] for a later time: past the four-digit years of the legacy stamps.
pub fn check_time(at_ms: u64) -> Result<()> {
    if at_ms > TIME_MS_MAX {
        return Err(Error::TimeOutOfRange { ms: at_ms });
    }
    Ok(())
}

/// The current key of a budget period in `timezone`: `YYYY-MM-DD` (todayYMD), `YYYY-Www` (ISO
/// week of the ISO year, thisWeekKey) or `YYYY-MM` (thisMonthYYYYMM). `None` for another period.
///
/// # Errors
/// [`Error::BadTimeZone`] for a bad zone, [`Error::TimeOutOfRange`] for a bad time.
pub fn period_key(period: &str, at_ms: u64, timezone: &str) -> Result<Option<String>> {
    let local = utc(at_ms)?.with_timezone(&zone(timezone)?);
    Ok(match period {
        "daily" => Some(local.format("%Y-%m-%d").to_string()),
        "weekly" => Some(local.format("%G-W%V").to_string()),
        "monthly" => Some(local.format("%Y-%m").to_string()),
        _ => None,
    })
}

/// How a legacy JSON file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `JSON.stringify(v, null, 2) + "\n"`.
    Pretty,
    /// `JSON.stringify(v) + "\n"`.
    Compact,
}

/// The layout of a stored file: pretty when it starts with `{` and a newline.
pub(crate) fn layout_of(text: &str) -> Layout {
    if text.starts_with("{\n") {
        Layout::Pretty
    } else {
        Layout::Compact
    }
}

/// Parses a legacy JSON file as an ordered object.
///
/// # Errors
/// [`Error::LegacyFile`] when the text is not one JSON object.
pub(crate) fn parse_object(file: &str, text: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::legacy(file, "is not a JSON object")),
        Err(e) => Err(Error::legacy(file, format!("is not JSON: {e}"))),
    }
}

/// Renders an object in a layout, with the trailing newline; numbers as `JSON.stringify`
/// prints them.
pub(crate) fn render_object(map: &Map<String, Value>, layout: Layout) -> String {
    let value = Value::Object(map.clone());
    let text = match layout {
        Layout::Pretty => crate::kernel::compat::js::pretty(&value),
        Layout::Compact => crate::kernel::compat::js::compact(&value),
    };
    text + "\n"
}

/// What a budget record asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetInput {
    /// warn or breach.
    pub level: String,
    /// daily, weekly or monthly.
    pub period: String,
    /// alert or pause.
    pub action: String,
    /// Spend in the period, USD.
    pub spend: f64,
    /// The period's cap, USD.
    pub cap: f64,
}

/// Checks a budget record's input.
///
/// # Errors
/// [`Error::NotOneOf`] for a level, period or action outside its set, [`Error::BadInput`] for
/// an amount out of range.
pub fn check_budget(input: &BudgetInput) -> Result<()> {
    let one_of = |what: &'static str, value: &str, allowed: &'static [&'static str]| {
        if allowed.contains(&value) {
            Ok(())
        } else {
            Err(Error::NotOneOf { what, value: value.to_owned(), allowed })
        }
    };
    one_of("--level", &input.level, &LEVELS)?;
    one_of("--period", &input.period, &PERIODS)?;
    one_of("--action", &input.action, &ACTIONS)?;
    for (what, x) in [("spend", input.spend), ("cap", input.cap)] {
        if !x.is_finite() || !(0.0..=MONEY_MAX).contains(&x) {
            return Err(Error::bad(
                format!("--{what} {x}"),
                format!("is not within 0..={MONEY_MAX}"),
            ));
        }
    }
    if input.cap <= 0.0 {
        return Err(Error::bad("--cap", "must be above 0"));
    }
    Ok(())
}

/// The alert key: `budget-<level>:<period>:<period key>`.
pub(crate) fn budget_key(level: &str, period: &str, key: &str) -> String {
    format!("budget-{level}:{period}:{key}")
}

/// The entry object, as cost-tracker writes it: spend to 4 places, ratio to 2.
pub(crate) fn budget_entry(input: &BudgetInput, ts: String) -> Map<String, Value> {
    let mut entry = Map::new();
    entry.insert("kind".into(), Value::from("budget"));
    entry.insert("level".into(), Value::from(input.level.clone()));
    entry.insert("period".into(), Value::from(input.period.clone()));
    entry.insert("action".into(), Value::from(input.action.clone()));
    entry.insert("spend".into(), js_round(input.spend, 4));
    entry.insert("cap".into(), js_number(input.cap));
    entry.insert("ratio".into(), js_round(input.spend / input.cap, 2));
    entry.insert("notified".into(), Value::Bool(false));
    entry.insert("ts".into(), Value::String(ts));
    entry
}

/// The budget keys a reap removes: entries of kind budget whose period key (the key's last
/// `:` field) is older than their period's current key. Entries of an unknown period, and
/// entries of a later period (written by a process whose clock is ahead), stay: a reap never
/// removes a key a caller may record again, which would announce it twice.
///
/// # Errors
/// [`Error::BadTimeZone`] for a bad zone, [`Error::TimeOutOfRange`] for a bad time.
pub(crate) fn stale_budget_keys(
    alerts: &Map<String, Value>,
    at_ms: u64,
    timezone: &str,
) -> Result<Vec<String>> {
    let mut stale = Vec::new();
    for (key, entry) in alerts {
        if entry.get("kind").and_then(Value::as_str) != Some("budget") {
            continue;
        }
        let period = entry.get("period").and_then(Value::as_str).unwrap_or_default();
        if let Some(current) = period_key(period, at_ms, timezone)? {
            // Daily, weekly and monthly keys are zero-padded, so their text order is time order.
            let of_key = key.rsplit(':').next().unwrap_or_default();
            if of_key < current.as_str() {
                stale.push(key.clone());
            }
        }
    }
    Ok(stale)
}

/// What the monitor health check needs besides the two files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorSetup {
    /// `heartbeat.every` in whole seconds (at least 1).
    pub interval_s: u64,
    /// The command the monitor is registered with (`bash <plugin>/scripts/… <s> <dir>`).
    pub command: String,
    /// The current boot id (upstream reads `state/.boot-id`), when known.
    pub boot_id: Option<String>,
    /// `heartbeat.enabled === false`.
    pub disabled: bool,
}

/// `bash <plugin root>/scripts/heartbeat-monitor.sh <interval> <abs hermit dir>`.
#[must_use]
pub fn monitor_command(plugin_root: &str, interval_s: u64, dir: &str) -> String {
    let root = plugin_root.trim_end_matches('/');
    format!("bash {root}/scripts/heartbeat-monitor.sh {interval_s} {dir}")
}

fn str_of<'a>(map: Option<&'a Map<String, Value>>, key: &str) -> Option<&'a str> {
    map.and_then(|m| m.get(key)).and_then(Value::as_str)
}

/// `monitorFreshness`: whether the last peek belongs to this registration and is recent.
fn freshness(
    started: Option<&str>,
    peek: Option<&str>,
    limit_s: u64,
    now_ms: u64,
) -> (bool, &'static str) {
    let now = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let started = started.and_then(parse_offset_ms);
    let peek = peek.and_then(parse_offset_ms);
    let trusted = peek.filter(|p| started.is_none_or(|s| *p >= s));
    if let Some(peek) = trusted {
        let limit = i64::try_from(limit_s.saturating_mul(1000)).unwrap_or(i64::MAX);
        return if now - peek > limit { (false, "stale") } else { (true, "fresh") };
    }
    let Some(started) = started else {
        return (true, "unregistered");
    };
    let grace = i64::try_from(STARTUP_GRACE_S * 1000).unwrap_or(i64::MAX);
    if now - started < grace {
        return (true, "warming-up");
    }
    (false, if peek.is_some() { "liveness-predates-start" } else { "liveness-absent" })
}

/// `heartbeatHealth`: `(healthy, reason)` of the registered monitor.
pub(crate) fn monitor_health(
    runtime: Option<&Map<String, Value>>,
    liveness: Option<&Map<String, Value>>,
    setup: &MonitorSetup,
    now_ms: u64,
) -> (bool, String) {
    if setup.disabled {
        return (true, "disabled".into());
    }
    let Some(started) = str_of(runtime, "started_at") else {
        return (false, "runtime-missing".into());
    };
    let stored_boot = str_of(runtime, "boot_id");
    if let (Some(stored), Some(current)) = (stored_boot, setup.boot_id.as_deref()) {
        if stored != current {
            return (false, "boot-mismatch".into());
        }
    }
    // `runtime.interval !== interval`: one number to JavaScript whether written 120 or 120.0.
    let interval = runtime.and_then(|m| m.get("interval")).and_then(Value::as_f64);
    #[expect(clippy::cast_precision_loss, reason = "at most INTERVAL_S_MAX, exact in a double")]
    let expected = setup.interval_s as f64;
    if interval != Some(expected) {
        return (false, "interval-drift".into());
    }
    if str_of(runtime, "command") != Some(setup.command.as_str()) {
        return (false, "command-drift".into());
    }
    let limit = MONITOR_FRESH_INTERVALS * setup.interval_s;
    match freshness(Some(started), str_of(liveness, "last_peek_at"), limit, now_ms) {
        (true, reason) if reason != "unregistered" => (true, reason.into()),
        (_, reason) if reason.starts_with("liveness-") => (false, reason.into()),
        (_, reason) => (false, format!("liveness-{reason}")),
    }
}

/// Whether start-commit adopts the liveness peek as `started_at`: the peek is no earlier than
/// `armed_at` floored to the second (the monitor stamps whole seconds).
pub(crate) fn adopt_peek(peek: Option<&str>, armed: Option<&str>) -> bool {
    match (peek.and_then(parse_offset_ms), armed.and_then(parse_offset_ms)) {
        (Some(peek), Some(armed)) => peek >= armed.div_euclid(1000) * 1000,
        _ => false,
    }
}

/// The age of a liveness peek in whole seconds (negative ages read as 0); `None` when absent or
/// unparsable.
pub(crate) fn peek_age_s(liveness: Option<&Map<String, Value>>, now_ms: u64) -> Option<u64> {
    let peek = str_of(liveness, "last_peek_at").and_then(parse_offset_ms)?;
    let now = i64::try_from(now_ms).ok()?;
    Some(u64::try_from((now - peek).max(0) / 1000).unwrap_or(0))
}

/// Checks an injection hash: 8 lowercase hex digits.
///
/// # Errors
/// [`Error::BadInput`] otherwise.
pub fn check_hash(hash: &str) -> Result<()> {
    let ok = hash.len() == INJECTION_HASH_HEX
        && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(())
    } else {
        let why = format!("is not {INJECTION_HASH_HEX} lowercase hex digits");
        Err(Error::bad(format!("hash {hash:?}"), why))
    }
}

/// Checks a free-form stamp or id argument: at most `STAMP_BYTES_MAX` bytes, no control
/// characters, not empty.
///
/// # Errors
/// [`Error::BadInput`] otherwise.
pub fn check_stamp(what: &str, text: &str) -> Result<()> {
    if text.is_empty() || text.len() > STAMP_BYTES_MAX || text.chars().any(char::is_control) {
        let why = format!("must be 1 to {STAMP_BYTES_MAX} bytes without control characters");
        return Err(Error::bad(what, why));
    }
    Ok(())
}

/// The next-task token: blake3 (derive-key context `hookstate next-task token v1`) over
/// `JSON.stringify([queue, runtime])`, a newline, and the scope's next-task revision, in hex.
pub(crate) fn next_task_token(queue: &str, runtime: &Map<String, Value>, rev: u64) -> String {
    let pair = Value::Array(vec![Value::from(queue), Value::Object(runtime.clone())]);
    let mut hasher = blake3::Hasher::new_derive_key("hookstate next-task token v1");
    hasher.update(pair.to_string().as_bytes());
    hasher.update(format!("\n{rev}").as_bytes());
    hasher.finalize().to_hex().to_string()
}

/// Why a next-task token is not issued or an ack does not park; `None` when it may.
pub(crate) fn next_task_block(
    enabled: bool,
    runtime: Option<&Map<String, Value>>,
    queued: bool,
) -> Option<&'static str> {
    if !enabled {
        return Some("disabled");
    }
    let idle = str_of(runtime, "session_state") == Some("idle");
    let transition = runtime.and_then(|m| m.get("transition")).is_some_and(truthy);
    if !idle || transition {
        return Some("not-idle");
    }
    if !queued {
        return Some("queue-missing");
    }
    None
}

pub(crate) use crate::kernel::compat::js::truthy;

/// A PROP file's frontmatter value as a string: a bare word, or a JSON string decoded.
pub(crate) fn fm_str(text: &str, key: &str) -> Option<String> {
    let (lines, _) = frontmatter(text)?;
    let raw = lines.into_iter().find(|(k, _)| k == key).map(|(_, raw)| raw)?;
    if raw == "null" {
        return None;
    }
    if raw.starts_with('"') || raw.starts_with('[') {
        if let Ok(value) = serde_json::from_str::<Value>(&raw) {
            return value.as_str().map(str::to_owned);
        }
    }
    Some(raw)
}

/// A counter as JavaScript reads it: any integral number (`40` and `40.0` are one number to
/// `JSON.parse`); anything else is `None`.
pub(crate) fn js_int(value: Option<&Value>) -> Option<i64> {
    const I64_BOUND: f64 = 9_223_372_036_854_775_807.0;
    let value = value?;
    if let Some(i) = value.as_i64() {
        return Some(i);
    }
    let x = value.as_f64().filter(|x| x.fract() == 0.0 && x.abs() < I64_BOUND)?;
    #[expect(clippy::cast_possible_truncation, reason = "integral and within i64")]
    Some(x as i64)
}

/// A counter, 0 when it is not an integral number.
pub(crate) fn num(value: Option<&Value>) -> i64 {
    js_int(value).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::compat::stamp::{local_stamp, parse_offset_ms as parse_ms, stamp_ms};

    // 2026-09-14T09:12:03.554Z, a Monday.
    const AT: u64 = 1_789_377_123_554;

    fn check(period: &str, at: u64, tz: &str, expected: &str) {
        assert_eq!(period_key(period, at, tz).unwrap().as_deref(), Some(expected), "{period} {tz}");
    }

    #[test]
    fn period_keys_follow_the_zone_and_the_iso_week() {
        check("daily", AT, "UTC", "2026-09-14");
        check("weekly", AT, "UTC", "2026-W38");
        check("monthly", AT, "UTC", "2026-09");
        // 2027-01-01T03:00Z: still 2026-12-31 in New York; ISO week 53 of 2026.
        let new_year = 1_798_772_400_000;
        check("daily", new_year, "UTC", "2027-01-01");
        check("daily", new_year, "America/New_York", "2026-12-31");
        check("monthly", new_year, "America/New_York", "2026-12");
        check("weekly", new_year, "UTC", "2026-W53");
        // 2027-01-04 is the Monday of 2027-W01.
        check("weekly", new_year + 3 * 86_400_000, "UTC", "2027-W01");
        assert_eq!(period_key("yearly", AT, "UTC").unwrap(), None);
        assert!(period_key("daily", AT, "Mars/Olympus").is_err());
    }

    #[test]
    fn entries_round_like_javascript() {
        let input = BudgetInput {
            level: "warn".into(),
            period: "weekly".into(),
            action: "alert".into(),
            spend: 41.273_149,
            cap: 50.0,
        };
        let entry = Value::Object(budget_entry(&input, stamp_ms(AT))).to_string();
        assert_eq!(
            entry,
            "{\"kind\":\"budget\",\"level\":\"warn\",\"period\":\"weekly\",\"action\":\"alert\",\
             \"spend\":41.2731,\"cap\":50,\"ratio\":0.83,\"notified\":false,\
             \"ts\":\"2026-09-14T09:12:03.554Z\"}"
        );
    }

    #[test]
    fn entries_print_their_numbers_as_json_stringify_does() {
        // Expected texts from node: Math.round(x * 10^d) / 10^d, then JSON.stringify.
        let entry = |spend: f64, cap: f64| {
            let input = BudgetInput {
                level: "breach".into(),
                period: "daily".into(),
                action: "alert".into(),
                spend,
                cap,
            };
            render_object(&budget_entry(&input, stamp_ms(AT)), Layout::Compact)
        };
        let huge = entry(1e9, 1e-13);
        assert!(huge.contains("\"ratio\":1e+22,"), "{huge}");
        let wide = entry(1e9, 3e-9);
        assert!(wide.contains("\"ratio\":333333333333333300,"), "{wide}");
        // Math.round(0.49999999999999994) is 0, not floor(0.49999999999999994 + 0.5).
        let tiny = entry(0.000_049_999_999_999_999_996, 50.0);
        assert!(tiny.contains("\"spend\":0,"), "{tiny}");
        assert!(entry(1e9, 1e9).contains("\"spend\":1000000000,\"cap\":1000000000,\"ratio\":1,"));
    }

    #[test]
    fn stale_keys_are_the_past_periods_only_never_a_later_one() {
        let alerts: Map<String, Value> = serde_json::from_str(
            r#"{"budget-warn:weekly:2026-W37":{"kind":"budget","period":"weekly"},
                "budget-warn:weekly:2026-W38":{"kind":"budget","period":"weekly"},
                "budget-breach:daily:2026-09-13":{"kind":"budget","period":"daily"},
                "budget-breach:monthly:2026-09":{"kind":"budget","period":"monthly"},
                "budget-warn:weekly:2026-W39":{"kind":"budget","period":"weekly"},
                "budget-breach:daily:2026-09-15":{"kind":"budget","period":"daily"},
                "budget-warn:monthly:2026-10":{"kind":"budget","period":"monthly"},
                "other":{"kind":"telemetry"}}"#,
        )
        .unwrap();
        let stale = stale_budget_keys(&alerts, AT, "UTC").unwrap();
        assert_eq!(stale, vec!["budget-warn:weekly:2026-W37", "budget-breach:daily:2026-09-13"]);
    }

    fn setup() -> MonitorSetup {
        MonitorSetup {
            interval_s: 60,
            command: monitor_command("/p", 60, "/h"),
            boot_id: Some("b1".into()),
            disabled: false,
        }
    }

    fn runtime(started: &str) -> Map<String, Value> {
        serde_json::from_value(serde_json::json!({
            "task_id": "t", "command": "bash /p/scripts/heartbeat-monitor.sh 60 /h",
            "interval": 60, "started_at": started, "boot_id": "b1",
        }))
        .unwrap()
    }

    fn peek(at: &str) -> Map<String, Value> {
        serde_json::from_value(serde_json::json!({ "last_peek_at": at })).unwrap()
    }

    #[test]
    fn monitor_health_reasons() {
        let now = parse_offset_ms("2026-09-14T10:00:00Z").unwrap().unsigned_abs();
        let health = |rt: Option<&Map<String, Value>>, live: Option<&Map<String, Value>>| {
            monitor_health(rt, live, &setup(), now).1
        };
        let started = runtime("2026-09-14T09:00:00.000Z");
        let recent = peek("2026-09-14T09:59:00Z");
        assert_eq!(health(Some(&started), Some(&recent)), "fresh");
        assert_eq!(health(None, Some(&recent)), "runtime-missing");
        assert_eq!(health(Some(&Map::new()), Some(&recent)), "runtime-missing");
        let mut other = started.clone();
        other.insert("boot_id".into(), "b0".into());
        assert_eq!(health(Some(&other), Some(&recent)), "boot-mismatch");
        let mut other = started.clone();
        other.insert("interval".into(), 30.into());
        assert_eq!(health(Some(&other), Some(&recent)), "interval-drift");
        other.insert("interval".into(), serde_json::json!(60.0));
        assert_eq!(health(Some(&other), Some(&recent)), "fresh", "60.0 is 60 to JavaScript");
        let mut other = started.clone();
        other.insert("command".into(), "bash /q".into());
        assert_eq!(health(Some(&other), Some(&recent)), "command-drift");
        assert_eq!(health(Some(&started), Some(&peek("2026-09-14T09:56:59Z"))), "liveness-stale");
        assert_eq!(health(Some(&started), None), "liveness-absent");
        assert_eq!(
            health(Some(&started), Some(&peek("2026-09-14T08:59:59Z"))),
            "liveness-predates-start"
        );
        let young = runtime("2026-09-14T09:59:00.000Z");
        assert_eq!(health(Some(&young), None), "warming-up");
        let off = MonitorSetup { disabled: true, ..setup() };
        assert_eq!(monitor_health(None, None, &off, now), (true, "disabled".into()));
    }

    #[test]
    fn started_at_adopts_a_peek_in_the_arming_second() {
        let armed = Some("2026-09-14T09:00:00.700Z");
        assert!(adopt_peek(Some("2026-09-14T09:00:00Z"), armed));
        assert!(!adopt_peek(Some("2026-09-14T08:59:59Z"), armed));
        assert!(!adopt_peek(None, armed));
        assert!(!adopt_peek(Some("2026-09-14T09:00:00Z"), None));
    }

    #[test]
    fn hashes_and_stamps_are_checked() {
        assert!(check_hash("9c04be1f").is_ok());
        for bad in ["9C04BE1F", "9c04be1", "9c04be1f0", "zzzzzzzz", ""] {
            assert!(check_hash(bad).is_err(), "{bad}");
        }
        assert_eq!(local_stamp(AT, "Europe/Berlin").unwrap(), "2026-09-14T11:12:03+0200");
        assert_eq!(stamp_ms(AT), "2026-09-14T09:12:03.554Z");
        assert_eq!(parse_ms("2026-09-14T11:12:03+0200"), parse_ms("2026-09-14T09:12:03Z"));
    }
}
