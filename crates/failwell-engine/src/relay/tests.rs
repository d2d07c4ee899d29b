use std::collections::BTreeMap;
use std::time::Duration;

use failwell_policy::{
    Backoff, BreakerConfig, BulkheadConfig, CallOutcome, Classifier, IdempotencyPolicy, Jitter, Manifest,
    Offers, RetryBudgetConfig, RetryPolicy, Timeouts, TransportFailure,
};
use failwell_store::Operation;
use serde_json::json;

use super::*;
use crate::client::{Reply, TransportError};
use crate::provider::{Encoding, OperationSpec, ProviderSpec};

fn client(keys: bool) -> ProviderClient {
    client_with(keys, RetryBudgetConfig::default(), BreakerConfig::default())
}

fn client_with(keys: bool, retry_budget: RetryBudgetConfig, breaker: BreakerConfig) -> ProviderClient {
    let backoff = Backoff::try_new(Duration::from_millis(100), Duration::from_secs(1), Jitter::None).unwrap();
    let retry = RetryPolicy::try_new(3, backoff, Duration::from_secs(60), Duration::from_secs(10)).unwrap();
    let idempotency = IdempotencyPolicy {
        header: keys.then(|| "Idempotency-Key".to_string()),
        key_ttl: Duration::from_secs(100),
    };
    let offers =
        Offers { key_header: idempotency.header.is_some(), lookup: true, max_attempts: 3, read: false };
    let operations = BTreeMap::from([(
        "charge".to_string(),
        OperationSpec {
            method: reqwest::Method::POST,
            url: "http://127.0.0.1:9/v1/charges".parse().unwrap(),
            encoding: Encoding::Form,
            reference_field: "reference".into(),
            manifest: Manifest::default_for(offers),
            retry: retry.clone(),
            idempotency: idempotency.clone(),
            send_key: offers.key_header,
            max_stale: None,
        },
    )]);
    ProviderClient::new(ProviderSpec {
        name: "payments".into(),
        // nothing listens here: a test that reached the network would fail
        base_url: "http://127.0.0.1:9".parse().unwrap(),
        timeouts: Timeouts {
            connect: Duration::from_millis(100),
            headers: Duration::from_millis(100),
            body_idle: Duration::from_millis(100),
            total: Duration::from_millis(100),
        },
        breaker: Some(breaker),
        cluster_rule: Default::default(),
        pause: Default::default(),
        throttle: None,
        bulkhead: BulkheadConfig::default(),
        retry_budget,
        retry,
        idempotency,
        classifier: Classifier::default(),
        error_code_pointer: "/error/code".into(),
        id_pointer: "/id".into(),
        reconcile_after: Duration::from_millis(500),
        lookup: None,
        compare: None,
        operations,
    })
    .unwrap()
}

fn claimed(attempts: u32, key_age_ms: i64, interrupted: bool) -> Claimed {
    let now = now_ms();
    Claimed {
        outbox_id: 1,
        lease_token: 9,
        attempts,
        previous_delay_ms: 0,
        interrupted,
        operation: Operation {
            key_first_sent_at_ms: Some(now - key_age_ms),
            attempts: attempts - 1,
            created_at_ms: now - key_age_ms,
            delivery_started_at_ms: now - key_age_ms,
            updated_at_ms: now,
            unreadable: None,
            ..crate::fixtures::operation()
        },
    }
}

fn reply(status: u16, body: serde_json::Value) -> CallResult {
    CallResult {
        started_at_ms: now_ms(),
        duration: Duration::from_millis(3),
        response: Ok(Reply { status, body: Some(body), retry_after: None }),
    }
}

fn transport(failure: TransportFailure, kind: &'static str) -> CallResult {
    CallResult {
        started_at_ms: now_ms(),
        duration: Duration::from_millis(100),
        response: Err(TransportError { failure, kind, message: "boom".into() }),
    }
}

#[test]
fn success_records_the_provider_reference() {
    let c = decide_after(&client(true), &claimed(1, 0, false), &reply(200, json!({"id": "ch_1"})));
    assert_eq!(c.attempt.as_ref().unwrap().outcome, Outcome::Succeeded);
    assert_eq!(c.attempt.as_ref().unwrap().kind, AttemptKind::Call);
    assert!(matches!(c.transition, Transition::Succeeded { provider_ref: Some(ref r), .. } if r == "ch_1"));
}

#[test]
fn decline_fails_with_the_provider_code() {
    let body = json!({"error": {"code": "card_declined"}});
    let c = decide_after(&client(true), &claimed(1, 0, false), &reply(402, body));
    assert_eq!(c.attempt.as_ref().unwrap().error_kind.as_deref(), Some("card_declined"));
    assert_eq!(c.attempt.as_ref().unwrap().classification, Some("permanent"));
    assert!(matches!(c.transition, Transition::Failed { ref error, .. } if error.contains("card_declined")));
}

