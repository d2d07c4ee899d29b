//! The HTTP client for one provider: sends an operation or a status lookup
//! with explicit timeouts and reduces what happened to facts the policy can
//! classify.
//!
//! It never retries and never decides anything: one call, one
//! [`CallResult`].
//!
//! One timeout model for every call (operations and lookups), with the
//! provider's limits from [`ProviderSpec`]:
//!
//! | limit | measured | on expiry: `kind`, failure |
//! |---|---|---|
//! | `connect` | establishing the connection | `connect`, not sent |
//! | `headers` | from the start of the call to the response headers | `headers_timeout`, after send |
//! | `body_idle` | the longest pause between two body chunks | `body_idle_timeout`, after send |
//! | `total` (or less when the caller's deadline is nearer) | from the start of the call to the last body byte | `timeout`, after send |
//!
//! Every phase ends at the total's deadline at the latest; when a phase's own
//! limit would end at or after that deadline, an expiry is reported as the
//! total (`timeout`), so with the defaults (headers and body idle limits
//! equal to `timeout`) a hanging provider reads `timeout`. A connect taking
//! longer than `headers_timeout` is reported as `headers_timeout` (after
//! send): failwell cannot tell that phase apart, and treating it as possibly
//! sent is the safe side.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use failwell_policy::{
    BreakerConfig, BreakerConfigError, Bulkhead, BulkheadConfigError, CircuitBreaker, DynStore, InProcess,
    Observed, Policy, PolicyError, PolicyService, Rejected, RetryBudget, RetryBudgetConfigError, Throttle,
    ThrottleConfigError, TransportFailure,
};
use failwell_store::Operation;
use rand::Rng;
use reqwest::Url;
use serde_json::Value;
use tower::{Layer, ServiceExt};

use crate::provider::{OperationSpec, ProviderSpec};

/// A provider's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// The body, when it is JSON.
    pub body: Option<Value>,
    /// The parsed `Retry-After` header.
    pub retry_after: Option<Duration>,
}

/// A call that got no complete answer.
#[derive(Clone, Debug, PartialEq)]
pub struct TransportError {
    /// Whether the request can have reached the provider.
    pub failure: TransportFailure,
    /// Short kind: `connect`, `request`, `headers_timeout`,
    /// `body_idle_timeout`, `timeout` (the total), `body`, `reset`.
    pub kind: &'static str,
    /// The error with its causes.
    pub message: String,
}

/// The facts of one HTTP call.
#[derive(Clone, Debug, PartialEq)]
pub struct CallResult {
    /// Start, ms since epoch.
    pub started_at_ms: i64,
    /// Wall time of the call.
    pub duration: Duration,
    /// What came back.
    pub response: Result<Reply, TransportError>,
}

impl CallResult {
    /// Whether the provider answered 2xx.
    pub fn is_success(&self) -> bool {
        matches!(&self.response, Ok(r) if (200..300).contains(&r.status))
    }

    /// The call reduced to what classification needs; `error_code_pointer`
    /// finds the provider's error code in a JSON error body.
    pub fn observed<'a>(&'a self, error_code_pointer: &str) -> Observed<'a> {
        match &self.response {
            Ok(r) => Observed::Response {
                status: r.status,
                error_code: r
                    .body
                    .as_ref()
                    .and_then(|b| b.pointer(error_code_pointer))
                    .and_then(Value::as_str),
                retry_after: r.retry_after,
            },
            Err(e) => Observed::Transport(e.failure),
        }
    }

    /// A call the policy cut short after it may have been sent (its
    /// deadline or timeout): reads as a timeout after sending.
    pub fn cut_short(rejected: &Rejected) -> Self {
        Self {
            started_at_ms: crate::now_ms(),
            duration: Duration::ZERO,
            response: Err(TransportError {
                failure: TransportFailure::AfterSend,
                kind: "timeout",
                message: rejected.to_string(),
            }),
        }
    }

    /// A one-line description for history and logs, e.g. `HTTP 503
    /// (rate_limit)` or `timeout: operation timed out`.
    pub fn describe(&self, error_code_pointer: &str) -> String {
        match &self.response {
            Ok(r) => {
                let code =
                    r.body.as_ref().and_then(|b| b.pointer(error_code_pointer)).and_then(Value::as_str);
                match code {
                    Some(code) => format!("HTTP {} ({code})", r.status),
                    None => format!("HTTP {}", r.status),
                }
            }
            Err(e) => format!("{}: {}", e.kind, e.message),
        }
    }
}

