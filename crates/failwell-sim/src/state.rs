//! Shared simulator state: charges, the idempotency-key store, per-reference
//! counters, fault scripts, down mode and the webhook sender.
//!
//! Every mutation happens under one mutex and no `.await` ever runs while it is
//! held, so check-and-commit is atomic. This file decides *what* is committed and
//! replayed; it deliberately does no sleeping, no HTTP and no fault delivery
//! (see `handlers.rs`, `server.rs` and, for webhooks, `webhooks.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::time::Instant;

use crate::api::{Charge, Reply, derived_id};
use crate::config::{Fault, Profile, SimConfig, lookup_latency, planned};
use crate::limit::Limiter;
use crate::webhooks::{WebhookStats, Webhooks};

/// Counters of what the simulator did, as served by `GET /_sim/effects` and
/// [`crate::Simulator::effects`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// `POST /v1/charges` requests received (all outcomes, replays included).
    pub requests: u64,
    /// Succeeded charges created (the money-moving effects).
    pub charges: u64,
    /// Declined (status `"failed"`) charges created.
    pub declined: u64,
    /// The same counters per `reference` (only requests whose reference parsed).
    pub by_reference: BTreeMap<String, ReferenceEffects>,
    /// Webhook deliveries (all zero without [`crate::SimConfig::webhooks`]).
    pub webhooks: WebhookStats,
    /// Requests (calls and lookups) answered 503 because the provider was
    /// down (down mode or the outage window).
    #[serde(default)]
    pub refused: u64,
    /// Requests (calls and lookups) answered 429: the profile's random
    /// rate-limit faults and the rate-limit mode's refusals.
    #[serde(default)]
    pub rate_limited: u64,
}

/// Per-reference counters inside [`Effects`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ReferenceEffects {
    /// `POST /v1/charges` seen with this reference (also the script index of the next one).
    pub requests: u64,
    /// Succeeded charges created for this reference; more than 1 is a double charge.
    pub effects: u64,
    /// Declined charges created for this reference.
    pub declined: u64,
}

impl Effects {
    /// Number of references with more than one succeeded charge (double effects).
    pub fn double_effects(&self) -> u64 {
        self.by_reference.values().filter(|r| r.effects > 1).count() as u64
    }
}

/// Validated parameters of `POST /v1/charges`; also the idempotency fingerprint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChargeParams {
    /// Minor units, > 0.
    pub amount: u64,
    /// Lowercase, 3 ASCII letters.
    pub currency: String,
    /// Non-empty.
    pub reference: String,
}

/// Outcome of [`SimState::admit`].
#[derive(Debug)]
pub(crate) enum Admission {
    /// Processed now (the charge created, succeeded or declined, and its
    /// answer). If a key was given and `hold` was set, the key stays in flight
    /// until the returned guard is dropped.
    Fresh(Charge, Reply, Option<InFlightGuard>),
    /// The key's stored answer, to be sent with `Idempotent-Replayed: true`.
    Replay(Reply),
    /// Same key, different parameters.
    Reused,
    /// Same key, first request still in flight.
    InUse,
}

#[derive(Debug)]
enum KeyState {
    /// The answer is known but has not been delivered yet.
    InFlight(Reply),
    Completed(Reply),
}

#[derive(Debug)]
struct KeyEntry {
    fingerprint: ChargeParams,
    state: KeyState,
    created_at: Instant,
    serial: u64,
}

/// Which charges `GET /v1/charges` lists (Stripe's parameters).
#[derive(Debug, Default)]
pub(crate) struct ListFilter<'a> {
    /// `reference`: only this reference.
    pub reference: Option<&'a str>,
    /// `created[gte]`: created at or after, Unix seconds.
    pub created_from: Option<u64>,
    /// `created[lt]`: created before, Unix seconds.
    pub created_to: Option<u64>,
    /// `starting_after`: the page after this charge id.
    pub starting_after: Option<&'a str>,
}

#[derive(Default)]
struct Inner {
    effects: Effects,
    charges: Vec<Charge>,
    by_id: HashMap<String, usize>,
    keys: HashMap<String, KeyEntry>,
    scripts: HashMap<String, Vec<Fault>>,
    serial: u64,
}

