//! The timestamp spellings of the upstream programs (legacy-layout.md §0.1), each written once:
//! `utcISOStamp` and shell `date -u +%Y-%m-%dT%H:%M:%SZ` ([`stamp_s`]), `toISOString()`
//! ([`stamp_ms`]), `zonedISOStamp` ([`zoned_stamp`]), `localISOStamp` ([`local_stamp`]), and the
//! zone-local dates and times (`todayYMD`, `thisWeekKey`, `thisMonthYYYYMM`, `nowHHMMSS`) through
//! [`zoned`]; the zone of `config.timezone` ([`zone`]); `Date.parse` of them ([`parse`],
//! [`parse_offset_ms`], and [`date_parse`] for every ISO form the hermit session files hold);
//! and the four-digit-year bound of the legacy stamps ([`check_time`]).
//!
//! Pure: time comes in as milliseconds since the epoch. Does not read a clock.

use std::str::FromStr;

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, TimeZone, Utc};

use crate::kernel::error::{Error, Result};

const MS_PER_DAY: u64 = 86_400_000;
/// The last millisecond of year 9999: past it `toISOString` writes a six-digit year, and the
/// legacy stamps have four-digit years.
pub(crate) const TIME_MS_MAX: u64 = 253_402_300_799_999;

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let year = if month <= 2 { year.checked_sub(1)? } else { year };
    let era = year / 400;
    let yoe = year % 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

