//! The reconciler: resolves operations whose outcome is unknown by asking
//! the provider (status lookup by our reference), never by guessing.
//!
//! Found at the provider → the operation ends with the provider's status.
//! Not found → delivered again (under the same idempotency key while the
//! provider still honours it, else under the next key group), or
//! dead-lettered when attempts or the deadline are spent. Lookup failed →
//! asked again later with backoff; the operation stays visibly `unknown`.
//! Nothing can find out (no lookup, no reference, or `reconcile = "none"`)
//! → `needs_human`: never retried, left to a person.

use std::sync::Arc;
use std::time::Duration;

use failwell_policy::{AfterNotFound, NotFound, Outcome, Reconcile, after_not_found, derive_key};
use failwell_store::{AttemptKind, AttemptRecord, Operation, Reconciled, Resolution, Store};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::client::Providers;
use crate::{ProviderClient, now_ms};

/// Reconciler settings.
#[derive(Clone, Debug)]
pub struct ReconcilerConfig {
    /// How often to look for due unknown operations.
    pub interval: Duration,
    /// Lookups per round (made concurrently).
    pub batch_size: u32,
}

/// The reconciler (see the module docs).
#[derive(Debug)]
pub struct Reconciler<S> {
    store: S,
    providers: Arc<Providers>,
    config: ReconcilerConfig,
}

impl<S: Store> Reconciler<S> {
    /// A reconciler over `store`.
    pub fn new(store: S, providers: Arc<Providers>, config: ReconcilerConfig) -> Self {
        Self { store, providers, config }
    }

    /// Runs rounds until `shutdown` is cancelled.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.config.interval) => {}
            }
            if let Err(e) = self.round().await {
                tracing::error!(error = %e, "reconciliation round failed");
            }
        }
    }

    /// One round: looks up every due unknown operation (up to the batch
    /// size) and records what was found. Returns how many were looked up.
    pub async fn round(&self) -> Result<usize, failwell_store::StoreError> {
        self.look_up(now_ms(), self.config.batch_size).await
    }

    /// Looks up every unknown operation once now, whenever its next lookup
    /// was due (an operator's `failwell reconcile run`), up to `limit`.
    /// Returns how many were looked up.
    pub async fn look_up_all(&self, limit: u32) -> Result<usize, failwell_store::StoreError> {
        self.look_up(i64::MAX, limit).await
    }

    async fn look_up(&self, due_by: i64, limit: u32) -> Result<usize, failwell_store::StoreError> {
        let due = self.store.due_unknown(due_by, limit).await?;
        let count = due.len();
        let mut due = due.into_iter();
        // At most `batch_size` lookups at once.
        loop {
            let mut lookups = JoinSet::new();
            for op in due.by_ref().take(self.config.batch_size.max(1) as usize) {
                let providers = self.providers.clone();
                lookups.spawn(async move { reconcile_one(&providers, op).await });
            }
            if lookups.is_empty() {
                return Ok(count);
            }
            while let Some(joined) = lookups.join_next().await {
                match joined {
                    Ok(reconciled) => self.store.reconcile(reconciled, now_ms()).await?,
                    Err(e) => tracing::error!(error = %e, "a status lookup task ended abnormally"),
                }
            }
        }
    }
}

async fn reconcile_one(providers: &Providers, op: Operation) -> Reconciled {
    let now = now_ms();
    // Stay unknown and look again after `wait`; `attempt` is the lookup's
    // own history row (none was made when nothing could be looked up).
    let later = |error: String, wait: Duration, attempt: Option<(i64, Duration, Option<u16>)>| {
        let (started_at_ms, duration, status) = attempt.unwrap_or((now, Duration::ZERO, None));
        Reconciled {
            operation_id: op.id,
            attempt: Some(lookup_record(
                started_at_ms,
                duration,
                status,
                Outcome::Unknown,
                format!("look again: {error}"),
            )),
            resolution: Resolution::Later { retry_at_ms: now + wait.as_millis() as i64, error },
        }
    };
    let Some(client) = providers.get(&op.provider) else {
        return later(format!("unknown provider {:?}", op.provider), Duration::from_secs(60), None);
    };
    let declared = client.spec().operations.get(&op.operation).map(|o| o.manifest.reconcile);
    // Nothing can find the outcome out: a person decides, and nothing is
    // retried (a retry could act twice).
    let to_human = |reason: &str| Reconciled {
        operation_id: op.id,
        attempt: None,
        resolution: Resolution::NeedsHuman { reason: format!("needs a human: {reason}") },
    };
    if declared == Some(Reconcile::None) {
        return to_human("the operation declares disagreement.reconcile = \"none\"; it is not looked up");
    }
    let Some(reference) = op.reference.as_deref() else {
        return to_human("it has no reference to look it up by");
    };
    let result = match client.lookup(reference).await {
        None => return to_human("the provider has no status lookup"),
        // Not looked up (open breaker, full bulkhead): nothing reached the
        // provider, so nothing is recorded or counted; look again when the
        // breaker lets a probe out, spread so the lookups do not all come
        // due at once.
        Some(Err(rejected)) => {
            let wait = client.wait_after(&rejected).unwrap_or(Duration::from_secs(1));
            tracing::debug!(operation = op.id, %rejected, "status lookup postponed");
            return Reconciled {
                operation_id: op.id,
                attempt: None,
                resolution: Resolution::Postpone { retry_at_ms: now + wait.as_millis() as i64 },
            };
        }
        Some(Ok(result)) => result,
    };
    let spec = client.spec();
    let status = result.response.as_ref().ok().map(|r| r.status);
    let records = match (&result.response, result.is_success()) {
        (Ok(reply), true) => reply.body.as_ref().and_then(|b| find_records(client, b)),
        _ => None,
    };
    let Some(found) = records else {
        let wait = spec.retry.backoff().delay(op.reconcile_attempts, Duration::ZERO, &mut rand::rng());
        let error = format!("status lookup failed: {}", result.describe(&spec.error_code_pointer));
        let wait = wait.max(Duration::from_millis(100));
        return later(error, wait, Some((result.started_at_ms, result.duration, status)));
    };
    let (resolution, decision) = match found {
        Some((outcome, provider_ref, record)) => (
            Resolution::Found { outcome, provider_ref, response: Some(record) },
            format!("found at provider: {outcome}"),
        ),
        None => not_found(client, &op, now),
    };
    let outcome = match &resolution {
        Resolution::Found { outcome, .. } => *outcome,
        Resolution::Confirm { .. }
        | Resolution::Later { .. }
        | Resolution::Postpone { .. }
        | Resolution::NeedsHuman { .. } => Outcome::Unknown,
        Resolution::Requeue { .. } | Resolution::DeadLetter { .. } => Outcome::Failed,
    };
    Reconciled {
        operation_id: op.id,
        attempt: Some(lookup_record(result.started_at_ms, result.duration, status, outcome, decision)),
        resolution,
    }
}

