//! The simulator's rate-limit mode: requests over N per second get `429`
//! with `Retry-After`, as a real provider's limiter answers them.
//!
//! One token bucket per key (GCRA-equivalent; Stripe, GitHub and most
//! payment APIs limit this way): it holds one second of requests, refills
//! at `per_second`, and a request that finds it empty is refused with the
//! whole seconds until a token is back (at least 1). The key is the whole
//! simulator ([`RateScope::Global`]) or the value of a request header
//! ([`RateScope::Header`], e.g. one bucket per API key or account); requests
//! without the header share one bucket. This file only decides; the
//! handlers answer.

use std::collections::HashMap;
use std::sync::Mutex;
use tokio::time::Instant;

/// A rate limit of the simulator (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests allowed per second (and per key), ≥ 1.
    pub per_second: u32,
    /// What one bucket covers.
    pub scope: RateScope,
}

/// What one bucket of a [`RateLimit`] covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RateScope {
    /// Every request to the simulator.
    Global,
    /// Requests with the same value of this header (lowercase name).
    Header(String),
}

/// Token buckets by key.
#[derive(Debug)]
pub(crate) struct Limiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Limiter {
    pub(crate) fn new(limit: RateLimit) -> Self {
        Self { limit, buckets: Mutex::new(HashMap::new()) }
    }

    /// The header naming a request's bucket, if buckets are per header.
    pub(crate) fn header(&self) -> Option<&str> {
        match &self.limit.scope {
            RateScope::Global => None,
            RateScope::Header(name) => Some(name),
        }
    }

    /// Takes a token from `key`'s bucket at `now`: `Err(retry_after)` in
    /// whole seconds (≥ 1) when it is empty.
    pub(crate) fn admit(&self, key: &str, now: Instant) -> Result<(), u64> {
        let rate = f64::from(self.limit.per_second.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = buckets.entry(key.to_owned()).or_insert(Bucket { tokens: rate, at: now });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        Err(((1.0 - bucket.tokens) / rate).ceil().max(1.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_bucket_holds_one_second_and_refills_at_the_rate() {
        let limiter = Limiter::new(RateLimit { per_second: 10, scope: RateScope::Global });
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(limiter.admit("", t0), Ok(()));
        }
        assert_eq!(limiter.admit("", t0), Err(1));
        // A tenth of a second brings one token back.
        assert_eq!(limiter.admit("", t0 + Duration::from_millis(100)), Ok(()));
        assert_eq!(limiter.admit("", t0 + Duration::from_millis(100)), Err(1));
        // Keys have buckets of their own.
        assert_eq!(limiter.admit("acct_2", t0), Ok(()));
    }

    #[test]
    fn retry_after_is_whole_seconds_until_a_token() {
        let limiter =
            Limiter::new(RateLimit { per_second: 1, scope: RateScope::Header("authorization".into()) });
        assert_eq!(limiter.header(), Some("authorization"));
        let t0 = Instant::now();
        assert_eq!(limiter.admit("k", t0), Ok(()));
        assert_eq!(limiter.admit("k", t0 + Duration::from_millis(10)), Err(1));
        assert_eq!(limiter.admit("k", t0 + Duration::from_millis(1000)), Ok(()));
    }
}
