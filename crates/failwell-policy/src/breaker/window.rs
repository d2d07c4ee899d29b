//! The sliding windows a breaker computes its failure and slow-call rates
//! over: the last N calls, or the calls of the last T.
//!
//! These are the two window kinds of Resilience4j's CircuitBreaker
//! (`COUNT_BASED` and `TIME_BASED`). The count window is a ring of the last
//! N outcomes with running totals; the time window is ten buckets of T/10
//! each, so an outcome leaves the window between 0.9 T and T after it was
//! recorded.

/// An outcome flag: the call failed in a way attributable to the provider.
pub(super) const FAILED: u8 = 1;
/// An outcome flag: the call took longer than the slow-call threshold.
pub(super) const SLOW: u8 = 2;

const BUCKETS: usize = 10;

/// Calls, failures and slow calls currently in a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Totals {
    pub(super) calls: u32,
    pub(super) failures: u32,
    pub(super) slow: u32,
}

/// One of the two windows (or none, when only consecutive failures count).
#[derive(Debug)]
pub(super) enum Window {
    None,
    Count(CountWindow),
    Time(TimeWindow),
}

impl Window {
    /// Records an outcome (`FAILED` / `SLOW` flags) at `now` (ns).
    pub(super) fn push(&mut self, flags: u8, now: u64) {
        match self {
            Self::None => {}
            Self::Count(w) => w.push(flags),
            Self::Time(w) => w.push(flags, now),
        }
    }

    /// The window's contents at `now` (ns).
    pub(super) fn totals(&mut self, now: u64) -> Totals {
        match self {
            Self::None => Totals::default(),
            Self::Count(w) => w.totals,
            Self::Time(w) => w.totals(now),
        }
    }

    /// Forgets every outcome (on each state change).
    pub(super) fn reset(&mut self) {
        match self {
            Self::None => {}
            Self::Count(w) => {
                w.len = 0;
                w.head = 0;
                w.totals = Totals::default();
            }
            Self::Time(w) => w.buckets.iter_mut().for_each(|b| *b = Bucket::default()),
        }
    }

    /// Whether one more success would leave the window unchanged: a full
    /// count window holding only fast successes (its oldest entry, a fast
    /// success, would be replaced by another).
    pub(super) fn is_saturated_clean(&self) -> bool {
        match self {
            Self::Count(w) => w.len == w.slots.len() && w.totals.failures == 0 && w.totals.slow == 0,
            Self::None | Self::Time(_) => false,
        }
    }
}

/// The last `slots.len()` outcomes.
#[derive(Debug)]
pub(super) struct CountWindow {
    slots: Box<[u8]>,
    head: usize,
    len: usize,
    totals: Totals,
}

impl CountWindow {
    pub(super) fn new(size: u32) -> Self {
        Self { slots: vec![0; size as usize].into_boxed_slice(), head: 0, len: 0, totals: Totals::default() }
    }

    fn push(&mut self, flags: u8) {
        if self.len == self.slots.len() {
            let old = self.slots[self.head];
            self.totals.calls -= 1;
            self.totals.failures -= u32::from(old & FAILED != 0);
            self.totals.slow -= u32::from(old & SLOW != 0);
        } else {
            self.len += 1;
        }
        self.slots[self.head] = flags;
        self.head = (self.head + 1) % self.slots.len();
        self.totals.calls += 1;
        self.totals.failures += u32::from(flags & FAILED != 0);
        self.totals.slow += u32::from(flags & SLOW != 0);
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// Which bucket-width interval since the clock's origin this holds.
    index: u64,
    totals: Totals,
}

/// The outcomes of the last `BUCKETS * width` nanoseconds.
#[derive(Debug)]
pub(super) struct TimeWindow {
    width: u64,
    buckets: [Bucket; BUCKETS],
}

impl TimeWindow {
    /// A window of `span_ns` nanoseconds (≥ 10).
    pub(super) fn new(span_ns: u64) -> Self {
        Self { width: (span_ns / BUCKETS as u64).max(1), buckets: [Bucket::default(); BUCKETS] }
    }

    fn push(&mut self, flags: u8, now: u64) {
        let index = now / self.width;
        let bucket = &mut self.buckets[(index % BUCKETS as u64) as usize];
        if bucket.index != index {
            *bucket = Bucket { index, totals: Totals::default() };
        }
        bucket.totals.calls += 1;
        bucket.totals.failures += u32::from(flags & FAILED != 0);
        bucket.totals.slow += u32::from(flags & SLOW != 0);
    }

    fn totals(&self, now: u64) -> Totals {
        let current = now / self.width;
        self.buckets.iter().filter(|b| b.index + (BUCKETS as u64) > current && b.index <= current).fold(
            Totals::default(),
            |acc, b| Totals {
                calls: acc.calls + b.totals.calls,
                failures: acc.failures + b.totals.failures,
                slow: acc.slow + b.totals.slow,
            },
        )
    }
}
