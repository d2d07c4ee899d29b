//! Backoff between attempts: exponential with a cap and jitter, or a fixed
//! schedule.
//!
//! The exponential formulas are those of the AWS Architecture Blog post
//! "Exponential Backoff and Jitter" (Marc Brooker, 2015). A fixed schedule
//! (e.g. 10 s, 30 s, 60 s, 300 s) suits queued work whose retries are spread
//! over minutes anyway: retry `n` waits `schedule[min(n, len - 1)]`, so the
//! last entry repeats. Only the delay is computed here; sleeping or
//! scheduling is the caller's business.

use std::time::Duration;

use rand::Rng;
use serde::Deserialize;

/// How randomness spreads the delays of many clients retrying at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// No jitter: `min(cap, base * 2^n)`. Only for tests and single clients.
    None,
    /// Full jitter: `random(0, min(cap, base * 2^n))`. The default.
    Full,
    /// Equal jitter: `t/2 + random(0, t/2)` with `t = min(cap, base * 2^n)`.
    Equal,
    /// Decorrelated jitter: `min(cap, random(base, previous * 3))`.
    Decorrelated,
}

/// Invalid backoff parameters.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BackoffError {
    /// `base` was zero.
    #[error("base must be greater than 0 ms")]
    ZeroBase,
    /// `cap` was below `base`.
    #[error("cap ({cap_ms} ms) must not be below base ({base_ms} ms)")]
    CapBelowBase {
        /// The base, in ms.
        base_ms: u128,
        /// The cap, in ms.
        cap_ms: u128,
    },
    /// A fixed schedule had no entries.
    #[error("the schedule must have at least one delay")]
    EmptySchedule,
    /// A fixed schedule had a zero delay.
    #[error("schedule entry {index} must be greater than 0 ms")]
    ZeroInSchedule {
        /// Position of the zero entry (0-based).
        index: usize,
    },
}

/// The delay before retry `n` (0-based count of retries so far), one of two
/// shapes:
///
/// - exponential ([`Backoff::try_new`]): around `base * 2^n`, never more than
///   `cap`, spread by [`Jitter`];
/// - a fixed schedule ([`Backoff::schedule`]): exactly
///   `schedule[min(n, len - 1)]`, no jitter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    shape: Shape,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Shape {
    Exponential { base: Duration, cap: Duration, jitter: Jitter },
    Schedule(Vec<Duration>),
}

impl Backoff {
    /// Validates and builds an exponential backoff with `base` (the delay
    /// before the first retry, before jitter), `cap` (the largest delay) and
    /// `jitter`. Errors when `base` is zero or `cap < base`.
    pub fn try_new(base: Duration, cap: Duration, jitter: Jitter) -> Result<Self, BackoffError> {
        if base.is_zero() {
            return Err(BackoffError::ZeroBase);
        }
        if cap < base {
            return Err(BackoffError::CapBelowBase { base_ms: base.as_millis(), cap_ms: cap.as_millis() });
        }
        Ok(Self { shape: Shape::Exponential { base, cap, jitter } })
    }

    /// Validates and builds a fixed schedule for queued work, e.g. 10 s,
    /// 30 s, 60 s, 300 s: retry `n` waits `delays[min(n, len - 1)]`, so the
    /// last entry repeats for every later retry. Errors when `delays` is empty
    /// or holds a zero delay.
    pub fn schedule(delays: Vec<Duration>) -> Result<Self, BackoffError> {
        if delays.is_empty() {
            return Err(BackoffError::EmptySchedule);
        }
        if let Some(index) = delays.iter().position(Duration::is_zero) {
            return Err(BackoffError::ZeroInSchedule { index });
        }
        Ok(Self { shape: Shape::Schedule(delays) })
    }

    /// The un-jittered ceiling for retry `n`: `min(cap, base * 2^n)` for an
    /// exponential backoff, computed without overflow for any `n`;
    /// `schedule[min(n, len - 1)]` for a fixed schedule.
    pub fn ceiling(&self, n: u32) -> Duration {
        match &self.shape {
            Shape::Exponential { base, cap, .. } => {
                let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
                base.checked_mul(factor).map_or(*cap, |d| d.min(*cap))
            }
            Shape::Schedule(delays) => {
                let last = delays.len() - 1;
                delays[usize::try_from(n).map_or(last, |n| n.min(last))]
            }
        }
    }

    /// The delay before retry `n` (0 for the first retry). `previous` is the
    /// delay used before retry `n - 1` (only decorrelated jitter reads it;
    /// pass `Duration::ZERO` for the first retry). For an exponential
    /// backoff the delay is never negative and never above `cap`; for a fixed
    /// schedule it is exactly [`Backoff::ceiling`]`(n)` and `rng` is unused.
    pub fn delay(&self, n: u32, previous: Duration, rng: &mut impl Rng) -> Duration {
        let ceiling = self.ceiling(n);
        let Shape::Exponential { base, cap, jitter } = &self.shape else {
            return ceiling;
        };
        match jitter {
            Jitter::None => ceiling,
            Jitter::Full => uniform(Duration::ZERO, ceiling, rng),
            Jitter::Equal => {
                let half = ceiling / 2;
                half + uniform(Duration::ZERO, ceiling - half, rng)
            }
            Jitter::Decorrelated => {
                let upper = previous.max(*base).saturating_mul(3).min(*cap);
                uniform(*base, upper, rng)
            }
        }
    }
}

/// A uniformly random duration in `[low, high]` at nanosecond resolution.
fn uniform(low: Duration, high: Duration, rng: &mut impl Rng) -> Duration {
    if high <= low {
        return low;
    }
    let span = (high - low).as_nanos().min(u64::MAX as u128) as u64;
    low + Duration::from_nanos(rng.random_range(0..=span))
}

#[cfg(test)]
mod tests;
