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
