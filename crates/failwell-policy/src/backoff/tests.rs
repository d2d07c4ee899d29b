use std::time::Duration;

use rand::{SeedableRng, rngs::StdRng};

use super::*;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

#[test]
fn rejects_zero_base_and_cap_below_base() {
    assert_eq!(Backoff::try_new(ms(0), ms(10), Jitter::Full), Err(BackoffError::ZeroBase));
    assert_eq!(
        Backoff::try_new(ms(100), ms(10), Jitter::Full),
        Err(BackoffError::CapBelowBase { base_ms: 100, cap_ms: 10 })
    );
}

#[test]
fn ceiling_doubles_then_caps_without_overflow() {
    let b = Backoff::try_new(ms(100), ms(5_000), Jitter::None).unwrap();
    let got: Vec<u128> = (0..8).map(|n| b.ceiling(n).as_millis()).collect();
    assert_eq!(got, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    assert_eq!(b.ceiling(u32::MAX), ms(5_000));
    let huge = Backoff::try_new(Duration::from_secs(u64::MAX / 4), Duration::MAX, Jitter::None).unwrap();
    assert_eq!(huge.ceiling(40), Duration::MAX);
}

#[test]
fn full_jitter_stays_within_zero_and_ceiling_and_spreads() {
    let b = Backoff::try_new(ms(100), ms(1_000), Jitter::Full).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let delays: Vec<Duration> = (0..1000).map(|_| b.delay(3, Duration::ZERO, &mut rng)).collect();
    assert!(delays.iter().all(|d| *d <= ms(800)));
    assert!(delays.iter().any(|d| *d < ms(200)), "full jitter reaches low values");
    assert!(delays.iter().any(|d| *d > ms(600)), "full jitter reaches high values");
}

#[test]
fn equal_jitter_keeps_at_least_half() {
    let b = Backoff::try_new(ms(100), ms(1_000), Jitter::Equal).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    for _ in 0..1000 {
        let d = b.delay(2, Duration::ZERO, &mut rng);
        assert!(d >= ms(200) && d <= ms(400), "{d:?}");
    }
}

#[test]
fn decorrelated_jitter_grows_from_previous_and_respects_cap() {
    let b = Backoff::try_new(ms(100), ms(1_000), Jitter::Decorrelated).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut prev = Duration::ZERO;
    for n in 0..50 {
        let d = b.delay(n, prev, &mut rng);
        assert!(d >= ms(100) && d <= ms(1_000), "{d:?}");
        assert!(d <= prev.max(ms(100)) * 3);
        prev = d;
    }
}

/// Seeds for the bound tests: each draws from its own generator.
const SEEDS: std::ops::Range<u64> = 0..500;

/// Checks `bounds(n, previous)` holds for every seed at retries 1 and 1,000,
/// with `previous` both a small value and the largest representable delay.
fn assert_bounds(b: &Backoff, bounds: impl Fn(u32, Duration) -> (Duration, Duration)) {
    for n in [1, 1_000] {
        for previous in [Duration::ZERO, ms(150), Duration::MAX] {
            let (low, high) = bounds(n, previous);
            for seed in SEEDS {
                let d = b.delay(n, previous, &mut StdRng::seed_from_u64(seed));
                assert!(d >= low && d <= high, "n={n} previous={previous:?} seed={seed}: {d:?}");
            }
        }
    }
}

#[test]
fn no_jitter_is_exactly_the_ceiling_at_retry_1_and_1000() {
    let b = Backoff::try_new(ms(100), ms(30_000), Jitter::None).unwrap();
    assert_bounds(&b, |n, _| if n == 1 { (ms(200), ms(200)) } else { (ms(30_000), ms(30_000)) });
}

#[test]
fn full_jitter_bounds_at_retry_1_and_1000() {
    let b = Backoff::try_new(ms(100), ms(30_000), Jitter::Full).unwrap();
    assert_bounds(&b, |n, _| if n == 1 { (ms(0), ms(200)) } else { (ms(0), ms(30_000)) });
}

#[test]
fn equal_jitter_bounds_at_retry_1_and_1000() {
    let b = Backoff::try_new(ms(100), ms(30_000), Jitter::Equal).unwrap();
    assert_bounds(&b, |n, _| if n == 1 { (ms(100), ms(200)) } else { (ms(15_000), ms(30_000)) });
}

#[test]
fn decorrelated_jitter_bounds_at_retry_1_and_1000() {
    let b = Backoff::try_new(ms(100), ms(30_000), Jitter::Decorrelated).unwrap();
    // random(base, min(cap, max(previous, base) * 3)), whatever n is.
    assert_bounds(&b, |_, previous| {
        let upper =
            if previous == Duration::MAX { ms(30_000) } else { (previous.max(ms(100)) * 3).min(ms(30_000)) };
        (ms(100), upper)
    });
}

#[test]
fn jitter_never_overflows_with_the_largest_durations() {
    let huge = Duration::MAX / 2;
    for jitter in [Jitter::None, Jitter::Full, Jitter::Equal, Jitter::Decorrelated] {
        let b = Backoff::try_new(huge, Duration::MAX, jitter).unwrap();
        for seed in 0..50 {
            let mut rng = StdRng::seed_from_u64(seed);
            for n in [0, 1, 31, 32, 1_000, u32::MAX] {
                let d = b.delay(n, Duration::MAX, &mut rng);
                let low = match jitter {
                    Jitter::Full => Duration::ZERO,
                    Jitter::Equal => b.ceiling(n) / 2,
                    Jitter::None => b.ceiling(n),
                    Jitter::Decorrelated => huge,
                };
                assert!(d >= low && d <= Duration::MAX, "{jitter:?} n={n}: {d:?}");
            }
        }
    }
}

#[test]
fn schedule_waits_each_entry_then_repeats_the_last() {
    let b = Backoff::schedule(vec![ms(10_000), ms(30_000), ms(60_000), ms(300_000)]).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let got: Vec<u128> = [0, 1, 2, 3, 4, 5, 1_000, u32::MAX]
        .into_iter()
        .map(|n| b.delay(n, ms(123), &mut rng).as_millis())
        .collect();
    assert_eq!(got, vec![10_000, 30_000, 60_000, 300_000, 300_000, 300_000, 300_000, 300_000]);
    assert_eq!(b.ceiling(2), ms(60_000));
    let single = Backoff::schedule(vec![ms(5)]).unwrap();
    assert_eq!(single.delay(0, Duration::ZERO, &mut rng), ms(5));
    assert_eq!(single.delay(9, Duration::ZERO, &mut rng), ms(5));
}

#[test]
fn schedule_rejects_an_empty_list_and_zero_entries() {
    assert_eq!(Backoff::schedule(vec![]), Err(BackoffError::EmptySchedule));
    assert_eq!(
        Backoff::schedule(vec![ms(10), ms(0), ms(30)]),
        Err(BackoffError::ZeroInSchedule { index: 1 })
    );
    assert_eq!(
        BackoffError::ZeroInSchedule { index: 1 }.to_string(),
        "schedule entry 1 must be greater than 0 ms"
    );
}

#[test]
fn schedule_and_exponential_are_distinct_values() {
    let exp = Backoff::try_new(ms(10), ms(10), Jitter::None).unwrap();
    let fixed = Backoff::schedule(vec![ms(10)]).unwrap();
    assert_ne!(exp, fixed);
    assert_eq!(fixed.clone(), fixed);
}
