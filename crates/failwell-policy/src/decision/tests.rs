use std::time::Duration;

use rand::{SeedableRng, rngs::StdRng};

use super::*;
use crate::Jitter;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn policy(max_attempts: u32) -> RetryPolicy {
    let backoff = Backoff::try_new(ms(100), ms(1_000), Jitter::None).unwrap();
    RetryPolicy::try_new(max_attempts, backoff, ms(60_000), ms(10_000)).unwrap()
}

fn keyed() -> IdempotencyPolicy {
    IdempotencyPolicy { header: Some("Idempotency-Key".into()), key_ttl: Duration::from_secs(86_400) }
}

fn first() -> Attempted {
    Attempted {
        attempts: 1,
        age: ms(50),
        key_age: ms(50),
        previous_delay: Duration::ZERO,
        effect_possible: false,
    }
}

fn run(p: &RetryPolicy, i: &IdempotencyPolicy, c: Classification, a: Attempted) -> Decision {
    decide(p, i, c, a, &mut StdRng::seed_from_u64(1))
}

const RETRY: Classification = Classification::Retryable { retry_after: None };

#[test]
fn validation() {
    let b = Backoff::try_new(ms(1), ms(1), Jitter::None).unwrap();
    assert_eq!(RetryPolicy::try_new(0, b.clone(), ms(1), ms(1)), Err(RetryPolicyError::ZeroAttempts));
    assert_eq!(RetryPolicy::try_new(1, b, ms(0), ms(1)), Err(RetryPolicyError::ZeroDeadline));
}

#[test]
fn permanent_fails_once() {
    assert_eq!(run(&policy(5), &keyed(), Classification::Permanent, first()), Decision::Fail);
}

