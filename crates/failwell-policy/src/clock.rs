//! failwell's clocks: tokio's monotonic time for the stateful policies,
//! read only where a decision needs it, and the wall clock ([`wall`]) for
//! what is dated in wall time. This module and `failwell_engine::clock`
//! are where the system's clocks are read (`clippy.toml` refuses
//! `SystemTime::now` and `std::time::Instant::now` elsewhere).
//!
//! [`Clock`] counts nanoseconds since its creation as a `u64` (enough for
//! 584 years), so timestamps fit in atomics. It reads
//! [`tokio::time::Instant`], which a test can pause and advance
//! (`tokio::time::pause`, `#[tokio::test(start_paused = true)]`); outside a
//! runtime it is the system's monotonic clock. One read costs about 20–25 ns,
//! which is why the success paths of the breaker avoid it.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// A monotonic clock with a fixed origin; see the module docs.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self { origin: Instant::now() }
    }

    /// Nanoseconds since the origin, plus one: never 0 (0 marks "not
    /// timed" in packed timestamps), and the difference of two readings is
    /// exactly the time between them, even from the origin itself.
    pub fn now(&self) -> u64 {
        nanos(self.origin.elapsed()).saturating_add(1)
    }

    /// The instant of the reading `at` (as returned by [`now`](Self::now)).
    pub fn instant(&self, at: u64) -> Instant {
        self.origin + Duration::from_nanos(at.saturating_sub(1))
    }
}

/// The wall clock, now: for what is dated in wall time, such as an
/// HTTP-date `Retry-After` ([`crate::parse_retry_after`] takes it as its
/// `now`) or a signed webhook timestamp. It can jump (NTP, an operator):
/// measure durations with [`Clock`] or `tokio::time::Instant` instead.
#[allow(clippy::disallowed_methods)]
pub fn wall() -> SystemTime {
    SystemTime::now()
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
