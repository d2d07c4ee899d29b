//! Webhook delivery: at a charge's commit, its events are built, signed and
//! `POST`ed to [`WebhookTarget::url`] from spawned tasks, following
//! [`planned_webhooks`] (delays, duplicates, reordering), redelivering refused
//! copies with backoff, and counting everything in [`WebhookStats`].
//!
//! The charge's own answer never waits for a delivery. Which delays and copies
//! an event gets is decided in `config.rs`; this file only carries the plan out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use crate::api::{Charge, Event};
use crate::config::{SimConfig, WebhookTarget, planned_webhooks};

/// Deliveries (`POST`s) in progress at once, at most.
const CONCURRENCY: usize = 32;
/// Tries per copy of an event, the first delivery included.
const TRIES: u32 = 6;
/// Wait before the first redelivery; doubled before each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Connect timeout of one delivery.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Total timeout of one delivery, answer included.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Webhook counters inside [`crate::Effects`]. Events are counted when the
/// charge commits, deliveries as they happen.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct WebhookStats {
    /// Distinct events emitted (2 per succeeded charge, 1 per declined one).
    pub events: u64,
    /// `POST`s attempted: first deliveries, duplicates and redeliveries.
    pub deliveries: u64,
    /// Extra copies planned beyond one per event.
    pub duplicates: u64,
    /// Events planned to arrive after a later event of the same charge
    /// (`charge.pending` after `charge.succeeded`).
    pub reordered: u64,
    /// Deliveries answered other than 2xx or failed in transport (each is
    /// redelivered until its copy runs out of tries).
    pub refused: u64,
    /// Events given up: every copy refused on all its tries, or abandoned
    /// when the simulator stopped.
    pub undelivered: u64,
    /// Events not finished yet (some copy still waiting or being delivered).
    pub in_flight: u64,
}

/// The webhook sender of one simulator.
#[derive(Debug)]
pub(crate) struct Webhooks {
    target: WebhookTarget,
    client: reqwest::Client,
    /// Bounds concurrent deliveries; closed when the simulator stops.
    permits: Semaphore,
    stats: watch::Sender<WebhookStats>,
}

/// The copies of one event still running, and whether one got a 2xx.
struct Copies {
    left: AtomicUsize,
    delivered: AtomicBool,
}

impl Webhooks {
    /// A sender for `target`. Errors when the URL does not parse or the HTTP
    /// client cannot be built.
    pub fn new(target: WebhookTarget) -> std::io::Result<Self> {
        let invalid = |what: &str, err: &dyn std::fmt::Display| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("webhook {what}: {err}"))
        };
        reqwest::Url::parse(&target.url).map_err(|err| invalid("url", &err))?;
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TIMEOUT)
            .no_proxy()
            .build()
            .map_err(|err| invalid("client", &err))?;
        Ok(Webhooks {
            target,
            client,
            permits: Semaphore::new(CONCURRENCY),
            stats: watch::Sender::new(WebhookStats::default()),
        })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> WebhookStats {
        self.stats.borrow().clone()
    }

    /// Emits the events of `charge`, just committed: `charge.pending` (version 1)
    /// and `charge.succeeded` (version 2) for a succeeded charge,
    /// `charge.failed` (version 2) for a declined one. Each copy planned by
    /// [`planned_webhooks`] is delivered by its own task; returns at once.
    pub fn emit(self: &Arc<Self>, config: &SimConfig, charge: &Charge) {
        let plan = planned_webhooks(config, &charge.reference);
        let succeeded = charge.status == "succeeded";
        let events = if succeeded {
            vec![
                (Event::about(config.seed, charge, "charge.pending", "pending", 1), &plan.pending),
                (Event::about(config.seed, charge, "charge.succeeded", "succeeded", 2), &plan.outcome),
            ]
        } else {
            vec![(Event::about(config.seed, charge, "charge.failed", "failed", 2), &plan.outcome)]
        };
        self.stats.send_modify(|stats| {
            stats.events += events.len() as u64;
            stats.in_flight += events.len() as u64;
            stats.duplicates += plan.duplicates(succeeded);
            stats.reordered += u64::from(succeeded && plan.reordered());
        });
        let committed = Instant::now();
        for (event, offsets) in events {
            let body = Bytes::from(serde_json::to_vec(&event).expect("an event serializes to JSON"));
            let copies = Arc::new(Copies { left: AtomicUsize::new(offsets.len()), delivered: false.into() });
            for &offset in offsets {
                let sender = Arc::clone(self);
                tokio::spawn(sender.deliver(body.clone(), Arc::clone(&copies), committed + offset));
            }
        }
    }

    /// True once no event is in flight, false if `timeout` passes first.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let mut stats = self.stats.subscribe();
        let idle = stats.wait_for(|stats| stats.in_flight == 0);
        matches!(tokio::time::timeout(timeout, idle).await, Ok(Ok(_)))
    }

    /// Stops delivering: copies not yet being sent are abandoned.
    pub fn stop(&self) {
        self.permits.close();
    }

    /// Delivers one copy at `at`, then redelivers it with backoff until a 2xx
    /// answer, the last try, or [`Webhooks::stop`].
    async fn deliver(self: Arc<Self>, body: Bytes, copies: Arc<Copies>, at: Instant) {
        tokio::time::sleep_until(at).await;
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=TRIES {
            let Ok(permit) = self.permits.acquire().await else { break };
            let delivered = self.post(&body).await;
            drop(permit);
            self.stats.send_modify(|stats| {
                stats.deliveries += 1;
                stats.refused += u64::from(!delivered);
            });
            if delivered {
                copies.delivered.store(true, Ordering::SeqCst);
                break;
            }
            if attempt < TRIES {
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
        if copies.left.fetch_sub(1, Ordering::SeqCst) == 1 {
            let undelivered = !copies.delivered.load(Ordering::SeqCst);
            self.stats.send_modify(|stats| {
                stats.in_flight -= 1;
                stats.undelivered += u64::from(undelivered);
            });
        }
    }

    /// One signed `POST`; true on a 2xx answer.
    async fn post(&self, body: &Bytes) -> bool {
        let now = crate::clock::unix_secs();
        let signature = failwell_webhook::stripe_signature(&self.target.secret, now, body);
        let sent = self
            .client
            .post(&self.target.url)
            .header(CONTENT_TYPE, "application/json")
            .header("stripe-signature", signature)
            .body(body.clone())
            .send()
            .await;
        match sent {
            Ok(response) => response.status().is_success(),
            Err(err) => {
                tracing::debug!(%err, url = %self.target.url, "webhook delivery failed");
                false
            }
        }
    }
}
