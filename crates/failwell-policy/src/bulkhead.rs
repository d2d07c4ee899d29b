//! Bulkhead: a per-provider concurrency limit with a bounded wait, so a slow
//! provider can hold at most its own share of the workers (Nygard, *Release
//! It!*, "Bulkheads"; Resilience4j `SemaphoreBulkhead`).
//!
//! A call takes a permit for its whole duration. When all `max_concurrent`
//! permits are taken, a caller waits at most `max_wait`, and at most
//! `max_waiting` callers wait at once; past either bound it gets
//! [`BulkheadFull`] at once. There is no unbounded queue anywhere.
//!
//! Taking and returning a permit is one compare-and-swap and one atomic
//! subtraction; waiters are woken through a [`tokio::sync::Notify`] only
//! when there are any. Waiters are woken in arrival order, but a caller
//! arriving while a permit is free takes it even if others are waiting
//! (barging): the bound on waiting time is the guarantee, not FIFO order.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// A bulkhead's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkheadConfig {
    /// Calls in flight at once, ≥ 1.
    pub max_concurrent: usize,
    /// How long a caller may wait for a permit (zero: never wait).
    pub max_wait: Duration,
    /// Callers that may wait at once (zero: never wait).
    pub max_waiting: usize,
}

impl Default for BulkheadConfig {
    /// 64 in flight, up to 64 more waiting at most 100 ms each.
    fn default() -> Self {
        Self { max_concurrent: 64, max_wait: Duration::from_millis(100), max_waiting: 64 }
    }
}

/// Invalid bulkhead limits.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BulkheadConfigError {
    /// `max_concurrent` was zero.
    #[error("max_concurrent must be at least 1")]
    ZeroConcurrency,
}

/// The error of a call the bulkhead did not admit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bulkhead {bulkhead:?} is full: {max_concurrent} calls in flight{}", match (*waited, *may_wait) { (true, _) => " and no permit came free in time", (false, true) => ", and the wait queue is full", (false, false) => ", and calls may not wait" })]
pub struct BulkheadFull {
    /// The bulkhead's name.
    pub bulkhead: Arc<str>,
    /// Its limit.
    pub max_concurrent: usize,
    /// Whether the caller waited (`max_wait` passed) or was turned away at
    /// once (too many waiting, or no waiting allowed).
    pub waited: bool,
    /// Whether the bulkhead lets calls wait at all (`max_wait` and
    /// `max_waiting` above zero).
    pub may_wait: bool,
}

/// A concurrency limit; cheap to clone (clones share the permits).
#[derive(Clone)]
pub struct Bulkhead {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    config: BulkheadConfig,
    in_flight: AtomicUsize,
    waiting: AtomicUsize,
    freed: Notify,
    rejected: metrics::Counter,
}

impl fmt::Debug for Bulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bulkhead")
            .field("name", &self.inner.name)
            .field("config", &self.inner.config)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl BulkheadConfig {
    /// Checks the limits: `max_concurrent` is at least 1
    /// ([`BulkheadConfigError::ZeroConcurrency`]).
    pub fn validate(&self) -> Result<(), BulkheadConfigError> {
        if self.max_concurrent == 0 {
            return Err(BulkheadConfigError::ZeroConcurrency);
        }
        Ok(())
    }
}

impl Bulkhead {
    /// A bulkhead named `name` (for errors, logs and metrics). Errors when
    /// `max_concurrent` is zero.
    pub fn new(name: &str, config: BulkheadConfig) -> Result<Self, BulkheadConfigError> {
        config.validate()?;
        let name: Arc<str> = Arc::from(name);
        Ok(Self {
            inner: Arc::new(Inner {
                rejected: metrics::counter!("failwell_bulkhead_rejected_total", "bulkhead" => name.to_string()),
                name,
                config,
                in_flight: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
                freed: Notify::new(),
            }),
        })
    }

    /// The bulkhead's name.
    pub fn name(&self) -> &Arc<str> {
        &self.inner.name
    }

    /// The limits.
    pub fn config(&self) -> BulkheadConfig {
        self.inner.config
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Relaxed)
    }

    /// Calls waiting for a permit now.
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// Takes a permit if one is free, without waiting.
    #[inline]
    pub fn try_acquire(&self) -> Option<BulkheadPermit> {
        self.take().then(|| BulkheadPermit { inner: self.inner.clone() })
    }

    /// Takes a permit without a guard; the caller must [`give_back`](Self::give_back).
    #[inline]
    pub(crate) fn take(&self) -> bool {
        self.inner.take()
    }

    /// Returns a permit taken with [`take`](Self::take).
    #[inline]
    pub(crate) fn give_back(&self) {
        self.inner.give_back();
    }

    /// Waits for a permit within the bounds, without a guard.
    pub(crate) async fn wait(&self) -> Result<(), BulkheadFull> {
        self.inner.wait().await
    }

    /// The error for a caller turned away without waiting.
    pub(crate) fn full(&self) -> BulkheadFull {
        self.inner.full(false)
    }

    /// Takes a permit, waiting within the configured bounds. Errors with
    /// [`BulkheadFull`] when none came free.
    pub async fn acquire(&self) -> Result<BulkheadPermit, BulkheadFull> {
        if let Some(permit) = self.try_acquire() {
            return Ok(permit);
        }
        self.inner.wait().await?;
        Ok(BulkheadPermit { inner: self.inner.clone() })
    }
}

impl Inner {
    #[inline]
    fn take(&self) -> bool {
        // SeqCst here and in `give_back`/`wait`: a waiter announces itself
        // (`waiting`) before checking `in_flight`, a releaser decrements
        // `in_flight` before checking `waiting`; sequential consistency
        // rules out both missing each other (a lost wakeup). On x86 these
        // are the same instructions as acquire/release.
        let mut current = self.in_flight.load(Ordering::SeqCst);
        while current < self.config.max_concurrent {
            match self.in_flight.compare_exchange_weak(
                current,
                current + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => current = now,
            }
        }
        false
    }

    #[inline]
    fn give_back(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.freed.notify_one();
        }
    }

    fn full(&self, waited: bool) -> BulkheadFull {
        self.rejected.increment(1);
        tracing::debug!(bulkhead = %self.name, waited, "bulkhead full: call rejected");
        BulkheadFull {
            bulkhead: self.name.clone(),
            max_concurrent: self.config.max_concurrent,
            waited,
            may_wait: !self.config.max_wait.is_zero() && self.config.max_waiting > 0,
        }
    }

    /// Waits for a permit; on success the permit is taken (in `in_flight`).
    async fn wait(&self) -> Result<(), BulkheadFull> {
        if self.config.max_wait.is_zero() {
            return Err(self.full(false));
        }
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&self.waiting);
        if queued >= self.config.max_waiting {
            return Err(self.full(false));
        }
        let waited = tokio::time::timeout(self.config.max_wait, async {
            loop {
                let freed = self.freed.notified();
                tokio::pin!(freed);
                freed.as_mut().enable();
                // Registered before the check: a permit returned between the
                // check and the wait still wakes this waiter.
                if self.take() {
                    return;
                }
                freed.await;
            }
        })
        .await;
        waited.map_err(|_| self.full(true))
    }
}

/// Decrements the waiter count when a waiter leaves, however it leaves.
struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A taken permit; returned when dropped.
pub struct BulkheadPermit {
    inner: Arc<Inner>,
}

impl fmt::Debug for BulkheadPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadPermit").field("bulkhead", &self.inner.name).finish()
    }
}

impl Drop for BulkheadPermit {
    fn drop(&mut self) {
        self.inner.give_back();
    }
}

#[cfg(test)]
mod tests;
