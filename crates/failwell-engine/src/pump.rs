//! The loop shared by the relay and the forwarder: claim due items of a
//! leased queue (two claims in flight at once), work each once with bounded
//! concurrency, renew the leases of the items in hand, record the results
//! in batches through one writer.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use failwell_store::{Recorded, StoreError};
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::now_ms;

/// Settings of a queue's pump (the relay's, the forwarder's).
#[derive(Clone, Debug)]
pub struct PumpConfig {
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

    /// The `(id, lease_token)` of the claim a result is for.
    fn lease_done(done: &Self::Done) -> (i64, i64);

    /// Extends the leases `(id, lease_token)` still held to `until_ms`;
    /// returns how many were.
    fn renew(
        &self,
        leases: Vec<(i64, i64)>,
        until_ms: i64,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Claims up to `limit` due items under a lease of `lease_ms`; never
    /// more (an item past the limit would have no place to be worked and
    /// would wait for its lease to run out).
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

    /// When a result puts its item back in the queue (a retry, a
    /// deferral): the time it is due again, ms since the Unix epoch. The
    /// pump claims again at that moment rather than at its next poll.
    fn due_again_at(_done: &Self::Done) -> Option<i64> {
        None
    }

    /// How long until work the last claim left out (a provider paused, its
    /// breaker open, its rate booked ahead) may be claimed: the pump claims
    /// again then rather than at its next poll. `None`: nothing was left
    /// out.
    fn resumes_in(&self) -> Option<Duration> {
        None
    }
}

/// The earliest time an item put back is due again, and a signal when it
/// moved earlier (the first claimer then sleeps less).
#[derive(Debug)]
struct NextDue {
    /// Ms since the Unix epoch (`i64::MAX`: none).
    at_ms: AtomicI64,
    /// Notified when `at_ms` moved earlier.
    earlier: Notify,
}

impl NextDue {
    fn new() -> Self {
        Self { at_ms: AtomicI64::new(i64::MAX), earlier: Notify::new() }
    }

    /// Notes an item due again at `at_ms`.
    fn note(&self, at_ms: i64) {
        if self.at_ms.fetch_min(at_ms, Ordering::Relaxed) > at_ms {
            self.earlier.notify_one();
        }
    }
}

/// Claims a pump keeps in flight at once. A claim is a write transaction
/// whose round trip and commit would otherwise leave the pump idle: while
/// one claim waits for the database, the other's items are being worked.
/// The overlap needs `concurrency` above `batch_size` (room for one claim's
/// items beside the other's); with `concurrency == batch_size` the second
/// claim takes what the first left free.
const CLAIMERS: usize = 2;

/// Drains `queue` until `shutdown` is cancelled, then waits for the items
/// in flight and their records. Woken early through `wake`.
///
/// [`CLAIMERS`] claim loops share the `concurrency` permits: each reserves
/// the permits for what it asks for before it claims, so together they
/// never hold more items than `concurrency`. The first claimer polls every
/// `poll_interval` and is the one `wake` wakes; a claim that came back full
/// (more may be due) wakes the others, so under a backlog they all claim
/// and when the queue is quiet only one polls.
pub(crate) async fn pump<Q: Queue>(
    queue: Arc<Q>,
    config: PumpConfig,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let (done_tx, done_rx) = mpsc::channel(config.concurrency * 2);
    let claims = Arc::new(Claims {
        queue: queue.clone(),
        permits: Arc::new(Semaphore::new(config.concurrency)),
        // Under load, claim in batches of at least an eighth of the limit
        // rather than one item per freed slot: every claim is a write
        // transaction. (A quarter left an eighth of the slots idle on
        // average while they gathered; an eighth keeps 59 of 64 busy in
        // the stormy demo, against 52.)
        min_claim: (config.batch_size as usize).min(config.concurrency).div_ceil(8).max(1),
        held: Held::default(),
        next_due: Arc::new(NextDue::new()),
        busy: Notify::new(),
        done: done_tx,
        config,
        wake,
        shutdown,
    });
    let writer =
        tokio::spawn(write_results(queue.clone(), done_rx, claims.held.clone(), claims.next_due.clone()));
    let renewer = tokio::spawn(renew_leases(queue, claims.held.clone(), claims.config.lease));
    let claimers: Vec<_> = (0..CLAIMERS).map(|n| tokio::spawn(claims.clone().run(n == 0))).collect();
    for claimer in claimers {
        if let Err(e) = claimer.await {
            tracing::error!(error = %e, "a claimer of {} ended abnormally", Q::WHAT);
        }
    }
    // Wait for the items in flight, then let the writer drain.
    let _ = claims.permits.acquire_many(claims.config.concurrency as u32).await;
    drop(claims);
    if let Err(e) = writer.await {
        tracing::error!(error = %e, "the result writer of {} ended abnormally", Q::WHAT);
    }
    renewer.abort();
}

/// What the claim loops of one pump share.
struct Claims<Q: Queue> {
    queue: Arc<Q>,
    config: PumpConfig,
    /// One per item in hand, from its claim until its work is done.
    permits: Arc<Semaphore>,
    /// The fewest free permits a claim waits for.
    min_claim: usize,
    held: Held,
    /// When an item put back is due again (for the first claimer's sleep).
    next_due: Arc<NextDue>,
    /// Notified when a claim came back full: more may be due.
    busy: Notify,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
    done: mpsc::Sender<Q::Done>,
}

impl<Q: Queue> Claims<Q> {
    /// One claim loop; the `first` polls and answers `wake`.
    async fn run(self: Arc<Self>, first: bool) {
        let config = &self.config;
        let lease_ms = config.lease.as_millis() as u64;
        loop {
            // The places for what this claim may take: at least `min_claim`,
            // and what else is free, up to a batch.
            let mut reserved = tokio::select! {
                _ = self.shutdown.cancelled() => return,
                permits = self.permits.clone().acquire_many_owned(self.min_claim as u32) => match permits {
                    Ok(permits) => permits,
                    Err(_) => return,
                },
            };
            let more =
                self.permits.available_permits().min(config.batch_size as usize - reserved.num_permits());
            if let Ok(extra) = self.permits.clone().try_acquire_many_owned(more as u32) {
                reserved.merge(extra);
            }
            let want = reserved.num_permits() as u32;
            let claimed = self.queue.claim(now_ms(), want, lease_ms).await.unwrap_or_else(|e| {
                tracing::error!(error = %crate::chain(&e), "claiming {} failed", Q::WHAT);
                Vec::new()
            });
            // All that was asked for came: more may be due right away.
            let more_due = claimed.len() as u32 == want;
            // A claim returns at most `want` items (the `Queue` contract), so
            // every item has its reserved permit.
            for (item, permit) in claimed.into_iter().zip(std::iter::from_fn(|| reserved.split(1))) {
                let (id, token) = Q::lease_of(&item);
                self.held.lock().unwrap_or_else(|e| e.into_inner()).insert(id, token);
                let (queue, done) = (self.queue.clone(), self.done.clone());
                tokio::spawn(async move {
                    // Boxed: the call's future is kilobytes, and a task
                    // holding it inline is copied whole when it is spawned
                    // and again when it finishes.
                    let result = Box::pin(queue.work(item)).await;
                    let _ = done.send(result).await;
                    drop(permit);
                });
            }
            drop(reserved);
            if self.shutdown.is_cancelled() {
                return;
            }
            if more_due {
                self.busy.notify_waiters();
                continue;
            }
            loop {
                let sleep = if first { self.until_next_claim() } else { config.poll_interval };
                tokio::select! {
                    _ = self.shutdown.cancelled() => return,
                    _ = self.busy.notified() => {}
                    _ = self.wake.notified(), if first => {}
                    _ = tokio::time::sleep(sleep), if first => {}
                    // An item put back is due sooner: sleep again, less.
                    _ = self.next_due.earlier.notified(), if first => continue,
                }
                break;
            }
        }
    }

