//! The engine's clock reads: wall time as milliseconds since the Unix epoch
//! (what the store keeps and compares) and wall time as a `SystemTime`
//! (HTTP dates, signed timestamps). Outside `failwell_policy::clock`, every read of the
//! system's clocks in the engine and in the `failwell` binary goes through
//! here (`clippy.toml` refuses `SystemTime::now` and
//! `std::time::Instant::now` elsewhere); timeouts, waits and the
//! age of values kept in memory use `tokio::time::Instant`, which paused
//! test time controls.

use std::time::UNIX_EPOCH;

pub use failwell_policy::clock::wall;

/// Milliseconds since the Unix epoch: what the store keeps (0 when the
/// system's clock is set before 1970).
pub fn now_ms() -> i64 {
    wall().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