#[test]
fn timeout_after_send_is_retried_under_a_live_key() {
    let c = decide_after(
        &client(true),
        &claimed(1, 0, false),
        &transport(TransportFailure::AfterSend, "timeout"),
    );
    assert_eq!(c.attempt.as_ref().unwrap().outcome, Outcome::Unknown);
    assert!(matches!(c.transition, Transition::Retry { delay_ms: 100, .. }), "{:?}", c.transition);
}

#[test]
fn a_retry_waits_for_the_breaker_to_let_a_call_out_and_keeps_its_backoff() {
    let client = client(true);
    client.guards().breaker.as_ref().unwrap().force_open();
    let before = now_ms();
    let c = decide_after(&client, &claimed(1, 0, false), &reply(503, json!({})));
    let Transition::Retry { available_at_ms, delay_ms, .. } = c.transition else {
        panic!("{:?}", c.transition)
    };
    // forced open gives no next probe: a second, spread by up to a second
    let wait = available_at_ms - before;
    assert!((1_000..=2_100).contains(&wait), "due again in {wait} ms");
    assert_eq!(delay_ms, 100, "the backoff the next delay grows from");
    let decision = &c.attempt.as_ref().unwrap().decision;
    let shown: i64 = decision.trim_start_matches("retry in ").trim_end_matches(" ms").parse().unwrap();
    assert!(shown >= 1_000, "the history tells the wait: {decision}");
}

#[tokio::test(start_paused = true)]
async fn a_failed_probe_waits_behind_the_messages_deferred_while_it_was_out() {
    let ms = Duration::from_millis;
    let breaker = BreakerConfig {
        consecutive_failures: Some(1),
        failure_rate: None,
        open_for: ms(50),
        max_open_for: ms(50),
        ..BreakerConfig::default()
    };
    let client = client_with(true, RetryBudgetConfig::default(), breaker);
    let cb = client.guards().breaker.as_ref().unwrap();
    assert_eq!(client.retry_wait(ms(100)), ms(100), "closed: the backoff alone");
    cb.try_acquire().unwrap().record(CallOutcome::Failure);
    tokio::time::advance(ms(60)).await;
    let probe = cb.try_acquire().unwrap();
    assert!(probe.is_probe());
    probe.record(CallOutcome::Failure);
    // Open again for 50 ms, but the messages deferred while the probe was
    // out are due up to 2 s after: the probe's message comes after them.
    let wait = client.retry_wait(ms(10));
    assert!((ms(2_000)..=ms(3_000)).contains(&wait), "{wait:?}");
    assert_eq!(client.retry_wait(ms(5_000)), ms(5_000), "a longer backoff stands");
}

