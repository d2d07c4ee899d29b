//! The loop shared by the relay and the forwarder: claim due items of a
//! leased queue, work each once with bounded concurrency, renew the leases
//! of the items in hand, record the results in batches through one writer.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use failwell_store::{Recorded, StoreError};
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::now_ms;

/// Settings of a queue's pump (the relay's, the forwarder's).
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// Items worked at once.
    pub concurrency: usize,
    /// Items claimed per query.
    pub batch_size: u32,
    /// How often to look for due items when not woken.
    pub poll_interval: Duration,
    /// How long a claim is exclusive; a crashed worker's items are taken
    /// over after it. Renewed every third of it while an item is in hand
    /// (a call in flight, a result not yet recorded), so a slow call keeps
    /// its item; a process that cannot renew is treated like one that
    /// crashed.
    pub lease: Duration,
}

/// A durable queue claimed under leases: what the pump drains.
pub(crate) trait Queue: Send + Sync + 'static {
    /// A claimed item.
    type Item: Send + 'static;
    /// The result of working one.
    type Done: Send + 'static;
    /// What the queue holds, for logs: `outbox messages`, `forwards`.
    const WHAT: &'static str;

    /// An item's `(id, lease_token)`.
    fn lease_of(item: &Self::Item) -> (i64, i64);

    /// The id of the item a result is for.
    fn done_id(done: &Self::Done) -> i64;

    /// Extends the leases `(id, lease_token)` still held to `until_ms`;
    /// returns how many were.
    fn renew(
        &self,
        leases: Vec<(i64, i64)>,
        until_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Claims up to `limit` due items under a lease of `lease_ms`.
    fn claim(
        &self,
        now_ms: i64,
        limit: u32,
        lease_ms: u64,
    ) -> impl Future<Output = Result<Vec<Self::Item>, StoreError>> + Send;

    /// Works one item once and says what follows.
    fn work(self: Arc<Self>, item: Self::Item) -> impl Future<Output = Self::Done> + Send;

    /// Records results in one transaction; per result, what was recorded.
    fn record(
        &self,
        done: Vec<Self::Done>,
        now_ms: i64,
    ) -> impl Future<Output = Result<Vec<Recorded>, StoreError>> + Send;
}

/// Drains `queue` until `shutdown` is cancelled, then waits for the items
/// in flight and their records. Woken early through `wake`.
pub(crate) async fn pump<Q: Queue>(
    queue: Arc<Q>,
    config: RelayConfig,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(config.concurrency));
    let (done_tx, done_rx) = mpsc::channel(config.concurrency * 2);
    // The items in hand, from their claim until their result is recorded.
    let held: Held = Arc::default();
    let writer = tokio::spawn(write_results(queue.clone(), done_rx, held.clone()));
    let renewer = tokio::spawn(renew_leases(queue.clone(), held.clone(), config.lease));
    // Under load, claim in batches of at least a quarter of the limit rather
    // than one item per freed slot: every claim is a write transaction.
    let min_claim = (config.batch_size as usize).min(config.concurrency).div_ceil(4).max(1);
    while !shutdown.is_cancelled() {
        let want = (permits.available_permits() as u32).min(config.batch_size);
        let claimed = if want == 0 {
            Vec::new()
        } else {
            let lease_ms = config.lease.as_millis() as u64;
            queue.claim(now_ms(), want, lease_ms).await.unwrap_or_else(|e| {
                tracing::error!(error = %e, "claiming {} failed", Q::WHAT);
                Vec::new()
            })
        };
        // All that was asked for came: more may be due right away.
        let more_due = want > 0 && claimed.len() as u32 == want;
        for item in claimed {
            let (id, token) = Q::lease_of(&item);
            held.lock().unwrap_or_else(|e| e.into_inner()).insert(id, token);
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let (queue, done) = (queue.clone(), done_tx.clone());
            tokio::spawn(async move {
                let result = queue.work(item).await;
                let _ = done.send(result).await;
                drop(permit);
            });
        }
        let saturated = permits.available_permits() < min_claim;
        if more_due && !saturated {
            continue;
        }
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = wake.notified(), if !saturated => {}
            _ = tokio::time::sleep(config.poll_interval), if !more_due => {}
            _ = permits.acquire_many(min_claim as u32), if saturated => {}
        }
    }
    // Wait for the items in flight, then let the writer drain.
    let _ = permits.acquire_many(config.concurrency as u32).await;
    drop(done_tx);
    if let Err(e) = writer.await {
        tracing::error!(error = %e, "the result writer of {} ended abnormally", Q::WHAT);
    }
    renewer.abort();
}

/// Leases in hand: item id → lease token.
type Held = Arc<Mutex<HashMap<i64, i64>>>;

/// Every third of `lease`, extends the leases of the items in hand by a
/// whole lease, in one statement.
async fn renew_leases<Q: Queue>(queue: Arc<Q>, held: Held, lease: Duration) {
    let mut every = tokio::time::interval(lease / 3);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        let leases: Vec<(i64, i64)> =
            held.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(id, token)| (*id, *token)).collect();
        if leases.is_empty() {
            continue;
        }
        let count = leases.len();
        match queue.renew(leases, now_ms() + lease.as_millis() as i64).await {
            Ok(renewed) if renewed < count as u64 => tracing::debug!(
                count,
                renewed,
                "some leases of {} were not renewed (settled meanwhile, or taken over)",
                Q::WHAT
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, count, "renewing the leases of {} failed", Q::WHAT),
        }
    }
}

/// Records results in batches of whatever has arrived; a recorded (or
/// unrecordable) item's lease is no longer renewed.
async fn write_results<Q: Queue>(queue: Arc<Q>, mut done: mpsc::Receiver<Q::Done>, held: Held) {
    let mut batch = Vec::new();
    while done.recv_many(&mut batch, 256).await > 0 {
        let results = std::mem::take(&mut batch);
        let count = results.len();
        let ids: Vec<i64> = results.iter().map(Q::done_id).collect();
        let recorded = queue.record(results, now_ms()).await;
        let mut in_hand = held.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            in_hand.remove(&id);
        }
        drop(in_hand);
        match recorded {
            Ok(recorded) => {
                let count = |what: Recorded| recorded.iter().filter(|r| **r == what).count();
                let (lost, settled) = (count(Recorded::LeaseLost), count(Recorded::SettledElsewhere));
                if lost > 0 {
                    tracing::warn!(
                        lost,
                        "results for {} arrived after their lease was taken over (a worker outlived its \
                         lease); history kept, state untouched",
                        Q::WHAT
                    );
                }
                if settled > 0 {
                    tracing::debug!(settled, "results for {} arrived after an event settled them", Q::WHAT);
                }
                let conflicts = count(Recorded::Conflict);
                if conflicts > 0 {
                    tracing::warn!(
                        conflicts,
                        "answers contradicted the events that settled their operations; looking them up"
                    );
                }
            }
            // The items stay leased; after the lease they are claimed again.
            Err(e) => tracing::error!(error = %e, count, "recording results for {} failed", Q::WHAT),
        }
    }
}
