//! One timeout model: the deadline of a whole call across all its attempts,
//! and the timeouts of one attempt.
//!
//! A [`Deadline`] is an instant on tokio's clock. Each attempt gets
//! `min(attempt timeout, time left)`; an attempt is not started, and a
//! backoff or `Retry-After` is not waited for, when the time left cannot fit
//! it: the caller gets [`DeadlineExceeded`] saying what did not fit.
//!
//! The deadline travels with the call as a task-local value (set by
//! [`Deadline::scope`], read by [`Deadline::current`]), so the layers of a
//! policy stack and the code they call all see the same one, and a nested
//! deadline can only shorten an outer one.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    static CURRENT: Deadline;
}

/// The instant by which a call must be over; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline {
    at: Instant,
}

/// What did not fit in the time left.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("deadline exceeded: {}", describe(self))]
pub struct DeadlineExceeded {
    /// `"an attempt"`, `"the attempt in flight"`, `"the backoff before a
    /// retry"`, `"the provider's Retry-After"` or `"the wait for a bulkhead
    /// permit"`.
    pub what: &'static str,
    /// The time it would have needed (zero when any time at all would do).
    pub needed: Duration,
    /// The time that was left.
    pub left: Duration,
}

impl DeadlineExceeded {
    /// No time was left at all for `what` (a wait or an attempt that ran
    /// into the deadline).
    pub fn no_time_for(what: &'static str) -> Self {
        Self { what, needed: Duration::ZERO, left: Duration::ZERO }
    }
}

fn describe(e: &DeadlineExceeded) -> String {
    if e.needed.is_zero() {
        format!("no time left for {}", e.what)
    } else {
        format!("{} needs {} ms but {} ms are left", e.what, e.needed.as_millis(), e.left.as_millis())
    }
}

impl Deadline {
    /// The deadline `budget` from now (saturating far in the future).
    pub fn after(budget: Duration) -> Self {
        Self::after_from(Instant::now(), budget)
    }

    /// The deadline `budget` after `now` (saturating far in the future), for
    /// callers that have already read the clock.
    #[inline]
    pub(crate) fn after_from(now: Instant, budget: Duration) -> Self {
        Self { at: now.checked_add(budget).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400)) }
    }

    /// The deadline at `at`.
    pub fn at(at: Instant) -> Self {
        Self { at }
    }

    /// The instant.
    pub fn instant(&self) -> Instant {
        self.at
    }

    /// Time left (zero once passed).
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// The deadline of the running task, if one was set with [`scope`](Self::scope).
    #[inline]
    pub fn current() -> Option<Self> {
        CURRENT.try_with(|d| *d).ok()
    }

    /// This deadline or the current one, whichever is earlier.
    #[inline]
    pub fn within_current(self) -> Self {
        Self::current().map_or(self, |outer| outer.min(self))
    }

    /// Runs `future` with this deadline as the current one.
    pub fn scope<F: Future>(self, future: F) -> tokio::task::futures::TaskLocalFuture<Self, F> {
        CURRENT.scope(self, future)
    }

    /// Runs `f` with this deadline as the current one (for the synchronous
    /// part of a call, such as building its future).
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self, f)
    }

    /// Runs `future` to its end, or until `deadline` passes (no deadline:
    /// to its end); `what` names the wait in the error.
    pub async fn bound<F: Future>(
        deadline: Option<Self>,
        what: &'static str,
        future: F,
    ) -> Result<F::Output, DeadlineExceeded> {
        match deadline {
            Some(d) => {
                tokio::time::timeout_at(d.at, future).await.map_err(|_| DeadlineExceeded::no_time_for(what))
            }
            None => Ok(future.await),
        }
    }

    /// `Ok(time left)` when an attempt may start (some time is left), else
    /// the error saying so.
    pub fn check_attempt(&self) -> Result<Duration, DeadlineExceeded> {
        self.check_attempt_at(Instant::now())
    }

    /// [`check_attempt`](Self::check_attempt) as of `now`.
    #[inline]
    pub(crate) fn check_attempt_at(&self, now: Instant) -> Result<Duration, DeadlineExceeded> {
        let left = self.at.saturating_duration_since(now);
        if left.is_zero() {
            Err(DeadlineExceeded { what: "an attempt", needed: Duration::ZERO, left })
        } else {
            Ok(left)
        }
    }

    /// `Ok(())` when a wait of `wait` still leaves time for an attempt
    /// after it, else the error naming `what` the wait is.
    pub fn check_wait(&self, wait: Duration, what: &'static str) -> Result<(), DeadlineExceeded> {
        let left = self.remaining();
        if wait >= left { Err(DeadlineExceeded { what, needed: wait, left }) } else { Ok(()) }
    }
}

/// The timeouts of one HTTP attempt. `total` covers everything from sending
/// the request to the last byte of the body; the others bound its phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Establishing the connection (TCP and TLS).
    pub connect: Duration,
    /// From sending the request to the response headers.
    pub headers: Duration,
    /// The longest pause between two chunks of the body.
    pub body_idle: Duration,
    /// The whole attempt, body included.
    pub total: Duration,
}

/// Invalid timeouts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeoutsError {
    /// A timeout of zero.
    #[error("{0} must be greater than 0 ms")]
    Zero(&'static str),
    /// A phase longer than the whole attempt.
    #[error("{phase} ({phase_ms} ms) must not exceed total ({total_ms} ms)")]
    LongerThanTotal {
        /// `headers` or `body_idle`.
        phase: &'static str,
        /// Its value, in ms.
        phase_ms: u128,
        /// `total`, in ms.
        total_ms: u128,
    },
}

impl Timeouts {
    /// Checks that every timeout is positive and no phase exceeds `total`.
    pub fn validate(&self) -> Result<(), TimeoutsError> {
        for (name, t) in [
            ("connect", self.connect),
            ("headers", self.headers),
            ("body_idle", self.body_idle),
            ("total", self.total),
        ] {
            if t.is_zero() {
                return Err(TimeoutsError::Zero(name));
            }
        }
        for (phase, t) in [("headers", self.headers), ("body_idle", self.body_idle)] {
            if t > self.total {
                return Err(TimeoutsError::LongerThanTotal {
                    phase,
                    phase_ms: t.as_millis(),
                    total_ms: self.total.as_millis(),
                });
            }
        }
        Ok(())
    }

    /// The total for the next attempt: `min(total, time left)` under
    /// `deadline`, or the error when no time is left.
    pub fn attempt(&self, deadline: Option<Deadline>) -> Result<Duration, DeadlineExceeded> {
        match deadline {
            Some(d) => d.check_attempt().map(|left| left.min(self.total)),
            None => Ok(self.total),
        }
    }
}

#[cfg(test)]
mod tests;
