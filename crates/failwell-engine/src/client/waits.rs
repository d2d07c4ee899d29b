//! How long work waits for a provider that cannot take it now: its
//! breaker open or paused, its adaptive rate booked ahead, its bulkhead
//! full, or a call that just failed.

use std::time::Duration;

use failwell_policy::{BreakerState, Rejected, Throttle};
use rand::Rng;

use super::ProviderClient;

impl ProviderClient {
    /// Whether the provider is unavailable right now: its breaker refusing
    /// calls (open, forced open, or half-open with every probe slot taken),
    /// its adaptive rate booked further ahead than a call may wait, or its
    /// bulkhead unable to take even a waiting call (every permit held and
    /// every waiting place taken). `Some(wait)` says when to try again:
    /// until the breaker's next probe (a second when it gives none), until
    /// the rate has a turn, or a second for a full bulkhead. Only reads
    /// state: takes no permit or turn, changes and counts nothing
    /// ([`failwell_policy::CircuitBreaker::peek`]).
    pub fn unavailable(&self) -> Option<Duration> {
        if let Some(breaker) = &self.guards.breaker
            && let Some(retry_in) = breaker.peek()
        {
            return Some(retry_in.unwrap_or(NO_PROBE_TIME));
        }
        if let Some(wait) = self.guards.throttle.as_ref().and_then(Throttle::busy_for) {
            return Some(wait);
        }
        let bulkhead = &self.guards.bulkhead;
        let config = bulkhead.config();
        (bulkhead.in_flight() >= config.max_concurrent && bulkhead.waiting() >= config.max_waiting)
            .then_some(Duration::from_secs(1))
    }

    /// How long a call or lookup the policy did not let out (open breaker,
    /// full bulkhead, no turn of the adaptive rate) waits before it is
    /// tried again: until the breaker's next probe (a second when it gives
    /// none: forced open, or every probe slot taken), the bulkhead's wait
    /// (at least 50 ms), or until the rate has a turn for it. The wait is
    /// spread by up to its own length (at most a second more), so deferred
    /// work does not all come due at once, and which of it carries the next
    /// half-open probe is left to chance. `None` for a rejection that cut a
    /// call short after it may have been sent.
    pub fn wait_after(&self, rejected: &Rejected) -> Option<Duration> {
        let wait = match rejected {
            Rejected::BreakerOpen(open) => open.retry_in.unwrap_or(NO_PROBE_TIME),
            Rejected::BulkheadFull(_) => self.spec().bulkhead.max_wait.max(Duration::from_millis(50)),
            Rejected::Throttled(throttled) => throttled.retry_in,
            Rejected::DeadlineExceeded(_) | Rejected::TimedOut(_) => return None,
        };
        Some(spread(wait))
    }

    /// How long a retry waits after a call that failed, given its
    /// backoff `delay`: the backoff, or longer while the breaker refuses
    /// calls (open, paused, every probe slot taken): until its next probe
    /// ([`NO_PROBE_TIME`] when it gives none), and while it is open or
    /// half-open at least twice that, spread as in
    /// [`wait_after`](Self::wait_after).
    ///
    /// A failed half-open probe's message would otherwise come due again
    /// before the messages deferred while the probe was out (they wait
    /// [`NO_PROBE_TIME`] spread, so at most twice it) and carry each next
    /// probe until its attempts ran out: one message dead-lettered by an
    /// outage the others wait out. In a cluster this process's view is
    /// still half-open right after its probe failed.
    pub fn retry_wait(&self, delay: Duration) -> Duration {
        let Some(breaker) = &self.guards.breaker else { return delay };
        let Some(retry_in) = breaker.peek() else { return delay };
        let mut wait = retry_in.unwrap_or(NO_PROBE_TIME);
        if matches!(breaker.state(), BreakerState::Open | BreakerState::HalfOpen) {
            wait = wait.max(2 * NO_PROBE_TIME);
        }
        spread(wait).max(delay)
    }
}

/// How long work waits for a breaker that gives no time for its next
/// probe (forced open, or every probe slot taken).
const NO_PROBE_TIME: Duration = Duration::from_secs(1);

/// `wait` plus a random share of up to its own length (at most a second
/// more), so work put back together does not all come due at once.
fn spread(wait: Duration) -> Duration {
    wait + rand::rng().random_range(Duration::ZERO..=wait.min(Duration::from_secs(1)))
}