    /// How long the first claimer sleeps: until the next poll, or sooner
    /// when an item put back comes due or left-out work may be claimed.
    /// An item's due time is forgotten once the claimer wakes for it.
    fn until_next_claim(&self) -> Duration {
        let mut sleep = self.config.poll_interval;
        if let Some(resumes) = self.queue.resumes_in() {
            sleep = sleep.min(resumes);
        }
        let due = self.next_due.at_ms.load(Ordering::Relaxed);
        if due != i64::MAX {
            let until = Duration::from_millis((due - now_ms()).max(0) as u64);
            if until <= sleep {
                self.next_due.at_ms.store(i64::MAX, Ordering::Relaxed);
                sleep = until;
            }
        }
        sleep
    }
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
            Err(e) => {
                tracing::warn!(error = %crate::chain(&e), count, "renewing the leases of {} failed", Q::WHAT)
            }
        }
    }
}

/// Stops renewing `leases` `(id, lease_token)`. An id claimed again
/// meanwhile (a deferred item due again at once) holds a newer token, and
/// that lease is kept.
fn release(held: &Held, leases: &[(i64, i64)]) {
    let mut in_hand = held.lock().unwrap_or_else(|e| e.into_inner());
    for (id, token) in leases {
        if in_hand.get(id) == Some(token) {
            in_hand.remove(id);
        }
    }
}

/// Records results in batches of whatever has arrived; a recorded (or
/// unrecordable) item's lease is no longer renewed.
async fn write_results<Q: Queue>(
    queue: Arc<Q>,
    mut done: mpsc::Receiver<Q::Done>,
    held: Held,
    next_due: Arc<NextDue>,
) {
    let mut batch = Vec::new();
    while done.recv_many(&mut batch, 256).await > 0 {
        let results = std::mem::take(&mut batch);
        let count = results.len();
        let leases: Vec<(i64, i64)> = results.iter().map(Q::lease_done).collect();
        let due_again = results.iter().filter_map(Q::due_again_at).min();
        let recorded = queue.record(results, now_ms()).await;
        release(&held, &leases);
        if let Some(due) = due_again
            && recorded.is_ok()
        {
            next_due.note(due);
        }
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
            Err(e) => {
                tracing::error!(error = %crate::chain(&e), count, "recording results for {} failed", Q::WHAT)
            }
        }
    }
}

#[cfg(test)]
mod tests;