/// Reads the lookup answer: `None` when it has no list where configured,
/// `Some(None)` when the list has no record with a known status, else the
/// settled record (a succeeded one wins over failed ones).
#[allow(clippy::type_complexity)]
fn find_records(client: &ProviderClient, body: &Value) -> Option<Option<(Outcome, Option<String>, Value)>> {
    let spec = client.spec();
    let lookup = spec.lookup.as_ref()?;
    let records = body.pointer(&lookup.list_pointer)?.as_array()?;
    let status_of = |r: &Value| r.pointer(&lookup.status_pointer).and_then(Value::as_str).map(str::to_owned);
    let pick = |wanted: &[String], outcome| {
        records.iter().find(|r| status_of(r).is_some_and(|s| wanted.contains(&s))).map(|r| {
            let id = r.pointer(&spec.id_pointer).and_then(Value::as_str).map(str::to_owned);
            (outcome, id, r.clone())
        })
    };
    if records.iter().filter(|r| status_of(r).is_some_and(|s| lookup.succeeded.contains(&s))).count() > 1 {
        tracing::warn!(provider = %spec.name, "the provider holds several effects for one reference");
    }
    Some(pick(&lookup.succeeded, Outcome::Succeeded).or_else(|| pick(&lookup.failed, Outcome::Failed)))
}

/// The provider has no record of the operation: deliver again if allowed
/// ([`after_not_found`]).
fn not_found(client: &ProviderClient, op: &Operation, now: i64) -> (Resolution, String) {
    let spec = client.spec();
    let since = |at_ms: i64| crate::since(now, at_ms);
    let seen = NotFound {
        attempts: op.attempts,
        age: since(op.delivery_started_at_ms),
        key_age: since(op.key_first_sent_at_ms.unwrap_or(now)),
        misses: op.lookup_misses,
        effect_possible: op.effect_possible,
    };
    let requeue = |key_group: u32| {
        let provider_key = derive_key(&op.provider, &op.operation, &op.idempotency_key, key_group);
        (
            Resolution::Requeue { key_group, provider_key },
            format!("not found at provider: deliver again (key group {key_group})"),
        )
    };
    // Found nowhere, and what was stored cannot be sent again: the relay
    // would only set it aside once more.
    let resend = |key_group: u32| match &op.unreadable {
        Some(why) => (
            Resolution::DeadLetter {
                error: format!("not found at the provider, and the stored {why}: never sent again"),
            },
            "not found at provider; its stored payload cannot be read: dead letter".into(),
        ),
        None => requeue(key_group),
    };
    let (retry, idempotency) = spec.policies_of(&op.operation);
    match after_not_found(retry, idempotency, seen) {
        AfterNotFound::ResendSameKey => resend(op.key_group),
        AfterNotFound::ResendNewKey => resend(op.key_group + 1),
        AfterNotFound::Confirm => (
            Resolution::Confirm { retry_at_ms: now + spec.reconcile_after.as_millis() as i64 },
            "not found at provider yet: look again before delivering again".into(),
        ),
        AfterNotFound::DeadLetter => {
            let error = format!(
                "not found at the provider after {} attempts; {}",
                op.attempts,
                op.last_error.as_deref().unwrap_or("")
            );
            (Resolution::DeadLetter { error }, "not found at provider: dead letter".into())
        }
    }
}

fn lookup_record(
    started_at_ms: i64,
    duration: Duration,
    status_code: Option<u16>,
    outcome: Outcome,
    decision: String,
) -> AttemptRecord {
    AttemptRecord {
        kind: AttemptKind::Lookup,
        started_at_ms,
        duration_ms: duration.as_millis() as u64,
        status_code,
        error_kind: None,
        classification: None,
        outcome,
        decision,
    }
}
