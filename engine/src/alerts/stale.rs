//! The stale-session alert, derived as upstream's `deriveStaleSession` does (lib/alert-state.ts,
//! the revision that adds it to `alert-update`): `runtime.json` says `in_progress`, and the last
//! `[HH:MM]` stamp of SHELL.md's `## Progress Log` is older than `heartbeat.stale_threshold`
//! (default 2 h), read as its most recent past occurrence (mod 24 h).
//!
//! Pure: the caller reads `runtime.json`'s row (the heartbeat's) and SHELL.md's (the session
//! domain's, as a schema document). Does not read files or the store.

use serde_json::Value;

use super::tick_input::{FiringItem, STALE_KEY};

/// `parseDuration(config.heartbeat?.stale_threshold, 2 * 3600000)`'s default, in seconds.
pub(crate) const STALE_THRESHOLD_S_DEFAULT: u64 = 2 * 3600;
/// The section whose last stamp is the session's last sign of work.
const PROGRESS_LOG: &str = "Progress Log";
const MINUTES_PER_DAY: u64 = 24 * 60;

/// The stale-session item, or `None` when the session is not in progress, has no Progress Log
/// stamp, or was active within the threshold. An absent or unparseable runtime is idle, and an
/// absent SHELL.md has nothing to measure, as upstream reads them.
#[must_use]
pub(crate) fn derive_stale(
    runtime: Option<&str>,
    shell: Option<&str>,
    hhmm_now: &str,
    threshold_s: u64,
) -> Option<FiringItem> {
    let runtime: Value = serde_json::from_str(runtime?).ok()?;
    if runtime.get("session_state").and_then(Value::as_str) != Some("in_progress") {
        return None;
    }
    let section = progress_log(shell?)?;
    let last = last_stamp(section)?;
    let elapsed_min = elapsed_min(hhmm_now, last)?;
    if elapsed_min.saturating_mul(60) <= threshold_s {
        return None;
    }
    let text = format!(
        "session marked in-progress but quiet — no Progress Log entry since [{last}] (~{}h)",
        hours_to_fixed_1(elapsed_min)
    );
    Some(FiringItem { key: STALE_KEY.into(), text, channel_text: None })
}

fn is_terminator(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

/// md-write's `findSection` body of `## Progress Log`: from its heading line (alone on its
/// line, trailing spaces and tabs allowed) to the next `\n## `.
fn progress_log(content: &str) -> Option<&str> {
    let needle = format!("## {PROGRESS_LOG}");
    let mut from = 0;
    while let Some(i) = content[from..].find(&needle).map(|i| from + i) {
        let line_start = i == 0 || content[..i].ends_with(is_terminator);
        let after = &content[i + needle.len()..];
        let rest = after.trim_start_matches([' ', '\t']);
        if line_start && (rest.is_empty() || rest.starts_with(is_terminator)) {
            let start = content.len() - rest.len();
            let end = content[start..].find("\n## ").map_or(content.len(), |j| start + j);
            return Some(&content[start..end]);
        }
        from = i + 1;
        while !content.is_char_boundary(from) {
            from += 1;
        }
    }
    None
}

/// The last match of `/\[(\d{1,2}:\d{2})\]/g`: its `H:MM` or `HH:MM`.
fn last_stamp(section: &str) -> Option<&str> {
    let bytes = section.as_bytes();
    let mut last = None;
    for (i, _) in section.match_indices('[') {
        let digits = bytes[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
        let colon = i + 1 + digits;
        let ok = (1..=2).contains(&digits)
            && bytes.get(colon) == Some(&b':')
            && bytes.get(colon + 1..colon + 3).is_some_and(|m| m.iter().all(u8::is_ascii_digit))
            && bytes.get(colon + 3) == Some(&b']');
        if ok {
            last = Some(&section[i + 1..colon + 3]);
        }
    }
    last
}

/// `elapsedSinceHHMM` in minutes: a stamp after now is yesterday's.
fn elapsed_min(now: &str, stamp: &str) -> Option<u64> {
    let minutes = |s: &str| -> Option<u64> {
        let (h, m) = s.split_once(':')?;
        Some(h.parse::<u64>().ok()? * 60 + m.parse::<u64>().ok()?)
    };
    let (now, stamp) = (minutes(now)?, minutes(stamp)?);
    Some(if now >= stamp { now - stamp } else { now + MINUTES_PER_DAY - stamp })
}

/// `(elapsedMs / 3600000).toFixed(1)` for a whole number of minutes. toFixed rounds the double's
/// exact value and takes the larger neighbour on an exact tie; Rust's formatting rounds the
/// exact value too, but a tie to even. The exact ties are the quarter hours m = 15 (mod 30).
fn hours_to_fixed_1(minutes: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "minutes of a day, far below 2^52")]
    let hours = (minutes * 60_000) as f64 / 3_600_000.0;
    if minutes % 30 == 15 {
        format!("{:.1}", hours + 0.01)
    } else {
        format!("{hours:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNNING: &str = "{\"session_state\":\"in_progress\"}";

    fn shell(log: &str) -> String {
        format!("# Active Session\n\n## Progress Log\n{log}\n## Findings\n- [23:59] not here\n")
    }

    #[test]
    fn a_quiet_running_session_fires_with_upstreams_text() {
        let text = shell("[09:10] Started\n[9:40] Did X\n");
        let item = derive_stale(Some(RUNNING), Some(&text), "12:00", 7200).unwrap();
        assert_eq!(item.key, "stale-session");
        assert_eq!(
            item.text,
            "session marked in-progress but quiet — no Progress Log entry since [9:40] (~2.3h)"
        );
        // Within the threshold, or exactly at it, nothing fires.
        assert_eq!(derive_stale(Some(RUNNING), Some(&text), "11:40", 7200), None);
        assert_eq!(derive_stale(Some(RUNNING), Some(&text), "11:39", 7200), None);
    }

    #[test]
    fn midnight_and_idle_and_missing_sources_read_as_upstream() {
        let text = shell("[23:30] Late\n");
        let item = derive_stale(Some(RUNNING), Some(&text), "02:00", 3600).unwrap();
        assert!(item.text.ends_with("since [23:30] (~2.5h)"), "{}", item.text);
        assert_eq!(
            derive_stale(Some("{\"session_state\":\"idle\"}"), Some(&text), "09:00", 60),
            None
        );
        assert_eq!(derive_stale(Some("not json"), Some(&text), "09:00", 60), None);
        assert_eq!(derive_stale(None, Some(&text), "09:00", 60), None);
        assert_eq!(derive_stale(Some(RUNNING), None, "09:00", 60), None);
        assert_eq!(derive_stale(Some(RUNNING), Some(&shell("no stamps\n")), "09:00", 60), None);
        // `[123:45]` and `[1:2]` are not stamps.
        assert_eq!(
            derive_stale(Some(RUNNING), Some(&shell("[123:45] [1:2]\n")), "09:00", 60),
            None
        );
    }

    #[test]
    fn hours_round_as_to_fixed_does() {
        // 15 min is exactly 0.25 h: toFixed(1) says 0.3, Rust's tie-to-even 0.2.
        assert_eq!(hours_to_fixed_1(15), "0.3");
        assert_eq!(hours_to_fixed_1(45), "0.8");
        // 9 min is 0.15 h, whose double lies below the tie: 0.1 both ways.
        assert_eq!(hours_to_fixed_1(9), "0.1");
        assert_eq!(hours_to_fixed_1(150), "2.5");
        assert_eq!(hours_to_fixed_1(140), "2.3");
    }
}
