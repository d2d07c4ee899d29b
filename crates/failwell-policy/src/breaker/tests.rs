use std::time::Duration;

use super::*;

fn config() -> BreakerConfig {
    BreakerConfig {
        consecutive_failures: Some(3),
        failure_rate: None,
        open_for: Duration::from_secs(1),
        open_multiplier: 2.0,
        max_open_for: Duration::from_secs(3),
        ..BreakerConfig::default()
    }
}

fn ok<S: BreakerStore>(b: &CircuitBreaker<S>) {
    b.try_acquire().unwrap().record(CallOutcome::Success);
}

fn fail<S: BreakerStore>(b: &CircuitBreaker<S>) {
    b.try_acquire().unwrap().record(CallOutcome::Failure);
}

#[test]
fn validation_names_the_field() {
    let bad = |c: BreakerConfig| c.validate().unwrap_err().to_string();
    assert!(
        bad(BreakerConfig { consecutive_failures: None, failure_rate: None, ..config() })
            .contains("no trip rule")
    );
    assert!(bad(BreakerConfig { failure_rate: Some(1.5), ..config() }).contains("failure_rate"));
    assert!(bad(BreakerConfig { failure_rate: Some(f64::NAN), ..config() }).contains("failure_rate"));
    assert!(bad(BreakerConfig { slow_call_rate: Some(0.5), ..config() }).contains("slow_call_duration"));
    assert!(bad(BreakerConfig { half_open_probes: 0, ..config() }).contains("half_open_probes"));
    assert!(bad(BreakerConfig { open_multiplier: 0.5, ..config() }).contains("open_multiplier"));
    assert!(
        bad(BreakerConfig { max_open_for: Duration::from_millis(1), ..config() }).contains("max_open_for")
    );
    assert!(
        bad(BreakerConfig {
            failure_rate: Some(0.5),
            window: SlidingWindow::Count(5),
            minimum_calls: 6,
            ..config()
        })
        .contains("minimum_calls")
    );
    assert!(
        bad(BreakerConfig { window: SlidingWindow::Count(0), failure_rate: Some(0.5), ..config() })
            .contains("window")
    );
}

#[test]
fn open_period_grows_and_caps_without_overflow() {
    let c = config();
    assert_eq!(c.open_period(1), Duration::from_secs(1));
    assert_eq!(c.open_period(2), Duration::from_secs(2));
    assert_eq!(c.open_period(3), Duration::from_secs(3));
    assert_eq!(c.open_period(u32::MAX), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn opens_on_consecutive_failures_and_a_success_resets_the_count() {
    let b = CircuitBreaker::new("p", config()).unwrap();
    fail(&b);
    fail(&b);
    ok(&b);
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), BreakerState::Closed);
    fail(&b);
    assert_eq!(b.state(), BreakerState::Open);
    let err = b.try_acquire().unwrap_err();
    assert_eq!(err.state, BreakerState::Open);
    assert_eq!(err.retry_in, Some(Duration::from_secs(1)));
}