/// All configured providers' clients, by provider name.
pub type Providers = BTreeMap<String, ProviderClient>;

/// Provider descriptions by name, as the configuration gives them; each
/// becomes a [`ProviderClient`] once, when a process starts.
pub type ProviderSpecs = BTreeMap<String, ProviderSpec>;

/// The client for one provider: the HTTP sender behind the provider's
/// resilience policy (bulkhead, then circuit breaker, as
/// `failwell_policy` layers), and the provider's retry budget.
#[derive(Clone)]
pub struct ProviderClient {
    sender: Sender,
    guards: Guards,
    service: PolicyService<Sender, DynStore, CallClassifier>,
}

impl fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderClient")
            .field("spec", &self.sender.spec)
            .field("guards", &self.guards)
            .finish()
    }
}

/// A provider's stateful policies, shared by every clone of its client.
#[derive(Clone, Debug)]
pub struct Guards {
    /// Stops calls while the provider is failing or paused (`None`: no
    /// breaker); its state lives in this process or is shared by a cluster.
    pub breaker: Option<CircuitBreaker<DynStore>>,
    /// Bounds the calls in flight to the provider.
    pub bulkhead: Bulkhead,
    /// Bounds the retries to the provider.
    pub budget: RetryBudget,
    /// Slows the calls down while the provider throttles them (`None`: the
    /// provider's `[throttle]` is off).
    pub throttle: Option<Throttle>,
    /// Transport errors in a row, for [`crate::PauseRule::after_errors`].
    errors_in_a_row: Arc<AtomicU32>,
    /// Time this process paused the provider for, in all, ms.
    paused_ms: Arc<AtomicU64>,
}

impl Guards {
    /// How long this process has paused the provider in all (overlapping
    /// pauses counted once; pauses other processes shared with it not
    /// counted).
    pub fn paused_total(&self) -> Duration {
        Duration::from_millis(self.paused_ms.load(Ordering::Relaxed))
    }

