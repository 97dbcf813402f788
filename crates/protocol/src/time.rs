//! Instants as the wire writes them: RFC 3339 in UTC, from a count since the Unix epoch the
//! caller read from its own clock (this crate reads none).

/// `seconds` since the epoch as an RFC 3339 UTC date-time, `2026-05-01T12:00:00Z`.
pub fn rfc3339(seconds: i64) -> String {
    let (date, time) = split(seconds);
    format!("{date}T{time}Z")
}

/// `millis` since the epoch as an RFC 3339 UTC date-time with milliseconds,
/// `2026-12-05T01:44:57.908Z`: how `network/policyDecision` stamps a decision.
pub fn rfc3339_millis(millis: i64) -> String {
    let (date, time) = split(millis.div_euclid(1000));
    format!("{date}T{time}.{:03}Z", millis.rem_euclid(1000))
}

/// The date and the time of day, each as written.
fn split(seconds: i64) -> (String, String) {
    let (days, time) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (time / 3600, time / 60 % 60, time % 60);
    (format!("{year:04}-{month:02}-{day:02}"), format!("{hour:02}:{minute:02}:{second:02}"))
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`):
/// eras of 400 years, each exactly 146 097 days, counted from 0000-03-01 so that the leap day
/// ends a year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_800_000_000), "2027-01-15T08:00:00Z");
        assert_eq!(rfc3339(4_102_444_799), "2099-12-31T23:59:59Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn milliseconds_are_three_digits() {
        assert_eq!(rfc3339_millis(1_796_435_097_908), "2026-12-05T01:44:57.908Z");
        assert_eq!(rfc3339_millis(5), "1970-01-01T00:00:00.005Z");
        assert_eq!(rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
    }
}
