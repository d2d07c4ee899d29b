//! `failwell-sim`: a Stripe-like payment provider simulator with seeded,
//! deterministic fault injection, served over HTTP on loopback.
//!
//! It models `POST /v1/charges` with Stripe's `Idempotency-Key` semantics,
//! charge lookups, and faults before commit (500/502/503/429) and after commit
//! (hanging answers, TCP resets) or late (a commit after the client gave up,
//! scripts only), chosen per request by [`planned`] from the seed
//! and [`Profile`], or by a per-reference script. `/_sim/effects` counts what
//! really happened so that clients can be compared ([`Effects::double_effects`]).
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

mod api;
mod config;
mod handlers;
mod params;
mod server;
mod state;
#[cfg(test)]
mod tests;

pub use config::{Fault, Profile, SimConfig, UnknownProfile, planned};
pub use server::{Simulator, serve};
pub use state::{Effects, ReferenceEffects};