#[test]
fn retryable_backs_off_exponentially() {
    let p = policy(5);
    let mut a = first();
    let mut delays = vec![];
    for n in 1..5 {
        a.attempts = n;
        match run(&p, &keyed(), RETRY, a) {
            Decision::Retry { delay } => delays.push(delay.as_millis()),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(delays, vec![100, 200, 400, 800]);
}

#[test]
fn exhausted_attempts_dead_letter_retryable_but_reconcile_ambiguous() {
    let a = Attempted { attempts: 3, ..first() };
    assert_eq!(run(&policy(3), &keyed(), RETRY, a), Decision::DeadLetter { reason: "attempts exhausted" });
    assert_eq!(
        run(&policy(3), &keyed(), Classification::Ambiguous, a),
        Decision::Unknown { reason: "attempts exhausted" }
    );
}

#[test]
fn retry_after_is_a_floor_and_is_capped() {
    let wait = |s| Classification::Retryable { retry_after: Some(Duration::from_secs(s)) };
    assert_eq!(run(&policy(5), &keyed(), wait(3), first()), Decision::Retry { delay: ms(3_000) });
    assert_eq!(
        run(&policy(5), &keyed(), wait(11), first()),
        Decision::DeadLetter { reason: "Retry-After exceeds max_retry_after" }
    );
}

#[test]
fn deadline_stops_retries() {
    let a = Attempted { age: ms(59_950), ..first() };
    assert_eq!(run(&policy(5), &keyed(), RETRY, a), Decision::DeadLetter { reason: "deadline exceeded" });
    assert_eq!(
        run(&policy(5), &keyed(), Classification::Ambiguous, a),
        Decision::Unknown { reason: "deadline exceeded" }
    );
}

#[test]
fn ambiguous_retries_only_under_a_live_key() {
    assert_eq!(
        run(&policy(5), &keyed(), Classification::Ambiguous, first()),
        Decision::Retry { delay: ms(100) }
    );
    let short = IdempotencyPolicy { key_ttl: ms(150), ..keyed() };
    assert_eq!(
        run(&policy(5), &short, Classification::Ambiguous, first()),
        Decision::Unknown { reason: "idempotency key expires before the retry" }
    );
    let none = IdempotencyPolicy { header: None, ..keyed() };
    assert_eq!(
        run(&policy(5), &none, Classification::Ambiguous, first()),
        Decision::Unknown { reason: "no idempotency key is sent for this operation" }
    );
    // a retryable failure is retried even without keys: the provider did not act
    assert_eq!(run(&policy(5), &none, RETRY, first()), Decision::Retry { delay: ms(100) });
}

fn due(attempts: u32, interrupted: bool, age_ms: u64, key_age_ms: u64) -> Due {
    Due { attempts, interrupted, age: ms(age_ms), key_age: ms(key_age_ms) }
}

#[test]
fn admission_table() {
    let p = policy(5);
    let short_key = IdempotencyPolicy { key_ttl: ms(1_000), ..keyed() };
    let no_keys = IdempotencyPolicy { header: None, ..keyed() };
    let unknown = |kind| move |a: Admission| matches!(a, Admission::Unknown { kind: k, .. } if k == kind);
    // first attempt: send within the time left
    assert_eq!(admit(&p, &keyed(), due(1, false, 10_000, 0)), Admission::Send { budget: ms(50_000) });
    // a retry under a live key goes out; under an expired one it does not
    assert_eq!(admit(&p, &short_key, due(2, false, 500, 500)), Admission::Send { budget: ms(59_500) });
    assert!(unknown("key_expired")(admit(&p, &short_key, due(2, false, 950, 950))));
    assert!(unknown("key_expired")(admit(&p, &short_key, due(1, true, 950, 950))));
    // a first attempt has no earlier use of its key to worry about
    assert!(matches!(admit(&p, &short_key, due(1, false, 5_000, 5_000)), Admission::Send { .. }));
    // interrupted without keys: never resent
    assert!(unknown("interrupted")(admit(&p, &no_keys, due(2, true, 10, 10))));
    // without keys, a retry after certain failures may go out
    assert!(matches!(admit(&p, &no_keys, due(2, false, 10, 10)), Admission::Send { .. }));
    // past the deadline
    assert!(unknown("deadline")(admit(&p, &keyed(), due(2, false, 60_000, 0))));
    assert!(matches!(
        admit(&p, &keyed(), due(1, false, 60_000, 0)),
        Admission::DeadLetter { kind: "deadline", .. }
    ));
}

#[test]
fn giving_up_after_an_earlier_ambiguous_attempt_is_unknown_not_failed() {
    let a = Attempted { attempts: 3, effect_possible: true, ..first() };
    assert_eq!(run(&policy(3), &keyed(), RETRY, a), Decision::Unknown { reason: "attempts exhausted" });
    let wait = Classification::Retryable { retry_after: Some(Duration::from_secs(11)) };
    let a = Attempted { effect_possible: true, ..first() };
    assert_eq!(
        run(&policy(5), &keyed(), wait, a),
        Decision::Unknown { reason: "Retry-After exceeds max_retry_after" }
    );
    // a permanent refusal is final: the provider answered for this very request
    assert_eq!(run(&policy(5), &keyed(), Classification::Permanent, a), Decision::Fail);
}

#[test]
fn after_not_found_table() {
    let p = policy(5);
    let short_key = IdempotencyPolicy { key_ttl: ms(1_000), ..keyed() };
    let no_keys = IdempotencyPolicy { header: None, ..keyed() };
    let seen = |attempts, age_ms, key_age_ms, misses| NotFound {
        attempts,
        age: ms(age_ms),
        key_age: ms(key_age_ms),
        misses,
        effect_possible: false,
    };
    assert_eq!(after_not_found(&p, &keyed(), seen(1, 10, 10, 0)), AfterNotFound::ResendSameKey);
    assert_eq!(after_not_found(&p, &short_key, seen(1, 10, 5_000, 0)), AfterNotFound::Confirm);
    assert_eq!(after_not_found(&p, &short_key, seen(1, 10, 5_000, 1)), AfterNotFound::ResendNewKey);
    assert_eq!(after_not_found(&p, &no_keys, seen(1, 10, 10, 0)), AfterNotFound::Confirm);
    assert_eq!(after_not_found(&p, &no_keys, seen(1, 10, 10, 1)), AfterNotFound::ResendNewKey);
    assert_eq!(after_not_found(&p, &keyed(), seen(5, 10, 10, 0)), AfterNotFound::DeadLetter);
    assert_eq!(after_not_found(&p, &keyed(), seen(1, 60_000, 10, 0)), AfterNotFound::DeadLetter);
}

#[test]
fn giving_up_after_a_call_that_may_have_acted_needs_a_second_miss() {
    let p = policy(5);
    let maybe = |attempts, age_ms, misses| NotFound {
        attempts,
        age: ms(age_ms),
        key_age: ms(10),
        misses,
        effect_possible: true,
    };
    assert_eq!(after_not_found(&p, &keyed(), maybe(5, 10, 0)), AfterNotFound::Confirm);
    assert_eq!(after_not_found(&p, &keyed(), maybe(1, 60_000, 0)), AfterNotFound::Confirm);
    assert_eq!(after_not_found(&p, &keyed(), maybe(5, 10, 1)), AfterNotFound::DeadLetter);
    // with attempts left and a live key the resend is safe at once
    assert_eq!(after_not_found(&p, &keyed(), maybe(1, 10, 0)), AfterNotFound::ResendSameKey);
}
