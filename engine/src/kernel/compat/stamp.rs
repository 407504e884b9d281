//! The timestamp spellings of the upstream programs (legacy-layout.md §0.1), each written once:
//! `utcISOStamp` and shell `date -u +%Y-%m-%dT%H:%M:%SZ` ([`stamp_s`]), `toISOString()`
//! ([`stamp_ms`]), `zonedISOStamp` ([`zoned_stamp`]), `localISOStamp` ([`local_stamp`]), and the
//! zone-local dates and times (`todayYMD`, `thisWeekKey`, `thisMonthYYYYMM`, `nowHHMMSS`) through
//! [`zoned`]; the zone of `config.timezone` ([`zone`]); and `Date.parse` of them ([`parse`],
//! [`parse_offset_ms`]).
//!
//! Pure: time comes in as milliseconds since the epoch. Does not read a clock.

use std::str::FromStr;

use chrono::{DateTime, FixedOffset, Utc};

use crate::kernel::error::{Error, Result};

const MS_PER_DAY: u64 = 86_400_000;

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
}
