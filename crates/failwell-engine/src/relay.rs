//! The relay: claims due outbox messages, makes one attempt each, and
//! records every result.
//!
//! Claiming is batched and bounded by a concurrency limit; results are
//! funnelled to one writer that records them in batches (one transaction for
//! many completions). What follows an attempt is decided by
//! [`failwell_policy::decide`]; the relay only carries it out. The relay is
//! the single retry owner for queued work: it never retries inside an
//! attempt.

use std::sync::Arc;
use std::time::Duration;

use failwell_policy::{
    Admission, Attempted, Classification, Decision, Due, Outcome, Rejected, TransportFailure, admit, decide,
};
use failwell_store::{AttemptKind, AttemptRecord, Claimed, Completion, Store, Transition};
use rand::Rng;
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::client::{CallResult, TransportError};
use crate::provider::Providers;
use crate::{ProviderClient, now_ms};

/// Relay settings.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// Attempts in flight at once, across providers.
    pub concurrency: usize,
    /// Messages claimed per query.
    pub batch_size: u32,
    /// How often to look for due messages when not woken.
    pub poll_interval: Duration,
    /// How long a claim is exclusive; a crashed worker's messages are taken
    /// over after it. Must exceed the longest provider timeout.
    pub lease: Duration,
}

/// The outbox relay (see the module docs).
#[derive(Debug)]
pub struct Relay<S> {
    store: S,
    providers: Arc<Providers>,
    config: RelayConfig,
    wake: Arc<Notify>,
}

impl<S: Store> Relay<S> {
    /// A relay over `store`, woken early through `wake`.
    pub fn new(store: S, providers: Arc<Providers>, config: RelayConfig, wake: Arc<Notify>) -> Self {
        Self { store, providers, config, wake }
    }

    /// Runs until `shutdown` is cancelled, then waits for the attempts in
    /// flight and their records.
    pub async fn run(self, shutdown: CancellationToken) {
        let permits = Arc::new(Semaphore::new(self.config.concurrency));
        let (done_tx, done_rx) = mpsc::channel(self.config.concurrency * 2);
        let writer = tokio::spawn(write_results(self.store.clone(), done_rx));
        // Under load, claim in batches of at least a quarter of the limit
        // rather than one message per freed slot: every claim is a write
        // transaction.
        let min_claim = (self.config.batch_size as usize).min(self.config.concurrency).div_ceil(4).max(1);
        while !shutdown.is_cancelled() {
            let want = (permits.available_permits() as u32).min(self.config.batch_size);
            let claimed = if want == 0 {
                Vec::new()
            } else {
                let lease_ms = self.config.lease.as_millis() as u64;
                self.store.claim(now_ms(), want, lease_ms).await.unwrap_or_else(|e| {
                    tracing::error!(error = %e, "claiming outbox messages failed");
                    Vec::new()
                })
            };
            // All that was asked for came: more may be due right away.
            let more_due = want > 0 && claimed.len() as u32 == want;
            for message in claimed {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                let providers = self.providers.clone();
                let done = done_tx.clone();
                tokio::spawn(async move {
                    let completion = attempt(&providers, message).await;
                    let _ = done.send(completion).await;
                    drop(permit);
                });
            }
            let saturated = permits.available_permits() < min_claim;
            if more_due && !saturated {
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = self.wake.notified(), if !saturated => {}
                _ = tokio::time::sleep(self.config.poll_interval), if !more_due => {}
                _ = permits.acquire_many(min_claim as u32), if saturated => {}
            }
        }
        // Wait for attempts in flight, then let the writer drain.
        let _ = permits.acquire_many(self.config.concurrency as u32).await;
        drop(done_tx);
        if let Err(e) = writer.await {
            tracing::error!(error = %e, "relay result writer ended abnormally");
        }
    }
}

/// Records completions in batches of whatever has arrived.
async fn write_results<S: Store>(store: S, mut done: mpsc::Receiver<Completion>) {
    let mut batch = Vec::new();
    while done.recv_many(&mut batch, 256).await > 0 {
        let results = std::mem::take(&mut batch);
        let count = results.len();
        match store.complete(results, now_ms()).await {
            Ok(applied) => {
                let lost = applied.iter().filter(|a| !**a).count();
                if lost > 0 {
                    tracing::warn!(
                        lost,
                        "results arrived after their lease was taken over; history kept, state untouched"
                    );
                }
            }
            // The messages stay leased; after the lease they are claimed again
            // as interrupted and retried under the same idempotency key.
            Err(e) => tracing::error!(error = %e, count, "recording attempt results failed"),
        }
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
    let since = |at_ms: i64| Duration::from_millis((now - at_ms).max(0) as u64);
    let due = Due {
        attempts: message.attempts,
        interrupted: message.interrupted,
        age: since(op.created_at_ms),
        key_age: since(op.key_first_sent_at_ms.unwrap_or(now)),
    };
    let budget = match admit(&spec.retry, &spec.idempotency, due) {
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
    // A retry is withdrawn from the provider's retry budget when it is about
    // to be sent; past the budget it waits (without spending the attempt)
    // for the budget's window to turn, so retries never exceed the budget's
    // share of the provider's traffic.
    // The wait is spread over half the window so that a backlog of retries
    // does not come back all at once.
    let retry = message.attempts > 1 || message.interrupted;
    if retry && !client.guards().budget.try_withdraw() {
        let ttl = client.spec().retry_budget.ttl;
        let wait = ttl / 10 + rand::rng().random_range(Duration::ZERO..=ttl / 2);
        let reason = format!("deferred: the retry budget of {:?} is spent", op.provider);
        return deferred(&message, wait, "retry_budget", reason);
    }
    let result = match client.call(operation, op, budget).await {
        Ok(result) => result,
        Err(rejected) => match client.wait_after(&rejected) {
            Some(wait) => {
                // Nothing was sent: the retry goes back into the budget.
                if retry {
                    client.guards().budget.refund();
                }
                let kind = if matches!(rejected, Rejected::BulkheadFull(_)) {
                    "bulkhead_full"
                } else {
                    "breaker_open"
                };
                return deferred(&message, wait, kind, format!("deferred: {rejected}"));
            }
            None => cut_short(&rejected),
        },
    };
    if !retry {
        client.guards().budget.deposit();
    }
    decide_after(client, &message, &result)
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

/// A call the policy cut short after it may have been sent reads as a
/// timeout after sending.
fn cut_short(rejected: &Rejected) -> CallResult {
    CallResult {
        started_at_ms: now_ms(),
        duration: Duration::ZERO,
        response: Err(TransportError {
            failure: TransportFailure::AfterSend,
            kind: "timeout",
            message: rejected.to_string(),
        }),
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
        age: Duration::from_millis((now - op.created_at_ms).max(0) as u64),
        key_age: Duration::from_millis((now - op.key_first_sent_at_ms.unwrap_or(now)).max(0) as u64),
        previous_delay: Duration::from_millis(message.previous_delay_ms),
        effect_possible: op.effect_possible || message.interrupted,
    };
    let decision = decide(&spec.retry, &spec.idempotency, classification, attempted, &mut rand::rng());
    let outcome = match classification {
        Classification::Ambiguous => Outcome::Unknown,
        _ => Outcome::Failed,
    };
    let (text, transition) = match decision {
        Decision::Retry { delay } => (
            format!("retry in {} ms", delay.as_millis()),
            Transition::Retry {
                available_at_ms: now + delay.as_millis() as i64,
                delay_ms: delay.as_millis() as u64,
                error,
            },
        ),
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
