//! The engine's clock reads: wall time as milliseconds since the Unix epoch
//! (what the store keeps and compares), wall time as a `SystemTime` (HTTP
//! dates, signed timestamps) and a monotonic reading for the age of a value
//! kept in memory. Outside `failwell_policy::clock`, every read of the
//! system's clocks in the engine and in the `failwell` binary goes through
//! here (`clippy.toml` refuses `SystemTime::now` and
//! `std::time::Instant::now` elsewhere); timeouts and waits use
//! `tokio::time::Instant`, which paused test time controls.

use std::time::{Instant, UNIX_EPOCH};

pub use failwell_policy::clock::wall;

/// Milliseconds since the Unix epoch: what the store keeps (0 when the
/// system's clock is set before 1970).
pub fn now_ms() -> i64 {
    wall().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// `std`'s monotonic clock, now: for the age of a value kept in memory
/// (`Instant::elapsed`). Code that also waits (`tokio::time::sleep`) reads
/// `tokio::time::Instant` instead, so paused test time moves both.
#[allow(clippy::disallowed_methods)]
pub fn monotonic() -> Instant {
    Instant::now()
}
