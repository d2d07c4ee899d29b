//! Simulator configuration, fault profiles and the deterministic fault schedule.
//!
//! This file owns the *contract* the demo reports rely on: which profiles exist,
//! with which probabilities they inject which faults, and how the `(fault,
//! latency)` pair of a request is derived from the seed. It deliberately does no
//! I/O and holds no state: [`planned`] is a pure function, so two simulators with
//! the same [`SimConfig`] agree on every request whatever the arrival order.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A named fault profile: how often and how badly the simulator misbehaves.
///
/// * [`Profile::Calm`]: latency uniform 1–5 ms; fault always [`Fault::Ok`]
///   (amount-based declines still apply).
/// * [`Profile::Stormy`]: latency uniform 5–40 ms, except 2 % of requests which
///   take 150–400 ms; faults per `POST /v1/charges`: [`Fault::TimeoutAfterCommit`]
///   5 %, [`Fault::ResetAfterCommit`] 3 %, [`Fault::Error500`] 2 %,
///   [`Fault::Error502`] 2 %, [`Fault::Error503`] 2 %, [`Fault::RateLimited`] 3 %,
///   otherwise (83 %) [`Fault::Ok`].
/// * [`Profile::Outage`]: every `/v1` request answers 503 during the first
///   [`SimConfig::outage`] after [`crate::Simulator::start`], then behaves like
///   calm (its schedule is drawn with the name `"outage"`, so it differs from
///   calm's draw for the same seed, with the same distribution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// No faults, 1–5 ms latency.
    Calm,
    /// 17 % faults, 5–40 ms latency with a 2 % slow tail of 150–400 ms.
    Stormy,
    /// 503 for everything during the outage window, calm afterwards.
    Outage,
}

impl Profile {
    /// All profiles, in documentation order.
    pub const ALL: [Profile; 3] = [Profile::Calm, Profile::Stormy, Profile::Outage];

    /// The lowercase name used on the command line and in the schedule hash
    /// (`"calm"`, `"stormy"` or `"outage"`).
    pub fn name(self) -> &'static str {
        match self {
            Profile::Calm => "calm",
            Profile::Stormy => "stormy",
            Profile::Outage => "outage",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of [`Profile::from_str`]: the unknown name, and the valid ones in its message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown profile {0:?}; valid profiles: calm, stormy, outage")]
pub struct UnknownProfile(pub String);

impl FromStr for Profile {
    type Err = UnknownProfile;

    /// Parses `"calm"`, `"stormy"` or `"outage"` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Profile::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownProfile(s.to_owned()))
    }
}

/// What happens to one `POST /v1/charges`, serialized in snake_case
/// (`"ok"`, `"timeout_after_commit"`, `"reset_after_commit"`, `"late_commit"`,
/// `"error_500"`, `"error_502"`, `"error_503"`, `"rate_limited"`).
///
/// Pre-commit faults (the `Error*` ones and [`Fault::RateLimited`]) happen in front
/// of the idempotency layer: nothing is stored and no charge is created.
/// Post-commit faults commit the charge and then fail to deliver the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// Processed normally.
    Ok,
    /// Committed, then the answer is delayed by [`SimConfig::hang`] (the client times out).
    TimeoutAfterCommit,
    /// Committed, then the TCP connection is reset (RST) without any response bytes.
    ResetAfterCommit,
    /// The provider works on for [`SimConfig::hang`] and only then commits and
    /// answers, even when the client has given up and disconnected meanwhile
    /// (a slow backend behind a timeout). Scripts only; no profile draws it.
    LateCommit,
    /// 500 `api_error`/`internal_error`, nothing committed.
    #[serde(rename = "error_500")]
    Error500,
    /// 502 `api_error`/`bad_gateway`, nothing committed.
    #[serde(rename = "error_502")]
    Error502,
    /// 503 `api_error`/`service_unavailable`, nothing committed.
    #[serde(rename = "error_503")]
    Error503,
    /// 429 `rate_limit_error`/`rate_limit` with `Retry-After`, nothing committed.
    RateLimited,
}

