//! The forwarder: delivers each stored webhook event to the application,
//! re-signed by failwell as Standard Webhooks, at least once.
//!
//! Forwards are queued in the transaction that stores the event, so no
//! event is lost between receipt and delivery; the pump claims them under a
//! lease like outbox messages. Every attempt carries the **provider's event
//! id as `webhook-id`** (stable across attempts and replays, so the
//! application deduplicates by it) and a fresh `webhook-timestamp`, so a
//! late redelivery of an old event still verifies. The application is
//! configured as a provider: its bulkhead and breaker guard the calls (an
//! open breaker defers forwards without spending attempts), its classifier
//! reads the answers, and [`failwell_policy::decide`] spaces the retries
//! (`Retry-After` honoured) and ends them in a dead letter. Because the
//! event id deduplicates, a timeout is retried like any other failure.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use failwell_policy::{Admission, Attempted, Decision, Due, IdempotencyPolicy, admit, decide};
use failwell_store::{
    ClaimedForward, EventStep, ForwardCompletion, ForwardTransition, Leased, Recorded, Store, StoreError,
};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, InvalidHeaderValue, USER_AGENT};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::client::{Attempt, Providers};
use crate::pump::{PumpConfig, Queue, pump};
use crate::{ProviderClient, now_ms};

/// Where one integration's events go.
#[derive(Clone, Debug)]
pub struct ForwardTarget {
    /// The application's endpoint as a provider: base URL, timeouts,
    /// breaker, bulkhead, attempts, backoff and classification.
    pub client: ProviderClient,
    /// Path below the base URL, e.g. `/hooks/stripe`.
    pub path: String,
    /// The Standard Webhooks secret failwell signs with (`whsec_` followed
    /// by base64), checked when the configuration is loaded.
    pub secret: String,
}

/// Forward targets by integration name.
pub type ForwardTargets = BTreeMap<String, ForwardTarget>;

/// Where one integration's events go, as the configuration says it
/// (`[webhooks.NAME.forward]`); a [`ForwardTarget`] once the provider's
/// client is built.
#[derive(Clone, Debug)]
pub struct ForwardSpec {
    /// The configured provider that is the application's endpoint.
    pub provider: String,
    /// Path below its base URL, e.g. `/hooks/stripe`.
    pub path: String,
    /// The Standard Webhooks secret failwell signs with (`whsec_` followed
    /// by base64).
    pub secret: String,
}

/// Forward specs by integration name.
pub type ForwardSpecs = BTreeMap<String, ForwardSpec>;

impl ForwardSpec {
    /// The target, with the client built for its provider; `None` when
    /// `providers` has no client of that name.
    pub fn target(&self, providers: &Providers) -> Option<ForwardTarget> {
        let client = providers.get(&self.provider)?.clone();
        Some(ForwardTarget { client, path: self.path.clone(), secret: self.secret.clone() })
    }
}

/// The forwarder (see the module docs).
#[derive(Debug)]
pub struct Forwarder {
    queue: Arc<ForwardQueue>,
    config: PumpConfig,
    wake: Arc<Notify>,
}

impl Forwarder {
    /// A forwarder over `store` for `targets`, woken early through `wake`.
    pub fn new(store: Store, targets: Arc<ForwardTargets>, config: PumpConfig, wake: Arc<Notify>) -> Self {
        Self { queue: Arc::new(ForwardQueue { store, targets }), config, wake }
    }

    /// Runs until `shutdown` is cancelled, then waits for the deliveries in
    /// flight and their records.
    pub async fn run(self, shutdown: CancellationToken) {
        pump(self.queue, self.config, self.wake, shutdown).await;
    }
}

#[derive(Debug)]
struct ForwardQueue {
    store: Store,
    targets: Arc<ForwardTargets>,
}

impl Queue for ForwardQueue {
    type Item = ClaimedForward;
    type Done = ForwardCompletion;
    const WHAT: &'static str = "forwards";