#[tokio::test(start_paused = true)]
async fn half_open_admits_one_probe_then_closes_on_success() {
    let b = CircuitBreaker::new("p", config()).unwrap();
    let mut events = b.subscribe();
    (0..3).for_each(|_| fail(&b));
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(b.try_acquire().is_err());
    tokio::time::advance(Duration::from_millis(1)).await;
    let probe = b.try_acquire().unwrap();
    assert!(probe.is_probe());
    assert_eq!(b.state(), BreakerState::HalfOpen);
    let second = b.try_acquire().unwrap_err();
    assert_eq!((second.state, second.retry_in), (BreakerState::HalfOpen, None));
    probe.record(CallOutcome::Success);
    assert_eq!(b.state(), BreakerState::Closed);
    ok(&b);
    let seen: Vec<_> = std::iter::from_fn(|| events.try_recv().ok()).map(|e| (e.from, e.to)).collect();
    assert_eq!(
        seen,
        vec![
            (BreakerState::Closed, BreakerState::Open),
            (BreakerState::Open, BreakerState::HalfOpen),
            (BreakerState::HalfOpen, BreakerState::Closed),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_reopens_for_longer() {
    let b = CircuitBreaker::new("p", config()).unwrap();
    (0..3).for_each(|_| fail(&b));
    tokio::time::advance(Duration::from_secs(1)).await;
    b.try_acquire().unwrap().record(CallOutcome::Failure);
    let err = b.try_acquire().unwrap_err();
    assert_eq!(err.retry_in, Some(Duration::from_secs(2)));
    tokio::time::advance(Duration::from_secs(2)).await;
    b.try_acquire().unwrap().record(CallOutcome::Failure);
    assert_eq!(b.try_acquire().unwrap_err().retry_in, Some(Duration::from_secs(3)), "capped at max_open_for");
    tokio::time::advance(Duration::from_secs(3)).await;
    ok(&b);
    assert_eq!(b.state(), BreakerState::Closed);
    (0..3).for_each(|_| fail(&b));
    assert_eq!(b.try_acquire().unwrap_err().retry_in, Some(Duration::from_secs(1)), "growth resets on close");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_probe_frees_its_slot_and_a_hung_one_times_out() {
    let b = CircuitBreaker::new("p", config()).unwrap();
    (0..3).for_each(|_| fail(&b));
    tokio::time::advance(Duration::from_secs(1)).await;
    drop(b.try_acquire().unwrap());
    let hung = b.try_acquire().unwrap();
    assert!(hung.is_probe());
    assert!(b.try_acquire().is_err());
    tokio::time::advance(Duration::from_secs(10)).await;
    let err = b.try_acquire().unwrap_err();
    assert_eq!(err.state, BreakerState::Open, "a probe past probe_timeout reopens the breaker");
    hung.record(CallOutcome::Success);
    assert_eq!(b.state(), BreakerState::Open, "the hung probe's late result belongs to an old period");
}

#[tokio::test(start_paused = true)]
async fn several_probes_must_all_succeed() {
    let b = CircuitBreaker::new("p", BreakerConfig { half_open_probes: 3, ..config() }).unwrap();
    (0..3).for_each(|_| fail(&b));
    tokio::time::advance(Duration::from_secs(1)).await;
    let probes: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    assert!(b.try_acquire().is_err());
    let mut probes = probes.into_iter();
    probes.next().unwrap().record(CallOutcome::Success);
    probes.next().unwrap().record(CallOutcome::Success);
    assert_eq!(b.state(), BreakerState::HalfOpen);
    probes.next().unwrap().record(CallOutcome::Success);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn failure_rate_over_a_count_window_needs_minimum_calls() {
    let c = BreakerConfig {
        consecutive_failures: None,
        failure_rate: Some(0.5),
        window: SlidingWindow::Count(10),
        minimum_calls: 6,
        ..config()
    };
    let b = CircuitBreaker::new("p", c).unwrap();
    fail(&b);
    fail(&b);
    ok(&b);
    fail(&b);
    assert_eq!(b.state(), BreakerState::Closed, "3 of 4 failed but the window holds fewer than 6 calls");
    ok(&b);
    assert_eq!(b.state(), BreakerState::Closed);
    ok(&b);
    assert_eq!(b.state(), BreakerState::Open, "3 of 6 calls reach 50 %");
}

#[tokio::test(start_paused = true)]
async fn successes_push_old_failures_out_of_the_count_window() {
    let c = BreakerConfig {
        consecutive_failures: None,
        failure_rate: Some(0.5),
        window: SlidingWindow::Count(4),
        minimum_calls: 4,
        ..config()
    };
    let b = CircuitBreaker::new("p", c).unwrap();
    fail(&b);
    (0..4).for_each(|_| ok(&b));
    fail(&b);
    assert_eq!(b.state(), BreakerState::Closed, "the first failure left the window: 1 of 4");
    fail(&b);
    assert_eq!(b.state(), BreakerState::Open, "2 of 4");
}

#[tokio::test(start_paused = true)]
async fn time_window_forgets_old_calls() {
    let c = BreakerConfig {
        consecutive_failures: None,
        failure_rate: Some(0.5),
        window: SlidingWindow::Time(Duration::from_secs(10)),
        minimum_calls: 4,
        ..config()
    };
    let b = CircuitBreaker::new("p", c).unwrap();
    (0..3).for_each(|_| fail(&b));
    tokio::time::advance(Duration::from_secs(11)).await;
    ok(&b);
    fail(&b);
    ok(&b);
    assert_eq!(b.state(), BreakerState::Closed, "old failures expired: 1 of 3 calls");
    fail(&b);
    assert_eq!(b.state(), BreakerState::Open, "2 of 4 calls");
}

#[tokio::test(start_paused = true)]
async fn slow_calls_trip_the_slow_call_rate() {
    let c = BreakerConfig {
        consecutive_failures: None,
        failure_rate: None,
        slow_call_duration: Some(Duration::from_millis(100)),
        slow_call_rate: Some(1.0),
        window: SlidingWindow::Count(2),
        minimum_calls: 2,
        ..config()
    };
    let b = CircuitBreaker::new("p", c).unwrap();
    for _ in 0..2 {
        let permit = b.try_acquire().unwrap();
        tokio::time::advance(Duration::from_millis(150)).await;
        permit.record(CallOutcome::Success);
    }
    assert_eq!(b.state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn ignored_outcomes_and_forced_states() {
    let b = CircuitBreaker::new("p", config()).unwrap();
    for _ in 0..10 {
        b.try_acquire().unwrap().record(CallOutcome::Ignored);
    }
    assert_eq!(b.state(), BreakerState::Closed);
    b.force_open();
    assert_eq!(b.try_acquire().unwrap_err().state, BreakerState::ForcedOpen);
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert!(b.try_acquire().is_err(), "forced open does not expire");
    b.force_closed();
    (0..10).for_each(|_| fail(&b));
    assert_eq!(b.state(), BreakerState::ForcedClosed);
    b.reset();
    assert_eq!(b.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn results_from_before_a_state_change_are_ignored() {
    let b = CircuitBreaker::new("p", config()).unwrap();
    let early = b.try_acquire().unwrap();
    (0..3).for_each(|_| fail(&b));
    tokio::time::advance(Duration::from_secs(1)).await;
    let probe = b.try_acquire().unwrap();
    early.record(CallOutcome::Failure);
    assert_eq!(b.state(), BreakerState::HalfOpen, "a stale failure does not reopen");
    probe.record(CallOutcome::Success);
    assert_eq!(b.state(), BreakerState::Closed);
}

#[tokio::test(start_paused = true)]
async fn probe_timeout_runs_from_each_probe_start() {
    let b = CircuitBreaker::new("p", BreakerConfig { probe_timeout: Duration::from_secs(10), ..config() })
        .unwrap();
    (0..3).for_each(|_| fail(&b));
    tokio::time::advance(Duration::from_secs(1)).await;
    let first = b.try_acquire().unwrap();
    tokio::time::advance(Duration::from_secs(9)).await;
    drop(first);
    let late = b.try_acquire().unwrap();
    assert!(late.is_probe());
    tokio::time::advance(Duration::from_secs(1)).await;
    let err = b.try_acquire().unwrap_err();
    assert_eq!(err.state, BreakerState::HalfOpen, "the probe in flight started 1 s ago, not 10 s");
    tokio::time::advance(Duration::from_secs(9)).await;
    assert_eq!(b.try_acquire().unwrap_err().state, BreakerState::Open, "now it has had its 10 s");
    late.record(CallOutcome::Success);
    assert_eq!(b.state(), BreakerState::Open);
}

#[tokio::test(start_paused = true)]
async fn a_stale_success_does_not_end_a_run_of_failures() {
    let b = CircuitBreaker::new("p", BreakerConfig { consecutive_failures: Some(2), ..config() }).unwrap();
    let early = b.try_acquire().unwrap();
    b.reset();
    fail(&b);
    early.record(CallOutcome::Success);
    fail(&b);
    assert_eq!(b.state(), BreakerState::Open, "the success was admitted before the reset");
}

#[tokio::test(start_paused = true)]
async fn peek_says_whether_a_call_would_be_refused_and_changes_nothing() {
    let b = CircuitBreaker::new("peek", config()).unwrap();
    assert_eq!(b.peek(), None);
    (0..3).for_each(|_| fail(&b));
    assert_eq!(b.peek(), Some(Some(Duration::from_secs(1))));
    tokio::time::advance(Duration::from_millis(1_001)).await;
    assert_eq!(b.peek(), None, "the open period is over: a probe would go out");
    assert_eq!(b.state(), BreakerState::Open, "but peeking did not start the half-open period");
    let probe = b.try_acquire().unwrap();
    assert_eq!(b.peek(), Some(None), "every probe slot is taken");
    probe.record(CallOutcome::Success);
    assert_eq!((b.peek(), b.state()), (None, BreakerState::Closed));
}
