use super::*;

const DAY: i64 = 86_400_000;
const HOUR: i64 = 3_600_000;

#[test]
fn schedules_parse_and_refuse_with_the_spelling() {
    assert_eq!(Schedule::parse("daily 02:30"), Ok(Schedule::Daily { minute: 150 }));
    assert_eq!(Schedule::parse("every 15m"), Ok(Schedule::Every(Duration::from_secs(900))));
    assert_eq!(Schedule::parse(" every  6h "), Ok(Schedule::Every(Duration::from_secs(6 * 3600))));
    assert_eq!(Schedule::parse("every 1d"), Ok(Schedule::Every(Duration::from_secs(86_400))));
    assert_eq!(Schedule::parse("every 30s"), Ok(Schedule::Every(Duration::from_secs(30))));
    for bad in [
        "daily 24:00",
        "daily 2:30",
        "daily 02:60",
        "every 0m",
        "every 5w",
        "every m",
        "nightly",
        "",
        "every 400d",
    ] {
        let err = Schedule::parse(bad).unwrap_err().to_string();
        assert!(err.contains("daily HH:MM") || err.contains("between"), "{bad:?}: {err}");
    }
}

#[test]
fn a_daily_run_compares_yesterday() {
    let daily = Schedule::Daily { minute: 120 };
    let day = 20_000 * DAY; // a midnight UTC
    assert_eq!(daily.next_run(day), day + 2 * HOUR);
    assert_eq!(daily.next_run(day + 2 * HOUR), day + DAY + 2 * HOUR, "strictly after");
    assert_eq!(daily.next_run(day + 3 * HOUR), day + DAY + 2 * HOUR);
    assert_eq!(daily.window(day + 2 * HOUR), (day - DAY, day));
}

#[test]
fn a_periodic_run_compares_the_period_before_the_last() {
    let every = Schedule::Every(Duration::from_secs(3600));
    assert_eq!(every.next_run(10 * HOUR + 1), 11 * HOUR);
    assert_eq!(every.next_run(10 * HOUR), 11 * HOUR);
    assert_eq!(every.window(11 * HOUR), (9 * HOUR, 10 * HOUR));
}
