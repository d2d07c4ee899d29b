//! `failwell-sim`: a Stripe-like payment provider simulator with seeded,
//! deterministic fault injection, served over HTTP on loopback.
//!
//! It models `POST /v1/charges` with Stripe's `Idempotency-Key` semantics,
//! charge lookups, and faults before commit (500/502/503/429) and after commit
//! (hanging answers, TCP resets) or late (a commit after the client gave up,
//! scripts only), chosen per request by [`planned`] from the seed
//! and [`Profile`], or by a per-reference script. `/_sim/effects` counts what
//! really happened so that clients can be compared ([`Effects::double_effects`]).
//!
//! With [`SimConfig::webhooks`] set, it also delivers webhooks as providers do,
//! at least once: every committed charge emits Stripe-like events, signed with
//! a `Stripe-Signature` header, and [`planned_webhooks`] delays, duplicates
//! (some copies concurrently) and reorders them, deterministically from the
//! seed, so some arrive before the charge's own answer and some after. Events
//! are emitted at the commit, so a charge whose answer hangs or is reset still
//! sends them. Copies answered other than 2xx are redelivered with backoff and
//! counted in [`WebhookStats`]; [`Simulator::wait_webhooks`] waits for the last ones.
//! It deliberately is not a payment processor: no persistence (state is in
//! memory and dies with the simulator), no auth, no customers or refunds, and no
//! CLI (the `failwell` binary wraps [`serve`]).
//!
//! Routes:
//! * `POST /v1/charges` — form or JSON body `amount` (minor units > 0),
//!   `currency` (3 letters), `reference` (non-empty); 200 charge, 402
//!   `card_declined` when `amount % 100 == decline_suffix`, 400 on bad params.
//! * `GET /v1/charges/{id}`, `GET /v1/charges?reference=R` — lookups (latency and
//!   503 when down or in an outage, no other faults).
//! * `GET /_sim/effects`, `PUT /_sim/script/{reference}` (JSON array of [`Fault`]
//!   names), `PUT /_sim/down` (`{"down": bool}`) — control, never faulted.
//!
//! Webhooks sent (`POST` to [`WebhookTarget::url`], `Content-Type:
//! application/json`, `Stripe-Signature: t=<unix s>,v1=<hex>` with a fresh
//! timestamp per delivery): for a succeeded charge `charge.pending` (charge
//! `version` 1, status `pending`) then `charge.succeeded` (version 2); for a
//! declined one `charge.failed` (version 2). Body, byte for byte the same on
//! every delivery of an event:
//! `{"id":"evt_<24 hex>","object":"event","type":"charge.succeeded","created":<unix s>,
//! "data":{"object":{"id":"ch_<24 hex>","object":"charge","status":"succeeded",
//! "reference":"…","amount":1000,"currency":"eur","version":2}}}`. Up to 32
//! deliveries run at once (connect timeout 1 s, total 5 s); a copy is tried
//! at most 6 times, 200 ms, 400 ms, 800 ms, … apart.

mod api;
mod clock;
mod config;
mod handlers;
mod limit;
mod params;
mod reset;
mod server;
mod state;
#[cfg(test)]
mod tests;
mod webhooks;

pub use config::{
    Fault, Profile, SimConfig, UnknownProfile, WebhookPlan, WebhookTarget, planned, planned_webhooks,
};
pub use limit::{RateLimit, RateScope};
pub use server::{Simulator, serve};
pub use state::{Effects, ReferenceEffects};
pub use webhooks::WebhookStats;
