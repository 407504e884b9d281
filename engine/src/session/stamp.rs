//! The timestamp spellings of hermit's session files (legacy-layout §0.1): `toISOString`,
//! `utcISOStamp`, `localISOStamp` and `zonedISOStamp` in the configured zone, and the subset of
//! `Date.parse` the files need.
//!
//! Pure arithmetic on UTC milliseconds. Does not read a clock: upstream's `localISOStamp` uses the
//! machine's zone; hookstate takes the zone (`config.timezone`) as an argument instead.

use std::str::FromStr;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, TimeZone, Utc};

use crate::{Error, Result};

/// The last millisecond of year 9999: past it `toISOString` writes a six-digit year, and the
/// legacy stamps have four-digit years.
pub const TIME_MS_MAX: u64 = 253_402_300_799_999;

fn utc(at_ms: u64) -> Option<DateTime<Utc>> {
    if at_ms > TIME_MS_MAX {
        return None;
    }
    DateTime::from_timestamp_millis(i64::try_from(at_ms).ok()?)
}

/// Checks a call's time: at most [`TIME_MS_MAX`].
///
/// # Errors
/// [`Error::Invalid`] for a later time.
pub fn check_time(at_ms: u64) -> Result<()> {
    if utc(at_ms).is_none() {
        return Err(Error::invalid(format!(
            "time {at_ms} ms is after 9999-12-31T23:59:59.999Z ({TIME_MS_MAX} ms), past the \
             four-digit years of the legacy stamps"
        )));
    }
    Ok(())
}

/// The zone of `config.timezone`.
///
/// # Errors
/// [`Error::Invalid`] for a name that is not an IANA zone.
pub fn zone(timezone: &str) -> Result<chrono_tz::Tz> {
    chrono_tz::Tz::from_str(timezone)
        .map_err(|_| Error::invalid(format!("time zone {timezone:?} is not an IANA zone name")))
}

fn format_utc(at_ms: u64, format: &str) -> String {
    utc(at_ms).map(|t| t.format(format).to_string()).unwrap_or_default()
}

/// `new Date(ms).toISOString()`: `YYYY-MM-DDTHH:MM:SS.mmmZ` (empty past [`TIME_MS_MAX`], which
/// [`check_time`] refuses first).
#[must_use]
pub fn iso(at_ms: u64) -> String {
    format_utc(at_ms, "%Y-%m-%dT%H:%M:%S%.3fZ")
}

/// `utcISOStamp()`: `YYYY-MM-DDTHH:MM:SSZ`.
#[must_use]
pub fn utc_seconds(at_ms: u64) -> String {
    format_utc(at_ms, "%Y-%m-%dT%H:%M:%SZ")
}

/// `localISOStamp()` in `timezone`: `YYYY-MM-DDTHH:MM:SS±HHMM`.
///
/// # Errors
/// [`Error::Invalid`] for a bad zone or time.
pub fn local(at_ms: u64, timezone: &str) -> Result<String> {
    zoned_format(at_ms, timezone, "%Y-%m-%dT%H:%M:%S%z")
}

/// `zonedISOStamp()`: `YYYY-MM-DDTHH:MM:SS±HH:MM` in `timezone`.
///
/// # Errors
/// [`Error::Invalid`] for a bad zone or time.
pub fn zoned(at_ms: u64, timezone: &str) -> Result<String> {
    zoned_format(at_ms, timezone, "%Y-%m-%dT%H:%M:%S%:z")
}

/// Any `strftime` spelling of `at_ms` in `timezone` (`%Y-%m-%d` for a local date, `%H:%M`).
///
/// # Errors
/// [`Error::Invalid`] for a bad zone or time.
pub fn zoned_format(at_ms: u64, timezone: &str, format: &str) -> Result<String> {
    let at = utc(at_ms).ok_or_else(|| Error::invalid("time is out of range"))?;
    Ok(at.with_timezone(&zone(timezone)?).format(format).to_string())
}

/// A wall-clock time in `timezone` (`YYYY-MM-DD HH:MM`, as SHELL.md's `**Started:**` holds it),
/// in UTC ms; the earlier instant when the wall time repeats, `None` when it does not exist.
#[must_use]
pub fn parse_local_minute(text: &str, timezone: &str) -> Option<i64> {
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").ok()?;
    let zone = zone(timezone).ok()?;
    zone.from_local_datetime(&naive).earliest().map(|t| t.timestamp_millis())
}

/// `Date.parse` of the ISO 8601 forms these files hold, in UTC ms: a date (`YYYY-MM-DD`, read as
/// UTC midnight, as JavaScript reads it), or a date-time with seconds or not, an optional
/// fraction, and a zone (`Z`, `±HH:MM` or localISOStamp's `±HHMM`). `None` for anything else, a
/// zone-less date-time included: JavaScript reads that in the machine's zone, which hookstate
/// does not guess.
#[must_use]
pub fn parse(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() == 10 {
        let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()?;
        return Some(date.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis());
    }
    if bytes.len() < 17 || !bytes[..4].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let with_seconds = if bytes.get(16) == Some(&b':') {
        text.to_owned()
    } else {
        format!("{}:00{}", &text[..16], text.get(16..)?)
    };
    DateTime::<FixedOffset>::parse_from_rfc3339(&with_seconds)
        .ok()
        .or_else(|| DateTime::parse_from_str(&with_seconds, "%Y-%m-%dT%H:%M:%S%.f%z").ok())
        .map(|t| t.timestamp_millis())
        .filter(|ms| u64::try_from(*ms).is_ok_and(|ms| ms <= TIME_MS_MAX))
}

/// `new Date(text).toISOString()` for a text [`parse`] reads.
#[must_use]
pub fn normalise(text: &str) -> Option<String> {
    parse(text).and_then(|ms| u64::try_from(ms).ok()).map(iso)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Option<&str>) {
        assert_eq!(normalise(text).as_deref(), expected, "{text}");
    }

    #[test]
    fn date_parse_reads_the_iso_forms_and_nothing_else() {
        check("2026-09-15T16:00:00.000Z", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T16:00:00Z", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T18:00:00+02:00", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T18:00:00+0200", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T16:00Z", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T16:00:00.5Z", Some("2026-09-15T16:00:00.500Z"));
        check("2026-09-15", Some("2026-09-15T00:00:00.000Z"));
        for bad in ["", "tomorrow", "2026-09-15T16:00:00", "2026-13-01", "2026-02-30T00:00:00Z"] {
            check(bad, None);
        }
    }

    #[test]
    fn stamps_spell_as_upstream() {
        let ms = 1_789_373_702_118; // 2026-09-14T08:15:02.118Z
        assert_eq!(iso(ms), "2026-09-14T08:15:02.118Z");
        assert_eq!(utc_seconds(ms), "2026-09-14T08:15:02Z");
        assert_eq!(local(ms, "Europe/Berlin").unwrap(), "2026-09-14T10:15:02+0200");
        assert_eq!(zoned(ms, "Europe/Berlin").unwrap(), "2026-09-14T10:15:02+02:00");
        assert_eq!(local(ms, "UTC").unwrap(), "2026-09-14T08:15:02+0000");
        assert!(local(ms, "Mars/Olympus").is_err());
        assert!(check_time(TIME_MS_MAX + 1).is_err());
        assert_eq!(
            parse_local_minute("2026-09-14 10:15", "Europe/Berlin"),
            Some(1_789_373_700_000)
        );
    }
}
