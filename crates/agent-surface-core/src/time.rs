//! Wall-clock instants as the agent channel shows them.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A wall-clock instant with millisecond precision, as milliseconds since the Unix epoch.
///
/// Rendered in RFC 3339 UTC (`2026-11-29T13:05:00.000Z`) on the agent channel.
///
/// ```
/// use agent_surface_core::Timestamp;
/// let t = Timestamp::from_unix_millis(1_795_957_500_123);
/// assert_eq!(t.to_rfc3339(), "2026-11-29T13:05:00.123Z");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The instant `millis` milliseconds after the Unix epoch, at most [`Timestamp::MAX`].
    pub const fn from_unix_millis(millis: u64) -> Timestamp {
        Timestamp(if millis > Self::MAX.0 { Self::MAX.0 } else { millis })
    }

    /// The current system time (clamped to the epoch if the clock is before it).
    pub fn now() -> Timestamp {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        Timestamp(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }

    /// Milliseconds since the Unix epoch.
    pub const fn unix_millis(self) -> u64 {
        self.0
    }

    /// The latest instant RFC 3339 can express with a four-digit year: 9999-12-31T23:59:59.999Z.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999);

    /// This instant plus `d`, saturating at [`Timestamp::MAX`] (so that any instant renders as
    /// valid RFC 3339, however long a configured lifetime is).
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(ms).min(Self::MAX.0))
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// RFC 3339 in UTC with milliseconds.
    pub fn to_rfc3339(self) -> String {
        self.to_string()
    }

    /// Parses the exact form [`Timestamp::to_rfc3339`] writes (`YYYY-MM-DDTHH:MM:SS.mmmZ`, UTC);
    /// `None` for anything else, including other valid RFC 3339 spellings.
    ///
    /// ```
    /// use agent_surface_core::Timestamp;
    /// let t = Timestamp::from_unix_millis(1_795_957_500_123);
    /// assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Some(t));
    /// assert_eq!(Timestamp::parse_rfc3339("2026-11-29T13:05:00Z"), None);
    /// ```
    pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
        let b = text.as_bytes();
        let shape = b.len() == 24
            && [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':'), (19, b'.'), (23, b'Z')]
                .iter()
                .all(|&(i, c)| b[i] == c);
        if !shape {
            return None;
        }
        let num = |from: usize, to: usize| -> Option<u64> {
            let digits = &b[from..to];
            digits.iter().all(u8::is_ascii_digit).then(|| digits.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
        };
        let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
        let (hh, mm, ss, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
        if y < 1970 || !(1..=12).contains(&m) || d == 0 || hh > 23 || mm > 59 || ss > 59 {
            return None;
        }
        let days = days_from_civil(y, m, d);
        // A day past the month's end would roll into the next month: refuse it.
        if civil_from_days(days) != (y, m, d) {
            return None;
        }
        Some(Timestamp::from_unix_millis(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1000) + ms))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0 % 1000;
        let secs = self.0 / 1000;
        let days = secs / 86_400;
        let rem = secs % 86_400;
        let (y, m, d) = civil_from_days(days);
        write!(f, "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, (rem % 3600) / 60, rem % 60)
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
///
/// Howard Hinnant's `civil_from_days`, restricted to non-negative day counts.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A proleptic Gregorian date (year ≥ 1970) to days since 1970-01-01 (Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(ms: u64, expected: &str) {
        assert_eq!(Timestamp::from_unix_millis(ms).to_rfc3339(), expected);
    }

    #[test]
    fn formats_known_instants() {
        check(0, "1970-01-01T00:00:00.000Z");
        check(951_782_400_000, "2000-02-29T00:00:00.000Z");
        check(1_709_164_800_000, "2024-02-29T00:00:00.000Z");
        check(4_102_444_799_999, "2099-12-31T23:59:59.999Z");
        check(u64::MAX, "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp::from_unix_millis(0).saturating_add(Duration::MAX), Timestamp::MAX);
        assert_eq!(Timestamp::MAX.to_rfc3339(), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn parses_what_it_writes_and_nothing_else() {
        for ms in [0, 951_782_400_000, 1_709_164_800_000, 1_795_957_500_123, 4_102_444_799_999, Timestamp::MAX.0] {
            let t = Timestamp::from_unix_millis(ms);
            assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Some(t), "{ms}");
        }
        for bad in [
            "2026-02-30T00:00:00.000Z",
            "2025-02-29T00:00:00.000Z",
            "2026-13-01T00:00:00.000Z",
            "2026-01-01T24:00:00.000Z",
            "1969-12-31T23:59:59.999Z",
            "2026-01-01T00:00:00.000+00:00",
            "2026-01-01 00:00:00.000Z",
            "+026-01-01T00:00:00.000Z",
            "",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(bad), None, "{bad}");
        }
    }
}
