use super::*;

const DAY: i64 = 86_400_000;

#[test]
fn times_are_rfc3339_utc() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(20_000 * DAY + 1_234), "2024-10-04T00:00:01.234Z");
}
