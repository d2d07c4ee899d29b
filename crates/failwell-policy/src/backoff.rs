//! Exponential backoff with a cap and jitter.
//!
//! The formulas are those of the AWS Architecture Blog post "Exponential
//! Backoff and Jitter" (Marc Brooker, 2015). Only the delay is computed here;
//! sleeping or scheduling is the caller's business.

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
}

/// Exponential backoff: attempt `n` (0-based count of retries so far) waits
/// around `base * 2^n`, never more than `cap`, spread by [`Jitter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    jitter: Jitter,
}

impl Backoff {
    /// Validates and builds a backoff. Errors when `base` is zero or `cap < base`.
    pub fn try_new(base: Duration, cap: Duration, jitter: Jitter) -> Result<Self, BackoffError> {
        if base.is_zero() {
            return Err(BackoffError::ZeroBase);
        }
        if cap < base {
            return Err(BackoffError::CapBelowBase { base_ms: base.as_millis(), cap_ms: cap.as_millis() });
        }
        Ok(Self { base, cap, jitter })
    }

    /// The un-jittered ceiling for retry `n`: `min(cap, base * 2^n)`, computed
    /// without overflow for any `n`.
    pub fn ceiling(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX);
        self.base.checked_mul(factor).map_or(self.cap, |d| d.min(self.cap))
    }

    /// The delay before retry `n` (0 for the first retry). `previous` is the
    /// delay used before retry `n - 1` (only decorrelated jitter reads it;
    /// pass `Duration::ZERO` for the first retry). Never negative, never above
    /// `cap`.
    pub fn delay(&self, n: u32, previous: Duration, rng: &mut impl Rng) -> Duration {
        let ceiling = self.ceiling(n);
        match self.jitter {
            Jitter::None => ceiling,
            Jitter::Full => uniform(Duration::ZERO, ceiling, rng),
            Jitter::Equal => {
                let half = ceiling / 2;
                half + uniform(Duration::ZERO, ceiling - half, rng)
            }
            Jitter::Decorrelated => {
                let upper = previous.max(self.base).saturating_mul(3).min(self.cap);
                uniform(self.base, upper, rng)
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
