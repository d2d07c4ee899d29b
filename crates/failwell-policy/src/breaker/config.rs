//! A breaker's rules ([`BreakerConfig`]) and how they are checked.

use std::time::Duration;

/// The window failure and slow-call rates are computed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlidingWindow {
    /// The last N recorded calls (Resilience4j `COUNT_BASED`).
    Count(u32),
    /// The calls recorded in the last T, in ten buckets of T/10
    /// (Resilience4j `TIME_BASED`).
    Time(Duration),
}

/// A breaker's rules. Every field is public; [`CircuitBreaker::new`]
/// validates them.
#[derive(Clone, Debug, PartialEq)]
pub struct BreakerConfig {
    /// Open after this many failures in a row (`None`: no such rule).
    /// Default none: with many calls in flight, failures that started
    /// together end together, so a run of them says less than a rate.
    pub consecutive_failures: Option<u32>,
    /// Open when failures / calls over the window reach this ratio, in
    /// (0, 1] (`None`: no such rule). Default 0.5.
    pub failure_rate: Option<f64>,
    /// A call slower than this is slow (`None`: durations are not measured).
    /// Default none.
    pub slow_call_duration: Option<Duration>,
    /// Open when slow calls / calls over the window reach this ratio, in
    /// (0, 1]; needs `slow_call_duration`. Default none.
    pub slow_call_rate: Option<f64>,
    /// The window of the rate rules. Default the last 50 calls.
    pub window: SlidingWindow,
    /// The rate rules apply once the window holds this many calls. Default 20.
    pub minimum_calls: u32,
    /// How long the breaker stays open after its first trip. Default 10 s.
    pub open_for: Duration,
    /// The open period is multiplied by this on each trip in a row (a probe
    /// that fails), ≥ 1. Default 2.
    pub open_multiplier: f64,
    /// The longest open period. Default 5 min.
    pub max_open_for: Duration,
    /// Calls let through while half-open; all must succeed to close. 1–1000.
    /// Default 1.
    pub half_open_probes: u32,
    /// A probe with no result after this counts as failed. Default 10 s.
    pub probe_timeout: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            consecutive_failures: None,
            failure_rate: Some(0.5),
            slow_call_duration: None,
            slow_call_rate: None,
            window: SlidingWindow::Count(50),
            minimum_calls: 20,
            open_for: Duration::from_secs(10),
            open_multiplier: 2.0,
            max_open_for: Duration::from_secs(300),
            half_open_probes: 1,
            probe_timeout: Duration::from_secs(10),
        }
    }
}

/// Invalid breaker rules; the message names the field.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BreakerConfigError {
    /// No rule could ever open the breaker.
    #[error("no trip rule: set consecutive_failures, failure_rate or slow_call_rate")]
    NoRule,
    /// A count of zero where at least one is needed.
    #[error("{field} must be at least 1")]
    Zero {
        /// The field.
        field: &'static str,
    },
    /// A ratio outside (0, 1].
    #[error("{field} must be in (0, 1], got {value}")]
    Ratio {
        /// The field.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// `slow_call_rate` without `slow_call_duration`.
    #[error("slow_call_rate needs slow_call_duration")]
    SlowRateWithoutDuration,
    /// Any other out-of-range value.
    #[error("{field}: {problem}")]
    Range {
        /// The field.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

impl BreakerConfig {
    /// Checks the rules; see [`BreakerConfigError`].
    pub fn validate(&self) -> Result<(), BreakerConfigError> {
        if self.consecutive_failures.is_none() && self.failure_rate.is_none() && self.slow_call_rate.is_none()
        {
            return Err(BreakerConfigError::NoRule);
        }
        if self.consecutive_failures == Some(0) {
            return Err(BreakerConfigError::Zero { field: "consecutive_failures" });
        }
        for (field, rate) in [("failure_rate", self.failure_rate), ("slow_call_rate", self.slow_call_rate)] {
            if let Some(value) = rate
                && !(value > 0.0 && value <= 1.0)
            {
                return Err(BreakerConfigError::Ratio { field, value });
            }
        }
        if self.slow_call_rate.is_some() && self.slow_call_duration.is_none() {
            return Err(BreakerConfigError::SlowRateWithoutDuration);
        }
        match self.window {
            SlidingWindow::Count(0) => return Err(BreakerConfigError::Zero { field: "window" }),
            SlidingWindow::Count(n) if n > 100_000 => {
                return Err(BreakerConfigError::Range {
                    field: "window",
                    problem: format!("{n} calls is more than 100000"),
                });
            }
            SlidingWindow::Time(t) if t < Duration::from_millis(10) => {
                return Err(BreakerConfigError::Range {
                    field: "window",
                    problem: format!("{} ms is shorter than 10 ms", t.as_millis()),
                });
            }
            _ => {}
        }
        if self.minimum_calls == 0 {
            return Err(BreakerConfigError::Zero { field: "minimum_calls" });
        }
        if let SlidingWindow::Count(n) = self.window
            && self.minimum_calls > n
            && (self.failure_rate.is_some() || self.slow_call_rate.is_some())
        {
            return Err(BreakerConfigError::Range {
                field: "minimum_calls",
                problem: format!(
                    "{} exceeds the window of {n} calls: the rates could never apply",
                    self.minimum_calls
                ),
            });
        }
        if self.open_for.is_zero() {
            return Err(BreakerConfigError::Range {
                field: "open_for",
                problem: "must be greater than 0".into(),
            });
        }
        if !(self.open_multiplier >= 1.0 && self.open_multiplier.is_finite()) {
            return Err(BreakerConfigError::Range {
                field: "open_multiplier",
                problem: format!("must be a finite number ≥ 1, got {}", self.open_multiplier),
            });
        }
        if self.max_open_for < self.open_for {
            return Err(BreakerConfigError::Range {
                field: "max_open_for",
                problem: "must not be below the first open period".into(),
            });
        }
        if self.half_open_probes == 0 || self.half_open_probes > MAX_PROBES {
            return Err(BreakerConfigError::Range {
                field: "half_open_probes",
                problem: format!("must be between 1 and {MAX_PROBES}"),
            });
        }
        if self.probe_timeout.is_zero() {
            return Err(BreakerConfigError::Range {
                field: "probe_timeout",
                problem: "must be greater than 0".into(),
            });
        }
        Ok(())
    }

    /// The open period after `trips` trips in a row (≥ 1):
    /// `min(max_open_for, open_for * open_multiplier^(trips - 1))`.
    pub fn open_period(&self, trips: u32) -> Duration {
        let factor = self.open_multiplier.powi(trips.saturating_sub(1).min(1_000) as i32);
        Duration::try_from_secs_f64(self.open_for.as_secs_f64() * factor)
            .map_or(self.max_open_for, |d| d.min(self.max_open_for))
    }
}

pub(super) const MAX_PROBES: u32 = 1000;