    fn lease_of(forward: &ClaimedForward) -> (i64, i64) {
        (forward.id, forward.lease_token)
    }

    fn lease_done(done: &ForwardCompletion) -> (i64, i64) {
        (done.id, done.lease_token)
    }

    fn renew(
        &self,
        leases: Vec<(i64, i64)>,
        until_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.store.renew(Leased::Forwards, leases, until_ms)
    }

    fn claim(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
    ) -> impl Future<Output = Result<Vec<ClaimedForward>, StoreError>> + Send {
        self.store.claim_forwards(now_ms, limit, lease_ms)
    }

    async fn work(self: Arc<Self>, forward: ClaimedForward) -> ForwardCompletion {
        let integration = forward.event.integration.clone();
        let completion = match self.targets.get(&integration) {
            Some(target) => deliver(target, &forward).await,
            // The configuration lost the target (renamed, or removed for a
            // while): keep the forward, and look again in a minute.
            None => {
                let reason = format!("deferred: no forward target is configured for {integration:?}");
                tracing::warn!(event = %forward.event.event_id, %reason, "forward not delivered");
                let available_at_ms = now_ms() + 60_000;
                completion(&forward, None, ForwardTransition::Defer { available_at_ms, reason })
            }
        };
        let result = match &completion.transition {
            ForwardTransition::Delivered => "delivered",
            ForwardTransition::Retry { .. } => "retry",
            ForwardTransition::Defer { .. } => "deferred",
            ForwardTransition::DeadLetter { error } => {
                tracing::warn!(%integration, event = %forward.event.event_id, %error, "forward dead-lettered");
                "dead_letter"
            }
        };
        metrics::counter!("failwell_forwards_total", "integration" => integration, "result" => result)
            .increment(1);
        completion
    }