fn stamp(ms: u64, millis: bool) -> String {
    let (year, month, day) = civil_from_days(ms / MS_PER_DAY);
    let in_day = ms % MS_PER_DAY;
    let (h, m, s) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1000 % 60);
    let base = format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}");
    if millis {
        format!("{base}.{:03}Z", ms % 1000)
    } else {
        format!("{base}Z")
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as the shell adapters write.
pub(crate) fn stamp_s(ms: u64) -> String {
    stamp(ms, false)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as `toISOString()` writes.
pub(crate) fn stamp_ms(ms: u64) -> String {
    stamp(ms, true)
}

/// The zone `config.timezone` names.
///
/// # Errors
/// [`Error::Invalid`] for a name that is not an IANA zone.
pub(crate) fn zone(timezone: &str) -> Result<chrono_tz::Tz> {
    chrono_tz::Tz::from_str(timezone).map_err(|_| Error::BadTimeZone { zone: timezone.to_owned() })
}

/// `at_ms` as a UTC date-time.
///
/// # Errors
/// [`Error::Invalid`] past what a date-time holds.
pub(crate) fn utc(at_ms: u64) -> Result<DateTime<Utc>> {
    i64::try_from(at_ms)
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .ok_or(Error::TimeOutOfRange { ms: at_ms })
}

/// `at_ms` in `timezone`, formatted with a chrono `format` (`%Y-%m-%d` is `todayYMD`, `%G-W%V`
/// `thisWeekKey`, `%Y-%m` `thisMonthYYYYMM`, `%H%M%S` `nowHHMMSS`).
///
/// # Errors
/// [`Error::Invalid`] for an unknown zone or a time out of range.
pub(crate) fn zoned(at_ms: u64, timezone: &str, format: &str) -> Result<String> {
    Ok(utc(at_ms)?.with_timezone(&zone(timezone)?).format(format).to_string())
}

/// `zonedISOStamp`: `YYYY-MM-DDTHH:MM:SS±HH:MM` in the zone.
///
/// # Errors
/// [`Error::Invalid`] for an unknown zone or a time out of range.
pub(crate) fn zoned_stamp(at_ms: u64, timezone: &str) -> Result<String> {
    zoned(at_ms, timezone, "%Y-%m-%dT%H:%M:%S%:z")
}

/// `localISOStamp` in `timezone` (upstream uses the machine's zone): `YYYY-MM-DDTHH:MM:SS±HHMM`,
/// no colon in the offset.
///
/// # Errors
/// [`Error::Invalid`] for an unknown zone or a time out of range.
pub(crate) fn local_stamp(at_ms: u64, timezone: &str) -> Result<String> {
    zoned(at_ms, timezone, "%Y-%m-%dT%H:%M:%S%z")
}

/// `Date.parse` of an ISO stamp with an offset (`Z`, `±HH:MM` or `±HHMM`), in UTC ms.
pub(crate) fn parse_offset_ms(stamp: &str) -> Option<i64> {
    DateTime::<FixedOffset>::parse_from_rfc3339(stamp)
        .ok()
        .or_else(|| DateTime::parse_from_str(stamp, "%Y-%m-%dT%H:%M:%S%z").ok())
        .map(|t| t.timestamp_millis())
}

/// Checks a call's time against the four-digit years of the legacy stamps ([`TIME_MS_MAX`]).
///
/// # Errors
/// [`Error::TimeOutOfRange`] for a later time.
pub(crate) fn check_time(at_ms: u64) -> Result<()> {
    if at_ms > TIME_MS_MAX {
        return Err(Error::TimeOutOfRange { ms: at_ms });
    }
    Ok(())
}

/// `Date.parse` of the ISO 8601 forms hermit's session files hold, in UTC ms: a date
/// (`YYYY-MM-DD`, read as UTC midnight, as JavaScript reads it), or a date-time with seconds or
/// not, an optional fraction, and a zone (`Z`, `±HH:MM` or localISOStamp's `±HHMM`). `None` for
/// anything else, a zone-less date-time included: JavaScript reads that in the machine's zone,
/// which hookstate does not guess; and `None` past [`TIME_MS_MAX`].
pub(crate) fn date_parse(text: &str) -> Option<i64> {
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
        format!("{}:00{}", text.get(..16)?, text.get(16..)?)
    };
    parse_offset_ms(&with_seconds)
        .or_else(|| {
            DateTime::parse_from_str(&with_seconds, "%Y-%m-%dT%H:%M:%S%.f%z")
                .ok()
                .map(|t| t.timestamp_millis())
        })
        .filter(|ms| u64::try_from(*ms).is_ok_and(|ms| ms <= TIME_MS_MAX))
}

/// `new Date(text).toISOString()` for a text [`date_parse`] reads.
pub(crate) fn date_normalise(text: &str) -> Option<String> {
    date_parse(text).and_then(|ms| u64::try_from(ms).ok()).map(stamp_ms)
}

/// A wall-clock time in `timezone` (`YYYY-MM-DD HH:MM`, as SHELL.md's `**Started:**` holds it),
/// in UTC ms; the earlier instant when the wall time repeats, `None` when it does not exist.
pub(crate) fn parse_local_minute(text: &str, timezone: &str) -> Option<i64> {
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").ok()?;
    let zone = zone(timezone).ok()?;
    zone.from_local_datetime(&naive).earliest().map(|t| t.timestamp_millis())
}

/// Parses either UTC spelling; `None` for anything else (the hook treats that as "unknown").
pub(crate) fn parse(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<u64> {
        let part = text.get(from..from + len)?;
        part.bytes().all(|c| c.is_ascii_digit()).then(|| part.parse().ok())?
    };
    let shape = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':')];
    if b.len() < 20 || shape.iter().any(|&(i, c)| b[i] != c) || b[b.len() - 1] != b'Z' {
        return None;
    }
    let millis = match b.len() {
        20 => 0,
        24 if b[19] == b'.' => num(20, 3)?,
        _ => return None,
    };
    let (month, day, h, m, s) = (num(5, 2)?, num(8, 2)?, num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(num(0, 4)?, month, day)?;
    Some(days * MS_PER_DAY + h * 3_600_000 + m * 60_000 + s * 1000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip_in_both_spellings() {
        let ms = 1_764_453_052_772; // 2025-11-29T21:50:52.772Z
        assert_eq!(stamp_ms(ms), "2025-11-29T21:50:52.772Z");
        assert_eq!(stamp_s(ms), "2025-11-29T21:50:52Z");
        assert_eq!(parse("2025-11-29T21:50:52.772Z"), Some(ms));
        assert_eq!(parse("2025-11-29T21:50:52Z"), Some(ms - 772));
        assert_eq!(
            parse("2000-02-29T00:00:00Z").map(stamp_s).as_deref(),
            Some("2000-02-29T00:00:00Z")
        );
        for bad in [
            "",
            "2025-11-29",
            "2025-11-29T21:50:52",
            "2025-13-01T00:00:00Z",
            "x025-11-29T21:50:52Z",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn date_parse_reads_the_iso_forms_and_nothing_else() {
        let check = |text: &str, expected: Option<&str>| {
            assert_eq!(date_normalise(text).as_deref(), expected, "{text}");
        };
        check("2026-09-15T16:00:00.000Z", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T16:00:00Z", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T18:00:00+02:00", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T18:00:00+0200", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T18:00:00.25+0200", Some("2026-09-15T16:00:00.250Z"));
        check("2026-09-15T16:00Z", Some("2026-09-15T16:00:00.000Z"));
        check("2026-09-15T16:00:00.5Z", Some("2026-09-15T16:00:00.500Z"));
        check("2026-09-15", Some("2026-09-15T00:00:00.000Z"));
        for bad in ["", "tomorrow", "2026-09-15T16:00:00", "2026-13-01", "2026-02-30T00:00:00Z"] {
            check(bad, None);
        }
        assert!(check_time(TIME_MS_MAX).is_ok());
        assert!(check_time(TIME_MS_MAX + 1).is_err());
        assert_eq!(
            parse_local_minute("2026-09-14 10:15", "Europe/Berlin"),
            Some(1_789_373_700_000)
        );
        let ms = 1_789_373_702_118; // 2026-09-14T08:15:02.118Z
        assert_eq!(local_stamp(ms, "Europe/Berlin").unwrap(), "2026-09-14T10:15:02+0200");
        assert_eq!(zoned_stamp(ms, "Europe/Berlin").unwrap(), "2026-09-14T10:15:02+02:00");
        assert!(local_stamp(ms, "Mars/Olympus").is_err());
    }
}