/// Configuration of one simulator. Build it with [`SimConfig::new`] and adjust fields.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Fault profile.
    pub profile: Profile,
    /// Seed of the fault schedule (see [`planned`]).
    pub seed: u64,
    /// How long an idempotency key is remembered (default 24 h); older entries are
    /// treated as absent.
    pub key_ttl: Duration,
    /// Amounts (minor units) with `amount % 100 == decline_suffix` are declined
    /// (default 2, so e.g. 1002 is declined).
    pub decline_suffix: u8,
    /// How long a [`Fault::TimeoutAfterCommit`] answer is held back (default 30 s).
    pub hang: Duration,
    /// `Retry-After` value, in whole seconds, of [`Fault::RateLimited`] answers (default 1).
    pub retry_after_secs: u64,
    /// Length of the 503 window of [`Profile::Outage`], from start (default 3 s).
    pub outage: Duration,
}

impl SimConfig {
    /// A configuration with the given profile and seed and the documented defaults:
    /// `key_ttl` 24 h, `decline_suffix` 2, `hang` 30 s, `retry_after_secs` 1, `outage` 3 s.
    pub fn new(profile: Profile, seed: u64) -> Self {
        SimConfig {
            profile,
            seed,
            key_ttl: Duration::from_secs(24 * 60 * 60),
            decline_suffix: 2,
            hang: Duration::from_secs(30),
            retry_after_secs: 1,
            outage: Duration::from_secs(3),
        }
    }
}

/// The `(fault, latency)` the profile assigns to the `n`-th (0-based)
/// `POST /v1/charges` carrying `reference`, ignoring scripts, down mode and the
/// outage window.
///
/// A pure function of `(seed, profile, reference, n)`: a [`StdRng`] is seeded with
/// the first 8 bytes (little-endian) of
/// `sha256(seed.to_le_bytes() ‖ profile name ‖ reference ‖ n.to_le_bytes())` and
/// the latency then the fault are drawn from it as documented on [`Profile`].
pub fn planned(config: &SimConfig, reference: &str, n: u64) -> (Fault, Duration) {
    let mut rng = schedule_rng(config, reference.as_bytes(), n);
    match config.profile {
        Profile::Calm | Profile::Outage => (Fault::Ok, calm_latency(&mut rng)),
        Profile::Stormy => {
            let latency = stormy_latency(&mut rng);
            let fault = match rng.random_range(0u32..100) {
                0..5 => Fault::TimeoutAfterCommit,
                5..8 => Fault::ResetAfterCommit,
                8..10 => Fault::Error500,
                10..12 => Fault::Error502,
                12..14 => Fault::Error503,
                14..17 => Fault::RateLimited,
                _ => Fault::Ok,
            };
            (fault, latency)
        }
    }
}

/// Latency of the `n`-th lookup (`GET /v1/charges...`), drawn from the profile's
/// latency distribution with the same hashing as [`planned`] (reference replaced
/// by the fixed marker `"\0lookup"`).
pub(crate) fn lookup_latency(config: &SimConfig, n: u64) -> Duration {
    let mut rng = schedule_rng(config, b"\0lookup", n);
    match config.profile {
        Profile::Calm | Profile::Outage => calm_latency(&mut rng),
        Profile::Stormy => stormy_latency(&mut rng),
    }
}

fn schedule_rng(config: &SimConfig, reference: &[u8], n: u64) -> StdRng {
    let mut hasher = Sha256::new();
    hasher.update(config.seed.to_le_bytes());
    hasher.update(config.profile.name().as_bytes());
    hasher.update(reference);
    hasher.update(n.to_le_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    StdRng::seed_from_u64(u64::from_le_bytes(first))
}

fn calm_latency(rng: &mut StdRng) -> Duration {
    Duration::from_micros(rng.random_range(1_000..=5_000))
}

fn stormy_latency(rng: &mut StdRng) -> Duration {
    if rng.random_bool(0.02) {
        Duration::from_micros(rng.random_range(150_000..=400_000))
    } else {
        Duration::from_micros(rng.random_range(5_000..=40_000))
    }
}