    fn record(
        &self,
        done: Vec<ForwardCompletion>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Vec<Recorded>, StoreError>> + Send {
        self.store.complete_forwards(done, now_ms)
    }
}

/// Why a forward cannot be signed; it then ends in a dead letter, since no
/// retry would change it.
#[derive(Debug, thiserror::Error)]
enum SigningError {
    /// The forward target's secret is unusable.
    #[error("cannot sign: {0}")]
    Secret(failwell_webhook::SecretError),
    /// A header (the event id, given) cannot be sent as a header value.
    #[error("invalid header value {value:?}: {error}")]
    HeaderValue {
        /// The value.
        value: String,
        /// Why HTTP refuses it.
        error: InvalidHeaderValue,
    },
}

/// The headers of a Standard Webhooks delivery of `event_id` at
/// `timestamp` (Unix seconds): `webhook-id`, `webhook-timestamp`,
/// `webhook-signature`, the stored content type (JSON when none was kept).
fn signed_headers(
    target: &ForwardTarget,
    forward: &ClaimedForward,
    timestamp: u64,
) -> Result<HeaderMap, SigningError> {
    let event = &forward.event;
    let signature = failwell_webhook::standard_webhooks_signature(
        &target.secret,
        &event.event_id,
        timestamp,
        &event.payload,
    )
    .map_err(SigningError::Secret)?;
    let value = |v: &str| {
        HeaderValue::from_str(v).map_err(|error| SigningError::HeaderValue { value: v.to_owned(), error })
    };
    let content_type = event.headers["content-type"]
        .as_str()
        .and_then(|v| HeaderValue::from_str(v).ok())
        .unwrap_or(HeaderValue::from_static("application/json"));
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", value(&event.event_id)?);
    headers.insert("webhook-timestamp", value(&timestamp.to_string())?);
    headers.insert("webhook-signature", value(&signature)?);
    headers.insert(CONTENT_TYPE, content_type);
    headers.insert(USER_AGENT, HeaderValue::from_static("failwell"));
    Ok(headers)
}

/// The event id is an idempotency key the application honours for good.
fn keyed() -> IdempotencyPolicy {
    IdempotencyPolicy::always_safe("webhook-id")
}

/// One delivery attempt of `forward` and what follows it: admitted by
/// [`admit`] (attempts and deadline of the application's provider, counted
/// from the event's receipt), made by [`ProviderClient::attempt`] (retry
/// budget, bulkhead, breaker), judged by [`decide`].
async fn deliver(target: &ForwardTarget, forward: &ClaimedForward) -> ForwardCompletion {
    let client = &target.client;
    let spec = client.spec();
    let since_receipt = || Duration::from_millis((now_ms() - forward.event.received_at_ms).max(0) as u64);
    let due =
        Due { attempts: forward.attempts, interrupted: false, age: since_receipt(), key_age: Duration::ZERO };
    let time_left = match admit(&spec.retry, &keyed(), due) {
        Admission::Send { budget } => budget,
        Admission::Unknown { reason, .. } | Admission::DeadLetter { reason, .. } => {
            let step = EventStep::new("forward", now_ms(), format!("dead letter: {reason}"));
            let error = reason.to_owned();
            return completion(forward, Some(step), ForwardTransition::DeadLetter { error });
        }
    };
    let timestamp = crate::clock::wall().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let headers = match signed_headers(target, forward, timestamp) {
        Ok(headers) => headers,
        Err(error) => {
            let step = EventStep::new("forward", now_ms(), format!("dead letter: {error}"));
            let error = error.to_string();
            return completion(forward, Some(step), ForwardTransition::DeadLetter { error });
        }
    };
    let send = client.deliver(&target.path, headers, forward.event.payload.clone(), time_left);
    let result = match client.attempt(forward.attempts > 1, send).await {
        Attempt::Made(result) => result,
        // Nothing was sent: no step, the attempt is given back.
        Attempt::Deferred { wait, reason, .. } => {
            let available_at_ms = now_ms() + wait.as_millis() as i64;
            return completion(forward, None, ForwardTransition::Defer { available_at_ms, reason });
        }
    };
    let status_code = result.response.as_ref().ok().map(|r| r.status);
    let step = |detail: String| EventStep {
        duration_ms: Some(result.duration.as_millis() as u64),
        status_code,
        ..EventStep::new("forward", result.started_at_ms, detail)
    };
    if result.is_success() {
        let detail = format!("delivered (attempt {})", forward.attempts);
        return completion(forward, Some(step(detail)), ForwardTransition::Delivered);
    }
    let error = result.describe(&spec.error_code_pointer);
    let classification = spec.classifier.classify(result.observed(&spec.error_code_pointer));
    let now = now_ms();
    let attempted = Attempted {
        attempts: forward.attempts,
        age: since_receipt(),
        key_age: Duration::ZERO,
        previous_delay: Duration::from_millis(forward.previous_delay_ms),
        effect_possible: false,
    };
    let (detail, transition) =
        match decide(&spec.retry, &keyed(), classification, attempted, &mut rand::rng()) {
            Decision::Retry { delay } => {
                let wait = client.retry_wait(delay);
                (
                    format!("{error}: retry in {} ms", wait.as_millis()),
                    ForwardTransition::Retry {
                        available_at_ms: now + wait.as_millis() as i64,
                        delay_ms: delay.as_millis() as u64,
                        error,
                    },
                )
            }
            Decision::Fail => {
                let error = format!("refused by the application: {error}");
                (format!("dead letter: {error}"), ForwardTransition::DeadLetter { error })
            }
            Decision::Unknown { reason } | Decision::DeadLetter { reason } => {
                let error = format!("{reason}; last attempt: {error}");
                (format!("dead letter: {error}"), ForwardTransition::DeadLetter { error })
            }
        };
    completion(forward, Some(step(detail)), transition)
}

fn completion(
    forward: &ClaimedForward,
    step: Option<EventStep>,
    transition: ForwardTransition,
) -> ForwardCompletion {
    ForwardCompletion {
        id: forward.id,
        lease_token: forward.lease_token,
        event_seq: forward.event.seq,
        step,
        transition,
    }
}
