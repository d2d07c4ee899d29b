//! The simulator's wall clock: the Unix timestamps a provider writes into
//! its records (`created`) and signs into its webhooks, and the time its
//! tests check those signatures at. It stands for a
//! remote provider, whose clock failwell does not control. Every other time
//! of the simulator (rate limits, key lifetimes, webhook delays) is
//! `tokio::time::Instant`, which paused test time controls.

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock, now.
#[allow(clippy::disallowed_methods)]
pub(crate) fn wall() -> SystemTime {
    SystemTime::now()
}

/// Seconds since the Unix epoch, now (0 when the system's clock is set
/// before 1970).
pub(crate) fn unix_secs() -> u64 {
    wall().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
