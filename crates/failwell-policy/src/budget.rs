//! Retry budget: retries may add at most a fixed share of the recent
//! requests, so a failing provider is never hit by a retry storm.
//!
//! The scheme is Finagle's `RetryBudget` (and Envoy's retry budgets): every
//! original request deposits `ratio` of a token, every retry withdraws one
//! whole token, and a reserve of `min_per_second × ttl` tokens lets a quiet
//! client retry at all. Deposits and withdrawals count for `ttl` (default
//! 10 s) and then expire. A retry is withdrawn when it is *scheduled*, so
//! retries waiting in backoff already count against the budget. With the
//! defaults (20 %, 10 per second, 10 s) a 100 %-failure storm of N requests
//! within 10 s adds at most `0.2 × N + 100` retries.
//!
//! # Cost
//! A deposit is one relaxed atomic addition on a counter striped per thread
//! (no contention between threads); the first deposit after a fold reads the
//! clock, and every 64th of a thread's deposits folds its stripe into the
//! time window under a short lock. A withdrawal — only made when a retry is
//! wanted — reads the clock, folds every stripe and takes the lock. Folded
//! deposits are dated by the first of them, never later, and withdrawals
//! count for at least a whole `ttl`: every approximation errs towards fewer
//! retries.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::{Clock, nanos};

/// A retry budget's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryBudgetConfig {
    /// Retries allowed per original request, in [0, 10]. Default 0.2.
    pub ratio: f64,
    /// Retries allowed per second whatever the traffic (the reserve).
    /// Default 10.
    pub min_per_second: u32,
    /// How long deposits and withdrawals count, 1 s – 1 h. Default 10 s.
    pub ttl: Duration,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        Self { ratio: 0.2, min_per_second: 10, ttl: Duration::from_secs(10) }
    }
}

/// Invalid retry budget parameters.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RetryBudgetConfigError {
    /// `ratio` outside [0, 10].
    #[error("ratio must be between 0 and 10, got {0}")]
    Ratio(f64),
    /// `ttl` outside 1 s – 1 h.
    #[error("ttl must be between 1 s and 1 h, got {0} ms")]
    Ttl(u128),
}

impl RetryBudgetConfig {
    /// Checks the ranges; see [`RetryBudgetConfigError`].
    pub fn validate(&self) -> Result<(), RetryBudgetConfigError> {
        if !(0.0..=10.0).contains(&self.ratio) {
            return Err(RetryBudgetConfigError::Ratio(self.ratio));
        }
        if self.ttl < Duration::from_secs(1) || self.ttl > Duration::from_secs(3600) {
            return Err(RetryBudgetConfigError::Ttl(self.ttl.as_millis()));
        }
        Ok(())
    }
}

const STRIPES: usize = 8;
const SLOTS: usize = 10;
/// Slots kept: one more than the window, because a withdrawal counts for a
/// whole `ttl` after it, which spans into an eleventh slot.
const RING: usize = SLOTS + 1;

/// One thread's share of the deposits not yet in the ledger, on its own
/// cache line.
#[repr(align(128))]
#[derive(Default)]
struct Stripe {
    /// Deposits not yet folded into the ledger.
    pending: AtomicU64,
    /// Clock reading of the first of them (0: none yet).
    since: AtomicU64,
}

/// A stripe folds itself into the ledger every this many deposits, so a
/// deposit's time is known to within this many of the thread's deposits.
const FLUSH_EVERY: u64 = 64;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    index: u64,
    deposits: f64,
    withdrawals: u32,
}

#[derive(Debug)]
struct Ledger {
    slots: [Slot; RING],
}

/// A retry budget; cheap to clone (clones share the budget).
#[derive(Clone)]
pub struct RetryBudget {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    config: RetryBudgetConfig,
    clock: Clock,
    slot_width: u64,
    stripes: [Stripe; STRIPES],
    ledger: Mutex<Ledger>,
    exhausted: metrics::Counter,
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("name", &self.inner.name)
            .field("config", &self.inner.config)
            .finish()
    }
}

thread_local! {
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

#[inline]
fn stripe_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    STRIPE.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES);
        }
        s.get()
    })
}

impl RetryBudget {
    /// A budget named `name` (for logs and metrics). Errors when the
    /// parameters are out of range.
    pub fn new(name: &str, config: RetryBudgetConfig) -> Result<Self, RetryBudgetConfigError> {
        config.validate()?;
        let clock = Clock::new();
        let name: Arc<str> = Arc::from(name);
        Ok(Self {
            inner: Arc::new(Inner {
                exhausted: metrics::counter!("failwell_retry_budget_exhausted_total", "budget" => name.to_string()),
                name,
                config,
                slot_width: nanos(config.ttl) / SLOTS as u64,
                stripes: Default::default(),
                ledger: Mutex::new(Ledger { slots: [Slot::default(); RING] }),
                clock,
            }),
        })
    }