#[test]
fn timeout_without_keys_goes_to_reconciliation() {
    let c = decide_after(
        &client(false),
        &claimed(1, 0, false),
        &transport(TransportFailure::AfterSend, "timeout"),
    );
    match c.transition {
        Transition::Unknown { reconcile_at_ms, ref error } => {
            assert!(reconcile_at_ms >= now_ms() + 400, "waits reconcile_after before looking up");
            assert!(error.contains("no idempotency key is sent"), "{error}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn exhausted_retryable_is_a_dead_letter_but_exhausted_ambiguous_is_unknown() {
    let c = decide_after(&client(true), &claimed(3, 0, false), &reply(503, json!({})));
    assert!(matches!(c.transition, Transition::DeadLetter { ref error } if error.contains("HTTP 503")));
    let c =
        decide_after(&client(true), &claimed(3, 0, false), &transport(TransportFailure::AfterSend, "reset"));
    assert!(matches!(c.transition, Transition::Unknown { .. }));
}

#[tokio::test]
async fn a_retry_under_an_expired_key_is_skipped_not_sent() {
    let providers = Providers::from([("payments".to_string(), client(true))]);
    let c = attempt(&providers, claimed(2, 95_000, false)).await;
    assert_eq!(c.attempt.as_ref().unwrap().kind, AttemptKind::Skipped);
    assert_eq!(c.attempt.as_ref().unwrap().error_kind.as_deref(), Some("key_expired"));
    assert!(matches!(c.transition, Transition::Unknown { .. }));
}

#[tokio::test]
async fn an_interrupted_attempt_without_keys_is_not_resent() {
    let providers = Providers::from([("payments".to_string(), client(false))]);
    let c = attempt(&providers, claimed(2, 10, true)).await;
    assert_eq!(c.attempt.as_ref().unwrap().kind, AttemptKind::Skipped);
    assert_eq!(c.attempt.as_ref().unwrap().error_kind.as_deref(), Some("interrupted"));
    assert!(matches!(c.transition, Transition::Unknown { .. }));
}

#[tokio::test]
async fn unknown_provider_or_operation_is_a_dead_letter() {
    let c = attempt(&Providers::new(), claimed(1, 0, false)).await;
    assert!(
        matches!(c.transition, Transition::DeadLetter { ref error } if error.contains("unknown provider"))
    );
    let providers = Providers::from([("payments".to_string(), client(true))]);
    let mut message = claimed(1, 0, false);
    message.operation.operation = "refund".into();
    let c = attempt(&providers, message).await;
    assert!(matches!(c.transition, Transition::DeadLetter { ref error } if error.contains("no operation")));
}

#[test]
fn giving_up_after_an_earlier_ambiguous_attempt_keeps_the_outcome_unknown() {
    let mut message = claimed(3, 0, false);
    message.operation.effect_possible = true;
    let c = decide_after(&client(true), &message, &reply(503, json!({})));
    assert!(matches!(c.transition, Transition::Unknown { .. }), "{:?}", c.transition);
}

#[tokio::test]
async fn a_lost_provider_after_an_ambiguous_attempt_is_unknown_not_failed() {
    let mut message = claimed(2, 0, false);
    message.operation.effect_possible = true;
    let c = attempt(&Providers::new(), message).await;
    assert!(
        matches!(c.transition, Transition::Unknown { ref error, .. } if error.contains("unknown provider"))
    );
}

#[tokio::test]
async fn an_open_breaker_defers_without_spending_the_attempt() {
    let client = client(true);
    client.guards().breaker.as_ref().unwrap().force_open();
    let providers: Providers = BTreeMap::from([("payments".to_string(), client)]);
    let before = now_ms();
    let c = attempt(&providers, claimed(2, 0, false)).await;
    assert_eq!(c.attempt, None, "nothing was tried: no history row");
    let Transition::Defer { available_at_ms, ref reason } = c.transition else {
        panic!("{:?}", c.transition)
    };
    assert!(available_at_ms >= before + 1_000, "deferred by the wait for a forced-open breaker");
    assert_eq!(reason, "deferred: circuit breaker \"payments\" is forced_open");
}

#[tokio::test]
async fn a_full_bulkhead_defers_too() {
    let client = client(true);
    let bulkhead = client.guards().bulkhead.clone();
    let held: Vec<_> = std::iter::from_fn(|| bulkhead.try_acquire()).collect();
    assert_eq!(held.len(), BulkheadConfig::default().max_concurrent);
    let providers: Providers = BTreeMap::from([("payments".to_string(), client)]);
    let c = attempt(&providers, claimed(1, 0, false)).await;
    assert!(
        matches!(c.transition, Transition::Defer { ref reason, .. } if reason.contains("bulkhead \"payments\" is full")),
        "{:?}",
        c.transition
    );
}

#[tokio::test]
async fn a_retry_past_the_budget_waits_without_spending_its_attempt() {
    let spent = RetryBudgetConfig { ratio: 0.0, min_per_second: 0, ttl: Duration::from_secs(10) };
    let providers: Providers =
        BTreeMap::from([("payments".to_string(), client_with(true, spent, BreakerConfig::default()))]);
    let before = now_ms();
    let c = attempt(&providers, claimed(2, 0, false)).await;
    assert_eq!(c.attempt, None, "nothing was sent");
    let Transition::Defer { available_at_ms, ref reason } = c.transition else {
        panic!("{:?}", c.transition)
    };
    assert!(available_at_ms >= before + 1_000, "one slot of the budget's window");
    assert_eq!(reason, "deferred: the retry budget of \"payments\" is spent");
    // A first attempt is never held back by the budget: it is what earns it.
    let c = attempt(&providers, claimed(1, 0, false)).await;
    assert!(c.attempt.is_some(), "the first attempt was sent");
}

#[tokio::test]
async fn a_retry_refused_by_the_breaker_does_not_spend_the_budget() {
    let budget = RetryBudgetConfig { ratio: 0.0, min_per_second: 1, ttl: Duration::from_secs(10) };
    let client = client_with(true, budget, BreakerConfig::default());
    let breaker = client.guards().breaker.clone().unwrap();
    let providers: Providers = BTreeMap::from([("payments".to_string(), client.clone())]);
    breaker.force_open();
    for _ in 0..20 {
        let c = attempt(&providers, claimed(2, 0, false)).await;
        assert!(
            matches!(c.transition, Transition::Defer { ref reason, .. } if reason.contains("circuit breaker"))
        );
    }
    assert_eq!(client.guards().budget.available(), 10, "the reserve is untouched");
}
