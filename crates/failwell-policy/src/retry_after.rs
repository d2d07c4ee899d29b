//! Parsing of the HTTP `Retry-After` header (RFC 9110, section 10.2.3).
//!
//! Both forms are accepted: delta-seconds (`120`) and an HTTP-date
//! (`Wed, 21 Oct 2015 07:28:00 GMT`). The clock is an argument; this module
//! never reads it.

use std::time::{Duration, SystemTime};

/// Parses a `Retry-After` value into the wait it asks for, relative to `now`.
///
/// Returns `None` for a value that is neither form (the header is then
/// ignored, as RFC 9110 allows). A date in the past gives `Duration::ZERO`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs).or(Some(Duration::MAX));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::parse_retry_after;

    #[test]
    fn delta_seconds_and_http_date() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00 UTC
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO));
    }

    #[test]
    fn garbage_is_ignored_and_huge_values_saturate() {
        let now = SystemTime::UNIX_EPOCH;
        for bad in ["", "-1", "1.5", "soon", "12s"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
        assert_eq!(parse_retry_after("99999999999999999999999", now), Some(Duration::MAX));
    }
}