    /// The parameters.
    pub fn config(&self) -> RetryBudgetConfig {
        self.inner.config
    }

    /// Counts one original request (not a retry).
    #[inline]
    pub fn deposit(&self) {
        let inner = &self.inner;
        let stripe = &inner.stripes[stripe_index()];
        let before = stripe.pending.fetch_add(1, Ordering::Relaxed);
        if before == 0 {
            stripe.since.store(inner.clock.now(), Ordering::Relaxed);
        } else if (before + 1).is_multiple_of(FLUSH_EVERY) {
            let now = inner.clock.now();
            let mut ledger = inner.ledger.lock().unwrap_or_else(|e| e.into_inner());
            inner.fold_stripe(&mut ledger, stripe, now);
        }
    }

    /// Takes one retry from the budget; `false` when it is spent (then the
    /// caller returns the original error instead of retrying).
    pub fn try_withdraw(&self) -> bool {
        let inner = &self.inner;
        let now = inner.clock.now();
        let mut ledger = inner.ledger.lock().unwrap_or_else(|e| e.into_inner());
        inner.fold(&mut ledger, now);
        let current = now / inner.slot_width;
        if inner.balance(&ledger, current) >= 1.0 {
            inner.slot(&mut ledger, current).withdrawals += 1;
            true
        } else {
            drop(ledger);
            inner.exhausted.increment(1);
            tracing::debug!(budget = %inner.name, "retry budget exhausted: returning the original error");
            false
        }
    }

    /// Gives back a retry taken with [`try_withdraw`](Self::try_withdraw)
    /// that was not made after all (e.g. an open breaker refused it).
    pub fn refund(&self) {
        let inner = &self.inner;
        let current = inner.clock.now() / inner.slot_width;
        let mut ledger = inner.ledger.lock().unwrap_or_else(|e| e.into_inner());
        let newest = ledger
            .slots
            .iter_mut()
            .filter(|s| s.withdrawals > 0 && s.index + RING as u64 > current && s.index <= current)
            .max_by_key(|s| s.index);
        if let Some(slot) = newest {
            slot.withdrawals -= 1;
        }
    }

    /// Retries that may be scheduled now (rounded down).
    pub fn available(&self) -> u64 {
        let inner = &self.inner;
        let now = inner.clock.now();
        let mut ledger = inner.ledger.lock().unwrap_or_else(|e| e.into_inner());
        inner.fold(&mut ledger, now);
        inner.balance(&ledger, now / inner.slot_width).max(0.0) as u64
    }
}

impl Inner {
    fn slot<'a>(&self, ledger: &'a mut Ledger, index: u64) -> &'a mut Slot {
        let slot = &mut ledger.slots[(index % RING as u64) as usize];
        if slot.index != index {
            *slot = Slot { index, deposits: 0.0, withdrawals: 0 };
        }
        slot
    }

    /// Moves every stripe's deposits into the slots.
    fn fold(&self, ledger: &mut Ledger, now: u64) {
        for stripe in &self.stripes {
            self.fold_stripe(ledger, stripe, now);
        }
    }

    /// Moves one stripe's deposits into the slot of the first of them: a
    /// deposit is never counted as younger than it is, so the budget errs
    /// on the side of fewer retries; deposits older than the window are
    /// dropped.
    fn fold_stripe(&self, ledger: &mut Ledger, stripe: &Stripe, now: u64) {
        let since = stripe.since.swap(0, Ordering::Relaxed);
        let pending = stripe.pending.swap(0, Ordering::Relaxed);
        if pending == 0 {
            return;
        }
        let at = if since == 0 { now } else { since.min(now) } / self.slot_width;
        if at + SLOTS as u64 > now / self.slot_width {
            self.slot(ledger, at).deposits += pending as f64;
        }
    }

    /// Deposits count for the last `SLOTS` slots (up to one slot less than
    /// `ttl`), withdrawals for one slot more (at least a whole `ttl`): both
    /// round towards fewer retries.
    fn balance(&self, ledger: &Ledger, current: u64) -> f64 {
        let live = |s: &&Slot, span: u64| s.index + span > current && s.index <= current;
        let deposits: f64 = ledger.slots.iter().filter(|s| live(s, SLOTS as u64)).map(|s| s.deposits).sum();
        let withdrawals: u64 =
            ledger.slots.iter().filter(|s| live(s, RING as u64)).map(|s| u64::from(s.withdrawals)).sum();
        let reserve = f64::from(self.config.min_per_second) * self.config.ttl.as_secs_f64();
        self.config.ratio * deposits + reserve - withdrawals as f64
    }
}

#[cfg(test)]
mod tests;
