//! Simulator configuration, fault profiles and the deterministic fault and
//! webhook delivery schedules.
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
    /// The TCP connection is reset (RST) before anything is committed: to
    /// the client it looks exactly like [`Fault::ResetAfterCommit`]. Scripts
    /// only; no profile draws it.
    ResetBeforeCommit,
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
    /// Where to deliver webhook events (default `None`: no events are sent).
    /// See [`planned_webhooks`] for how deliveries misbehave.
    pub webhooks: Option<WebhookTarget>,
    /// The rate-limit mode (default `None`: no limit): requests over the
    /// limit get `429` with `Retry-After` before anything else happens to
    /// them (see [`crate::RateLimit`]).
    pub rate_limit: Option<crate::RateLimit>,
}

/// The receiver of the simulator's webhooks.
///
/// For every committed charge the simulator `POST`s Stripe-like events to
/// `url` with `Content-Type: application/json` and a `Stripe-Signature`
/// header (`t=<unix seconds>,v1=<hex>`, see [`failwell_webhook::stripe_signature`])
/// made with `secret` and a fresh timestamp at each delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookTarget {
    /// The full URL events are posted to, e.g. `http://127.0.0.1:8080/webhooks/sim`.
    pub url: String,
    /// The Stripe endpoint secret, `whsec_…`, used literally as the HMAC key.
    pub secret: String,
}

impl SimConfig {
    /// A configuration with the given profile and seed and the documented defaults:
    /// `key_ttl` 24 h, `decline_suffix` 2, `hang` 30 s, `retry_after_secs` 1, `outage` 3 s,
    /// `webhooks` `None` (no events sent), `rate_limit` `None`.
    pub fn new(profile: Profile, seed: u64) -> Self {
        SimConfig {
            profile,
            seed,
            key_ttl: Duration::from_secs(24 * 60 * 60),
            decline_suffix: 2,
            hang: Duration::from_secs(30),
            retry_after_secs: 1,
            outage: Duration::from_secs(3),
            webhooks: None,
            rate_limit: None,
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

/// When the copies of one charge's webhook events are sent, as offsets from
/// its commit. Returned by [`planned_webhooks`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookPlan {
    /// The copies of `charge.pending` (succeeded charges only): 1 to 3
    /// offsets, the original first; a copy is never sent before the original.
    pub pending: Vec<Duration>,
    /// The copies of the final event, `charge.succeeded` or `charge.failed`;
    /// same shape as `pending`.
    pub outcome: Vec<Duration>,
}

impl WebhookPlan {
    /// True when `charge.pending` is planned to arrive after the final event
    /// (its original is sent later than the final event's original).
    pub fn reordered(&self) -> bool {
        self.pending.first() > self.outcome.first()
    }

    /// Extra copies beyond one per event, for a charge that emits
    /// `charge.pending` (`succeeded`) or only the final event.
    pub fn duplicates(&self, succeeded: bool) -> u64 {
        let extra = |copies: &[Duration]| copies.len().saturating_sub(1) as u64;
        extra(&self.outcome) + if succeeded { extra(&self.pending) } else { 0 }
    }
}

/// How the profile delivers the webhook events of a charge for `reference`
/// (see [`WebhookTarget`]); the event sequence itself does not depend on it.
///
/// Per event, `charge.pending` then the final event, the original's delay from
/// the commit is drawn, then whether it is duplicated, then each extra copy:
/// * [`Profile::Calm`]: delay uniform 0–50 ms; 5 % of events are sent twice.
/// * [`Profile::Stormy`] and [`Profile::Outage`]: delay uniform 0–1500 ms, so
///   an event may arrive before or after the charge's own answer and
///   `charge.pending` after `charge.succeeded` about half the time
///   ([`WebhookPlan::reordered`]); 25 % of events are sent 2 or 3 times (even
///   odds).
///
/// An extra copy is sent together with the original (concurrently) half the
/// time, otherwise after it, by a fresh delay drawn from the same range.
/// Copies answered other than 2xx, or failing in transport, are redelivered on
/// their own (200 ms, 400 ms, 800 ms, … apart, 6 tries in all).
///
/// A pure function of `(seed, profile, reference)`: the same hashing as
/// [`planned`], with the reference prefixed by the marker `"\0webhook\0"` and
/// `n` = 0, so one reference's charges share their plan.
pub fn planned_webhooks(config: &SimConfig, reference: &str) -> WebhookPlan {
    let mut rng = schedule_rng(config, &[b"\0webhook\0", reference.as_bytes()].concat(), 0);
    let (max_delay_us, duplicated) = match config.profile {
        Profile::Calm => (50_000, 0.05),
        Profile::Stormy | Profile::Outage => (1_500_000, 0.25),
    };
    let copies = |rng: &mut StdRng| {
        let original = Duration::from_micros(rng.random_range(0..=max_delay_us));
        let count = if !rng.random_bool(duplicated) {
            1
        } else if config.profile == Profile::Calm {
            2
        } else {
            rng.random_range(2..=3)
        };
        let mut offsets = vec![original];
        for _ in 1..count {
            let later = if rng.random_bool(0.5) { 0 } else { rng.random_range(0..=max_delay_us) };
            offsets.push(original + Duration::from_micros(later));
        }
        offsets
    };
    let pending = copies(&mut rng);
    let outcome = copies(&mut rng);
    WebhookPlan { pending, outcome }
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