/// The state shared by all connections of one simulator.
pub(crate) struct SimState {
    pub config: SimConfig,
    /// The sender of [`SimConfig::webhooks`], if set.
    pub webhooks: Option<Arc<Webhooks>>,
    started: Instant,
    /// Drawn at start and mixed into charge (and so event) ids, so a
    /// simulator restarted with the same seed never repeats an id a client
    /// has already stored; faults still depend on the seed alone.
    run: u64,
    down: AtomicBool,
    lookups: AtomicU64,
    /// The rate-limit mode's buckets, if [`SimConfig::rate_limit`] is set.
    limiter: Option<Limiter>,
    inner: Mutex<Inner>,
}

impl SimState {
    /// Fresh state sending webhooks with `webhooks`; the outage window starts now.
    pub fn new(config: SimConfig, webhooks: Option<Arc<Webhooks>>) -> Self {
        SimState {
            webhooks,
            started: Instant::now(),
            run: rand::random(),
            down: AtomicBool::new(false),
            lookups: AtomicU64::new(0),
            limiter: config.rate_limit.clone().map(Limiter::new),
            config,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The rate-limit mode's verdict on a request with `headers`:
    /// `Err(retry_after_secs)` when its bucket is empty (counted as a 429
    /// and, for a charge, as a request). Always `Ok` without the mode.
    pub fn admit_rate(&self, headers: &HeaderMap, charge: bool) -> Result<(), u64> {
        let Some(limiter) = &self.limiter else { return Ok(()) };
        let key = limiter.header().and_then(|h| headers.get(h)).and_then(|v| v.to_str().ok()).unwrap_or("");
        let verdict = limiter.admit(key, Instant::now());
        if verdict.is_err() {
            let mut inner = self.lock();
            inner.effects.rate_limited += 1;
            inner.effects.requests += u64::from(charge);
        }
        verdict
    }

    /// Counts an answer 429 of the profile's random faults.
    pub fn count_rate_limited(&self) {
        self.lock().effects.rate_limited += 1;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated in a
        // way that matters for a simulator; keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one `POST /v1/charges` (and its reference, if any) and returns the
    /// `(fault, latency)` to apply: `script[n]` if scripted (latency still drawn
    /// from the profile), else [`planned`]. Without a reference: `(Ok, zero)`.
    pub fn begin_charge(&self, reference: Option<&str>) -> (Fault, Duration) {
        let mut inner = self.lock();
        inner.effects.requests += 1;
        let Some(reference) = reference else {
            return (Fault::Ok, Duration::ZERO);
        };
        let counters = inner.effects.by_reference.entry(reference.to_owned()).or_default();
        let n = counters.requests;
        counters.requests += 1;
        let scripted = inner.scripts.get(reference).and_then(|s| s.get(n as usize)).copied();
        drop(inner);
        let (fault, latency) = planned(&self.config, reference, n);
        (scripted.unwrap_or(fault), latency)
    }

    /// Latency of the next lookup request.
    pub fn next_lookup_latency(&self) -> Duration {
        lookup_latency(&self.config, self.lookups.fetch_add(1, Ordering::Relaxed))
    }

    /// True while `/v1` must answer 503: down mode, or the outage window of
    /// [`Profile::Outage`].
    pub fn unavailable(&self) -> bool {
        self.down.load(Ordering::SeqCst)
            || (self.config.profile == Profile::Outage && self.started.elapsed() < self.config.outage)
    }

    /// Whether this request must be answered 503 ([`unavailable`](Self::unavailable));
    /// counts it in [`Effects::refused`] when so.
    pub fn refuse(&self) -> bool {
        let refuse = self.unavailable();
        if refuse {
            self.lock().effects.refused += 1;
        }
        refuse
    }

    /// Sets or clears down mode.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Replaces the fault script of `reference` (indexed by its request number).
    pub fn set_script(&self, reference: &str, faults: Vec<Fault>) {
        self.lock().scripts.insert(reference.to_owned(), faults);
    }

    /// Snapshot of the counters.
    pub fn effects(&self) -> Effects {
        let mut effects = self.lock().effects.clone();
        effects.webhooks = self.webhooks.as_ref().map(|w| w.stats()).unwrap_or_default();
        effects
    }

    /// The charge with this id.
    pub fn charge(&self, id: &str) -> Option<Charge> {
        let inner = self.lock();
        inner.by_id.get(id).map(|&i| inner.charges[i].clone())
    }

    /// Charges matching `filter`, oldest first, at most `limit` of them
    /// (all without one), and whether more follow.
    pub fn list(&self, filter: &ListFilter<'_>, limit: Option<usize>) -> (Vec<Charge>, bool) {
        let inner = self.lock();
        let start = match filter.starting_after.and_then(|id| inner.by_id.get(id)) {
            Some(&i) => i + 1,
            None if filter.starting_after.is_some() => inner.charges.len(),
            None => 0,
        };
        let mut matching = inner.charges[start..].iter().filter(|c| {
            filter.reference.is_none_or(|r| c.reference == r)
                && filter.created_from.is_none_or(|from| c.created >= from)
                && filter.created_to.is_none_or(|to| c.created < to)
        });
        let data: Vec<Charge> = matching.by_ref().take(limit.unwrap_or(usize::MAX)).cloned().collect();
        let has_more = matching.next().is_some();
        (data, has_more)
    }

    /// Changes a stored charge's amount and/or status without a trace (no
    /// webhook, no effect counted); the charge as it is now, or `None` when
    /// there is no such charge.
    pub fn tamper(&self, id: &str, amount: Option<u64>, status: Option<&'static str>) -> Option<Charge> {
        let mut inner = self.lock();
        let &i = inner.by_id.get(id)?;
        let charge = &mut inner.charges[i];
        if let Some(amount) = amount {
            charge.amount = amount;
        }
        if let Some(status) = status {
            charge.status = status;
        }
        Some(charge.clone())
    }

    /// Idempotency check and commit, atomically. `hold` keeps a new key in flight
    /// until the returned guard drops (used by post-commit faults).
    pub fn admit(self: &Arc<Self>, key: Option<&str>, params: &ChargeParams, hold: bool) -> Admission {
        let mut inner = self.lock();
        if let Some(key) = key
            && let Some(entry) = inner.keys.get(key)
            && entry.created_at.elapsed() < self.config.key_ttl
        {
            if entry.fingerprint != *params {
                return Admission::Reused;
            }
            return match &entry.state {
                KeyState::InFlight(_) => Admission::InUse,
                KeyState::Completed(reply) => Admission::Replay(reply.clone()),
            };
        }
        let (charge, reply) = self.create_charge(&mut inner, params);
        let Some(key) = key else {
            return Admission::Fresh(charge, reply, None);
        };
        inner.serial += 1;
        let serial = inner.serial;
        let (state, guard) = if hold {
            let guard = InFlightGuard { state: Arc::clone(self), key: key.to_owned(), serial };
            (KeyState::InFlight(reply.clone()), Some(guard))
        } else {
            (KeyState::Completed(reply.clone()), None)
        };
        let entry = KeyEntry { fingerprint: params.clone(), state, created_at: Instant::now(), serial };
        inner.keys.insert(key.to_owned(), entry);
        Admission::Fresh(charge, reply, guard)
    }

    fn create_charge(&self, inner: &mut Inner, params: &ChargeParams) -> (Charge, Reply) {
        let declined = params.amount % 100 == u64::from(self.config.decline_suffix);
        let seq = inner.charges.len() as u64;
        let charge = Charge {
            id: derived_id(
                "ch",
                &[&self.config.seed.to_le_bytes(), &self.run.to_le_bytes(), b"charge", &seq.to_le_bytes()],
            ),
            object: "charge",
            amount: params.amount,
            currency: params.currency.clone(),
            reference: params.reference.clone(),
            status: if declined { "failed" } else { "succeeded" },
            created: crate::clock::unix_secs(),
        };
        let counters = inner.effects.by_reference.entry(params.reference.clone()).or_default();
        if declined {
            counters.declined += 1;
            inner.effects.declined += 1;
        } else {
            counters.effects += 1;
            inner.effects.charges += 1;
        }
        inner.by_id.insert(charge.id.clone(), inner.charges.len());
        let reply = if declined {
            Reply::new(
                StatusCode::PAYMENT_REQUIRED,
                json!({ "error": {
                    "type": "card_error",
                    "code": "card_declined",
                    "message": "Your card was declined.",
                    "charge": charge.id,
                }}),
            )
        } else {
            Reply::new(StatusCode::OK, serde_json::to_value(&charge).unwrap_or_default())
        };
        inner.charges.push(charge.clone());
        (charge, reply)
    }
}

/// Keeps an idempotency key in flight; on drop (answer sent, client gone or
/// connection reset) the key's entry becomes completed with its stored answer.
#[derive(Debug)]
pub(crate) struct InFlightGuard {
    state: Arc<SimState>,
    key: String,
    serial: u64,
}

impl std::fmt::Debug for SimState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimState").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut inner = self.state.lock();
        if let Some(entry) = inner.keys.get_mut(&self.key)
            && entry.serial == self.serial
            && let KeyState::InFlight(reply) = &entry.state
        {
            entry.state = KeyState::Completed(reply.clone());
        }
    }
}