    /// Pauses the provider for `duration` (if it has a breaker, which holds
    /// pauses) and counts the time added to the pause.
    fn pause(&self, duration: Duration) {
        let Some(breaker) = &self.breaker else { return };
        let before = breaker.paused_for().unwrap_or_default();
        breaker.pause(duration);
        let added = breaker.paused_for().unwrap_or_default().saturating_sub(before);
        self.paused_ms.fetch_add(added.as_millis() as u64, Ordering::Relaxed);
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TLS backend could not be initialised.
    #[error("cannot build the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    /// Invalid breaker rules.
    #[error(transparent)]
    Breaker(#[from] BreakerConfigError),
    /// The breaker's store could not be made (e.g. a shared store).
    #[error("breaker store: {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Invalid bulkhead limits.
    #[error(transparent)]
    Bulkhead(#[from] BulkheadConfigError),
    /// Invalid retry budget.
    #[error(transparent)]
    Budget(#[from] RetryBudgetConfigError),
    /// Invalid adaptive-rate parameters.
    #[error(transparent)]
    Throttle(#[from] ThrottleConfigError),
}

/// What became of one attempt of queued work (see
/// [`ProviderClient::attempt`]).
#[derive(Clone, Debug)]
pub enum Attempt {
    /// The call was made (or cut short after it may have been sent).
    Made(CallResult),
    /// Nothing was sent: try again after `wait`, the attempt not spent.
    Deferred {
        /// How long to wait.
        wait: Duration,
        /// Why, for metrics: `retry_budget`, `breaker_open`, `bulkhead_full`
        /// or `throttled`.
        kind: &'static str,
        /// Why, as a sentence starting with `deferred: `.
        reason: String,
    },
}

/// One call to make through the provider's policy.
#[derive(Clone, Debug)]
pub enum CallRequest {
    /// Send an operation, its request made once before the policy's
    /// layers ([`ProviderClient::call`]): what a retry sends again is
    /// these bytes.
    Send {
        /// The operation's HTTP method.
        method: reqwest::Method,
        /// The operation's URL.
        url: Url,
        /// The key for the provider's idempotency header, when the
        /// operation sends one.
        key: Option<String>,
        /// The payload, encoded as the operation says.
        body: bytes::Bytes,
        /// The body's `Content-Type`.
        content_type: &'static str,
        /// The most the attempt may take (the time left before its deadline).
        timeout: Duration,
    },
    /// Look an operation up by our reference (reconciliation).
    Lookup {
        /// Our reference.
        reference: String,
    },
    /// `GET` a read operation's URL with a query string, verbatim.
    Read {
        /// The URL (resolved when the configuration was loaded).
        url: Url,
        /// The query string (without `?`), passed through.
        query: String,
    },
    /// `POST` raw bytes with the given headers (a webhook event forwarded
    /// to the application).
    Deliver {
        /// Path below the base URL.
        path: String,
        /// The request headers.
        headers: reqwest::header::HeaderMap,
        /// The body, sent byte for byte.
        body: Vec<u8>,
        /// The most the attempt may take (the time left before its deadline).
        timeout: Duration,
    },
}

impl ProviderClient {
    /// Builds the client: connection pool with the provider's connect
    /// timeout (the other limits apply per call, see the module table), and
    /// the provider's breaker, bulkhead and retry budget. A breaker probe is
    /// bounded by the attempt's own total timeout (plus a second of slack),
    /// so a probe never ends as anything but a recorded call. Errors when the
    /// TLS backend cannot be initialised or a policy is invalid.
    pub fn new(spec: ProviderSpec) -> Result<Self, ClientError> {
        Self::with_breaker_store(spec, |name, config, _| Ok(DynStore::new(InProcess::new(name, config)?)))
    }

    /// Checks the policies a client of `spec` would be built with (breaker
    /// rules with the probe's timeout, bulkhead, retry budget, adaptive
    /// rate), without building one: no connection pool, no metric series.
    /// Errors: the policy that is invalid, as [`Self::new`] would report it.
    pub fn check(spec: &ProviderSpec) -> Result<(), ClientError> {
        if let Some(config) = &spec.breaker {
            probed(config.clone(), spec).validate()?;
        }
        spec.bulkhead.validate()?;
        spec.retry_budget.validate()?;
        if let Some(throttle) = &spec.throttle {
            throttle.validate()?;
        }
        Ok(())
    }

    /// As [`new`](Self::new), with the breaker's state in the store `make`
    /// builds from the provider's name, breaker rules and adaptive rate
    /// (e.g. a breaker shared by a cluster, which also passes rate cuts
    /// between the processes). Errors as `new`, or with what `make`
    /// returns.
    pub fn with_breaker_store(
        spec: ProviderSpec,
        make: impl FnOnce(&str, BreakerConfig, Option<&Throttle>) -> Result<DynStore, ClientError>,
    ) -> Result<Self, ClientError> {
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(spec.timeouts.connect)
                .pool_idle_timeout(Duration::from_secs(30))
        };
        let http = builder().redirect(reqwest::redirect::Policy::none()).build()?;
        let reads = builder().build()?;
        let throttle = spec.throttle.map(|config| Throttle::new(&spec.name, config)).transpose()?;
        let breaker = spec
            .breaker
            .clone()
            .map(|config| {
                let config = probed(config, &spec);
                config.validate()?;
                make(&spec.name, config, throttle.as_ref()).map(CircuitBreaker::with_store)
            })
            .transpose()?;
        let guards = Guards {
            breaker,
            bulkhead: Bulkhead::new(&spec.name, spec.bulkhead)?,
            budget: RetryBudget::new(&spec.name, spec.retry_budget)?,
            throttle,
            errors_in_a_row: Arc::default(),
            paused_ms: Arc::default(),
        };
        let classify = CallClassifier {
            classifier: spec.classifier.clone(),
            error_code_pointer: spec.error_code_pointer.clone(),
            throttling: spec.throttle.is_some().then(|| spec.pause.clone()),
        };
        let sender = Sender { spec: Arc::new(spec), http, reads };
        let policy = Policy::new()
            .bulkhead(guards.bulkhead.clone())
            .classify(classify)
            .optional_breaker(guards.breaker.clone());
        let service = policy.layer(sender.clone());
        Ok(Self { sender, guards, service })
    }

    /// The provider's description.
    pub fn spec(&self) -> &ProviderSpec {
        &self.sender.spec
    }

    /// The provider's breaker, bulkhead and retry budget.
    pub fn guards(&self) -> &Guards {
        &self.guards
    }

    /// Sends `op` once through the provider's bulkhead and circuit breaker,
    /// with its idempotency key (when the provider takes one) and a total
    /// timeout of `min(timeout, provider timeout)`: the caller passes the
    /// time left before the operation's deadline. Errors with the policy's
    /// [`Rejected`] when the call was not made (breaker open, bulkhead full).
    pub async fn call(
        &self,
        operation: &OperationSpec,
        op: &Operation,
        timeout: Duration,
    ) -> Result<CallResult, Rejected> {
        match sender::send_request(operation, op, timeout) {
            Ok(request) => self.through_policy(request).await,
            Err(unsent) => Ok(unsent),
        }
    }

    /// Looks our reference up at the provider (reconciliation), through the
    /// same bulkhead and breaker as the calls (a provider whose breaker is
    /// open gets no lookups either, but a lookup may be the half-open probe),
    /// under the same limits as a call with the provider's whole `timeout` as
    /// total. `None` when the provider has no lookup configured; errors like
    /// [`call`](Self::call).
    pub async fn lookup(&self, reference: &str) -> Option<Result<CallResult, Rejected>> {
        self.sender.spec.lookup.as_ref()?;
        Some(self.through_policy(CallRequest::Lookup { reference: reference.to_owned() }).await)
    }

    /// `POST`s `body` byte for byte with `headers` to `path` below the base
    /// URL, through the same bulkhead and breaker and under the same limits
    /// as a call, with a total of `min(timeout, provider timeout)`. Errors
    /// like [`call`](Self::call).
    pub async fn deliver(
        &self,
        path: &str,
        headers: reqwest::header::HeaderMap,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<CallResult, Rejected> {
        self.through_policy(CallRequest::Deliver { path: path.to_owned(), headers, body, timeout }).await
    }

    /// Makes one attempt of queued work (`call`, built by
    /// [`call`](Self::call) or [`deliver`](Self::deliver)) under the
    /// provider's retry budget (Finagle's RetryBudget): a `retry` is
    /// withdrawn from the budget before it is sent, and past the budget it
    /// is deferred until the budget's window turns (spread over half the
    /// window, so a backlog of retries does not come back at once); a first
    /// attempt deposits. A call the breaker or bulkhead did not let out is
    /// deferred by [`wait_after`](Self::wait_after) and its withdrawal
    /// refunded; one cut short after it may have been sent reads as a
    /// timeout ([`CallResult::cut_short`]).
    pub async fn attempt(
        &self,
        retry: bool,
        call: impl Future<Output = Result<CallResult, Rejected>>,
    ) -> Attempt {
        let budget = &self.guards.budget;
        if retry && !budget.try_withdraw() {
            let ttl = self.spec().retry_budget.ttl;
            let wait = ttl / 10 + rand::rng().random_range(Duration::ZERO..=ttl / 2);
            let reason = format!("deferred: the retry budget of {:?} is spent", self.spec().name);
            return Attempt::Deferred { wait, kind: "retry_budget", reason };
        }
        let result = match call.await {
            Ok(result) => result,
            Err(rejected) => match self.wait_after(&rejected) {
                Some(wait) => {
                    if retry {
                        budget.refund();
                    }
                    let kind = match rejected {
                        Rejected::BulkheadFull(_) => "bulkhead_full",
                        Rejected::Throttled(_) => "throttled",
                        _ => "breaker_open",
                    };
                    return Attempt::Deferred { wait, kind, reason: format!("deferred: {rejected}") };
                }
                None => CallResult::cut_short(&rejected),
            },
        };
        if !retry {
            budget.deposit();
        }
        Attempt::Made(result)
    }

    /// `GET`s `url` with `query` (without `?`, replacing any query of
    /// `url`), once, through the provider's bulkhead and breaker, under the
    /// same limits as a call. Errors like [`call`](Self::call).
    pub async fn read(&self, url: &Url, query: &str) -> Result<CallResult, Rejected> {
        self.through_policy(CallRequest::Read { url: url.clone(), query: query.to_owned() }).await
    }

    /// Feeds the answer to a call whose turn was booked at `sent_at`
    /// to the adaptive rate, and pauses the provider when `result` asks for
    /// it ([`crate::PauseRule`]): a throttling answer with `Retry-After`
    /// when the rule's `when` says so, or the `after_errors`-th transport
    /// error in a row. Costs one lock with the adaptive rate on, and an
    /// atomic load otherwise, on an ordinary answer.
    fn after_answer(&self, result: &CallResult, sent_at: Option<Duration>) {
        let spec = self.spec();
        let errors = &self.guards.errors_in_a_row;
        match &result.response {
            Ok(reply) => {
                if errors.load(Ordering::Relaxed) != 0 {
                    errors.store(0, Ordering::Relaxed);
                }
                let throttling = spec.pause.is_throttling(reply.status, reply.retry_after.is_some());
                let share = match (&self.guards.throttle, sent_at) {
                    (Some(throttle), Some(sent_at)) => {
                        let observed = throttle.observe(sent_at, throttling);
                        if observed.cut_to.is_some()
                            && let Some(breaker) = &self.guards.breaker
                        {
                            breaker.share_throttle();
                        }
                        Some(observed.throttled_share)
                    }
                    _ => None,
                };
                if throttling
                    && let Some(wait) = reply.retry_after
                    && spec.pause.pauses(share)
                {
                    self.guards.pause(wait.min(spec.retry.max_retry_after()));
                }
            }
            Err(_) => {
                if let Some(throttle) = &self.guards.throttle
                    && let Some(sent_at) = sent_at
                {
                    throttle.observe(sent_at, false);
                }
                if self.guards.breaker.is_some()
                    && let Some(limit) = spec.pause.after_errors
                    && errors.fetch_add(1, Ordering::Relaxed) + 1 >= limit
                {
                    errors.store(0, Ordering::Relaxed);
                    self.guards.pause(spec.pause.duration);
                }
            }
        }
    }

    /// Makes `request` through the policy, after waiting for its turn of the
    /// adaptive rate (at most its `max_wait`; a turn further away is
    /// refused with [`Rejected::Throttled`], nothing sent; a turn a cut
    /// voided while the call waited is booked again).
    async fn through_policy(&self, request: CallRequest) -> Result<CallResult, Rejected> {
        let sent_at = match &self.guards.throttle {
            Some(throttle) => Some(loop {
                let turn = throttle.reserve()?;
                // A turn that is now cannot have been voided by a cut.
                if turn.wait.is_zero() {
                    break turn.booked_at;
                }
                tokio::time::sleep(turn.wait).await;
                if throttle.holds(&turn) {
                    break turn.booked_at;
                }
            }),
            None => None,
        };
        match self.service.clone().oneshot(request).await {
            Ok(result) => {
                self.after_answer(&result, sent_at);
                Ok(result)
            }
            Err(PolicyError::Rejected(rejected)) => Err(rejected),
            Err(PolicyError::Inner(never)) => match never {},
        }
    }
}

/// The breaker rules of `spec` with their probe bounded by the attempt's
/// own total timeout plus a second of slack, so a probe never ends as
/// anything but a recorded call.
fn probed(config: BreakerConfig, spec: &ProviderSpec) -> BreakerConfig {
    BreakerConfig { probe_timeout: spec.timeouts.total + Duration::from_secs(1), ..config }
}

mod sender;

use sender::{CallClassifier, Sender};
#[cfg(test)]
mod tests;
mod waits;
