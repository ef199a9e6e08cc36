//! Request times: unix milliseconds to the SigV4 `YYYYMMDD` day and
//! `YYYYMMDDTHHMMSSZ` timestamp (UTC, proleptic Gregorian calendar).

use crate::error::PresignError;

/// The last representable request time: 9999-12-31T23:59:59.999Z in unix milliseconds.
pub const MAX_UNIX_MS: i64 = 253_402_300_799_999;

const SECONDS_PER_DAY: i64 = 86_400;

/// The UTC day and SigV4 timestamp of a request time.
///
/// `unix_ms` is milliseconds since 1970-01-01T00:00:00Z; the milliseconds are
/// dropped (the timestamp is the second that contains the instant).
/// Returns `(day, amz_date)`, e.g. `("20130524", "20130524T000000Z")` for
/// `1_369_353_600_000`: `day` is the credential scope date and the only day a
/// signing key for this time may be derived for, `amz_date` the `X-Amz-Date` value.
///
/// # Errors
///
/// [`PresignError::TimeOutOfRange`] when `unix_ms` is negative or past
/// [`MAX_UNIX_MS`] (the year would not have four digits).
pub fn amz_date(unix_ms: i64) -> Result<(String, String), PresignError> {
    let second = unix_second(unix_ms)?;
    let (year, month, day) = civil_date(second.div_euclid(SECONDS_PER_DAY));
    let of_day = second.rem_euclid(SECONDS_PER_DAY);
    let (hour, minute, sec) = (of_day / 3600, of_day / 60 % 60, of_day % 60);
    let ymd = format!("{year:04}{month:02}{day:02}");
    let stamp = format!("{ymd}T{hour:02}{minute:02}{sec:02}Z");
    Ok((ymd, stamp))
}

/// The unix second of an in-range request time (milliseconds truncated).
pub(crate) fn unix_second(unix_ms: i64) -> Result<i64, PresignError> {
    if (0..=MAX_UNIX_MS).contains(&unix_ms) {
        Ok(unix_ms / 1000)
    } else {
        Err(PresignError::TimeOutOfRange(unix_ms))
    }
}

/// The (year, month 1..=12, day 1..=31) of a day count since 1970-01-01.
///
/// Counts in 400-year cycles (146 097 days each) of years that start on
/// March 1st, so that the leap day is the last day of its year; `days` must be
/// in `0..=2_932_896` (up to 9999-12-31), which keeps every step in range.
fn civil_date(days: i64) -> (i64, i64, i64) {
    // 0000-03-01 is 719 468 days before 1970-01-01.
    let since_0000_03_01 = days + 719_468;
    let cycle = since_0000_03_01 / 146_097;
    let day_of_cycle = since_0000_03_01 % 146_097;
    // Years of 365 days, less the leap days: one every 4 years (1460 days),
    // none every 100 years (36 524 days), one again at the end of the cycle.
    let year_of_cycle =
        (day_of_cycle - day_of_cycle / 1460 + day_of_cycle / 36_524 - day_of_cycle / 146_096) / 365;
    let day_of_year =
        day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100);
    // Months from March: 31 30 31 30 31 31 30 31 30 31 31 (29|28), a 153-day
    // pattern every 5 months.
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = cycle * 400 + year_of_cycle + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(ms: i64) -> String {
        amz_date(ms).unwrap().1
    }

    #[test]
    fn known_instants() {
        assert_eq!(
            amz_date(0).unwrap(),
            ("19700101".into(), "19700101T000000Z".into())
        );
        assert_eq!(
            amz_date(1_369_353_600_000).unwrap(),
            ("20130524".into(), "20130524T000000Z".into())
        );
        assert_eq!(stamp(1_369_353_600_999), "20130524T000000Z");
        assert_eq!(stamp(951_782_400_000), "20000229T000000Z");
        assert_eq!(stamp(951_868_799_000), "20000229T235959Z");
        assert_eq!(stamp(4_107_542_400_000), "21000301T000000Z");
        assert_eq!(stamp(1_735_689_599_000), "20241231T235959Z");
        assert_eq!(stamp(1_709_210_096_789), "20240229T123456Z");
        assert_eq!(
            amz_date(MAX_UNIX_MS).unwrap(),
            ("99991231".into(), "99991231T235959Z".into())
        );
    }

    #[test]
    fn out_of_range() {
        for ms in [-1, i64::MIN, MAX_UNIX_MS + 1, i64::MAX] {
            assert_eq!(amz_date(ms), Err(PresignError::TimeOutOfRange(ms)));
        }
    }

    #[test]
    fn every_day_follows_the_previous_one() {
        let mut prev = civil_date(0);
        assert_eq!(prev, (1970, 1, 1));
        for days in 1..=2_932_896 {
            let next = civil_date(days);
            let (y, m, d) = prev;
            let expected_next = if next.2 == 1 {
                if m == 12 {
                    (y + 1, 1, 1)
                } else {
                    (y, m + 1, 1)
                }
            } else {
                (y, m, d + 1)
            };
            assert_eq!(next, expected_next, "day {days}");
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let month_len = match m {
                2 if leap => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            assert_eq!(
                next.2 == 1,
                d == month_len,
                "day {days}: {prev:?} -> {next:?}"
            );
            prev = next;
        }
        assert_eq!(prev, (9999, 12, 31));
    }
}
