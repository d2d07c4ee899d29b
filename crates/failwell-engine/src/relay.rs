//! The relay: claims due outbox messages, makes one attempt each, and
//! records every result.
//!
//! Claiming is batched and bounded by a concurrency limit; results are
//! funnelled to one writer that records them in batches (one transaction for
//! many completions). What follows an attempt is decided by
//! [`failwell_policy::decide`]; the relay only carries it out. The relay is
//! the single retry owner for queued work: it never retries inside an
//! attempt.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use failwell_policy::{Admission, Attempted, Classification, Decision, Due, Outcome, admit, decide};
use failwell_store::{
    AttemptKind, AttemptRecord, ClaimScope, Claimed, Completion, Leased, Recorded, Store, StoreError,
    Transition,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::client::Providers;
use crate::client::{Attempt, CallResult};
use crate::pump::{PumpConfig, Queue, pump};
use crate::{ProviderClient, now_ms};

/// The outbox relay (see the module docs).
#[derive(Debug)]
pub struct Relay {
    outbox: Arc<OutboxQueue>,
    config: PumpConfig,
    wake: Arc<Notify>,
}

impl Relay {
    /// A relay over `store`, woken early through `wake`.
    pub fn new(store: Store, providers: Arc<Providers>, config: PumpConfig, wake: Arc<Notify>) -> Self {
        Self {
            outbox: Arc::new(OutboxQueue { store, providers, strays_at_ms: AtomicI64::new(0) }),
            config,
            wake,
        }
    }

    /// Runs until `shutdown` is cancelled, then waits for the attempts in
    /// flight and their records.
    pub async fn run(self, shutdown: CancellationToken) {
        pump(self.outbox, self.config, self.wake, shutdown).await;
    }
}

/// How often the relay looks for messages of providers the configuration
/// does not know (ms).
const STRAYS_EVERY_MS: i64 = 1_000;

/// The outbox as the pump's queue.
#[derive(Debug)]
struct OutboxQueue {
    store: Store,
    providers: Arc<Providers>,
    /// When strays were last looked for (ms since the Unix epoch).
    strays_at_ms: AtomicI64,
}

impl Queue for OutboxQueue {
    type Item = Claimed;
    type Done = Completion;
    const WHAT: &'static str = "outbox messages";

    fn lease_of(message: &Claimed) -> (i64, i64) {
        (message.outbox_id, message.lease_token)
    }

    fn lease_done(done: &Completion) -> (i64, i64) {
        (done.outbox_id, done.lease_token)
    }

    fn renew(
        &self,
        leases: Vec<(i64, i64)>,
        until_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        self.store.renew(Leased::Outbox, leases, until_ms)
    }

    /// Claims the due messages of every provider that can take a call now,
    /// in turns, so one provider's backlog never starves another. A provider
    /// whose breaker refuses calls (open, paused, probe slots taken) or whose
    /// bulkhead is full is left out: its messages stay where they are, no
    /// attempt spent and nothing written, until it can take one again. Once
    /// a second, messages of providers the configuration does not know are
    /// claimed too (to be dead-lettered, or left unknown if a call may have
    /// acted).
    async fn claim(&self, now_ms: i64, limit: u32, lease_ms: u64) -> Result<Vec<Claimed>, StoreError> {
        let mut claimed = Vec::new();
        let last = self.strays_at_ms.load(Ordering::Relaxed);
        if now_ms - last >= STRAYS_EVERY_MS
            && self.strays_at_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            let known = self.providers.keys().cloned().collect();
            claimed = self.store.claim(now_ms, limit, lease_ms, &ClaimScope::Strays(known)).await?;
        }
        let available: Vec<String> = self
            .providers
            .iter()
            .filter(|(_, client)| client.unavailable().is_none())
            .map(|(name, _)| name.clone())
            .collect();
        let rest = limit.saturating_sub(claimed.len() as u32);
        if rest > 0 && !available.is_empty() {
            claimed
                .extend(self.store.claim(now_ms, rest, lease_ms, &ClaimScope::Providers(available)).await?);
        }
        Ok(claimed)
    }

    async fn work(self: Arc<Self>, message: Claimed) -> Completion {
        attempt(&self.providers, message).await
    }

    fn record(
        &self,
        done: Vec<Completion>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Vec<Recorded>, StoreError>> + Send {
        self.store.complete(done, now_ms)
    }

    fn due_again_at(done: &Completion) -> Option<i64> {
        match done.transition {
            Transition::Retry { available_at_ms, .. } | Transition::Defer { available_at_ms, .. } => {
                Some(available_at_ms)
            }
            _ => None,
        }
    }

    /// The earliest moment a provider left out of claims (paused, breaker
    /// open, rate booked ahead, bulkhead full) can take a call again.
    fn resumes_in(&self) -> Option<Duration> {
        self.providers.values().filter_map(ProviderClient::unavailable).min()
    }
}

/// Makes one attempt for a claimed message and says what follows.
async fn attempt(providers: &Providers, message: Claimed) -> Completion {
    let op = &message.operation;
    // The configuration lost the provider or operation. If a call may have
    // acted, the operation stays visibly unknown; otherwise it is parked.
    let give_up = |error: String, decision: &str| {
        let now = now_ms();
        if op.effect_possible || message.interrupted {
            let record = unsent("config", None, Outcome::Unknown, &format!("unknown: {decision}"));
            completion(&message, record, Transition::Unknown { error, reconcile_at_ms: now })
        } else {
            let record = unsent("config", None, Outcome::Failed, &format!("dead letter: {decision}"));
            completion(&message, record, Transition::DeadLetter { error })
        }
    };
    let Some(client) = providers.get(&op.provider) else {
        return give_up(format!("unknown provider {:?}", op.provider), "unknown provider");
    };
    let spec = client.spec();
    let Some(operation) = spec.operations.get(&op.operation) else {
        return give_up(
            format!("provider {:?} has no operation {:?}", op.provider, op.operation),
            "unknown operation",
        );
    };
    let now = now_ms();
    let since = |at_ms: i64| crate::since(now, at_ms);
    let due = Due {
        attempts: message.attempts,
        interrupted: message.interrupted,
        age: since(op.delivery_started_at_ms),
        key_age: since(op.key_first_sent_at_ms.unwrap_or(now)),
    };
    let (retry_policy, idempotency) = spec.policies_of(&op.operation);
    let budget = match admit(retry_policy, idempotency, due) {
        Admission::Send { budget } => budget,
        Admission::Unknown { kind, reason } => {
            let record = unsent(
                kind,
                Some(Classification::Ambiguous),
                Outcome::Unknown,
                &format!("unknown: {reason}"),
            );
            return completion(
                &message,
                record,
                Transition::Unknown { error: reason.into(), reconcile_at_ms: now },
            );
        }
        Admission::DeadLetter { kind, reason } => {
            let record = unsent(kind, None, Outcome::Failed, &format!("dead letter: {reason}"));
            return completion(&message, record, Transition::DeadLetter { error: reason.into() });
        }
    };
    let retry = message.attempts > 1 || message.interrupted;
    match client.attempt(retry, client.call(operation, op, budget)).await {
        Attempt::Made(result) => decide_after(client, &message, &result),
        Attempt::Deferred { wait, kind, reason } => deferred(&message, wait, kind, reason),
    }
}

/// Puts a message back for `wait` without spending its attempt or writing
/// a history row: nothing was sent. Counted in
/// `failwell_relay_deferred_total{provider, reason}` (`reason`: `kind`).
fn deferred(message: &Claimed, wait: Duration, kind: &'static str, reason: String) -> Completion {
    tracing::debug!(outbox_id = message.outbox_id, wait_ms = wait.as_millis() as u64, %reason, "deferred");
    metrics::counter!(
        "failwell_relay_deferred_total",
        "provider" => message.operation.provider.clone(),
        "reason" => kind
    )
    .increment(1);
    Completion {
        outbox_id: message.outbox_id,
        lease_token: message.lease_token,
        operation_id: message.operation.id,
        attempt: None,
        transition: Transition::Defer { available_at_ms: now_ms() + wait.as_millis() as i64, reason },
    }
}

/// Turns a finished call into its history row and transition.
fn decide_after(client: &ProviderClient, message: &Claimed, result: &CallResult) -> Completion {
    let spec = client.spec();
    let status = result.response.as_ref().ok().map(|r| r.status);
    let body = result.response.as_ref().ok().and_then(|r| r.body.clone());
    let error = result.describe(&spec.error_code_pointer);
    let error_kind = match &result.response {
        Ok(_) => body
            .as_ref()
            .and_then(|b| b.pointer(&spec.error_code_pointer))
            .and_then(|c| c.as_str())
            .map(str::to_owned),
        Err(e) => Some(e.kind.to_owned()),
    };
    let row = |classification: Option<Classification>, outcome, decision: String| AttemptRecord {
        kind: AttemptKind::Call,
        started_at_ms: result.started_at_ms,
        duration_ms: result.duration.as_millis() as u64,
        status_code: status,
        error_kind: error_kind.clone(),
        classification: classification.map(|c| c.as_str()),
        outcome,
        decision,
    };
    if result.is_success() {
        let provider_ref = body
            .as_ref()
            .and_then(|b| b.pointer(&spec.id_pointer))
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let transition = Transition::Succeeded { provider_ref, response: body };
        return completion(message, row(None, Outcome::Succeeded, "succeeded".into()), transition);
    }
    let classification = spec.classifier.classify(result.observed(&spec.error_code_pointer));
    let op = &message.operation;
    let now = now_ms();
    let attempted = Attempted {
        attempts: message.attempts,
        age: crate::since(now, op.delivery_started_at_ms),
        key_age: crate::since(now, op.key_first_sent_at_ms.unwrap_or(now)),
        previous_delay: Duration::from_millis(message.previous_delay_ms),
        effect_possible: op.effect_possible || message.interrupted,
    };
    let (retry, idempotency) = spec.policies_of(&op.operation);
    let decision = decide(retry, idempotency, classification, attempted, &mut rand::rng());
    let outcome = match classification {
        Classification::Ambiguous => Outcome::Unknown,
        _ => Outcome::Failed,
    };
    let (text, transition) = match decision {
        Decision::Retry { delay } => {
            // The backoff stays the delay the next one grows from.
            let wait = client.retry_wait(delay);
            (
                format!("retry in {} ms", wait.as_millis()),
                Transition::Retry {
                    available_at_ms: now + wait.as_millis() as i64,
                    delay_ms: delay.as_millis() as u64,
                    error,
                },
            )
        }
        Decision::Fail => ("failed: permanent".into(), Transition::Failed { error, response: body }),
        Decision::Unknown { reason } => (
            format!("unknown: {reason}"),
            Transition::Unknown {
                error: format!("{reason}; last attempt: {error}"),
                reconcile_at_ms: now + spec.reconcile_after.as_millis() as i64,
            },
        ),
        Decision::DeadLetter { reason } => (
            format!("dead letter: {reason}"),
            Transition::DeadLetter { error: format!("{reason}; last attempt: {error}") },
        ),
    };
    completion(message, row(Some(classification), outcome, text), transition)
}

/// The history row of an attempt that was due but not sent.
fn unsent(
    error_kind: &str,
    classification: Option<Classification>,
    outcome: Outcome,
    decision: &str,
) -> AttemptRecord {
    AttemptRecord {
        kind: AttemptKind::Skipped,
        started_at_ms: now_ms(),
        duration_ms: 0,
        status_code: None,
        error_kind: Some(error_kind.to_owned()),
        classification: classification.map(|c| c.as_str()),
        outcome,
        decision: decision.to_owned(),
    }
}

fn completion(message: &Claimed, attempt: AttemptRecord, transition: Transition) -> Completion {
    Completion {
        outbox_id: message.outbox_id,
        lease_token: message.lease_token,
        operation_id: message.operation.id,
        attempt: Some(attempt),
        transition,
    }
}

#[cfg(test)]
mod tests;
