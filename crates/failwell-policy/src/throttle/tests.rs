use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

fn s(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

/// Throttling answers in a row that cut the rate with the defaults.
fn signal() -> u32 {
    ThrottleConfig::default().cut_after() as u32
}

/// 100 answers in the first second, then a throttling signal: cut.
fn cut_after_a_second() -> AdaptiveRate {
    let mut r = rate();
    answer(&mut r, 0.0, 1.0, 100, 0);
    for i in 0..signal() {
        r.observe(s(1.0), s(1.0 + 0.001 * f64::from(i)), true);
    }
    r
}

fn rate() -> AdaptiveRate {
    AdaptiveRate::new(ThrottleConfig::default(), Duration::ZERO).unwrap()
}

/// The rate the first cut among `observed` set.
fn first_cut(observed: &[Observation]) -> f64 {
    observed.iter().find_map(|o| o.cut_to).expect("the rate was cut")
}

/// Answers `n` calls evenly over `secs` from `from`, every `every`-th one
/// throttled (0: none); each call's answer arrives 1 ms after it was sent.
fn answer(r: &mut AdaptiveRate, from: f64, secs: f64, n: usize, every: usize) -> Vec<Observation> {
    (0..n)
        .map(|i| {
            let at = from + secs * i as f64 / n as f64;
            r.observe(s(at), s(at + 0.001), every > 0 && i % every == every - 1)
        })
        .collect()
}

#[test]
fn throttling_answers_are_429s_and_listed_statuses_with_retry_after() {
    let statuses = [429, 503];
    for (status, retry_after, throttling) in [
        (429, false, true),
        (429, true, true),
        (503, true, true),
        (503, false, false),
        (500, true, false),
        (200, true, false),
    ] {
        assert_eq!(is_throttling(status, retry_after, &statuses), throttling, "{status} {retry_after}");
    }
    assert!(!is_throttling(503, true, &[]), "503 is throttling only when listed");
}

#[test]
fn invalid_parameters_are_refused() {
    let bad = |c: ThrottleConfig| AdaptiveRate::new(c, Duration::ZERO).unwrap_err();
    let d = ThrottleConfig::default();
    assert_eq!(bad(ThrottleConfig { window: 0, ..d }), ThrottleConfigError::Window(0));
    assert_eq!(bad(ThrottleConfig { cut_ratio: 0.0, ..d }), ThrottleConfigError::CutRatio(0.0));
    assert_eq!(bad(ThrottleConfig { cut_ratio: 1.5, ..d }), ThrottleConfigError::CutRatio(1.5));
    assert!(matches!(bad(ThrottleConfig { min_rate: f64::NAN, ..d }), ThrottleConfigError::MinRate(_)));
    assert!(matches!(bad(ThrottleConfig { min_rate: 1e-27, ..d }), ThrottleConfigError::MinRate(_)));
    assert_eq!(
        bad(ThrottleConfig { max_wait: Duration::from_secs(3601), ..d }),
        ThrottleConfigError::MaxWait(3_601_000)
    );
    assert_eq!(d.cut_after(), 10);
    assert_eq!(ThrottleConfig { window: 3, cut_ratio: 0.1, ..d }.cut_after(), 1);
}

#[test]
fn nothing_is_limited_before_a_cut() {
    let mut r = rate();
    for i in 0..10_000 {
        assert_eq!(r.reserve(s(i as f64 * 1e-6)).unwrap().wait, Duration::ZERO);
    }
    assert_eq!(r.rate(), None);
    assert_eq!(r.busy_for(s(1.0)), None);
}

#[test]
fn scattered_throttling_never_cuts_the_rate() {
    // One answer in 20 throttled (5 %), 1,000 calls per second for 20 s:
    // never 10 in any 100.
    let mut r = rate();
    let cuts = answer(&mut r, 0.0, 20.0, 20_000, 20).iter().filter(|o| o.cut_to.is_some()).count();
    assert_eq!(cuts, 0);
    assert_eq!(r.rate(), None);
}

#[test]
fn a_throttling_signal_cuts_to_beta_of_the_accepted_rate() {
    let mut r = rate();
    // 1,000 calls per second, then every other answer throttled.
    answer(&mut r, 0.0, 2.0, 2_000, 0);
    let observed = answer(&mut r, 2.0, 0.01, 10, 2);
    let cut = first_cut(&observed);
    // 5 of the last 10 answers throttled (the quick signal), 5 of the last
    // 100: 95 % of ~1,000/s was accepted, and β of that is kept.
    assert!((640.0..700.0).contains(&cut), "cut to {cut}");
    assert_eq!(r.rate(), Some(cut));
    assert_eq!(observed.iter().filter(|o| o.cut_to.is_some()).count(), 1);
}

/// A first burst: a provider's bucket takes 50 calls within 20 ms, then
/// throttles. The cut starts from the 50 calls accepted in that first
/// second, not from 2,500 a second (50 over 20 ms), which would take a cut
/// per round trip to come down to the limit.
#[test]
fn a_first_burst_cuts_to_beta_of_what_it_took_not_of_its_speed() {
    let mut r = rate();
    answer(&mut r, 0.0, 0.02, 50, 0);
    let observed = answer(&mut r, 0.02, 0.005, 10, 1);
    let cut = first_cut(&observed);
    assert!((cut - 35.0).abs() < 1e-9, "cut to {cut}");
    // Scattered throttling in the first second (10 of 100, one call in
    // ten, at 1,000 answers a second): nothing says the provider is slow,
    // the window's rate stands.
    let mut r = rate();
    let observed = answer(&mut r, 0.0, 0.1, 100, 10);
    let cut = first_cut(&observed);
    assert!(cut > 600.0, "cut to {cut}");
}

#[test]
fn answers_to_calls_sent_before_a_cut_do_not_cut_again() {
    let mut r = rate();
    answer(&mut r, 0.0, 1.0, 1_000, 0);
    let first =
        (0..signal()).find_map(|i| r.observe(s(1.0), s(1.0 + 0.001 * f64::from(i)), true).cut_to).unwrap();
    // Sent before the cut, answered after it: the same event.
    for i in 0..100 {
        let o = r.observe(s(1.0), s(1.01 + 0.001 * f64::from(i)), true);
        assert_eq!(o.cut_to, None);
    }
    assert_eq!(r.rate(), Some(first));
    // Sent after it and throttled again: a second cut.
    let second =
        (0..signal()).find_map(|i| r.observe(s(1.2), s(1.2 + 0.001 * f64::from(i)), true).cut_to).unwrap();
    assert!(second < first, "{second} < {first}");
}

#[test]
fn the_rate_grows_back_along_the_cubic_curve() {
    let mut r = rate();
    answer(&mut r, 0.0, 1.0, 200, 0);
    // 200/s, then every fifth answer throttled until 10 of the last 100 are.
    let cut = answer(&mut r, 1.0, 0.25, 50, 5).iter().find_map(|o| o.cut_to).unwrap();
    let w_max = cut / BETA;
    let k = (w_max * (1.0 - BETA) / SCALE).cbrt();
    let cut_at = 1.0 + 0.25 * 49.0 / 50.0 + 0.001;
    let curve = |t: f64| SCALE * (t - k).powi(3) + w_max;
    // Answers keep coming at 200/s (so twice the measured rate does not
    // bind); halfway to K the rate is on the concave part of the curve,
    // nearer W_max than the cut; at K it is W_max.
    answer(&mut r, cut_at, k / 2.0, (100.0 * k) as usize, 0);
    let half = r.rate().unwrap();
    assert!(half > (cut + w_max) / 2.0 && half < w_max, "{cut} < {half} < {w_max}");
    assert!((half - curve(k / 2.0)).abs() < 1.0, "{half} vs {}", curve(k / 2.0));
    answer(&mut r, cut_at + k / 2.0, k / 2.0 + 0.01, (100.0 * k) as usize + 2, 0);
    let at_k = r.rate().unwrap();
    assert!((at_k - w_max).abs() < 1.0, "{at_k} vs {w_max}");
}

#[test]
fn reserved_turns_follow_the_rate_and_refuse_past_max_wait() {
    let mut r = cut_after_a_second();
    let rate = r.rate().unwrap();
    let now = s(1.1);
    // The bucket holds at most one second of the rate; past that, turns are
    // booked 1/rate apart up to max_wait (1 s), then refused.
    let mut waits = Vec::new();
    loop {
        match r.reserve(now) {
            Ok(turn) => waits.push(turn.wait),
            Err(retry_in) => {
                assert!(retry_in > Duration::ZERO);
                break;
            }
        }
        assert!(waits.len() < 10_000);
    }
    let last = waits.last().unwrap().as_secs_f64();
    assert!(last <= 1.0 && last > 1.0 - 2.0 / rate, "last wait {last} at {rate}/s");
    let booked = waits.iter().filter(|w| !w.is_zero()).count() as f64;
    assert!((booked - rate).abs() <= 2.0, "{booked} booked in one second at {rate}/s");
    assert!(r.busy_for(now).is_some());
    // One refused call booked nothing: a second later there is room again.
    assert_eq!(r.busy_for(now + s(1.0)), None);
}

#[test]
fn the_limit_turns_itself_off_after_probing_far_above_the_cut() {
    let mut r = cut_after_a_second();
    assert!(r.rate().is_some());
    // Answers keep coming at 100/s with no throttling; the curve passes
    // 2 × W_max after K + ∛(W_max / C) seconds.
    answer(&mut r, 1.1, 30.0, 3_000, 0);
    assert_eq!(r.rate(), None);
}

/// What a sender with a backlog met from a provider that allows `limit`
/// calls per second (a token bucket holding one second of them), sending
/// whenever the adaptive rate lets it (at most 2,000 calls a second),
/// answered 5 ms after sending; time in µs, events in order.
struct Met {
    /// Calls the provider accepted per second, after the first 10 s.
    accepted_rate: f64,
    /// Share of the calls after the first 10 s that were throttled.
    share_after_10s: f64,
    /// Share of all calls that were throttled.
    share: f64,
    /// Times the limit turned itself off after the first 10 s.
    turned_off: u32,
}

fn against_a_limit(limit: f64, seconds: u64) -> Met {
    let mut r = rate();
    let (mut provider_tokens, mut provider_at) = (limit, 0.0f64);
    let end = seconds * 1_000_000;
    let mut booked: BTreeMap<(u64, u64), Turn> = BTreeMap::new(); // (send at, seq)
    let mut answers: BTreeMap<(u64, u64), (u64, bool)> = BTreeMap::new(); // (answer at, seq) → (booked, throttled)
    let (mut sent, mut throttled) = ([0u32; 2], [0u32; 2]); // [all, after 10 s]
    let (mut seq, mut turned_off, mut limiting) = (0, 0, false);
    let us = |t: u64| Duration::from_micros(t);
    for now in (0..end).step_by(500) {
        while let Some((&(at, n), &turn)) = booked.first_key_value().filter(|(k, _)| k.0 <= now) {
            booked.remove(&(at, n));
            if !r.holds(&turn) {
                // A cut voided the turn: book again (or leave it to the backlog).
                if let Ok(again) = r.reserve(us(now)) {
                    seq += 1;
                    booked.insert((now + again.wait.as_micros() as u64, seq), again);
                }
                continue;
            }
            let from = turn.booked_at.as_micros() as u64;
            let t = at as f64 / 1e6;
            provider_tokens = (provider_tokens + (t - provider_at) * limit).min(limit);
            provider_at = t;
            let refused = provider_tokens < 1.0;
            if !refused {
                provider_tokens -= 1.0;
            }
            answers.insert((at + 5_000, n), (from, refused));
            let after = usize::from(at >= 10_000_000);
            for i in 0..=after {
                sent[i] += 1;
                throttled[i] += u32::from(refused);
            }
        }
        while let Some((&(at, n), &(from, refused))) = answers.first_key_value().filter(|(k, _)| k.0 <= now) {
            answers.remove(&(at, n));
            r.observe(us(from), us(at), refused);
        }
        if limiting && r.rate().is_none() && now >= 10_000_000 {
            turned_off += 1;
        }
        limiting = r.rate().is_some();
        if let Ok(turn) = r.reserve(us(now)) {
            seq += 1;
            booked.insert((now + turn.wait.as_micros() as u64, seq), turn);
        }
    }
    Met {
        accepted_rate: f64::from(sent[1] - throttled[1]) / (seconds - 10) as f64,
        share_after_10s: f64::from(throttled[1]) / f64::from(sent[1]),
        share: f64::from(throttled[0]) / f64::from(sent[0]),
        turned_off,
    }
}

/// Against a provider's limit the rate settles just under it and few calls
/// are refused, at a high limit and at a low one. At a few calls per second
/// each probe above the limit costs the 5 throttled answers of the quick
/// signal, a larger share of the few calls between two cuts.
#[test]
fn against_a_rate_limited_provider_the_rate_settles_just_under_the_limit() {
    for (limit, seconds, share_at_most) in [(200.0, 60, 0.05), (20.0, 120, 0.1), (3.0, 180, 0.3)] {
        let met = against_a_limit(limit, seconds);
        assert!(
            met.accepted_rate >= 0.9 * limit && met.accepted_rate <= limit * 1.01,
            "accepted {}/s at a limit of {limit}/s",
            met.accepted_rate
        );
        assert!(
            met.share_after_10s < share_at_most,
            "{:.1} % throttled at {limit}/s",
            met.share_after_10s * 100.0
        );
        assert!(met.share < share_at_most, "{:.1} % of all calls throttled at {limit}/s", met.share * 100.0);
        assert_eq!(met.turned_off, 0, "the limit turned itself off at {limit}/s");
    }
}

#[tokio::test(start_paused = true)]
async fn a_shared_throttle_reads_tokio_time() {
    let t = Throttle::new("p", ThrottleConfig::default()).unwrap();
    for _ in 0..100 {
        let turn = t.reserve().unwrap();
        assert_eq!(turn.wait, Duration::ZERO);
        tokio::time::advance(Duration::from_millis(10)).await;
        t.observe(turn.booked_at, false);
    }
    let booked = t.reserve().unwrap();
    for _ in 0..signal() {
        let turn = t.reserve().unwrap();
        t.observe(turn.booked_at, true);
    }
    assert!(!t.holds(&booked), "a cut voids the turns booked before it");
    let rate = t.rate().expect("cut");
    assert!(rate < 100.0, "{rate}");
    // Drain the bucket, then the next turn is refused with a wait.
    while t.reserve().is_ok() {}
    let refused = t.reserve().unwrap_err();
    assert_eq!(refused.name, "p");
    assert!(t.busy_for().is_some());
    tokio::time::advance(refused.retry_in + Duration::from_millis(1)).await;
    assert!(t.reserve().is_ok());
}
